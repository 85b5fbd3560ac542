"""The plugin manager: loaded lazily on first use, never at import.

One override rule for every hook: the first registration of a name wins, and Polaris's
own implementations are marked ``tryfirst``, so plugins add names (models, file
extensions) and cannot replace built-in ones.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, MutableMapping

import pluggy

from . import hookspecs

DEFAULT_PLUGINS = (
    "llama_index_polaris.engine.embed.builtin",
    "llama_index_polaris.engine.chunk",
)


@functools.lru_cache(maxsize=1)
def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager with built-ins and installed plugins."""
    import importlib

    pm = pluggy.PluginManager("polaris")
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name)
    pm.load_setuptools_entrypoints("polaris")
    return pm


log = logging.getLogger(__name__)


def first_wins(table: MutableMapping[str, Any], name: str, value: Any, what: str) -> None:
    """Put ``value`` under ``name`` unless an earlier registration has it (then say so)."""
    if name in table:
        if table[name] is not value:
            log.warning("%s '%s' is registered twice; keeping the first (a built-in, or the earlier plugin)", what, name)
        return
    table[name] = value
