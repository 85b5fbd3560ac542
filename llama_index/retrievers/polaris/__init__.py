"""``from llama_index.retrievers.polaris import PolarisRetriever``: LlamaIndex's own import path."""

from llama_index_polaris.retriever import PolarisRetriever

__all__ = ["PolarisRetriever"]
