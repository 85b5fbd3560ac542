"""``from llama_index.embeddings.polaris import PolarisEmbedding``: LlamaIndex's own import path."""

from llama_index_polaris.embedding import PolarisEmbedding

__all__ = ["PolarisEmbedding"]
