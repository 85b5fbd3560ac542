"""The SQLite store's documents and chunks (``Store``'s first group): upserts, deletes, reads, counts."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

import numpy as np

from ..storage import vectors as vectors_module
from .schema import CHUNKS_WITH_DOCUMENTS, file_document_id, has_table
from ..storage.records import (
    ChunkRecord, DocumentRecord, _check_unique, _check_unique_across, check_committable, check_status,
    is_relative_path, normal_document, normal_chunk, to_blob,
)
from ..errors import DatabaseError, InputError, NodeIdError
from ..storage.ids import node_id_for
from . import postings
from ..storage.filters import Filter
from ..storage.names import collections_named
from ..text import nfc, storable
from .rows import CHUNK_COLUMNS, _chunk_from_row, _chunk_row, _chunk_where, _keys


class Documents:
    """The store's documents and their chunks: written, read, deleted, counted."""

    # -- writes -------------------------------------------------------------------
    def upsert_document(
        self,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray | Sequence[np.ndarray] | None,
        text: str | None = None,
    ) -> None:
        """Add or replace ``doc`` and all its chunks and vectors, in one transaction; ``text`` is the
        document's text that the chunks' offsets point into (kept in ``document_texts``; None: not known)."""
        doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
        _check_unique(doc, chunks)
        check_committable(doc, chunks)
        blobs = self._blobs(chunks, vectors)
        with self._write():
            self._upsert_document_row(doc)
            self.conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc.id,))
            self._replace_chunks(doc.id, chunks, blobs)
            self._put_text(doc.id, text)

    def _put_text(self, document_id: str, text: str | None) -> None:
        self.conn.execute("DELETE FROM document_texts WHERE document_id = ?", (document_id,))
        if text is not None:
            self.conn.execute("INSERT INTO document_texts (document_id, text) VALUES (?, ?)", (document_id, text))

    def store_texts(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """Keep the text of documents indexed before texts were stored: ``(document id, content hash,
        text)`` each, written only where the document still has that hash and no text. How many were."""
        with self._write():
            before = self.conn.total_changes
            self.conn.executemany(
                "INSERT INTO document_texts (document_id, text) SELECT id, ? FROM documents WHERE id = ?"
                " AND content_hash = ? ON CONFLICT (document_id) DO NOTHING",
                [(text, doc_id, digest) for doc_id, digest, text in rows])
            return self.conn.total_changes - before

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
        self._put_text(doc.id, None)  # nodes' offsets point into a text this door was not given

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
            return self._drop_nodes("node_id IN (SELECT value FROM json_each(?))", (_keys(node_ids),))

    def delete_chunks(
        self, *, node_ids: Sequence[str] | None = None, filters: Filter | None = None, collection: str | None = None
    ) -> int:
        """Remove the chunks in ``node_ids`` that pass ``filters`` (either may be None, not both), in ``collection``."""
        if node_ids is None and filters is None:
            raise InputError("delete_chunks needs node_ids or filters; use clear() to remove everything.")
        where, args = _chunk_where(node_ids, None, None, filters, collection)
        with self._write():
            return self._drop_nodes(f"id IN (SELECT c.id FROM {CHUNKS_WITH_DOCUMENTS} {where})", args)

    def _drop_nodes(self, where: str, args: tuple) -> int:
        """Delete the chunks ``where`` says, and the stored text of their documents: it holds what
        was removed (the documents' sections are read from the chunks left)."""
        self.conn.execute(f"DELETE FROM document_texts WHERE document_id IN (SELECT document_id FROM chunks WHERE {where})",
                          args)
        return self.conn.execute(f"DELETE FROM chunks WHERE {where}", args).rowcount

    def clear(self) -> None:
        """Remove every document and chunk; the model binding stays."""
        with self._write():
            self.conn.execute("DELETE FROM chunks")
            self.conn.execute("DELETE FROM documents")

    # -- reads --------------------------------------------------------------------
    def get_document(self, document_id: str) -> DocumentRecord | None:
        """One document by id."""
        with self._lock:
            from ..storage.documents import document_records  # here: 8 dataclasses a search never needs

            rows = document_records(self.conn, document_id=document_id)
        return rows[0] if rows else None

    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """All documents, or those of one collection, ordered by path."""
        with self._lock:
            from ..storage.documents import document_records

            return document_records(self.conn, collection=collection)

    def files(self, collection: str) -> dict[str, DocumentRecord]:
        """The documents of ``collection`` that are files under its root, by relative path."""
        from ..storage.documents import files_of

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
