"""Identifiers as written: where a query's ``--flag``, ``ENV_VAR`` or ``~1.2.3`` occurs as itself.

FTS5's tokenizer reads ``OUT_DIR`` as the words "out dir", ``--locked`` as "locked" and
``~1.2.3`` as "1 2 3", so a BM25 hit for an identifier can be prose that never names it
(``--out-dir``, "the lock file is locked", ``1.2.3``). These pure functions find the
identifier-like terms of a query and move the BM25 hits that name one as written (case
aside, not inside a longer identifier) above those that only share its words.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Iterable, Sequence

from .terms import STOP_WORDS

MARKS = frozenset("_./\\:@#$=~^")
FENCE = re.compile(r"^(```|~~~).*?(^\1|\Z)", re.S | re.M)  # a fenced code block, to its end or the text's
EDGE = "A-Za-z0-9_-"  # characters that continue an identifier: --pre is not found inside --pre-glob
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


def pattern(term: str) -> re.Pattern[str]:
    """``term`` as itself: case aside, not preceded or followed by a character of an identifier."""
    return re.compile(rf"(?<![{EDGE}]){re.escape(term)}(?![{EDGE}])(?!\.[A-Za-z0-9_])", re.IGNORECASE)


def named(text: str, patterns: Sequence[re.Pattern[str]]) -> int:
    """How many of the identifiers ``text`` names as written."""
    return sum(1 for p in patterns if p.search(text))


def lift(hits: Sequence[tuple[int, float]], texts: dict[int, str],
         terms: Iterable[str]) -> list[tuple[int, float]]:
    """BM25 ``hits`` with those naming more of ``terms`` as written first, then those naming
    them outside code blocks (documentation explains an identifier in prose; examples use
    it), BM25 order within.

    Each hit takes the score of the place it moves to, so the scores still fall down the
    list and score fusion reads the new order.
    """
    patterns = [pattern(t) for t in terms]
    if not patterns or not hits:
        return list(hits)
    count = [named(texts.get(cid, ""), patterns) for cid, _ in hits]
    if not any(count):
        return list(hits)
    prose = [named(FENCE.sub(" ", texts.get(cid, "")), patterns) if count[i] else 0 for i, (cid, _) in enumerate(hits)]
    order = sorted(range(len(hits)), key=lambda i: (-count[i], -prose[i], i))
    return [(hits[i][0], hits[place][1]) for place, i in enumerate(order)]
