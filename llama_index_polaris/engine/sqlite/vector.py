"""Vector KNN (cosine distance), filtered inside the KNN query: exact over the vec0 table
below ``EXACT_BELOW`` chunks, approximate from the sign-bit index above (``ann.py``).

A stored row that is not a valid vector (``engine.vectors``: NaN, all zeros; written by raw
SQL or another tool, since every Polaris door refuses them) has a NaN distance to every
query. vec0 then answers NULL for it and, worse, its top-k selection compares NaN and
loses real neighbours. The KNN statement keeps only rows whose distance is at least
``MIN_DISTANCE`` (a vec0 distance constraint, applied before the top k are chosen), which
no NaN is: such rows are skipped, and ``polaris status --check`` names them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .ann import ann_knn
from ..storage.scope import Scope

MAX_K = 4096  # sqlite-vec's limit on k
MIN_DISTANCE = -1.0  # below every cosine distance (0..2, a little under 0 by rounding); NaN fails it


def knn_sql(scope: Scope) -> tuple[str, list[Any]]:
    """The KNN statement for ``scope``; parameters follow (vector, k)."""
    where, args = scope.sql("rowid", "document_id")
    sql = (f"SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
           f" AND distance >= {MIN_DISTANCE}{where} ORDER BY distance")
    return sql, args


def knn(
    conn: Any, query: np.ndarray, k: int, scope: Scope = Scope(), exact_below: int | None = None,
    fetch_k: int | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` nearest chunks to ``query``: (chunk id, cosine distance), nearest first.

    Exact (vec0) when the index holds fewer than ``exact_below`` (default ``signbits.EXACT_BELOW``,
    read at each call) vectors or has no
    sign-bit index; otherwise sign-bit candidates re-scored exactly (``ann.ann_knn``;
    ``fetch_k``: size the candidates for that k).
    """
    if scope.empty or k <= 0:
        return []
    found = ann_knn(conn, query, k, scope, exact_below, fetch_k=fetch_k)
    return exact_knn(conn, query, k, scope) if found is None else found


def exact_knn(conn: Any, query: np.ndarray, k: int, scope: Scope = Scope()) -> list[tuple[int, float]]:
    """The exact ``k`` nearest chunks by vec0's brute-force scan: (chunk id, cosine distance)."""
    if scope.empty or k <= 0:
        return []
    sql, args = knn_sql(scope)
    blob = np.asarray(query, dtype="<f4").tobytes()
    rows = conn.execute(sql, [blob, min(k, MAX_K), *args]).fetchall()
    # equal distances (the same text in two collections) by chunk id, as the sign-bit path and
    # the Postgres backend order them; vec0's own order of ties is arbitrary
    return sorted(((int(r), float(d)) for r, d in rows if d is not None), key=lambda h: (h[1], h[0]))
