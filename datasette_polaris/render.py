"""Pure helpers for the pages: highlighting, Markdown, overlaps, sizes. Every text is escaped here.

Highlighting asks FTS5 itself. The words marked in a text are the ones the BM25 stage's
MATCH expression (``fts_query``, the engine's) finds in it under the index's own
tokenizer: ``unicode61`` splits ``token_expired`` into ``token`` and ``expired``, ``porter``
makes ``expires`` meet ``expired``. FTS5's ``highlight()`` runs in a private in-memory
database with that tokenizer, so the index is never written to and the words marked are
exactly the words BM25 matched, never a second, regex-based idea of a word. For a query of
identifiers only (``OUT_DIR``, ``--locked``), whose BM25 list puts first the texts naming
one as written, those places are marked (``literal.spans``), and the words elsewhere.

Markdown is rendered by markdown-it-py with raw HTML off (a ``<script>`` in a document is
text), links only to http, https or relative URLs (anything else, ``javascript:``
included, stays literal text) and images shown as links (nothing is fetched).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup, escape

from llama_index_polaris.engine.db.connect import sqlite_module
from llama_index_polaris.engine.search import legend, literal
from llama_index_polaris.engine.search.bm25 import fts_query

MAX_TEXT_OVERLAP = 2000  # characters compared when offsets are missing
_MARKERS = [chr(c) for c in range(0xE000, 0xE100)]  # private-use characters, never shown
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):", re.IGNORECASE)
LINK_SCHEMES = ("http", "https")
LINK_REL = "nofollow noopener noreferrer"

Span = tuple[int, int]


class Highlighter:
    """Marks the words of texts that the BM25 stage would match for ``query``.

    ``tokenizer`` is the index's FTS5 ``tokenize=`` argument (recorded in polaris_meta).
    Spans are computed in batches (``prime``) and remembered per text.
    """

    def __init__(self, query: str, tokenizer: str) -> None:
        self.match = fts_query(query) if query else None
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

    def mark(self, text: str, start: int = 0, end: int | None = None) -> Markup:
        """``text[start:end]`` escaped, with the matched words wrapped in <mark>.

        The raw text is cut at the matches and every piece is escaped before any markup
        is added, so neither the document nor the query can inject HTML.
        """
        end = len(text) if end is None else end
        out, pos = [], start
        for s, e in self.spans(text):
            s, e = max(s, start), min(e, end)
            if s >= e:
                continue
            out.append(escape(text[pos:s]))
            out.append(Markup("<mark>%s</mark>") % text[s:e])
            pos = e
        out.append(escape(text[pos:end]))
        return Markup("").join(out)

    def _fts_spans(self, texts: list[str]) -> dict[int, list[Span]]:
        used = set("".join(texts))
        free = [c for c in _MARKERS if c not in used]
        if len(free) < 2:
            return {}
        opening, closing = free[0], free[1]
        conn = sqlite_module().connect(":memory:")
        try:
            tokenize = self.tokenizer.replace("'", "''")
            conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{tokenize}')")
            conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", list(enumerate(texts)))
            rows = conn.execute(
                "SELECT rowid, highlight(t, 0, ?, ?) FROM t WHERE t MATCH ?", (opening, closing, self.match)
            ).fetchall()
        except Exception:  # as in the BM25 stage: a full-text error marks nothing, never fails a page
            return {}
        finally:
            conn.close()
        return {rowid: _marked_spans(marked, opening, closing) for rowid, marked in rows}


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


# -- Markdown ---------------------------------------------------------------------------
class _SafeMarkdown(MarkdownIt):
    """CommonMark (plus tables and strikethrough) with raw HTML off and safe links only."""

    # markdown-it token type -> rule. An indented code block is a fence without a language,
    # and a heading's closing tag is shifted as its opening one, so each pair shares a rule.
    _RULES = {
        "text": "_render_text",
        "code_inline": "_render_code_inline",
        "code_block": "_render_fence",
        "fence": "_render_fence",
        "image": "_render_image",
        "link_open": "_render_link_open",
        "heading_open": "_render_heading",
        "heading_close": "_render_heading",
    }

    def __init__(self) -> None:
        super().__init__("commonmark", {"html": False, "linkify": False, "typographer": False})
        self.enable(["table", "strikethrough"])
        for name, method in self._RULES.items():
            self.add_render_rule(name, getattr(self, method))

    def validateLink(self, url: str) -> bool:  # noqa: N802 (markdown-it's name)
        return safe_link(url)

    # Each rule gets env = {"highlighter": Highlighter, "heading_offset": int}.
    @staticmethod
    def _render_text(renderer: Any, tokens: Any, idx: int, options: Any, env: dict) -> str:
        return str(env["highlighter"].mark(tokens[idx].content))

    @staticmethod
    def _render_code_inline(renderer: Any, tokens: Any, idx: int, options: Any, env: dict) -> str:
        return f"<code>{env['highlighter'].mark(tokens[idx].content)}</code>"

    @staticmethod
    def _render_fence(renderer: Any, tokens: Any, idx: int, options: Any, env: dict) -> str:
        token = tokens[idx]
        lang = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
        cls = f' class="language-{escapeHtml(lang)}"' if lang else ""
        return f"<pre><code{cls}>{env['highlighter'].mark(token.content)}</code></pre>\n"

    @staticmethod
    def _render_image(renderer: Any, tokens: Any, idx: int, options: Any, env: dict) -> str:
        token = tokens[idx]
        alt = renderer.renderInlineAsText(token.children or [], options, env) or token.attrGet("src") or ""
        href = escapeHtml(str(token.attrGet("src") or ""))
        return f'<a class="polaris-md-image" href="{href}" rel="{LINK_REL}">image: {escapeHtml(alt)}</a>'

    @staticmethod
    def _render_link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: dict) -> str:
        tokens[idx].attrSet("rel", LINK_REL)
        return renderer.renderToken(tokens, idx, options, env)

    @staticmethod
    def _render_heading(renderer: Any, tokens: Any, idx: int, options: Any, env: dict) -> str:
        token = tokens[idx]
        level = _shifted(token.tag, env)
        return f'<h{level} class="polaris-md-heading">' if token.nesting == 1 else f"</h{level}>\n"


def _shifted(tag: str, env: dict) -> int:
    """A heading inside a chunk sits below the page's own headings (at most h6)."""
    return min(6, int(tag[1:]) + env.get("heading_offset", 0))


def safe_link(url: str) -> bool:
    """True for http, https and relative URLs (as markdown-it passes them: normalised,
    entities decoded); every other scheme, ``javascript:`` and ``data:`` included, is refused."""
    scheme = _SCHEME.match(url.strip())
    return scheme is None or scheme.group(1).lower() in LINK_SCHEMES


_MARKDOWN = _SafeMarkdown()


def markdown_texts(text: str) -> list[str]:
    """The pieces of ``text`` that rendering marks (text runs, inline code, code blocks)."""
    out = []
    for token in _MARKDOWN.parse(text):
        if token.type in ("fence", "code_block"):
            out.append(token.content)
        for child in token.children or []:
            if child.type in ("text", "code_inline"):
                out.append(child.content)
    return out


def markdown(text: str, highlighter: Highlighter, heading_offset: int = 0) -> Markup:
    """``text`` rendered as Markdown, safe for untrusted documents, with the query's words marked."""
    env = {"highlighter": highlighter, "heading_offset": heading_offset}
    return Markup(_MARKDOWN.render(text, env))


# -- chunk geometry and numbers -------------------------------------------------------------
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


def segments(text: str, shared_before: int, shared_after: int, highlighter: Highlighter) -> list[tuple[str, Markup]]:
    """``text`` cut into (css class, highlighted html): the part shared with the previous
    chunk, the chunk's own part, the part shared with the next chunk (empty parts dropped).
    Words are matched in the whole text, then cut, so a word on a boundary stays marked."""
    head = min(shared_before, len(text))
    tail = max(head, len(text) - min(shared_after, len(text)))
    parts = [("polaris-overlap", 0, head), ("", head, tail), ("polaris-overlap", tail, len(text))]
    return [(cls, highlighter.mark(text, s, e)) for cls, s, e in parts if e > s]


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
    return legend.fmt(value, digits)
