"""The one ingestion recipe: how a document becomes chunks, and the text embedded for each.

Every door builds chunks here (`polaris index` through the Indexer, LlamaIndex through
PolarisNodeParser), so one folder gives the same chunks, node ids and vectors whichever
way it is indexed. The recipe is fixed by the embedding model (its tokenizer counts the
budget, its window caps it) and by the config's chunker settings.

The embedded text is the chunk with one line of heading context in front, in the form
LlamaIndex itself renders metadata for embedding (``key: value``, a blank line, the text),
so a LlamaIndex node carries it as ordinary metadata and embeds exactly the same string.
``CONTEXTS`` are the forms that were measured (docs/search.md); ``DEFAULT_CONTEXT`` won.
The line is left out when it would not fit the model's window beside the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..config import HEADING_CHARS, PolarisConfig
from ..errors import ConfigError
from ..storage.ids import node_id_for
from ..words.blobs import readable
from ..text import nfc

if TYPE_CHECKING:  # the chunker (markdown-it) is imported on first use: an unchanged re-index skips it
    from ..chunk import ChunkedDocument, ChunkSettings, ChunkSpan

# context -> (metadata key shown to the embedder, which headings it holds)
CONTEXTS: dict[str, tuple[str | None, str]] = {
    "heading_path": ("heading_path", "all"),  # heading_path: Guide > Security > Authentication
    "section": ("section", "parents"),  # section: Guide > Security (the chunk's own heading is in its text)
    "parents": (None, "parents"),  # Guide > Security, no key (not expressible as LlamaIndex metadata)
    "none": (None, "none"),  # the chunk alone
}
DEFAULT_CONTEXT = "heading_path"
STRUCTURAL_KEYS = ("heading_level", "chunk_index")  # in every node's metadata, never shown to a model


def chunk_budget(config: PolarisConfig, window: int, model: str | None = None) -> int:
    """max_chunk_tokens, capped at the window of ``model`` (an explicit larger value is an error)."""
    if config.max_chunk_tokens <= window:
        return config.max_chunk_tokens
    if config.is_explicit("max_chunk_tokens"):
        raise ConfigError(
            f"{config.sources['max_chunk_tokens']}: 'max_chunk_tokens' is {config.max_chunk_tokens}, but"
            f" {model or config.model_id} reads at most {window} tokens per chunk; the rest would be silently"
            f" truncated. Set max_chunk_tokens <= {window}."
        )
    return window


@dataclass(frozen=True)
class Recipe:
    """Chunk budget, overlap, floor, the model's tokenizer and window, and the heading context.

    All that decides what is stored; ``key`` is what polaris_meta records of it.
    """

    max_tokens: int
    overlap_chars: int
    min_chars: int
    count_tokens: Callable[[str], int] | None
    window: int
    context: str = DEFAULT_CONTEXT

    def __post_init__(self) -> None:
        if self.context not in CONTEXTS:
            raise ConfigError(f"heading context must be one of {', '.join(CONTEXTS)}, got {self.context!r}.")

    @property
    def key(self) -> dict[str, Any]:
        """What polaris_meta records: a change in any of these re-chunks every document."""
        return {"max_tokens": self.max_tokens, "overlap_chars": self.overlap_chars, "min_chars": self.min_chars,
                "heading_context": self.context, "heading_chars": HEADING_CHARS, "long_words": "cut",
                "blobs": "unread"}

    @property
    def settings(self) -> "ChunkSettings":
        """The chunker's settings."""
        from ..chunk import ChunkSettings

        return ChunkSettings(self.max_tokens, self.overlap_chars, self.min_chars, self.count_tokens)

    def chunk(self, text: str, *, path: str | None = None, title: str | None = None) -> "ChunkedDocument":
        """The chunks of ``text`` in NFC (chunker chosen by ``path``'s extension): their offsets
        refer to ``nfc(text)``, the text every door stores."""
        from ..chunk import chunk_document

        return chunk_document(nfc(text), self.settings, path=path, title=None if title is None else nfc(title))

    def context_line(self, span: "ChunkSpan") -> tuple[str | None, str] | None:
        """(key, headings) put in front of ``span`` when embedded, or None when there is none or no room."""
        key, which = CONTEXTS[self.context]
        if which == "none":
            return None
        parts = list(span.heading_path if which == "all" or not span.heading_level else span.heading_path[:-1])
        count = self.count_tokens
        room = self.window - span.token_count
        while parts:
            value = " > ".join(parts)
            line = f"{key}: {value}" if key else value
            if count is None or count(line) <= room:
                return key, value
            if which == "all":  # a heading_path is whole or absent
                return None
            parts.pop(0)  # drop the outermost parent first
        return None

    def embed_text(self, span: "ChunkSpan") -> str:
        """The text embedded for ``span`` (what LlamaIndex renders for the same node in EMBED mode),
        without its blobs (``blobs.readable``: the embedder drops them from every document it reads)."""
        line = self.context_line(span)
        if line is None:
            return readable(span.text)
        key, value = line
        head = f"{key}: {value}" if key else value
        return readable(f"{head}\n\n{span.text}".strip())

    def chunk_metadata(self, span: "ChunkSpan", index: int) -> dict[str, Any]:
        """A chunk's own metadata (its document's is stored once, on the document)."""
        return {"heading_path": span.heading_path_str, "heading_level": span.heading_level, "chunk_index": index}


def node_id(document_id: str, index: int, span: "ChunkSpan") -> str:
    """The node id of chunk ``index`` of a document: stable for the same document and text."""
    return node_id_for(document_id, index, span.text)


def make_recipe(
    config: PolarisConfig,
    window: int,
    count_tokens: Callable[[str], int] | None,
    context: str = DEFAULT_CONTEXT,
    model: str | None = None,
) -> Recipe:
    """The recipe for ``model``, with ``window`` tokens per chunk and its token counter."""
    budget = chunk_budget(config, window, model)
    return Recipe(budget, config.chunk_overlap_chars, config.min_chunk_chars, count_tokens, window, context)
