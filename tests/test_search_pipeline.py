"""The pipeline end to end on a real polaris.db: explanations consistent with the scores."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.search.pipeline import Searcher
from llama_index_polaris.engine.sqlite.store import from_blob
from polaris_search_testing import DIM, embed, fill

DOCS = {
    "auth": [
        ("Auth > Sessions", "Expired sessions are refreshed using the token lifetime."),
        ("Auth > Sessions > Cookies", "Session cookies expire when the browser closes."),
        ("Auth > Tokens", "Tokens are signed and rotate every day."),
    ],
    "ops": [
        ("Ops > Backups", "Backups run nightly and are kept for thirty days."),
        ("Ops > Monitoring", "Alerts fire when session counts drop suddenly."),
    ],
    "cfg": [
        ("Config > Fusion", "The rrf_k constant flattens reciprocal rank fusion."),
        ("Config > Boost", "Heading boost adds a bonus for terms in headings."),
    ],
}
QUERY = "how are expired sessions refreshed"


def config(**kw):
    return load_config(use_user_config=False, **kw)


@pytest.fixture
def store(open_store, db_path):
    s = open_store(db_path)
    fill(s, DOCS)
    return s


def vectors(store):
    return {c.id: c.embedding for c in store.get_chunks(with_embedding=True)}


def test_hybrid_explanations_are_the_scores(store):
    cfg = config()
    hits = Searcher(store, embed, cfg).search(QUERY, top_k=5)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert hits[0].score == 1.0 and hits[0].node_id == "auth#0"
    vecs, q = vectors(store), embed(QUERY)
    lam = cfg.mmr_lambda
    shift = 1 - lam  # scores are MMR values shifted by the largest possible penalty, over the first
    first = lam * hits[0].explain.relevance - hits[0].explain.mmr_penalty + shift
    for h in hits:
        ex = h.explain
        assert ex.score == h.score
        assert ex.vector_rank is not None or ex.bm25_rank is not None
        w_v, w_b = ex.fusion["vector_weight"], ex.fusion["bm25_weight"]  # this question's weights (question.plan)
        rrf_v = w_v / (cfg.rrf_k + ex.vector_rank) if ex.vector_rank else None
        rrf_b = w_b / (cfg.rrf_k + ex.bm25_rank) if ex.bm25_rank else None
        assert ex.rrf_vector == pytest.approx(rrf_v) and ex.rrf_bm25 == pytest.approx(rrf_b)
        assert ex.rrf == pytest.approx((rrf_v or 0) + (rrf_b or 0))
        if ex.vector_distance is not None:  # the KNN's cosine distance to the stored vector
            assert ex.vector_distance == pytest.approx(1 - float(vecs[h.chunk_id] @ q), abs=1e-5)
        if ex.bm25_score is not None:
            assert ex.bm25_score > 0
        assert 0 <= ex.relevance <= 1 and ex.mmr_penalty >= 0
        assert h.score == pytest.approx((lam * ex.relevance - ex.mmr_penalty + shift) / first)
        assert 0 <= h.score <= 1
    assert hits[0].explain.relevance == pytest.approx(1.0)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_heading_boost_shows_in_the_explanation(store):
    cfg = config(heading_boost=0.05, fusion_by_question=False)  # the configured boost (the plan's aside)
    hits = {h.node_id: h for h in Searcher(store, embed, cfg).search("cookies monitoring", top_k=7)}
    assert hits["auth#1"].explain.boost == pytest.approx(0.05 * 0.5)  # terms 'cooky', 'monitor': one of two matches
    assert hits["ops#1"].explain.boost == pytest.approx(0.05 * 0.5)
    assert hits["cfg#0"].explain.boost == 0.0
    off = {h.node_id: h for h in Searcher(store, embed, cfg.replace(heading_boost=0.0)).search("cookies monitoring", top_k=7)}
    assert all(h.explain.boost == 0.0 for h in off.values())
    planned = {h.node_id: h for h in Searcher(store, embed, config()).search("cookies monitoring", top_k=7)}
    boost = planned["auth#1"].explain.fusion["heading_boost"]  # by question: the plan's boost
    assert planned["auth#1"].explain.boost == pytest.approx(boost * 0.5) and planned["cfg#0"].explain.boost == 0.0


def test_lambda_one_ranks_by_fused_relevance(store):
    hits = Searcher(store, embed, config(mmr_lambda=1.0)).search(QUERY, top_k=7)
    rel = [h.explain.relevance for h in hits]
    assert rel == sorted(rel, reverse=True)
    assert all(h.explain.mmr_penalty == 0 for h in hits)
    assert [h.score for h in hits] == pytest.approx(rel)


def test_per_query_lambda_overrides_config(store):
    s = Searcher(store, embed, config(mmr_lambda=1.0))
    assert all(h.explain.mmr_penalty == 0 for h in s.search(QUERY, top_k=5))
    assert any(h.explain.mmr_penalty > 0 for h in s.search(QUERY, top_k=5, mmr_lambda=0.3))
    with pytest.raises(InputError, match="mmr_lambda"):
        s.search(QUERY, mmr_lambda=1.5)


def test_vector_mode_is_knn_with_cosine_scores(store):
    hits = Searcher(store, embed, config()).search(QUERY, mode="vector", top_k=4)
    vecs, q = vectors(store), embed(QUERY)
    sims = sorted((float(v @ q) for v in vecs.values()), reverse=True)[:4]
    assert [1 - h.explain.vector_distance for h in hits] == pytest.approx(sims, abs=1e-5)
    assert [h.score for h in hits] == pytest.approx([s / sims[0] for s in sims], abs=1e-5)
    assert [h.explain.vector_rank for h in hits] == [1, 2, 3, 4]
    assert all(h.explain.bm25_rank is None and h.explain.rrf is None for h in hits)


def test_vector_mode_with_lambda_is_mmr_over_vector_candidates(store):
    s = Searcher(store, embed, config())
    plain = s.search(QUERY, mode="vector", top_k=4)
    pure = s.search(QUERY, mode="vector", top_k=4, mmr_lambda=1.0)
    assert [h.node_id for h in pure] == [h.node_id for h in plain]
    diverse = s.search(QUERY, mode="vector", top_k=4, mmr_lambda=0.0)
    assert diverse[0].node_id == plain[0].node_id
    assert [h.node_id for h in diverse] != [h.node_id for h in plain]
    for h in diverse:
        assert h.explain.relevance == pytest.approx(1 - h.explain.vector_distance)


def test_bm25_mode(store):
    hits = Searcher(store, None, config()).search("backups nightly", mode="bm25")
    assert hits[0].node_id == "ops#0" and hits[0].score == 1.0
    assert hits[0].explain.bm25_rank == 1 and hits[0].explain.vector_rank is None


def test_bad_query_vectors_and_arguments_are_clear_errors(store):
    s = Searcher(store, embed, config())
    with pytest.raises(InputError, match="dims"):
        s.search("x", query_vector=np.ones(DIM + 1))
    with pytest.raises(InputError, match="NaN"):
        s.search("x", query_vector=np.full(DIM, np.nan))
    with pytest.raises(InputError, match="mode"):
        s.search("x", mode="fuzzy")
    with pytest.raises(InputError, match="string"):
        s.search(None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="top_k"):
        s.search("x", top_k="3")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="embedder"):
        Searcher(store, None, config()).search("x", mode="vector")


def test_top_k_is_clamped_and_missing_vectors_do_not_fail(store, open_store, tmp_path):
    s = Searcher(store, embed, config())
    assert len(s.search(QUERY, top_k=0)) == 1
    assert len(s.search(QUERY, top_k=1000)) == 7
    fresh = open_store(tmp_path / "fresh.db")  # no model bound, no chunks_vec yet
    assert Searcher(fresh, embed, config()).search("anything", mode="hybrid") == []


def test_chunks_carry_their_document_and_stored_vector(store):
    hit = Searcher(store, embed, config()).search(QUERY, top_k=1)[0]
    assert hit.document == "auth.md" and hit.document_id == "auth" and hit.collection == "default"
    assert hit.heading_path == "Auth > Sessions" and hit.metadata == {"doc": "auth", "i": 0}
    stored = store.conn.execute("SELECT embedding FROM chunks WHERE node_id = ?", (hit.node_id,)).fetchone()[0]
    assert np.allclose(from_blob(stored), embed("Auth > Sessions " + DOCS["auth"][0][1]))


def test_a_lookup_finds_the_chunk_naming_the_identifier_whatever_k(open_store, db_path, monkeypatch):
    """A query of identifiers only is lifted from a deeper BM25 list (LOOKUP_POOL), so the one
    chunk that names `--locked` is first at top_k 1 as at top_k 10, behind prose that BM25
    prefers ("locked" many times); lifted from the candidate pool alone it was not."""
    from llama_index_polaris.engine.search import pipeline

    s = open_store(db_path)
    docs = {f"lock{i:02d}": [(f"Locks > Locked files {i}", "Locked files stay locked: a locked file is locked"
                                                          f" until its lock {i} is released.")] for i in range(13)}
    docs["flags"] = [("Install > Flags", "Pass `--locked` to install with the versions in the lockfile, as written there"
                                         " by the last resolution of every dependency of the package being installed.")]
    fill(s, docs)
    searcher = Searcher(s, embed, config(candidate_pool=3))  # a pool shallower than the prose BM25 prefers
    for unit in ("chunk", "section"):
        for k in (1, 2, 3, 5, 10):
            assert searcher.search("--locked", top_k=k, mode="bm25", unit=unit)[0].node_id == "flags#0", (unit, k)
    assert searcher.search("locked", top_k=1, mode="bm25")[0].node_id != "flags#0"  # words alone: the prose
    monkeypatch.setattr(pipeline, "LOOKUP_POOL", 0)
    assert searcher.search("--locked", top_k=1, mode="bm25", unit="chunk")[0].node_id != "flags#0"
