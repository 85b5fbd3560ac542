"""``from llama_index.node_parser.polaris import PolarisNodeParser``: LlamaIndex's own import path."""

from llama_index_polaris.node_parser import PolarisNodeParser

__all__ = ["PolarisNodeParser"]
