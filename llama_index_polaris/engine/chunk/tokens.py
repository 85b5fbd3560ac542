"""Counting the budget: a heuristic, a real tokenizer, and span measures over a document.

A chunker asks "how many tokens in ``source[start:end]``?" many times while it looks
for a cut. With a ``TokenCounter`` every section is counted once, in one parallel batch;
a section over budget is encoded once more with offsets and any part of it is then
counted by bisecting those offsets, so a cut search costs no tokenizer calls. With a
plain ``str -> int`` callable each question is one call.
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

    def count_many(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts`` in one parallel batch (offsets not computed)."""
        encode = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        return [len(e.ids) for e in encode(texts, add_special_tokens=False)]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` character span of each token of ``text``."""
        return self._tokenizer.encode(text, add_special_tokens=False).offsets


def measure_for(source: str, segments: Sequence[tuple[int, int]], count: Callable[[str], int]) -> Measure:
    """A ``(start, end) -> tokens`` function over ``source``; ``segments`` tile the body."""
    if not hasattr(count, "count_many") or not segments:
        return lambda start, end: count(source[start:end])
    return _OffsetMeasure(source, segments, count)


class _OffsetMeasure:
    """Whole segments from one batched count; parts of a segment from its token offsets.

    Exact wherever a cut falls on whitespace (true of every cut the chunker makes) for
    tokenizers that split on whitespace first, as WordPiece and Metaspace ones do.
    """

    def __init__(self, source: str, segments: Sequence[tuple[int, int]], counter: Any):
        texts = [source[s:e] for s, e in segments]
        self._source = source
        self._segments = list(segments)
        self._starts = [start for start, _ in self._segments]
        self._cores = [(s + len(t) - len(t.lstrip()), s + len(t.rstrip())) for (s, _), t in zip(segments, texts)]
        self._counts = counter.count_many(texts)
        self._counter = counter
        self._bounds: dict[int, tuple[list[int], list[int]]] = {}

    def __call__(self, start: int, end: int) -> int:
        total = 0
        i = max(bisect_right(self._starts, start) - 1, 0)
        while i < len(self._segments) and self._segments[i][0] < end:
            total += self._within(i, start, end)
            i += 1
        return total

    def _within(self, i: int, start: int, end: int) -> int:
        core_start, core_end = self._cores[i]
        if start <= core_start and end >= core_end:
            return self._counts[i]
        seg_start = self._segments[i][0]
        starts, ends = self._token_bounds(i)
        return max(0, bisect_left(starts, end - seg_start) - bisect_right(ends, start - seg_start))

    def _token_bounds(self, i: int) -> tuple[list[int], list[int]]:
        if i not in self._bounds:
            seg_start, seg_end = self._segments[i]
            offsets = self._counter.offsets(self._source[seg_start:seg_end])
            self._bounds[i] = ([a for a, _ in offsets], [b for _, b in offsets])
        return self._bounds[i]
