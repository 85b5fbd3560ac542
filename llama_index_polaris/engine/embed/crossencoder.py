"""A cross-encoder for the optional re-ranking stage (``search/rerank.py``): one ONNX graph
that reads a (query, passage) pair and gives one logit per pair.

``rerank_model`` in polaris.toml names either a registry entry below (downloaded through
the Hugging Face hub cache like the embedding models, ``cache.resolve``) or a local folder
holding ``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json``. Off by default; no
quality is claimed for it here (these machines cannot download one to measure).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ConfigError, ModelError
from .registry import ModelFile
from .runtime import Session, create_session, pad_batch


@dataclass(frozen=True)
class RerankerSpec:
    """A cross-encoder in a Hugging Face repository (the fields ``cache.resolve`` reads)."""

    id: str
    repo: str
    revision: str
    onnx: ModelFile
    tokenizer: ModelFile
    window: int = 512
    description: str = ""
    size_mb: int = 0
    bundled: None = None

    @property
    def files(self) -> tuple[ModelFile, ModelFile]:
        """The ONNX graph and the tokenizer.json, in that order."""
        return (self.onnx, self.tokenizer)


# Unpinned (revision "main", no sha256): no machine of ours could download it to pin it.
RERANKERS = {
    "ms-marco-minilm-l6-v2": RerankerSpec(
        id="ms-marco-minilm-l6-v2", repo="cross-encoder/ms-marco-MiniLM-L6-v2", revision="main",
        onnx=ModelFile("onnx/model.onnx"), tokenizer=ModelFile("tokenizer.json"), size_mb=91,
        description="MS MARCO MiniLM-L6 cross-encoder (English passages), unpinned",
    ),
}
LOCAL = RerankerSpec(id="local", repo="", revision="", onnx=ModelFile("onnx/model.onnx"),
                     tokenizer=ModelFile("tokenizer.json"))


class CrossEncoder:
    """Scores (query, passage) pairs with one ONNX graph; thread-safe."""

    def __init__(self, onnx: Path, tokenizer: Path, window: int = 512, batch_size: int = 16) -> None:
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise ModelError(f"cannot read tokenizer {tokenizer}: {exc}") from exc
        self.pad_id = (self.tokenizer.padding or {}).get("pad_id", 0)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=window)
        self.session: Session = create_session(onnx, (None, False, None))  # no cached graph: a long-lived reranker
        self.batch_size = batch_size
        self.name = str(onnx)
        self._lock = threading.Lock()

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One logit per passage (higher: more relevant to ``query``), float64."""
        out = np.zeros(len(passages))
        for start in range(0, len(passages), self.batch_size):
            part = passages[start:start + self.batch_size]
            encodings = self.tokenizer.encode_batch([(query, p) for p in part])
            feeds = {k: v for k, v in pad_batch(encodings, self.pad_id).items() if k in self.session.inputs}
            with self._lock:
                logits = self.session.session.run(None, feeds)[0]
            logits = np.asarray(logits, dtype=np.float64).reshape(len(part), -1)
            out[start:start + len(part)] = logits[:, -1]  # one logit, or the "relevant" class of two
        return out


_LOADED: dict[str, CrossEncoder] = {}
_LOAD_LOCK = threading.Lock()


def load_reranker(name: str) -> CrossEncoder:
    """The cross-encoder ``rerank_model`` names (loaded once per process)."""
    with _LOAD_LOCK:
        if name not in _LOADED:
            _LOADED[name] = _load(name)
        return _LOADED[name]


def _load(name: str) -> CrossEncoder:
    from .cache import from_model_dir, resolve

    folder = Path(name).expanduser()
    if folder.is_dir():
        files = from_model_dir(LOCAL, folder)
        return CrossEncoder(files.onnx, files.tokenizer)
    spec = RERANKERS.get(name)
    if spec is None:
        raise ConfigError(f"rerank_model {name!r} is neither a folder holding model.onnx and tokenizer.json nor one"
                          f" of {', '.join(sorted(RERANKERS))}; remove the key to rank without re-ranking.")
    files = resolve(spec)  # type: ignore[arg-type]  # the fields resolve reads
    return CrossEncoder(files.onnx, files.tokenizer, spec.window)
