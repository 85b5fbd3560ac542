"""Query terms: the words of a user's query that carry meaning."""

from __future__ import annotations

import functools
import re

from ..words.bigrams import is_cjk, spaced
from ..text import nfc

# A word: letters, digits and underscores, and the combining marks that follow them. Python's
# ``\w`` stops at a mark, FTS5's unicode61 keeps (and with remove_diacritics folds) the
# general-purpose ones: a mark NFC cannot compose ("q" + U+0301) must not cut a query word
# that the index holds whole. A word read longer than FTS5 reads it is harmless: it is sent
# as a quoted phrase, which FTS5 tokenizes itself.
MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
WORD = re.compile(rf"\w[\w{MARKS}]*", re.UNICODE)

# Function words that say nothing about a topic (English); question words included.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over own
    same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves use using used get got also may might
    must shall there's it's i'm can't don't doesn't""".split()
)


def words(text: str, unigrams: bool = False) -> list[str]:
    """Lower-cased word tokens of ``text`` (letters, digits, underscores and the marks on them),
    read from its NFC spelling, where marks are composed into their letters when they can be;
    a Chinese, Japanese or Korean run is read as its character bigrams (``bigrams.spaced``), and
    with ``unigrams`` a Han run's characters too (the terms of the index; not the words a
    person would mark, which the boost, excerpts and match strength read)."""
    return [w.lower() for w in WORD.findall(spaced(nfc(text), unigrams))]


def content_terms(query: str, min_len: int = 1) -> list[str]:
    """The query's distinct non-stop-words of at least ``min_len`` characters (any CJK bigram or
    lone character: a two-character word is a whole word there), in order."""
    seen: dict[str, None] = {}
    for w in words(query):
        if (len(w) >= min_len or is_cjk(w)) and w not in STOP_WORDS:
            seen.setdefault(w, None)
    return list(seen)


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A light suffix stripper so that 'sessions' meets 'session' (not a full stemmer)."""
    for suffix in ("ations", "ation", "ings", "ing", "ies", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


# -- the words a BM25 query searches for (both backends read them the same way) ----------
MAX_TERMS = 64


# An identifier written with joining punctuation: codegen-units, build.rustflags, cargo::rustc-cfg.
COMPOUND = re.compile(rf"\w[\w{MARKS}]*(?:(?:[-.:/]|::)\w[\w{MARKS}]*)+", re.UNICODE)
IDENTIFIER_PHRASES = True


def query_words(query: str, unigrams: bool = True) -> list[str]:
    """The distinct words searched for: stop words dropped unless nothing else is left.

    An identifier joined by punctuation (``codegen-units``) is searched as its words and
    as itself, which FTS5 reads as a phrase: the words next to each other, in order. A
    phrase is rare, so its BM25 weight is high: chunks that name the identifier exactly
    rise above those that use its words apart. The query is read in NFC, as stored text is, and
    its CJK runs as their bigrams, each a word of its own (``bigrams.spaced``), and a Han run's
    characters too, as the index reads them (``unigrams=False``: the bigrams alone, the words the
    highlighter marks).
    """
    query = spaced(nfc(query), unigrams)
    all_words = list(dict.fromkeys(words(query)))
    content = [w for w in all_words if w not in STOP_WORDS] or all_words
    if IDENTIFIER_PHRASES:
        compounds = [m.lower() for m in COMPOUND.findall(query)]
        content = list(dict.fromkeys([*compounds, *content]))
    # past MAX_TERMS a long CJK question loses its single characters first, then words from its end
    content.sort(key=lambda w: len(w) == 1 and is_cjk(w))
    return content[:MAX_TERMS]


def phrases_query(query_words: list[str]) -> str:
    """``words`` as an FTS5 MATCH expression: each one a quoted phrase, joined by OR."""
    return " OR ".join(f'"{w}"' for w in query_words)


def fts_query(query: str, unigrams: bool = True) -> str | None:
    """An FTS5 MATCH expression for user text: distinct quoted words joined by OR.

    Stop words are dropped unless nothing else is left. Each word is a quoted string,
    so FTS5 applies its tokenizer (``rrf_k`` becomes the phrase "rrf k") and no
    character of the query is read as syntax. None when the query has no words.
    """
    content = query_words(query, unigrams)
    return phrases_query(content) if content else None


