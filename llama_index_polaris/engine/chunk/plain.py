"""Plain text and unknown formats: paragraphs, then sentences, then words; no headings."""

from __future__ import annotations

import re

from .assemble import chunk_sections, cut_warnings
from .blocks import Block, Section
from .spans import ChunkedDocument, ChunkSettings

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r]*\n\s*")


def chunk_text(text: str, settings: ChunkSettings = ChunkSettings(), *, title: str | None = None) -> ChunkedDocument:
    """Chunk text without structure: one section of blank-line separated paragraphs."""
    if not text.strip():
        return ChunkedDocument([], {}, title)
    starts = [0] + [m.end() for m in _PARAGRAPH_BREAK.finditer(text) if m.end() < len(text)]
    blocks = tuple(Block(s, e) for s, e in zip(starts, starts[1:] + [len(text)]))
    section = Section(0, len(text), (), 0, blocks)
    chunks = chunk_sections(text, [section], settings)
    return ChunkedDocument(chunks, {}, title, cut_warnings(text, chunks, settings.max_tokens))
