"""The store: documents, chunks and their vectors in one SQLite file.

Every write is one transaction: a crash leaves the previous state readable. Vectors
are little-endian float32 blobs in ``chunks.embedding``; triggers copy them into the
vec0 table ``chunks_vec`` and the text into the FTS5 table ``chunks_fts``.

Text is stored in NFC (``text.nfc``), whichever door wrote it: chunk text and heading
paths, document paths and names, collection names (a collection named in a read or a
delete is looked up in NFC too). Ids (document ids, node ids) are keys, kept as given.

Write runs (#24). Writes are grouped into runs (``Store.run``; a write outside one is a run
of its own). A run ends by folding the WAL into the file (``db.checkpoint``), so that
``polaris.db`` alone holds it, and, where the SQLite cannot erase text from FTS5 as it
deletes it (before 3.42), by merging chunks_fts when the run removed any. What is
removed is gone from the file: rows and pages are zeroed (``secure_delete``), FTS5 and
sqlite-vec drop the deleted entries, the posting lists drop terms no chunk holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from . import db
from . import vectors as vectors_module
from .db.schema import (
    CHUNKS_WITH_DOCUMENTS, DEFAULT_COLLECTION, MERGED_METADATA, SECURE_FTS_SQLITE, cjk_columns, file_document_id,
    fts_is_secure, get_meta, has_table, purge_fts, set_meta, sqlite_version, transaction,
)
from .config import SETTINGS_BY_NAME
from .records import (  # noqa: F401  (the records are the contract's; names kept importable from here)
    UNKNOWN_MODEL, ChunkRecord, DocumentRecord, ModelBinding, _check_unique, _check_unique_across, check_committable,
    check_status, from_blob, is_relative_path, mismatch_message, normal_document, normal_chunk, text_hash, to_blob,
    unknown_model_message,
)
from .errors import ConfigError, DatabaseError, InputError, ModelMismatchError, NodeIdError
from .ids import node_id_for
from .db import postings
from .tokenize import Tokenizer
from .search import bm25 as fts, postings as search_postings, vector as vector_search
from .search.filters import Filter, filter_sql
from .search.scope import Scope, resolve_scope
from . import documents as documents_module
from .documents import document_records, files_of
from .search.names import collections_named
from .text import is_valid, nfc, storable, storable_value

DEFAULT_FTS_TOKENIZER = SETTINGS_BY_NAME["fts_tokenizer"].default


class Store:
    """The SQLite backend of the storage contract (``storage.py``): read and write polaris.db. Thread-safe; one writer at a time per file (SQLite's lock).

    ``fts_tokenizer``: None keeps the tokenizer the file was built with (a new file gets
    ``DEFAULT_FTS_TOKENIZER``); a different explicit value rebuilds ``chunks_fts``.
    ``readonly=None``: write when this process can write the file, else read it and say
    why at the first write (a read-only folder, a read-only file: ``db.write_problem``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = False,
        fts_tokenizer: str | None = None,
    ) -> None:
        self.path = str(path)
        self.kind = "sqlite"
        self.readonly_reason: str | None = None
        if readonly is None:
            self.readonly_reason = _read_only_reason(self.path)
            readonly = self.readonly_reason is not None
        self.readonly = readonly
        self._lock = threading.RLock()
        self._tokenizer: Tokenizer | None = None
        self._batched = 0
        self._proven: ModelBinding | None = None  # proven on a file this process cannot write (see record_proof)
        self._runs = 0
        self._erased = False  # this run removed or replaced chunk text
        self._folded = True  # the last checkpoint emptied the WAL
        if fts_tokenizer is not None:
            problem = SETTINGS_BY_NAME["fts_tokenizer"].check(fts_tokenizer)
            if problem:
                raise ConfigError(f"'fts_tokenizer' {problem}, got {fts_tokenizer!r}.")
        self.conn = db.connect(path, readonly=readonly)
        try:
            if readonly:
                self._check_readable()
            else:
                if db.migrate(self.conn, fts_tokenizer or DEFAULT_FTS_TOKENIZER):
                    self._checkpoint()
                if fts_tokenizer is not None:
                    self._sync_fts_tokenizer(fts_tokenizer)
            self._check_fts_format()
        except BaseException:
            self.conn.close()
            raise

    # -- lifecycle -------------------------------------------------------------
    def after_interrupt(self) -> None:
        """After a KeyboardInterrupt: nothing to do (SQLite rolled the statement back)."""

    def close(self) -> None:
        """Close the connection (after any statement another thread is running on it); a writer
        whose last checkpoint was held back by a reader tries once more first."""
        with self._lock:
            if not self.readonly and not self._folded:
                with contextlib.suppress(Exception):  # closing must not fail; the WAL stays valid
                    self._checkpoint()
            self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_readable(self) -> None:
        version = db.schema_version(self.conn)
        if version == 0 or not has_table(self.conn, "chunks"):
            raise DatabaseError(f"{self.path} is not a Polaris index (no Polaris tables). Build one with `polaris index PATH`.")
        if version > db.SCHEMA_VERSION:
            raise DatabaseError(f"{self.path} has schema version {version}, newer than this Polaris; upgrade Polaris.")
        if version < db.SCHEMA_VERSION:
            blocked = None if self.path == db.MEMORY else db.write_problem(Path(self.path))
            raise DatabaseError(
                f"{self.path} has schema version {version}, older than this Polaris ({db.SCHEMA_VERSION})"
                f" and was opened read-only; upgrade it with `polaris status --db {self.path}` (or any"
                " command that writes to it), which needs write access to the file and its folder"
                + (f", which it does not have here: {blocked}" if blocked else ".")
            )

    def _check_fts_format(self) -> None:
        """Refuse, with the cure, a full-text index this SQLite cannot read (FTS5 secure-delete
        needs 3.42+): its searches would otherwise find nothing by keyword, silently."""
        version = sqlite_version(self.conn)
        if version >= SECURE_FTS_SQLITE or not has_table(self.conn, "chunks_fts"):
            return
        if fts_is_secure(self.conn):
            raise DatabaseError(
                f"{self.path} was written by SQLite 3.42 or later (its full-text index erases deleted"
                f" words), and this Python's SQLite is {'.'.join(map(str, version))}, which cannot read it;"
                " `pip install pysqlite3-binary` (Polaris then uses it) or use a newer Python."
            )

    def _sync_fts_tokenizer(self, tokenizer: str) -> None:
        if get_meta(self.conn).get("fts_tokenizer", tokenizer) != tokenizer:
            with self._write():
                db.rebuild_fts(self.conn, tokenizer)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        if self.readonly:
            raise DatabaseError(self.readonly_reason or f"{self.path} was opened read-only.")
        with self.run():
            with _LockedTransaction(self._lock, self.conn, transaction(self.conn, before_commit=self._flush)) as conn:
                yield conn

    def _flush(self, conn: Any) -> None:
        """Derived tables that triggers cannot keep (BM25 posting lists) brought up to date."""
        if not self._batched and has_table(conn, "chunks_bm25"):
            if conn.execute(f"SELECT 1 FROM {postings.DIRTY} WHERE counted = 1 LIMIT 1").fetchone():
                self._erased = True  # a chunk's counted text was deleted or replaced
            postings.flush(conn, self.tokenizer())

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """``with store.run():`` the writes inside are one run (runs nest; the outermost counts).

        At its end the WAL is folded into the file (``db.checkpoint``: a copy of polaris.db
        alone, a backup or a sync tool then has the whole run) and, where FTS5 cannot erase
        as it deletes, the full-text index is merged if the run removed text."""
        if self.readonly:
            yield
            return
        with self._lock:
            self._runs += 1
        try:
            yield
        except BaseException:
            with self._lock:
                self._runs -= 1
                if not self._runs:
                    with contextlib.suppress(Exception):  # what was committed stays valid in the WAL
                        self._end_run()
            raise
        with self._lock:
            self._runs -= 1
            if not self._runs:
                self._end_run()

    def _end_run(self) -> None:
        erased, self._erased = self._erased, False
        if erased and not fts_is_secure(self.conn):
            with _LockedTransaction(self._lock, self.conn, transaction(self.conn)):
                purge_fts(self.conn)
        self._checkpoint()

    def _checkpoint(self) -> None:
        self._folded = db.checkpoint(self.conn).complete

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """A consistent copy of the index at ``dest`` (a new file, or a folder to put it in; the
        index may be in use meanwhile), written by ``VACUUM INTO``: compact, one file with no
        WAL and no free pages, checked before it takes its name. Returns its path."""
        target = Path(dest)
        if target.is_dir():
            target = target / Path(self.path).name
        if target.exists():
            raise InputError(f"{target} already exists; name a new file (a backup never overwrites).")
        if not target.parent.is_dir():
            raise InputError(f"{target}: directory {target.parent} does not exist.")
        partial = target.with_name(f".{target.name}.partial")
        partial.unlink(missing_ok=True)
        try:
            with self._lock:
                version = self.conn.execute("PRAGMA data_version").fetchone()[0]
                counts = self.counts()
                self.conn.execute("VACUUM INTO ?", (str(partial),))  # one snapshot, in rollback-journal mode
                unchanged = self.conn.execute("PRAGMA data_version").fetchone()[0] == version
            _check_copy(partial, counts if unchanged else None)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """``with store.batch():`` the writes inside update the BM25 posting lists once, at the end
        (a write that changes many chunks costs less than many small ones; meanwhile readers
        score with FTS5 alone, exactly). Each write still commits on its own."""
        self._batched += 1
        try:
            yield
        except BaseException:
            self._batched -= 1
            with contextlib.suppress(Exception):  # the lists catch up at the next write if this fails
                self._end_batch()
            raise
        self._batched -= 1
        self._end_batch()

    def _end_batch(self) -> None:
        if not self._batched and not self.readonly:
            with self._write():
                pass  # the flush runs before COMMIT

    def tokenizer(self) -> Tokenizer:
        """The index's FTS5 tokenizer, on a private in-memory connection (made once per tokenizer)."""
        name = postings.fts_tokenizer(self.conn)
        if self._tokenizer is None or self._tokenizer.tokenizer != name:
            self._tokenizer = Tokenizer(name)
        return self._tokenizer

    def read(self) -> Any:
        """``with store.read() as conn:`` one consistent snapshot, the store's lock held."""
        return _LockedTransaction(self._lock, self.conn, transaction(self.conn, "BEGIN"))

    def writer_lock(self, on_wait: Any = None) -> Any:
        """``with store.writer_lock():`` one `polaris index` run at a time (a lock file beside the index)."""
        from .lock import index_lock

        return index_lock(self.path, on_wait)

    def vector_report(self) -> dict[str, Any]:
        """The rows vector search skips (``vectors.report``: bad stored vectors, vec0 rows that are
        missing, invalid or different from their chunk's), for ``polaris status --check``."""
        with self.read() as conn:
            if not has_table(conn, "chunks_vec"):
                return {"skipped": 0, "rows": []}
            return vectors_module.report(conn, self.model.dim)

    def export_rows(self, batch: int = 2_000) -> Iterator[tuple[str, Any]]:
        """Everything the index holds, for ``copy.copy_index``, in one snapshot: ("meta", dict),
        ("collection", (name, root)), ("document", DocumentRecord), then ("chunks", [ChunkRecord])
        by id, each with its own metadata and its vector."""
        with self.read() as conn:
            yield "meta", get_meta(conn)
            for row in conn.execute("SELECT name, root FROM collections ORDER BY name").fetchall():
                yield "collection", tuple(row)
            for doc in document_records(conn, as_added=True):
                yield "document", doc
            last = -(2**63)
            while True:
                rows = conn.execute(f"SELECT {OWN_CHUNK_COLUMNS}, c.embedding FROM chunks c WHERE c.id > ?"
                                    " ORDER BY c.id LIMIT ?", (last, batch)).fetchall()
                if not rows:
                    return
                last = rows[-1][0]
                yield "chunks", [_chunk_from_row(r, True) for r in rows]

    def import_rows(self, items: Any) -> None:
        """Write what ``export_rows`` gives (of either backend) into this empty index: ids, vectors,
        node JSON and dates as they are, in one transaction (FTS5, vec0, sign bits and the BM25
        lists follow by their triggers and the flush before COMMIT)."""
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is not None:
                raise InputError(f"{self.path} already holds documents; copy into a new, empty index.")
            for kind, value in items:
                if kind == "meta":
                    keep = {k: v for k, v in value.items() if k not in ("schema_version", "fts_tokenizer")}
                    set_meta(conn, **keep)
                    if "embedding_dim" in keep and not has_table(conn, "chunks_vec"):
                        db.create_vec_table(conn, int(keep["embedding_dim"]))
                elif kind == "collection":
                    conn.execute("INSERT INTO collections (name, root) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
                                 " SET root = excluded.root", value)
                elif kind == "document":
                    self._upsert_document_row(value)
                    conn.execute("UPDATE documents SET created_at = coalesce(?, created_at), updated_at ="
                                 " coalesce(?, updated_at) WHERE id = ?", (value.created_at, value.updated_at, value.id))
                elif kind == "chunks":
                    conn.executemany(
                        "INSERT INTO chunks (id, node_id, document_id, ordinal, heading_path, heading_level, text,"
                        " start_char, end_char, token_count, text_hash, metadata, embedding, node, cjk_text, cjk_heading)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [(c.id, *_chunk_row(c.document_id, c, None if c.embedding is None else to_blob(c.embedding)))
                         for c in value])

    def schema_version(self) -> int:
        """The number of the last migration applied to this file."""
        with self._lock:
            return db.schema_version(self.conn)

    # -- search reads: the contract's read side (``storage.py``), inside ``read()`` -----------
    def resolve_scope(self, **restrictions: Any) -> Scope:
        """The scope of a query (``search.scope.resolve_scope``: documents, collections, filters,
        node ids, within_collection)."""
        return resolve_scope(self.conn, **restrictions)

    def knn(self, query: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks in ``scope``: exact vec0 below ``signbits.EXACT_BELOW``, sign bits above."""
        return vector_search.knn(self.conn, query, k, scope, fetch_k=fetch_k)

    def bm25(self, query: str, k: int, scope: Scope) -> list[tuple[int, float]]:
        """FTS5's BM25 candidates in ``scope``, common words scored from the posting lists."""
        hits = search_postings.bm25(self.conn, self.tokenizer(), query, k, scope)
        return fts.bm25(self.conn, query, k, scope) if hits is None else hits

    def chunk_texts(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """Each chunk's (heading path, text)."""
        sql = "SELECT id, heading_path, text FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
        return {r[0]: (r[1] or "", r[2] or "") for r in self.conn.execute(sql, (json.dumps(list(ids)),))}

    def candidates(self, ids: Sequence[int], with_vectors: bool) -> dict[int, tuple[str, str, np.ndarray | None]]:
        """(document id, heading path, stored vector or None) of each chunk: what ranking needs."""
        column = "embedding" if with_vectors else "NULL"
        sql = f"SELECT id, document_id, heading_path, {column} FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
        rows = self.conn.execute(sql, (json.dumps(list(dict.fromkeys(ids))),)).fetchall()
        dim = self.model.dim if with_vectors and self.model else None
        return {r[0]: (r[1], r[2], vectors_module.decode(r[3], dim) if with_vectors else None) for r in rows}

    def hit_rows(self, ids: Sequence[int]) -> dict[int, tuple]:
        """What a hit shows of each chunk: (document id, document, collection, node id, heading path,
        text, start, end, merged metadata, status, error, node JSON)."""
        sql = (
            "SELECT c.id, c.document_id, coalesce(d.path, d.id), d.collection, c.node_id, c.heading_path, c.text,"
            f" c.start_char, c.end_char, {MERGED_METADATA}, d.status, d.error, c.node"
            f" FROM {CHUNKS_WITH_DOCUMENTS} WHERE c.id IN (SELECT value FROM json_each(?))"
        )
        return {r[0]: (*r[1:9], json.loads(r[9]), *r[10:]) for r in self.conn.execute(sql, (json.dumps(list(ids)),))}

    def section_rows(self, keys: Sequence[tuple[str, str]], with_text: bool) -> list[tuple]:
        """Every chunk of the sections ``keys`` (document id, heading path), in document order:
        (document id, heading path, node id, start, end, text or None, chunk id)."""
        text = "c.text" if with_text else "NULL"
        return self.conn.execute(
            f"SELECT c.document_id, c.heading_path, c.node_id, c.start_char, c.end_char, {text}, c.id FROM chunks c"
            " JOIN json_each(?) k ON c.document_id = json_extract(k.value, '$[0]') AND c.heading_path = json_extract(k.value, '$[1]')"
            " ORDER BY c.document_id, c.ordinal",
            (json.dumps([list(k) for k in keys]),),
        ).fetchall()

    # -- model guard -------------------------------------------------------------
    @property
    def meta(self) -> dict[str, str]:
        """The polaris_meta rows."""
        with self._lock:
            return get_meta(self.conn)

    @property
    def model(self) -> ModelBinding | None:
        """The model this index was built with, or None before the first write."""
        meta = self.meta
        if "model_id" not in meta:
            return None
        recorded = ModelBinding(
            model_id=meta["model_id"],
            dim=int(meta["embedding_dim"]),
            fingerprint=meta.get("model_fingerprint", ""),
            doc_prefix=meta.get("doc_prefix", ""),
            query_prefix=meta.get("query_prefix", ""),
        )
        proven = self._proven
        if recorded.model_id == UNKNOWN_MODEL and proven is not None and proven.dim == recorded.dim:
            return proven
        return recorded

    def check_model(self, wanted: ModelBinding) -> None:
        """Raise ModelMismatchError when ``wanted`` differs from the recorded model."""
        recorded = self.model
        if recorded is not None:
            message = mismatch_message(recorded, wanted, self.path)
            if message:
                raise ModelMismatchError(message)

    def bind_model(self, wanted: ModelBinding, **settings: Any) -> None:
        """Record ``wanted`` (and chunker ``settings``) on first use; refuse a different one."""
        self.check_model(wanted)
        with self._write():
            self.check_model(wanted)  # again inside the lock: another process may have bound one
            if self.model is None:
                set_meta(
                    self.conn,
                    model_id=wanted.model_id,
                    embedding_dim=wanted.dim,
                    model_fingerprint=wanted.fingerprint,
                    doc_prefix=wanted.doc_prefix,
                    query_prefix=wanted.query_prefix,
                )
                db.create_vec_table(self.conn, wanted.dim)
            if settings:
                set_meta(self.conn, chunker=json.dumps(settings, sort_keys=True))

    def record_proof(self, proven: ModelBinding) -> bool:
        """Record ``proven`` as the model of a file whose binding is ``unknown`` (see ``proof.prove``).

        A read-only Store records it through a short write of its own; where the file cannot
        be written at all, this Store alone trusts ``proven`` until it is closed. Returns True
        when the file now records it.
        """
        if not self.readonly:
            with self._write():
                self._record_proof(self.conn, proven)
            return True
        try:
            conn = db.connect(self.path)
            try:
                with transaction(conn):
                    self._record_proof(conn, proven)
            finally:
                conn.close()
        except ModelMismatchError:
            raise
        except (DatabaseError, db.sqlite_module().Error):  # a read-only file or file system
            self._proven = proven
            return False
        return True

    def _record_proof(self, conn: Any, proven: ModelBinding) -> None:
        meta = get_meta(conn)
        if meta.get("model_id") != UNKNOWN_MODEL:  # another process recorded a model meanwhile
            if "model_id" in meta:
                self.check_model(proven)
            return
        if int(meta["embedding_dim"]) != proven.dim:
            raise ModelMismatchError(unknown_model_message(ModelBinding(UNKNOWN_MODEL, int(meta["embedding_dim"])),
                                                           proven, self.path))
        set_meta(conn, model_id=proven.model_id, model_fingerprint=proven.fingerprint,
                 doc_prefix=proven.doc_prefix, query_prefix=proven.query_prefix)

    def vector_sample(self, n: int) -> list[ChunkRecord]:
        """Up to ``n`` chunks that have a vector, spread evenly over the file (by rowid), each
        with its own metadata (not merged with its document's) and its vector."""
        with self._lock:
            low, high = self.conn.execute("SELECT min(id), max(id) FROM chunks WHERE embedding IS NOT NULL").fetchone()
            if low is None:
                return []
            ids: list[int] = []
            for i in range(n):
                row = self.conn.execute(
                    "SELECT id FROM chunks WHERE embedding IS NOT NULL AND id >= ? ORDER BY id LIMIT 1",
                    (low + (high - low) * i // max(n - 1, 1),),
                ).fetchone()
                if row[0] not in ids:
                    ids.append(row[0])
            rows = self.conn.execute(
                f"SELECT {OWN_CHUNK_COLUMNS}, c.embedding FROM chunks c"
                " WHERE c.id IN (SELECT value FROM json_each(?)) ORDER BY c.id",
                (json.dumps(ids),),
            ).fetchall()
        return [_chunk_from_row(r, True) for r in rows]

    # -- writes -------------------------------------------------------------------
    def upsert_document(
        self,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray | Sequence[np.ndarray] | None,
    ) -> None:
        """Add or replace ``doc`` and all its chunks and vectors, in one transaction."""
        doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
        _check_unique(doc, chunks)
        check_committable(doc, chunks)
        blobs = self._blobs(chunks, vectors)
        with self._write():
            self._upsert_document_row(doc)
            self.conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc.id,))
            self._replace_chunks(doc.id, chunks, blobs)

    def upsert_chunks(
        self,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray | Sequence[np.ndarray] | None,
    ) -> None:
        """Add or replace ``chunks`` by node id under ``doc``, in one transaction.

        Unlike ``upsert_document`` the document's other chunks stay, and an existing
        document row is left as it is (``doc`` is inserted only when absent). A document
        or node id that belongs to another collection is refused, and so is a node id
        stored under another document of this one (``NodeIdError``: writing it would take
        it from that document silently; delete it there first). A new document whose path
        is a file `polaris index` stored in this collection replaces that copy (one
        document per file, whichever door wrote it last).
        """
        self.upsert_nodes([(doc, chunks, vectors)])

    def upsert_nodes(self, groups: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord], Any]]) -> None:
        """``upsert_chunks`` for several documents (``(doc, chunks, vectors)`` each) in one
        transaction: all are written or none. A node id given under two of them is refused
        (``NodeIdError``) before anything is written, as every bad vector is (``vectors.check``)."""
        prepared = []
        for doc, chunks, vectors in groups:
            doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
            _check_unique(doc, chunks)
            check_committable(doc, chunks)
            prepared.append((doc, chunks, self._blobs(chunks, vectors)))
        _check_unique_across([(doc, chunks) for doc, chunks, _ in prepared])
        with self._write():
            for doc, chunks, blobs in prepared:
                self._upsert_chunks(doc, chunks, blobs)

    def _upsert_chunks(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord], blobs: list[bytes | None]) -> None:
        row = self.conn.execute("SELECT collection FROM documents WHERE id = ?", (doc.id,)).fetchone()
        if row is None:
            if doc.path and is_relative_path(doc.path):
                self.conn.execute("DELETE FROM documents WHERE id = ?", (file_document_id(doc.collection, doc.path),))
            self._upsert_document_row(doc)
        elif row[0] != doc.collection:
            raise InputError(
                f"document {doc.id!r} belongs to collection {row[0]!r}, not {doc.collection!r};"
                " give the node another ref_doc_id, or use a store for that collection."
            )
        self._refuse_foreign_nodes(doc.collection, chunks)
        self._replace_chunks(doc.id, chunks, blobs)

    def _refuse_foreign_nodes(self, collection: str, chunks: Sequence[ChunkRecord]) -> None:
        clash = self.conn.execute(
            f"SELECT c.node_id, d.collection FROM {CHUNKS_WITH_DOCUMENTS}"
            " WHERE c.node_id IN (SELECT value FROM json_each(?)) AND d.collection != ? LIMIT 1",
            (json.dumps([c.node_id for c in chunks]), collection),
        ).fetchone()
        if clash:
            raise NodeIdError(f"node {clash[0]!r} belongs to collection {clash[1]!r}, not {collection!r}.")

    def _replace_chunks(self, document_id: str, chunks: Sequence[ChunkRecord], blobs: list[bytes | None]) -> None:
        """Insert ``chunks`` under ``document_id``, first removing any chunk of it with the same
        node id; a node id stored under another document is refused (``NodeIdError``)."""
        node_ids = json.dumps([c.node_id for c in chunks])
        self._free_node_ids(document_id, node_ids)
        clash = self.conn.execute(
            "SELECT node_id, document_id FROM chunks WHERE node_id IN (SELECT value FROM json_each(?))"
            " AND document_id != ? LIMIT 1",
            (node_ids, document_id),
        ).fetchone()
        if clash:
            raise NodeIdError(
                f"node {clash[0]!r} is stored in document {clash[1]!r}, so it cannot also go into document"
                f" {document_id!r}: that would take it from {clash[1]!r}. Nothing was written. To move it, delete"
                f" it from {clash[1]!r} first; to keep both, give the new node another id."
            )
        self.conn.execute("DELETE FROM chunks WHERE node_id IN (SELECT value FROM json_each(?))", (node_ids,))
        self.conn.executemany(
            """INSERT INTO chunks (node_id, document_id, ordinal, heading_path, heading_level, text,
                   start_char, end_char, token_count, text_hash, metadata, embedding, node, cjk_text, cjk_heading)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [_chunk_row(document_id, c, b) for c, b in zip(chunks, blobs)],
        )

    def _free_node_ids(self, document_id: str, node_ids: str) -> None:
        """A chunk `polaris index` made keeps its node id when its file is re-keyed (a widened
        root, or a file stored under its NFD name before #23): the id its document derived under
        its old key (``ids.node_id_for``, of its NFC text), which is what a new file at the old
        key derives again. Such a chunk, whose id in ``node_ids`` (JSON) is derived from
        ``document_id``, the document being written, takes the id its own document derives
        now, and the new file keeps its own."""
        rows = self.conn.execute(
            "SELECT id, node_id, document_id, ordinal, text FROM chunks WHERE node IS NULL AND document_id != ?"
            " AND node_id IN (SELECT value FROM json_each(?))",
            (document_id, node_ids),
        ).fetchall()
        moves = [(node_id_for(doc, ordinal, text), cid) for cid, node, doc, ordinal, text in rows
                 if node == node_id_for(document_id, ordinal, nfc(text))]
        self.conn.executemany("UPDATE OR IGNORE chunks SET node_id = ? WHERE id = ?", moves)

    def _blobs(self, chunks: Sequence[ChunkRecord], vectors: Any) -> list[bytes | None]:
        if vectors is None:
            return [None] * len(chunks)
        if len(vectors) != len(chunks):
            raise InputError(f"{len(chunks)} chunks but {len(vectors)} vectors.")
        if len(chunks) == 0:
            return []
        model = self.model
        if model is None:
            raise DatabaseError("no model is bound to this index yet; call bind_model first.")
        matrix = vectors_module.check(vectors, [f"node {c.node_id!r}" for c in chunks], model.dim)
        return [to_blob(v) for v in matrix]

    def _upsert_document_row(self, doc: DocumentRecord) -> None:
        check_status(doc.status)
        self.conn.execute("INSERT OR IGNORE INTO collections (name) VALUES (?)", (doc.collection,))
        self.conn.execute(
            """INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (id) DO UPDATE SET path = excluded.path, name = excluded.name,
                   collection = excluded.collection, status = excluded.status, error = excluded.error,
                   content_hash = excluded.content_hash, metadata = excluded.metadata,
                   updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')""",
            (doc.id, doc.path, doc.name, doc.collection, doc.status, doc.error, doc.content_hash,
             json.dumps(doc.metadata, default=str)),
        )

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or update a document row alone (its chunks are left as they are)."""
        with self._write():
            self._upsert_document_row(normal_document(doc))

    def set_status(self, document_id: str, status: str, error: str | None = None) -> None:
        """Move a document to ``status`` (``records.STATUSES``; ``search.scope`` says which answer in a collection)."""
        check_status(status)
        with self._write():
            self.conn.execute(
                "UPDATE documents SET status = ?, error = ?, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
                " WHERE id = ?",
                (status, None if error is None else storable(error), storable(document_id)),
            )

    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Remove documents with their chunks, vectors and FTS rows, in one transaction."""
        with self._write():
            cur = self.conn.execute(
                "DELETE FROM documents WHERE id IN (SELECT value FROM json_each(?))", (_keys(document_ids),)
            )
            return cur.rowcount

    def delete_document(self, document_id: str, collection: str | None = None) -> bool:
        """Remove a document (of ``collection``, when given) with its chunks, vectors and FTS rows."""
        with self._write():
            if collection is None:
                cur = self.conn.execute("DELETE FROM documents WHERE id = ?", (storable(document_id),))
            else:
                cur = self.conn.execute("DELETE FROM documents WHERE id = ? AND collection = ?",
                                        (storable(document_id), nfc(collection)))
            return cur.rowcount > 0

    def delete_nodes(self, node_ids: Iterable[str]) -> int:
        """Remove chunks by node id; returns how many were removed."""
        with self._write():
            cur = self.conn.execute(
                "DELETE FROM chunks WHERE node_id IN (SELECT value FROM json_each(?))", (_keys(node_ids),)
            )
            return cur.rowcount

    def delete_chunks(
        self, *, node_ids: Sequence[str] | None = None, filters: Filter | None = None, collection: str | None = None
    ) -> int:
        """Remove the chunks in ``node_ids`` that pass ``filters`` (either may be None, not both), in ``collection``."""
        if node_ids is None and filters is None:
            raise InputError("delete_chunks needs node_ids or filters; use clear() to remove everything.")
        where, args = _chunk_where(node_ids, None, None, filters, collection)
        with self._write():
            return self.conn.execute(
                f"DELETE FROM chunks WHERE id IN (SELECT c.id FROM {CHUNKS_WITH_DOCUMENTS} {where})", args
            ).rowcount

    def clear(self) -> None:
        """Remove every document and chunk; the model binding stays."""
        with self._write():
            self.conn.execute("DELETE FROM chunks")
            self.conn.execute("DELETE FROM documents")

    def remove_collection(self, collection: str, *, keep: bool = False) -> int:
        """Remove a collection: its documents (with chunks, vectors, FTS rows) and its root.

        ``keep``: the collection stays, empty (a search of it answers no hits, not an unknown name)."""
        collection = nfc(collection)
        with self._write():
            removed = self.conn.execute("DELETE FROM documents WHERE collection = ?", (collection,)).rowcount
            if not keep:
                self.conn.execute("DELETE FROM collections WHERE name = ?", (collection,))
            return removed

    # -- collections ------------------------------------------------------------------
    def collection_root(self, collection: str) -> str | None:
        """The folder a collection's file paths are relative to (None: not set yet)."""
        with self._lock:
            return documents_module.collection_root(self.conn, collection)

    def collections(self) -> dict[str, str | None]:
        """Every collection and its root."""
        with self._lock:
            return documents_module.collection_roots(self.conn)

    def add_collection(self, collection: str) -> None:
        """Record ``collection`` (empty, no root) if it is not there: a name searches may scope to."""
        with self._write():
            documents_module.add_collection(self.conn, collection)

    def set_collection_root(self, collection: str, root: str, renames: dict[str, str] | None = None) -> None:
        """Set ``collection``'s root; ``renames`` (old path -> new path) re-keys its files with it.

        One transaction: a file keyed ``collection:path`` gets the id of its new path;
        chunks, vectors and FTS rows follow; nothing is re-embedded.
        """
        collection = nfc(collection)
        with self._write():
            self.conn.execute(
                "INSERT INTO collections (name, root) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
                " SET root = excluded.root, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
                (collection, root),
            )
            for old, new in (renames or {}).items():
                self._rename_file(collection, old, new)

    def _rename_file(self, collection: str, old: str, new: str) -> None:
        row = self.conn.execute(
            "SELECT id, metadata FROM documents WHERE collection = ? AND path = ?", (collection, old)
        ).fetchone()
        if row is None:
            return
        old_id, meta = row
        new_id = file_document_id(collection, new) if old_id == file_document_id(collection, old) else old_id
        meta = {**json.loads(meta), "file_path": new}
        if new_id != old_id:  # a new key: insert it, move the chunks, drop the old row (foreign keys stay on)
            self.conn.execute(
                "INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata,"
                " created_at) SELECT ?, ?, name, collection, status, error, content_hash, ?, created_at"
                " FROM documents WHERE id = ?",
                (new_id, new, json.dumps(meta), old_id),
            )
            self.conn.execute("UPDATE chunks SET document_id = ? WHERE document_id = ?", (new_id, old_id))
            self.conn.execute("DELETE FROM documents WHERE id = ?", (old_id,))
        else:
            self.conn.execute(
                "UPDATE documents SET path = ?, metadata = ? WHERE id = ?", (new, json.dumps(meta), old_id)
            )

    # -- reads --------------------------------------------------------------------
    def get_document(self, document_id: str) -> DocumentRecord | None:
        """One document by id."""
        with self._lock:
            rows = document_records(self.conn, document_id=document_id)
        return rows[0] if rows else None

    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """All documents, or those of one collection, ordered by path."""
        with self._lock:
            return document_records(self.conn, collection=collection)

    def files(self, collection: str) -> dict[str, DocumentRecord]:
        """The documents of ``collection`` that are files under its root, by relative path."""
        return files_of(self.documents(collection))

    def get_chunks(
        self,
        *,
        node_ids: Sequence[str] | None = None,
        ids: Sequence[int] | None = None,
        document_id: str | None = None,
        filters: Filter | None = None,
        with_embedding: bool = False,
        collection: str | None = None,
    ) -> list[ChunkRecord]:
        """Chunks by node id, rowid, document, metadata filters and collection (all given), in document order.

        A ``collection`` the index does not have is a ScopeError (``search.names``)."""
        if collection is not None:
            with self._lock:
                if not collections_named(self.conn, [collection]):
                    return []  # ``default`` before anything was written: empty
        where, args = _chunk_where(node_ids, ids, document_id, filters, collection)
        columns = CHUNK_COLUMNS + (", c.embedding" if with_embedding else "")
        with self._lock:
            rows = self.conn.execute(
                f"SELECT {columns} FROM {CHUNKS_WITH_DOCUMENTS} {where} ORDER BY c.document_id, c.ordinal", args
            ).fetchall()
        return [_chunk_from_row(r, with_embedding) for r in rows]

    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors for chunks whose text hash is in ``hashes`` (for reuse)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT text_hash, embedding FROM chunks WHERE embedding IS NOT NULL"
                " AND text_hash IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(set(hashes))),),
            ).fetchall()
        dim = self.model.dim if self.model is not None else None
        found: dict[str, np.ndarray] = {}
        for h, b in rows:
            v = vectors_module.decode(b, dim)
            if v is not None:  # a stored value that is not a valid vector is embedded again
                found[h] = v
        return found

    def counts(self) -> dict[str, Any]:
        """Documents, chunks, and documents per collection and status.

        Read from what the file keeps, not by scanning it: documents per collection and status
        from their index, chunks from FTS5's own row count (one row: every chunk has its FTS
        row, kept by triggers), so the cost does not grow with the file."""
        with self._lock:
            per = self.conn.execute(
                "SELECT collection, status, count(*) FROM documents GROUP BY 1, 2 ORDER BY 1, 2"
            ).fetchall()
            chunks = self._chunk_count()
        collections: dict[str, dict[str, int]] = {}
        for name, status, n in per:
            collections.setdefault(name, {})[status] = n
        return {"documents": sum(n for *_, n in per), "chunks": chunks, "collections": collections}

    def _chunk_count(self) -> int:
        """FTS5's row count (its averages record) outside a write; count(*) inside one (FTS5
        writes that record when the transaction commits), without a full-text table or when
        that record cannot be read."""
        if not self.conn.in_transaction and has_table(self.conn, "chunks_fts_data"):
            try:
                return postings.averages(self.conn)[0]
            except Exception:  # a damaged full-text index: count the rows (`polaris status` must still report)
                pass
        return self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def quick_check(self) -> list[str]:
        """``PRAGMA quick_check``: ["ok"], or what is wrong with the file."""
        with self._lock:
            return [r[0] for r in self.conn.execute("PRAGMA quick_check").fetchall()]

    def size_bytes(self) -> int:
        """The size of the database file and its WAL on disk (0 in memory)."""
        if self.path == ":memory:":
            return 0
        return sum(Path(self.path + s).stat().st_size for s in ("", "-wal") if Path(self.path + s).exists())


def _read_only_reason(path: str) -> str | None:
    """Why the index at ``path`` can only be read here (None: it can be written, or it does not
    exist yet, when the writer's open says what is wrong)."""
    target = Path(path)
    if path == db.MEMORY or not target.exists():
        return None
    db.restore_side_files(target)
    return db.write_problem(target)


def _check_copy(path: Path, counts: dict[str, Any] | None) -> None:
    """Refuse a copy that is damaged or does not hold what the index held (``counts``; None when
    another process wrote meanwhile, so the copy may rightly hold more)."""
    copy = Store(path, readonly=True)
    try:
        problems = [r for r in copy.quick_check() if r != "ok"]
        got = copy.counts()
    finally:
        copy.close()
    if counts is None:
        counts = got
    if problems or (got["documents"], got["chunks"]) != (counts["documents"], counts["chunks"]):
        raise DatabaseError(
            f"the copy at {path} did not check out ({'; '.join(problems[:3]) or got}); nothing was written."
        )


def _chunk_columns(metadata: str) -> str:
    return (
        "c.id, c.node_id, c.document_id, c.ordinal, c.heading_path, c.heading_level, c.text, c.start_char,"
        f" c.end_char, c.token_count, {metadata}, c.text_hash, c.node"
    )


CHUNK_COLUMNS = _chunk_columns(MERGED_METADATA)  # metadata merged with the document's
OWN_CHUNK_COLUMNS = _chunk_columns("c.metadata")  # the chunk's own metadata, as it was added


def _chunk_where(
    node_ids: Any, ids: Any, document_id: Any, filters: Filter | None = None, collection: str | None = None
) -> tuple[str, tuple]:
    """WHERE over ``CHUNKS_WITH_DOCUMENTS``; filters see the merged metadata."""
    parts: list[str] = []
    args: list[Any] = []
    if collection is not None:
        # By id, an id's index leads: the unary + keeps the planner off the collection's index,
        # which walks every document of the collection and its chunks (#24: 3.8 s at 1M chunks).
        by_id = node_ids is not None or ids is not None or document_id is not None
        parts.append("+d.collection = ?" if by_id else "d.collection = ?")
        args.append(nfc(collection))
    if node_ids is not None:
        parts.append("c.node_id IN (SELECT value FROM json_each(?))")
        args.append(_keys(node_ids))
    if ids is not None:
        parts.append("c.id IN (SELECT value FROM json_each(?))")
        args.append(json.dumps([int(i) for i in ids]))
    if document_id is not None:
        parts.append("c.document_id = ?")
        args.append(storable(document_id))
    if filters is not None:
        sql, params = filter_sql(filters, f"({MERGED_METADATA})")
        parts.append(f"({sql})")
        args += params
    return ("WHERE " + " AND ".join(parts) if parts else ""), tuple(args)


def _keys(ids: Iterable[str]) -> str:
    """Ids as a JSON array for ``json_each``, each ``storable`` as it was stored."""
    return json.dumps([storable(i) for i in ids])


def _chunk_row(document_id: str, c: ChunkRecord, blob: bytes | None) -> tuple:
    return (
        c.node_id, document_id, c.ordinal, c.heading_path, c.heading_level, c.text, c.start_char,
        c.end_char, c.token_count, c.text_hash, json.dumps(c.metadata, default=str), blob, c.node,
        *cjk_columns(c.text, c.heading_path),  # the CJK bigram text chunks_fts indexes (#36)
    )


def _chunk_from_row(r: Sequence[Any], with_embedding: bool) -> ChunkRecord:
    return ChunkRecord(
        id=r[0], node_id=r[1], document_id=r[2], ordinal=r[3], heading_path=r[4], heading_level=r[5],
        text=r[6], start_char=r[7], end_char=r[8], token_count=r[9], metadata=json.loads(r[10]),
        text_hash=r[11], node=r[12], embedding=vectors_module.stored(r[13]) if with_embedding else None,
    )


class _LockedTransaction:
    """The store's lock held around one transaction (a write, or a read snapshot)."""

    def __init__(self, lock: threading.RLock, conn: Any, tx: Any) -> None:
        self.lock, self.tx = lock, tx

    def __enter__(self) -> Any:
        self.lock.acquire()
        try:
            return self.tx.__enter__()
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.tx.__exit__(*exc)
        finally:
            self.lock.release()
