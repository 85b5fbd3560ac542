"""Structure-aware chunking: Markdown by its headings, plain text by paragraphs.

A section (heading + content up to the next heading) within the token budget stays
whole; over budget it is cut at block, then sentence, then word boundaries, never inside
a word, and a fenced code block only between lines (each piece re-fenced). Pieces under
the floor join a neighbour; ``overlap_chars`` of the previous chunk of the same section
lead into the next. Offsets are exact character offsets of the text given (front
matter included). Chunkers are registered through the ``register_chunkers`` hook and
chosen by file extension; each takes ``(text, settings, *, title=None)``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

from ..ingest.sources import decode_source
from ..hookspecs import hookimpl
from ..text import heuristic_tokens
from .assemble import chunk_sections, cut_warnings
from .frontmatter import delimited_end, read_front_matter
from .markdown import HEADING_CHARS, capped, heading_text, markdown_sections
from .plain import chunk_text
from .spans import ChunkedDocument, ChunkSettings, ChunkSpan
from .tokens import TokenCounter

__all__ = [
    "ChunkSettings",
    "ChunkSpan",
    "ChunkedDocument",
    "HEADING_CHARS",
    "TokenCounter",
    "chunk_document",
    "chunk_markdown",
    "chunk_text",
    "chunkers",
    "decode_source",
    "heading_text",
    "heuristic_tokens",
]

Chunker = Callable[..., ChunkedDocument]
FALLBACK = "*"


def chunk_markdown(text: str, settings: ChunkSettings = ChunkSettings(), *, title: str | None = None) -> ChunkedDocument:
    """Chunk Markdown; ``title`` (or the front matter's) heads the text before the first heading."""
    metadata, body_start, warning = read_front_matter(text)
    matter_title = capped(metadata["title"]) if isinstance(metadata.get("title"), str) else None
    title = capped(title) if title else title
    preamble = title or matter_title
    plain_until = delimited_end(text) if body_start == 0 else 0  # a block kept as text heads nothing
    sections, h1 = markdown_sections(text, body_start, (preamble,) if preamble else (), plain_until)
    chunks = chunk_sections(text, sections, settings)
    warnings = ((warning,) if warning else ()) + cut_warnings(text, chunks, settings.max_tokens)
    return ChunkedDocument(chunks, metadata, h1 or matter_title or title, warnings)


def chunk_document(
    text: str, settings: ChunkSettings, *, path: str | None = None, title: str | None = None
) -> ChunkedDocument:
    """Chunk with the chunker registered for ``path``'s extension (Markdown when no path)."""
    table = chunkers()
    suffix = Path(path).suffix.lower() if path else ".md"
    return table.get(suffix, table[FALLBACK])(text, settings, title=title)


@functools.lru_cache(maxsize=1)
def chunkers() -> dict[str, Chunker]:
    """Extension -> chunker from every ``register_chunkers`` hook (built-ins first; the first wins)."""
    from ..plugins import first_wins, plugin_manager

    table: dict[str, Chunker] = {}

    def register(extensions: tuple[str, ...], chunker: Chunker) -> None:
        for extension in extensions:
            first_wins(table, extension.lower(), chunker, "chunker for")

    plugin_manager().hook.register_chunkers(register=register)
    return table


@hookimpl(tryfirst=True)
def register_chunkers(register):
    """Polaris's own chunkers: Markdown, plain text, and plain text for anything else (first: they win)."""
    register((".md", ".markdown", ".mdx"), chunk_markdown)
    register((".txt", ".text"), chunk_text)
    register((FALLBACK,), chunk_text)
