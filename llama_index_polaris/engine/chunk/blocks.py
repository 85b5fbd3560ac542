"""The chunker's internal model: sections of blocks with exact character extents.

Extents tile the text: a block runs from its first line to the next sibling's first
line, so blank lines and link reference definitions belong to the block before them
and every character of the body lies in exactly one section.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fence:
    """A fenced code block's delimiters, for re-fencing the pieces of a split."""

    open_line: str
    close_line: str
    body_start: int
    body_end: int
    bare_open_line: str = "```"  # the opening line up to its fence marker (no info string)


@dataclass(frozen=True)
class Block:
    """A Markdown block; ``kind`` picks how it is cut when it alone is over budget.

    ``"text"``: sentences, then words. ``"lines"``: between lines (indented code).
    ``"fence"``: between lines, each piece re-fenced. ``children``: by child blocks first.
    """

    start: int
    end: int
    kind: str = "text"
    children: tuple["Block", ...] = ()
    fence: Fence | None = None


@dataclass(frozen=True)
class Section:
    """A heading and its content up to the next heading (or the text before the first)."""

    start: int
    end: int
    heading_path: tuple[str, ...]
    heading_level: int
    blocks: tuple[Block, ...]


def fence_ranges(blocks: tuple[Block, ...]) -> list[tuple[int, int]]:
    """``(start, end)`` of every fenced code block in ``blocks``, nested ones included, in order."""
    ranges: list[tuple[int, int]] = []
    for block in blocks:
        if block.fence is not None:
            ranges.append((block.start, block.end))
        ranges.extend(fence_ranges(block.children))
    return ranges
