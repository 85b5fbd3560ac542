"""Indexing: documents in, chunks and vectors out, incrementally and crash-safely.

A document whose content hash is unchanged is skipped; a changed one is re-chunked
and only chunks whose embedded text is new are embedded (vectors are reused by
content hash); a file that disappeared is removed. Each document is committed in
its own transaction and moves through pending, processing, completed or failed, so
an interrupted run leaves every finished document readable and resumes next time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from .config import PolarisConfig
from .errors import ConfigError, InputError
from .ids import node_id_for
from .lock import index_lock
from .sources import SourceFile, index_root, walk
from .store import ChunkRecord, DocumentRecord, ModelBinding, Store, text_hash

if TYPE_CHECKING:
    from .chunk import ChunkedDocument, ChunkSettings, ChunkSpan

EMBED_BATCH_CHUNKS = 32  # chunks gathered across documents before one embedding call


@dataclass
class SourceDocument:
    """A document to index: its id, its text (or how to read it) and where it came from."""

    id: str
    text: str | None = None
    path: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    content_hash: str | None = None
    read: Callable[[], str] | None = None


@dataclass
class IndexReport:
    """What one indexing run did."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    chunks: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """One line for people."""
        return (
            f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, {self.removed} removed,"
            f" {len(self.failed)} failed; {self.chunks_embedded} chunks embedded, {self.chunks_reused} reused"
            f" in {self.seconds:.1f}s"
        )


Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class _Prepared:
    doc: SourceDocument
    chunks: list[ChunkRecord]
    inputs: list[str]  # the text embedded for each chunk
    is_new: bool


def content_hash(data: bytes) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def decode_source(data: bytes, name: str) -> str:
    """UTF-8 text of a file, or InputError saying why it cannot be indexed."""
    if b"\x00" in data[:8192]:
        raise InputError(f"{name}: binary file (contains NUL bytes); only text and Markdown are indexed.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{name}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start});"
            " convert it, e.g. `iconv -f latin1 -t utf-8`."
        ) from None
    return text


def embed_input(span: "ChunkSpan", count_tokens: Callable[[str], int] | None = None, window: int = 0) -> str:
    """The text embedded for a chunk: its parent headings, then its own text.

    The chunk's own heading is already in its text; the parents ("Guide > Auth") tell
    the model where the section sits. With ``count_tokens``, the outermost parents are
    dropped until context and chunk fit in ``window`` tokens together, so nothing is
    silently truncated by the embedder.
    """
    parents = list(span.heading_path[:-1] if span.heading_level else span.heading_path)
    room = window - span.token_count
    while parents and count_tokens is not None and count_tokens(" > ".join(parents)) > room:
        parents.pop(0)
    if not parents:
        return span.text
    return " > ".join(parents) + "\n\n" + span.text


def chunk_budget(config: PolarisConfig, model_max: int) -> int:
    """max_chunk_tokens, capped at the model's window (an explicit larger value is an error)."""
    if config.max_chunk_tokens <= model_max:
        return config.max_chunk_tokens
    if config.sources.get("max_chunk_tokens", "default") != "default":
        raise ConfigError(
            f"{config.sources['max_chunk_tokens']}: 'max_chunk_tokens' is {config.max_chunk_tokens}, but"
            f" {config.model_id} reads at most {model_max} tokens per chunk; the rest would be silently"
            f" truncated. Set max_chunk_tokens <= {model_max}."
        )
    return model_max


class Indexer:
    """Writes documents into a store with one embedder and one chunker configuration."""

    def __init__(
        self,
        store: Store,
        embedder: Any,
        config: PolarisConfig,
        *,
        collection: str = "default",
        progress: Progress | None = None,
        heading_context: bool = True,
        on_wait: Callable[[str], None] | None = None,
        whole_documents: bool = False,
    ) -> None:
        self.store, self.embedder, self.config = store, embedder, config
        self.collection = collection
        self.progress = progress or (lambda stage, done, total: None)
        self.heading_context = heading_context
        self.on_wait = on_wait
        self.whole_documents = whole_documents  # one chunk per document, cut at the window (BEIR/MTEB setup)
        self.window = embedder.max_chunk_tokens
        budget = chunk_budget(config, self.window)
        self.chunker_settings = {
            "max_tokens": budget, "overlap_chars": config.chunk_overlap_chars,
            "min_chars": config.min_chunk_chars, "heading_context": heading_context,
        }
        if whole_documents:
            self.chunker_settings["whole_documents"] = True
        self.settings_key = json.dumps(self.chunker_settings, sort_keys=True)  # as Store.bind_model records it
        store.check_model(self.binding)

    @functools.cached_property
    def settings(self) -> "ChunkSettings":
        """The chunker settings (the chunker is imported on first use: unchanged runs skip it)."""
        from .chunk import ChunkSettings

        return ChunkSettings(
            max_tokens=self.chunker_settings["max_tokens"],
            overlap_chars=self.config.chunk_overlap_chars,
            min_chars=self.config.min_chunk_chars,
            count_tokens=self.embedder.token_counter,
        )

    @property
    def binding(self) -> ModelBinding:
        """The model record this indexer writes."""
        e = self.embedder
        return ModelBinding(e.model_id, e.dim, e.fingerprint, e.spec.doc_prefix, e.spec.query_prefix)

    # -- folders ------------------------------------------------------------------
    def index_paths(self, paths: Sequence[str | Path]) -> IndexReport:
        """Index the Markdown and text files under ``paths``; remove files that are gone."""
        root = index_root(paths)
        with index_lock(self.store.path, self.on_wait):
            files = list(walk(paths, root))
            docs = (self._file_document(f, root) for f in files)
            report = self._index(docs, len(files))
            report.removed += self._remove_missing(root, {f.relpath for f in files})
        return report

    def _file_document(self, f: SourceFile, root: Path) -> SourceDocument:
        limit = self.config.max_file_mb * 1e6

        def read() -> str:
            size = f.path.stat().st_size
            if size > limit:
                raise InputError(
                    f"{f.relpath}: too large ({size / 1e6:.1f} MB > max_file_mb {self.config.max_file_mb:g});"
                    " raise max_file_mb in polaris.toml to index it."
                )
            return decode_source(f.path.read_bytes(), f.relpath)

        meta = {"root": str(root)}
        return SourceDocument(id=f.relpath, path=f.relpath, name=f.path.name, metadata=meta, read=read)

    def _remove_missing(self, root: Path, seen: set[str]) -> int:
        removed = 0
        for doc in self.store.documents(self.collection):
            if doc.metadata.get("root") == str(root) and doc.id not in seen:
                removed += self.store.delete_document(doc.id)
        return removed

    # -- documents ----------------------------------------------------------------
    def index_documents(self, docs: Iterable[SourceDocument], total: int | None = None) -> IndexReport:
        """Index ``docs``: skip unchanged ones, embed only new chunk texts, commit each.

        One indexing run per database at a time: a second one waits (``on_wait`` says so).
        """
        with index_lock(self.store.path, self.on_wait):
            return self._index(docs, total)

    def _index(self, docs: Iterable[SourceDocument], total: int | None) -> IndexReport:
        start = time.perf_counter()
        report = IndexReport()
        self._settings_changed = self.store.meta.get("chunker", self.settings_key) != self.settings_key
        self.store.bind_model(self.binding, **self.chunker_settings)
        existing = {d.id: d for d in self.store.documents()}
        pending: list[_Prepared] = []
        for i, doc in enumerate(docs, start=1):
            item = self._prepare(doc, existing.get(doc.id), report)
            if item is not None:
                pending.append(item)
            if sum(len(p.chunks) for p in pending) >= EMBED_BATCH_CHUNKS:
                self._flush(pending, report)
                pending = []
            self.progress("documents", i, total or i)
        self._flush(pending, report)
        report.seconds = time.perf_counter() - start
        return report

    def _prepare(self, doc: SourceDocument, old: DocumentRecord | None, report: IndexReport) -> _Prepared | None:
        try:
            text = doc.text if doc.text is not None else doc.read()  # type: ignore[misc]
        except FileNotFoundError:
            return None  # deleted mid-run: the removal pass takes it out
        except (OSError, InputError) as exc:
            self._fail(doc, old, _reason(exc), report)
            return None
        doc.content_hash = doc.content_hash or content_hash(text.encode("utf-8", "surrogatepass"))
        if old is not None and self._unchanged(old, doc.content_hash):
            report.unchanged += 1
            return None
        if old is None:  # visible as processing, with no chunks yet
            self.store.put_document(self._document_record(doc, "processing"))
        else:
            self.store.set_status(doc.id, "processing")
        chunks, inputs = self._chunks(doc, text)
        return _Prepared(doc, chunks, inputs, old is None)

    def _unchanged(self, old: DocumentRecord, digest: str) -> bool:
        return (
            old.content_hash == digest
            and old.status == "completed"
            and old.collection == self.collection
            and not self._settings_changed
        )

    def _document_record(self, doc: SourceDocument, status: str, error: str | None = None) -> DocumentRecord:
        return DocumentRecord(
            id=doc.id, path=doc.path, name=doc.name or doc.path or doc.id, collection=self.collection,
            status=status, error=error, content_hash=doc.content_hash if status == "completed" else None,
            metadata=doc.metadata,
        )

    def _chunks(self, doc: SourceDocument, text: str) -> tuple[list[ChunkRecord], list[str]]:
        title = doc.name or doc.path or doc.id
        chunked = self._whole(text, title) if self.whole_documents else self._chunked(doc, text, title)
        doc.metadata = {**chunked.metadata, **doc.metadata}
        base = {k: v for k, v in chunked.metadata.items()}
        if doc.path:
            base["file_path"] = doc.path
        records, inputs = [], []
        for i, span in enumerate(chunked.chunks):
            embedded = embed_input(span, self.embedder.count_tokens, self.window) if self.heading_context else span.text
            meta = {**base, "heading_path": span.heading_path_str, "heading_level": span.heading_level,
                    "chunk_index": i}
            records.append(ChunkRecord(
                node_id=node_id_for(doc.id, i, span.text), text=span.text, ordinal=i,
                heading_path=span.heading_path_str, heading_level=span.heading_level, start_char=span.start,
                end_char=span.end, token_count=span.token_count, metadata=meta, text_hash=text_hash(embedded),
            ))
            inputs.append(embedded)
        return records, inputs

    def _chunked(self, doc: SourceDocument, text: str, title: str) -> "ChunkedDocument":
        from .chunk import chunk_document

        return chunk_document(text, self.settings, path=doc.path, title=title)

    def _whole(self, text: str, title: str) -> "ChunkedDocument":
        """The whole text as one chunk; the embedder reads its first ``window`` tokens."""
        from .chunk import ChunkedDocument, ChunkSpan

        tokens = self.embedder.count_tokens(text)
        span = ChunkSpan(text, 0, len(text), (title,), 1, tokens, tokens > self.window)
        return ChunkedDocument([span], {}, title)

    def _flush(self, pending: list[_Prepared], report: IndexReport) -> None:
        if not pending:
            return
        by_hash = {c.text_hash: t for p in pending for c, t in zip(p.chunks, p.inputs)}
        vectors = self._vectors(by_hash, report)
        for p in pending:
            vecs = np.array([vectors[c.text_hash] for c in p.chunks]) if p.chunks else None
            self.store.upsert_document(self._document_record(p.doc, "completed"), p.chunks, vecs)
            report.added += p.is_new
            report.updated += not p.is_new
            report.chunks += len(p.chunks)

    def _vectors(self, by_hash: dict[str, str], report: IndexReport) -> dict[str, np.ndarray]:
        """Vectors for each embedded text (by hash): stored ones reused, the rest embedded."""
        vectors = self.store.vectors_by_hash(by_hash)
        todo = [h for h in by_hash if h not in vectors]
        report.chunks_reused += len(by_hash) - len(todo)
        if todo:
            embedded = self.embedder.embed_documents([by_hash[h] for h in todo])
            vectors.update(zip(todo, embedded))
            report.chunks_embedded += len(todo)
            self.progress("chunks", report.chunks_embedded, report.chunks_embedded)
        return vectors

    def _fail(self, doc: SourceDocument, old: DocumentRecord | None, reason: str, report: IndexReport) -> None:
        report.failed.append((doc.path or doc.id, reason))
        if old is None:
            self.store.put_document(self._document_record(doc, "failed", reason))
        else:
            self.store.set_status(doc.id, "failed", reason)


def _reason(exc: Exception) -> str:
    if isinstance(exc, InputError):
        return str(exc)
    if isinstance(exc, PermissionError):
        return "permission denied; make the file readable (chmod +r) or exclude it"
    return f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
