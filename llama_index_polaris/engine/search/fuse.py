"""Reciprocal Rank Fusion: scores are thrown away, ranks are kept."""

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
