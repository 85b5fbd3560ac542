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
from typing import Callable, Hashable, Mapping

import numpy as np

from ..config import FUSION_FEATURES, check_weights  # noqa: F401  (check_weights: kept importable here)
from .boost import is_changelog

FEATURES = FUSION_FEATURES  # the table a ``fusion_weights`` setting may name lives with the settings
NAMES: tuple[str, ...] = tuple(FEATURES)
IDENTITY: dict[str, float] = {"fixed": 1.0}
EVERY: dict[str, float] = {**dict.fromkeys(NAMES, 0.0), **IDENTITY}  # today's ranking, every feature computed


@dataclass(frozen=True)
class Figures:
    """What the features are read from, one array per figure, one entry per fused section
    (ranks 0 and values NaN where a list did not return the section)."""

    fixed: np.ndarray  # the fixed fusion's relevance
    vector_rank: np.ndarray
    similarity: np.ndarray  # 1 - the best chunk's cosine distance
    bm25_rank: np.ndarray
    bm25_score: np.ndarray
    vector_scaled: np.ndarray  # score fusion's rescaling of each list (0..1, 0 where absent)
    bm25_scaled: np.ndarray
    heading: np.ndarray  # matched share of the query's words
    depth: np.ndarray  # headings in the path
    chunks: np.ndarray  # chunks of the section the lists returned
    same_chunk: np.ndarray  # 1.0 where the best vector chunk is the best BM25 chunk
    structure: Structure | None = None  # the structural features (None: not computed, they read 0)


STRUCTURAL = ("own_heading", "changelog", "page_best", "page_share", "parent_in_pool", "child_in_pool")


@dataclass(frozen=True)
class Structure:
    """The structural features' values, one entry per fused section (``structure`` builds them)."""

    own_heading: np.ndarray  # share of the query's words in the section's own heading
    changelog: np.ndarray
    page_best: np.ndarray  # the fixed relevance of the best section of its document in the pool
    parent_in_pool: np.ndarray
    child_in_pool: np.ndarray


def structure(headings: list[str], documents: list[Hashable], own_heading: np.ndarray, fixed: np.ndarray) -> Structure:
    """The structural features of the pool's sections, from their heading paths and documents."""
    best: dict[Hashable, float] = {}
    for doc, value in zip(documents, fixed.tolist()):
        if value > best.get(doc, -1.0):
            best[doc] = value
    keys = set(zip(documents, headings))
    parent = [h.rsplit(" > ", 1)[0] if " > " in h else None for h in headings]
    parents = {(d, p) for d, p in zip(documents, parent) if p is not None}
    return Structure(
        own_heading,
        np.array([is_changelog(h) for h in headings], dtype=np.float64),
        np.array([best[d] for d in documents], dtype=np.float64),
        np.array([p is not None and (d, p) in keys for d, p in zip(documents, parent)], dtype=np.float64),
        np.array([(d, h) in parents for d, h in zip(documents, headings)], dtype=np.float64),
    )


def features(f: Figures, rrf_k: float, lookup: bool, names: tuple[str, ...] = NAMES) -> np.ndarray:
    """The feature matrix (sections x ``names``), every value in [0, 1]; only the features
    named are computed."""
    n = len(f.fixed)
    out = np.zeros((n, len(names)))
    for j, name in enumerate(names):
        out[:, j] = _COLUMNS[name](f, rrf_k, lookup) if n else 0.0
    return out


def _rr(rank: np.ndarray) -> np.ndarray:
    return np.where(rank > 0, 1.0 / np.maximum(rank, 1), 0.0)


def _rrf(rank: np.ndarray, rrf_k: float) -> np.ndarray:
    return np.where(rank > 0, (rrf_k + 1) / (rrf_k + np.maximum(rank, 1)), 0.0)


def _structural(f: Figures, name: str) -> np.ndarray:
    s = f.structure
    if s is None:
        return np.zeros(len(f.fixed))
    if name == "page_share":
        return np.divide(f.fixed, s.page_best, out=np.zeros(len(f.fixed)), where=s.page_best > 0)
    return getattr(s, name)


def _ratio(f: Figures) -> np.ndarray:
    best = np.nanmax(f.bm25_score) if (f.bm25_rank > 0).any() else 0.0
    return np.clip(np.nan_to_num(f.bm25_score / best), 0.0, 1.0) if best > 0 else np.zeros(len(f.fixed))


_COLUMNS: dict[str, Callable[[Figures, float, bool], np.ndarray]] = {
    "fixed": lambda f, k, lk: f.fixed,
    "vector_rr": lambda f, k, lk: _rr(f.vector_rank),
    "bm25_rr": lambda f, k, lk: _rr(f.bm25_rank),
    "vector_rrf": lambda f, k, lk: _rrf(f.vector_rank, k),
    "bm25_rrf": lambda f, k, lk: _rrf(f.bm25_rank, k),
    "vector_sim": lambda f, k, lk: np.clip(np.nan_to_num(f.similarity), 0.0, 1.0),
    "vector_scaled": lambda f, k, lk: f.vector_scaled,
    "bm25_ratio": lambda f, k, lk: _ratio(f),
    "bm25_scaled": lambda f, k, lk: f.bm25_scaled,
    "heading": lambda f, k, lk: f.heading,
    "both": lambda f, k, lk: ((f.vector_rank > 0) & (f.bm25_rank > 0)).astype(np.float64),
    "same_chunk": lambda f, k, lk: f.same_chunk,
    "chunks": lambda f, k, lk: np.where(f.chunks > 0, 1.0 - 1.0 / np.maximum(f.chunks, 1), 0.0),
    "depth": lambda f, k, lk: 1.0 / np.maximum(f.depth, 1),
    "lookup_bm25": lambda f, k, lk: _rr(f.bm25_rank) * lk,
    "lookup_vector": lambda f, k, lk: _rr(f.vector_rank) * lk,
    "words_heading": lambda f, k, lk: f.heading * (not lk),
    **{name: (lambda f, k, lk, name=name: _structural(f, name)) for name in STRUCTURAL},
}
assert tuple(_COLUMNS) == NAMES


def rescaled(values: np.ndarray, depth: int) -> np.ndarray:
    """A list's scores (best first, higher better) rescaled as score fusion does: its best reads
    1, its ``depth``-th (or last) 0, clipped (``fuse.score_fusion`` without the weight)."""
    if len(values) == 0:
        return values
    best, floor = values[0], values[min(depth, len(values)) - 1]
    return np.clip((values - floor) / (best - floor), 0.0, 1.0) if best > floor else np.ones(len(values))


def weight_vector(weights: Mapping[str, float], names: tuple[str, ...] = NAMES) -> np.ndarray:
    """``weights`` (by feature name, missing ones 0) as a vector in ``names`` order."""
    return np.array([float(weights.get(n, 0.0)) for n in names], dtype=np.float64)


def named(weights: Mapping[str, float]) -> tuple[str, ...]:
    """The features ``weights`` names (a weight of 0 too: it is computed and shown), in ``NAMES`` order."""
    return tuple(n for n in NAMES if n in weights)


def contributions(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each feature's contribution: ``w x`` where ``w >= 0``, ``|w| (1 - x)`` where ``w < 0``."""
    return np.where(w >= 0, w * x, -w * (1.0 - x))


def scores(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The model's score of each row: its contributions added."""
    return contributions(x, w).sum(axis=1) if len(x) else np.zeros(0)
