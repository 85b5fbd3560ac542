"""PolarisNodeParser: LlamaIndex's NodeParser over the engine's ingestion recipe (engine.recipe).

The nodes are the chunks `polaris index` makes of the same text: the same budget, cuts,
node ids and the same embedded text, which LlamaIndex renders from the node's metadata
(``MetadataMode.EMBED``: the heading-context key alone, then the text). As every door,
the parser cuts the document's text in NFC: a node's ``start_char_idx``/``end_char_idx``
refer to ``unicodedata.normalize("NFC", document.text)``, which is the text itself unless
it was written with combining marks (NFD).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.node_parser import NodeParser
from llama_index.core.node_parser.node_utils import default_id_func
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeRelationship, TextNode
from llama_index.core.utils import get_tqdm_iterable

from .engine.chunk import ChunkedDocument
from .engine.config import PolarisConfig, load_config
from .engine.errors import InputError, ModelError
from .engine.ingest.recipe import CONTEXTS, STRUCTURAL_KEYS, Recipe, make_recipe, node_id
from .engine.text import nfc

logger = logging.getLogger(__name__)
# LlamaIndex's own defaults, set on every node so that its EMBED rendering is the recipe's text
METADATA_TEMPLATE, METADATA_SEPARATOR, TEXT_TEMPLATE = "{key}: {value}", "\n", "{metadata_str}\n\n{content}"


class PolarisNodeParser(NodeParser):
    """Structure-aware Markdown chunks as TextNodes with heading paths and exact offsets.

    Arguments left out come from the merged ``polaris.toml``. Chunks are measured in the
    tokens of the model that will embed them: ``embed_model=`` (a ``PolarisEmbedding``),
    else ``Settings.embed_model`` when it is one, else the configured model's tokenizer
    (read from its files, no ONNX session). For another embedding model pass
    ``count_tokens`` (its tokenizer as ``str -> int``); without it the budget is estimated
    as ``len / 4``, with a warning. ``chunk_size`` is accepted as ``max_chunk_tokens``.
    ``root_dir`` makes absolute ``file_path`` metadata relative to the indexed root, as
    `polaris index` stores it.
    """

    max_chunk_tokens: int = Field(description="Chunk budget in the embedding model's tokens.")
    chunk_overlap_chars: int = Field(description="Characters carried from the previous chunk of a section.")
    min_chunk_chars: int = Field(description="Pieces shorter than this join a neighbour.")
    count_tokens: Optional[Callable[[str], int]] = Field(
        default=None, exclude=True, description="The embedding model's token counter; None: the model's own."
    )
    root_dir: Optional[str] = Field(default=None, description="Root that file_path is made relative to.")
    _config: PolarisConfig = PrivateAttr()
    _embed_model: Any = PrivateAttr(default=None)
    _recipes: Dict[int, Recipe] = PrivateAttr(default_factory=dict)

    def __init__(
        self,
        *,
        max_chunk_tokens: int | None = None,
        chunk_overlap_chars: int | None = None,
        min_chunk_chars: int | None = None,
        config: PolarisConfig | None = None,
        embed_model: Any = None,
        chunk_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        _refuse(kwargs)
        if chunk_size is not None and max_chunk_tokens is not None and chunk_size != max_chunk_tokens:
            raise InputError("chunk_size and max_chunk_tokens are the same setting; pass one.")
        cfg = (config or load_config()).replace(
            max_chunk_tokens=max_chunk_tokens if max_chunk_tokens is not None else chunk_size,
            chunk_overlap_chars=chunk_overlap_chars,
            min_chunk_chars=min_chunk_chars,
        )
        super().__init__(
            max_chunk_tokens=cfg.max_chunk_tokens,
            chunk_overlap_chars=cfg.chunk_overlap_chars,
            min_chunk_chars=cfg.min_chunk_chars,
            **kwargs,
        )
        self._config = cfg
        if embed_model is not None and _embedder_of(embed_model) is None:
            raise InputError(
                f"embed_model must be a PolarisEmbedding, got {type(embed_model).__name__};"
                " for another model pass count_tokens=<its tokenizer as str -> int>."
            )
        self._embed_model = embed_model

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> "PolarisNodeParser":
        """LlamaIndex's usual constructor: the same arguments as ``PolarisNodeParser(...)``."""
        return cls(**kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "PolarisNodeParser"

    @property
    def recipe(self) -> Recipe:
        """The engine recipe these nodes are cut and embedded with (resolved on each call)."""
        embed_model = self._embed_model if self._embed_model is not None else _settings_embed_model()
        key = id(embed_model) if embed_model is not None else 0
        if key not in self._recipes:
            self._recipes[key] = self._make_recipe(embed_model)
        return self._recipes[key]

    def _make_recipe(self, embed_model: Any) -> Recipe:
        cfg = self._config
        if self.max_chunk_tokens != cfg.max_chunk_tokens:  # the field was set after construction
            cfg = cfg.replace(max_chunk_tokens=self.max_chunk_tokens)
        if self.count_tokens is not None:  # another model's tokenizer: its window is not known here
            return make_recipe(cfg, cfg.max_chunk_tokens, self.count_tokens)
        embedder = _embedder_of(embed_model) if embed_model is not None else None
        if embedder is None and embed_model is None:
            embedder, why = _configured_embedder(cfg)
        else:
            why = f"Settings.embed_model is {type(embed_model).__name__}, whose tokenizer Polaris cannot count with"
        if embedder is None:
            logger.warning(
                "PolarisNodeParser: %s, so chunks are measured as len/4 tokens and may exceed the model's window."
                " Pass embed_model=PolarisEmbedding(...) or count_tokens=<the model's tokenizer, str -> int>.", why
            )
            return make_recipe(cfg, cfg.max_chunk_tokens, None)
        return make_recipe(cfg, embedder.max_chunk_tokens, embedder.token_counter, model=embedder.model_id)

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> List[BaseNode]:
        recipe = self.recipe
        out: List[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Chunking"):
            out.extend(self._chunk_nodes(node, recipe))
        return out

    def _postprocess_parsed_nodes(self, nodes: List[BaseNode], parent_doc_map: Dict[str, Document]) -> List[BaseNode]:
        # The base class re-finds each chunk with str.find and re-merges metadata; offsets,
        # metadata and relationships are already exact here (re-fenced code would not be found).
        return nodes

    def _chunk_nodes(self, node: BaseNode, recipe: Recipe) -> List[TextNode]:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        path = node.metadata.get("file_path") or node.metadata.get("file_name")
        title = node.metadata.get("title") or (os.path.basename(path) if path else None)
        doc = recipe.chunk(text, path=path, title=title)
        for warning in doc.warnings:  # what `polaris index` reports for the same file
            logger.warning("PolarisNodeParser: %s: %s", path or node.node_id, warning)
        source = node.as_related_node_info()
        chunks = [self._text_node(node, doc, i, source, recipe) for i in range(len(doc.chunks))]
        if self.include_prev_next_rel:
            infos = [chunk.as_related_node_info() for chunk in chunks]  # each hashes its node: once per node
            for k in range(1, len(chunks)):
                chunks[k - 1].relationships[NodeRelationship.NEXT] = infos[k]
                chunks[k].relationships[NodeRelationship.PREVIOUS] = infos[k - 1].model_copy()
        return chunks

    def _text_node(self, node: BaseNode, doc: ChunkedDocument, i: int, source: Any, recipe: Recipe) -> TextNode:
        span = doc.chunks[i]
        if span.oversize:
            logger.warning("chunk %d of %s is %d tokens, over the %d budget", i, node.node_id, span.token_count,
                           recipe.max_tokens)
        custom_ids = self.id_func is not default_id_func
        metadata = self._metadata(node, doc, i, recipe)
        line = recipe.context_line(span)
        shown = {line[0]} if line is not None and line[0] is not None else set()
        if line is not None and line[0] is not None:
            metadata[line[0]] = line[1] if line[0] != "heading_path" else metadata["heading_path"]
        context_key = CONTEXTS[recipe.context][0]
        hidden_from_llm = [*node.excluded_llm_metadata_keys, *STRUCTURAL_KEYS]
        if context_key not in (None, "heading_path"):
            hidden_from_llm.append(context_key)
        return TextNode(
            id_=self.id_func(i, node) if custom_ids else node_id(node.node_id, i, span),
            text=span.text,
            start_char_idx=span.start,
            end_char_idx=span.end,
            metadata=metadata,
            excluded_embed_metadata_keys=[k for k in metadata if k not in shown],
            excluded_llm_metadata_keys=[k for k in dict.fromkeys(hidden_from_llm) if k in metadata],
            metadata_separator=METADATA_SEPARATOR,
            metadata_template=METADATA_TEMPLATE,
            text_template=TEXT_TEMPLATE,
            relationships={NodeRelationship.SOURCE: source},
        )

    def _metadata(self, node: BaseNode, doc: ChunkedDocument, i: int, recipe: Recipe) -> dict[str, Any]:
        inherited = {**node.metadata, **doc.metadata} if self.include_metadata else {}
        meta = {**inherited, **recipe.chunk_metadata(doc.chunks[i], i)}
        file_path = node.metadata.get("file_path")
        if file_path:
            meta["file_path"] = nfc(self._relative(str(file_path)))  # as `polaris index` keys the file
        return meta

    def _relative(self, file_path: str) -> str:
        if not self.root_dir or not os.path.isabs(file_path):
            return file_path
        relative = os.path.relpath(file_path, self.root_dir)
        return file_path if relative.startswith("..") else relative.replace(os.sep, "/")


def _refuse(kwargs: Dict[str, Any]) -> None:
    """LlamaIndex splitter arguments that mean something else here, refused with what to pass."""
    meaning = {
        "chunk_overlap": "chunk_overlap_chars (Polaris carries characters of the previous chunk, not tokens)",
        "embed_heading_path": "nothing: the embedded text is the engine's recipe, the same for every door",
        "tokenizer": "count_tokens=<str -> int> or embed_model=PolarisEmbedding(...)",
        "separator": "nothing: chunks are cut at headings, then blocks, sentences and words",
        "paragraph_separator": "nothing: chunks are cut at headings, then blocks, sentences and words",
    }
    own = set(NodeParser.model_fields) | set(PolarisNodeParser.model_fields)
    for name in kwargs:
        if name in meaning:
            raise InputError(f"PolarisNodeParser does not take {name}; use {meaning[name]}.")
        if name not in own:
            raise InputError(
                f"PolarisNodeParser does not take {name}; it takes {', '.join(sorted(own | {'chunk_size', 'config', 'embed_model'}))}."
            )


def _embedder_of(embed_model: Any) -> Any:
    """The engine Embedder behind a PolarisEmbedding (None for another class)."""
    embedder = getattr(embed_model, "embedder", None)
    return embedder if embedder is not None and hasattr(embedder, "token_counter") else None


def _settings_embed_model() -> Any:
    """``Settings.embed_model`` if the user set one (reading the property would resolve a default)."""
    from llama_index.core import Settings

    return getattr(Settings, "_embed_model", None)


def _configured_embedder(cfg: PolarisConfig) -> tuple[Any, str]:
    """The configured model's Embedder when its files are here (nothing is downloaded), else why not."""
    from .engine.embed import embedder_from_config, get_model_spec
    from .engine.embed.cache import locate

    try:
        spec = get_model_spec(cfg.model_id)
        if locate(spec, cfg.model_dir, verify=False) is None:
            return None, f"no embed_model was given and {cfg.model_id}'s files are not on this machine"
        return embedder_from_config(cfg), ""
    except ModelError as exc:
        return None, f"no embed_model was given and {cfg.model_id} cannot be loaded ({exc})"
