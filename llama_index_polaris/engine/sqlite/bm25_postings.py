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
from typing import Any, Callable, Mapping

import numpy as np

from . import bm25 as fts
from .bm25 import bm25_sql, phrases_query, query_words
from ..storage.scope import Scope
from . import postings as lists
from ..words.tokenize import Tokenizer
from ..storage.scoring import B, K1, PRUNE_FROM, Term, idf, located, phrase_scores, top_hits, top_pruned  # noqa: F401



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
    # each term's blocks and chunks, from the rows' lengths alone (SQLite reads no blob for length())
    blocks_of: dict[str, list[int]] = defaultdict(list)
    df: dict[str, int] = defaultdict(int)
    for term, block, size in conn.execute(
            "SELECT term, block, length(rows) FROM chunks_bm25 WHERE term IN (SELECT value FROM json_each(?))",
            (json.dumps(common),)):
        blocks_of[term].append(block)
        df[term] += size // 2
    common = sorted(blocks_of)  # the order the scores are summed in: the same on every path
    if not common:
        return None
    blocks = sorted({b for bs in blocks_of.values() for b in bs})
    size = (blocks[-1] + 1) * lists.BLOCK
    lengths = np.zeros(size, dtype=np.float64)
    for block, blob in conn.execute(
            "SELECT block, lengths FROM chunks_bm25_lengths WHERE block IN (SELECT value FROM json_each(?))",
            (json.dumps(blocks),)):
        lengths[block * lists.BLOCK:(block + 1) * lists.BLOCK] = lists._decode_lengths(blob)
    # Each query word is a phrase of bm25(): two words with one term ("death", "deaths")
    # count it twice there, so here too.
    times = {term: sum(1 for t in terms if t == (term,)) for term in common}
    weight = {term: idf(n_rows, df[term]) for term in common}
    rare = [w for w, t in zip(words, terms) if not (len(t) == 1 and t[0] in blocks_of)]
    fts_ids, fts_scores = _fts_scores(conn, phrases_query(rare)) if rare else (_NO_IDS, _NO_SCORES)
    from .ann import scope_chunk_ids

    allowed = scope_chunk_ids(conn, scope)
    if sum(df.values()) >= PRUNE_FROM:
        return _top_pruned(conn, common, blocks_of, times, weight, lengths, avg_length, fts_ids, fts_scores, limit, allowed)
    scores = np.zeros(max(size, int(fts_ids.max()) + 1 if len(fts_ids) else 0), dtype=np.float64)
    for term in common:
        ids, part = _contribution(_read(conn, term), times[term], weight[term], lengths, avg_length)
        scores[ids] += part
    scores[fts_ids] += fts_scores
    return top_hits(scores, limit, None if allowed is None else allowed[allowed < len(scores)])


_NO_IDS, _NO_SCORES = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)


def _read(conn: Any, term: str, blocks: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``term``'s (chunk ids, counts), ids ascending: every block of it, or only ``blocks``."""
    if blocks is None:
        rows = conn.execute("SELECT block, rows, tf FROM chunks_bm25 WHERE term = ?", (term,)).fetchall()
    else:
        rows = [r[1:] for r in conn.execute(lists.BLOCKS_OF_KEYS, (json.dumps([[term, b] for b in blocks]),))]
    return _join(rows) if rows else (_NO_IDS, np.zeros(0, dtype=np.uint8))


def _contribution(posting: tuple[np.ndarray, np.ndarray], times: int, weight: float, lengths: np.ndarray,
                  avg_length: float) -> tuple[np.ndarray, np.ndarray]:
    """(ids, each one's BM25 term) of one posting list, as ``bm25()`` sums it."""
    ids, tf = posting
    tf = tf * fts.TEXT_WEIGHT  # float64, the counts exact
    part = phrase_scores(tf, lengths[ids], avg_length, weight)
    return ids, (part if times == 1 else times * part)


def _top_pruned(conn: Any, common: list[str], blocks_of: Mapping[str, list[int]], times: Mapping[str, int],
                weight: Mapping[str, float], lengths: np.ndarray, avg_length: float, fts_ids: np.ndarray,
                fts_scores: np.ndarray, limit: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
    """The dense path's top ``limit``, the same floats to the bit (``scoring.top_pruned``): a
    term not taken whole is read only in the blocks of the chunks that could still rise (all of
    it when those are half its blocks or more)."""
    def every(term: str) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        return lambda: _contribution(_read(conn, term), times[term], weight[term], lengths, avg_length)

    def at(term: str) -> Callable[[np.ndarray], np.ndarray]:
        def read(cand: np.ndarray) -> np.ndarray:
            wanted = set((cand // lists.BLOCK).tolist())
            blocks = [b for b in blocks_of[term] if b in wanted]
            ids, tf = _read(conn, term, blocks if 2 * len(blocks) < len(blocks_of[term]) else None)
            where, hit = located(ids, cand)
            part = np.zeros(len(cand), dtype=np.float64)
            if hit.any():
                part[hit] = _contribution((cand[hit], tf[where[hit]]), times[term], weight[term], lengths, avg_length)[1]
            return part
        return read

    terms = [Term(weight[t] * (K1 + 1.0) * times[t], every(t), at(t)) for t in common]
    size = max(len(lengths), int(fts_ids.max()) + 1 if len(fts_ids) else 0)
    cand, exact = top_pruned(terms, (fts_ids, fts_scores), size, limit, allowed)
    return top_hits(exact, limit, ids=cand)


def _fts_scores(conn: Any, match: str) -> tuple[np.ndarray, np.ndarray]:
    """FTS5's (chunk ids, bm25()) of the phrases in ``match`` (a full-text error: none)."""
    from .connect import sqlite_module

    sql, args = bm25_sql(Scope(), ordered=False)
    try:
        found = conn.execute(sql, [match, *args]).fetchall()
    except sqlite_module().OperationalError:  # as the plain path: a full-text error loses these words only
        return _NO_IDS, _NO_SCORES
    ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
    return ids, np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))

