"""The optional re-ranking stage: a cross-encoder re-orders the first hits of the first pool.

Off unless ``rerank_model`` is set. It reads the ``rerank_top`` best hits of the first
candidate pool (a fixed number, so the head of the list never depends on k), scores each
(query, heading + text) pair with the cross-encoder (``embed/crossencoder.py``) and orders
them by that score, ties in their fused order. A re-ranked hit's score is the logistic of
its logit (0..1), shown as ``rerank`` in its explanation beside the fused figures; hits past
``rerank_top`` keep their order, their scores capped at the last re-ranked one's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Hashable

import numpy as np

from .rank import Ranked


def logistic(x: float) -> float:
    """1 / (1 + e^-x), without overflow."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def reorder(ranked: list[tuple[Hashable, Ranked]], logits: np.ndarray) -> list[tuple[Hashable, Ranked]]:
    """The first ``len(logits)`` hits in order of their logits (stable), each scored by its
    logistic and explained; the rest after them, capped at the last re-ranked score."""
    n = len(logits)
    order = sorted(range(n), key=lambda i: -float(logits[i]))  # sorted() is stable: ties keep the fused order
    head = []
    for i in order:
        key, r = ranked[i]
        score = logistic(float(logits[i]))
        head.append((key, Ranked(r.chunk_id, score, replace(r.explain, rerank=float(logits[i]), score=score))))
    floor = min((r.score for _, r in head), default=None)
    tail = []
    for key, r in ranked[n:]:
        if floor is not None and r.score > floor:
            r = Ranked(r.chunk_id, floor, replace(r.explain, score=floor))
        tail.append((key, r))
    return head + tail
