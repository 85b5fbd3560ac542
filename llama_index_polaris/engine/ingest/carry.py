"""What another door stored on a document, kept when the indexer writes it again.

Each door owns the metadata keys it computes. The engine owns ``ENGINE_KEYS`` (a chunk's
``heading_path``, ``heading_level``, ``chunk_index``, its heading-context key and the
document's ``file_path``) and the document's front matter: the indexer recomputes them at every
write. Every other key belongs to the door that stored it (a LlamaIndex reader's ``file_name``,
``file_type``, ``file_size``, dates, an extractor's keys): `polaris index`, ``--watch`` and MCP
``reindex`` cannot compute them, so they keep them as stored. A key on every old chunk with one
value goes on every new chunk; a key of one chunk stays on the chunk with the same node id. A chunk
whose node id, embedded text and keys are unchanged keeps its stored node too (its class, templates,
excluded keys and relationships), so LlamaIndex renders it as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

from .recipe import CONTEXTS
from ..storage.records import CHUNK_OWN_KEYS, ChunkRecord

ENGINE_KEYS = frozenset({"file_path", *CHUNK_OWN_KEYS, *(key for key, _ in CONTEXTS.values() if key)})


def foreign(metadata: dict[str, Any], owned: frozenset[str] | set[str]) -> dict[str, Any]:
    """The keys of ``metadata`` that neither the engine nor ``owned`` (the document's own) names."""
    return {k: v for k, v in metadata.items() if k not in ENGINE_KEYS and k not in owned}


def carry(old: Sequence[ChunkRecord], new: Iterable[ChunkRecord], was: dict[str, Any],
          now: dict[str, Any]) -> list[ChunkRecord]:
    """``new`` chunks with the foreign metadata (and unchanged nodes) of ``old``, the stored chunks of
    the same document (their metadata merged with the document's); ``was`` and ``now`` are the
    document's own metadata before and after (front matter, ``file_path``): the engine's too."""
    owned = set(was) | set(now)
    kept = [foreign(c.metadata, owned) for c in old]
    common = {k: v for k, v in kept[0].items() if all(k in m and m[k] == v for m in kept[1:])} if kept else {}
    by_id = {c.node_id: (c, m) for c, m in zip(old, kept)}
    out = []
    for chunk in new:
        stored, mine = by_id.get(chunk.node_id, (None, {}))
        metadata = {**common, **mine, **chunk.metadata}  # the engine's keys win
        node = chunk.node
        if node is None and stored is not None and stored.text_hash == chunk.text_hash and set(
                stored.metadata) == set(now) | set(metadata):
            node = stored.node  # the same node, rendered with the same keys
        out.append(dataclasses.replace(chunk, metadata=metadata, node=node))
    return out
