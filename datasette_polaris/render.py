"""Pure helpers for the pages: highlighting, overlaps, sizes. Every text is escaped here."""

from __future__ import annotations

import re
from typing import Sequence

from markupsafe import Markup, escape

from llama_index_polaris.engine.search.terms import content_terms, stem

MAX_TEXT_OVERLAP = 2000  # characters compared when offsets are missing


def term_pattern(query: str) -> re.Pattern[str] | None:
    """Words starting with a (lightly stemmed) content term of ``query``, or None."""
    stems = sorted({stem(t) for t in content_terms(query, min_len=2)}, key=len, reverse=True)
    if not stems:
        return None
    return re.compile(r"\b(?:%s)\w*" % "|".join(map(re.escape, stems)), re.IGNORECASE)


def highlight(text: str, query: str) -> Markup:
    """``text`` escaped, with the query's terms wrapped in <mark>.

    The raw text is split at the matches and every piece is escaped before any markup
    is added, so neither the document nor the query can inject HTML (and a term such as
    "amp" cannot land inside an entity of the escaped text).
    """
    pattern = term_pattern(query)
    if pattern is None:
        return Markup(escape(text))
    out, pos = [], 0
    for m in pattern.finditer(text):
        out.append(escape(text[pos:m.start()]))
        out.append(Markup("<mark>%s</mark>") % m.group())
        pos = m.end()
    out.append(escape(text[pos:]))
    return Markup("").join(out)


def overlap(prev_text: str, prev_end: int | None, text: str, start: int | None) -> int:
    """Characters this chunk shares with the one before it.

    From the stored character offsets when both are known, else the longest suffix of
    the previous text that is a prefix of this one.
    """
    if prev_end is not None and start is not None:
        return max(0, prev_end - start)
    limit = min(len(prev_text), len(text), MAX_TEXT_OVERLAP)
    for n in range(limit, 0, -1):
        if prev_text.endswith(text[:n]):
            return n
    return 0


def overlaps(chunks: Sequence[tuple[str, int | None, int | None]]) -> list[tuple[int, int]]:
    """(with previous, with next) for each (text, start_char, end_char) in document order."""
    before = [0] + [
        overlap(chunks[i - 1][0], chunks[i - 1][2], chunks[i][0], chunks[i][1]) for i in range(1, len(chunks))
    ]
    after = before[1:] + [0]
    return list(zip(before, after))


def human_size(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"  # pragma: no cover


def fmt(value: float | None, digits: int = 4) -> str:
    """A stage figure for a table cell: '–' where the stage did not see the chunk."""
    if value is None:
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def segments(text: str, shared_before: int, shared_after: int, query: str) -> list[tuple[str, Markup]]:
    """``text`` cut into (css class, highlighted html): the part shared with the previous
    chunk, the chunk's own part, the part shared with the next chunk (empty parts dropped)."""
    head = min(shared_before, len(text))
    tail = max(head, len(text) - min(shared_after, len(text)))
    parts = [("polaris-overlap", text[:head]), ("", text[head:tail]), ("polaris-overlap", text[tail:])]
    return [(cls, highlight(part, query)) for cls, part in parts if part]
