"""A chunk as a row of the server's tables, both ways, and what every group of ``PgStore`` reads with."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any, Sequence

import numpy as np

from ..storage import vectors as vectors_module
from ..storage.records import ChunkRecord
from ..storage.filters import Filter, filter_sql_pg, with_document_id
from ..text import nfc, storable
from . import schema
from .json_patch import merged

log = logging.getLogger(__package__ + ".store")  # the store's one logger, whichever group logs


NOW = schema.NOW


CHUNK_COLUMNS = ("c.id, c.node_id, c.document_id, c.ordinal, c.heading_path, c.heading_level, c.text, c.start_char,"
                 " c.end_char, c.token_count, d.metadata, c.metadata, c.text_hash, c.node")


INSERT_COLUMNS = ("node_id, document_id, ordinal, heading_path, heading_level, text, start_char, end_char,"
                  " token_count, text_hash, metadata, embedding, node, bm25_length")


CHUNK_TYPES = ("bigint", "text", "text", "integer", "text", "integer", "text", "integer", "integer", "integer",
               "text", "text", "vector", "text", "integer")  # id, then INSERT_COLUMNS (a binary COPY's types)


def _chunk_rows(chunks: Sequence[ChunkRecord], vecs: Sequence[Any], lengths: Sequence[int],
                document_id: str | None = None) -> list[tuple]:
    """(id, then INSERT_COLUMNS) for each chunk of ``document_id`` (else of its own document; the id
    is None for a chunk not yet stored)."""
    return [(c.id, c.node_id, document_id or c.document_id, c.ordinal, c.heading_path, c.heading_level, c.text, c.start_char,
             c.end_char, c.token_count, c.text_hash, json.dumps(c.metadata, default=str), v, c.node, n)
            for c, v, n in zip(chunks, vecs, lengths)]


def as_array(value: Any) -> np.ndarray:
    """A pgvector value (``Vector``, or an array) as a float32 numpy array."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def rescore(rows: Sequence[tuple[int, Any]], query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` rows (id, float32 vector) nearest ``query`` by float32 cosine distance, ties by id."""
    if not rows:
        return []
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    matrix = np.array([as_array(r[1]) for r in rows], dtype=np.float32)
    from ..storage.cosine import rescore as exact

    return exact(ids, matrix, query, k)


def _vector(value: Any, dim: int | None) -> np.ndarray | None:
    if value is None:
        return None
    v = as_array(value)
    return None if vectors_module.problem(v, dim) is not None else v


def _chunk(r: Sequence[Any], with_embedding: bool, own: bool = False) -> ChunkRecord:
    metadata = json.loads(r[11]) if own else merged(r[10], r[11])
    embedding = None
    if with_embedding and r[14] is not None:
        embedding = as_array(r[14])
    return ChunkRecord(id=r[0], node_id=r[1], document_id=r[2], ordinal=r[3], heading_path=r[4], heading_level=r[5],
                       text=r[6], start_char=r[7], end_char=r[8], token_count=r[9], metadata=metadata,
                       text_hash=r[12], node=r[13], embedding=embedding)


def _chunk_where(node_ids: Any, ids: Any, document_id: Any, filters: Filter | None = None,
                 collection: str | None = None) -> tuple[str, tuple]:
    """WHERE over ``chunks c JOIN documents d``; filters see the merged metadata."""
    parts: list[str] = []
    args: list[Any] = []
    if collection is not None:
        parts.append("d.collection = %s")
        args.append(nfc(collection))
    if node_ids is not None:
        parts.append("c.node_id = ANY(%s)")
        args.append([storable(i) for i in node_ids])
    if ids is not None:
        parts.append("c.id = ANY(%s)")
        args.append([int(i) for i in ids])
    if document_id is not None:
        parts.append("c.document_id = %s")
        args.append(storable(document_id))
    if filters is not None:
        sql, params = filter_sql_pg(filters, with_document_id(filters, "(d.metadata::jsonb || c.metadata::jsonb)", True))
        parts.append(f"({sql.replace('?', '%s')})")
        args += params
    return ("WHERE " + " AND ".join(parts) if parts else ""), tuple(args)


def _retried(read: Any) -> Any:
    """A PgStore read of autocommit statements, run again once on a new connection when the
    connection is found lost (``PgStore._reading``). Reads only: a write is never retried."""

    @functools.wraps(read)
    def retried(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._reading(lambda: read(self, *args, **kwargs))

    return retried
