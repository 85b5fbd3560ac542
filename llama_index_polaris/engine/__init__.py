"""The Polaris retrieval engine: chunking, embedding, storage and hybrid search.

Imports neither llama_index nor datasette; the adapters live one level up.
"""

from .config import PolarisConfig, load_config
from .errors import (
    ConfigError,
    DatabaseError,
    ExtensionError,
    InputError,
    ModelDownloadError,
    ModelError,
    ModelMismatchError,
    NodeIdError,
    PolarisError,
    VectorError,
)

__all__ = [
    "ConfigError",
    "DatabaseError",
    "ExtensionError",
    "InputError",
    "ModelDownloadError",
    "ModelError",
    "ModelMismatchError",
    "NodeIdError",
    "PolarisConfig",
    "PolarisError",
    "VectorError",
    "load_config",
]
