"""BM25 over FTS5: user text is quoted, never syntax; failures degrade to no BM25 hits."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.sqlite.bm25 import bm25, fts_query
from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.search.pipeline import MAX_QUERY_CHARS, Searcher
from polaris_search_testing import embed, fill

DOCS = {
    "auth": [("Auth > Sessions", "Expired sessions are refreshed with the token lifetime setting."),
             ("Auth > Tokens", "Tokens carry a signature; NEAR the edge of lifetime they rotate.")],
    "cfg": [("Config > Fusion", "The rrf_k constant flattens the curve of reciprocal rank fusion."),
            ("Config > Prefix", "Use a star * or a quote \" or a minus - or a colon: freely in prose.")],
}

HOSTILE = ['"', '""', "*", "NEAR", "NEAR(a b)", "-", ":", "a:b", "-token", "^", "(", ")", "AND", "OR NOT",
           "'", "\\", "{text}: x", "text:rrf", "NEAR/2", "\x00", "🙂", "   ", "?!.,;"]


@pytest.fixture
def store(open_store, db_path):
    s = open_store(db_path)
    fill(s, DOCS)
    return s


def searcher(store):
    return Searcher(store, embed, load_config(use_user_config=False))


def test_fts_query_quotes_every_word_and_joins_with_or():
    assert fts_query('how do we handle "expired" sessions?') == '"handle" OR "expired" OR "sessions"'
    assert fts_query("rrf_k") == '"rrf_k"'
    assert fts_query("NEAR * - :") == '"near"'
    assert fts_query("the") == '"the"'  # only stop words: keep them rather than search nothing
    assert fts_query("?!.,;") is None and fts_query("") is None


@pytest.mark.parametrize("query", HOSTILE)
def test_punctuation_and_fts5_operators_are_text_not_syntax(store, query):
    assert isinstance(bm25(store.conn, query, 10), list)
    for mode in ("bm25", "hybrid", "vector"):
        hits = searcher(store).search(query, mode=mode, top_k=3)
        assert isinstance(hits, list)
        if mode == "bm25" and not any(c.isalnum() for c in query):
            assert hits == []


def test_operator_words_are_searched_as_words(store):
    ids = [cid for cid, _ in bm25(store.conn, "NEAR", 10)]
    texts = {c.id: c.text for c in store.get_chunks()}
    assert ids and all("NEAR" in texts[i] for i in ids)


def test_identifier_with_underscore_is_found(store):
    hits = searcher(store).search("RRF_K", mode="bm25")
    assert hits and hits[0].node_id == "cfg#0"


def test_a_question_is_an_or_not_an_and(store):
    # no chunk contains all of these words; an AND would find nothing
    hits = searcher(store).search("what about expired sessions and zebra unicorns", mode="bm25")
    assert [h.node_id for h in hits] == ["auth#0"]


def test_a_query_of_the_maximum_length_is_answered_and_a_longer_one_refused(store):
    query = ("expired sessions " + "lorem ipsum dolor " * 600)[:MAX_QUERY_CHARS]
    for mode in ("bm25", "hybrid"):
        hits = searcher(store).search(query, mode=mode, top_k=3)
        assert hits and hits[0].node_id == "auth#0"
    with pytest.raises(InputError, match="10,001 characters; at most 10,000 are accepted"):
        searcher(store).search(query + "x", mode="bm25")


def test_empty_and_whitespace_query_return_nothing(store):
    for q in ("", "   ", "\n\t"):
        for mode in ("bm25", "hybrid", "vector"):
            assert searcher(store).search(q, mode=mode) == []


def test_empty_fts_table_and_broken_fts_degrade_to_vector_only(open_store, db_path, tmp_path):
    empty = open_store(tmp_path / "empty.db")
    assert bm25(empty.conn, "sessions", 10) == []
    s = open_store(db_path)
    fill(s, DOCS)
    s.conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('delete-all')")  # FTS index now empty
    assert bm25(s.conn, "sessions", 10) == []
    s.conn.execute("DROP TABLE chunks_fts")  # and now a full-text error
    assert bm25(s.conn, "sessions", 10) == []
    hits = searcher(s).search("expired sessions token lifetime", mode="hybrid", top_k=2)
    assert hits and all(h.explain.bm25_rank is None and h.explain.vector_rank for h in hits)


@given(st.lists(st.integers(-2**62, 2**62), max_size=200))
def test_sorted_unique_is_numpys_unique(values: list[int]) -> None:
    from llama_index_polaris.engine.storage.scoring import sorted_unique

    array = np.array(values, dtype=np.int64)
    assert np.array_equal(sorted_unique(array), np.unique(array))
