"""BM25 maths, pure: FTS5's constants and idf, one phrase's term, the best hits of a score array.

Shared by the SQLite backend's posting lists (``search/postings.py``, ``search/bm25_cache.py``)
and the Postgres backend (``postgres/bm25.py``).
"""

from __future__ import annotations

import math

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
