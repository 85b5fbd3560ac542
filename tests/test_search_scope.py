"""Scope (5ire): documents and collections, unknown names, and filters inside the KNN."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ScopeError
from llama_index_polaris.engine.storage.filters import Condition
from llama_index_polaris.engine.search.pipeline import Searcher
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding
from polaris_search_testing import embed, fill

DOC = [("Guide > Sessions", "Expired sessions are refreshed."), ("Guide > Tokens", "Tokens rotate daily.")]


@pytest.fixture
def store(open_store, db_path):
    s = open_store(db_path)
    fill(s, {"a": DOC, "b": DOC}, collection="docs")
    fill(s, {"c": DOC}, collection="docs", status="pending")
    fill(s, {"d": DOC}, collection="blog")
    fill(s, {"e": DOC}, collection="drafts", status="pending")  # a collection with nothing searchable
    return s


def run(store, query="expired sessions", **kw):
    return Searcher(store, embed, load_config(use_user_config=False)).search(query, top_k=20, **kw)


def docs_of(hits):
    return {h.document_id for h in hits}


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_scope_by_documents_and_collections(store, mode):
    assert docs_of(run(store, mode=mode)) == {"a", "b", "c", "d", "e"}
    assert docs_of(run(store, mode=mode, documents=["a"])) == {"a"}
    assert docs_of(run(store, mode=mode, documents=["d.md"])) == {"d"}  # by path too
    assert docs_of(run(store, mode=mode, collections=["docs"])) == {"a", "b"}  # completed only: not c
    assert docs_of(run(store, mode=mode, collections=["docs"], documents=["d"])) == {"a", "b", "d"}
    assert docs_of(run(store, mode=mode, documents=["c"])) == {"c"}  # named explicitly: any status


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_an_empty_scope_returns_nothing(store, mode):
    assert run(store, mode=mode, collections=["drafts"]) == []  # exists, nothing completed in it
    assert run(store, mode=mode, documents=[]) == []
    assert run(store, mode=mode, collections=[], documents=[]) == []
    assert run(store, mode=mode, filters=Condition("doc", "==", "zzz")) == []
    assert run(store, mode=mode, node_ids=["missing#0"]) == []  # node ids filter, they name no scope


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_a_scope_the_index_lacks_is_named_with_what_exists(store, mode):
    with pytest.raises(ScopeError, match=r"no collection 'Docs' in .*polaris\.db, which has 3: 'blog', 'docs',"
                                         r" 'drafts'\. Did you mean 'docs'\?") as caught:
        run(store, mode=mode, collections=["Docs"])
    assert set(caught.value.reasons) == {"collection"}
    with pytest.raises(ScopeError, match=r"no document 'a.mdx' in .*, which holds 5 documents .*Did you mean 'a.md'\?"):
        run(store, mode=mode, documents=["a.mdx"])
    with pytest.raises(ScopeError) as both:
        run(store, mode=mode, documents=["a", "zz.md"], collections=["docs", "nope"])
    assert set(both.value.reasons) == {"collection", "document"}
    assert "'zz.md'" in both.value.reasons["document"] and "'nope'" in both.value.reasons["collection"]
    with pytest.raises(ScopeError, match="no collection 'nope'"):
        run(store, mode=mode, within_collection="nope")
    with pytest.raises(ScopeError, match="no collection 'nope'"):  # even with no words to search
        run(store, "  ", mode=mode, collections=["nope"])


def test_an_empty_scope_does_not_even_embed(store):
    def boom(_):
        raise AssertionError("embedded for an empty scope")

    assert Searcher(store, boom, load_config(use_user_config=False)).search("x", collections=["drafts"]) == []


def test_scope_of_the_wrong_type_is_a_clear_error(store):
    with pytest.raises(InputError, match="list of strings"):
        run(store, documents="a.md")
    with pytest.raises(InputError, match="list of strings"):
        run(store, collections=[1])


def test_restrictive_filter_still_returns_k_hits_filtering_inside_knn(open_store, db_path):
    """200 chunks; the 6 allowed ones are the farthest from the query. A post-filter of the
    top k * 3 candidates would return none of them."""
    s = open_store(db_path)
    dim = 8
    s.bind_model(ModelBinding("fake", dim))
    query = np.eye(dim, dtype=np.float32)[0]
    rng = np.random.default_rng(7)
    vecs, chunks = [], []
    for i in range(200):
        allowed = i % 33 == 0  # 7 of them: 0, 33, ..., 198
        v = (-query if allowed else query) + rng.normal(0, 0.3, dim)
        vecs.append(v / np.linalg.norm(v))
        chunks.append(ChunkRecord(node_id=f"n{i}", text=f"chunk {i}", ordinal=i, metadata={"tier": "gold" if allowed else "x"}))
    s.upsert_document(DocumentRecord("doc"), chunks, np.array(vecs, dtype=np.float32))
    searcher = Searcher(s, None, load_config(use_user_config=False, unit="chunk"))  # one document, no headings
    for mode in ("vector", "hybrid"):
        hits = searcher.search("", mode=mode, top_k=5, query_vector=query, filters=Condition("tier", "==", "gold"))
        assert len(hits) == 5
        assert all(h.metadata["tier"] == "gold" for h in hits)
    hits = searcher.search("", mode="vector", top_k=5, query_vector=query, node_ids=["n0", "n1", "n33"])
    assert {h.node_id for h in hits} == {"n0", "n1", "n33"}
