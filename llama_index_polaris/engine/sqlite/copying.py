"""The SQLite store's rows out and in, for ``polaris copy`` (``ingest/copy.py``)."""

from __future__ import annotations

from typing import Any, Iterator

from .. import sqlite as db
from .schema import get_meta, has_table, set_meta
from ..storage.records import to_blob
from ..errors import InputError
from .rows import _chunk_from_row, _chunk_row, OWN_CHUNK_COLUMNS


class Copying:
    """An index's rows out of and into the file (``ingest/copy.py``): vectors move, nothing is re-embedded."""

    def export_rows(self, batch: int = 2_000) -> Iterator[tuple[str, Any]]:
        """Everything the index holds, for ``copy.copy_index``, in one snapshot: ("meta", dict),
        ("collection", (name, root)), ("document", DocumentRecord), then ("chunks", [ChunkRecord])
        by id, each with its own metadata and its vector."""
        from ..storage.documents import document_records, text_batches  # here: a search never copies

        with self.read() as conn:
            yield "meta", get_meta(conn)
            for row in conn.execute("SELECT name, root FROM collections ORDER BY name").fetchall():
                yield "collection", tuple(row)
            for doc in document_records(conn, as_added=True):
                yield "document", doc
            yield from text_batches(conn)
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
                elif kind == "texts":
                    conn.executemany("INSERT INTO document_texts (document_id, text) VALUES (?, ?)", value)
                elif kind == "chunks":
                    conn.executemany(
                        "INSERT INTO chunks (id, node_id, document_id, ordinal, heading_path, heading_level, text,"
                        " start_char, end_char, token_count, text_hash, metadata, embedding, node, cjk_text, cjk_heading)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [(c.id, *_chunk_row(c.document_id, c, None if c.embedding is None else to_blob(c.embedding)))
                         for c in value])
