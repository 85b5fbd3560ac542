"""Same question, same answer (issue #23): however LlamaIndex built the file, every door
opens it and answers alike; a file proves its model; another model's vectors are refused.

The handbook, a real polaris.db per idiom, the bundled model, the `polaris` command in a
subprocess and a real Datasette client; every test runs again on a PostgreSQL database (#26),
with every door but Datasette (the explorer reads SQLite files only, docs/datasette.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from datasette.app import Datasette
from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.schema import Document, MetadataMode

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ModelMismatchError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import REPO, copy_index

MODEL = "all-minilm-l6-v2"
K = 3
QUESTIONS = ("how do we handle expired sessions", "rrf_k")
POLARIS = str(Path(sys.executable).with_name("polaris"))
IDIOMS = ("settings_embed_model", "from_documents_embed_model", "ingestion_pipeline", "caller_embedded")
DOORS = ("retriever", "as_retriever", "cli", "datasette")


@pytest.fixture(scope="module")
def embed() -> PolarisEmbedding:
    return PolarisEmbedding(model_id=MODEL, config=load_config(use_user_config=False))


class Project(NamedTuple):
    root: Path  # the folder: handbook/ and polaris.toml
    db: str  # where the index goes: a polaris.db file or a PostgreSQL URI
    backend: str

    @property
    def doors(self) -> tuple[str, ...]:
        """The doors that open it: Datasette reads SQLite files only (docs/datasette.md)."""
        return DOORS if self.backend == "sqlite" else tuple(d for d in DOORS if d != "datasette")


@pytest.fixture
def project(tmp_path: Path, targets) -> Project:
    """A folder with the handbook and a polaris.toml naming the bundled model (read by the CLI and Datasette),
    and where its index goes on this backend."""
    shutil.copytree(REPO / "examples" / "handbook", tmp_path / "handbook")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    db = str(tmp_path / "polaris.db") if targets.backend == "sqlite" else targets.new()
    return Project(tmp_path, db, targets.backend)


def index_handbook(project: Project, built_handbook: Path) -> None:
    """The handbook in ``project.db`` as `polaris index` writes it: the module's built_handbook, copied
    (the file byte for byte; into Postgres by `polaris copy`'s engine, nothing re-embedded)."""
    if project.backend == "sqlite":
        copy_index(built_handbook, project.root)
    else:
        from llama_index_polaris.engine.ingest.copy import copy_index as polaris_copy

        polaris_copy(built_handbook, project.db)


def config(project: Project):
    return load_config(project.root, use_user_config=False)


def documents(project: Project) -> list[Document]:
    return SimpleDirectoryReader(str(project.root / "handbook"), recursive=True, required_exts=[".md"]).load_data()


def build(idiom: str, project: Project, embed: PolarisEmbedding, settings_embed_model) -> PolarisVectorStore:
    """polaris.db built the way ``idiom`` builds an index; the store is given no embed_model."""
    cfg = config(project)
    store = PolarisVectorStore(project.db, config=cfg)
    parser = PolarisNodeParser(root_dir=str(project.root / "handbook"), config=cfg, embed_model=embed)
    context = StorageContext.from_defaults(vector_store=store)
    if idiom == "settings_embed_model":
        settings_embed_model(embed)
        VectorStoreIndex.from_documents(documents(project), storage_context=context, transformations=[parser])
        settings_embed_model(None)
    elif idiom == "from_documents_embed_model":  # how LlamaIndex's own docs build an index
        VectorStoreIndex.from_documents(documents(project), storage_context=context, embed_model=embed,
                                        transformations=[parser])
    elif idiom == "ingestion_pipeline":
        IngestionPipeline(transformations=[parser, embed], vector_store=store).run(documents=documents(project))
    else:  # nodes the caller embedded
        nodes = parser.get_nodes_from_documents(documents(project))
        for node in nodes:
            node.embedding = embed.get_text_embedding(node.get_content(metadata_mode=MetadataMode.EMBED))
        store.add(nodes)
    return store


def cli(project: Project, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(project.root / "xdg")}
    return subprocess.run([POLARIS, *args, "--db", project.db], cwd=project.root, capture_output=True, text=True,
                          env=env, timeout=300)


def hits_of(rows) -> list[tuple[str, str, str]]:
    return [(r["node_id"], r["document"], r["heading_path"]) for r in rows]


def nodes_of(scored) -> list[tuple[str, str, str]]:
    return [(n.node.node_id, n.node.metadata["file_path"], n.node.metadata["heading_path"]) for n in scored]


async def answers(door: str, project: Project, store: PolarisVectorStore, embed: PolarisEmbedding) -> dict:
    """Each question's top K as ``door`` answers it: (node id, document, heading path) and scores."""
    out = {}
    for question in QUESTIONS:
        if door == "retriever":
            scored = PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=K).retrieve(question)
            out[question] = (nodes_of(scored), [n.node.metadata["relative_score"] for n in scored])
        elif door == "as_retriever":
            index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
            scored = index.as_retriever(similarity_top_k=K).retrieve(question)
            engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=K)
            assert nodes_of(engine.query(question).source_nodes) == nodes_of(scored)
            out[question] = (nodes_of(scored), [n.node.metadata["relative_score"] for n in scored])
        elif door == "cli":
            proc = cli(project, "search", question, "-k", str(K), "--json")
            assert proc.returncode == 0, proc.stderr
            rows = json.loads(proc.stdout)
            out[question] = (hits_of(rows), [r["score"] for r in rows])
        else:
            ds = Datasette([project.db])
            page = await ds.client.get("/polaris/-/polaris.json", params={"q": question, "k": str(K)})
            assert page.status_code == 200, page.text
            rows = page.json()["hits"]
            out[question] = (hits_of(rows), [r["score"] for r in rows])
    return out


@pytest.mark.parametrize("idiom", IDIOMS)
async def test_every_idiom_is_answered_alike_by_every_door(idiom, project, embed, settings_embed_model) -> None:
    """Built in each LlamaIndex idiom, the file is opened by every door, each in turn first
    (the first Polaris model to open a file that names none proves and records it): the
    same hits everywhere, no refusal, and the file ends up naming the model."""
    store = build(idiom, project, embed, settings_embed_model)
    doors = project.doors  # on Postgres the idiom that opened with Datasette opens with the retriever
    first = IDIOMS.index(idiom) % len(doors)
    order = doors[first:] + doors[:first]
    seen = {door: await answers(door, project, store, embed) for door in order}
    expected = seen[order[0]]
    for door, got in seen.items():
        for question in QUESTIONS:
            assert got[question][0] == expected[question][0], (door, question)
            assert got[question][1] == pytest.approx(expected[question][1], abs=1e-4), (door, question)
    for question in QUESTIONS:  # sections, the top one scored 1.0
        hits, scores = expected[question]
        assert len(hits) == K and len({h[1:] for h in hits}) == K and scores[0] == pytest.approx(1.0)
    assert expected["rrf_k"][0][0][1] == "search/configuration.md"  # the identifier's own section
    recorded = store.client.model
    assert (recorded.model_id, recorded.dim, recorded.fingerprint) == (MODEL, 384, embed.embedder.fingerprint)
    store.close()


def test_the_default_door_answers_what_polaris_search_answers(project, built_handbook, embed) -> None:
    """as_retriever() and as_query_engine() with no mode: the engine's hybrid sections with
    their explanations, at their own similarity_top_k; default_mode="vector" keeps
    LlamaIndex's plain vector search over chunks; the explicit modes keep their meaning."""
    cfg = config(project)
    index_handbook(project, built_handbook)
    questions = ["how do we handle expired sessions", "rrf_k", "what happens when a deploy goes wrong",
                 "how long do we keep backups", "what should I do in my first week"]
    store = PolarisVectorStore(project.db, config=cfg)
    hybrid_index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
    engine = PolarisIndex(project.db, config=cfg, readonly=True)  # what `polaris search` runs
    for question in questions:
        for k in (2, 5):  # as_retriever's own default (2), and another
            expected = engine.search(question, top_k=k)
            kw = {} if k == 2 else {"similarity_top_k": k}
            got = hybrid_index.as_retriever(**kw).retrieve(question)
            assert [n.node.node_id for n in got] == [h.node_id for h in expected], question
            assert [n.score for n in got] == pytest.approx([h.strength for h in expected])  # node.score: strength
            assert [n.node.metadata["relative_score"] for n in got] == pytest.approx([h.score for h in expected])
            explained = [n.node.metadata["polaris_explain"] for n in got]
            assert explained == [json.loads(json.dumps(h.to_dict()["explain"])) for h in expected]
            assert "polaris_explain" not in got[0].node.get_content(metadata_mode=MetadataMode.LLM)
            answered = hybrid_index.as_query_engine(llm=MockLLM(), **kw).query(question).source_nodes
            assert [n.node.node_id for n in answered] == [h.node_id for h in expected]
    diverse = engine.search(questions[0], top_k=K, mmr_lambda=0.2)  # mmr_threshold applies to the default too
    got = hybrid_index.as_retriever(similarity_top_k=K, vector_store_kwargs={"mmr_threshold": 0.2}).retrieve(questions[0])
    assert [n.node.node_id for n in got] == [h.node_id for h in diverse]
    text = hybrid_index.as_retriever(vector_store_query_mode="text_search", similarity_top_k=K).retrieve("rrf_k")
    assert [n.node.node_id for n in text] == [h.node_id for h in engine.search("rrf_k", top_k=K, mode="bm25",
                                                                               unit="chunk")]

    plain = PolarisVectorStore(project.db, config=cfg, default_mode="vector")
    vector_index = VectorStoreIndex.from_vector_store(plain, embed_model=embed)
    differs = 0
    for question in questions:
        vector = engine.search(question, top_k=K, mode="vector", unit="chunk")
        plain_hits = vector_index.as_retriever(similarity_top_k=K).retrieve(question)
        assert [n.node.node_id for n in plain_hits] == [h.node_id for h in vector]
        assert [n.score for n in plain_hits] == pytest.approx([h.strength for h in vector])
        differs += [n.node.node_id for n in plain_hits] != [h.node_id for h in engine.search(question, top_k=K)]
    assert differs >= 3  # what as_retriever() answered before: most questions got another top 3
    with pytest.raises(InputError, match="default_mode is 'vector'"):
        vector_index.as_retriever(vector_store_kwargs={"mmr_threshold": 0.2}).retrieve(questions[0])
    with pytest.raises(InputError, match="default_mode must be 'hybrid' or 'vector'"):
        PolarisVectorStore(project.db, config=cfg, default_mode="bm25")
    for opened in (engine, store, plain):
        opened.close()


@pytest.mark.parametrize("vouching", ["no embed_model", "store embed_model", "Settings.embed_model"])
def test_another_models_vectors_are_refused_at_add_whoever_vouches(vouching, project, built_handbook, embed,
                                                                   settings_embed_model):
    """MockEmbedding's 384-dim vectors into a file recorded as all-minilm-l6-v2 are refused,
    whatever the store was told: its embed_model names a model, it made none of these vectors."""
    cfg = config(project)
    index_handbook(project, built_handbook)
    store = PolarisVectorStore(project.db, config=cfg,
                               embed_model=embed if vouching == "store embed_model" else None)
    if vouching == "Settings.embed_model":
        settings_embed_model(embed)
    mock = MockEmbedding(embed_dim=384)
    doc = Document(text="# Sessions\n\nSessions expire after an hour.\n", id_="mock-doc",
                   metadata={"file_path": "mock.md"})
    with pytest.raises(ModelMismatchError, match="do not come from all-minilm-l6-v2") as info:
        VectorStoreIndex.from_documents([doc], storage_context=StorageContext.from_defaults(vector_store=store),
                                        embed_model=mock)
    assert re.search(r"\(cosine -?0\.[0-4]\d\d against", str(info.value)), str(info.value)
    with pytest.raises(ModelMismatchError, match="do not come from all-minilm-l6-v2"):
        IngestionPipeline(transformations=[PolarisNodeParser(config=cfg, embed_model=embed), mock],
                          vector_store=store).run(documents=[doc])
    assert len(store.client.documents()) == 11 and store.client.model.model_id == MODEL  # nothing was written
    store.close()


def unknown_file(project: Project, embed_model) -> PolarisVectorStore:
    """The handbook embedded by ``embed_model`` through from_documents(embed_model=...): a file naming no model."""
    cfg = config(project)
    store = PolarisVectorStore(project.db, config=cfg)
    VectorStoreIndex.from_documents(
        documents(project), storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed_model,
        transformations=[PolarisNodeParser(root_dir=str(project.root / "handbook"), config=cfg,
                                           count_tokens=lambda t: len(t) // 4)],
    )
    assert store.client.model.model_id == "unknown"
    return store


async def test_a_model_that_did_not_make_the_vectors_is_refused_with_what_was_compared(project, embed) -> None:
    """MockEmbedding's vectors, recorded as unknown: all-minilm-l6-v2 re-embeds a few chunks,
    they do not match, and every door refuses it, saying what was compared and what to do."""
    store = unknown_file(project, MockEmbedding(embed_dim=384))
    with pytest.raises(ModelMismatchError) as info:
        PolarisRetriever(vector_store=store, embed_model=embed)
    message = str(info.value)
    assert "does not name" in message and "all-minilm-l6-v2 did not make them" in message
    assert re.search(r"4 of its chunks \(.*\) again and got cosine (-?0\.[0-4]\d\d, ){3}-?0\.[0-4]\d\d against", message)
    assert "0.999 needed" in message
    assert "unknown" not in message
    proc = cli(project, "search", "rrf_k", "--json")
    assert proc.returncode != 0 and "did not make them" in proc.stderr
    if project.backend == "sqlite":  # Datasette reads SQLite files only (docs/datasette.md)
        ds = Datasette([project.db])
        page = await ds.client.get("/polaris/-/polaris.json", params={"q": "rrf_k"})
        assert "did not make them" in page.text
    assert store.client.model.model_id == "unknown"  # nothing recorded
    store.close()


def test_a_model_of_another_size_is_refused_before_any_model_file_is_read(project, embed) -> None:
    store = unknown_file(project, MockEmbedding(embed_dim=16))
    with pytest.raises(ModelMismatchError, match="16-dim vectors from a model it does not name") as info:
        PolarisRetriever(vector_store=store, embed_model=embed)
    assert "unknown" not in str(info.value) and "embed_model" in str(info.value)
    store.close()
