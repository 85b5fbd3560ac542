"""PolarisEmbedding: a LlamaIndex ``BaseEmbedding`` over the engine's ONNX embedder (engine.embed)."""

from __future__ import annotations

from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from .engine.config import PolarisConfig, load_config
from .engine.embed import Embedder, embedder_from_config
from .engine.index import in_worker

# LlamaIndex's embeddings_cache keys queries and documents by their raw text. The document
# prefix differs from the query prefix, so with a cache a query is keyed under this marker.
_QUERY_MARK = "\x00polaris-query\x00"


class PolarisEmbedding(BaseEmbedding):
    """Local CPU embeddings (ONNX) with the model's document/query prefixes applied for you.

    Arguments left out come from the merged ``polaris.toml``; ``embedding_dim`` and
    ``model_dir`` from the config apply only to the configured model.
    """

    model_id: str = Field(description="Polaris model id (see `polaris models`).")
    embedding_dim: int = Field(description="Vector size produced (Matryoshka models may truncate).")
    model_dir: Optional[str] = Field(default=None, description="Local directory holding the model files.")
    threads: Optional[int] = Field(default=None, description="ONNX intra-op threads (default: physical cores).")
    onnx_batch_size: int = Field(default=8, description="Texts per ONNX run, grouped by token count.")
    _embedder: Embedder = PrivateAttr()

    def __init__(
        self,
        model_id: Optional[str] = None,
        *,
        embedding_dim: Optional[int] = None,
        model_dir: Optional[str] = None,
        threads: Optional[int] = None,
        onnx_batch_size: Optional[int] = None,
        config: Optional[PolarisConfig] = None,
        embed_batch_size: int = 64,
        **kwargs: Any,
    ) -> None:
        cfg = config if config is not None else load_config()
        embedder = embedder_from_config(
            cfg, model_id, dim=embedding_dim, model_dir=model_dir, threads=threads, batch_size=onnx_batch_size
        )
        super().__init__(
            model_name=embedder.model_id,
            model_id=embedder.model_id,
            embedding_dim=embedder.dim,
            model_dir=str(model_dir) if model_dir is not None else None,
            threads=embedder.threads,
            onnx_batch_size=embedder.batch_size,
            embed_batch_size=embed_batch_size,
            **kwargs,
        )
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "PolarisEmbedding"

    @property
    def embedder(self) -> Embedder:
        """The engine Embedder doing the work (shared per process)."""
        return self._embedder

    def get_query_embedding(self, query: str) -> Embedding:
        """Embed a query (query prefix applied); cached apart from documents with the same text."""
        return super().get_query_embedding(self._query_key(query))

    async def aget_query_embedding(self, query: str) -> Embedding:
        """Async :meth:`get_query_embedding`."""
        return await super().aget_query_embedding(self._query_key(query))

    def _query_key(self, query: str) -> str:
        if self.embeddings_cache is None:
            return query
        return f"{_QUERY_MARK}{self.model_id}:{self.embedding_dim}\x00{query}"

    def _get_query_embedding(self, query: str) -> Embedding:
        if query.startswith(_QUERY_MARK):
            query = query.split("\x00", 3)[3]
        return self._embedder.embed_query(query).tolist()

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await in_worker(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._embedder.embed_documents([text])[0].tolist()

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await in_worker(self._get_text_embedding, text)

    def _get_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        return self._embedder.embed_documents(texts).tolist()

    async def _aget_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        return await in_worker(self._get_text_embeddings, texts)
