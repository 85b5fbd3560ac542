"""PolarisRetriever: a LlamaIndex retriever running the engine's query pipeline.

Hybrid by default (vector KNN + BM25, RRF, heading boost, MMR). Each result's ``score`` is
its match strength (``vector_store.node_score``: comparable across queries, higher is better),
its relative score (top hit 1.0) is ``metadata["relative_score"]``. Each
result is a ``PolarisNodeWithScore``: a ``NodeWithScore`` whose ``explain`` field holds
the engine's ``Explanation`` for that hit (vector rank and distance, BM25 rank and
score, each list's RRF contribution, boost, MMR penalty, final score), computed in the
same pass that ranked it. What Polaris adds to ``node.metadata`` (relative score, strength,
``good_match``, ``no_good_match``) is hidden from the LLM prompt and embed renderings.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from .engine.errors import InputError
from .engine.index import in_worker
from .engine.search.pipeline import MODES, Explanation
from .engine.sqlite.vector import MAX_K
from .vector_store import PolarisVectorStore, binding_of, hit_to_node, node_score, to_engine_filter


class PolarisNodeWithScore(NodeWithScore):
    """A ``NodeWithScore`` with the engine's per-stage explanation of its score."""

    explain: Optional[Explanation] = None

    @classmethod
    def class_name(cls) -> str:
        return "PolarisNodeWithScore"


class PolarisRetriever(BaseRetriever):
    """Retrieve from a ``PolarisVectorStore`` with the Polaris pipeline.

    ``PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=10,
    mode="hybrid", documents=None, collections=None, filters=None, alpha=None)``. The
    store's collection bounds every search; ``documents`` (ids or paths) and
    ``collections`` narrow it: an empty list scopes to nothing. ``filters`` are
    LlamaIndex ``MetadataFilters``; ``alpha`` weighs vector against BM25 in hybrid fusion
    (1 = vector only, 0 = BM25 only). ``similarity_top_k`` is returned as asked.
    ``context_tokens`` puts each section hit's whole section, cut to that many tokens, in
    ``node.metadata["section_text"]``; ``MetadataReplacementPostProcessor(
    target_metadata_key="section_text")`` then gives the LLM the section. Left
    out: the store is opened at the config's ``db_path``, ``similarity_top_k`` is the
    config's ``top_k``, and queries are embedded with the model the database records
    (the engine's embedder), so ``embed_model`` is needed only to embed elsewhere; a
    query vector from another model is refused as the store refuses it. A file that does
    not name its model (its vectors came in without one Polaris could name) is proven by
    the Polaris model that opens it, ``embed_model`` or the configured one: a few stored
    chunks are embedded again and the file records the model when they match (engine
    ``proof``), else the model is refused with the figures compared.
    """

    def __init__(
        self,
        vector_store: Optional[PolarisVectorStore] = None,
        embed_model: Any = None,
        similarity_top_k: Optional[int] = None,
        mode: str = "hybrid",
        documents: Optional[Sequence[str]] = None,
        collections: Optional[Sequence[str]] = None,
        filters: Optional[MetadataFilters] = None,
        mmr_lambda: Optional[float] = None,
        alpha: Optional[float] = None,
        context_tokens: Optional[int] = None,
        callback_manager: Optional[CallbackManager] = None,
        **kwargs: Any,
    ) -> None:
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
        self.vector_store = vector_store if vector_store is not None else PolarisVectorStore()
        cfg = self.vector_store.config
        if binding_of(embed_model) is not None:  # a PolarisEmbedding: the index's model, or proven on a file naming none
            self.vector_store.index.use_embedder(embed_model.embedder)
        self.embed_model = embed_model
        self.similarity_top_k = cfg.top_k if similarity_top_k is None else similarity_top_k
        self.mode = mode
        self.documents = documents
        self.collections = collections
        self.filters = filters
        self.mmr_lambda = mmr_lambda
        self.alpha = alpha
        self.context_tokens = context_tokens
        self._engine_filters = to_engine_filter(filters)  # fails now on a filter of the wrong type
        super().__init__(callback_manager=callback_manager, **kwargs)

    def _embed_query(self, query: str) -> Any:
        if self.embed_model is not None:
            vector = self.embed_model.get_query_embedding(query)
            if binding_of(self.embed_model) is None:  # not a PolarisEmbedding: check it is the index's model
                self.vector_store.check_query_vector(query, vector)
            return vector
        return self.vector_store.index.embedder.embed_query(query)  # a file naming no model: proven first

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if self.mode != "bm25" and query_bundle.embedding is not None:
            self.vector_store.check_query_vector(query_bundle.query_str, query_bundle.embedding)
        hits = self.vector_store.search(
            query_bundle.query_str,
            embed_query=self._embed_query,
            top_k=self.similarity_top_k,
            max_top_k=MAX_K,
            alpha=self.alpha,
            mode=self.mode,
            documents=self.documents,
            collections=self.collections,
            filters=self._engine_filters,
            query_vector=None if self.mode == "bm25" else query_bundle.embedding,
            mmr_lambda=self.mmr_lambda,
            context_tokens=self.context_tokens,
        )
        weak = getattr(hits, "no_good_match", None)
        return [PolarisNodeWithScore(node=hit_to_node(h, no_good_match=weak), score=node_score(h), explain=h.explain)
                for h in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return await in_worker(self._retrieve, query_bundle)
