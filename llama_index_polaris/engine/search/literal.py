"""Identifiers as written: where a query's ``--flag``, ``ENV_VAR`` or ``~1.2.3`` occurs as itself.

FTS5's tokenizer reads ``OUT_DIR`` as the words "out dir", ``--locked`` as "locked" and
``~1.2.3`` as "1 2 3", so a BM25 hit for an identifier can be prose that never names it
(``--out-dir``, "the lock file is locked", ``1.2.3``). These pure functions find the
identifier-like terms of a query and move the BM25 hits that name one as written (case
aside, not inside a longer identifier) above those that only share its words.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Iterable, Sequence

from .terms import STOP_WORDS

MARKS = frozenset("_./\\:@#$=~^")
FENCES = ("```", "~~~")
_TRIM = "\"'`,;!?()"


def _term(raw: str) -> str:
    """A whitespace piece of a query without quotes, backticks or a sentence's punctuation."""
    term = raw.strip(_TRIM)
    while term.endswith((".", ":")) and len(term) > 1:
        term = term[:-1].strip(_TRIM)
    return term


def is_identifier(term: str) -> bool:
    """Spelled like a flag, path, environment variable, constant, camelCase name, version or key."""
    if len(term) < 2 or not any(c.isalnum() for c in term):
        return False
    return (
        term.startswith("-")
        or any(c in MARKS or c.isdigit() for c in term[:-1])
        or (term.isupper() and any(c.isalpha() for c in term))
        or any(a.islower() and b.isupper() for a, b in pairwise(term))
        or (term.startswith("[") and term.endswith("]"))
    )


def identifiers(query: str) -> list[str]:
    """The query's distinct identifier-like terms, in order."""
    return list(dict.fromkeys(t for t in (_term(p) for p in query.split()) if is_identifier(t)))


def is_lookup(query: str) -> bool:
    """Every meaningful term of the query is an identifier (``OUT_DIR``, ``cargo::rustc-cfg``)."""
    terms = [t for t in (_term(p) for p in query.split()) if t and t.lower() not in STOP_WORDS]
    return bool(terms) and all(is_identifier(t) for t in terms)


def occurs(text: str, needle: str) -> bool:
    """Whether lower-cased ``text`` holds lower-cased ``needle`` as itself: not preceded or
    followed by a character of an identifier, nor followed by ``.`` and one."""
    at = text.find(needle)
    while at >= 0:
        end = at + len(needle)
        before = text[at - 1] if at else " "
        after, next_ = text[end:end + 1], text[end + 1:end + 2]
        if not _continues(before) and not _continues(after) and not (after == "." and _word(next_)):
            return True
        at = text.find(needle, at + 1)
    return False


def named(text: str, terms: Sequence[str]) -> int:
    """How many of the identifiers ``terms`` ``text`` names as written (case aside)."""
    low = text.lower()
    return sum(1 for t in terms if occurs(low, t.lower()))


def _continues(c: str) -> bool:
    return c == "-" or _word(c)


def _word(c: str) -> bool:
    return bool(c) and (c.isascii() and (c.isalnum() or c == "_"))


def lift(hits: Sequence[tuple[int, float]], texts: dict[int, str],
         terms: Iterable[str]) -> list[tuple[int, float]]:
    """BM25 ``hits`` with those naming more of ``terms`` as written first; among those, the
    chunks of a section headed by the identifier (its definition), then those naming it
    outside code blocks (documentation explains an identifier in prose; examples use it);
    BM25 order within.

    Each hit takes the score of the place it moves to, so the scores still fall down the
    list and score fusion reads the new order.
    """
    terms = list(terms)
    if not terms or not hits:
        return list(hits)
    count = [named(texts.get(cid, ""), terms) for cid, _ in hits]
    if not any(count):
        return list(hits)
    prose = [_prose_named(texts.get(cid, ""), terms, count[i]) for i, (cid, _) in enumerate(hits)]
    heads = [_heads(texts.get(cid, ""), terms) if count[i] else 0 for i, (cid, _) in enumerate(hits)]
    order = sorted(range(len(hits)), key=lambda i: (-count[i], -heads[i], -prose[i], i))
    return [(hits[i][0], hits[place][1]) for place, i in enumerate(order)]


def _prose_named(text: str, terms: Sequence[str], count: int) -> int:
    """How many of the identifiers ``text`` names outside fenced code blocks."""
    if not count or not any(f in text for f in FENCES):
        return count
    return named(outside_code(text), terms)


def outside_code(text: str) -> str:
    """``text`` without its fenced code blocks (a block left open runs to the end)."""
    kept, fence = [], None
    for line in text.split("\n"):
        start = line.lstrip()[:3]
        if fence is None and start in FENCES:
            fence = start
        elif fence is not None:
            fence = None if start == fence else fence
        else:
            kept.append(line)
    return "\n".join(kept)


def _heads(text: str, terms: Sequence[str]) -> int:
    """1 when the chunk's own heading (``text``'s first line) is one of the identifiers itself."""
    own = text.split("\n", 1)[0].replace("`", "").strip().removesuffix("()").strip().lower()
    return int(any(own == t.lower().removesuffix("()") for t in terms))
