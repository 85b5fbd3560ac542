"""Maximal Marginal Relevance: trade a near-duplicate for something new."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MMRPick:
    """One selected candidate: its index, marginal value and the diversity penalty paid."""

    index: int
    value: float
    penalty: float


def mmr(relevance: np.ndarray, vectors: np.ndarray, k: int, lam: float) -> list[MMRPick]:
    """Greedy MMR: pick ``argmax lam*rel - (1-lam)*max_sim(selected)`` ``k`` times.

    ``relevance`` must already be on the cosine scale (see ``normalise.relative_to_max``);
    ``vectors`` are unit rows, so a dot product is the cosine similarity. The penalty
    is the maximum similarity to any chunk already chosen (standard MMR), floored at
    zero: an unrelated chunk pays nothing, and an opposite one earns no bonus. So the
    marginal values never rise from one pick to the next, and none exceeds the first.
    """
    n = len(relevance)
    k = min(k, n)
    if k <= 0:
        return []
    rel = np.asarray(relevance, dtype=np.float64)
    if lam >= 1.0:  # pure relevance: no similarity to compute
        order = np.argsort(-rel, kind="stable")[:k]
        return [MMRPick(int(i), float(rel[i]), 0.0) for i in order]
    vecs = np.asarray(vectors, dtype=np.float32)
    max_sim = np.zeros(n)
    available = np.ones(n, dtype=bool)
    picks: list[MMRPick] = []
    for _ in range(k):
        penalty = (1.0 - lam) * max_sim
        value = np.where(available, lam * rel - penalty, -np.inf)
        best = int(np.argmax(value))
        picks.append(MMRPick(best, float(value[best]), float(penalty[best])))
        available[best] = False
        max_sim = np.maximum(max_sim, vecs @ vecs[best])
    return picks
