"""PolarisVectorStore: a LlamaIndex vector store over one ``polaris.db`` (engine.store + engine.search).

A thin adapter: it translates LlamaIndex types (nodes, ``VectorStoreQuery``,
``MetadataFilters``) into engine calls and back; every piece of retrieval logic lives
in ``engine.search``.

Model binding. The store embeds nothing itself, yet a ``polaris.db`` records the model
its vectors came from (``polaris_meta``) and refuses vectors from another one. The
binding written on the first ``add`` comes from, in order:

* ``embed_model=PolarisEmbedding(...)``: model id, dim, ONNX fingerprint and prefixes;
* ``model_id="..."``: that id, with the dim of the nodes' embeddings;
* neither: the model the file already records, else ``"unknown"`` at the nodes' dim.

Nodes whose embeddings have another dim, or an ``embed_model``/``model_id`` naming
another model than the file records, are refused with ``ModelMismatchError``.

Query modes: ``DEFAULT`` is vector KNN (similarities are cosine similarities,
``1 - distance``); ``TEXT_SEARCH`` is BM25 over ``query_str``; ``HYBRID`` is the full
pipeline (KNN + BM25, RRF, heading boost, MMR; needs ``query_str`` and
``query_embedding``); ``MMR`` re-ranks the vector candidates by MMR with
``mmr_threshold`` as lambda (default: the config's ``mmr_lambda``). Non-DEFAULT
similarities are the pipeline's scores, the top hit 1.0. ``alpha`` is not used: fusion is
by rank (RRF), not by a weighted sum of scores. Empty ``doc_ids``/``node_ids`` lists mean
no filter (``VectorStoreIndex.as_retriever()`` passes ``node_ids=[]``).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from .engine.config import PolarisConfig, load_config
from .engine.errors import InputError, ModelMismatchError
from .engine.search.filters import Condition, Filter, FilterGroup
from .engine.search.pipeline import Hit, Searcher
from .engine.session import PolarisIndex
from .engine.store import DEFAULT_COLLECTION, ChunkRecord, DocumentRecord, ModelBinding, Store

UNKNOWN_MODEL = "unknown"

_MODES = {
    VectorStoreQueryMode.DEFAULT: "vector",
    VectorStoreQueryMode.TEXT_SEARCH: "bm25",
    VectorStoreQueryMode.HYBRID: "hybrid",
    VectorStoreQueryMode.MMR: "vector",
}


def to_engine_filter(filters: MetadataFilters | MetadataFilter | None) -> Filter | None:
    """LlamaIndex ``MetadataFilters`` (nested to any depth) as the engine's filter tree."""
    if filters is None:
        return None
    if isinstance(filters, MetadataFilters):
        condition = filters.condition.value if filters.condition is not None else "and"
        return FilterGroup(tuple(to_engine_filter(f) for f in filters.filters), condition)
    if isinstance(filters, MetadataFilter):
        return Condition(filters.key, filters.operator.value, filters.value)
    raise InputError(f"filters must be MetadataFilters or MetadataFilter, got {type(filters).__name__}.")


def to_node(
    node_id: str, text: str, metadata: Dict[str, Any], document_id: str,
    start_char: int | None, end_char: int | None, embedding: Any = None,
) -> TextNode:
    """A stored chunk as a ``TextNode`` whose SOURCE relationship is its document (ref_doc_id)."""
    return TextNode(
        id_=node_id,
        text=text,
        metadata=metadata,
        start_char_idx=start_char,
        end_char_idx=end_char,
        embedding=None if embedding is None else [float(x) for x in embedding],
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=document_id)},
    )


def hit_to_node(hit: Hit) -> TextNode:
    """A search hit as a ``TextNode``."""
    return to_node(hit.node_id, hit.text, hit.metadata, hit.document_id, hit.start_char, hit.end_char)


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _chunk(node: BaseNode, position: int) -> ChunkRecord:
    meta = dict(node.metadata)
    heading = meta.get("heading_path")
    return ChunkRecord(
        node_id=node.node_id,
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        ordinal=_int_or(meta.get("chunk_index"), position),
        heading_path=heading if isinstance(heading, str) else "",
        heading_level=_int_or(meta.get("heading_level"), 0),
        start_char=node.start_char_idx,
        end_char=node.end_char_idx,
        metadata=meta,
    )


class PolarisVectorStore(BasePydanticVectorStore):
    """LlamaIndex vector store over a ``polaris.db`` (SQLite + sqlite-vec + FTS5).

    ``PolarisVectorStore(db_path="polaris.db")``; arguments left out come from the
    merged ``polaris.toml`` (``load_config()``). New documents created by ``add`` go to
    ``collection``. See the module docstring for the model binding and query modes.
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False
    db_path: str
    model_id: Optional[str] = None
    collection: str = DEFAULT_COLLECTION

    _index: PolarisIndex = PrivateAttr()
    _binding: Optional[ModelBinding] = PrivateAttr(default=None)

    def __init__(
        self,
        db_path: str | Path | None = None,
        *,
        model_id: Optional[str] = None,
        embed_model: Any = None,
        collection: str = DEFAULT_COLLECTION,
        config: Optional[PolarisConfig] = None,
        **kwargs: Any,
    ) -> None:
        cfg = config if config is not None else load_config()
        path = str(db_path if db_path is not None else cfg.db_path)
        binding = binding_of(embed_model)
        if binding is not None and model_id is not None and model_id != binding.model_id:
            raise InputError(f"model_id {model_id!r} and embed_model ({binding.model_id}) disagree; pass one.")
        super().__init__(
            db_path=path, model_id=binding.model_id if binding else model_id, collection=collection, **kwargs
        )
        self._index = PolarisIndex(path, config=cfg)
        self._binding = binding
        if binding is not None:
            self._index.store.check_model(binding)

    @classmethod
    def class_name(cls) -> str:
        return "PolarisVectorStore"

    @property
    def client(self) -> Store:
        """The engine ``Store`` (one SQLite connection)."""
        return self._index.store

    @property
    def index(self) -> PolarisIndex:
        """The engine session: store, config and (lazily) the recorded model's embedder."""
        return self._index

    @property
    def config(self) -> PolarisConfig:
        """The merged, validated configuration in use."""
        return self._index.config

    def close(self) -> None:
        """Close the database connection."""
        self._index.close()

    # -- writes -------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> List[str]:
        """Upsert ``nodes`` by node id, grouped into documents by ``ref_doc_id``."""
        if not nodes:
            return []
        vectors = self._vectors(nodes)
        groups: Dict[str, List[int]] = defaultdict(list)
        for i, node in enumerate(nodes):
            groups[node.ref_doc_id or node.node_id].append(i)
        store = self.client
        for doc_id, members in groups.items():
            first = nodes[members[0]].metadata
            doc = DocumentRecord(
                doc_id, path=_str_or_none(first.get("file_path")), name=_str_or_none(first.get("file_name")),
                collection=self.collection,
            )
            chunks = [_chunk(nodes[i], pos) for pos, i in enumerate(members)]
            store.upsert_chunks(doc, chunks, None if vectors is None else vectors[members])
        return [n.node_id for n in nodes]

    def _vectors(self, nodes: Sequence[BaseNode]) -> Optional[np.ndarray]:
        """The nodes' embeddings as one matrix (None when none has one), model bound first."""
        have = [n.embedding is not None for n in nodes]
        if not any(have):
            return None
        if not all(have):
            missing = next(n.node_id for n in nodes if n.embedding is None)
            raise InputError(f"node {missing!r} has no embedding while others do; embed all nodes or none.")
        dims = {len(n.embedding) for n in nodes}
        if len(dims) != 1:
            raise InputError(f"the nodes' embeddings have different sizes: {sorted(dims)}.")
        self._bind(dims.pop())
        return np.asarray([n.embedding for n in nodes], dtype=np.float32)

    def _bind(self, dim: int) -> None:
        store = self.client
        recorded = store.model
        if self._binding is not None:
            wanted = self._binding
            if wanted.dim != dim:
                raise ModelMismatchError(
                    f"the nodes carry {dim}-dim embeddings but embed_model {wanted.model_id} makes {wanted.dim}."
                )
        elif recorded is not None and self.model_id is None:
            wanted = ModelBinding(recorded.model_id, dim)
        else:
            wanted = ModelBinding(self.model_id or UNKNOWN_MODEL, dim)
        if recorded is not None and recorded.dim != dim:
            raise ModelMismatchError(
                f"{store.path} holds {recorded.dim}-dim vectors of {recorded.model_id}, but these nodes carry"
                f" {dim}-dim embeddings; vectors from two models cannot be compared. Embed with"
                f" {recorded.model_id} or write to a new file."
            )
        store.bind_model(wanted)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Remove the document ``ref_doc_id`` with all its nodes."""
        self.client.delete_document(ref_doc_id)

    def delete_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None, **delete_kwargs: Any
    ) -> None:
        """Remove the nodes in ``node_ids`` that pass ``filters``; with neither, nothing is removed."""
        if node_ids is None and filters is None:
            return
        self.client.delete_chunks(node_ids=node_ids, filters=to_engine_filter(filters))

    def clear(self) -> None:
        """Remove every document and node (the model binding stays)."""
        self.client.clear()

    # -- reads --------------------------------------------------------------------
    def get_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None
    ) -> List[BaseNode]:
        """Nodes by id and/or metadata filters (all nodes when both are None), with embeddings."""
        chunks = self.client.get_chunks(node_ids=node_ids, filters=to_engine_filter(filters), with_embedding=True)
        if node_ids is not None:  # in the order asked for
            order = {n: i for i, n in enumerate(node_ids)}
            chunks.sort(key=lambda c: order[c.node_id])
        return [
            to_node(c.node_id, c.text, c.metadata, c.document_id or "", c.start_char, c.end_char, c.embedding)
            for c in chunks
        ]

    def search(self, query: str, *, embed_query: Callable[[str], Any] | None = None, **kwargs: Any) -> List[Hit]:
        """Run the engine pipeline (``Searcher.search``) on this store; ``embed_query`` embeds the query."""
        return Searcher(
            self.client, embed_query, self.config, self._index.vector_cache, self._index.bm25_cache
        ).search(query, **kwargs)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Answer a LlamaIndex query in mode DEFAULT, TEXT_SEARCH, HYBRID or MMR."""
        mode = _MODES.get(query.mode)
        if mode is None:
            supported = ", ".join(m.name for m in _MODES)
            raise InputError(f"PolarisVectorStore does not support query mode {query.mode.name}; use {supported}.")
        if mode != "bm25" and query.query_embedding is None:
            raise InputError(f"query mode {query.mode.name} needs query_embedding.")
        if query.mode in (VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH) and query.query_str is None:
            raise InputError(f"query mode {query.mode.name} needs query_str.")
        top_k = query.similarity_top_k
        if query.mode == VectorStoreQueryMode.HYBRID and query.hybrid_top_k is not None:
            top_k = query.hybrid_top_k
        mmr_lambda = None
        if query.mode == VectorStoreQueryMode.MMR:
            mmr_lambda = query.mmr_threshold if query.mmr_threshold is not None else self.config.mmr_lambda
        hits = self.search(
            query.query_str or "",
            top_k=top_k,
            mode=mode,
            documents=query.doc_ids or None,
            filters=to_engine_filter(query.filters),
            node_ids=query.node_ids or None,
            query_vector=None if mode == "bm25" else query.query_embedding,
            mmr_lambda=mmr_lambda,
        )
        if query.mode == VectorStoreQueryMode.DEFAULT:
            similarities = [1.0 - h.explain.vector_distance for h in hits]
        else:
            similarities = [h.score for h in hits]
        return VectorStoreQueryResult(
            nodes=[hit_to_node(h) for h in hits], similarities=similarities, ids=[h.node_id for h in hits]
        )

    # -- async: the same calls in a worker thread (the store is thread-safe) ------------
    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[str]:
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None, **delete_kwargs: Any
    ) -> None:
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def aget_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None
    ) -> List[BaseNode]:
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await asyncio.to_thread(self.query, query, **kwargs)


def binding_of(embed_model: Any) -> Optional[ModelBinding]:
    """The model binding of a ``PolarisEmbedding`` (None when no embed_model is given)."""
    if embed_model is None:
        return None
    embedder = getattr(embed_model, "embedder", None)
    if embedder is None or not hasattr(embedder, "fingerprint"):
        raise InputError(
            f"embed_model must be a PolarisEmbedding, got {type(embed_model).__name__};"
            " for another embedding model pass model_id='...' to record its name."
        )
    return ModelBinding(
        embedder.model_id, embedder.dim, embedder.fingerprint, embedder.spec.doc_prefix, embedder.spec.query_prefix
    )


def _str_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None
