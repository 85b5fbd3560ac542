"""The in-RAM vector matrix answers exactly what vec0 answers, in every scope."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_polaris.engine.storage.scope import Scope
from llama_index_polaris.engine.sqlite.vector import knn
from llama_index_polaris.engine.sqlite.bits import VectorCache
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store


def build(path, n_docs=30, per_doc=10, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    store = Store(path)
    store.bind_model(ModelBinding("fake", dim))
    for d in range(n_docs):
        vecs = rng.normal(size=(per_doc, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        chunks = [ChunkRecord(f"d{d}c{i}", f"text {d} {i}", i) for i in range(per_doc)]
        store.upsert_document(DocumentRecord(f"doc{d}", collection="a" if d % 2 else "b"), chunks, vecs)
    return store, rng


def test_cache_matches_vec0_in_every_scope(tmp_path):
    store, rng = build(tmp_path / "p.db")
    cache = VectorCache(store, min_chunks=1)
    assert cache.refresh()
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks").fetchall()]
    scopes = [Scope(), Scope(document_ids=("doc1", "doc7", "nope")), Scope(chunk_ids=tuple(ids[::7])),
              Scope(document_ids=("doc2",), chunk_ids=tuple(ids[15:25])), Scope(document_ids=())]
    for _ in range(5):
        q = rng.normal(size=16).astype(np.float32)
        q /= np.linalg.norm(q)
        for scope in scopes:
            exact = knn(store.conn, q, 12, scope)
            mine = cache.knn(q, 12, scope)
            assert [i for i, _ in mine] == [i for i, _ in exact]
            assert [d for _, d in mine] == pytest.approx([d for _, d in exact], abs=1e-5)


def test_cache_reloads_after_writes_from_this_or_another_connection(tmp_path):
    store, rng = build(tmp_path / "p.db", n_docs=3)
    cache = VectorCache(store, min_chunks=1)
    cache.refresh()
    assert len(cache.ids) == 30
    store.delete_document("doc0")
    cache.refresh()
    assert len(cache.ids) == 20
    other = Store(tmp_path / "p.db")
    other.delete_document("doc1")
    cache.refresh()
    assert len(cache.ids) == 10
    other.close()


def test_small_stores_stay_on_vec0(tmp_path):
    store, _ = build(tmp_path / "p.db", n_docs=2)
    assert not VectorCache(store).refresh()  # 20 chunks < MIN_CHUNKS


def test_searcher_gives_the_same_hits_with_the_cache(tmp_path):
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.search.pipeline import Searcher

    store, rng = build(tmp_path / "p.db")
    q = rng.normal(size=16).astype(np.float32)
    cfg = load_config(use_user_config=False)
    plain = Searcher(store, None, cfg).search("text 3", top_k=10, query_vector=q)
    cached = Searcher(store, None, cfg, VectorCache(store, min_chunks=1)).search("text 3", top_k=10, query_vector=q)
    assert [h.chunk_id for h in cached] == [h.chunk_id for h in plain]
    assert [h.score for h in cached] == pytest.approx([h.score for h in plain], abs=1e-6)


def test_background_load_answers_from_vec0_until_complete(tmp_path):
    store, rng = build(tmp_path / "p.db")
    cache = VectorCache(store, min_chunks=1, background=True, batch_rows=7)
    q = rng.normal(size=16).astype(np.float32)
    with store._lock:  # hold the store: the loader cannot read a batch yet
        assert not cache.refresh()
        assert not cache.active and len(cache.ids) == 0
    assert cache.wait(timeout=30)
    assert [i for i, _ in cache.knn(q, 12)] == [i for i, _ in knn(store.conn, q, 12)]


def test_writes_during_a_background_load_are_never_mixed_in(tmp_path):
    store, rng = build(tmp_path / "p.db", n_docs=30)
    cache = VectorCache(store, min_chunks=1, background=True, batch_rows=1)
    cache.refresh()
    other = Store(tmp_path / "p.db")
    for d in range(5):  # while the loader reads one row per turn
        other.delete_document(f"doc{d}")
    other.close()
    assert cache.wait(timeout=60)
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id").fetchall()]
    assert cache.ids.tolist() == ids and len(ids) == 250
    q = rng.normal(size=16).astype(np.float32)
    assert [i for i, _ in cache.knn(q, 12)] == [i for i, _ in knn(store.conn, q, 12)]


def test_a_closed_store_stops_the_loader_quietly(tmp_path):
    store, _ = build(tmp_path / "p.db")
    cache = VectorCache(store, min_chunks=1, background=True, batch_rows=1)
    with store._lock:
        cache.refresh()
        store.close()
    cache._loader.join(timeout=30)
    assert not cache._loader.is_alive() and not cache.active
