"""Pure helpers for the pages: highlighting, Markdown, overlaps, sizes. Every text is escaped here.

Highlighting is the engine's (``engine.search.highlight``, which the notebook's tables use
too): the words marked in a text are the ones the BM25 stage's MATCH expression finds in it
under the index's own FTS5 tokenizer (``unicode61`` splits ``token_expired`` into ``token``
and ``expired``, ``porter`` makes ``expires`` meet ``expired``); for a query of identifiers
only (``OUT_DIR``, ``--locked``) the places naming one as written (``literal.spans``).

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

from llama_index_polaris.engine.search import highlight, legend

MAX_TEXT_OVERLAP = 2000  # characters compared when offsets are missing
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):", re.IGNORECASE)
LINK_SCHEMES = ("http", "https")
LINK_REL = "nofollow noopener noreferrer"

Span = tuple[int, int]


class Highlighter(highlight.Highlighter):
    """The engine's highlighter (``engine.search.highlight``, the notebook's too), its marks as Markup."""

    def mark(self, text: str, start: int = 0, end: int | None = None) -> Markup:  # type: ignore[override]
        """``text[start:end]`` escaped, with the matched words wrapped in <mark> (``highlight.Highlighter.mark``)."""
        return Markup(super().mark(text, start, end, escape=escape))


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
