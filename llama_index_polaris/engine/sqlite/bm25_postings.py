"""Posting lists of common terms kept in polaris.db: BM25 without FTS5's per-row cost (#17).

An FTS5 OR query scores every chunk that holds any query word with ``bm25()``; for
questions with common words that is tens of thousands of chunks at 100k and hundreds of
thousands at 1M, and the per-row function is about 85% of the time (docs/benchmarks.md).
BM25 is a sum over the query's phrases, so the common one-term phrases can be scored
apart. For every term in at least ``COMMON_DF`` chunks (stop words aside: queries drop
them) the file keeps which chunks hold it and how often (``chunks_bm25``, one row per
term and block of ``BLOCK`` chunk ids), and every chunk's length in tokens
(``chunks_bm25_lengths``), both as FTS5 counts them. A query scores its common terms from
those rows with numpy and leaves its other words to FTS5: the scores of ``bm25()``, to
rounding, and the same ties (by chunk id).

The lists are kept by the SQLite backend (``db/postings.py``); this module reads and
scores them. A reader uses the postings only when no chunk is dirty: a write that did not
flush (any other writer) makes search fall back to FTS5, never to a wrong score. A term
is counted from the write that takes it to ``COMMON_DF`` chunks (built then from FTS5's
own vocabulary).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np

from . import bm25 as fts
from .bm25 import bm25_sql, phrases_query, query_words
from ..storage.scope import Scope
from . import postings as lists
from ..words.tokenize import Tokenizer
from ..storage.scoring import B, K1, idf, phrase_scores, top_hits  # noqa: F401



# -- search ------------------------------------------------------------------------------
def usable(conn: Any) -> bool:
    """True when the posting lists match chunks_fts (no chunk changed since the last flush)."""
    if fts.TEXT_WEIGHT != fts.HEADING_WEIGHT:
        return False  # the lists hold counts over both columns, which then weigh differently
    return conn.execute(f"SELECT 1 FROM {lists.DIRTY} LIMIT 1").fetchone() is None


def posting(conn: Any, term: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``term``'s (chunk ids, counts over both columns) from the file, ids ascending; None when
    it has no posting list or the lists are behind the chunks."""
    from .connect import sqlite_module

    try:
        if not usable(conn) or conn.execute("SELECT 1 FROM chunks_bm25_terms WHERE term = ?", (term,)).fetchone() is None:
            return None
        rows = conn.execute("SELECT block, rows, tf FROM chunks_bm25 WHERE term = ?", (term,)).fetchall()
    except sqlite_module().OperationalError:
        return None
    return _join(rows)


def _join(rows: list[tuple[int, bytes, bytes]]) -> tuple[np.ndarray, np.ndarray]:
    """One term's (block, offsets, counts) rows as chunk ids and counts, ids ascending."""
    sizes = np.fromiter((len(r[1]) // 2 for r in rows), dtype=np.int64, count=len(rows))
    blocks = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    order = np.argsort(blocks, kind="stable")
    rows = [rows[i] for i in order]
    ids = np.repeat(blocks[order] * lists.BLOCK, sizes[order]) + np.frombuffer(b"".join(r[1] for r in rows), dtype="<u2")
    if all(len(r[2]) == len(r[1]) // 2 for r in rows):  # every count under 256: one byte each
        tf = np.frombuffer(b"".join(r[2] for r in rows), dtype="u1")
    else:
        tf = np.concatenate([lists._decode(r[1], r[2])[1].astype(np.int64) for r in rows]) if rows else np.zeros(0, np.int64)
    return ids, tf


def bm25(conn: Any, tokenizer: Tokenizer, query: str, limit: int, scope: Scope = Scope()) -> list[tuple[int, float]] | None:
    """What ``bm25.bm25(conn, query, limit, scope)`` returns, common terms scored from the
    file's posting lists; None when they cannot answer (none of the query's terms has one,
    or the lists are behind the chunks): the caller asks FTS5."""
    from .connect import sqlite_module

    words = query_words(query)
    if not words or scope.empty or limit <= 0:
        return []
    try:
        return _bm25(conn, tokenizer, words, limit, scope)
    except sqlite_module().OperationalError:  # no posting tables (or chunks_fts unreadable): FTS5 decides
        return None


def _bm25(conn: Any, tokenizer: Tokenizer, words: list[str], limit: int, scope: Scope) -> list[tuple[int, float]] | None:
    terms = tokenizer.terms(words)
    singles = sorted({t[0] for t in terms if len(t) == 1})
    common = [r[0] for r in conn.execute(
        "SELECT term FROM chunks_bm25_terms WHERE term IN (SELECT value FROM json_each(?))", (json.dumps(singles),))]
    if not common or not usable(conn):
        return None
    n_rows, avg_length = lists.averages(conn)
    postings: dict[str, list[tuple[int, bytes, bytes]]] = defaultdict(list)
    for term, block, offsets, tf in conn.execute(
            "SELECT term, block, rows, tf FROM chunks_bm25 WHERE term IN (SELECT value FROM json_each(?))",
            (json.dumps(common),)):
        postings[term].append((block, offsets, tf))
    blocks = sorted({p[0] for ps in postings.values() for p in ps})
    size = ((blocks[-1] + 1) * lists.BLOCK) if blocks else 0
    lengths = np.zeros(size, dtype=np.float64)
    for block, blob in conn.execute(
            "SELECT block, lengths FROM chunks_bm25_lengths WHERE block IN (SELECT value FROM json_each(?))",
            (json.dumps(blocks),)):
        lengths[block * lists.BLOCK:(block + 1) * lists.BLOCK] = lists._decode_lengths(blob)
    scores = np.zeros(size, dtype=np.float64)
    # Each query word is a phrase of bm25(): two words with one term ("death", "deaths")
    # count it twice there, so here too.
    times = {term: sum(1 for t in terms if t == (term,)) for term in postings}
    for term, parts in postings.items():
        ids, tf = _join(parts)
        tf = tf * fts.TEXT_WEIGHT  # float64, the counts exact
        part = phrase_scores(tf, lengths[ids], avg_length, idf(n_rows, len(ids)))
        scores[ids] += part if times[term] == 1 else times[term] * part
    rare = [w for w, t in zip(words, terms) if not (len(t) == 1 and t[0] in postings)]
    if rare:
        scores = _add_fts(conn, scores, phrases_query(rare))
    return _top(conn, scores, limit, scope)


def _add_fts(conn: Any, scores: np.ndarray, match: str) -> np.ndarray:
    """``scores`` plus FTS5's bm25() of the phrases in ``match`` (a full-text error adds nothing)."""
    from .connect import sqlite_module

    sql, args = bm25_sql(Scope(), ordered=False)
    try:
        found = conn.execute(sql, [match, *args]).fetchall()
    except sqlite_module().OperationalError:  # as the plain path: a full-text error loses these words only
        return scores
    if not found:
        return scores
    ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
    if ids.max() >= len(scores):
        scores = np.concatenate([scores, np.zeros(int(ids.max()) + 1 - len(scores))])
    scores[ids] += np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
    return scores


def _top(conn: Any, scores: np.ndarray, limit: int, scope: Scope) -> list[tuple[int, float]]:
    """The ``limit`` best-scoring chunk ids in ``scope`` (``scores`` is indexed by chunk id)."""
    from .ann import scope_chunk_ids

    allowed = scope_chunk_ids(conn, scope)
    return top_hits(scores, limit, None if allowed is None else allowed[allowed < len(scores)])
