"""Polaris: local-first hybrid search over Markdown in one SQLite file, for LlamaIndex.

The LlamaIndex adapters are imported on first use (PEP 562), so that
``import llama_index_polaris`` and the engine stay free of llama_index until needed.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_ADAPTERS = {
    "PolarisNodeParser": "llama_index_polaris.node_parser",
    "PolarisEmbedding": "llama_index_polaris.embedding",
    "PolarisVectorStore": "llama_index_polaris.vector_store",
    "PolarisRetriever": "llama_index_polaris.retriever",
}

__all__ = [*_ADAPTERS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _ADAPTERS:
        value = getattr(importlib.import_module(_ADAPTERS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'llama_index_polaris' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
