"""The cascade: a section over budget is cut at block, then sentence, then word boundaries.

Blocks are packed greedily; a block too big on its own is cut by its children (list
items, table rows), a fenced code block between lines (each piece re-fenced), a
paragraph between sentences and, only for a sentence over budget, between words. What
cannot be cut further (one word, one line of code) becomes its own piece.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from .blocks import Block, Section
from .tokens import Measure

_SENTENCE = re.compile(r"[.!?][\"'’”)\]*_]*\s+|[。！？]\s*|\n[ \t\r]*\n\s*")
_WORD = re.compile(r"\s+")
_LINE = re.compile(r"\r\n|\r|\n")
Finder = Callable[[str, int, int], Iterator[int]]


@dataclass(frozen=True)
class Budget:
    """Token accounting for one document: ``limit`` is what a piece may hold."""

    source: str
    measure: Measure
    count: Callable[[str], int]
    limit: int

    @property
    def window(self) -> int:
        """Characters searched for a cut; a piece longer than this is never needed."""
        return self.limit * 8 + 64

    def fits(self, start: int, end: int) -> bool:
        """Whether ``source[start:end]`` is within the limit."""
        return self.measure(start, end) <= self.limit


@dataclass(frozen=True)
class Piece:
    """A run of the source that becomes one chunk; ``prefix``/``suffix`` re-fence code."""

    start: int
    end: int
    section: int
    prefix: str = ""
    suffix: str = ""


def _regex_finder(pattern: re.Pattern) -> Finder:
    def find(source: str, lo: int, hi: int) -> Iterator[int]:
        return (m.end() for m in pattern.finditer(source, lo, hi) if lo < m.end() < hi)

    return find


SENTENCES, WORDS, LINES = (_regex_finder(p) for p in (_SENTENCE, _WORD, _LINE))


def split_section(budget: Budget, section: Section, index: int, reserve: int) -> list[Piece]:
    """``section`` whole when it fits, else packed to ``limit - reserve`` (room for overlap)."""
    if budget.fits(section.start, section.end):
        return [Piece(section.start, section.end, index)]
    tight = replace(budget, limit=max(1, budget.limit - reserve))
    return pack(tight, section.blocks, index, None)


def pack(budget: Budget, blocks: tuple[Block, ...], section: int, lead: int | None) -> list[Piece]:
    """Blocks packed greedily; ``lead`` starts the first piece early (carried text)."""
    pieces: list[Piece] = []
    acc = (lead, blocks[0].start) if lead is not None else None
    # Invariant: ``pieces`` tile the blocks seen so far up to ``acc`` (the open piece, within
    # budget); every block is either added to ``acc``, starts a new one, or is cut.
    for block in blocks:
        if acc and budget.fits(acc[0], block.end):
            acc = (acc[0], block.end)
        elif budget.fits(block.start, block.end):
            pieces += [Piece(*acc, section)] if acc else []
            acc = (block.start, block.end)
        else:
            carry = acc is not None and budget.fits(*acc)  # an oversize remainder is not carried
            pieces += [Piece(*acc, section)] if acc and not carry else []
            pieces += split_block(budget, block, section, acc[0] if carry else None)
            last = pieces[-1] if pieces else None
            acc = (pieces.pop().start, last.end) if last and not (last.prefix or last.suffix) else None
    return pieces + ([Piece(*acc, section)] if acc else [])


def split_block(budget: Budget, block: Block, section: int, lead: int | None) -> list[Piece]:
    """One block over budget, cut by its kind; the first piece starts at ``lead`` if given."""
    if block.children:
        return pack(budget, block.children, section, lead)
    if block.fence is not None:
        return _split_fence(budget, block, section, lead)
    finders = [LINES] if block.kind == "lines" else [SENTENCES, WORDS]
    start = block.start if lead is None else lead
    return cut(budget, start, block.end, finders, section, block.start)


def cut(budget: Budget, start: int, end: int, finders: list[Finder], section: int, floor: int) -> list[Piece]:
    """``[start, end)`` cut at the first finder's boundaries (none before ``floor``), longest pieces first."""
    pieces: list[Piece] = []
    pos = start
    # Invariant: ``pieces`` cover ``[start, pos)`` without gaps and each fits the budget, or
    # is one unit the last finder cannot cut (a word, a line); ``pos`` only moves forward.
    while pos < end:
        if end - pos <= budget.window and budget.fits(pos, end):
            return pieces + [Piece(pos, end, section)]
        cuts = _candidates(budget, finders[0], pos, max(pos, floor), end)
        best = _last_fitting(budget, pos, cuts)
        if best >= 0:
            pieces.append(Piece(pos, cuts[best], section))
            pos = cuts[best]
            continue
        unit_end = cuts[0] if cuts else end
        rest = finders[1:]
        pieces += cut(budget, pos, unit_end, rest, section, pos) if rest else [Piece(pos, unit_end, section)]
        pos = unit_end
    return pieces


def _candidates(budget: Budget, find: Finder, pos: int, floor: int, end: int) -> list[int]:
    near = min(end, pos + budget.window)
    cuts = ([floor] if floor > pos else []) + list(find(budget.source, floor, near))
    if not cuts:
        first = next(find(budget.source, floor, end), None)
        cuts = [first] if first is not None else []
    return cuts


def _last_fitting(budget: Budget, pos: int, cuts: list[int]) -> int:
    """The index of the farthest cut whose piece fits (-1: none): a bisection, since a longer
    piece never has fewer tokens."""
    lo, hi, best = 0, len(cuts) - 1, -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if budget.fits(pos, cuts[mid]):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _split_fence(budget: Budget, block: Block, section: int, lead: int | None) -> list[Piece]:
    fence = block.fence
    opener, closer = fence.open_line + "\n", "\n" + fence.close_line
    room = replace(budget, limit=max(1, budget.limit - budget.count(opener) - budget.count(closer)))

    body = budget.source[fence.body_start : fence.body_end]
    first, last = fence.body_start + len(body) - len(body.lstrip()), fence.body_start + len(body.rstrip())

    def inside(source: str, lo: int, hi: int) -> Iterator[int]:
        return (c for c in LINES(source, lo, hi) if first < c < last)  # every piece keeps some code

    start = block.start if lead is None else lead
    pieces = cut(room, start, block.end, [inside], section, block.start)
    return [
        replace(
            p,
            prefix=opener if p.start >= fence.body_start else "",
            suffix=closer if fence.body_start < p.end < fence.body_end else "",
        )
        for p in pieces
    ]
