"""Learned fusion: a linear model over a hit's explanation figures (issue #27).

Each hybrid section gets a row of features, all in [0, 1], computed from what its
explanation already holds (``features``); the model's score is a weighted sum of them
(``contributions``). A positive weight counts the feature, a negative weight counts what
it lacks: ``w x`` for ``w >= 0`` and ``|w| (1 - x)`` for ``w < 0`` (the same ranking as
``w x``, the two differ by a constant), so every contribution is between 0 and ``|w|``,
the total is never negative and, relative to the best hit, reads 1.0 at the top with the
contributions adding up to it. The weights come from ``fusion_weights`` in polaris.toml
(``polaris tune`` fits them); ``{"fixed": 1}`` is today's ranking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

# name -> what it is; the order is the column order of ``features``
FEATURES: dict[str, str] = {
    "fixed": "the fixed fusion's relevance (RRF + score fusion + heading boost, best = 1): today's ranking",
    "vector_rr": "1 / the section's rank in the vector list (0 when the list did not return it)",
    "bm25_rr": "1 / the section's rank in the BM25 list (0 when absent)",
    "vector_rrf": "the vector list's RRF term relative to rank 1's: (rrf_k + 1) / (rrf_k + rank)",
    "bm25_rrf": "the BM25 list's RRF term relative to rank 1's",
    "vector_sim": "cosine similarity of the section's best chunk (clipped to 0..1)",
    "vector_scaled": "that similarity rescaled between the list's best (1) and its 50th section (0)",
    "bm25_ratio": "BM25 score of the section's best chunk over the list's best",
    "bm25_scaled": "BM25 rescaled between the list's best (1) and its 50th section (0)",
    "heading": "share of the query's content words found in the heading path",
    "both": "1 when both lists returned the section",
    "same_chunk": "1 when the best vector chunk and the best BM25 chunk are the same chunk",
    "chunks": "chunks of the section that the lists returned: 1 - 1 / n",
    "depth": "heading depth: 1 / number of headings in the path (a page's title reads 1)",
    "lookup_bm25": "1 / BM25 rank when the query is an identifier lookup, else 0",
    "lookup_vector": "1 / vector rank when the query is an identifier lookup, else 0",
    "words_heading": "heading match when the query is words (not a lookup), else 0",
}
NAMES: tuple[str, ...] = tuple(FEATURES)
IDENTITY: dict[str, float] = {"fixed": 1.0}


@dataclass(frozen=True)
class Figures:
    """What one section's features are read from: its explanation's figures."""

    fixed: float
    vector_rank: int | None
    vector_distance: float | None
    bm25_rank: int | None
    bm25_score: float | None
    vector_share: float | None  # score fusion's rescaled similarity (0..1), before its weight
    bm25_share: float | None
    heading: float
    heading_path: str
    chunks: int
    same_chunk: bool


def features(rows: Sequence[Figures], rrf_k: float, best_bm25: float, lookup: bool) -> np.ndarray:
    """The feature matrix (sections x ``NAMES``), every value in [0, 1]."""
    out = np.zeros((len(rows), len(NAMES)), dtype=np.float64)
    for i, f in enumerate(rows):
        out[i] = _row(f, rrf_k, best_bm25, lookup)
    return out


def _row(f: Figures, rrf_k: float, best_bm25: float, lookup: bool) -> list[float]:
    v_rr = 1.0 / f.vector_rank if f.vector_rank else 0.0
    b_rr = 1.0 / f.bm25_rank if f.bm25_rank else 0.0
    sim = 1.0 - f.vector_distance if f.vector_distance is not None else 0.0
    depth = f.heading_path.count(" > ") + 1 if f.heading_path else 1
    return [
        f.fixed, v_rr, b_rr,
        (rrf_k + 1) / (rrf_k + f.vector_rank) if f.vector_rank else 0.0,
        (rrf_k + 1) / (rrf_k + f.bm25_rank) if f.bm25_rank else 0.0,
        min(max(sim, 0.0), 1.0), f.vector_share or 0.0,
        min(max(f.bm25_score / best_bm25, 0.0), 1.0) if f.bm25_score is not None and best_bm25 > 0 else 0.0,
        f.bm25_share or 0.0, f.heading,
        float(bool(f.vector_rank and f.bm25_rank)), float(f.same_chunk),
        1.0 - 1.0 / f.chunks if f.chunks > 0 else 0.0, 1.0 / depth,
        b_rr if lookup else 0.0, v_rr if lookup else 0.0, 0.0 if lookup else f.heading,
    ]


def weight_vector(weights: Mapping[str, float]) -> np.ndarray:
    """``weights`` (by feature name, missing ones 0) as a vector in ``NAMES`` order."""
    return np.array([float(weights.get(n, 0.0)) for n in NAMES], dtype=np.float64)


def contributions(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each feature's contribution: ``w x`` where ``w >= 0``, ``|w| (1 - x)`` where ``w < 0``."""
    return np.where(w >= 0, w * x, -w * (1.0 - x))


def scores(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The model's score of each row: its contributions added."""
    return contributions(x, w).sum(axis=1) if len(x) else np.zeros(0)


def check_weights(weights: object) -> str | None:
    """What is wrong with a ``fusion_weights`` table (None when it can be used)."""
    if not isinstance(weights, Mapping):
        return "must be a table of feature = weight"
    unknown = [k for k in weights if k not in FEATURES]
    if unknown:
        return f"has unknown features {', '.join(map(repr, unknown))} (features: {', '.join(NAMES)})"
    for k, v in weights.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            return f"weight of '{k}' must be a finite number, got {v!r}"
    if not any(weights.values()):
        return "has no weight other than 0 (remove the table for the fixed fusion)"
    return None
