"""The plugin manager: loaded lazily on first use, never at import."""

from __future__ import annotations

import functools

import pluggy

from . import hookspecs

DEFAULT_PLUGINS = (
    "llama_index_polaris.engine.embed.registry",
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
