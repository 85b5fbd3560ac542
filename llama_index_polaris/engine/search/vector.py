"""Vector KNN over the vec0 table (cosine distance), filtered inside the KNN query."""

from __future__ import annotations

from typing import Any

import numpy as np

from .scope import Scope

MAX_K = 4096  # sqlite-vec's limit on k


def knn_sql(scope: Scope) -> tuple[str, list[Any]]:
    """The KNN statement for ``scope``; parameters follow (vector, k)."""
    where, args = scope.sql("rowid", "document_id")
    sql = f"SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?{where} ORDER BY distance"
    return sql, args


def knn(conn: Any, query: np.ndarray, k: int, scope: Scope = Scope()) -> list[tuple[int, float]]:
    """The ``k`` nearest chunks to ``query``: (chunk id, cosine distance), nearest first."""
    if scope.empty or k <= 0:
        return []
    sql, args = knn_sql(scope)
    blob = np.asarray(query, dtype="<f4").tobytes()
    return [(int(r), float(d)) for r, d in conn.execute(sql, [blob, min(k, MAX_K), *args]).fetchall()]
