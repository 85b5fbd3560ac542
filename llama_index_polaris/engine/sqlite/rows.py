"""A chunk as a row of the SQLite file, both ways: the columns read, the WHERE of a chunk query."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from ..storage import vectors as vectors_module
from .schema import MERGED_METADATA, cjk_columns
from ..storage.records import ChunkRecord
from ..storage.filters import Filter, filter_sql, with_document_id
from ..text import nfc, storable


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
        sql, params = filter_sql(filters, with_document_id(filters, f"({MERGED_METADATA})"))
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
