"""The user-global folders Polaris reads and writes, found the XDG way.

``cache_root()`` is ``$XDG_CACHE_HOME/polaris`` (else ``~/.cache/polaris``): model files
(``models/``), the sha256 memo (``fingerprints-v2.json``), the models' optimised ONNX graphs
(``onnx-graphs/``), their vocabularies for ASCII queries (``query-tokenizers/``) and evaluation
indexes (``eval/``).
``config_root()`` is ``$XDG_CONFIG_HOME/polaris`` (else ``~/.config/polaris``). Both read the
environment on every call, so a test or a process can point them elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path


def xdg_cache_home() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``: the folder shared with other tools' caches."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"))


def cache_root() -> Path:
    """The user-global Polaris cache: ``$XDG_CACHE_HOME/polaris``, else ``~/.cache/polaris``."""
    return xdg_cache_home() / "polaris"


def config_root() -> Path:
    """The user-global Polaris config folder: ``$XDG_CONFIG_HOME/polaris``, else ``~/.config/polaris``."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")) / "polaris"
