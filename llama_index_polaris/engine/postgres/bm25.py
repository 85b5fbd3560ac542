"""BM25 on Postgres with FTS5's numbers: the same phrases, idf, lengths and ties.

FTS5's ``bm25()`` for a row is ``sum over the query's phrases of idf * (f * (k1 + 1)) /
(f + k1 * (1 - b + b * D / avgdl))`` with ``f`` the phrase's count in the row (over text
and heading path), ``D`` the row's length in tokens, ``avgdl`` the average over all rows
and ``idf = log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6), ``n`` the rows holding the
phrase. Here ``f`` and ``D`` come from ``chunks_bm25`` (written with the chunks, terms from
the index's own FTS5 tokenizer), ``N`` and the total length from ``chunks_bm25_stats``. A
query word of one term is scored from its postings on the server; a word of several terms (``rrf_k``,
``codegen-units``) is a phrase, found in the chunks holding all its terms by tokenizing
their text again. Sums run in the query's phrase order, as FTS5's do; ties go by chunk id.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..search.terms import query_words
from ..search.scoring import B, K1
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
    """Up to ``limit`` chunks by BM25 in ``scope``: (chunk id, score), best first, ties by id.

    Scored on the server: each one-term phrase's postings are joined and summed in SQL, in the
    query's phrase order with FTS5's order of operations (so the sums are the same doubles), and
    only the best ``limit`` rows come back; a phrase of several terms is counted here
    (``_phrase``) and its terms sent along as arrays."""
    words = query_words(query)
    if not words or scope.empty or limit <= 0:
        return []
    n_rows, total = conn.execute("SELECT n_rows, total_length FROM chunks_bm25_stats WHERE id = 1").fetchone()
    if not n_rows:
        return []
    avgdl = total / n_rows
    phrases = [p for p in tokenizer.terms(words) if p]
    where, args = scope_sql(scope, "p.chunk_id")
    singles = sorted({p[0] for p in phrases if len(p) == 1})
    df = dict(conn.execute("SELECT term, df FROM chunks_bm25_terms WHERE term = ANY(%s)", (singles,)).fetchall()) \
        if singles else {}
    terms, term_ords, idfs = [], [], []
    extra_ids, extra_ords, extra_values = [], [], []
    for ord_, phrase in enumerate(phrases):
        if len(phrase) == 1:
            if phrase[0] in df:
                terms.append(phrase[0])
                term_ords.append(ord_)
                idfs.append(fts5_idf(n_rows, int(df[phrase[0]])))
            continue
        found = _phrase(conn, tokenizer, phrase, n_rows, where.replace("p.chunk_id", "chunk_id"), args)
        if found is not None:
            ids, tf, dl, n_hit = found
            extra_ids.extend(int(i) for i in ids)
            extra_ords.extend([ord_] * len(ids))
            extra_values.extend(float(v) for v in fts5_terms(fts5_idf(n_rows, n_hit), tf, dl, avgdl))
    if not terms and not extra_ids:
        return []
    query_arrays, extras = (terms, term_ords, idfs), (extra_ids, extra_ords, extra_values)
    common, bound = _common_terms(conn, where, args, query_arrays, extras, avgdl, limit,
                                  {t: int(df[t]) for t in terms}, n_rows)
    if common:
        # MaxScore: a chunk holding none of the other terms scores below ``bound`` (the most the
        # common terms can add); once the limit-th best chunk holding one reaches it, the list is exact
        rows = _ranked(conn, where, args, (*query_arrays, [t in common for t in terms]), extras, avgdl, bound, limit)
        if len(rows) == limit and rows[-1][1] >= bound:
            return rows
    return _ranked(conn, where, args, (*query_arrays, [False] * len(terms)), extras, avgdl, 0.0, limit)


COMMON_SHARE, COMMON_MIN_ROWS = 0.1, 2_000  # a term in more rows than both may be left out
HEADROOM = 0.5  # the common terms' bound is kept below this share of the other terms' limit-th best


def _common_terms(conn: Any, where: str, args: list[Any], query: tuple[list, ...], extras: tuple[list, ...],
                  avgdl: float, limit: int, dfs: dict[str, int], n_rows: int) -> tuple[set[str], float]:
    """The terms left out of the candidates, and the most they can add to a score: the terms in
    many rows, least weight first, while their bound stays under ``HEADROOM`` of the limit-th best
    score the other terms give (one statement over the other terms' postings)."""
    terms = query[0]
    cutoff = max(COMMON_MIN_ROWS, int(COMMON_SHARE * n_rows))
    weight = {t: terms.count(t) * fts5_idf(n_rows, dfs[t]) * (K1 + 1.0) for t in dfs}
    heavy = sorted((t for t in dfs if dfs[t] > cutoff), key=lambda t: (weight[t], t))
    if not heavy:
        return set(), 0.0
    if len(heavy) == len(dfs) and not extras[0]:
        heavy.pop()  # the rarest stays
    if not heavy:
        return set(), 0.0
    flags = [t in heavy for t in terms]
    floor = conn.execute(FLOOR.format(where=where), (*query, flags, K1 + 1.0, K1, 1.0 - B, B, avgdl, *args, *extras,
                                                     limit - 1)).fetchone()[0]
    common, bound = set(), 0.0
    for t in heavy:
        if bound + weight[t] > HEADROOM * floor:
            break
        common.add(t)
        bound += weight[t]
    return common, bound


def _ranked(conn: Any, where: str, args: list[Any], query: tuple[list, ...], extras: tuple[list, ...],
            avgdl: float, bound: float, limit: int) -> list[tuple[int, float]]:
    """The best ``limit`` chunks holding a term not flagged common (or an ``extras`` row), each
    scored with every term in the query's phrase order."""
    constants = (K1 + 1.0, K1, 1.0 - B, B, avgdl)
    rows = conn.execute(RANKED.format(where=where), (*query, *constants, *args, *extras, bound, limit - 1, *constants,
                                                     limit - 1, limit)).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


# one phrase's BM25 term in FTS5's order of operations (parameters: k1 + 1, k1, 1 - b, b, avgdl)
TERM = ("q.idf * ((p.tf::float8 * %s::float8) / (p.tf::float8 + %s::float8"
        " * (%s::float8 + %s::float8 * p.dl::float8 / %s::float8)))")
# ``rare``: the postings of the terms not flagged common (and the phrases' rows); ``kept``: the
# chunks among them whose partial sum plus ``bound`` can reach the limit-th best partial sum;
# ``common``: the common terms looked up for those chunks alone (an index probe each); ``top``:
# the kept chunks whose unordered sum is within rounding of the limit-th best; only those are
# summed again in the query's phrase order (FTS5's doubles) and ordered, ties by chunk id.
RARE = (
    "WITH q(term, ord, idf, common) AS (SELECT * FROM unnest(%s::text[], %s::int[], %s::float8[], %s::bool[])),"
    f" rare(chunk_id, ord, v) AS MATERIALIZED (SELECT p.chunk_id, q.ord, {TERM} FROM q JOIN chunks_bm25 p"
    " ON p.term = q.term{where} WHERE NOT q.common"
    " UNION ALL SELECT * FROM unnest(%s::bigint[], %s::int[], %s::float8[])),")
# the limit-th best partial sum of the terms not flagged common (0 when fewer chunks hold one)
FLOOR = (RARE + " partial AS (SELECT sum(v) AS s FROM rare GROUP BY chunk_id)"
         " SELECT coalesce((SELECT s FROM partial ORDER BY s DESC OFFSET %s LIMIT 1), 0)")
RANKED = (RARE +
    " partial AS MATERIALIZED (SELECT chunk_id, sum(v) AS s FROM rare GROUP BY chunk_id),"
    " kept AS MATERIALIZED (SELECT chunk_id FROM partial WHERE s + %s::float8 >= (1 - 1e-9) * coalesce("
    "  (SELECT s FROM partial ORDER BY s DESC OFFSET %s LIMIT 1), 0))"
    + f", common(chunk_id, ord, v) AS MATERIALIZED (SELECT k.chunk_id, q.ord, x.v FROM kept k CROSS JOIN q"
    f" CROSS JOIN LATERAL (SELECT {TERM} AS v FROM chunks_bm25 p WHERE p.term = q.term AND p.chunk_id = k.chunk_id"
    " OFFSET 0) x WHERE q.common),"
    " parts AS MATERIALIZED (SELECT r.* FROM rare r JOIN kept USING (chunk_id) UNION ALL SELECT * FROM common),"
    " total AS MATERIALIZED (SELECT chunk_id, sum(v) AS s FROM parts GROUP BY chunk_id),"
    " top AS (SELECT chunk_id FROM total WHERE s >= (1 - 1e-9) * coalesce("
    "  (SELECT s FROM total ORDER BY s DESC OFFSET %s LIMIT 1), 0))"
    " SELECT chunk_id, sum(v ORDER BY ord) AS score FROM parts JOIN top USING (chunk_id) GROUP BY chunk_id"
    " HAVING sum(v ORDER BY ord) > 0 ORDER BY score DESC, chunk_id LIMIT %s")


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
    positions = tokenizer.positions([(r[0], r[1], r[2]) for r in texts], sorted(set(phrase)))
    found = [(r[0], phrase_counts(positions[r[0]], phrase), r[3]) for r in texts]
    found = [f for f in found if f[1] > 0]
    n_hit = len(found)
    kept = [f for f in found if in_scope is None or f[0] in in_scope]
    if not kept:
        return None
    data = np.array(kept, dtype=np.int64)
    return data[:, 0], data[:, 1], data[:, 2], n_hit
