"""BM25 on Postgres with FTS5's numbers: the same phrases, idf, lengths and ties.

FTS5's ``bm25()`` for a row is ``sum over the query's phrases of idf * (f * (k1 + 1)) /
(f + k1 * (1 - b + b * D / avgdl))`` with ``f`` the phrase's count in the row (over text
and heading path), ``D`` the row's length in tokens, ``avgdl`` the average over all rows
and ``idf = log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6), ``n`` the rows holding the
phrase. Here ``f`` and ``D`` come from ``chunks_bm25`` (written with the chunks, terms from
the index's own FTS5 tokenizer), ``N`` and the total length from ``chunks_bm25_stats``. A
query word of one term is read from its postings; a word of several terms (``rrf_k``,
``codegen-units``) is a phrase, found in the chunks holding all its terms by tokenizing
their text again. Sums run in the query's phrase order, as FTS5's do; ties go by chunk id.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..search.terms import query_words
from ..search.scoring import B, K1, top_hits
from ..search.scope import Scope
from ..tokenize import Tokenizer


def fts5_idf(n_rows: int, n_hit: int) -> float:
    """FTS5's idf (never below 1e-6)."""
    value = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5))
    return value if value > 0 else 1e-6


def fts5_terms(idf: float, tf: np.ndarray, dl: np.ndarray, avgdl: float) -> np.ndarray:
    """One phrase's BM25 term for each row, in FTS5's order of operations."""
    tf = tf.astype(np.float64)
    return idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1.0 - B + B * dl.astype(np.float64) / avgdl)))


def phrase_counts(positions: list[tuple[str, int, int]], phrase: Sequence[str]) -> int:
    """How often ``phrase`` (terms) occurs in a row's (term, column, offset) list: its terms at
    consecutive offsets of one column, as an FTS5 phrase matches."""
    at = {(col, off): term for term, col, off in positions}
    return sum(1 for term, col, off in positions if term == phrase[0]
               and all(at.get((col, off + i)) == t for i, t in enumerate(phrase[1:], start=1)))


def scope_sql(scope: Scope, column: str) -> tuple[str, list[Any]]:
    """``AND ...`` keeping ``column`` (a chunk id) inside ``scope``."""
    parts, args = [], []
    if scope.document_ids is not None:
        parts.append(f"{column} IN (SELECT id FROM chunks WHERE document_id = ANY(%s))")
        args.append(list(scope.document_ids))
    if scope.chunk_ids is not None:
        parts.append(f"{column} = ANY(%s)")
        args.append(list(scope.chunk_ids))
    return "".join(f" AND {p}" for p in parts), args


def bm25(conn: Any, tokenizer: Tokenizer, query: str, limit: int, scope: Scope = Scope()) -> list[tuple[int, float]]:
    """Up to ``limit`` chunks by BM25 in ``scope``: (chunk id, score), best first, ties by id."""
    words = query_words(query)
    if not words or scope.empty or limit <= 0:
        return []
    n_rows, total = conn.execute("SELECT n_rows, total_length FROM chunks_bm25_stats WHERE id = 1").fetchone()
    if not n_rows:
        return []
    avgdl = total / n_rows
    phrases = [p for p in tokenizer.terms(words) if p]
    where, args = scope_sql(scope, "chunk_id")
    singles = _singles(conn, sorted({p[0] for p in phrases if len(p) == 1}), where, args)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for phrase in phrases:
        if len(phrase) == 1:
            found = singles.get(phrase[0])
        else:
            found = _phrase(conn, tokenizer, phrase, n_rows, where, args)
        if found is not None:
            ids, tf, dl, n_hit = found
            parts.append((ids, fts5_terms(fts5_idf(n_rows, n_hit), tf, dl, avgdl)))
    if not parts:
        return []
    ids = np.unique(np.concatenate([p[0] for p in parts]))
    scores = np.zeros(len(ids))
    for part_ids, values in parts:  # phrase by phrase, as FTS5 adds them
        scores[np.searchsorted(ids, part_ids)] += values
    return top_hits(scores, limit, None, ids)


def _singles(conn: Any, terms: list[str], where: str, args: list[Any]) -> dict[str, tuple[np.ndarray, ...]]:
    """Each one-term phrase's postings in scope and its document frequency: two statements in all."""
    if not terms:
        return {}
    df = dict(conn.execute("SELECT term, df FROM chunks_bm25_terms WHERE term = ANY(%s)", (terms,)).fetchall())
    rows = conn.execute(f"SELECT term, chunk_id, tf, dl FROM chunks_bm25 WHERE term = ANY(%s){where} ORDER BY term",
                        (list(df), *args)).fetchall()
    out: dict[str, tuple[np.ndarray, ...]] = {}
    start = 0
    for end in range(1, len(rows) + 1):
        if end == len(rows) or rows[end][0] != rows[start][0]:
            data = np.array([r[1:] for r in rows[start:end]], dtype=np.int64)
            out[rows[start][0]] = (data[:, 0], data[:, 1], data[:, 2], int(df[rows[start][0]]))
            start = end
    return out


def _phrase(conn: Any, tokenizer: Tokenizer, phrase: Sequence[str], n_rows: int, where: str,
            args: list[Any]) -> tuple[np.ndarray, ...] | None:
    """A phrase's rows: every chunk holding all its terms is tokenized again (its count of rows,
    ``n_hit``, is over the whole index, as FTS5's; the rows returned are those in scope)."""
    terms = sorted(set(phrase))
    holders = conn.execute(
        "SELECT chunk_id FROM chunks_bm25 WHERE term = ANY(%s) GROUP BY chunk_id HAVING count(*) = %s",
        (terms, len(terms))).fetchall()
    if not holders:
        return None
    in_scope = {r[0] for r in conn.execute(
        f"SELECT chunk_id FROM unnest(%s::bigint[]) AS u(chunk_id) WHERE TRUE{where}",
        ([r[0] for r in holders], *args))} if where else None
    texts = conn.execute("SELECT id, text, heading_path, bm25_length FROM chunks WHERE id = ANY(%s) ORDER BY id",
                         ([r[0] for r in holders],)).fetchall()
    positions = tokenizer.positions([(r[0], r[1], r[2]) for r in texts])
    found = [(r[0], phrase_counts(positions[r[0]], phrase), r[3]) for r in texts]
    found = [f for f in found if f[1] > 0]
    n_hit = len(found)
    kept = [f for f in found if in_scope is None or f[0] in in_scope]
    if not kept:
        return None
    data = np.array(kept, dtype=np.int64)
    return data[:, 0], data[:, 1], data[:, 2], n_hit
