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

from ..db.connect import sqlite_module
from ..text import nfc
from .scope import Scope
from .terms import MARKS, STOP_WORDS, words

log = logging.getLogger(__name__)
MAX_TERMS = 64
TEXT_WEIGHT, HEADING_WEIGHT = 1.0, 1.0


# An identifier written with joining punctuation: codegen-units, build.rustflags, cargo::rustc-cfg.
COMPOUND = re.compile(rf"\w[\w{MARKS}]*(?:(?:[-.:/]|::)\w[\w{MARKS}]*)+", re.UNICODE)
IDENTIFIER_PHRASES = True


def query_words(query: str) -> list[str]:
    """The distinct words searched for: stop words dropped unless nothing else is left.

    An identifier joined by punctuation (``codegen-units``) is searched as its words and
    as itself, which FTS5 reads as a phrase: the words next to each other, in order. A
    phrase is rare, so its BM25 weight is high: chunks that name the identifier exactly
    rise above those that use its words apart. The query is read in NFC, as stored text is.
    """
    query = nfc(query)
    all_words = list(dict.fromkeys(words(query)))
    content = [w for w in all_words if w not in STOP_WORDS] or all_words
    if IDENTIFIER_PHRASES:
        compounds = [m.lower() for m in COMPOUND.findall(query)]
        content = list(dict.fromkeys([*compounds, *content]))
    return content[:MAX_TERMS]


def phrases_query(query_words: list[str]) -> str:
    """``words`` as an FTS5 MATCH expression: each one a quoted phrase, joined by OR."""
    return " OR ".join(f'"{w}"' for w in query_words)


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression for user text: distinct quoted words joined by OR.

    Stop words are dropped unless nothing else is left. Each word is a quoted string,
    so FTS5 applies its tokenizer (``rrf_k`` becomes the phrase "rrf k") and no
    character of the query is read as syntax. None when the query has no words.
    """
    content = query_words(query)
    return phrases_query(content) if content else None


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
