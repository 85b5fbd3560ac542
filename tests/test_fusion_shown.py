"""What the score formula and its legend say is what made the scores: the list weights and
boost this question's fusion used (its plan by kind of question, or LlamaIndex's alpha), in
the engine's ``Hits.settings``, the notebook's HTML, and the Datasette page and JSON alike."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from datasette.app import Datasette

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search import legend

QUESTIONS = ["rrf_k", "how do we rotate an api key", "on-call handover", "RATE_LIMIT_EXCEEDED 429"]


@pytest.fixture(scope="module")
def index(built_handbook: Path):
    cfg = load_config(built_handbook.parent, use_user_config=False, db_path=str(built_handbook),
                      model_id="all-minilm-l6-v2")
    with PolarisIndex(built_handbook, config=cfg, readonly=True) as ix:
        yield ix


def shares_agree(hits) -> None:
    """Each hit's RRF terms are the shown weight over (rrf_k + rank)."""
    s = hits.settings
    for h in hits:
        e = h.explain
        if e.vector_rank is not None:
            assert e.rrf_vector == pytest.approx(s["vector_weight"] / (s["rrf_k"] + e.vector_rank)), h
        if e.bm25_rank is not None:
            assert e.rrf_bm25 == pytest.approx(s["bm25_weight"] / (s["rrf_k"] + e.bm25_rank)), h


@pytest.mark.parametrize("query", QUESTIONS)
def test_the_formula_shows_the_weights_the_question_got(index: PolarisIndex, query: str) -> None:
    hits = index.search(query, top_k=5)
    fusion = hits[0].explain.fusion
    assert hits.settings["vector_weight"] == fusion["vector_weight"]
    assert hits.settings["score_fusion_vector"] == fusion["score_fusion_vector"]
    assert hits.settings["heading_boost"] == fusion["heading_boost"]
    shares_agree(hits)
    shown = legend.formula("hybrid", hits.settings)
    assert f"{legend._num(fusion['vector_weight'])}/({hits.settings['rrf_k']} + vector rank)" in shown
    assert f"{legend._num(fusion['score_fusion_vector'])} × similarity" in shown
    assert html.escape(shown) in hits._repr_html_()  # the notebook's table says the same


def test_an_alpha_is_the_weights_shown(index: PolarisIndex) -> None:
    hits = index.searcher().search("how do we rotate an api key", top_k=5, alpha=0.3)
    assert (hits.settings["vector_weight"], hits.settings["bm25_weight"]) == (0.3, pytest.approx(0.7))
    shares_agree(hits)
    assert "0.3/(" in legend.formula("hybrid", hits.settings)


async def test_the_datasette_page_and_json_show_the_weights_used(index: PolarisIndex, built_handbook: Path) -> None:
    ds = Datasette([str(built_handbook)], settings={"num_sql_threads": 1})
    name = built_handbook.stem
    for query in QUESTIONS:
        hits = index.search(query, top_k=5)
        data = (await ds.client.get(f"/{name}/-/polaris.json", params={"q": query, "k": "5"})).json()
        assert [h["node_id"] for h in data["hits"]] == [h.node_id for h in hits]
        for key in ("vector_weight", "bm25_weight", "score_fusion_vector", "heading_boost"):
            assert data["settings"][key] == hits.settings[key], (query, key)
        page = (await ds.client.get(f"/{name}/-/polaris", params={"q": query, "k": "5"})).text
        formula = re.search(r'<p class="polaris-formula"><code>(.*?)</code>', page, re.S).group(1)
        assert html.unescape(formula) == legend.formula("hybrid", hits.settings)
