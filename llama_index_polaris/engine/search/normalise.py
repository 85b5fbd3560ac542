"""Every rescaling of scores in one place: the best reads 1.0 and the rest are relative to it.

Three stages rescale: fused scores before the heading boost (``relative_to_max``, so the
boost and MMR work on the scale of cosine similarity), MMR's marginal values
(``mmr_scores``: shifted so none is negative, then relative to the first pick) and the
single-retriever modes (``relative_to_top``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from .mmr import MMRPick


def relative_to_top(values: Sequence[float]) -> list[float]:
    """Divide by the first (best) value; all zeros when it is not positive."""
    if not values:
        return []
    top = values[0]
    if top <= 0:
        return [1.0] + [0.0] * (len(values) - 1)
    return [v / top for v in values]


def relative_to_max(scores: np.ndarray) -> np.ndarray:
    """Scale scores so the largest is 1.0 (all zeros when none is positive)."""
    scores = np.asarray(scores, dtype=np.float64)
    top = scores.max(initial=0.0)
    return scores / top if top > 0 else np.zeros_like(scores)


def mmr_scores(picks: "Sequence[MMRPick]", lam: float) -> list[float]:
    """Final scores in [0, 1], top 1.0: marginal values shifted by the largest possible
    penalty ``1 - lam`` (so none is negative), then divided by the first."""
    shifted = [max(p.value + (1.0 - lam), 0.0) for p in picks]  # max: float32 rounding only
    return relative_to_top(shifted) if shifted and shifted[0] > 0 else [0.0] * len(shifted)
