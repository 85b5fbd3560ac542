"""BM25 over FTS5, with user text made safe: each word quoted, words joined by OR.

A natural-language question must not become an AND of all its words, and FTS5
syntax in a query (quotes, ``*``, ``NEAR``, ``-``, ``:``) is text, never an operator.
A full-text error (FTS5 syntax, a missing or unreadable FTS table: SQLite's
OperationalError) degrades to an empty list (the spec's asymmetry); a damaged
database file is not a full-text error and is raised.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ..sqlite_module import sqlite_module
from ..storage.scope import Scope
from ..search.terms import COMPOUND, IDENTIFIER_PHRASES, MAX_TERMS, fts_query, phrases_query, query_words  # noqa: F401

log = logging.getLogger(__name__)
TEXT_WEIGHT, HEADING_WEIGHT = 1.0, 1.0


def bm25_sql(scope: Scope, *, ordered: bool = True) -> tuple[str, list[Any]]:
    """The FTS5 statement for ``scope``; parameters follow (match[, limit] when ``ordered``)."""
    where, args = scope.sql("rowid", None)
    sql = (
        f"SELECT rowid, -bm25(chunks_fts, {TEXT_WEIGHT}, {HEADING_WEIGHT}) AS score FROM chunks_fts"
        f" WHERE chunks_fts MATCH ?{where}"
    )
    if ordered:
        sql += f" ORDER BY bm25(chunks_fts, {TEXT_WEIGHT}, {HEADING_WEIGHT}), rowid LIMIT ?"  # ties: by id
    return sql, args


def bm25(conn: Any, query: str, limit: int, scope: Scope = Scope()) -> list[tuple[int, float]]:
    """Up to ``limit`` chunks by BM25: (chunk id, score, higher is better)."""
    match = fts_query(query)
    if match is None or scope.empty or limit <= 0:
        return []
    sql, args = bm25_sql(scope)
    params = [match, *args, limit]
    # bind order: MATCH ?, scope args, LIMIT ?
    try:
        return [(int(r), float(s)) for r, s in conn.execute(sql, params).fetchall()]
    except sqlite_module().OperationalError as exc:  # FTS syntax or a missing table: vector-only
        log.debug("full-text search failed, continuing without it: %s", exc)
        return []
