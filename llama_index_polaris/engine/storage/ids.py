"""Deterministic ids: the same document and content always get the same node id.

One scheme for every path into an index (`polaris index`, PolarisNodeParser), so that
re-indexing a document is an upsert whichever way it arrives.
"""

from __future__ import annotations

import uuid

from ..text import storable

NAMESPACE = uuid.UUID("6f1d3c55-2b4e-5d0a-9c3e-8a7b1f0e4d21")


def node_id_for(document_id: str, chunk_index: int, text: str) -> str:
    """A UUID derived from the document id, the chunk's position and its text."""
    from hashlib import sha256  # here: loading OpenSSL is 5 ms of a cold search, which hashes nothing

    digest = sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return str(uuid.uuid5(NAMESPACE, storable(f"{document_id}\n{chunk_index}\n{digest}")))
