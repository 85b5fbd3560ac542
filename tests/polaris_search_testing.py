"""Helpers for the search and adapter tests: a deterministic bag-of-words embedder.

The fake embedder hashes each word to a fixed random direction and sums them, so texts
sharing words are close and the ranking is predictable without an ONNX model. Tests that
claim something about real embeddings use the bundled model instead.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store

DIM = 32
WORD = re.compile(r"\w+")


def word_vector(word: str, dim: int = DIM) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim)


def embed(text: str, dim: int = DIM) -> np.ndarray:
    """A unit float32 vector: the normalised sum of the text's word directions."""
    words = [w.lower() for w in WORD.findall(text)] or ["<empty>"]
    v = sum(word_vector(w, dim) for w in words)
    return (v / np.linalg.norm(v)).astype(np.float32)


def fill(store: Store, docs: dict[str, list[tuple[str, str]]], *, collection: str = "default",
         status: str = "completed", metadata: dict[str, dict] | None = None) -> None:
    """Write ``docs`` = {doc id: [(heading path, text), ...]} with fake-embedded vectors."""
    if store.model is None:
        store.bind_model(ModelBinding("fake-bow", DIM, "f" * 64))
    for doc_id, sections in docs.items():
        chunks = [
            ChunkRecord(node_id=f"{doc_id}#{i}", text=text, ordinal=i, heading_path=heading,
                        metadata=(metadata or {}).get(f"{doc_id}#{i}", {"doc": doc_id, "i": i}))
            for i, (heading, text) in enumerate(sections)
        ]
        vectors = np.stack([embed(f"{c.heading_path} {c.text}") for c in chunks])
        store.upsert_document(DocumentRecord(doc_id, path=f"{doc_id}.md", collection=collection, status=status),
                              chunks, vectors)
