"""A hit's section as text: its chunks stitched back together, bounded by a token budget.

Chunks of one section overlap (``chunk_overlap_chars``) and carry their exact character
offsets in the document, so the section is rebuilt without the repeated text. A chunk
whose text is not its source slice (a code block cut in two is re-fenced on both sides)
is kept whole. The budget cuts at a line or word boundary and says so.
"""

from __future__ import annotations

from typing import Callable, Sequence

ELLIPSIS = "\n[…]"


def stitch(chunks: Sequence[tuple[str, int | None, int | None]]) -> str:
    """The section's text from its chunks ``(text, start, end)`` in document order."""
    out: list[str] = []
    reached: int | None = None  # how far into the document the text so far goes
    for text, start, end in chunks:
        exact = start is not None and end is not None and end - start == len(text)
        if out and exact and reached is not None and start < reached:
            text = text[min(reached - start, len(text)):]  # drop what the previous chunk already holds
        elif out and not (exact and start == reached):
            text = "\n\n" + text  # not contiguous: keep the pieces apart
        out.append(text)
        if end is not None:
            reached = end if reached is None else max(reached, end)
    return "".join(out)


def bounded(text: str, count_tokens: Callable[[str], int], budget: int) -> str:
    """``text`` if it fits ``budget`` tokens, else its longest line- or word-aligned prefix that does."""
    if count_tokens(text) <= budget:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix within budget: count is monotone in the prefix length
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    cut = text.rfind("\n", 0, lo)
    if cut < lo // 2:
        cut = text.rfind(" ", 0, lo)
    return text[: cut if cut > 0 else lo].rstrip() + ELLIPSIS
