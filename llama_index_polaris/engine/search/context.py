"""A hit's section as text: the document's own text over its chunks' span, bounded by a token budget.

A section's text is the document's indexed text (``document_texts``: the file decoded and in
NFC, which chunk offsets point into) sliced over the span its chunks cover (``runs``): the
file's own bytes, whatever the chunker did to them (overlap repeats text, a code block cut in
two is re-fenced on both sides). Chunks of one heading path that are not all together (the
same heading twice in a document) give one slice each, joined by a blank line.

A document without a stored text (indexed before Polaris kept it, or written by a door that
gives chunks only: LlamaIndex nodes) has its section rebuilt from its chunks (``stitch``) and
marked not ``exact``: the overlap is dropped by offset, but a re-fenced code block stays as
the chunker wrote it. The budget cuts at a line or word boundary and says so; ``excerpt``
keeps the passage a hit matched in view when the budget cuts its section short.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from ..errors import InputError
from . import literal
from ..words.bigrams import is_cjk
from .terms import content_terms, stem

ELLIPSIS = "\n[…]"
LEAD = "[…]\n"  # text shown from inside a section or passage begins with this
MIN_HEAD_TOKENS = 24  # below this, an excerpt shows the matched passage alone
WINDOW_LEAD_CHARS = 160  # a window opens at most this far before the match on a long line


def check_budget(value: Any, what: str = "the token budget") -> int:
    """``value`` when it is a positive whole number of tokens; InputError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{what} must be a positive whole number of tokens, got {value!r}.")
    return value


RUN_SEPARATOR = "\n\n"  # between the slices of a section whose chunks are not all together


def runs(chunks: Sequence[tuple[int, int | None, int | None]]) -> list[tuple[int, int]] | None:
    """The spans of the document that a section's chunks ``(ordinal, start, end)``, in document
    order, cover: one ``(start, end)`` per run of consecutive chunks. None when a chunk has no
    offsets (its place in the document is unknown)."""
    out: list[tuple[int, int]] = []
    last: int | None = None
    for ordinal, start, end in chunks:
        if start is None or end is None:
            return None
        if out and last is not None and ordinal == last + 1:
            out[-1] = (min(out[-1][0], start), max(out[-1][1], end))
        else:
            out.append((start, end))
        last = ordinal
    return out


def section_text(slices: Sequence[str | None] | None, chunks: Sequence[tuple[str, int | None, int | None]]) -> tuple[str, bool]:
    """``(text, exact)`` of a section: its document's ``slices`` over its ``runs`` joined, when
    the document's text is stored (exact); else its ``chunks`` ``(text, start, end)`` stitched."""
    if slices is not None and all(s is not None for s in slices):
        return RUN_SEPARATOR.join(slices), True  # type: ignore[arg-type]
    return stitch(chunks), False


def stitch(chunks: Sequence[tuple[str, int | None, int | None]]) -> str:
    """The section's text rebuilt from its chunks ``(text, start, end)`` in document order (when the
    document's own text is not stored)."""
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


def excerpt(section: str, passage: str, count_tokens: Callable[[str], int], budget: int, query: str = "") -> str:
    """What to show of a hit within ``budget`` tokens: ``section`` (its text as ``bounded`` cut it
    to ``budget``) when that holds ``passage`` (the chunk that matched) whole or was not cut;
    else as much of the section's start as leaves room for the passage, then the passage; else
    (a passage longer than the budget) the part of the passage where it first answers ``query``
    (``first_match``). A budget never hides the part of a long section that the query found."""
    if not section.endswith(ELLIPSIS) or passage in section:
        return section
    room = budget - count_tokens(passage)
    if room >= MIN_HEAD_TOKENS:
        head = bounded(section[: -len(ELLIPSIS)], count_tokens, room)
        return head + ("" if head.endswith(ELLIPSIS) else ELLIPSIS) + "\n\n" + passage
    shown = window(passage, first_match(passage, query), count_tokens, budget)
    if not shown.startswith(LEAD) and not section.startswith(passage[:64]):
        shown = LEAD + shown  # the passage itself starts inside the section
    return shown


def window(text: str, at: int, count_tokens: Callable[[str], int], budget: int) -> str:
    """``budget`` tokens of ``text`` that hold offset ``at``: from the start of its line on, or, when
    the rest of the text is shorter than the budget, from as early as the budget allows; a window
    that does not start at the beginning begins with ``[…]``."""
    begin = text.rfind("\n", 0, at) + 1
    if at - begin > WINDOW_LEAD_CHARS:  # a long line: from the word before
        begin = text.rfind(" ", 0, at - WINDOW_LEAD_CHARS) + 1
    if begin and count_tokens(text[begin:]) < budget:
        lo, hi = 0, begin  # the earliest start whose rest still fits: count is monotone in the suffix
        while lo < hi:
            mid = (lo + hi) // 2
            if count_tokens(text[mid:]) <= budget:
                hi = mid
            else:
                lo = mid + 1
        begin = lo if lo == 0 else (text.find(" ", lo) + 1 or lo)
    part = bounded(text[begin:], count_tokens, budget)
    return (LEAD if begin else "") + part


def query_pattern(query: str) -> re.Pattern[str] | None:
    """The query's words of 3 characters or more (stop words aside), lightly stemmed, as word
    prefixes, case aside: "expired sessions" finds "expires" and "Session"; a CJK bigram (or
    lone character) wherever it stands, as the index reads a CJK run."""
    terms = dict.fromkeys(t if is_cjk(t) else stem(t) for t in content_terms(query, 3))
    cjk = [re.escape(t) for t in terms if is_cjk(t)]
    latin = [re.escape(t) for t in terms if not is_cjk(t)]
    parts = ([r"\b(?:" + "|".join(latin) + r")\w*"] if latin else []) + cjk
    return re.compile("|".join(parts), re.I) if parts else None


def first_match(text: str, query: str) -> int:
    """Where ``text`` first answers ``query``: the first place it names one of a lookup's
    identifiers as written (``literal``), else its first query word, else 0."""
    named = literal.spans(text, literal.lookup_terms(query))
    if named:
        return named[0][0]
    pattern = query_pattern(query)
    found = pattern.search(text) if pattern else None
    return found.start() if found else 0
