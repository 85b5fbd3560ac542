"""Identifiers as written: where a query's ``--flag``, ``ENV_VAR`` or ``~1.2.3`` occurs as itself.

FTS5's tokenizer reads ``OUT_DIR`` as the words "out dir", ``--locked`` as "locked" and
``~1.2.3`` as "1 2 3", so a BM25 hit for an identifier can be prose that never names it
(``--out-dir``, "the lock file is locked", ``1.2.3``). These pure functions find the
identifier-like terms of a query and move the BM25 hits that name one as written (case
aside, not inside a longer identifier) above those that only share its words.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Iterable, Iterator, Sequence

from ..words.bigrams import is_cjk, spaced
from .terms import MAX_TERMS, STOP_WORDS

MARKS = frozenset("_./\\:@#$=~^")
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
    """The query's distinct identifier-like terms, in order (stop words, even in capitals, are
    not: BM25 leaves them out too), at most ``MAX_TERMS`` as the full-text query. ``query`` is in
    NFC already, the spelling stored text has (the doors normalise it: ``pipeline.check_query``,
    ``Highlighter``)."""
    terms = (t for t in (_term(p) for p in _pieces(query)) if t.lower() not in STOP_WORDS and is_identifier(t))
    return list(dict.fromkeys(terms))[:MAX_TERMS]


def _pieces(query: str) -> list[str]:
    """The query's whitespace pieces (``query`` is in NFC), a CJK run apart from what it touches and
    cut into its bigrams (``bigrams.spaced``): ``OUT_DIR的值`` is ``OUT_DIR`` and two words."""
    return spaced(query, unigrams=False).split()


def is_lookup(query: str) -> bool:
    """Every meaningful term of the query is an identifier (``OUT_DIR``, ``cargo::rustc-cfg``)."""
    terms = [t for t in (_term(p) for p in _pieces(query)) if t and t.lower() not in STOP_WORDS]
    return bool(terms) and all(is_identifier(t) for t in terms)


def lookup_terms(query: str) -> list[str]:
    """The identifiers of a query of identifiers only; [] for any other query."""
    return identifiers(query) if is_lookup(query) else []


def occurs(text: str, needle: str) -> bool:
    """Whether lower-cased ``text`` holds lower-cased ``needle`` as itself: not inside a longer
    identifier, so neither a letter, digit, ``_`` or ``-`` next to it, nor a ``.`` joining it
    to one (``build.rustflags`` does not name ``RUSTFLAGS``, ``OUT_DIR.join`` not ``OUT_DIR``)."""
    return next(_places(text, needle), None) is not None


def spans(text: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) of every place ``text`` names one of ``terms`` as written, in order."""
    if not terms:
        return []
    low = text.lower()
    found = {(at, at + len(t)) for t in terms for at in _places(low, t.lower())}
    out: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _places(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle) if needle else -1
    while at >= 0:
        end = at + len(needle)
        before, after = text[at - 1:at], text[end:end + 1]
        if (not _continues(before) and not _continues(after)
                and not (after == "." and _word(text[end + 1:end + 2]))
                and not (before == "." and _word(text[at - 2:at - 1]) and _word(needle[:1]))):
            yield at
        at = text.find(needle, at + 1)


def named(text: str, terms: Sequence[str]) -> int:
    """How many of the identifiers ``terms`` ``text`` names as written (case aside)."""
    low = text.lower()
    return sum(1 for t in terms if occurs(low, t.lower()))


def _continues(c: str) -> bool:
    return c == "-" or _word(c)


def _word(c: str) -> bool:
    """A character that continues an identifier (a CJK letter does not: those scripts need no space)."""
    return bool(c) and ((c.isalnum() and not is_cjk(c)) or c == "_")


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
    if not count or ("```" not in text and "~~~" not in text):
        return count
    return named(outside_code(text), terms)


def outside_code(text: str) -> str:
    """``text`` without its fenced code blocks: a fence of three or more backticks or tildes
    closes at a line of the same character at least as long (CommonMark); a block left open
    runs to the end."""
    kept, fence = [], ""
    for line in text.split("\n"):
        run = _fence(line)
        if not fence and run:
            fence = run
        elif fence:
            if run and run[0] == fence[0] and len(run) >= len(fence) and not line.strip()[len(run):].strip():
                fence = ""
        else:
            kept.append(line)
    return "\n".join(kept)


def _fence(line: str) -> str:
    """The run of backticks or tildes opening ``line`` when it is a fence (three or more)."""
    stripped = line.lstrip()
    char = stripped[:1]
    if char not in ("`", "~"):
        return ""
    run = stripped[:len(stripped) - len(stripped.lstrip(char))]
    return run if len(run) >= 3 else ""


def _heads(text: str, terms: Sequence[str]) -> int:
    """1 when the chunk's own heading (``text``'s first line) is one of the identifiers itself,
    alone or among aliases (``-v, --verbose``)."""
    own = text.split("\n", 1)[0].replace("`", "").strip().lower()
    names = {own, *(n.strip() for n in own.replace(" / ", ",").replace(" | ", ",").split(","))}
    names = {n.removesuffix("()").strip() for n in names if n}
    return int(any(t.lower().removesuffix("()") in names for t in terms))
