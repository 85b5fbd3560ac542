"""The words of a text a query matched, as every door that marks them shows them.

Highlighting asks FTS5 itself. The words marked in a text are the ones the BM25 stage's
MATCH expression (``terms.fts_query``) finds in it under the index's own tokenizer:
``unicode61`` splits ``token_expired`` into ``token`` and ``expired``, ``porter`` makes
``expires`` meet ``expired``. FTS5's ``highlight()`` runs in a private in-memory database
with that tokenizer, so the index is never written to and the words marked are exactly
the words BM25 matched, never a second, regex-based idea of a word. For a query of
identifiers only (``OUT_DIR``, ``--locked``), whose BM25 list puts first the texts naming
one as written, those places are marked (``literal.spans``), and the words elsewhere.
FTS5 reads each text as the index does, its CJK runs as character bigrams
(``bigrams.spaced``, bigrams alone: a Han character of the query is a BM25 term, but marking
each one wherever it stands would mark half a page); what it marks there is mapped back to the
text as stored (``bigrams.spaced_origin``), overlapping bigrams joined into one mark.

The Datasette page (``datasette_polaris.render``) and the notebook's tables (``display``)
both mark through ``Highlighter``, so they mark the same words.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..words.bigrams import original_span, spaced_origin
from ..text import html_escape, nfc
from ..words.tokenize import DEFAULT_TOKENIZER, private_fts
from . import literal
from .terms import fts_query

_MARKERS = [chr(c) for c in range(0xE000, 0xE100)]  # private-use characters, never shown

Span = tuple[int, int]


class Highlighter:
    """Marks the words of texts that the BM25 stage would match for ``query``.

    ``tokenizer`` is the index's FTS5 ``tokenize=`` argument (recorded in polaris_meta).
    Spans are computed in batches (``prime``) and remembered per text.
    """

    def __init__(self, query: str, tokenizer: str = DEFAULT_TOKENIZER) -> None:
        query = nfc(query) if query else query  # a door of its own: marks what a search of this text matched
        self.match = fts_query(query, unigrams=False) if query else None  # the words, not each Han character
        self.tokenizer = tokenizer
        # a query of identifiers only ranks the texts that name one as written: those places are marked
        self.identifiers = literal.lookup_terms(query) if query else []
        self._spans: dict[str, list[Span]] = {}

    def prime(self, texts: Iterable[str]) -> None:
        """Compute the spans of every text not seen yet, in one FTS5 query."""
        todo = list(dict.fromkeys(t for t in texts if t and t not in self._spans))
        if not todo:
            return
        found = self._fts_spans(todo) if self.match else {}
        for i, text in enumerate(todo):
            self._spans[text] = literal.spans(text, self.identifiers) or found.get(i, [])

    def spans(self, text: str) -> list[Span]:
        """(start, end) of each marked word of ``text``, in order."""
        if text not in self._spans:
            self.prime([text])
        return self._spans.get(text, [])

    def mark(self, text: str, start: int = 0, end: int | None = None,
             escape: Callable[[str], str] = html_escape) -> str:
        """``text[start:end]`` escaped, with the matched words wrapped in <mark>.

        The raw text is cut at the matches and every piece is escaped (by ``escape``) before
        any markup is added, so neither the document nor the query can inject HTML.
        """
        end = len(text) if end is None else end
        out, pos = [], start
        for s, e in self.spans(text):
            s, e = max(s, start), min(e, end)
            if s >= e:
                continue
            out += [str(escape(text[pos:s])), f"<mark>{escape(text[s:e])}</mark>"]
            pos = e
        out.append(str(escape(text[pos:end])))
        return "".join(out)

    def _fts_spans(self, texts: list[str]) -> dict[int, list[Span]]:
        used = set("".join(texts))
        free = [c for c in _MARKERS if c not in used]
        if len(free) < 2:
            return {}
        opening, closing = free[0], free[1]
        read = [spaced_origin(t, unigrams=False) for t in texts]
        conn = None
        try:
            conn = private_fts(self.tokenizer, "t", "text")
            conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", [(i, r[0]) for i, r in enumerate(read)])
            rows = conn.execute(
                "SELECT rowid, highlight(t, 0, ?, ?) FROM t WHERE t MATCH ?", (opening, closing, self.match)
            ).fetchall()
        except Exception:  # as in the BM25 stage: a full-text error marks nothing, never fails a page
            return {}
        finally:
            if conn is not None:
                conn.close()
        return {rowid: _joined([original_span(read[rowid][1], s, e) for s, e in _marked_spans(marked, opening, closing)])
                for rowid, marked in rows}


def _joined(spans: list[Span]) -> list[Span]:
    """``spans`` (in order) with the overlapping ones joined: two bigrams of one word are one mark."""
    out: list[Span] = []
    for start, end in spans:
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _marked_spans(marked: str, opening: str, closing: str) -> list[Span]:
    """Spans in the original text of the parts FTS5 wrapped in ``opening``/``closing``."""
    spans, pos, start = [], 0, None
    for ch in marked:
        if ch == opening:
            start = pos
        elif ch == closing:
            if start is not None and pos > start:
                spans.append((start, pos))
            start = None
        else:
            pos += 1
    return spans
