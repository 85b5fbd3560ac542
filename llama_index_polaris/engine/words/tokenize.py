"""Terms as an index's FTS5 tokenizer makes them, for code that is not FTS5 itself.

Both backends use it: the SQLite file to keep its BM25 posting lists beside FTS5
(``db/postings.py``), the Postgres backend to write and query its posting tables, so that
a word is the same term whichever store holds the index (the tokenizer is FTS5's own, run
on a private in-memory SQLite table). It reads every text as the index does: CJK runs as
their character bigrams (``bigrams.spaced``), and a chunk's text without blobs
(``words_text``, ``blobs.readable``), the rest as written.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Sequence

from .bigrams import spaced
from .blobs import readable
from ..search.terms import STOP_WORDS

WORD = re.compile(r"\w+")
DEFAULT_TOKENIZER = "porter unicode61 remove_diacritics 2"


def _as_written(text: str) -> str:
    return text


def _query_word(word: str) -> str:
    """A word of ``query_words``, whose CJK runs are cut already: its bigrams and lone characters
    stay one term each (spaced with unigrams, a bigram would become a phrase of three)."""
    return spaced(word, unigrams=False)


def _index_text(text: str) -> str:
    """A chunk's text as its terms are made: without blobs, CJK runs as bigrams."""
    return spaced(readable(text))


def private_fts(tokenizer: str, table: str, columns: str, **connect: Any) -> Any:
    """A private in-memory SQLite connection holding one FTS5 table ``table(columns)`` with the
    index's ``tokenizer`` (quoted here): where both backends run FTS5's own tokenizer."""
    from ..sqlite_module import sqlite_module

    conn = sqlite_module().connect(":memory:", **connect)
    quoted = tokenizer.replace("'", "''")
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({columns}, tokenize='{quoted}')")
    return conn


class Tokenizer:
    """Terms as the index's FTS5 tokenizer makes them (stemmed, folded), in a private
    in-memory database: writing a temp table on the store's own connection would count as
    a change there and make the caches reload."""

    def __init__(self, tokenizer: str, bigrams: bool = True) -> None:
        """``bigrams=False`` reads CJK runs as written, as indexes made before #36 did (their migrations)."""
        self.tokenizer = tokenizer
        self._read_word = _query_word if bigrams else _as_written  # a query's words are cut already
        self._read = spaced if bigrams else _as_written
        self._read_text = _index_text if bigrams else _as_written
        self.conn = private_fts(tokenizer, "words", "text, heading_path", check_same_thread=False)
        self.conn.execute("CREATE VIRTUAL TABLE words_terms USING fts5vocab(words, instance)")
        self._stop: frozenset[str] | None = None
        self.sightings: Counter[str] = Counter()  # how often this process wrote each uncounted term

    def terms(self, words: list[str]) -> list[tuple[str, ...]]:
        """Each word's terms, in order."""
        self.conn.execute("DELETE FROM words")
        self.conn.executemany("INSERT INTO words(rowid, text) VALUES (?, ?)", [(i, self._read_word(w)) for i, w in enumerate(words)])
        out: list[list[str]] = [[] for _ in words]
        for doc, term in self.conn.execute("SELECT doc, term FROM words_terms ORDER BY doc, offset"):
            out[doc].append(term)
        return [tuple(t) for t in out]

    def positions(self, rows: list[tuple[int, str, str]],
                  terms: Sequence[str] | None = None) -> dict[int, list[tuple[str, int, int]]]:
        """For (id, text, heading path) rows: each id's (term, column, offset) in order, as
        FTS5 counts them (column 0 is the text, 1 the heading path); only ``terms``' when given."""
        self.conn.execute("DELETE FROM words")
        self.conn.executemany("INSERT INTO words(rowid, text, heading_path) VALUES (?, ?, ?)", self._rows(rows))
        out: dict[int, list[tuple[str, int, int]]] = {r[0]: [] for r in rows}
        only = "" if terms is None else f" WHERE term IN ({', '.join('?' * len(terms))})"
        for doc, term, col, offset in self.conn.execute(
                f"SELECT doc, term, col, offset FROM words_terms{only} ORDER BY doc, col, offset", tuple(terms or ())):
            out[doc].append((term, 0 if col == "text" else 1, offset))
        return out

    def counts(self, rows: list[tuple[int, str, str]]) -> tuple[dict[int, dict[str, int]], dict[int, int]]:
        """For (id, text, heading path) rows: each id's term counts over both columns, and
        its length in tokens (FTS5's docsize, summed over the columns)."""
        self.conn.execute("DELETE FROM words")
        self.conn.executemany("INSERT INTO words(rowid, text, heading_path) VALUES (?, ?, ?)", self._rows(rows))
        counts: dict[int, dict[str, int]] = {r[0]: {} for r in rows}
        lengths = dict.fromkeys(counts, 0)
        for doc, term, n in self.conn.execute("SELECT doc, term, count(*) FROM words_terms GROUP BY doc, term"):
            counts[doc][term] = n
            lengths[doc] += n
        return counts, lengths

    def _rows(self, rows: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
        return [(i, self._read_text(text), self._read(heading or "")) for i, text, heading in rows]

    @property
    def stop_terms(self) -> frozenset[str]:
        """The terms of the stop words: never given posting lists."""
        if self._stop is None:
            # Only whole-word stop words: "don't" is searched as "don" and "t", and "t" is no
            # stop word of a query ("T cell").
            whole = sorted(w for w in STOP_WORDS if WORD.fullmatch(w))
            self._stop = frozenset(t for ts in self.terms(whole) for t in ts)
        return self._stop


def words_text(text: str | None) -> str | None:
    """What a chunk's terms are made of: its text without blobs (URL payloads, ``data:`` URIs,
    base64 and hex runs, ``blobs.py``); ``sqlite/schema.cjk_columns`` stores it, bigrams and all, for FTS5."""
    return text if text is None else readable(text)

