"""The learned fusion (search/learned.py) inside rank(): features from the explanation, contributions
that add up to the score, ``{"fixed": 1}`` = today's ranking, weights checked in config."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import ConfigError
from llama_index_polaris.engine.search import learned
from llama_index_polaris.engine.search.rank import Candidate, RankParams, rank


def pool(seed: int, n: int = 90, sections: int = 30):
    """Random vector and BM25 lists over ``n`` chunks in ``sections`` sections of varied depth."""
    rng = np.random.default_rng(seed)
    cands = {i: Candidate(i % sections, " > ".join(["Guide", "Part", "Tokens", "Expiry"][: 1 + i % sections % 4]))
             for i in range(n)}
    vec = list(zip(rng.permutation(n)[:60].tolist(), np.sort(rng.uniform(0.2, 0.9, 60)).tolist()))
    bm = list(zip(rng.permutation(n)[:60].tolist(), np.sort(rng.uniform(1, 30, 60))[::-1].tolist()))
    return vec, bm, cands


BASE = RankParams(k=15, rrf_k=20, heading_boost=0.2, boost_terms=("token", "expiri"), score_fusion=0.5)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_the_identity_weights_rank_as_the_fixed_fusion(seed: int) -> None:
    vec, bm, cands = pool(seed)
    fixed = rank(vec, bm, cands, BASE)
    same = rank(vec, bm, cands, replace(BASE, fusion_weights=learned.IDENTITY))
    assert [(h.chunk_id, round(h.score, 12)) for h in same] == [(h.chunk_id, round(h.score, 12)) for h in fixed]
    assert all(h.explain.features is not None for h in same) and all(h.explain.features is None for h in fixed)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), weights=st.dictionaries(st.sampled_from(learned.NAMES),
                                                            st.floats(-3, 3).filter(lambda v: abs(v) > 0.01), min_size=1))
def test_contributions_add_up_to_the_score_and_order_the_hits(seed: int, weights: dict) -> None:
    vec, bm, cands = pool(seed)
    hits = rank(vec, bm, cands, replace(BASE, fusion_weights=weights))
    if hits[0].explain.learned == 0:  # nothing the weights count is there: the fixed fusion ranks
        assert [h.chunk_id for h in hits] == [h.chunk_id for h in rank(vec, bm, cands, BASE)]
        return
    assert hits[0].score == pytest.approx(1.0)
    for h in hits:
        e = h.explain
        assert all(0.0 <= v <= 1.0 for v in e.features.values())
        assert sum(e.contributions.values()) == pytest.approx(h.score, abs=1e-12)
        for name, c in e.contributions.items():  # w x, or |w| (1 - x) for a negative weight, over the top's total
            w, x = weights.get(name, 0.0), e.features[name]
            assert c * hits[0].explain.learned == pytest.approx(w * x if w >= 0 else -w * (1 - x), abs=1e-12)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_a_weight_on_one_feature_ranks_by_it() -> None:
    vec, bm, cands = pool(3)
    by_bm25 = rank(vec, bm, cands, replace(BASE, fusion_weights={"bm25_rr": 1.0}))
    assert [h.explain.bm25_rank for h in by_bm25[:3]] == [1, 2, 3]
    shallow = rank(vec, bm, cands, replace(BASE, fusion_weights={"depth": 1.0, "fixed": 0.01}))
    depths = [h.explain.features["depth"] for h in shallow]
    assert depths == sorted(depths, reverse=True)  # a page's title section (depth 1) first


def test_the_features_read_the_explanation() -> None:
    cands = {1: Candidate("a", "Guide > Tokens"), 2: Candidate("a", "Guide > Tokens"), 3: Candidate("b", "Guide")}
    hits = rank([(1, 0.2), (3, 0.4)], [(2, 9.0), (3, 3.0)], cands,
                replace(BASE, k=2, fusion_weights=learned.EVERY, lookup=True))
    a = next(h for h in hits if h.explain.vector_rank == 1).explain.features
    assert (a["vector_rr"], a["bm25_rr"], a["both"], a["same_chunk"]) == (1.0, 1.0, 1.0, 0.0)  # best chunks 1 and 2
    assert (a["chunks"], a["depth"], a["heading"], a["vector_sim"]) == (0.5, 0.5, 0.5, pytest.approx(0.8))
    assert (a["lookup_bm25"], a["words_heading"], a["bm25_ratio"]) == (1.0, 0.0, 1.0)
    b = next(h for h in hits if h.explain.vector_rank == 2).explain.features
    assert b["bm25_ratio"] == pytest.approx(3.0 / 9.0) and b["same_chunk"] == 1.0 and b["depth"] == 1.0


def test_only_the_features_the_weights_name_are_computed_and_shown() -> None:
    vec, bm, cands = pool(4)
    hits = rank(vec, bm, cands, replace(BASE, fusion_weights={"bm25_rr": 1.0, "depth": 0.0}))
    assert all(set(h.explain.features) == set(h.explain.contributions) == {"bm25_rr", "depth"} for h in hits)
    every = rank(vec, bm, cands, replace(BASE, fusion_weights={**learned.EVERY, "fixed": 0.0, "bm25_rr": 1.0}))
    assert [h.chunk_id for h in every] == [h.chunk_id for h in hits]  # zero weights change nothing
    assert all(set(h.explain.features) == set(learned.NAMES) for h in every)


@pytest.mark.parametrize("weights, message", [
    ({"nope": 1.0}, "unknown features 'nope'"),
    ({"fixed": "1"}, "weight of 'fixed' must be a finite number"),
    ({"fixed": 0.0}, "no weight other than 0"),
    ({"fixed": float("inf")}, "finite"),
])
def test_config_refuses_weights_it_cannot_use(tmp_path, weights, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path, use_user_config=False, fusion_weights=weights)


def test_the_weights_come_from_polaris_toml(tmp_path) -> None:
    (tmp_path / "polaris.toml").write_text('top_k = 5\n\n[fusion_weights]\nfixed = 1.0\nbm25_rr = -0.25\n')
    cfg = load_config(tmp_path, use_user_config=False)
    assert cfg.fusion_weights == {"fixed": 1.0, "bm25_rr": -0.25} and cfg.top_k == 5
    assert load_config(tmp_path / "none", use_user_config=False).fusion_weights is None


def test_the_datasette_page_shows_the_learned_score_and_its_weights() -> None:
    from datasette_polaris import legend

    settings = {"rrf_k": 20, "heading_boost": 0.2, "mmr_lambda": 1.0, "score_fusion": 0.5,
                "score_fusion_vector": 0.4, "score_fusion_depth": 50, "fusion_weights": None}
    assert "learned" not in [c.key for c in legend.columns("hybrid", settings)]
    tuned = {**settings, "fusion_weights": {"fixed": 4.6, "bm25_rr": 0.38}}
    cols = {c.key: c for c in legend.columns("hybrid", tuned)}
    keys = list(cols)
    assert keys.index("learned") == keys.index("relevance") - 1
    assert "4.6 × fixed + 0.38 × bm25_rr" in cols["learned"].meaning
    assert "learned ÷ best learned" in legend.formula("hybrid", tuned)


@pytest.mark.parametrize("heading_path, entry", [
    ("Changelog > Cargo 1.59 (2022-02-24) > Added", True),
    ("Release Notes > 0.6.0 (2022-07-12) > Features", True),
    ("Release Notes > Version 1.6.0 (2024-04-20)", True),
    ("Release Notes > Latest Changes > Docs", True),  # the page's title says so
    ("Project > v2.1", True),
    ("Changes > [1.2.0] - 2023-01-01", True),
    ("Operations > 2024-01-05 maintenance", True),
    ("Release Notes", False),  # the page itself, not an entry
    ("Profiles > Profile settings > opt-level", False),
    ("Config > Python 3.12 support", False),  # a version inside words is not a release
    ("Install > Version 2.0 and later", False),
    ("Migration guide > Changes to pydantic.BaseModel", False),
    ("", False),
])
def test_a_changelog_entry_is_read_from_its_heading_path(heading_path: str, entry: bool) -> None:
    assert learned.is_changelog(heading_path) is entry


def test_the_structural_features_read_the_pool() -> None:
    """Page and parent/child features come from the sections in the pool, by document."""
    cands = {1: Candidate(("a.md", "A > Setup"), "A > Setup"),
             2: Candidate(("a.md", "A > Setup > Tokens"), "A > Setup > Tokens"),
             3: Candidate(("b.md", "B > Setup"), "B > Setup"),
             4: Candidate(("c.md", "Changelog > 1.2.0 (2024-01-02)"), "Changelog > 1.2.0 (2024-01-02)")}
    params = replace(BASE, k=4, boost_terms=("token", "setup"), fusion_weights=learned.EVERY)
    hits = rank([(2, 0.1), (1, 0.2), (3, 0.3), (4, 0.4)], [(2, 9.0), (3, 5.0), (1, 4.0), (4, 3.0)], cands, params)
    f = {h.chunk_id: h.explain.features for h in hits}
    assert (f[2]["parent_in_pool"], f[2]["child_in_pool"], f[1]["parent_in_pool"], f[1]["child_in_pool"]) == (1, 0, 0, 1)
    assert f[3]["parent_in_pool"] == f[3]["child_in_pool"] == 0.0  # B > Setup's parent is another page's
    assert (f[2]["page_share"], f[3]["page_share"], f[4]["changelog"], f[1]["changelog"]) == (1.0, 1.0, 1.0, 0.0)
    assert f[1]["page_best"] == f[2]["page_best"] == f[2]["fixed"] == 1.0 and 0 < f[1]["page_share"] < 1
    assert f[1]["page_share"] == pytest.approx(f[1]["fixed"]) and f[3]["page_best"] == f[3]["fixed"] < 1
    assert (f[2]["own_heading"], f[1]["own_heading"], f[4]["own_heading"]) == (0.5, 0.5, 0.0)  # "Tokens", "Setup"
    demoted = rank([(4, 0.1), (2, 0.2)], [(4, 9.0), (2, 5.0)], cands,
                   replace(params, fusion_weights={"fixed": 1.0, "changelog": -2.0}))
    assert [h.chunk_id for h in demoted] == [2, 4]  # the changelog entry's lead is undone


def test_the_structural_features_keep_documents_apart_in_chunk_mode() -> None:
    cands = {1: Candidate(("a.md", "A > Setup"), "A > Setup"), 2: Candidate(("b.md", "A > Setup > Tokens"), "A > Setup > Tokens")}
    hits = rank([(1, 0.1), (2, 0.2)], [(1, 3.0), (2, 2.0)], cands,
                replace(BASE, k=2, unit="chunk", fusion_weights=learned.EVERY))
    assert all(h.explain.features["parent_in_pool"] == 0.0 and h.explain.features["page_share"] == 1.0 for h in hits)


def test_docs_list_every_feature_as_the_engine_describes_it() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text("utf-8")
    assert all(f"| {name} | {meaning} |" in doc for name, meaning in learned.FEATURES.items())
