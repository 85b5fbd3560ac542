"""Fusion by kind of question (#37): the weights of the two lists and the heading boost follow
what the question is, decided in ``rank()`` so that every door, on both backends, ranks a
question the same way and explains the weights it got."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polaris_testing import DocsProject, docs_project

from llama_index_polaris.engine.search import question
from llama_index_polaris.engine.search.question import Question, Rule, agreement, plan, read
from llama_index_polaris.engine.search.rank import Candidate, RankParams, rank

MODEL = "all-minilm-l6-v2"
IDENTIFIER = "no_args_is_help"
SENTENCE = "why does my program keep running in the background after the script has ended"
CHINESE = "后台任务为什么还在运行"  # the bundled model knows none of these characters


def test_the_kind_is_read_from_the_text() -> None:
    assert read(IDENTIFIER).kind == "identifier"
    assert read("--locked CARGO_HOME").kind == "identifier"
    assert read("How do I pass --locked in CI?").kind == "howto"
    assert read(SENTENCE) == Question("words", 6)
    assert read("").kind == "words" and read("").words == 0


def test_an_identifier_and_a_sentence_get_different_weights() -> None:
    ident, words = plan(read(IDENTIFIER), 0.2), plan(read(SENTENCE), 0.2)
    assert ident.vector < words.vector  # the identifier leans on BM25, the sentence on meaning
    assert ident.weights()["bm25"] > words.weights()["bm25"]
    assert "identifiers only" in ident.why and "in words" in words.why
    assert json.loads(json.dumps(words.as_dict()))["kind"] == "words"


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(question.KINDS), words=st.integers(0, 40), agree=st.floats(0, 1),
       more=st.integers(0, 10), less_agree=st.floats(0, 1))
def test_the_plan_is_monotone_and_bounded(kind: str, words: int, agree: float, more: int, less_agree: float) -> None:
    """More content words never lower the vector weight, nor does less agreement of the heads;
    every weight stays inside (0, 1)."""
    a = plan(Question(kind, words), agree)
    b = plan(Question(kind, words + more), agree * less_agree)
    assert 0.0 < a.vector < 1.0 and 0.0 <= a.score_vector <= 1.0 and a.heading_boost >= 0
    assert b.vector >= a.vector - 1e-12


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(question.KINDS), words=st.integers(0, 40), agree=st.floats(0, 1),
       known=st.floats(0, 1), less=st.floats(0, 1))
def test_a_query_the_model_cannot_read_leans_on_bm25(kind: str, words: int, agree: float, known: float,
                                                    less: float) -> None:
    """The less of a query's tokens the model knows, the less its vector list weighs; a query it
    reads whole keeps the weights it had, one it reads nothing of ranks every keyword hit first."""
    whole, part, less_known = (plan(Question(kind, words, k), agree) for k in (1.0, known, known * less))
    off = plan(Question(kind, words, known), agree, replace(question.RULE, known_floor=None))
    assert (whole.vector, whole.score_vector, whole.why) == (off.vector, off.score_vector, off.why)
    assert less_known.vector <= part.vector + 1e-12 <= whole.vector + 2e-12
    assert less_known.score_vector <= part.score_vector + 1e-12
    none = plan(Question(kind, words, 0.0), agree)
    assert none.vector == question.RULE.known_min and none.score_vector == 0.0 and "knows 0%" in none.why
    assert 0.0 <= part.vector < 1.0 and part.as_dict()["model_knows"] == round(known, 3)


def test_the_bundled_model_knows_english_and_not_chinese() -> None:
    from llama_index_polaris.engine.embed import load_embedder

    model = load_embedder(MODEL)
    assert model.known_share(SENTENCE) == 1.0 and model.known_share(IDENTIFIER) == 1.0
    assert model.known_share(CHINESE) < question.RULE.known_floor  # one of its eleven characters
    assert 0.0 < model.known_share("useEffect 的依赖数组") < 1.0  # the identifier is read, the Chinese is not
    assert model.known_share("") == 1.0


def test_agreement_counts_the_shared_head() -> None:
    assert agreement(list("abcdefg"), list("abcdexy")) == 1.0
    assert agreement(list("abcde"), list("vwxyz")) == 0.0
    assert agreement(list("abcde"), list("axcyz")) == pytest.approx(0.4)
    assert agreement([], list("abc")) == 0.0


def _lists(seed: int, n: int):
    rng = np.random.default_rng(seed)
    cands = {i: Candidate(("a.md", f"Page > Part {i}"), f"Page > Part {i}") for i in range(n)}
    vec = list(zip(rng.permutation(n).tolist(), np.sort(rng.uniform(0.2, 0.9, n)).tolist()))
    bm = list(zip(rng.permutation(n).tolist(), np.sort(rng.uniform(1, 30, n))[::-1].tolist()))
    return cands, vec, bm


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), query=st.sampled_from([IDENTIFIER, SENTENCE, "part 3"]))
def test_a_neutral_rule_ranks_as_the_fixed_fusion(seed: int, n: int, query: str) -> None:
    """Equal list weights, score fusion 0.4 and boost 0.2 for every kind is today's fixed fusion."""
    cands, vec, bm = _lists(seed, n)
    base = RankParams(k=10, rrf_k=20, heading_boost=0.2, boost_terms=("part",), score_fusion=0.5, query=query)
    fixed = rank(vec, bm, cands, base)
    neutral = rank(vec, bm, cands, replace(base, fusion_rule=Rule()))
    assert [h.chunk_id for h in neutral] == [h.chunk_id for h in fixed]
    assert [h.score for h in neutral] == pytest.approx([h.score for h in fixed])
    assert fixed[0].explain.fusion is None and neutral[0].explain.fusion["vector_weight"] == 0.5


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40))
def test_the_fitted_rule_shows_its_weights_on_every_hit_and_alpha_wins(seed: int, n: int) -> None:
    cands, vec, bm = _lists(seed, n)
    base = RankParams(k=10, rrf_k=20, heading_boost=0.2, score_fusion=0.5, fusion_rule=question.RULE)
    ident = rank(vec, bm, cands, replace(base, query=IDENTIFIER))
    words = rank(vec, bm, cands, replace(base, query=SENTENCE))
    assert {json.dumps(h.explain.fusion, sort_keys=True) for h in ident} == {json.dumps(ident[0].explain.fusion, sort_keys=True)}
    assert ident[0].explain.fusion["kind"] == "identifier" and words[0].explain.fusion["kind"] == "words"
    assert ident[0].explain.fusion["vector_weight"] < words[0].explain.fusion["vector_weight"]
    given_alpha = rank(vec, bm, cands, replace(base, query=SENTENCE, weights={"vector": 0.5, "bm25": 0.5}))
    assert given_alpha[0].explain.fusion is None  # LlamaIndex's alpha: the caller's weights, no plan


OPTIONS = """# Options

## no_args_is_help

Set no_args_is_help=True on the app and running it without any command prints the help text.

## Background tasks

A program started in the background keeps running after the script that started it has ended,
until it finishes or is stopped. Stop it with a signal, or wait for it before the script exits.
"""
GUIDE = """# Guide

## Getting started

Install the package, write a script with a command and run it from the terminal.

## Help text

Every command prints its help when it is called with --help.

## 后台任务

后台任务在脚本结束后仍然运行，直到完成或被停止。可以发送信号停止后台任务。
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, module_targets) -> DocsProject:
    return docs_project(tmp_path_factory, module_targets, {"options.md": OPTIONS, "guide.md": GUIDE}, "kinds", MODEL)


def _seen(hits: list[dict]) -> list[tuple[str, str, str]]:
    return [(h["document"], h["heading_path"], json.dumps(h["explain"]["fusion"], sort_keys=True)) for h in hits]


async def test_every_door_gives_the_same_hits_and_the_same_weights(project: DocsProject) -> None:
    from dataclasses import asdict

    from datasette.app import Datasette
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode as Mode

    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex
    from mcp_testing import McpSession, stdio

    cfg = load_config(project.root, use_user_config=False)
    plans = {}
    for query in (IDENTIFIER, SENTENCE, CHINESE):
        with PolarisIndex(project.db, config=cfg, readonly=True) as index:
            engine = _seen([h.to_dict() for h in index.search(query, top_k=3)])
        plans[query] = json.loads(engine[0][2])
        assert len({f for _, _, f in engine}) == 1  # one plan per question, on every hit

        exe = str(Path(sys.executable).with_name("polaris"))
        env = {**os.environ, "XDG_CONFIG_HOME": str(project.root / "xdg")}
        cli = subprocess.run([exe, "search", query, "-k", "3", "--json", "--explain", "--db", project.db],
                             cwd=project.root, capture_output=True, text=True, env=env, timeout=120)
        assert cli.returncode == 0, cli.stderr
        assert _seen(json.loads(cli.stdout)) == engine
        text = subprocess.run([exe, "search", query, "-k", "3", "--explain", "--db", project.db],
                              cwd=project.root, capture_output=True, text=True, env=env, timeout=120)
        assert text.stdout.startswith(f"fusion: vector {plans[query]['vector_weight']:.2f}")
        assert plans[query]["why"] in text.stdout

        store = PolarisVectorStore(project.db, config=cfg)
        embed = PolarisEmbedding(model_id=MODEL, config=cfg)
        got = PolarisRetriever(vector_store=store, similarity_top_k=3).retrieve(query)
        assert [(n.node.metadata["file_path"], n.node.metadata["heading_path"],
                 json.dumps(n.explain.fusion, sort_keys=True)) for n in got] == engine
        direct = store.query(VectorStoreQuery(query_str=query, query_embedding=embed.get_query_embedding(query),
                                              similarity_top_k=3, mode=Mode.HYBRID))
        assert [(n.metadata["file_path"], n.metadata["heading_path"],
                 json.dumps(n.metadata["polaris_explain"]["fusion"], sort_keys=True)) for n in direct.nodes] == engine
        store.close()

        session = McpSession(stdio(project.root, "--db", project.db))
        try:
            result = session.call("search", {"query": query, "k": 3, "explain": True})
            assert not result.is_error, result.content
            assert _seen(result.structured_content["hits"]) == engine
        finally:
            session.close()

        if project.sqlite:  # the Datasette explorer reads SQLite files only (docs/datasette.md)
            ds = Datasette([project.db])
            page = (await ds.client.get("/polaris/-/polaris.json", params={"q": query, "k": "3"})).json()
            assert _seen(page["hits"]) == engine
            sql = await ds.client.get("/polaris.json", params={"sql": f"select polaris_search('{query}', 3) as v",
                                                               "_shape": "array"})
            assert _seen(json.loads(sql.json()[0]["v"])) == engine
    assert plans[IDENTIFIER]["kind"] == "identifier" and plans[SENTENCE]["kind"] == "words"
    assert plans[IDENTIFIER]["vector_weight"] < plans[SENTENCE]["vector_weight"]
    assert plans[CHINESE]["model_knows"] < question.RULE.known_floor and plans[CHINESE]["vector_weight"] == question.RULE.known_min
    assert plans[SENTENCE]["model_knows"] == 1.0


def test_without_the_rule_every_question_gets_the_fixed_weights(project: DocsProject) -> None:
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    cfg = load_config(project.root, use_user_config=False)
    assert cfg.fusion_by_question is True
    with PolarisIndex(project.db, config=cfg.replace(fusion_by_question=False), readonly=True) as index:
        assert all(h.explain.fusion is None for q in (IDENTIFIER, SENTENCE) for h in index.search(q, top_k=3))
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        assert index.search(SENTENCE, top_k=3, alpha=0.5)[0].explain.fusion is None  # the caller's alpha wins
