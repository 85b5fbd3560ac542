"""Counting the budget: a heuristic, a real tokenizer, and span measures over a document.

A chunker asks "how many tokens in ``source[start:end]``?" many times while it looks
for a cut. With a ``TokenCounter`` every section is encoded once, in one parallel batch,
and any sub-span is then counted from the token offsets (bisect), so splitting costs no
extra tokenizer calls. With a plain ``str -> int`` callable each question is one call.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import CHARS_PER_TOKEN

Measure = Callable[[int, int], int]


def heuristic_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: the estimate used when no tokenizer is given."""
    return -(-len(text) // CHARS_PER_TOKEN)


class TokenCounter:
    """A Hugging Face ``tokenizers.Tokenizer`` as a chunk budget (no special tokens).

    Works on a copy with padding and truncation switched off, so a tokenizer.json that
    pads or truncates to a fixed length still gives true counts.
    """

    def __init__(self, tokenizer: Any):
        copy = type(tokenizer).from_str(tokenizer.to_str())
        copy.no_padding()
        copy.no_truncation()
        self._tokenizer = copy

    @classmethod
    def from_file(cls, path: str | Path) -> "TokenCounter":
        """A counter for the tokenizer.json at ``path``."""
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def __call__(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_many(self, texts: list[str]) -> list[Any]:
        """Encodings (with ``ids`` and ``offsets``) of ``texts``, in one parallel batch."""
        return self._tokenizer.encode_batch(texts, add_special_tokens=False)


def measure_for(source: str, segments: Sequence[tuple[int, int]], count: Callable[[str], int]) -> Measure:
    """A ``(start, end) -> tokens`` function over ``source``; ``segments`` tile the body."""
    encode_many = getattr(count, "encode_many", None)
    if encode_many is None or not segments:
        return lambda start, end: count(source[start:end])
    return _OffsetMeasure(source, segments, encode_many)


class _OffsetMeasure:
    """Counts tokens overlapping a span from per-segment encodings (exact at whitespace cuts)."""

    def __init__(self, source: str, segments: Sequence[tuple[int, int]], encode_many: Callable):
        self._segments = list(segments)
        self._starts = [start for start, _ in self._segments]
        self._encodings = encode_many([source[s:e] for s, e in self._segments])
        self._bounds: dict[int, tuple[list[int], list[int]]] = {}

    def __call__(self, start: int, end: int) -> int:
        total = 0
        i = max(bisect_right(self._starts, start) - 1, 0)
        while i < len(self._segments) and self._segments[i][0] < end:
            total += self._within(i, start, end)
            i += 1
        return total

    def _within(self, i: int, start: int, end: int) -> int:
        seg_start, seg_end = self._segments[i]
        if start <= seg_start and end >= seg_end:
            return len(self._encodings[i].ids)
        starts, ends = self._token_bounds(i)
        return max(0, bisect_left(starts, end - seg_start) - bisect_right(ends, start - seg_start))

    def _token_bounds(self, i: int) -> tuple[list[int], list[int]]:
        if i not in self._bounds:
            offsets = self._encodings[i].offsets
            self._bounds[i] = ([a for a, _ in offsets], [b for _, b in offsets])
        return self._bounds[i]
