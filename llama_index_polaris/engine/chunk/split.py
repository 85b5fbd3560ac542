"""The cascade: a section over budget is cut at block, then sentence, then word boundaries.

Blocks are packed greedily; a block too big on its own is cut by its children (list
items, table rows), a fenced code block between lines (each piece re-fenced), a
paragraph between sentences and, only for a sentence over budget, between words; a line
of code over budget between its words. What no boundary can cut (one word over budget: a
long URL, a base64 blob, a table row or code line without spaces, CJK text without
punctuation) is cut by ``force`` as the last resort: at the tokenizer's token boundaries
(any character without a tokenizer), into pieces of at most the budget and
``Budget.window`` characters, each counted exactly. Such a piece is ``forced``: it is
neither joined to a neighbour nor overlapped (the word-based measure is exact only at
whitespace), and the chunker reports it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from ..config import CHARS_PER_TOKEN
from .blocks import Block, Section
from .tokens import Measure

_SENTENCE = re.compile(r"[.!?][\"'’”)\]*_]*\s+|[。！？]\s*|\n[ \t\r]*\n\s*")
_WORD = re.compile(r"\s+")
_LINE = re.compile(r"\r\n|\r|\n")
Finder = Callable[[str, int, int], Iterator[int]]
FENCE_LINE_CHARS = 200  # a longer opening line re-opens a fence's pieces as its bare marker
_FORCE_BLOCK = 32  # windows of a run encoded at once for its token boundaries


@dataclass(frozen=True)
class Budget:
    """Token accounting for one document: ``limit`` is what a piece may hold; ``source`` is the
    text as counted (its blobs blanked), ``slack`` the characters those blobs hold."""

    source: str
    measure: Measure
    count: Callable[[str], int]
    limit: int
    slack: int = 0

    @property
    def window(self) -> int:
        """Characters searched for a cut; a piece longer than this is never needed."""
        return self.limit * 8 + 64 + self.slack

    def fits(self, start: int, end: int) -> bool:
        """Whether ``source[start:end]`` is within the limit."""
        return self.measure(start, end) <= self.limit

    def exact(self, start: int, end: int) -> int:
        """Tokens in ``source[start:end]`` counted whole, wherever it is cut (not from the measure,
        which is exact only at whitespace)."""
        text = self.source[start:end]
        exact = getattr(self.count, "count_exact", None)
        return exact(text) if exact is not None else self.count(text)


@dataclass(frozen=True)
class Piece:
    """A run of the source that becomes one chunk; ``prefix``/``suffix`` re-fence code."""

    start: int
    end: int
    section: int
    prefix: str = ""
    suffix: str = ""
    forced: bool = False  # cut inside a word or code line by ``force`` (counted exactly)


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
            acc = (pieces.pop().start, last.end) if last and not (last.prefix or last.suffix or last.forced) else None
    return pieces + ([Piece(*acc, section)] if acc else [])


def split_block(budget: Budget, block: Block, section: int, lead: int | None) -> list[Piece]:
    """One block over budget, cut by its kind; the first piece starts at ``lead`` if given."""
    if block.children:
        return pack(budget, block.children, section, lead)
    if block.fence is not None:
        return _split_fence(budget, block, section, lead)
    finders = [LINES, WORDS] if block.kind == "lines" else [SENTENCES, WORDS]
    start = block.start if lead is None else lead
    return cut(budget, start, block.end, finders, section, block.start)


Resort = Callable[[Budget, int, int, int], list[Piece]]


def cut(
    budget: Budget, start: int, end: int, finders: list[Finder], section: int, floor: int, resort: Resort | None = None
) -> list[Piece]:
    """``[start, end)`` cut at the first finder's boundaries (none before ``floor``), longest pieces
    first; a unit the last finder cannot cut goes to ``resort`` (default ``force``)."""
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
        if rest:
            pieces += cut(budget, pos, unit_end, rest, section, pos, resort)
        else:
            pieces += (resort or force)(budget, pos, unit_end, section)
        pos = unit_end
    return pieces


def force(budget: Budget, start: int, end: int, section: int) -> list[Piece]:
    """``[start, end)``, which no boundary cuts within the budget, in ``forced`` pieces of at most
    the budget and ``budget.window`` characters, cut at token boundaries (characters without
    a tokenizer's offsets). A piece over budget is one token (or character) that alone is."""
    pieces: list[Piece] = []
    ends, guess = _token_ends(budget, start, end)
    pos = start
    while pos < end:
        hi = min(end, pos + budget.window)
        fits = lambda c: budget.exact(pos, c) <= budget.limit  # noqa: E731
        cuts = ends(pos, hi)
        best = _farthest(cuts, fits, guess)
        if best < 0 and len(cuts) < hi - pos:  # the run's tokens do not tell (one [UNK] over a long run): characters
            cuts = list(range(pos + 1, hi + 1))
            best = _farthest(cuts, fits, budget.limit * CHARS_PER_TOKEN - 1)
        stop = cuts[max(best, 0)]
        pieces.append(Piece(pos, stop, section, forced=True))
        pos = stop
    return pieces


def _token_ends(budget: Budget, start: int, end: int) -> tuple[Callable[[int, int], list[int]], int]:
    """``(lo, hi) -> the positions in (lo, hi] a forced piece may end at`` over ``[start, end)``,
    and the index among them likely to hold the budget. Token ends come from encoding the run
    in blocks of ``_FORCE_BLOCK`` windows (a block's end is a cut too); without a tokenizer,
    every character is one."""
    token_ends = getattr(budget.count, "token_ends", None)
    if token_ends is None:
        return (lambda lo, hi: list(range(lo + 1, hi + 1))), budget.limit * CHARS_PER_TOKEN - 1
    known: list[int] = []
    covered = start

    def between(lo: int, hi: int) -> list[int]:
        nonlocal covered
        while covered < hi:
            block_end = min(end, covered + _FORCE_BLOCK * budget.window)
            known.extend(covered + e for e in token_ends(budget.source[covered:block_end]) if 0 < e < block_end - covered)
            known.append(block_end)
            covered = block_end
        cuts = known[bisect_right(known, lo) : bisect_right(known, hi)]
        return cuts if cuts and cuts[-1] == hi else cuts + [hi]

    return between, budget.limit - 1


def _farthest(cuts: list[int], fits: Callable[[int], bool], guess: int) -> int:
    """The index of the farthest cut that fits (-1: none), probing ``guess`` and the next first
    (two calls when the guess is right), then bisecting."""
    lo, hi, best = 0, len(cuts) - 1, -1
    probes = [min(guess, hi), min(guess, hi) + 1]
    while lo <= hi:
        mid = probes.pop(0) if probes and lo <= probes[0] <= hi else (lo + hi) // 2
        if fits(cuts[mid]):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


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
    opener, closer = _opener(budget, fence), "\n" + fence.close_line
    room = replace(budget, limit=max(1, budget.limit - budget.count(opener) - budget.count(closer)))

    body = budget.source[fence.body_start : fence.body_end]
    first, last = fence.body_start + len(body) - len(body.lstrip()), fence.body_start + len(body.rstrip())

    def within(find: Finder) -> Finder:
        if first >= last:  # a body of blank lines only: cut between them (the blank pieces are dropped)
            return lambda source, lo, hi: (c for c in find(source, lo, hi) if fence.body_start < c < fence.body_end)
        return lambda source, lo, hi: (c for c in find(source, lo, hi) if first < c < last)  # every piece keeps some code

    def resort(room: Budget, lo: int, hi: int, section: int) -> list[Piece]:
        """Text before the code (carried text, the opening line) and after it (the closing line)
        whole; only the code itself is cut inside."""
        core = (max(lo, first), min(hi, last))
        if core[0] >= core[1]:
            return [Piece(lo, hi, section)]
        outside = [Piece(lo, core[0], section)] if lo < core[0] else []
        return outside + force(room, *core, section) + ([Piece(core[1], hi, section)] if core[1] < hi else [])

    start = block.start if lead is None else lead
    pieces = cut(room, start, block.end, [within(LINES), within(WORDS)], section, block.start, resort)
    # A piece that does not start at the fence's own opening line gets one, and one that does
    # not end at its closing line gets one (a line cut inside, too, stays a closed fence).
    return [
        replace(
            p,
            prefix=opener if p.start > block.start else "",
            suffix=closer if block.start < p.end < fence.body_end else "",
        )
        for p in pieces
    ]


def _opener(budget: Budget, fence) -> str:
    """The line that re-opens a fence's pieces: its own, or only its fence marker (the info
    string dropped) when the line is longer than ``FENCE_LINE_CHARS`` or would take more
    than a quarter of the budget (it is repeated in every piece)."""
    line = fence.open_line + "\n"
    if len(fence.open_line) <= FENCE_LINE_CHARS and budget.count(line) <= budget.limit // 4:
        return line
    return fence.bare_open_line + "\n"
