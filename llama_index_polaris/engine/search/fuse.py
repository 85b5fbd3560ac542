"""Fusing ranked lists: Reciprocal Rank Fusion (ranks only), and score fusion mixed into it.

RRF throws the scores away and keeps the ranks (the spec). Score fusion (a convex
combination, Bruch et al. 2022) keeps how far apart the scores are: each list's scores
are rescaled so that its best reads 1 and its ``depth``-th (or its last) reads 0, then
weighted and added. ``mix`` blends the two, each relative to its best; measured in
docs/search.md ("Fusion").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence


@dataclass
class Fused:
    """One candidate after fusion: its total and each list's rank and contribution."""

    id: Hashable
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)
    contributions: dict[str, float] = field(default_factory=dict)


def rrf(
    lists: Mapping[str, Sequence[Hashable]], k: float = 60, weights: Mapping[str, float] | None = None
) -> list[Fused]:
    """Fuse ranked id lists: each id gets ``sum w * 1 / (k + rank)``, rank from 1.

    ``weights`` (default 1 for every list) scale each list's terms; a list of weight 0
    takes no part. Returns the candidates best first; ties keep the order in which ids
    were first seen (list order, then rank), so the result is deterministic.
    """
    fused: dict[Hashable, Fused] = {}
    for name, ids in lists.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        if weight == 0:
            continue
        for rank, id_ in enumerate(ids, start=1):
            entry = fused.setdefault(id_, Fused(id_))
            if name in entry.ranks:  # a duplicate within one list counts once, at its best rank
                continue
            contribution = weight / (k + rank)
            entry.ranks[name] = rank
            entry.contributions[name] = contribution
            entry.score += contribution
    return sorted(fused.values(), key=lambda f: -f.score)


def score_fusion(
    lists: Mapping[str, Sequence[tuple[Hashable, float]]], weights: Mapping[str, float], depth: int
) -> dict[Hashable, dict[str, float]]:
    """Each id's share of every list: ``weight x (score - floor) / (best - floor)``, clipped to
    [0, 1], where ``floor`` is the list's score at rank ``depth`` (its last when shorter), so
    the rescaling does not move with the pool's size. Scores are higher-is-better, best
    first; an id a list did not return takes 0 from it, and every id of a list whose
    scores are all equal takes 1."""
    out: dict[Hashable, dict[str, float]] = {}
    for name, scored in lists.items():
        weight = weights.get(name, 0.0)
        if not scored or weight == 0:
            continue
        best, floor = scored[0][1], scored[min(depth, len(scored)) - 1][1]
        span = best - floor
        for id_, value in scored:
            share = min(max((value - floor) / span, 0.0), 1.0) if span > 0 else 1.0
            out.setdefault(id_, {})[name] = weight * share
    return out


def mix(fused: list[Fused], shares: Mapping[Hashable, Mapping[str, float]], share: float) -> list[Fused]:
    """``fused`` (RRF) rescored as ``(1 - share) x rrf / best rrf + share x fusion / best
    fusion`` and sorted again (ties keep RRF's order); ``share`` 0 is RRF alone."""
    if share <= 0 or not fused:
        return fused
    totals = {id_: sum(parts.values()) for id_, parts in shares.items()}
    top_rrf = fused[0].score or 1.0
    top_fusion = max(totals.values(), default=0.0) or 1.0
    for f in fused:
        f.score = (1 - share) * f.score / top_rrf + share * totals.get(f.id, 0.0) / top_fusion
    return sorted(fused, key=lambda f: -f.score)
