"""Markdown structure from markdown-it-py block tokens: sections, blocks, heading paths.

Only block rules run for the document (inline parsing is the slow half of markdown-it
and chunking does not need it); heading text alone goes through the inline parser so
that its markup can be stripped. ``token.map`` line ranges are turned into exact
character offsets of the original text.

A heading's name is bounded (``HEADING_CHARS``): it is repeated in the heading path of
every chunk of its section and the sections under it (column, metadata, FTS heading
column, the embedded line, every door's output), so an unbounded one grows the index with
the square of its length. The heading line itself stays whole in the chunk text.
"""

from __future__ import annotations

import re
from typing import Callable

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ..config import HEADING_CHARS
from .blocks import Block, Fence, Section

_BLOCK_PARSER = MarkdownIt("commonmark").enable("table").disable("inline")
_INLINE_PARSER = MarkdownIt("commonmark").enable("strikethrough")
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ATTRIBUTES = re.compile(r"\s*\{:?\s*[#.][^{}]*\}\s*$")
_MARKUP = re.compile(r"[`*_\[\]<>{}&!\\~]")
_Node = tuple[int, list]  # (token index, child nodes)
_HEADING_SOURCE = 16 * HEADING_CHARS  # characters of a heading line read for its name
Offset = Callable[[int], int]


def markdown_sections(
    text: str, body_start: int, preamble_path: tuple[str, ...], plain_until: int = 0
) -> tuple[list[Section], str | None]:
    """The sections of ``text[body_start:]`` and the first H1's text; a heading that starts
    before ``plain_until`` is read as plain text (a front matter block kept as text)."""
    tokens = _BLOCK_PARSER.parse(text[body_start:])
    offset = _line_offsets(text, body_start)
    roots = _tree(tokens)
    if not roots:  # blank, or nothing but link reference definitions
        whole = Section(body_start, len(text), preamble_path, 0, (Block(body_start, len(text)),))
        return ([whole] if text[body_start:].strip() else []), None
    starts = [body_start] + [offset(tokens[i].map[0]) for i, _ in roots[1:]]
    extents = zip(starts, starts[1:] + [len(text)])
    blocks = [_block(tokens, node, ext, offset, text) for node, ext in zip(roots, extents)]
    headings = [None if start < plain_until else _heading(tokens, i) for (i, _), start in zip(roots, starts)]
    h1 = next((name for h in headings if h and h[0] == 1 and (name := h[1])), None)
    return _sections(blocks, headings, preamble_path), h1


def heading_text(source: str) -> str:
    """A heading's text without inline markup, links or a trailing ``{ #anchor }`` tag, at most
    ``HEADING_CHARS`` long (``capped``)."""
    source = source[:_HEADING_SOURCE]
    if not _MARKUP.search(source):
        return capped(" ".join(source.split()))
    children = _INLINE_PARSER.parseInline(source)[0].children or []
    plain = "".join(_plain(token) for token in children)
    return capped(" ".join(_ATTRIBUTES.sub("", plain).split()))


def capped(name: str, limit: int = HEADING_CHARS) -> str:
    """``name`` as it enters a heading path: whole when it has at most ``limit`` characters,
    else cut to ``limit`` (at a space in its second half if there is one) and ended with "…"."""
    if len(name) <= limit:
        return name
    cut = name[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space >= limit // 2 else cut).rstrip() + "…"


def _plain(token: Token) -> str:
    if token.type in ("text", "code_inline", "image"):
        return token.content
    return " " if token.type in ("softbreak", "hardbreak") else ""


def _line_offsets(text: str, base: int) -> Offset:
    starts = [base] + [m.end() for m in _NEWLINE.finditer(text, base)]
    return lambda line: starts[line] if line < len(starts) else len(text)


def _tree(tokens: list[Token]) -> list[_Node]:
    roots: list[_Node] = []
    stack: list[tuple[int, list]] = [(-1, roots)]
    for i, token in enumerate(tokens):
        if token.map is None or token.nesting < 0 or token.type == "inline":
            continue
        while stack[-1][0] >= token.level:
            stack.pop()
        node: _Node = (i, [])
        stack[-1][1].append(node)
        if token.nesting == 1:
            stack.append((token.level, node[1]))
    return roots


def _block(tokens: list[Token], node: _Node, extent: tuple[int, int], offset: Offset, text: str) -> Block:
    start, end = extent
    token = tokens[node[0]]
    if token.type == "fence":
        return Block(start, end, "fence", fence=_fence(token, offset, text))
    if token.type == "code_block":
        return Block(start, end, "lines")
    if not node[1]:  # a paragraph, heading, rule: nothing inside to cut by
        return Block(start, end)
    kids = _children(tokens, node[1], extent, offset, text)
    if len(kids) == 1:
        only = kids[0]
        return Block(start, end, only.kind, only.children, only.fence)
    return Block(start, end, "text", tuple(kids))


def _children(tokens: list[Token], nodes: list[_Node], extent: tuple[int, int], offset: Offset, text: str) -> list[Block]:
    kept = [n for k, n in enumerate(nodes) if k == 0 or tokens[n[0]].map[0] > tokens[nodes[k - 1][0]].map[0]]
    starts = [extent[0]] + [offset(tokens[i].map[0]) for i, _ in kept[1:]]
    extents = zip(starts, starts[1:] + [extent[1]])
    return [_block(tokens, node, ext, offset, text) for node, ext in zip(kept, extents)]


def _fence(token: Token, offset: Offset, text: str) -> Fence:
    first, last = token.map
    open_line = text[offset(first) : offset(first + 1)].rstrip("\r\n")
    last_line = text[offset(last - 1) : offset(last)].rstrip("\r\n")
    closed = last - 1 > first and _closes(last_line, token.markup)
    prefix = open_line[: max(open_line.find(token.markup), 0)]
    bare = prefix + token.markup
    if closed:
        return Fence(open_line, last_line, offset(first + 1), offset(last - 1), bare)
    close_line = "".join(c if c in " \t>" else " " for c in prefix) + token.markup
    return Fence(open_line, close_line, offset(first + 1), offset(last), bare)


def _closes(line: str, markup: str) -> bool:
    stripped = line.rstrip()
    run = len(stripped) - len(stripped.rstrip(markup[0]))
    return run >= len(markup) and not stripped[:-run].strip(" \t>")


def _heading(tokens: list[Token], i: int) -> tuple[int, str] | None:
    if tokens[i].type != "heading_open":
        return None
    return int(tokens[i].tag[1:]), heading_text(tokens[i + 1].content)


def _sections(blocks: list[Block], headings: list, preamble_path: tuple[str, ...]) -> list[Section]:
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    path, level, current = preamble_path, 0, []
    for block, heading in zip(blocks, headings):
        if heading is not None:
            _close_section(sections, current, path, level)
            level = heading[0]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append(heading)
            path, current = tuple(name for _, name in stack if name), []
        current.append(block)
    _close_section(sections, current, path, level)
    return sections


def _close_section(sections: list[Section], blocks: list[Block], path: tuple[str, ...], level: int) -> None:
    if blocks:
        sections.append(Section(blocks[0].start, blocks[-1].end, path, level, tuple(blocks)))
