"""BM25 from RAM gives FTS5's own bm25() answer: same chunks, same scores, every scope."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.sqlite.bm25 import bm25
from llama_index_polaris.engine.sqlite.bm25_cache import Bm25Cache, varints
from llama_index_polaris.engine.storage.scope import Scope
from llama_index_polaris.engine.sqlite.bits import VectorCache
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store

# Zipf-ish: the first words land in most chunks (scored from RAM), the last in few (FTS5).
VOCAB = (
    "session sessions token tokens index indexing indexed search searching query queries cache "
    "vector vectors chunk chunks heading headings model models rank ranking fusion boost embedding "
    "sqlite datasette llama retriever parser window budget overlap rrf_k top_k cosine porter "
    "stemmer naïve café résumé diacritics zebra quartz"
).split()


def corpus_text(rng: random.Random, n: int) -> str:
    return " ".join(VOCAB[min(int(rng.paretovariate(0.9)) - 1, len(VOCAB) - 1)] for _ in range(n)) + "."


def build(path, n_docs=30, per_doc=10, seed=0) -> Store:
    rng = random.Random(seed)
    store = Store(path)
    store.bind_model(ModelBinding("fake", 4))
    for d in range(n_docs):
        vecs = np.random.default_rng(d).normal(size=(per_doc, 4)).astype(np.float32)
        chunks = [
            ChunkRecord(f"d{d}c{i}", corpus_text(rng, rng.randint(3, 40)), i, heading_path=f"Guide > {rng.choice(VOCAB)}")
            for i in range(per_doc)
        ]
        store.upsert_document(DocumentRecord(f"doc{d}", collection="a" if d % 2 else "b"), chunks, vecs)
    return store


def assert_same(mine: list[tuple[int, float]], exact: list[tuple[int, float]]) -> None:
    """Same scores in the same order; ids equal except where FTS5 breaks an exact tie its own way."""
    assert [s for _, s in mine] == pytest.approx([s for _, s in exact], rel=1e-9)
    if exact:
        last = exact[-1][1]
        assert {i for i, s in mine if s > last * (1 + 1e-9)} == {i for i, s in exact if s > last * (1 + 1e-9)}


@pytest.fixture
def store(tmp_path):
    s = build(tmp_path / "p.db")
    yield s
    s.close()


def cache_for(store: Store, **kw) -> Bm25Cache:
    cache = Bm25Cache(store, min_chunks=1, common_df=kw.pop("common_df", 20), **kw)
    assert cache.refresh()
    return cache


def test_lengths_and_averages_are_fts5s_own(store):
    cache = cache_for(store)
    base = cache._base
    assert base.n_rows == 300 == len(base.ids)
    # one chunk's length, counted independently through fts5vocab
    store.conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, instance)")
    cid = int(base.ids[17])
    assert base.lengths[17] == store.conn.execute("SELECT count(*) FROM temp.v WHERE doc = ?", (cid,)).fetchone()[0]
    assert base.avg_length == pytest.approx(base.lengths.mean())
    assert varints(b"\x81\x1b\x07") == [155, 7]


words = st.sampled_from(VOCAB + ["the", "and", "what", "NEAR", "-", '"', "*", ":", "(", "zzzunknown", "Sessions", "CAFE"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(words, min_size=0, max_size=12).map(" ".join), st.sampled_from([1, 5, 30]))
def test_same_answer_as_fts5_for_any_query(store, query, limit):
    cache = cache_for(store)
    assert_same(cache.bm25(query, limit), bm25(store.conn, query, limit))


def test_common_words_really_are_scored_from_ram(store):
    cache = cache_for(store)
    query = "session tokens zebra rrf_k sessions"
    assert_same(cache.bm25(query, 30), bm25(store.conn, query, 30))
    assert "session" in cache._postings and "token" in cache._postings  # stemmed, from RAM
    assert "zebra" not in cache._postings  # rare: FTS5 scored it


def test_same_answer_in_every_scope(store):
    cache = cache_for(store)
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id").fetchall()]
    scopes = [
        Scope(document_ids=("doc1", "doc7", "nope")),
        Scope(chunk_ids=tuple(ids[::7])),
        Scope(document_ids=("doc2",), chunk_ids=tuple(ids[15:40])),
        Scope(document_ids=()),
    ]
    for query in ["session token index", "zebra quartz session", "cache chunks headings"]:
        for scope in scopes:
            assert_same(cache.bm25(query, 10, scope), bm25(store.conn, query, 10, scope))


def test_reloads_after_writes_and_never_causes_reloads_itself(store, tmp_path):
    cache = cache_for(store)
    vectors = VectorCache(store, min_chunks=1)
    vectors.refresh()
    before = store.conn.total_changes
    cache.bm25("session token zebra", 10)
    assert store.conn.total_changes == before  # query terms are tokenized elsewhere
    store.delete_document("doc0")
    assert cache.refresh() and cache._base.n_rows == 290
    other = Store(tmp_path / "p.db")
    other.delete_document("doc1")
    other.close()
    assert cache.refresh() and cache._base.n_rows == 280
    assert_same(cache.bm25("session token zebra", 30), bm25(store.conn, "session token zebra", 30))


def test_postings_held_stay_within_the_bound(store):
    cache = cache_for(store, common_df=1, max_postings=150)
    for word in VOCAB:
        cache.bm25(word, 5)
        assert cache._held <= 150 or len(cache._postings) == 1
    assert_same(cache.bm25("session token cache", 30), bm25(store.conn, "session token cache", 30))


def test_read_only_store_and_small_store(tmp_path):
    build(tmp_path / "p.db").close()
    ro = Store(tmp_path / "p.db", readonly=True)
    try:
        cache = cache_for(ro)
        assert_same(cache.bm25("session token zebra", 10), bm25(ro.conn, "session token zebra", 10))
        assert not Bm25Cache(ro).refresh()  # 300 chunks: below MIN_CHUNKS, FTS5 is fast there
    finally:
        ro.close()


def test_custom_fts_tokenizer_is_used_for_query_words(tmp_path):
    store = Store(tmp_path / "t.db", fts_tokenizer="unicode61")  # no stemming
    store.bind_model(ModelBinding("fake", 4))
    vec = np.array([[1, 0, 0, 0]], dtype=np.float32)
    for d in range(40):
        text = "sessions everywhere" if d % 2 else "session once"
        store.upsert_document(DocumentRecord(f"doc{d}"), [ChunkRecord(f"n{d}", text, 0)], vec)
    cache = cache_for(store, common_df=5)
    assert_same(cache.bm25("sessions", 50), bm25(store.conn, "sessions", 50))
    assert len(cache.bm25("sessions", 50)) == 20
    store.close()


def test_column_weights_are_applied_like_fts5(store, monkeypatch):
    from llama_index_polaris.engine.sqlite import bm25 as bm25_module
    from llama_index_polaris.engine.sqlite import bm25_cache as cache_module

    monkeypatch.setattr(bm25_module, "HEADING_WEIGHT", 3.0)
    monkeypatch.setattr(cache_module, "COLUMN_WEIGHTS", {"text": 1.0, "heading_path": 3.0})
    cache = cache_for(store)
    for query in ["session token index", "zebra quartz session", "guide cache chunks headings"]:
        assert_same(cache.bm25(query, 20), bm25(store.conn, query, 20))
    assert cache._postings


def test_background_load_answers_from_fts5_until_complete(store):
    cache = Bm25Cache(store, min_chunks=1, common_df=20, background=True, batch_rows=13)
    query = "session tokens zebra cache"
    with store._lock:  # hold the store: the loader cannot read yet
        assert not cache.refresh()
        assert_same(cache.bm25(query, 10), bm25(store.conn, query, 10))  # plain FTS5 meanwhile
    assert cache.wait(timeout=30)
    assert cache._base.n_rows == 300 and len(cache._base.ids) == 300
    assert_same(cache.bm25(query, 10), bm25(store.conn, query, 10))
    assert cache._postings


def test_a_long_lived_index_searches_the_same_with_both_caches(tmp_path):
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.search.pipeline import Searcher
    from llama_index_polaris.engine.index import PolarisIndex

    build(tmp_path / "p.db").close()
    cfg = load_config(use_user_config=False)
    ix = PolarisIndex(tmp_path / "p.db", config=cfg, readonly=True)
    try:
        ix.vector_cache.min_chunks = ix.bm25_cache.min_chunks = 1
        ix.bm25_cache.common_df = 20
        q = np.array([0.6, 0.8, 0, 0], dtype=np.float32)
        plain = Searcher(ix.store, None, cfg).search("session tokens zebra", top_k=10, query_vector=q)
        first = ix.search("session tokens zebra", top_k=10, query_vector=q)  # caches still loading
        assert ix.bm25_cache.wait(30)
        assert not ix.vector_cache.wait(30)  # 4 dims do not pack into sign-bit bytes: vectors stay exact (vec0)
        later = ix.search("session tokens zebra", top_k=10, query_vector=q)
        for hits in (first, later):
            assert [h.chunk_id for h in hits] == [h.chunk_id for h in plain]
            assert [h.score for h in hits] == pytest.approx([h.score for h in plain], rel=1e-6)
        assert ix.bm25_cache._postings  # the later search really used the BM25 cache
    finally:
        ix.close()


def test_full_word_memory_starts_afresh_without_losing_an_answer(store, monkeypatch):
    from llama_index_polaris.engine.sqlite import bm25_cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_WORDS", 4)
    cache = cache_for(store)
    assert_same(cache.bm25("session token", 10), bm25(store.conn, "session token", 10))
    query = "session token index cache vector"  # two known words, three new: over the limit
    assert_same(cache.bm25(query, 10), bm25(store.conn, query, 10))
    assert {"index", "cach", "vector"} <= set(cache._postings)  # answered from RAM, not the fallback


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(words, min_size=1, max_size=12).map(" ".join), st.sampled_from([1, 3, 10, 30, 500]),
       st.sampled_from([None, ("doc1", "doc7", "doc12", "doc20"), "every third chunk"]))
def test_skipping_what_cannot_decide_the_top_gives_the_dense_answer_to_the_bit(store, monkeypatch, query, limit,
                                                                                where):
    """MaxScore from RAM (``Bm25Cache._top_pruned``) against the dense sum: same hits, same floats."""
    from llama_index_polaris.engine.sqlite import bm25_cache

    cache = cache_for(store)
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")]
    scope = Scope() if where is None else (Scope(chunk_ids=tuple(ids[::3])) if where == "every third chunk"
                                           else Scope(document_ids=where))
    answers = []
    for prune_from in (10**12, 0):
        monkeypatch.setattr(bm25_cache, "PRUNE_FROM", prune_from)
        answers.append(cache.bm25(query, limit, scope))
    assert answers[1] == answers[0]
    assert_same(answers[0], bm25(store.conn, query, limit, scope))


def test_skipping_from_ram_really_skips(store, monkeypatch):
    """The property above holds for a pruning that never prunes too: here a common word must be
    scored only at the chunks that could still rise."""
    from llama_index_polaris.engine.sqlite import bm25_cache
    from llama_index_polaris.engine.storage import scoring

    monkeypatch.setattr(bm25_cache, "PRUNE_FROM", 0)
    asked = []
    real = scoring.top_pruned

    def spy(terms, *a, **kw):
        wrapped = [scoring.Term(t.bound, t.every, lambda cand, t=t: asked.append(len(cand)) or t.at(cand)) for t in terms]
        return real(wrapped, *a, **kw)

    monkeypatch.setattr(bm25_cache, "top_pruned", spy)
    cache = cache_for(store)
    query = "zebra quartz session token index"
    found = cache.bm25(query, 3)
    assert asked and min(asked) < len(cache._base.ids) // 2, asked
    monkeypatch.setattr(bm25_cache, "PRUNE_FROM", 10**12)
    assert found == cache.bm25(query, 3)
