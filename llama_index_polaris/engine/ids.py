"""Deterministic ids: the same document and content always get the same node id."""

from __future__ import annotations

import uuid

NAMESPACE = uuid.UUID("5e1b7c7a-3f0d-4b8e-9a51-706f6c617269")


def node_id_for(document_id: str, chunk_index: int, text: str) -> str:
    """A UUID derived from the document id, the chunk's position and its text."""
    return str(uuid.uuid5(NAMESPACE, f"{document_id}\x00{chunk_index}\x00{text}"))
