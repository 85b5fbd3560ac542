"""PolarisVectorStore: LlamaIndex's vector store contract on a real polaris.db and on a real
Postgres database (every test that opens a store runs on both backends)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode as Mode,
)

from llama_index_polaris import PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ModelMismatchError
from polaris_search_testing import DIM, embed
from polaris_testing import new_database

MODEL = "all-minilm-l6-v2"
SECTIONS = [
    ("auth", "Auth > Sessions", "Expired sessions are refreshed using the token lifetime.", {"topic": "auth", "year": 2023}),
    ("auth", "Auth > Tokens", "Tokens are signed and rotate every day.", {"topic": "auth", "year": 2024}),
    ("ops", "Ops > Backups", "Backups run nightly and are kept for thirty days.", {"topic": "ops", "year": 2024}),
    ("ops", "Ops > Monitoring", "Alerts fire when session counts drop suddenly.", {"topic": "ops", "tags": ["alerts"]}),
    (None, "Misc", "A loose note about cookies and sessions.", {"topic": "misc"}),
]


def make_nodes(embed_fn=embed) -> list[TextNode]:
    nodes = []
    for i, (doc, heading, text, meta) in enumerate(SECTIONS):
        node = TextNode(
            id_=f"node-{i}", text=text, metadata={"heading_path": heading, "heading_level": heading.count(">") + 1,
                                                  "chunk_index": i, **meta},
            start_char_idx=i * 100, end_char_idx=i * 100 + len(text),
        )
        if doc:
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
        node.embedding = [float(x) for x in embed_fn(f"{heading} {text}")]
        nodes.append(node)
    return nodes


@pytest.fixture
def db_path(backend_target: str) -> str:
    """Where this test's index goes: a polaris.db, or a fresh Postgres database (conftest's, overridden)."""
    return backend_target


@pytest.fixture
def other_target(request: pytest.FixtureRequest, backend_target: str, tmp_path):
    """``other_target(name)``: a second, empty index on the same backend."""
    def _other(name: str) -> str:
        if backend_target.startswith("postgres"):
            return new_database(request.getfixturevalue("pg_server"), "polaris_other")
        return str(tmp_path / name)
    return _other


@pytest.fixture
def new_store(db_path):
    opened = []

    def _new(path=None, **kw):
        s = PolarisVectorStore(path or db_path, config=load_config(use_user_config=False), **kw)
        opened.append(s)
        return s

    yield _new
    for s in opened:
        s.close()


@pytest.fixture
def store(new_store):
    """DEFAULT as LlamaIndex's plain vector search (default_mode="vector"); the hybrid default is tested below."""
    s = new_store(model_id="fake-bow", default_mode="vector")
    s.add(make_nodes())
    return s


def q(text="expired sessions", mode=Mode.DEFAULT, k=3, **kw) -> VectorStoreQuery:
    return VectorStoreQuery(query_embedding=[float(x) for x in embed(text)], query_str=text, similarity_top_k=k,
                            mode=mode, **kw)


def test_add_groups_by_ref_doc_and_stores_what_the_node_carries(store):
    engine = store.client
    assert {d.id for d in engine.documents()} == {"auth", "ops", "node-4"}  # no ref_doc: its own document
    (c,) = engine.get_chunks(node_ids=["node-1"])
    assert (c.document_id, c.heading_path, c.heading_level, c.ordinal) == ("auth", "Auth > Tokens", 2, 1)
    assert (c.start_char, c.end_char) == (100, 100 + len(SECTIONS[1][2]))
    assert c.metadata["year"] == 2024 and c.text == SECTIONS[1][2]
    assert engine.model.model_id == "fake-bow" and engine.model.dim == DIM


def test_add_upserts_by_node_id_and_keeps_the_documents_other_nodes(store):
    node = make_nodes()[0]
    node.text = "Sessions now last a week."
    assert store.add([node]) == ["node-0"]
    assert store.client.counts()["chunks"] == 5
    texts = {n.node_id: n.text for n in store.get_nodes(["node-0", "node-1"])}
    assert texts == {"node-0": "Sessions now last a week.", "node-1": SECTIONS[1][2]}


def test_query_returns_nodes_with_text_metadata_offsets_and_source(store):
    res = store.query(q("expired sessions token lifetime", k=2))
    node = res.nodes[0]
    assert res.ids[0] == "node-0" == node.node_id
    assert node.text == SECTIONS[0][2] and node.metadata["topic"] == "auth"
    assert (node.start_char_idx, node.end_char_idx) == (0, len(SECTIONS[0][2]))
    assert node.ref_doc_id == "auth" and node.relationships[NodeRelationship.SOURCE].node_id == "auth"


def test_default_mode_ranks_by_cosine_and_its_similarities_are_match_strengths(store):
    res = store.query(q("alerts and session counts", k=5))
    qv = embed("alerts and session counts")
    sims = {f"node-{i}": float(embed(f"{h} {t}") @ qv) for i, (_, h, t, _) in enumerate(SECTIONS)}
    assert res.ids == sorted(sims, key=sims.get, reverse=True)
    cosines = [1.0 - n.metadata["polaris_explain"]["vector_distance"] for n in res.nodes]
    assert cosines == pytest.approx([sims[i] for i in res.ids], abs=1e-5)
    assert res.similarities == [n.metadata["match_strength"] for n in res.nodes]  # node.score: the strength


def test_text_search_hybrid_and_mmr_modes(store):
    text = store.query(q("backups nightly", mode=Mode.TEXT_SEARCH))
    assert text.ids[0] == "node-2" and text.nodes[0].metadata["relative_score"] == 1.0
    hybrid = store.query(q("expired sessions", mode=Mode.HYBRID, k=3))
    assert hybrid.ids[0] == "node-0" and hybrid.nodes[0].metadata["relative_score"] == 1.0 and len(hybrid.ids) == 3
    assert hybrid.similarities == [n.metadata["match_strength"] for n in hybrid.nodes]
    default = store.query(q("sessions", k=4))
    pure = store.query(q("sessions", mode=Mode.MMR, k=4, mmr_threshold=1.0))
    assert pure.ids == default.ids
    diverse = store.query(q("sessions", mode=Mode.MMR, k=4, mmr_threshold=0.0))
    assert diverse.ids[0] == default.ids[0] and diverse.ids != default.ids


def test_modes_that_need_more_say_so(store):
    with pytest.raises(InputError, match="query_embedding"):
        store.query(VectorStoreQuery(query_str="x", mode=Mode.HYBRID))
    with pytest.raises(InputError, match="query_str"):
        store.query(VectorStoreQuery(query_embedding=list(embed("x")), mode=Mode.HYBRID))
    with pytest.raises(InputError, match="SVM"):
        store.query(q(mode=Mode.SVM))
    with pytest.raises(InputError, match="dims"):
        store.query(VectorStoreQuery(query_embedding=[0.1, 0.2], similarity_top_k=2))


def test_doc_ids_and_node_ids_with_empty_lists_meaning_no_filter(store):
    assert set(store.query(q(k=10, doc_ids=["ops"])).ids) == {"node-2", "node-3"}
    assert set(store.query(q(k=10, node_ids=["node-1", "node-4"])).ids) == {"node-1", "node-4"}
    assert len(store.query(q(k=10, node_ids=[], doc_ids=[])).ids) == 5
    with pytest.raises(InputError, match="no document 'nope'"):  # a scope the file lacks is named, not empty
        store.query(q(k=10, doc_ids=["nope"]))


def test_metadata_filters_with_nesting(store):
    f = MetadataFilters(filters=[
        MetadataFilter(key="topic", operator="in", value=["auth", "ops"]),
        MetadataFilters(filters=[MetadataFilter(key="year", operator=">=", value=2024),
                                 MetadataFilter(key="tags", operator="contains", value="alerts")], condition="or"),
        MetadataFilters(filters=[MetadataFilter(key="heading_path", operator="text_match", value="Backups")],
                        condition="not"),
    ])
    for mode in (Mode.DEFAULT, Mode.HYBRID, Mode.TEXT_SEARCH, Mode.MMR):
        assert set(store.query(q("sessions tokens alerts backups", mode=mode, k=10, filters=f)).ids) == {"node-1", "node-3"}


def test_get_nodes_delete_nodes_delete_and_clear(store):
    nodes = store.get_nodes(["node-3", "node-0"])
    assert [n.node_id for n in nodes] == ["node-3", "node-0"]
    assert nodes[1].embedding == pytest.approx(list(embed(f"{SECTIONS[0][1]} {SECTIONS[0][2]}")))
    assert {n.node_id for n in store.get_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="ops")]))} == {"node-2", "node-3"}
    assert len(store.get_nodes()) == 5 and store.get_nodes([]) == []
    store.delete_nodes()  # neither ids nor filters: nothing
    store.delete_nodes([])
    assert len(store.get_nodes()) == 5
    store.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="year", value=2024)]))
    assert {n.node_id for n in store.get_nodes()} == {"node-0", "node-3", "node-4"}
    store.delete_nodes(["node-0", "node-3"], filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="ops")]))
    assert {n.node_id for n in store.get_nodes()} == {"node-0", "node-4"}
    store.delete("auth")
    assert [n.node_id for n in store.get_nodes()] == ["node-4"]
    assert store.query(q(k=5)).ids == ["node-4"]
    store.clear()
    assert store.get_nodes() == [] and store.query(q(mode=Mode.HYBRID)).ids == []
    assert store.client.model.model_id == "fake-bow"  # the binding stays


async def test_async_variants(store):
    assert (await store.aquery(q(k=1))).ids == ["node-0"]
    assert [n.node_id for n in await store.aget_nodes(["node-2"])] == ["node-2"]
    await store.adelete_nodes(["node-2"])
    await store.adelete("auth")
    assert {n.node_id for n in await store.aget_nodes()} == {"node-3", "node-4"}
    node = make_nodes()[0]
    assert await store.async_add([node]) == ["node-0"]
    await store.aclear()
    assert await store.aget_nodes() == []


def test_model_binding_refuses_other_dims_and_models(new_store, other_target):
    s = new_store(model_id="fake-bow")
    s.add(make_nodes())
    with pytest.raises(ModelMismatchError, match="dim"):
        s.add([TextNode(id_="x", text="y", embedding=[0.1] * (DIM + 1))])
    other = new_store(model_id="another-model")
    with pytest.raises(ModelMismatchError):
        other.add(make_nodes()[:1])
    anonymous = new_store()  # no model named: the recorded one is kept
    anonymous.add(make_nodes()[:1])
    assert anonymous.client.model.model_id == "fake-bow"
    fresh = new_store(other_target("anon.db"))
    fresh.add(make_nodes()[:1])
    assert fresh.client.model.model_id == "unknown" and fresh.client.model.dim == DIM
    fresh.add([TextNode(id_="more", text="more", embedding=[0.5] * DIM)])  # more vectors naming no model
    with pytest.raises(ModelMismatchError, match="of a model it does not name") as info:
        fresh.add([TextNode(id_="wide", text="wide", embedding=[0.5] * (DIM + 1))])
    assert "unknown" not in str(info.value)
    with pytest.raises(InputError, match="no embedding"):
        fresh.add([TextNode(id_="a", text="a", embedding=[0.0] * DIM), TextNode(id_="b", text="b")])
    with pytest.raises(InputError, match="BaseEmbedding such as PolarisEmbedding"):
        new_store(other_target("x.db"), embed_model=object())


def test_text_only_nodes_are_searchable_by_bm25(new_store):
    s = new_store()
    s.add([TextNode(id_="t", text="plain text about fusion")])
    assert s.client.model is None
    assert s.query(VectorStoreQuery(query_str="fusion", mode=Mode.TEXT_SEARCH)).ids == ["t"]


@pytest.fixture(scope="module")
def polaris_embedding():
    from llama_index_polaris import PolarisEmbedding

    return PolarisEmbedding(model_id=MODEL, config=load_config(use_user_config=False))


def test_embed_model_binding_records_the_real_model(new_store, polaris_embedding):
    s = new_store(embed_model=polaris_embedding)
    nodes = make_nodes()
    for n in nodes:  # what LlamaIndex embeds for a node (the store checks one node of each add)
        n.embedding = polaris_embedding.get_text_embedding(n.get_content(metadata_mode=MetadataMode.EMBED))
    s.add(nodes)
    m = s.client.model
    assert (m.model_id, m.dim) == (MODEL, 384) and len(m.fingerprint) == 64
    assert s.model_id == MODEL
    with pytest.raises(ModelMismatchError):
        s.add(make_nodes())  # 32-dim fake vectors into a 384-dim index


WRITER = textwrap.dedent("""
    import sys
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index_polaris import PolarisEmbedding, PolarisVectorStore
    from llama_index_polaris.engine.config import load_config
    cfg = load_config(use_user_config=False)
    embed = PolarisEmbedding(model_id="all-minilm-l6-v2", config=cfg)
    store = PolarisVectorStore(sys.argv[1], embed_model=embed, config=cfg)
    docs = [
        Document(id_="cats", text="Cats are small domesticated felines that purr and sleep a lot."),
        Document(id_="sql", text="SQLite is an embedded relational database stored in one file."),
        Document(id_="rain", text="Rain forms when water vapour condenses into droplets in clouds."),
    ]
    VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(vector_store=store),
                                    embed_model=embed)
    store.close()
""")


def test_from_vector_store_reads_a_db_written_by_another_process(run_python, db_path, new_store, polaris_embedding):
    done = run_python(WRITER.replace("sys.argv[1]", json.dumps(str(db_path))), timeout=120)
    assert done.returncode == 0, done.stderr
    store = new_store()
    index = VectorStoreIndex.from_vector_store(store, embed_model=polaris_embedding)
    assert len(index.docstore.docs) == 0  # nothing but the polaris.db
    hits = index.as_retriever(similarity_top_k=2).retrieve("which database lives in a single file?")
    assert hits[0].node.ref_doc_id == "sql" and "SQLite" in hits[0].node.get_content()
    assert hits[0].score == pytest.approx(max(h.score for h in hits)) and 0 < hits[0].score <= 1
    hybrid = index.as_retriever(similarity_top_k=3, vector_store_query_mode="hybrid").retrieve("purring felines")
    assert hybrid[0].node.ref_doc_id == "cats" and hybrid[0].node.metadata["relative_score"] == 1.0


def test_an_in_memory_store_makes_no_file(tmp_path, monkeypatch):
    """':memory:' is SQLite's in-memory database, as LlamaIndex users pass it: no file appears
    (SQLite only: a Postgres index is always on its server)."""
    monkeypatch.chdir(tmp_path)
    s = PolarisVectorStore(":memory:", model_id="fake-bow", config=load_config(use_user_config=False))
    s.add(make_nodes())
    assert s.query(q("expired sessions", k=2)).ids[0] == "node-0"
    s.close()
    assert list(tmp_path.iterdir()) == []
