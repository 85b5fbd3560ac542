"""RRF fusion and score normalisation: hand-computed figures."""

from __future__ import annotations

import pytest

from llama_index_polaris.engine.search.fuse import rrf
from llama_index_polaris.engine.search.normalise import relative_to_top


def test_rrf_scores_and_per_list_contributions_by_hand():
    fused = rrf({"vector": ["a", "b", "c"], "bm25": ["c", "a", "d"]}, k=60)
    by_id = {f.id: f for f in fused}
    assert [f.id for f in fused] == ["a", "c", "b", "d"]
    assert by_id["a"].score == pytest.approx(1 / 61 + 1 / 62)
    assert by_id["c"].score == pytest.approx(1 / 63 + 1 / 61)
    assert by_id["b"].score == pytest.approx(1 / 62)
    assert by_id["d"].score == pytest.approx(1 / 63)
    assert by_id["a"].ranks == {"vector": 1, "bm25": 2}
    assert by_id["a"].contributions == {"vector": pytest.approx(1 / 61), "bm25": pytest.approx(1 / 62)}
    assert by_id["d"].ranks == {"bm25": 3} and "vector" not in by_id["d"].contributions
    for f in fused:  # the explanation is the score: contributions add up exactly
        assert sum(f.contributions.values()) == pytest.approx(f.score)


def test_rrf_agreement_beats_a_single_first_place():
    fused = rrf({"vector": ["x", "both"], "bm25": ["y", "both"]}, k=60)
    assert fused[0].id == "both"  # 2/62 > 1/61


def test_rrf_k_zero_is_reciprocal_rank_and_k_flattens():
    sharp = {f.id: f.score for f in rrf({"v": ["a", "b"]}, k=0)}
    assert sharp == {"a": pytest.approx(1.0), "b": pytest.approx(0.5)}
    flat = {f.id: f.score for f in rrf({"v": ["a", "b"]}, k=60)}
    assert flat["a"] / flat["b"] == pytest.approx(62 / 61)


def test_rrf_duplicate_in_one_list_counts_once_at_best_rank():
    (a, b) = rrf({"v": ["a", "b", "a"]}, k=60)
    assert a.id == "a" and a.score == pytest.approx(1 / 61) and a.ranks == {"v": 1}


def test_rrf_ties_keep_first_seen_order_and_empty_input():
    assert [f.id for f in rrf({"v": ["a"], "b": ["z"]}, k=60)] == ["a", "z"]
    assert rrf({}, k=60) == [] and rrf({"v": []}) == []


def test_relative_to_top():
    assert relative_to_top([0.5, 0.25, 0.0]) == [1.0, 0.5, 0.0]
    assert relative_to_top([]) == []
    assert relative_to_top([0.0, 0.0]) == [1.0, 0.0]
