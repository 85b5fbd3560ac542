"""The chunker's public values: settings in, spans and documents out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import SETTINGS_BY_NAME


@dataclass(frozen=True)
class ChunkSpan:
    """One chunk: its text and where it came from in the original source."""

    text: str
    start: int
    end: int
    heading_path: tuple[str, ...]
    heading_level: int
    token_count: int
    oversize: bool = False  # over budget: one token (or character) that alone is
    forced_cut: bool = False  # cut inside a word or line that no boundary could cut within the budget

    @property
    def heading_path_str(self) -> str:
        """The heading path joined with " > " ("Guide > Authentication")."""
        return " > ".join(self.heading_path)


@dataclass(frozen=True)
class ChunkedDocument:
    """A document's chunks, its front matter, its title and what the reader should know."""

    chunks: list[ChunkSpan]
    metadata: dict[str, Any] = field(default_factory=dict)
    title: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChunkSettings:
    """Chunk budget, overlap and floor; ``count_tokens`` is the embedding model's tokenizer.

    Without ``count_tokens`` the budget is estimated as ``ceil(len(text) / 4)``: right for
    English prose, but code and non-Latin text have more tokens per character, so such
    chunks can exceed the model's window and be truncated by the embedder. Pass a
    ``TokenCounter`` (exact, batched, fast on long sections) or any ``str -> int``.
    """

    max_tokens: int = SETTINGS_BY_NAME["max_chunk_tokens"].default
    overlap_chars: int = SETTINGS_BY_NAME["chunk_overlap_chars"].default
    min_chars: int = SETTINGS_BY_NAME["min_chunk_chars"].default
    count_tokens: Callable[[str], int] | None = None
