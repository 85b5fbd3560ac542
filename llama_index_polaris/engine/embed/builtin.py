"""Polaris's own embedding models, registered through the hook plugins use (``hookspecs``).

A module of its own so that looking up a model (``registry.get_model_spec``, which answers
built-in ids without the plugin manager) does not import pluggy: a cold search skips it.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from .registry import BUILTIN_MODELS


@hookimpl(tryfirst=True)
def register_embedding_models(register):
    """Register the built-in models, first: a plugin adds models but cannot replace these."""
    for spec in BUILTIN_MODELS:
        register(spec)
