"""The Postgres store's rows out and in, for ``polaris copy`` (``ingest/copy.py``)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Sequence

from ..errors import InputError
from ..storage.records import ChunkRecord, DocumentRecord, check_status
from . import bm25 as bm25_module, schema
from .rows import _chunk, CHUNK_COLUMNS, _chunk_rows, CHUNK_TYPES, INSERT_COLUMNS, NOW


class Copying:
    """An index's rows out of and into the server (``ingest/copy.py``): vectors move, nothing is re-embedded."""

    # -- copying (``copy.py``) -----------------------------------------------------------
    def export_rows(self, batch: int = 2_000) -> Iterator[tuple[str, Any]]:
        """Everything the index holds, for ``copy.copy_index``: ("meta", dict), ("collection", (name,
        root)), ("document", DocumentRecord), then ("chunks", [(id, ChunkRecord with embedding)])."""
        from ..storage.documents import document_records, text_batches  # here: a search never copies

        with self.read() as conn:
            yield "meta", dict(conn.execute("SELECT key, value FROM polaris_meta").fetchall())
            for name, root in conn.execute("SELECT name, root FROM collections ORDER BY name").fetchall():
                yield "collection", (name, root)
            for doc in document_records(conn, as_added=True):
                yield "document", doc
            yield from text_batches(conn)
            last = -1
            while True:
                rows = conn.execute(f"SELECT {CHUNK_COLUMNS}, c.embedding FROM chunks c JOIN documents d"
                                    " ON d.id = c.document_id WHERE c.id > %s ORDER BY c.id LIMIT %s",
                                    (last, batch), binary=True).fetchall()
                if not rows:
                    return
                last = rows[-1][0]
                yield "chunks", [_chunk(r, True, own=True) for r in rows]

    def import_rows(self, items: Iterable[tuple[str, Any]]) -> None:
        """Write what ``export_rows`` gives (of any backend) into this empty index, ids and vectors
        as they are, in one transaction; then VACUUM (ANALYZE) the tables. Bulk: documents, chunks
        and postings go in by COPY, and the posting table's keys and indexes are built once at
        the end (a 1M-chunk index has some 50M postings)."""
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is not None:
                raise InputError(f"{self.path} already holds documents; copy into a new, empty index.")
            conn.execute("SELECT set_config('maintenance_work_mem', '1GB', true)")
            rebuild = schema.set_aside_keys(conn, "chunks_bm25")
            documents: list[DocumentRecord] = []
            for kind, value in items:
                if kind == "meta":
                    keep = {k: v for k, v in value.items() if k != "schema_version"}
                    self._set_meta(conn, **keep)
                    if "embedding_dim" in keep:
                        schema.retype_vectors(conn, int(keep["embedding_dim"]))
                elif kind == "collection":
                    conn.execute("INSERT INTO collections (name, root) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
                                 " SET root = excluded.root", value)
                elif kind == "document":
                    documents.append(value)
                elif kind == "texts":
                    self._copy_documents(conn, documents)
                    documents = []
                    with conn.cursor() as cur, cur.copy("COPY document_texts (document_id, text) FROM STDIN") as copy:
                        for row in value:
                            copy.write_row(row)
                elif kind == "chunks":
                    self._copy_documents(conn, documents)
                    documents = []
                    self._copy_chunks(conn, value)
            self._copy_documents(conn, documents)
            for statement in rebuild:
                conn.execute(statement)
            conn.execute("SELECT setval(pg_get_serial_sequence('chunks', 'id'), coalesce(max(id), 0) + 1, false)"
                         " FROM chunks")
        with self._lock:  # the planner's statistics and the visibility map now, not at autovacuum's next visit
            self.conn.execute("VACUUM (ANALYZE) documents, document_texts, chunks, chunks_bm25, chunks_bm25_terms")

    def _copy_documents(self, conn: Any, documents: Sequence[DocumentRecord]) -> None:
        """Exported document rows, in their order (which numbers their ``rowid``), by one COPY."""
        if not documents:
            return
        for doc in documents:
            check_status(doc.status)
        conn.execute("INSERT INTO collections (name) SELECT DISTINCT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                     (sorted({d.collection for d in documents}),))
        now = conn.execute(f"SELECT {NOW}").fetchone()[0]
        with conn.cursor() as cur, cur.copy("COPY documents (id, path, name, collection, status, error, content_hash,"
                                            " metadata, created_at, updated_at) FROM STDIN") as copy:
            for d in documents:
                copy.write_row((d.id, d.path, d.name, d.collection, d.status, d.error, d.content_hash,
                                json.dumps(d.metadata, default=str), d.created_at or now, d.updated_at or now))

    def _copy_chunks(self, conn: Any, chunks: Sequence[ChunkRecord]) -> None:
        """Exported chunks (ids and vectors as they are) and their postings, by COPY."""
        if not chunks:
            return
        counted = self.tokenizer().positions([(i, c.text, c.heading_path) for i, c in enumerate(chunks)])
        lengths = [len(counted[i]) for i in range(len(chunks))]
        with conn.cursor() as cur, cur.copy(f"COPY chunks (id, {INSERT_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(CHUNK_TYPES)
            for row in _chunk_rows(chunks, [c.embedding for c in chunks], lengths):
                copy.write_row(row)
        postings = bm25_module.postings_of((c.id, counted[i]) for i, c in enumerate(chunks))
        bm25_module.copy_postings(conn, postings)
        self._delta.add(len(chunks), sum(lengths), (p[0] for p in postings))
