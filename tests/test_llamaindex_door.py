"""The LlamaIndex door builds the same index as `polaris index` and keeps LlamaIndex's contracts.

Through LlamaIndex's public API (VectorStoreIndex, as_retriever, as_query_engine with
MockLLM, IngestionPipeline) on real files, a real polaris.db and the bundled model; every test
that opens an index runs on both backends (``targets``: files, or PostgreSQL databases, #26).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.schema import Document, IndexNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters, VectorStoreQuery
from llama_index.core.vector_stores.types import VectorStoreQueryMode as Mode

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ModelMismatchError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import REPO

MODEL = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def embed() -> PolarisEmbedding:
    return PolarisEmbedding(model_id=MODEL, config=load_config(use_user_config=False))


@pytest.fixture
def handbook(tmp_path: Path) -> Path:
    return shutil.copytree(REPO / "examples" / "handbook", tmp_path / "handbook")


def config(**kw):
    return load_config(use_user_config=False, model_id=MODEL, **kw)


def reader(folder: Path) -> list[Document]:
    return SimpleDirectoryReader(str(folder), recursive=True, required_exts=[".md"]).load_data()


def test_the_handbook_indexed_both_ways_gives_the_same_chunks_and_vectors(targets, built_handbook, handbook,
                                                                          embed) -> None:
    # `polaris index`'s engine wrote built_handbook (on Postgres: copied there, nothing re-embedded)
    cli_db, li_db = targets.copy_of(built_handbook, "cli.db"), targets.new("li.db")
    with PolarisIndex(cli_db, config=config(), readonly=True) as cli:
        by_cli = {(c.heading_path, c.text): c for c in cli.store.get_chunks(with_embedding=True)}
    store = PolarisVectorStore(li_db, embed_model=embed, config=config())
    VectorStoreIndex.from_documents(
        reader(handbook), storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[PolarisNodeParser(root_dir=str(handbook), config=config())], embed_model=embed,
    )
    by_li = {(c.heading_path, c.text): c for c in store.client.get_chunks(with_embedding=True)}
    assert set(by_li) == set(by_cli) and len(by_li) == 59
    for key, chunk in by_cli.items():
        other = by_li[key]
        assert float(chunk.embedding @ other.embedding) > 0.999, key[0]
        assert other.metadata["file_path"] == chunk.metadata["file_path"]  # relative to the root, both ways
    with PolarisIndex(cli_db, config=config(), readonly=True) as cli:
        assert {d.path for d in store.client.documents()} == {d.path for d in cli.store.documents()}
    store.close()


def test_a_parser_without_arguments_counts_in_the_tokens_of_the_model_that_embeds(
    tmp_path, handbook, embed, settings_embed_model, monkeypatch, caplog
) -> None:
    raw = embed.embedder._tokenizers_loaded().counter
    window = embed.embedder.max_chunk_tokens
    docs = reader(handbook)

    def longest(parser: PolarisNodeParser) -> int:
        nodes = parser.get_nodes_from_documents(docs)
        return max(len(raw.encode(n.get_content(MetadataMode.EMBED), add_special_tokens=False).ids) for n in nodes)

    settings_embed_model(embed)  # the notebook way: Settings first, then transformations=[PolarisNodeParser()]
    assert longest(PolarisNodeParser(config=load_config(use_user_config=False))) <= window
    settings_embed_model(None)  # no Settings: the model a polaris.toml names, read from its files
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert longest(PolarisNodeParser()) <= window
    settings_embed_model(MockEmbedding(embed_dim=8))  # another library's model: len/4, and a warning
    caplog.clear()
    assert longest(PolarisNodeParser()) > window
    assert "Settings.embed_model is MockEmbedding" in caplog.text and "count_tokens=" in caplog.text


def test_llamaindex_constructor_habits_work_or_are_refused_with_a_message(targets) -> None:
    cfg = load_config(use_user_config=False)
    assert PolarisNodeParser.from_defaults(config=cfg, chunk_size=128).max_chunk_tokens == 128
    assert PolarisNodeParser(config=cfg, chunk_size=100).max_chunk_tokens == 100
    with pytest.raises(InputError, match="chunk_overlap_chars"):
        PolarisNodeParser(config=cfg, chunk_overlap=20)
    with pytest.raises(InputError, match="does not take paragraph_size"):
        PolarisNodeParser(config=cfg, paragraph_size=3)
    with pytest.raises(InputError, match="does not take persist_path"):
        PolarisVectorStore(targets.new("x.db"), persist_path="y", config=cfg)


def fake_nodes(n: int, collection_tag: str, dim: int = 8) -> list[TextNode]:
    rng = np.random.default_rng(len(collection_tag))
    nodes = []
    for i in range(n):
        v = rng.standard_normal(dim)
        node = TextNode(id_=f"{collection_tag}-{i}", text=f"{collection_tag} note {i} about sessions",
                        metadata={"tag": collection_tag, "i": i}, embedding=list(v / np.linalg.norm(v)))
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"{collection_tag}-doc-{i % 3}")
        nodes.append(node)
    return nodes


def test_a_collection_keeps_every_read_and_write_to_itself(targets) -> None:
    cfg = load_config(use_user_config=False)
    db = targets.new("p.db")
    a = PolarisVectorStore(db, collection="a", model_id="fake-8", config=cfg)
    b = PolarisVectorStore(db, collection="b", model_id="fake-8", config=cfg)
    a.add(fake_nodes(6, "a"))
    b.add(fake_nodes(6, "b"))
    query = VectorStoreQuery(query_embedding=fake_nodes(1, "a")[0].embedding, similarity_top_k=20)
    assert {n.metadata["tag"] for n in a.query(query).nodes} == {"a"}
    assert {n.metadata["tag"] for n in b.get_nodes()} == {"b"}
    assert a.get_nodes(node_ids=["b-1"]) == []
    a.delete_nodes(node_ids=["b-1", "a-1"])  # b-1 is not a's to delete
    assert len(b.get_nodes()) == 6 and len(a.get_nodes()) == 5
    a.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="i", value=2)]))
    assert len(b.get_nodes()) == 6 and len(a.get_nodes()) == 4
    a.delete("b-doc-0")
    assert len(b.get_nodes()) == 6
    with pytest.raises(InputError, match="belongs to collection 'a'"):
        b.add([TextNode(id_="a-3", text="steal", embedding=[0.1] * 8)])
    a.clear()  # release 0.1 wiped every collection here
    assert a.get_nodes() == [] and len(b.get_nodes()) == 6
    everything = PolarisVectorStore(db, collection=None, config=cfg)
    assert len(everything.get_nodes()) == 6
    with pytest.raises(InputError, match="collection=NAME to write"):
        everything.add(fake_nodes(1, "c"))
    for s in (a, b, everything):
        s.close()


def test_nodes_come_back_as_they_were_added(targets, embed) -> None:
    store = PolarisVectorStore(targets.new("p.db"), embed_model=embed, config=config())
    docs = [Document(text="# Sessions\n\nExpired sessions need a new login.\n\n## Tokens\n\nTokens last an hour.\n",
                     id_="guide", metadata={"file_path": "guide.md", "file_size": 90, "creation_date": "2026-11-30"},
                     excluded_llm_metadata_keys=["file_size", "creation_date"],
                     excluded_embed_metadata_keys=["file_size", "creation_date"])]
    nodes = PolarisNodeParser(config=config(), embed_model=embed).get_nodes_from_documents(docs)
    index_node = IndexNode(id_="summary", text="A summary of the session guide.", index_id="guide-index",
                           metadata={"kind": "summary"}, text_template="SUMMARY {metadata_str}\n{content}")
    index_node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="guide")
    VectorStoreIndex(nodes + [index_node], storage_context=StorageContext.from_defaults(vector_store=store),
                     embed_model=embed)
    back = {n.node_id: n for n in store.get_nodes()}
    for node in nodes + [index_node]:
        got = back[node.node_id]
        assert type(got) is type(node)
        for field in ("metadata", "excluded_llm_metadata_keys", "excluded_embed_metadata_keys", "metadata_template",
                      "metadata_separator", "text_template", "start_char_idx", "end_char_idx", "text"):
            assert getattr(got, field) == getattr(node, field), field
        assert {k: v.node_id for k, v in got.relationships.items()} == {
            k: v.node_id for k, v in node.relationships.items()}
        assert got.get_content(MetadataMode.LLM) == node.get_content(MetadataMode.LLM)
    assert back["summary"].index_id == "guide-index"
    engine = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_query_engine(llm=MockLLM())
    response = engine.query("when do sessions expire")
    prompt_texts = [s.node.get_content(MetadataMode.LLM) for s in response.source_nodes]
    assert prompt_texts and all("file_size" not in t and "chunk_index" not in t for t in prompt_texts)
    store.close()


def test_vectors_of_another_model_are_refused_at_add_and_at_query(targets, built_handbook, embed,
                                                                 settings_embed_model):
    db = targets.copy_of(built_handbook)  # the handbook as `polaris index` wrote it
    store = PolarisVectorStore(db, config=config())
    mock = MockEmbedding(embed_dim=384)  # the same size as MiniLM's vectors
    nodes = [TextNode(id_="m", text="sessions expire", embedding=mock.get_text_embedding("sessions expire"))]
    with pytest.raises(ModelMismatchError, match="do not come from all-minilm-l6-v2"):
        store.add(nodes)
    mock_index = VectorStoreIndex.from_vector_store(store, embed_model=mock)
    with pytest.raises(ModelMismatchError, match="query embedding"):
        mock_index.as_retriever().retrieve("how do we handle expired sessions")
    with pytest.raises(ModelMismatchError, match="query embedding"):
        PolarisRetriever(vector_store=store, embed_model=mock).retrieve("expired sessions")
    good = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=3)
    with PolarisIndex(db, config=config(), readonly=True) as engine:  # what `polaris search` answers
        expected = [h.node_id for h in engine.search("how do we handle expired sessions", top_k=3)]
    assert [n.node.node_id for n in good.retrieve("how do we handle expired sessions")] == expected
    assert len(store.client.documents()) == 11  # the refused add wrote nothing
    # an index built through Settings.embed_model records that model, not "unknown"
    settings_embed_model(MockEmbedding(embed_dim=16))
    fresh = PolarisVectorStore(targets.new("mock.db"), config=config())
    VectorStoreIndex([TextNode(id_="x", text="hello")], storage_context=StorageContext.from_defaults(vector_store=fresh))
    assert fresh.client.model.model_id == "MockEmbedding:unknown"
    settings_embed_model(MockEmbedding(embed_dim=16, model_name="other"))
    with pytest.raises(ModelMismatchError):
        VectorStoreIndex([TextNode(id_="y", text="hi")], storage_context=StorageContext.from_defaults(vector_store=fresh))
    for s in (store, fresh):
        s.close()


def test_query_options_are_honoured(targets, built_handbook, embed) -> None:
    cfg = load_config(use_user_config=False)
    many = PolarisVectorStore(targets.new("many.db"), model_id="fake-8", config=cfg, default_mode="vector")
    many.add(fake_nodes(200, "n"))
    wide = VectorStoreQuery(query_embedding=fake_nodes(1, "q")[0].embedding, similarity_top_k=150)
    assert len(many.query(wide).nodes) == 150  # LlamaIndex's top_k, not the agents' 1..100 clamp
    many.close()

    db = targets.copy_of(built_handbook)  # the handbook as `polaris index` wrote it
    # alpha alone decides fusion; DEFAULT is LlamaIndex's plain vector search here
    store = PolarisVectorStore(db, config=config(heading_boost=0.0), default_mode="vector")
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
    question = "rrf_k rank fusion constant"

    def ids(k: int = 5, **kw) -> list[str]:
        return [n.node_id for n in index.as_retriever(similarity_top_k=k, **kw).retrieve(question)]

    def sections(node_ids: list[str]) -> list[tuple]:
        """Chunk lists as hybrid ranks them: each section once, at its best chunk."""
        nodes = {n.node_id: n for n in store.get_nodes(node_ids=node_ids)}
        keys = [(nodes[i].ref_doc_id, nodes[i].metadata["heading_path"]) for i in node_ids]
        return list(dict.fromkeys(keys))[:5]

    vector = ids()
    bm25 = ids(vector_store_query_mode="text_search")
    assert sections(ids(vector_store_query_mode="hybrid", alpha=1.0)) == sections(ids(30))
    assert sections(ids(vector_store_query_mode="hybrid", alpha=0.0)) == sections(
        ids(30, vector_store_query_mode="text_search"))
    assert ids(vector_store_query_mode="hybrid", alpha=0.5) == ids(vector_store_query_mode="hybrid")
    assert ids(vector_store_query_mode="hybrid", alpha=0.8) != ids(vector_store_query_mode="hybrid", alpha=0.2)
    relevance_only = ids(vector_store_query_mode="mmr", vector_store_kwargs={"mmr_threshold": 1.0})
    diverse = ids(vector_store_query_mode="mmr", vector_store_kwargs={"mmr_threshold": 0.1})
    assert relevance_only == vector and diverse != vector
    hybrid_diverse = ids(vector_store_query_mode="hybrid", vector_store_kwargs={"mmr_threshold": 0.1})
    assert hybrid_diverse != ids(vector_store_query_mode="hybrid")
    with pytest.raises(InputError, match="does not take colour"):
        index.as_retriever(vector_store_kwargs={"colour": "red"}).retrieve(question)
    store.close()


QUESTION = "how do we handle expired sessions"


def test_an_ingestion_pipeline_writes_what_polaris_index_writes(targets, built_handbook, handbook, embed) -> None:
    store = PolarisVectorStore(targets.new("p.db"), embed_model=embed, config=config())
    pipeline = IngestionPipeline(
        transformations=[PolarisNodeParser(root_dir=str(handbook), config=config(), embed_model=embed), embed],
        vector_store=store,
    )
    pipeline.run(documents=reader(handbook))
    with PolarisIndex(targets.copy_of(built_handbook, "cli.db"), config=config(), readonly=True) as cli:
        expected = {(c.heading_path, c.text) for c in cli.store.get_chunks()}
        cli_hits = [(h.document, h.heading_path, round(h.score, 6)) for h in cli.search(QUESTION, top_k=2)]
    assert {(c.heading_path, c.text) for c in store.client.get_chunks()} == expected
    hits = PolarisRetriever(vector_store=store, similarity_top_k=2).retrieve(QUESTION)
    assert [(h.node.metadata["file_path"], h.node.metadata["heading_path"], round(h.node.metadata["relative_score"], 6))
            for h in hits] == cli_hits
    store.close()


def test_both_doors_into_one_file_keep_one_document_per_file(targets, handbook, embed) -> None:
    db = targets.new("p.db")
    with PolarisIndex(db, config=config()) as cli:
        cli.index_paths([handbook])
    store = PolarisVectorStore(db, embed_model=embed, config=config())
    VectorStoreIndex.from_documents(
        reader(handbook), storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[PolarisNodeParser(root_dir=str(handbook), config=config())], embed_model=embed,
    )
    docs = store.client.documents()
    assert len(docs) == 11 and len({d.path for d in docs}) == 11  # LlamaIndex's copy replaced the CLI's
    assert store.client.counts()["chunks"] == 59
    with PolarisIndex(db, config=config()) as cli:  # and the CLI finds them again by path
        report = cli.index_paths([handbook])
        assert (report.added, report.removed, report.chunks_embedded) == (0, 0, 0)
        assert len(cli.store.documents()) == 11
    store.close()


def test_a_query_vector_of_other_text_from_the_model_is_searched_another_models_is_not(targets, built_handbook, embed,
                                                                                      settings_embed_model):
    """HyDE and a QueryBundle's custom_embedding_strs embed other text than the question, on
    purpose: the store takes any vector in the model's space (QUERY_COSINE to the model's own
    embedding of the question), and still refuses another model's. A node embedded from other
    text than the one LlamaIndex embeds for it is refused at add, saying so."""
    from llama_index.core import QueryBundle

    db = targets.copy_of(built_handbook)
    store = PolarisVectorStore(db, config=config())
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=3)
    answer = "Sessions expire after an hour without a request; the client signs in again."
    for bundle in (QueryBundle("expired sessions", custom_embedding_strs=[answer]),
                   QueryBundle("expired sessions", embedding=embed.get_query_embedding(answer))):
        hits = retriever.retrieve(bundle)
        assert len(hits) == 3  # searched, not refused
    other = QueryBundle("expired sessions", embedding=MockEmbedding(embed_dim=384).get_query_embedding("x"))
    with pytest.raises(ModelMismatchError, match="query embedding does not come from all-minilm-l6-v2"):
        retriever.retrieve(other)
    node = TextNode(id_="plain", text="Deploys happen on weekdays before 3pm.", metadata={"channel": "ops"})
    node.embedding = embed.get_text_embedding(node.get_content(metadata_mode=MetadataMode.NONE))
    with pytest.raises(ModelMismatchError, match="look like all-minilm-l6-v2's, but not of the text"):
        store.add([node])
    store.close()


def test_filters_on_a_nodes_document_id_under_llamaindexs_three_names(targets, built_handbook, embed,
                                                                      settings_embed_model):
    """LlamaIndex's node_to_metadata_dict puts a node's document id under ref_doc_id, doc_id and
    document_id, so its own stores filter on them; here too, on both backends, in get_nodes and
    in retrieval, and with any operator (a metadata key of those names is shadowed, as there)."""
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    db = targets.copy_of(built_handbook)
    store = PolarisVectorStore(db, config=config())
    nodes = store.get_nodes()
    docs = sorted({n.ref_doc_id for n in nodes})
    one, two = docs[0], docs[1]
    for key in ("ref_doc_id", "doc_id", "document_id"):
        same = MetadataFilters(filters=[MetadataFilter(key=key, value=one)])
        assert {n.ref_doc_id for n in store.get_nodes(filters=same)} == {one}
        assert len(store.get_nodes(filters=same)) == sum(n.ref_doc_id == one for n in nodes)
        either = MetadataFilters(filters=[MetadataFilter(key=key, value=[one, two], operator=FilterOperator.IN)])
        assert {n.ref_doc_id for n in store.get_nodes(filters=either)} == {one, two}
        other = MetadataFilters(filters=[MetadataFilter(key=key, value=one, operator=FilterOperator.NE)])
        assert one not in {n.ref_doc_id for n in store.get_nodes(filters=other)}
        hits = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
            similarity_top_k=5, filters=same).retrieve("how do we handle expired sessions")
        assert hits and {h.node.ref_doc_id for h in hits} == {one}
    store.close()
