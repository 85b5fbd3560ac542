"""Indexing: documents in, chunks and vectors out, incrementally and crash-safely.

A document whose content hash is unchanged is skipped; a changed one is re-chunked
and only chunks whose embedded text is new are embedded (vectors are reused by
content hash); a file that disappeared is removed. Each document is committed in
its own transaction and moves through processing to completed or failed, so an
interrupted run leaves every finished document readable and resumes next time. A run
is one ``Store.run``: at its end polaris.db alone holds it (the WAL folded in).

``processing`` means a new version is being written: the document's chunks are replaced,
and it becomes ``completed``, in one transaction, so until then (and after a crash mid-run)
it answers every search at its last committed version (``search.scope``). The next run over
its files finishes each document still ``processing`` (never ``unchanged``).

Each document is reported as it commits (``on_document``, one ``Finished``), not at the
end of the run. A run asked to ``stop`` (a ``threading.Event``) finishes the documents it
has started and reads no more; one interrupted (``KeyboardInterrupt``: a second Ctrl-C)
rolls back the document being written and puts every document it had marked processing
back as it was (a new one is dropped), so no row is left processing by it.

A file is found again by its collection and its path under the collection's root
(``sources.plan_root``), never by the path typed. A file that can no longer be read
keeps its last indexed version, marked ``stale`` with the reason; one that never was
indexed is marked ``failed``. A run removes the files it covered that are gone.

Text is stored in NFC (``text.nfc``): a document's text is normalised before it is hashed
and chunked, so chunk offsets refer to the NFC text, and a file stored from an NFD
spelling by an earlier Polaris counts as changed at the next run and is stored again.

The document's text itself is stored with its chunks (``document_texts``: decoded, BOM
dropped, line ends as in the file, NFC: exactly what the offsets point into), so a section
reads as the file's own slice. A document indexed before texts were kept and unchanged since
gets its text stored by the next run that reaches it (``texts_stored``), nothing re-chunked or
re-embedded: its hash says its chunks were cut from this very text.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from .carry import carry
from ..config import PolarisConfig
from ..errors import InputError, NodeIdError
from .lock import index_lock
from .recipe import DEFAULT_CONTEXT, Recipe, make_recipe, node_id
from .sources import (EXTENSIONS, RootPlan, SourceFile, check_unrooted, covers, ignored_summary, plan_root,
                      read_source, walk)
from ..storage import Storage
from ..storage.records import ChunkRecord, DocumentRecord, ModelBinding, file_document_id, text_hash
from ..text import nfc
from ..storage.vectors import problem, valid_rows

if TYPE_CHECKING:
    from ..chunk import ChunkedDocument

# chunks gathered across documents before one embedding call. Each call commits its documents,
# so this is also how far `polaris watch` and Ctrl-C lag behind; a deeper pool would pad less
# (the embedder length-sorts each call: poetry + typer docs at batch 8, 6.8% of the tokens run
# are padding at 32, 2.5% at 128), but holds the first documents back (#38, docs/benchmarks.md)
EMBED_BATCH_CHUNKS = 32
TEXT_BATCH = 64  # unchanged documents' texts stored in one write (an index made before texts were kept)


@dataclass
class SourceDocument:
    """A document to index: its id, its text (or how to read it) and where it came from.

    A file under a collection root has ``id`` None: it is found by ``path`` instead.
    """

    id: str | None
    text: str | None = None
    path: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    content_hash: str | None = None
    read: Callable[[], str] | None = None
    location: str | None = None  # a file's absolute path (finds a document a door stored by it)


@dataclass
class IndexReport:
    """What one indexing run did."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (path, rule): passed over by design
    root: str | None = None
    root_change: str = ""  # "", "new", "widened" or "moved" (then ``previous_root`` is set)
    previous_root: str | None = None
    nothing_found: bool = False  # a first run that found no file to index (and so set no root)
    chunks: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    texts_stored: int = 0  # unchanged documents indexed before texts were kept, whose text this run stored
    seconds: float = 0.0

    def summary(self) -> str:
        """One line for people."""
        skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
        warned = f", {len({p for p, _ in self.warnings})} with warnings" if self.warnings else ""
        texts = f"; the text of {self.texts_stored} unchanged documents stored" if self.texts_stored else ""
        return (
            f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, {self.removed} removed,"
            f" {len(self.failed)} failed{skipped}{warned}; {self.chunks_embedded} chunks embedded, {self.chunks_reused}"
            f" reused in {self.seconds:.1f}s{texts}"
        )

    def nothing_line(self) -> str | None:
        """What an empty first run ignored and why, for people (None when it found files)."""
        if not self.nothing_found:
            return None
        ignored = ignored_summary(self.ignored) if self.ignored else "no files at all"
        return (
            f"nothing to index: {ignored}. Polaris indexes {', '.join(EXTENSIONS)} files, not hidden ones nor"
            " paths a .gitignore names; symlinks outside the folder need follow_symlinks = true."
            " No root was recorded for the collection."
        )

    def root_line(self) -> str | None:
        """What happened to the collection's root, for people (None when nothing did)."""
        if self.root_change in ("widened", "moved"):
            return f"root {self.root_change}: {self.previous_root} -> {self.root} (nothing re-embedded for that)"
        return None


Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class Finished:
    """One document a run is done with, reported as it commits: ``kind`` is added, updated or
    failed (then ``reason`` says why; its last indexed version, if any, stays)."""

    kind: str
    path: str  # under the collection's root (a document given by id: its id)
    chunks: int = 0
    content_hash: str | None = None
    reason: str | None = None


@dataclass
class _Prepared:
    doc: SourceDocument
    chunks: list[ChunkRecord]
    inputs: list[str]  # the text embedded for each chunk
    is_new: bool
    old: DocumentRecord | None = None  # the document as stored before this run
    text: str | None = None  # the text the chunks were cut from (NFC), stored with them


def content_hash(data: bytes) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def document_hash(text: str) -> str:
    """The content hash stored for a document read from a file: of its text in NFC, so a file
    is unchanged when its text is (``freshness`` compares files on disk by it)."""
    return content_hash(nfc(text).encode("utf-8", "surrogatepass"))


class Indexer:
    """Writes documents into a store with one embedder and one chunker configuration."""

    def __init__(
        self,
        store: Storage,
        embedder: Any,
        config: PolarisConfig,
        *,
        collection: str = "default",
        progress: Progress | None = None,
        heading_context: str = DEFAULT_CONTEXT,
        on_wait: Callable[[str], None] | None = None,
        whole_documents: bool = False,
        on_document: Callable[[Finished], None] | None = None,
        stop: Any = None,
    ) -> None:
        self.store, self.embedder, self.config = store, embedder, config
        self.collection = nfc(collection)
        self.progress = progress or (lambda stage, done, total: None)
        self.on_wait = on_wait
        self.on_document = on_document or (lambda finished: None)
        self.stop = stop  # a threading.Event: when set, the run finishes what it started and stops
        self.whole_documents = whole_documents  # one chunk per document, cut at the window (BEIR/MTEB setup)
        self.window = embedder.max_chunk_tokens
        self._heading_context = heading_context
        self.chunker_settings = dict(make_recipe(config, self.window, None, heading_context, embedder.model_id).key)
        if whole_documents:
            self.chunker_settings["whole_documents"] = True
        self.settings_key = json.dumps(self.chunker_settings, sort_keys=True)  # as Store.bind_model records it
        store.check_model(self.binding)

    @functools.cached_property
    def recipe(self) -> Recipe:
        """The engine's ingestion recipe with this model's tokenizer (loaded on first use)."""
        return make_recipe(
            self.config, self.window, self.embedder.token_counter, self._heading_context, self.embedder.model_id
        )

    @property
    def binding(self) -> ModelBinding:
        """The model record this indexer writes."""
        e = self.embedder
        return ModelBinding(e.model_id, e.dim, e.fingerprint, e.spec.doc_prefix, e.spec.query_prefix)

    # -- folders ------------------------------------------------------------------
    def index_paths(self, paths: Sequence[str | Path]) -> IndexReport:
        """Index the Markdown and text files under ``paths``; remove the files there that are gone.

        Paths are taken relative to the collection's root (set by its first run, widened
        by a run over a parent folder, moved when the old root is gone from disk).
        """
        with self.store.writer_lock(self.on_wait), self.store.run():
            plan = plan_root(self.store.collection_root(self.collection), paths, self.collection)
            if plan.change == "new":  # documents already here came through a door that recorded no root
                check_unrooted(plan.root, list(self.store.files(self.collection)), self.collection)
            report = IndexReport()
            found = walk(paths, plan.root, self.config.follow_symlinks)
            report.skipped, report.ignored = found.skipped, found.ignored
            if not found.files and plan.change == "new":  # nothing here: the collection gets no root from it
                report.nothing_found = True
                self.store.add_collection(self.collection)  # but it exists, empty: a scope to it answers []
                return report
            self._set_root(plan, report)
            self._vanished: set[str] = set()
            docs = (self._file_document(f) for f in found.files)
            self._index(docs, len(found.files), report)
            present = {f.relpath for f in found.files} - self._vanished  # those not reached (stop) stay
            scope = [Path(p).absolute() for p in paths]
            report.removed += self._remove_missing(plan.root, scope, present, found.unlisted)
        return report

    def _set_root(self, plan: RootPlan, report: IndexReport) -> None:
        report.root, report.root_change = str(plan.root), plan.change
        report.previous_root = str(plan.previous) if plan.previous else None
        if not plan.change:
            return
        renames = {p: plan.rename(p) for p in self.store.files(self.collection)} if plan.change == "widened" else {}
        self.store.set_collection_root(self.collection, str(plan.root), renames)

    def _file_document(self, f: SourceFile) -> SourceDocument:
        limit = self.config.max_file_mb * 1e6
        return SourceDocument(
            id=None, path=f.relpath, name=f.path.name, metadata={"file_path": f.relpath},
            read=lambda: read_source(f.path, f.relpath, limit), location=nfc(str(f.path)),
        )

    def _remove_missing(self, root: Path, scope: list[Path], present: set[str], unlisted: list[Path]) -> int:
        """Remove the files of this collection under ``scope`` that this run did not find (those
        under a folder it could not list are kept: it did not look for them)."""
        scope = [_resolve_parent(p) for p in scope]
        gone = [
            doc.id for path, doc in self.store.files(self.collection).items()
            if path not in present and covers(scope, root, path) and not covers(unlisted, root, path)
        ]
        return self.store.delete_documents(gone) if gone else 0

    # -- documents ----------------------------------------------------------------
    def index_documents(self, docs: Iterable[SourceDocument], total: int | None = None) -> IndexReport:
        """Index ``docs``: skip unchanged ones, embed only new chunk texts, commit each.

        One indexing run per database at a time: a second one waits (``on_wait`` says so).
        """
        with self.store.writer_lock(self.on_wait), self.store.run():
            return self._index(docs, total)

    def _index(self, docs: Iterable[SourceDocument], total: int | None, report: IndexReport | None = None) -> IndexReport:
        start = time.perf_counter()
        report = report if report is not None else IndexReport()
        self._settings_changed = self.store.meta.get("chunker", self.settings_key) != self.settings_key
        self.store.bind_model(self.binding, **self.chunker_settings)
        by_id = {d.id: d for d in self.store.documents()}
        files = self.store.files(self.collection)
        located = {d.path: d for d in self.store.documents(self.collection) if d.path and Path(d.path).is_absolute()}
        self._unfinished: dict[str, DocumentRecord | None] = {}  # marked processing, not yet written
        self._texts: list[tuple[str, str, str]] = []  # unchanged documents whose text is not stored yet
        pending: list[_Prepared] = []
        try:
            for i, doc in enumerate(docs, start=1):
                if self.stop is not None and self.stop.is_set():
                    break
                old = (by_id.get(doc.id) if doc.id is not None
                       else files.get(doc.path or "") or located.get(doc.location))
                if doc.id is None:  # a file: its stored key, else the key a new file gets
                    doc.id = old.id if old is not None else file_document_id(self.collection, doc.path or "")
                item = self._prepare(doc, old, report)
                if item is not None:
                    pending.append(item)
                if sum(len(p.chunks) for p in pending) >= EMBED_BATCH_CHUNKS:
                    self._flush(pending, report)
                    pending = []
                if len(self._texts) >= TEXT_BATCH:
                    self._store_texts(report)
                self.progress("documents", i, total or i)
            self._flush(pending, report)
            self._store_texts(report)
        except BaseException:
            self._put_back()
            raise
        report.seconds = time.perf_counter() - start
        return report

    def _put_back(self) -> None:
        """The documents this run marked processing and did not write go back as they were: a new
        one is dropped, another gets its last status (its last version never stopped answering)."""
        with contextlib.suppress(Exception):  # no new connection: the next run finishes them
            self.store.after_interrupt()
        for doc_id, old in self._unfinished.items():
            try:
                now = self.store.get_document(doc_id)
                if now is None or now.status != "processing":
                    continue
                if old is None:
                    self.store.delete_documents([doc_id])
                else:
                    self.store.set_status(doc_id, old.status, old.error)
            except Exception:  # a connection lost with the interrupt: the next run finishes it
                break

    def _prepare(self, doc: SourceDocument, old: DocumentRecord | None, report: IndexReport) -> _Prepared | None:
        try:
            text = doc.text if doc.text is not None else doc.read()  # type: ignore[misc]
        except FileNotFoundError:
            if doc.path:
                self._vanished.add(doc.path)  # deleted mid-run: the removal pass takes it out
            return None
        except (OSError, InputError) as exc:
            self._fail(doc, old, _reason(exc), report)
            return None
        text = nfc(text)  # offsets, hashes and chunks are of the NFC text
        doc.content_hash = doc.content_hash or document_hash(text)
        if old is not None and self._unchanged(old, doc.content_hash):
            report.unchanged += 1
            if not old.text_stored:  # indexed before texts were kept: its chunks were cut from this text
                self._texts.append((old.id, doc.content_hash, text))
            return None
        self._unfinished[doc.id] = old
        if old is None:  # visible as processing, with no chunks yet
            self.store.put_document(self._document_record(doc, "processing"))
        else:
            self.store.set_status(doc.id, "processing")
        chunks, inputs = self._chunks(doc, text, report)
        if old is not None:  # what another door stored on it stays (engine.carry)
            chunks = carry(self.store.get_chunks(document_id=old.id), chunks, old.metadata, doc.metadata)
        return _Prepared(doc, chunks, inputs, old is None, old, text)

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

    def _chunks(self, doc: SourceDocument, text: str, report: IndexReport) -> tuple[list[ChunkRecord], list[str]]:
        """The document's chunks and the text embedded for each; its front matter goes on the document."""
        title = doc.name or doc.path or doc.id
        title = nfc(title) if title else title  # a file's name heads its preamble: NFC, as its text
        chunked = self._whole(text, title) if self.whole_documents else self._chunked(doc, text, title)
        report.warnings += [(doc.path or doc.id or "", w) for w in chunked.warnings]
        doc.metadata = {**chunked.metadata, **doc.metadata}
        records, inputs = [], []
        for i, span in enumerate(chunked.chunks):
            embedded = self.recipe.embed_text(span)
            records.append(ChunkRecord(
                node_id=node_id(doc.id or "", i, span), text=span.text, ordinal=i,
                heading_path=span.heading_path_str, heading_level=span.heading_level, start_char=span.start,
                end_char=span.end, token_count=span.token_count, metadata=self.recipe.chunk_metadata(span, i),
                text_hash=text_hash(embedded),
            ))
            inputs.append(embedded)
        return records, inputs

    def _chunked(self, doc: SourceDocument, text: str, title: str) -> "ChunkedDocument":
        return self.recipe.chunk(text, path=doc.path, title=title)

    def _whole(self, text: str, title: str) -> "ChunkedDocument":
        """The whole text as one chunk; the embedder reads its first ``window`` tokens."""
        from ..chunk import ChunkedDocument, ChunkSpan

        tokens = self.embedder.count_tokens(text)
        span = ChunkSpan(text, 0, len(text), (title,), 1, tokens, tokens > self.window)
        return ChunkedDocument([span], {}, title)

    def _flush(self, pending: list[_Prepared], report: IndexReport) -> None:
        if not pending:
            return
        by_hash = {c.text_hash: t for p in pending for c, t in zip(p.chunks, p.inputs)}
        vectors = self._vectors(by_hash, report)
        with self.store.batch():  # one update of the BM25 posting lists for the batch
            for p in pending:
                vecs = np.array([vectors[c.text_hash] for c in p.chunks]) if p.chunks else None
                reason = self._bad_vector(p, vecs)
                try:
                    if reason is None:
                        self.store.upsert_document(self._document_record(p.doc, "completed"), p.chunks, vecs, p.text)
                except NodeIdError as exc:
                    reason = str(exc)
                if reason is not None:  # nothing of it written: its last indexed version stays
                    self._fail(p.doc, p.old, reason, report)
                    continue
                self._unfinished.pop(p.doc.id, None)
                report.added += p.is_new
                report.updated += not p.is_new
                report.chunks += len(p.chunks)
                self.on_document(Finished("added" if p.is_new else "updated", p.doc.path or p.doc.id or "",
                                          len(p.chunks), p.doc.content_hash))

    def _store_texts(self, report: IndexReport) -> None:
        if self._texts:
            report.texts_stored += self.store.store_texts(self._texts)
            self._texts = []

    def _bad_vector(self, p: _Prepared, vecs: np.ndarray | None) -> str | None:
        """Why the model's vectors for ``p`` cannot be stored (``vectors.problem``), or None."""
        if vecs is None:
            return None
        bad = np.flatnonzero(~valid_rows(vecs))
        if not len(bad):
            return None
        chunk = p.chunks[int(bad[0])]
        return (
            f"{self.embedder.model_id} returned an embedding that {problem(vecs[bad[0]])} for chunk"
            f" {chunk.ordinal + 1} ({chunk.heading_path or 'no heading'}), so the file was not stored. The model"
            " file may be damaged (`polaris models` says where it is) or this text upsets it; try another model_id."
        )

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
        """Record a document that cannot be read: its last good version stays, marked stale."""
        reason = unprefixed(reason, doc.path)
        report.failed.append((doc.path or doc.id or "", reason))
        if old is None:
            self.store.put_document(self._document_record(doc, "failed", reason))
        elif self._serves_a_version(old):
            self.store.set_status(old.id, "stale", f"re-index failed, serving the version of {old.updated_at}: {reason}")
        else:
            self.store.set_status(old.id, "failed", reason)
        self._unfinished.pop(doc.id or "", None)
        self.on_document(Finished("failed", doc.path or doc.id or "", reason=reason))

    def _serves_a_version(self, old: DocumentRecord) -> bool:
        """True when ``old`` holds a committed version: completed or stale, or left processing by a
        run that stopped mid-document after an earlier one had stored it (it has chunks)."""
        if old.status in ("completed", "stale"):
            return True
        return old.status == "processing" and bool(self.store.get_chunks(document_id=old.id))


def _resolve_parent(path: Path) -> Path:
    """``path`` with its folders resolved (the name of a symlinked file kept), as the walk sees it."""
    return path.parent.resolve() / path.name if path.is_symlink() and not path.is_dir() else path.resolve()


def unprefixed(reason: str, path: str | None) -> str:
    """``reason`` without a leading ``path: `` (an error that names its file): every report of a
    failed file puts its path first already."""
    return reason[len(path) + 2:] if path and reason.startswith(f"{path}: ") else reason


def _reason(exc: Exception) -> str:
    if isinstance(exc, InputError):
        return str(exc)
    if isinstance(exc, PermissionError):
        return "permission denied; make the file readable (chmod +r) or exclude it"
    return f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
