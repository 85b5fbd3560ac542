"""``from llama_index.vector_stores.polaris import PolarisVectorStore``: LlamaIndex's own import path."""

from llama_index_polaris.vector_store import PolarisVectorStore

__all__ = ["PolarisVectorStore"]
