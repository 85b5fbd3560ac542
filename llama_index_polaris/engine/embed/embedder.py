"""The Embedder: one model, its prefixes and dimension, a lazily created thread-safe ONNX session."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from ..words.blobs import readable
from ..errors import ConfigError, ModelError
from ..text import clean_text, nfc
from . import cache, wordpiece
from .fingerprint import file_sha256
from .pooling import finish
from .registry import ModelSpec, get_model_spec
from .runtime import Session, Tokenizers, create_session, load_tokenizers, pad_batch, plan_batches

if TYPE_CHECKING:
    from ..chunk.tokens import TokenCounter
    from ..config import PolarisConfig

log = logging.getLogger(__name__)


def resolve_dim(spec: ModelSpec, dim: int | None) -> int:
    """The vector size to produce: the model's default, or a Matryoshka truncation."""
    if dim is None:
        return spec.default_dim
    if dim == spec.native_dim:
        return dim
    if not spec.matryoshka:
        raise ConfigError(
            f"embedding_dim {dim}: model '{spec.id}' is not a Matryoshka model and only produces"
            f" {spec.native_dim} dimensions; remove embedding_dim or set it to {spec.native_dim}."
        )
    if not 0 < dim < spec.native_dim:
        raise ConfigError(f"embedding_dim {dim}: model '{spec.id}' supports 1 to {spec.native_dim} dimensions.")
    return dim


class Embedder:
    """Embeds documents and queries with one model; the prefixes are applied here and nowhere else."""

    def __init__(
        self, spec: ModelSpec, files: cache.ModelFiles, *, dim: int | None = None, threads: int | None = None,
        batch_size: int = 8, fast_start: bool = False,
    ):
        if batch_size < 1:
            raise ConfigError(f"embed_batch_size must be 1 or greater, got {batch_size}.")
        self.spec = spec
        self.model_id = spec.id
        self.dim = resolve_dim(spec, dim)
        self.files = files
        self.threads = threads
        self.batch_size = batch_size
        self.fast_start = fast_start
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._tokenizers: Tokenizers | None = None
        self._wordpiece: wordpiece.QueryTokenizer | None | bool = False  # False: not looked for yet
        self._fingerprint: str | None = None
        self._model_key = (os.path.realpath(files.onnx), self.dim)  # what makes two Embedders' vectors equal

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, dim={self.dim}, source={self.files.source!r})"

    @property
    def fingerprint(self) -> str:
        """sha256 of the ONNX file loaded (memoised on disk by path, size and mtime)."""
        if self._fingerprint is None:
            self._fingerprint = file_sha256(self.files.onnx)
        return self._fingerprint

    @property
    def max_chunk_tokens(self) -> int:
        """The largest chunk that fits the window after special tokens and the document prefix."""
        tok = self._tokenizers_loaded()
        prefix = len(tok.counter.encode(self.spec.doc_prefix, add_special_tokens=False).ids) if self.spec.doc_prefix else 0
        return self.spec.window - tok.n_special - prefix

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by the model's tokenizer: no special tokens, no prefix, no truncation."""
        return self.token_counter(text)

    def known_share(self, text: str) -> float:
        """Share of ``text``'s tokens the model knows (``Tokenizers.known_share``): how much of a
        query its vector can carry (the bundled MiniLM knows 244 Chinese characters)."""
        text = nfc(text)
        fast = self._query_tokenizer()
        share = fast.known_share(text) if fast is not None else None
        return share if share is not None else self._tokenizers_loaded().known_share(text)

    @functools.cached_property
    def token_counter(self) -> "TokenCounter":
        """The model's tokenizer as a chunk budget (batched, with a per-word cache)."""
        from ..chunk.tokens import TokenCounter

        return TokenCounter(self._tokenizers_loaded().counter)

    def embed_documents(self, texts: Iterable[str]) -> np.ndarray:
        """float32 (n, dim) unit vectors of ``texts`` with the document prefix, each read
        without its blobs (``blobs.readable``: a payload or base64 run is never embedded)."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        return self._embed([readable(t) for t in texts], self.spec.doc_prefix)

    def embed_query(self, text: str) -> np.ndarray:
        """float32 (dim,) unit vector of ``text`` with the query prefix (the last few are remembered)."""
        key = (self._model_key, text)
        with _RECENT_LOCK:
            vector = _RECENT_QUERIES.get(key)
            if vector is not None:
                _RECENT_QUERIES.move_to_end(key)
                return vector.copy()
        vector = self._embed([text], self.spec.query_prefix, query=True)[0]
        with _RECENT_LOCK:
            _RECENT_QUERIES[key] = vector
            while len(_RECENT_QUERIES) > RECENT_QUERIES:
                _RECENT_QUERIES.popitem(last=False)
        return vector.copy()

    def _embed(self, texts: Iterable[str], prefix: str, *, query: bool = False) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        prepared = [prefix + clean_text(nfc(t)) for t in texts]
        fast = self._query_tokenizer() if query else None
        encoded = fast.encode(prepared[0]) if fast is not None and len(prepared) == 1 else None
        if encoded is not None:  # an ASCII query: the same ids without parsing tokenizer.json
            encodings, pad_id = [encoded], 0
        else:
            tok = self._tokenizers_loaded()
            encodings, pad_id = tok.encoder.encode_batch(prepared, add_special_tokens=True), tok.pad_id
        session = self._session_loaded()
        for text, enc in zip(texts, encodings):
            if enc.overflowing:
                log.debug("text of %d chars truncated to the %d-token window of %s", len(text), self.spec.window, self.model_id)
        for index in plan_batches([len(e.ids) for e in encodings], self.batch_size):
            feeds = pad_batch([encodings[i] for i in index], pad_id)
            hidden = session.session.run([session.output], {k: v for k, v in feeds.items() if k in session.inputs})[0]
            out[index] = finish(
                hidden, feeds["attention_mask"], pooling=self.spec.pooling, use_layer_norm=self.spec.layer_norm, dim=self.dim
            )
        return out

    def _tokenizers_loaded(self) -> Tokenizers:
        if self._tokenizers is None:
            with self._lock:
                if self._tokenizers is None:
                    self._tokenizers = self._guarded(_shared, _tokenizers_and_wordpiece, self.files.tokenizer, self.spec.window)
        return self._tokenizers

    def _query_tokenizer(self) -> "wordpiece.QueryTokenizer | None":
        """The tokenizer's ASCII query path (``wordpiece``) from the user cache; None without one."""
        if self._wordpiece is False:
            with self._lock:
                if self._wordpiece is False:
                    try:
                        self._wordpiece = _shared(_cached_wordpiece, self.files.tokenizer, self.spec.window)
                    except ModelError:  # an unreadable tokenizer.json: the real one says so
                        self._wordpiece = None
        return self._wordpiece  # type: ignore[return-value]

    def _session_loaded(self) -> Session:
        if self._session is None:
            with self._lock:
                if self._session is None:
                    setting = (self.threads, self.fast_start, self._fingerprint_or_none())
                    self._session = self._guarded(_shared, create_session, self.files.onnx, setting)
        return self._session

    def _fingerprint_or_none(self) -> str | None:
        """The model's sha256, the key of its cached optimised graph (None if unreadable: the
        session then reports the file)."""
        try:
            return self.fingerprint
        except OSError:
            return None

    def _guarded(self, load, *args):
        """Run a loader; a broken file from the cache is removed so the next run fetches it again."""
        try:
            return load(*args)
        except ModelError as exc:
            if self.files.source in ("cache", "download"):
                cache.remove_cache_entry(self.spec, self.files)
                raise ModelError(f"{exc}. The cached copy of '{self.model_id}' was removed; run again to download it afresh.") from exc
            if self.files.source == "bundled" and self.spec.bundled is not None:
                raise ModelError(f"{exc}. Reinstall the bundled model: {self.spec.bundled.install}") from exc
            raise ModelError(f"{exc}. Replace the {self.files.source} file with a good copy of '{self.model_id}'.") from exc


# Query vectors by (model file, dim, text), shared by every Embedder of one model file: a
# query embedded by one door (a LlamaIndex retriever) is checked by another (the store) for free.
RECENT_QUERIES = 256
_RECENT_QUERIES: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
_RECENT_LOCK = threading.Lock()

_EMBEDDERS: dict[tuple, Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()
_LOADED: dict[tuple, object] = {}  # sessions and tokenizers, shared by Embedders of one file
_LOADED_LOCK = threading.Lock()


def _tokenizers_and_wordpiece(path: Path, window: int) -> Tokenizers:
    """``load_tokenizers``, and the query path derived from it kept in the cache if it is not yet
    (or was damaged)."""
    tok = load_tokenizers(path, window)
    try:
        sha = file_sha256(path)
        if wordpiece.load(sha, window) is None:  # none yet, or one damaged: write it (again)
            wordpiece.save(sha, tok.source, tok.encoder, window)
    except OSError as exc:  # the cache cannot be read or written: tokenizers does every query
        log.debug("no query tokenizer for %s: %s", path, exc)
    return tok


def _cached_wordpiece(path: Path, window: int) -> "wordpiece.QueryTokenizer | None":
    try:
        return wordpiece.load(file_sha256(path), window)
    except OSError:
        return None


def _shared(load, path: Path, setting):
    """``load(path, setting)`` once per process for the same file (path, size, mtime) and setting."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror}") from exc
    key = (load.__name__, os.path.realpath(path), st.st_size, st.st_mtime_ns, setting)
    with _LOADED_LOCK:
        if key not in _LOADED:
            _LOADED[key] = load(path, setting)
        return _LOADED[key]


def load_embedder(
    model_id: str,
    *,
    dim: int | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    batch_size: int = 8,
    fast_start: bool = False,
) -> Embedder:
    """The process-wide Embedder for these arguments (the same object for the same arguments).

    Finds or downloads the files now; the ONNX session is created on the first embedding.
    ``fast_start`` is for processes that embed a query or two and exit (`polaris search`):
    one thread, no weight prepacking, the optimised graph from the cache (``runtime.create_session``).
    """
    spec = get_model_spec(model_id)
    key = (model_id, resolve_dim(spec, dim), str(Path(model_dir).resolve()) if model_dir else None, threads,
           batch_size, fast_start)
    with _EMBEDDERS_LOCK:
        embedder = _EMBEDDERS.get(key)
        if embedder is None:
            files = cache.resolve(spec, model_dir)
            embedder = _EMBEDDERS[key] = Embedder(
                spec, files, dim=dim, threads=threads, batch_size=batch_size, fast_start=fast_start
            )
    return embedder


def embedder_from_config(
    cfg: "PolarisConfig",
    model_id: str | None = None,
    *,
    dim: int | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    batch_size: int | None = None,
    fast_start: bool = False,
) -> Embedder:
    """The Embedder the config asks for, every door's one way to get one.

    ``model_id`` overrides the config's model; the config's ``embedding_dim`` and
    ``model_dir`` belong to the configured model and are ignored for another one. The
    keyword arguments, when given, override the config.
    """
    own = model_id is None or model_id == cfg.model_id
    return load_embedder(
        model_id or cfg.model_id,
        dim=dim if dim is not None else (cfg.embedding_dim if own else None),
        model_dir=model_dir if model_dir is not None else (cfg.model_dir if own else None),
        threads=threads if threads is not None else cfg.intra_op_threads,
        batch_size=batch_size if batch_size is not None else cfg.embed_batch_size,
        fast_start=fast_start,
    )


def loaded_sessions() -> int:
    """How many ONNX sessions this process has created (one per model file and setting)."""
    with _LOADED_LOCK:
        return sum(1 for key in _LOADED if key[0] == create_session.__name__)


def clear_embedders() -> None:
    """Forget the process-wide Embedders, sessions and tokenizers (tests; files replaced)."""
    with _EMBEDDERS_LOCK, _LOADED_LOCK, _RECENT_LOCK:
        _EMBEDDERS.clear()
        _LOADED.clear()
        _RECENT_QUERIES.clear()
