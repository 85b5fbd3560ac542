"""PolarisNodeParser: LlamaIndex's NodeParser over ``engine.chunk`` (no chunking logic here)."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.node_parser import NodeParser
from llama_index.core.node_parser.node_utils import default_id_func
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeRelationship, TextNode
from llama_index.core.utils import get_tqdm_iterable

from .engine.chunk import ChunkedDocument, ChunkSettings, chunk_document
from .engine.config import PolarisConfig, load_config
from .engine.ids import node_id_for
from .engine.index import chunk_budget

logger = logging.getLogger(__name__)
STRUCTURAL_KEYS = ("heading_level", "chunk_index")
HEADING_RESERVE = 32  # tokens of the window kept for the embedded "heading_path: ..." line


class PolarisNodeParser(NodeParser):
    """Structure-aware Markdown chunks as TextNodes with heading paths and exact offsets.

    Arguments left out come from the merged ``polaris.toml`` config. Give
    ``embed_model=`` the ``PolarisEmbedding`` that will embed the nodes: the budget is
    then counted with its tokenizer and capped so that chunk and heading line fit its
    window, so nothing is truncated when it embeds them. For another embedding model
    pass ``count_tokens`` (its tokenizer as ``str -> int``); ``max_chunk_tokens`` is then
    taken as given. With neither, the budget is estimated as ``len / 4`` (a warning says
    so): code and non-English text can then exceed a model's window.
    ``embed_heading_path`` (default True) puts ``heading_path`` into the embedded text
    (LlamaIndex ``MetadataMode.EMBED``) where it fits; the LLM always sees it.
    ``root_dir`` makes absolute ``file_path`` metadata relative to the indexed root.
    """

    max_chunk_tokens: int = Field(description="Chunk budget in the embedding model's tokens.")
    chunk_overlap_chars: int = Field(description="Characters carried from the previous chunk of a section.")
    min_chunk_chars: int = Field(description="Pieces shorter than this join a neighbour.")
    count_tokens: Optional[Callable[[str], int]] = Field(
        default=None, exclude=True, description="The embedding model's token counter; None: len/4."
    )
    embed_heading_path: bool = Field(default=True, description="Embed 'heading_path: A > B' with the text.")
    root_dir: Optional[str] = Field(default=None, description="Root that file_path is made relative to.")
    _config: PolarisConfig = PrivateAttr()
    _model: Optional[tuple[Callable[[str], int], int]] = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        max_chunk_tokens: int | None = None,
        chunk_overlap_chars: int | None = None,
        min_chunk_chars: int | None = None,
        config: PolarisConfig | None = None,
        embed_model: Any = None,
        **kwargs: Any,
    ) -> None:
        cfg = (config or load_config()).replace(
            max_chunk_tokens=max_chunk_tokens,
            chunk_overlap_chars=chunk_overlap_chars,
            min_chunk_chars=min_chunk_chars,
        )
        super().__init__(
            max_chunk_tokens=cfg.max_chunk_tokens,
            chunk_overlap_chars=cfg.chunk_overlap_chars,
            min_chunk_chars=cfg.min_chunk_chars,
            **kwargs,
        )
        self._config = cfg
        if embed_model is not None:
            embedder = getattr(embed_model, "embedder", None)
            if embedder is None:
                raise TypeError(
                    f"embed_model must be a PolarisEmbedding, got {type(embed_model).__name__};"
                    " for another model pass count_tokens=<its tokenizer as str -> int>."
                )
            self._model = (embedder.token_counter, embedder.max_chunk_tokens)
            self.count_tokens = embedder.token_counter
        elif self.count_tokens is None:
            logger.warning(
                "PolarisNodeParser without a tokenizer: the chunk budget is estimated as len/4 and chunks"
                " may exceed the embedding model's window. Pass embed_model=PolarisEmbedding(...) or count_tokens=..."
            )

    @classmethod
    def class_name(cls) -> str:
        return "PolarisNodeParser"

    @property
    def settings(self) -> ChunkSettings:
        """The engine settings this parser chunks with."""
        if self._model is None:
            return ChunkSettings(self.max_chunk_tokens, self.chunk_overlap_chars, self.min_chunk_chars, self.count_tokens)
        counter, window = self._model
        budget = min(chunk_budget(self._config, window), window - (HEADING_RESERVE if self.embed_heading_path else 0))
        return ChunkSettings(budget, self.chunk_overlap_chars, self.min_chunk_chars, counter)

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> List[BaseNode]:
        out: List[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Chunking"):
            out.extend(self._chunk_nodes(node))
        return out

    def _postprocess_parsed_nodes(self, nodes: List[BaseNode], parent_doc_map: Dict[str, Document]) -> List[BaseNode]:
        # The base class re-finds each chunk with str.find and re-merges metadata; offsets,
        # metadata and relationships are already exact here (re-fenced code would not be found).
        return nodes

    def _chunk_nodes(self, node: BaseNode) -> List[TextNode]:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        path = node.metadata.get("file_path") or node.metadata.get("file_name")
        title = node.metadata.get("title") or (os.path.basename(path) if path else None)
        settings = self.settings
        doc = chunk_document(text, settings, path=path, title=title)
        source = node.as_related_node_info()
        chunks = [self._text_node(node, doc, i, source, settings) for i in range(len(doc.chunks))]
        if self.include_prev_next_rel:
            for prev, nxt in zip(chunks, chunks[1:]):
                prev.relationships[NodeRelationship.NEXT] = nxt.as_related_node_info()
                nxt.relationships[NodeRelationship.PREVIOUS] = prev.as_related_node_info()
        return chunks

    def _text_node(self, node: BaseNode, doc: ChunkedDocument, i: int, source: Any, settings: ChunkSettings) -> TextNode:
        chunk = doc.chunks[i]
        if chunk.oversize:
            logger.warning("chunk %d of %s is %d tokens, over the %d budget", i, node.node_id, chunk.token_count, settings.max_tokens)
        custom_ids = self.id_func is not default_id_func
        return TextNode(
            id_=self.id_func(i, node) if custom_ids else node_id_for(node.node_id, i, chunk.text),
            text=chunk.text,
            start_char_idx=chunk.start,
            end_char_idx=chunk.end,
            metadata=self._metadata(node, doc, i),
            excluded_embed_metadata_keys=self._excluded(
                node.excluded_embed_metadata_keys, doc, embed=True, heading=self._heading_fits(chunk)
            ),
            excluded_llm_metadata_keys=self._excluded(node.excluded_llm_metadata_keys, doc, embed=False),
            metadata_separator=node.metadata_separator,
            metadata_template=node.metadata_template,
            text_template=node.text_template,
            relationships={NodeRelationship.SOURCE: source},
        )

    def _metadata(self, node: BaseNode, doc: ChunkedDocument, i: int) -> dict[str, Any]:
        chunk = doc.chunks[i]
        inherited = {**node.metadata, **doc.metadata} if self.include_metadata else {}
        meta = {**inherited, "heading_path": chunk.heading_path_str, "heading_level": chunk.heading_level, "chunk_index": i}
        file_path = node.metadata.get("file_path")
        if file_path:
            meta["file_path"] = self._relative(str(file_path))
        return meta

    def _heading_fits(self, chunk: Any) -> bool:
        """Whether the embedded heading line still fits the model's window beside ``chunk``."""
        if not self.embed_heading_path:
            return False
        if self._model is None:
            return True  # another model: its window is not known here
        counter, window = self._model
        return chunk.token_count + counter(f"heading_path: {chunk.heading_path_str}") <= window

    def _excluded(self, inherited: list[str], doc: ChunkedDocument, *, embed: bool, heading: bool = True) -> list[str]:
        keys = [*inherited, *STRUCTURAL_KEYS]
        if embed:
            keys += ["file_path", *doc.metadata]
            keys += [] if heading else ["heading_path"]
        return list(dict.fromkeys(keys))

    def _relative(self, file_path: str) -> str:
        if not self.root_dir or not os.path.isabs(file_path):
            return file_path
        relative = os.path.relpath(file_path, self.root_dir)
        return file_path if relative.startswith("..") else relative
