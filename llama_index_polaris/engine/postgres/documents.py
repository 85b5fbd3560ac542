"""The Postgres store's documents and chunks (``PgStore``'s first group): upserts, deletes, reads, counts."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

import numpy as np

from ..storage import vectors as vectors_module
from ..errors import DatabaseError, InputError, NodeIdError
from ..storage.ids import node_id_for
from ..storage.records import (
    ChunkRecord, DocumentRecord, _check_unique, _check_unique_across, check_committable, check_status,
    file_document_id, is_relative_path, normal_chunk, normal_document,
)
from ..storage.filters import Filter
from ..storage.names import collections_named
from ..text import nfc, storable
from . import bm25 as bm25_module
from .rows import as_array, _chunk, CHUNK_COLUMNS, _chunk_rows, _chunk_where, INSERT_COLUMNS, NOW, _retried


class Documents:
    """The store's documents and their chunks: written, read, deleted, counted."""

    # -- writes ------------------------------------------------------------------------
    def _vectors(self, chunks: Sequence[ChunkRecord], vectors: Any) -> list[np.ndarray | None]:
        if vectors is None:
            return [None] * len(chunks)
        if len(vectors) != len(chunks):
            raise InputError(f"{len(chunks)} chunks but {len(vectors)} vectors.")
        if not chunks:
            return []
        model = self.model
        if model is None:
            raise DatabaseError("no model is bound to this index yet; call bind_model first.")
        matrix = vectors_module.check(vectors, [f"node {c.node_id!r}" for c in chunks], model.dim)
        return [np.asarray(v, dtype=np.float32) for v in matrix]

    def upsert_document(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord], vectors: Any,
                        text: str | None = None) -> None:
        """Add or replace ``doc`` and all its chunks and vectors, and its ``text``, in one transaction
        (``Store.upsert_document``)."""
        doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
        _check_unique(doc, chunks)
        check_committable(doc, chunks)
        vecs = self._vectors(chunks, vectors)
        with self._write() as conn:
            self._document_row(conn, doc)
            self._drop_chunks(conn, "document_id = %s", (doc.id,))
            self._replace_chunks(conn, doc.id, chunks, vecs)
            _put_text(conn, doc.id, text)

    def store_texts(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """Keep the text of documents indexed before texts were stored (``Store.store_texts``)."""
        if not rows:
            return 0
        with self._write() as conn:
            return conn.execute(
                "INSERT INTO document_texts (document_id, text) SELECT d.id, k.text FROM"
                " unnest(%s::text[], %s::text[], %s::text[]) AS k(id, digest, text) JOIN documents d ON d.id = k.id"
                " AND d.content_hash = k.digest ON CONFLICT (document_id) DO NOTHING",
                ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])).rowcount

    def upsert_chunks(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord], vectors: Any) -> None:
        """Add or replace ``chunks`` by node id under ``doc`` (``Store.upsert_chunks``)."""
        self.upsert_nodes([(doc, chunks, vectors)])

    def upsert_nodes(self, groups: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord], Any]]) -> None:
        """``upsert_chunks`` for several documents in one transaction: all are written or none."""
        prepared = []
        for doc, chunks, vectors in groups:
            doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
            _check_unique(doc, chunks)
            check_committable(doc, chunks)
            prepared.append((doc, chunks, self._vectors(chunks, vectors)))
        _check_unique_across([(doc, chunks) for doc, chunks, _ in prepared])
        with self._write() as conn:
            for doc, chunks, vecs in prepared:
                row = conn.execute("SELECT collection FROM documents WHERE id = %s", (doc.id,)).fetchone()
                if row is None:
                    if doc.path and is_relative_path(doc.path):
                        self._drop_documents(conn, [file_document_id(doc.collection, doc.path)])
                    self._document_row(conn, doc)
                elif row[0] != doc.collection:
                    raise InputError(
                        f"document {doc.id!r} belongs to collection {row[0]!r}, not {doc.collection!r};"
                        " give the node another ref_doc_id, or use a store for that collection.")
                clash = conn.execute(
                    "SELECT c.node_id, d.collection FROM chunks c JOIN documents d ON d.id = c.document_id"
                    " WHERE c.node_id = ANY(%s) AND d.collection <> %s LIMIT 1",
                    ([c.node_id for c in chunks], doc.collection)).fetchone()
                if clash:
                    raise NodeIdError(f"node {clash[0]!r} belongs to collection {clash[1]!r}, not {doc.collection!r}.")
                self._replace_chunks(conn, doc.id, chunks, vecs)
                _put_text(conn, doc.id, None)  # nodes' offsets point into a text this door was not given

    def _replace_chunks(self, conn: Any, document_id: str, chunks: Sequence[ChunkRecord],
                        vecs: Sequence[np.ndarray | None]) -> None:
        """Insert ``chunks`` under ``document_id``, replacing its chunks of the same node ids; a node
        id stored under another document is refused (``NodeIdError``), as in the SQLite Store."""
        node_ids = [c.node_id for c in chunks]
        self._free_node_ids(conn, document_id, node_ids)
        clash = conn.execute("SELECT node_id, document_id FROM chunks WHERE node_id = ANY(%s) AND document_id <> %s"
                             " LIMIT 1", (node_ids, document_id)).fetchone()
        if clash:
            raise NodeIdError(
                f"node {clash[0]!r} is stored in document {clash[1]!r}, so it cannot also go into document"
                f" {document_id!r}: that would take it from {clash[1]!r}. Nothing was written. To move it, delete"
                f" it from {clash[1]!r} first; to keep both, give the new node another id.")
        self._drop_chunks(conn, "node_id = ANY(%s)", (node_ids,))
        self._insert_chunks(conn, document_id, chunks, vecs)

    def _insert_chunks(self, conn: Any, document_id: str, chunks: Sequence[ChunkRecord],
                       vecs: Sequence[np.ndarray | None]) -> None:
        if not chunks:
            return
        counted = self.tokenizer().positions([(i, c.text, c.heading_path) for i, c in enumerate(chunks)])
        lengths = [len(counted[i]) for i in range(len(chunks))]
        with conn.cursor() as cur:
            new_ids = [cur.execute(f"INSERT INTO chunks ({INSERT_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) RETURNING id",
                                   row[1:]).fetchone()[0]  # one by one: RETURNING keeps the order of ids
                       for row in _chunk_rows(chunks, vecs, lengths, document_id)]
        postings = bm25_module.postings_of((chunk_id, counted[i]) for i, chunk_id in enumerate(new_ids))
        bm25_module.copy_postings(conn, postings)
        self._delta.add(len(new_ids), sum(lengths), (p[0] for p in postings))

    def _write_postings(self, conn: Any, rows: Sequence[tuple[int, str, str]]) -> dict[int, int]:
        """Postings of (id, text, heading path) ``rows``; returns each id's length in tokens."""
        lengths: dict[int, int] = {}
        tokenizer = self.tokenizer()
        for start in range(0, len(rows), 2_000):
            counted = tokenizer.positions(list(rows[start:start + 2_000]))
            lengths.update((chunk_id, len(positions)) for chunk_id, positions in counted.items())
            bm25_module.copy_postings(conn, bm25_module.postings_of(counted.items()))
        return lengths

    def _free_node_ids(self, conn: Any, document_id: str, node_ids: list[str]) -> None:
        """A chunk `polaris index` made keeps its node id when its file is re-keyed; such a chunk
        whose id is derived from ``document_id`` takes the id its own document derives now
        (``Store._free_node_ids``)."""
        rows = conn.execute("SELECT id, node_id, document_id, ordinal, text FROM chunks WHERE node IS NULL"
                            " AND document_id <> %s AND node_id = ANY(%s)", (document_id, node_ids)).fetchall()
        for cid, node, doc, ordinal, text in rows:
            if node == node_id_for(document_id, ordinal, nfc(text)):
                conn.execute("UPDATE chunks SET node_id = %s WHERE id = %s AND NOT EXISTS"
                             " (SELECT 1 FROM chunks WHERE node_id = %s)",
                             (node_id_for(doc, ordinal, text), cid, node_id_for(doc, ordinal, text)))

    def _drop_chunks(self, conn: Any, where: str, args: tuple) -> int:
        """Delete the chunks ``where`` says, their postings first in one statement."""
        terms = conn.execute(f"DELETE FROM chunks_bm25 WHERE chunk_id IN (SELECT id FROM chunks WHERE {where})"
                             " RETURNING term", args).fetchall()
        lengths = conn.execute(f"DELETE FROM chunks WHERE {where} RETURNING bm25_length", args).fetchall()
        self._delta.add(-len(lengths), -sum(r[0] for r in lengths), (r[0] for r in terms), -1)
        return len(lengths)

    def _drop_documents(self, conn: Any, ids: list[str], collection: str | None = None) -> int:
        where, args = ("id = ANY(%s)", (ids,)) if collection is None else (
            "id = ANY(%s) AND collection = %s", (ids, collection))
        self._drop_chunks(conn, f"document_id IN (SELECT id FROM documents WHERE {where})", args)
        return conn.execute(f"DELETE FROM documents WHERE {where}", args).rowcount

    def _document_row(self, conn: Any, doc: DocumentRecord) -> None:
        check_status(doc.status)
        conn.execute("INSERT INTO collections (name) VALUES (%s) ON CONFLICT DO NOTHING", (doc.collection,))
        conn.execute(
            "INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET path = excluded.path,"
            " name = excluded.name, collection = excluded.collection, status = excluded.status,"
            " error = excluded.error, content_hash = excluded.content_hash, metadata = excluded.metadata,"
            f" updated_at = {NOW}",
            (doc.id, doc.path, doc.name, doc.collection, doc.status, doc.error, doc.content_hash,
             json.dumps(doc.metadata, default=str)))

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or update a document row alone (its chunks are left as they are)."""
        with self._write() as conn:
            self._document_row(conn, normal_document(doc))

    def set_status(self, document_id: str, status: str, error: str | None = None) -> None:
        """Move a document to ``status``."""
        check_status(status)
        with self._write() as conn:
            conn.execute(f"UPDATE documents SET status = %s, error = %s, updated_at = {NOW} WHERE id = %s",
                         (status, None if error is None else storable(error), storable(document_id)))

    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Remove documents with their chunks, vectors and postings, in one transaction."""
        with self._write() as conn:
            return self._drop_documents(conn, [storable(d) for d in document_ids])

    def delete_document(self, document_id: str, collection: str | None = None) -> bool:
        """Remove a document (of ``collection``, when given)."""
        with self._write() as conn:
            return self._drop_documents(conn, [storable(document_id)],
                                        None if collection is None else nfc(collection)) > 0

    def delete_nodes(self, node_ids: Iterable[str]) -> int:
        """Remove chunks by node id; returns how many were removed."""
        with self._write() as conn:
            return self._drop_nodes(conn, "node_id = ANY(%s)", ([storable(n) for n in node_ids],))

    def delete_chunks(self, *, node_ids: Sequence[str] | None = None, filters: Filter | None = None,
                      collection: str | None = None) -> int:
        """Remove the chunks in ``node_ids`` that pass ``filters`` (either may be None, not both), in ``collection``."""
        if node_ids is None and filters is None:
            raise InputError("delete_chunks needs node_ids or filters; use clear() to remove everything.")
        where, args = _chunk_where(node_ids, None, None, filters, collection)
        with self._write() as conn:
            return self._drop_nodes(
                conn, f"id IN (SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id {where})", args)

    def _drop_nodes(self, conn: Any, where: str, args: tuple) -> int:
        """``_drop_chunks`` for some of a document's chunks: its stored text then holds what was
        removed, so it goes too (its sections are read from the chunks left)."""
        conn.execute(f"DELETE FROM document_texts WHERE document_id IN (SELECT document_id FROM chunks WHERE {where})",
                     args)
        return self._drop_chunks(conn, where, args)

    def clear(self) -> None:
        """Remove every document and chunk; the model binding stays."""
        with self._write() as conn:
            conn.execute("DELETE FROM chunks_bm25")
            conn.execute("DELETE FROM chunks_bm25_terms")
            conn.execute("UPDATE chunks_bm25_stats SET n_rows = 0, total_length = 0")
            conn.execute("DELETE FROM chunks")
            conn.execute("DELETE FROM documents")

    # -- reads -------------------------------------------------------------------------
    @_retried
    def get_document(self, document_id: str) -> DocumentRecord | None:
        """One document by id."""
        with self._lock:
            from ..storage.documents import document_records  # here: 8 dataclasses a search never needs

            rows = document_records(self.conn, document_id=document_id)
        return rows[0] if rows else None

    @_retried
    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """All documents, or those of one collection, ordered by path."""
        with self._lock:
            from ..storage.documents import document_records

            return document_records(self.conn, collection=collection)

    def files(self, collection: str) -> dict[str, DocumentRecord]:
        """The documents of ``collection`` that are files under its root, by relative path."""
        from ..storage.documents import files_of

        return files_of(self.documents(collection))

    @_retried
    def get_chunks(self, *, node_ids: Sequence[str] | None = None, ids: Sequence[int] | None = None,
                   document_id: str | None = None, filters: Filter | None = None, with_embedding: bool = False,
                   collection: str | None = None) -> list[ChunkRecord]:
        """Chunks by node id, id, document, metadata filters and collection (all given), in document order."""
        if collection is not None:
            with self.read() as conn:
                if not collections_named(conn, [collection]):
                    return []
        where, args = _chunk_where(node_ids, ids, document_id, filters, collection)
        columns = CHUNK_COLUMNS + (", c.embedding" if with_embedding else "")
        with self._lock:
            rows = self.conn.execute(f"SELECT {columns} FROM chunks c JOIN documents d ON d.id = c.document_id"
                                     f" {where} ORDER BY c.document_id, c.ordinal", args, binary=with_embedding).fetchall()
        return [_chunk(r, with_embedding) for r in rows]

    @_retried
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors for chunks whose text hash is in ``hashes`` (for reuse)."""
        with self._lock:
            rows = self.conn.execute("SELECT text_hash, embedding FROM chunks WHERE embedding IS NOT NULL"
                                     " AND text_hash = ANY(%s)", (sorted(set(hashes)),), binary=True).fetchall()
        return {h: as_array(v) for h, v in rows}

    def counts(self) -> dict[str, Any]:
        """Documents, chunks, and documents per collection and status."""
        with self.read() as conn:
            docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
            chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            per = conn.execute("SELECT collection, status, count(*) FROM documents GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        collections: dict[str, dict[str, int]] = {}
        for name, status, n in per:
            collections.setdefault(name, {})[status] = n
        return {"documents": docs, "chunks": chunks, "collections": collections}


def _put_text(conn: Any, document_id: str, text: str | None) -> None:
    """``document_id``'s stored text replaced by ``text`` (None: removed), in the caller's write."""
    conn.execute("DELETE FROM document_texts WHERE document_id = %s", (document_id,))
    if text is not None:
        conn.execute("INSERT INTO document_texts (document_id, text) VALUES (%s, %s)", (document_id, text))
