"""Blobs: runs of text no reader can use, found so that they are kept but never read.

A playground link's payload (``https://play.vuejs.org/#eNqVkM...``), a ``data:`` URI's
payload, a base64 or hex string, a percent-encoded URL payload: shown as written in a hit,
but not counted against a chunk's budget, not embedded and not indexed as words
(DESIGN.md, "Terms"). What stays readable around one does count: the link's text, the
scheme and host (``https://play.vuejs.org/#``), the ``data:image/png;base64,`` head.

Pure functions over a string; ``blob_spans`` decides, everything else follows it.
"""

from __future__ import annotations

import re

# A run of base64 (and base64url) characters long enough to hold a hash: where blobs are looked for.
_CANDIDATE = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{32,}")
BASE64_CHARS = 40  # a base64 payload is at least this long (shorter runs are words and paths)
# Hex of a hash or more (an MD5 is 32), not part of a longer word.
_HEX = re.compile(r"(?<![A-Za-z0-9])[0-9a-fA-F]{32,}(?![A-Za-z0-9])")
# A data: URI's payload (after the comma), base64 or percent-encoded.
_DATA = re.compile(r"\bdata:[\w.+-]*/[\w.+-]*(?:;[\w.+=-]*)*,([A-Za-z0-9+/=%_.~-]{16,})")
# A percent-encoded payload: eight or more escapes close together.
_ENCODED = re.compile(r"(?:%[0-9A-Fa-f]{2}[^\s()\[\]\"'<>%]{0,12}){8,}")
# Share of adjacent letters and digits that change class (digit/upper/lower): about 0.65 in
# random base64, under 0.2 in words, paths and camelCase identifiers.
BASE64_SWITCHES = 0.35
MOSTLY = 0.5  # a text is "mostly blob" when blobs hold more than this share of its characters


def blob_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of ``text`` that are blobs, sorted and disjoint."""
    found = [m.span(1) for m in _DATA.finditer(text)] if "data:" in text else []
    found += [m.span() for m in _ENCODED.finditer(text)] if "%" in text else []
    for m in _CANDIDATE.finditer(text):  # one scan; each long run is then read on its own
        run, start = m.group(), m.start()
        if len(run) >= BASE64_CHARS and is_base64(run):
            found.append(m.span())
        else:
            found += [(start + h.start(), start + h.end()) for h in _HEX.finditer(run) if _mixed_hex(h.group())]
    return _merged(found)


def is_base64(run: str) -> bool:
    """Whether ``run`` (base64 characters only) reads as random base64 rather than words."""
    alnum = [c for c in run if c.isalnum()]
    if len(alnum) < 0.85 * len(run):
        return False
    classes = [0 if c.isdigit() else 1 if c.isupper() else 2 for c in alnum]
    if len(set(classes)) < 3:
        return False
    return sum(a != b for a, b in zip(classes, classes[1:])) >= BASE64_SWITCHES * len(alnum)


def readable(text: str) -> str:
    """``text`` with each blob a single space (what is embedded and made into terms: the words on
    either side stay apart, and the tokens are those ``masked`` counts); ``text`` when it has none."""
    spans = blob_spans(text)
    if not spans:
        return text
    kept, pos = [], 0
    for start, end in spans:
        kept.append(text[pos:start])
        pos = end
    kept.append(text[pos:])
    return " ".join(kept)


def masked(text: str, spans: list[tuple[int, int]] | None = None) -> str:
    """``text`` with each blob character a space (``spans``: its ``blob_spans``, when known): the
    same offsets, blobs weigh nothing."""
    spans = blob_spans(text) if spans is None else spans
    if not spans:
        return text
    parts, pos = [], 0
    for start, end in spans:
        parts += [text[pos:start], " " * (end - start)]
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def blob_share(text: str) -> float:
    """The share of ``text``'s non-space characters inside blobs (0.0 for an empty text)."""
    solid = sum(not c.isspace() for c in text)
    if not solid:
        return 0.0
    return sum(e - s for s, e in blob_spans(text)) / solid


def is_mostly_blob(text: str) -> bool:
    """Whether blobs hold more than half of ``text`` (a junk chunk when it is a chunk's text)."""
    return blob_share(text) > MOSTLY


def _mixed_hex(run: str) -> bool:
    """Hex as a hash writes it: digits and letters both common (about 62% and 38%), not a
    word of ``a``s with one digit."""
    digits = sum(c.isdigit() for c in run)
    return 0.2 * len(run) <= digits <= 0.9 * len(run)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
