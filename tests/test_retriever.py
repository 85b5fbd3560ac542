"""PolarisRetriever: hybrid by default, top score 1.0, scoping, explanations, inside a query engine;
every test on a polaris.db and on a Postgres database."""

from __future__ import annotations

import pytest
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_polaris import PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ModelMismatchError
from llama_index_polaris.engine.search.pipeline import Explanation
from llama_index_polaris.retriever import PolarisNodeWithScore
from polaris_search_testing import DIM, embed

MODEL = "all-minilm-l6-v2"
DOCS = {
    ("guide", "docs"): [("Guide > Sessions", "Expired sessions are refreshed using the token lifetime."),
                        ("Guide > Tokens", "Tokens are signed and rotate every day.")],
    ("runbook", "docs"): [("Runbook > Backups", "Backups run nightly and are kept for thirty days.")],
    ("post", "blog"): [("Blog > Sessions", "Why we shortened session lifetimes last year.")],
}


class BowEmbedding(MockEmbedding):
    """The tests' deterministic bag-of-words embedder as a LlamaIndex embedding."""

    def _get_query_embedding(self, query):
        return [float(x) for x in embed(query)]

    def _get_text_embedding(self, text):
        return [float(x) for x in embed(text)]


def nodes_for(embed_text) -> dict[str, list[TextNode]]:
    out: dict[str, list[TextNode]] = {}
    for (doc, collection), sections in DOCS.items():
        for i, (heading, text) in enumerate(sections):
            n = TextNode(id_=f"{doc}-{i}", text=text, metadata={"heading_path": heading, "kind": doc})
            n.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
            n.embedding = embed_text(f"{heading} {text}")
            out.setdefault(collection, []).append(n)
    return out


@pytest.fixture
def db_path(backend_target: str) -> str:
    """Where this test's index goes: a polaris.db, or a fresh Postgres database (conftest's, overridden)."""
    return backend_target


@pytest.fixture
def stores(db_path):
    """Three adapters on one file: the 'docs' and 'blog' collections, and all of them (None)."""
    cfg = load_config(use_user_config=False)
    made = {c: PolarisVectorStore(db_path, model_id="fake-bow", collection=c, config=cfg) for c in ("docs", "blog")}
    for collection, nodes in nodes_for(lambda t: [float(x) for x in embed(t)]).items():
        made[collection].add(nodes)
    made["all"] = PolarisVectorStore(db_path, collection=None, config=cfg)
    yield made
    for s in made.values():
        s.close()


@pytest.fixture
def retriever(stores):
    return PolarisRetriever(vector_store=stores["docs"], embed_model=BowEmbedding(embed_dim=DIM), similarity_top_k=3)


def test_hybrid_by_default_top_score_one_and_explanations(retriever):
    hits = retriever.retrieve("how are expired sessions refreshed")
    assert retriever.mode == "hybrid"
    assert hits[0].node.node_id == "guide-0" and hits[0].node.metadata["relative_score"] == 1.0
    assert all(isinstance(h, PolarisNodeWithScore) and isinstance(h.explain, Explanation) for h in hits)
    top = hits[0].explain
    assert top.score == hits[0].node.metadata["relative_score"] and top.vector_rank and top.bm25_rank and top.rrf
    assert [h.node.metadata["relative_score"] for h in hits] == [h.explain.score for h in hits]
    assert [h.score for h in hits] == [h.node.metadata["match_strength"] for h in hits]  # node.score: the strength
    # the explanation lives beside the node: node.metadata is the chunk's own, and what Polaris adds is hidden
    ours = {"relative_score", "match_strength", "good_match", "no_good_match"}
    assert {k: v for k, v in hits[0].node.metadata.items() if k not in ours} == {"heading_path": "Guide > Sessions",
                                                                                 "kind": "guide"}
    assert ours <= set(hits[0].node.excluded_llm_metadata_keys)
    assert hits[0].node.ref_doc_id == "guide"


def test_documents_collections_and_filters_scope_the_search(stores):
    embed_model = BowEmbedding(embed_dim=DIM)

    def kinds(store="all", **kw):
        r = PolarisRetriever(vector_store=stores[store], embed_model=embed_model, similarity_top_k=10, **kw)
        return {h.node.metadata["kind"] for h in r.retrieve("sessions lifetime backups")}

    assert kinds() == {"guide", "runbook", "post"}
    assert kinds("docs") == {"guide", "runbook"} and kinds("blog") == {"post"}  # a store sees its collection
    assert kinds("docs", collections=["blog"]) == set()  # ... and a scope only narrows it
    assert kinds(collections=["blog"]) == {"post"}
    assert kinds(collections=["docs"]) == {"guide", "runbook"}
    assert kinds(documents=["runbook"]) == {"runbook"}
    assert kinds(collections=[]) == set()
    with pytest.raises(InputError, match="no document 'unknown'"):
        kinds(documents=["unknown"])
    assert kinds(filters=MetadataFilters(filters=[MetadataFilter(key="kind", operator="!=", value="guide")])) == {"runbook", "post"}


def test_vector_and_bm25_modes(stores):
    bm25 = PolarisRetriever(vector_store=stores["docs"], mode="bm25", similarity_top_k=2)  # needs no embedder
    hits = bm25.retrieve("nightly backups")
    assert hits[0].node.node_id == "runbook-0" and hits[0].explain.vector_rank is None
    vector = PolarisRetriever(vector_store=stores["docs"], embed_model=BowEmbedding(embed_dim=DIM), mode="vector")
    hits = vector.retrieve("Guide > Tokens Tokens are signed and rotate every day.")
    assert hits[0].node.node_id == "guide-1" and hits[0].explain.bm25_rank is None


def test_bad_arguments_are_clear_errors(stores):
    with pytest.raises(InputError, match="mode"):
        PolarisRetriever(vector_store=stores["docs"], mode="semantic")
    with pytest.raises(InputError, match="MetadataFilters"):
        PolarisRetriever(vector_store=stores["docs"], filters={"kind": "guide"})
    with pytest.raises(InputError, match="list of strings"):
        PolarisRetriever(vector_store=stores["docs"], documents="guide", mode="bm25").retrieve("sessions")


def test_unnamed_model_without_embed_model_is_a_clear_error(db_path):
    """No Polaris model makes these 32-dim vectors: the configured one is refused, saying what to do."""
    store = PolarisVectorStore(db_path, config=load_config(use_user_config=False))
    try:
        store.add([TextNode(id_="a", text="sessions", embedding=[1.0] + [0.0] * (DIM - 1))])
        with pytest.raises(ModelMismatchError, match="does not name.*embed_model") as info:
            PolarisRetriever(vector_store=store).retrieve("sessions")
        assert "unknown" not in str(info.value)
    finally:
        store.close()


def test_left_out_arguments_come_from_polaris_toml(tmp_path, monkeypatch, db_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    where = "from-toml.db" if not db_path.startswith("postgres") else db_path  # a file relative to the folder
    (tmp_path / "polaris.toml").write_text(f'db_path = "{where}"\ntop_k = 2\n')
    writer = PolarisVectorStore(model_id="fake-bow")
    assert writer.db_path == where
    for nodes in nodes_for(lambda t: [float(x) for x in embed(t)]).values():
        writer.add(nodes)
    writer.close()
    retriever = PolarisRetriever(mode="bm25")  # store, top_k from the config
    try:
        assert retriever.similarity_top_k == 2
        assert len(retriever.retrieve("sessions lifetime backups tokens")) == 2
    finally:
        retriever.vector_store.close()


async def test_aretrieve(retriever):
    hits = await retriever.aretrieve("expired sessions")
    assert hits[0].node.node_id == "guide-0" and hits[0].explain is not None


def test_inside_a_retriever_query_engine_with_mock_llm(retriever):
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query("how are expired sessions refreshed?")
    assert str(response)
    assert response.source_nodes[0].node.node_id == "guide-0"
    assert isinstance(response.source_nodes[0], PolarisNodeWithScore)
    assert response.source_nodes[0].explain.score == 1.0


@pytest.fixture(scope="module")
def polaris_embedding():
    from llama_index_polaris import PolarisEmbedding

    return PolarisEmbedding(model_id=MODEL, config=load_config(use_user_config=False))


def test_recorded_model_embeds_the_query_when_embed_model_is_left_out(db_path, polaris_embedding):
    cfg = load_config(use_user_config=False)
    store = PolarisVectorStore(db_path, embed_model=polaris_embedding, config=cfg)
    try:
        nodes = [n for ns in nodes_for(polaris_embedding.get_text_embedding).values() for n in ns]
        for n in nodes:  # what LlamaIndex embeds for a node (the store checks one node of each add)
            n.embedding = polaris_embedding.get_text_embedding(n.get_content(metadata_mode=MetadataMode.EMBED))
        store.add(nodes)
        query = "when do old login sessions get renewed?"
        explicit = PolarisRetriever(vector_store=store, embed_model=polaris_embedding, mode="vector").retrieve(query)
        implicit = PolarisRetriever(vector_store=store, mode="vector").retrieve(query)
        assert [h.node.node_id for h in implicit] == [h.node.node_id for h in explicit]
        assert [h.explain.vector_distance for h in implicit] == pytest.approx([h.explain.vector_distance for h in explicit], abs=1e-5)
        assert implicit[0].node.metadata["kind"] == "guide"
    finally:
        store.close()


def test_a_polaris_embedding_of_another_model_is_refused(stores, polaris_embedding):
    from llama_index_polaris.engine.errors import ModelMismatchError

    with pytest.raises(ModelMismatchError, match="fake-bow"):
        PolarisRetriever(vector_store=stores["docs"], embed_model=polaris_embedding)
