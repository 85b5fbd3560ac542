"""The last stage: scores relative to the top hit, which reads 1.000."""

from __future__ import annotations

from typing import Sequence


def relative_to_top(values: Sequence[float]) -> list[float]:
    """Divide by the first (best) value; all zeros when it is not positive."""
    if not values:
        return []
    top = values[0]
    if top <= 0:
        return [1.0] + [0.0] * (len(values) - 1)
    return [v / top for v in values]
