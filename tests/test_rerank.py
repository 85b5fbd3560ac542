"""The optional cross-encoder stage (#27, part 3): its plumbing, with a tiny ONNX graph.

The graph scores a (query, passage) pair by how often one token (``TARGET``) appears in it,
so which section must come first is known: re-ranking moves the section that says it most to
the top of the first pool's hits. No quality is claimed: these machines cannot download a real
cross-encoder. Every door answers the same with ``rerank_model`` set, at every k, on both backends
(the MCP server's included; the Datasette explorer reads files only).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import ConfigError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search.rank import Explanation, Ranked
from llama_index_polaris.engine.search.rerank import logistic, reorder
from mcp_testing import McpSession, stdio, text_of
from polaris_testing import BACKENDS, REPO, module_target, project_toml

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
TARGET_WORD = "rotation"
QUERY = "how do we handle expired sessions"


def tokenizer_file() -> Path:
    from llama_index_polaris.engine.embed.cache import locate
    from llama_index_polaris.engine.embed.registry import get_model_spec

    found = locate(get_model_spec(MODEL))
    assert found is not None, "the bundled model is part of the test extra"
    return found.tokenizer


def tiny_cross_encoder(folder: Path) -> int:
    """model.onnx: logit = how many times the target token is in the pair; returns that token id."""
    import onnx
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer_file(), folder / "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    target = tokenizer.encode(TARGET_WORD, add_special_tokens=False).ids
    assert len(target) == 1
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
              for n in ("input_ids", "attention_mask", "token_type_ids")]
    nodes = [
        helper.make_node("Constant", [], ["target"], value=helper.make_tensor("t", TensorProto.INT64, [], target)),
        helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("a", TensorProto.INT64, [1], [1])),
        helper.make_node("Equal", ["input_ids", "target"], ["hit"]),
        helper.make_node("Cast", ["hit"], ["hitf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["hitf", "maskf"], ["counted"]),
        helper.make_node("ReduceSum", ["counted", "axes"], ["logits"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "count_target", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    return target[0]


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(root / ".xdg"), "PATH": str(Path(sys.executable).parent)})


@pytest.fixture(scope="module", params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The handbook indexed by the CLI into a polaris.db or a database (``db_path`` in polaris.toml),
    then the tiny cross-encoder named in polaris.toml, so every door opened in the folder uses it."""
    root = tmp_path_factory.mktemp("rerank")
    target = str(root / "polaris.db") if request.param == "sqlite" else module_target(request, tmp_path_factory)
    shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    tiny_cross_encoder(root / "reranker")
    (root / "polaris.toml").write_text(project_toml(target, MODEL))
    run = polaris(root, "index", "handbook")
    assert run.returncode == 0, run.stderr
    (root / "polaris.toml").write_text(project_toml(target, MODEL) + f'rerank_model = "{root / "reranker"}"\n')
    yield {"root": root, "target": target, "backend": request.param}


def cfg(root: Path, **kw: Any):
    return load_config(root, use_user_config=False, **kw)


def test_reorder_sorts_the_head_stably_and_caps_the_tail() -> None:
    ranked = [(i, Ranked(i, 1.0 - i / 10, Explanation(score=1.0 - i / 10))) for i in range(5)]
    got = reorder(ranked, np.array([0.0, 2.0, 0.0]))
    assert [k for k, _ in got] == [1, 0, 2, 3, 4]  # 0 and 2 tie: their fused order stays
    assert [r.score for _, r in got][:3] == [logistic(2.0), 0.5, 0.5]
    assert [r.explain.rerank for _, r in got] == [2.0, 0.0, 0.0, None, None]
    assert [r.score for _, r in got][3:] == [0.5, 0.5]  # capped at the last re-ranked score
    assert all(r.score == r.explain.score for _, r in got)
    assert logistic(-800.0) == pytest.approx(0.0) and logistic(800.0) == 1.0


def test_the_cross_encoder_puts_first_what_it_scores_highest(project: dict) -> None:
    root, target = project["root"], project["target"]
    with PolarisIndex(target, config=load_config(use_user_config=False, model_id=MODEL), readonly=True) as index:
        plain = index.search(QUERY, top_k=20)
    with PolarisIndex(target, config=cfg(root), readonly=True) as index:
        reranked = index.search(QUERY, top_k=20)
    counts = [h.text.lower().count(TARGET_WORD) + h.heading_path.rsplit(" > ", 1)[-1].lower().count(TARGET_WORD)
              for h in reranked]
    assert max(counts) > 0 and plain[0].node_id != reranked[0].node_id  # the stage changed the order
    assert counts == sorted(counts, reverse=True)  # in order of the graph's logit
    assert reranked[0].explain.rerank == counts[0] and reranked[0].score == pytest.approx(logistic(counts[0]))
    assert sorted(h.node_id for h in reranked) == sorted(h.node_id for h in plain)  # the same hits, reordered
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)


def test_every_door_answers_the_same_with_the_stage_on(project: dict) -> None:
    from llama_index.core import VectorStoreIndex

    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore

    root, target = project["root"], project["target"]
    with PolarisIndex(target, config=cfg(root), readonly=True) as index:
        found = index.search(QUERY, top_k=8)
        engine = [(h.node_id, round(h.score, 6)) for h in found]
        strengths = [(h.node_id, round(h.strength, 6)) for h in found]  # what a LlamaIndex node's score is
        heads = {k: [h.node_id for h in index.search(QUERY, top_k=k)] for k in (1, 3, 8, 25)}
    assert all(heads[k] == heads[25][:k] for k in heads)  # the head does not move with k
    run = polaris(root, "search", QUERY, "-k", "8", "--json", "--explain")
    assert run.returncode == 0, run.stderr
    cli = json.loads(run.stdout)
    hits = cli["hits"] if isinstance(cli, dict) else cli
    assert [(h["node_id"], round(h["score"], 6)) for h in hits] == engine
    assert hits[0]["explain"]["rerank"] is not None
    embed = PolarisEmbedding(model_id=MODEL)
    store = PolarisVectorStore(db_path=target, embed_model=embed, config=cfg(root))
    try:
        retriever = PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=8)
        as_retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=8)
        for door in (retriever, as_retriever):
            got = door.retrieve(QUERY)
            assert [(n.node_id, round(n.score, 6)) for n in got] == strengths
            assert [(n.node_id, round(n.node.metadata["relative_score"], 6)) for n in got] == engine
    finally:
        store.close()
    mcp = McpSession(stdio(root))
    try:
        answer = mcp.call("search", {"query": QUERY, "k": 8, "full": True, "explain": True})
    finally:
        mcp.close()
    assert not answer.is_error
    hits = answer.structured_content["hits"]
    assert [(h["node_id"], round(h["score"], 6)) for h in hits] == engine
    assert hits[0]["explain"]["rerank"] is not None and "rerank" in text_of(answer)


def test_a_reranker_that_cannot_be_found_is_named(project: dict, tmp_path: Path) -> None:
    root, target = project["root"], project["target"]
    with PolarisIndex(target, config=cfg(root, rerank_model="no-such-reranker"), readonly=True) as index:
        with pytest.raises(ConfigError, match="no-such-reranker.*ms-marco-minilm-l6-v2"):
            index.search(QUERY)
    (tmp_path / "empty").mkdir()
    with PolarisIndex(target, config=cfg(root, rerank_model=str(tmp_path / "empty")),
                      readonly=True) as index:
        with pytest.raises(Exception, match="model.onnx"):
            index.search(QUERY)
    with pytest.raises(ConfigError, match="rerank_top"):
        cfg(root, rerank_top=1)


async def test_the_datasette_doors_answer_the_same_with_the_stage_on(project: dict) -> None:
    from datasette.app import Datasette

    if project["backend"] != "sqlite":
        pytest.skip("the Datasette explorer reads SQLite files only (docs/datasette.md); the other doors"
                    " re-rank on Postgres in test_every_door_answers_the_same_with_the_stage_on")
    root = project["root"]
    with PolarisIndex(root / "polaris.db", config=cfg(root), readonly=True) as index:
        engine = [(h.node_id, round(h.score, 6)) for h in index.search(QUERY, top_k=5)]
    ds = Datasette([str(root / "polaris.db")])
    got = (await ds.client.get("/polaris/-/polaris.json", params={"q": QUERY, "k": "5"})).json()
    assert [(h["node_id"], round(h["score"], 6)) for h in got["hits"]] == engine
    assert got["hits"][0]["explain"]["rerank"] is not None
    row = (await ds.client.get("/polaris.json", params={"sql": "select polaris_search(:q, 5) as v", "q": QUERY,
                                                        "_shape": "array"})).json()
    assert [(h["node_id"], round(h["score"], 6)) for h in json.loads(row[0]["v"])] == engine
