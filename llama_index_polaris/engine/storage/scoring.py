"""BM25 maths, pure: FTS5's constants and idf, one phrase's term, the best hits of a score array,
and the top of a sum of terms without scoring every posting (MaxScore, ``top_pruned``).

Shared by the SQLite backend's posting lists (``search/postings.py``, ``search/bm25_cache.py``)
and the Postgres backend (``postgres/bm25.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

K1, B = 1.2, 0.75  # the constants of FTS5's bm25()


def idf(n_rows: int, n_hit: int) -> float:
    """FTS5's inverse document frequency (never below 1e-6)."""
    value = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5))
    return value if value > 0 else 1e-6


def phrase_scores(tf: np.ndarray, lengths: np.ndarray, avg_length: float, weight: float) -> np.ndarray:
    """One phrase's BM25 term for each chunk holding it (``weight`` is its idf)."""
    tf = np.asarray(tf, dtype=np.float64)
    # weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths / avg_length)), the same operations in
    # the same order (so the same bits) in place: a million postings made six fresh 8 MB temporaries
    d = np.multiply(lengths, B, dtype=np.float64)
    d /= avg_length
    d += 1.0 - B
    d *= K1
    d += tf
    out = np.multiply(tf, weight)
    out *= K1 + 1.0
    out /= d
    return out


SAMPLE_STRIDE = 64  # top_hits looks at every 64th score first


def _floor(scores: np.ndarray, limit: int) -> float:
    """A score no higher than the ``limit``-th best positive one, from a strided sample: the
    sample's own ``limit``-th best when it has that many (the whole array holds at least those),
    else the smallest positive number. Only the scores at or above it are sorted then (at 1M
    chunks the positive ones were 700k)."""
    tiny = np.nextafter(0.0, 1.0)
    if limit <= 0 or len(scores) < SAMPLE_STRIDE * limit * 4:
        return tiny
    sample = scores[::SAMPLE_STRIDE]
    sample = sample[sample > 0]
    if len(sample) < limit:
        return tiny
    return max(float(np.partition(sample, len(sample) - limit)[len(sample) - limit]), tiny)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-d array, sorted: ``np.unique`` by a sort (numpy 2.4's hashing
    ``np.unique`` took 68 ms for 90k chunk ids where this takes 2.6 ms)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def top_hits(scores: np.ndarray, limit: int, allowed: np.ndarray | None = None,
             ids: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The ``limit`` best positive scores as (chunk id, score), best first, ties by chunk id
    as FTS5 orders them. ``allowed``: the positions that may be returned (None: all);
    ``ids``: each position's chunk id (None: the position is the id)."""
    if allowed is not None:
        kept = np.zeros(len(scores))
        kept[allowed] = scores[allowed]
        scores = kept
    hits = np.flatnonzero(scores >= _floor(scores, limit))
    k = min(limit, len(hits))
    if k == 0:
        return []
    kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
    top = hits[scores[hits] >= kth]  # every chunk tied with the k-th, so ties go by id
    chunk = top if ids is None else ids[top]
    order = np.lexsort((chunk, -scores[top]))[:k]
    return [(int(chunk[i]), float(scores[top[i]])) for i in order]


# -- the top without every posting (MaxScore) -------------------------------------------
@dataclass(frozen=True)
class Term:
    """One term of a sum for ``top_pruned``: the most it adds to one position (``bound``),
    its contributions over every position holding it (``every()``: positions ascending,
    contributions), and at given ascending positions (``at(positions)``: one contribution
    each, 0 where it is absent). The caller reads its postings in these callables."""

    bound: float
    every: Callable[[], tuple[np.ndarray, np.ndarray]]
    at: Callable[[np.ndarray], np.ndarray]


PRUNE_FROM = 200_000  # postings a query's common terms hold from which its BM25 skips what cannot decide the top
THIN = 50_000  # at most this many positions read for a floor
MARGIN = 1e-9  # rounding between two orders of one sum, far above float64's


def located(ids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``ids``, found) of each of ``wanted`` in the ascending ``ids``."""
    at = np.searchsorted(ids, wanted)
    hit = at < len(ids)
    hit[hit] = ids[at[hit]] == wanted[hit]
    return at, hit


def top_pruned(terms: Sequence[Term], extra: tuple[np.ndarray, np.ndarray], size: int, limit: int,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(positions, scores) holding the ``limit`` best of ``sum(terms) + extra`` over positions
    below ``size`` among ``allowed`` (as ``top_hits`` takes it; None: all), each score summed as a
    dense sum would be: the terms in the order given, from 0.0, then ``extra`` (distinct
    positions, their scores). Feed them to ``top_hits``: the same hits and floats as the dense
    sum's, without scoring every posting.

    The terms are taken in falling ``bound`` (the rarest first), each over all its positions,
    until the bounds of the terms left sum below the ``limit``-th best partial sum so far: a
    position that none of the taken terms holds cannot reach the top then. The terms left are
    asked only for the positions that still could, and a position is dropped as soon as the
    terms left cannot lift it to the ``limit``-th best. The positions that remain are summed
    again in the dense order."""
    order = sorted(range(len(terms)), key=lambda i: -terms[i].bound)
    inside = None
    if allowed is not None:
        inside = np.zeros(size, dtype=bool)
        inside[allowed[allowed < size]] = True
    extra_ids, extra_scores = extra
    partial = np.zeros(size, dtype=np.float64)
    partial[extra_ids] += extra_scores
    parts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    left = sum(t.bound for t in terms)
    floor = _kth_at(partial, extra_ids, limit, inside)
    taken = 0
    for i in order:
        if left < floor * (1 - MARGIN) - MARGIN:
            break
        parts[i] = terms[i].every()
        partial[parts[i][0]] += parts[i][1]
        left -= terms[i].bound
        taken += 1
        # any set of distinct positions gives a floor no higher than the true one: this term's, thinned
        floor = max(floor, _kth_at(partial, parts[i][0], limit, inside))
    if taken == len(order):
        cand = np.flatnonzero(partial > 0)
    else:
        cand = np.flatnonzero(partial >= floor * (1 - MARGIN) - MARGIN - left)
    if inside is not None:
        cand = cand[inside[cand]]
    sums = partial[cand]
    for i in order[taken:]:
        if not len(cand):
            break
        part = terms[i].at(cand)
        parts[i] = (cand, part)  # only these positions can still be in the top
        sums = sums + part
        left -= terms[i].bound
        floor = max(floor, _kth_of(sums, limit))
        keep = sums + left >= floor * (1 - MARGIN) - MARGIN
        cand, sums = cand[keep], sums[keep]
    exact = np.zeros(len(cand), dtype=np.float64)
    for i in range(len(terms)):  # the dense sum, in its order, for the positions left
        ids, part = parts[i]
        at, hit = located(ids, cand)
        exact[hit] += part[at[hit]]
    if len(extra_ids):
        by_id = np.argsort(extra_ids, kind="stable")
        at, hit = located(extra_ids[by_id], cand)
        exact[hit] += extra_scores[by_id][at[hit]]
    return cand, exact


def _kth_at(scores: np.ndarray, ids: np.ndarray, limit: int, inside: np.ndarray | None) -> float:
    """The ``limit``-th best of ``scores`` at the distinct positions ``ids`` (every few of them
    when many) that ``inside`` allows: a floor under the ``limit``-th best of all."""
    ids = ids[::max(1, len(ids) // THIN)]
    if inside is not None:
        ids = ids[inside[ids]]
    return _kth_of(scores[ids], limit)


def _kth_of(values: np.ndarray, limit: int) -> float:
    values = values[values > 0]
    if limit <= 0 or len(values) < limit:
        return 0.0
    return float(np.partition(values, len(values) - limit)[len(values) - limit])
