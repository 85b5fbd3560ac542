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
    PolarisError,
)

__all__ = [
    "ConfigError",
    "DatabaseError",
    "ExtensionError",
    "InputError",
    "ModelDownloadError",
    "ModelError",
    "ModelMismatchError",
    "PolarisConfig",
    "PolarisError",
    "load_config",
]
