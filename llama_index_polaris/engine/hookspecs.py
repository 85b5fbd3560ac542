"""Every Polaris extension point, one short docstring each (pluggy, as in llm and Datasette).

Plugins register through the ``polaris`` setuptools entry point group; Polaris's own
built-in models and chunkers are registered through these same hooks.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("polaris")
hookimpl = pluggy.HookimplMarker("polaris")


@hookspec
def register_embedding_models(register):
    """Call ``register(spec)`` with a ``ModelSpec`` for each embedding model you provide."""


@hookspec
def register_chunkers(register):
    """Call ``register(extensions, chunker)`` for each file type you can chunk.

    ``extensions`` is a tuple such as ``(".md", ".markdown")``; ``chunker`` is a callable
    ``chunker(text, settings, *, title=None) -> ChunkedDocument`` (see ``engine.chunk``).
    """
