"""Exact cosine ranking of candidate vectors, pure: what every approximate path ends with
(the SQLite file's sign bits, the Postgres backend's half-precision candidates)."""

from __future__ import annotations

import numpy as np


def rescore(ids: np.ndarray, matrix: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` rows nearest ``query`` by cosine: (id, cosine distance), best first, ties by id."""
    if len(ids) == 0 or k <= 0:
        return []
    norms = np.linalg.norm(matrix, axis=1)
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    qn = float(np.linalg.norm(q))
    sims = (matrix @ q) / np.where(norms > 0, norms, 1.0) / (qn if qn > 0 else 1.0)
    k = min(k, len(ids))
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.lexsort((ids[top], -sims[top]))]
    return [(int(ids[i]), float(1.0 - sims[i])) for i in top]
