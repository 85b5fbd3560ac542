"""A chunk's metadata as readers see it, merged as SQLite's ``json_patch`` merges (RFC 7396)."""

from __future__ import annotations

import json
from typing import Any


def patch(target: Any, change: Any) -> Any:
    """``change`` applied to ``target`` (RFC 7396 merge patch): objects merge key by key, a null
    removes a key, anything else replaces; keys keep their first place."""
    if not isinstance(change, dict):
        return change
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in change.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = patch(out.get(key), value)
    return out


def merged(document_metadata: str, chunk_metadata: str) -> dict[str, Any]:
    """The document's metadata (JSON text) patched with the chunk's own, as the SQLite file reads it."""
    if document_metadata == "{}":
        return json.loads(chunk_metadata)
    return patch(json.loads(document_metadata), json.loads(chunk_metadata))
