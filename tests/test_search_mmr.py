"""MMR: standard max-similarity penalty, the lambda extremes, and invariants (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from llama_index_polaris.engine.search.mmr import mmr
from llama_index_polaris.engine.search.normalise import mmr_scores, relative_to_max as normalise_relevance


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_near_duplicate_is_passed_over_for_something_new():
    vecs = np.stack([unit(1, 0, 0), unit(1, 0.05, 0), unit(0, 1, 0)])
    picks = mmr(np.array([1.0, 0.95, 0.6]), vecs, k=3, lam=0.7)
    assert [p.index for p in picks] == [0, 2, 1]
    sim01 = float(vecs[0] @ vecs[1])
    assert picks[0].value == pytest.approx(0.7) and picks[0].penalty == 0.0
    assert picks[1].value == pytest.approx(0.7 * 0.6)
    assert picks[2].penalty == pytest.approx(0.3 * sim01)
    assert picks[2].value == pytest.approx(0.7 * 0.95 - 0.3 * sim01)


def test_penalty_is_max_similarity_to_any_chosen_not_only_the_last():
    # picks 0 then 2; candidate 1 is a near copy of 0 and unrelated to 2. Penalising only
    # the last pick (LlamaIndex's MMR) would charge it nothing.
    vecs = np.stack([unit(1, 0, 0), unit(1, 0.1, 0), unit(0, 0, 1)])
    picks = mmr(np.array([1.0, 0.9, 0.85]), vecs, k=3, lam=0.5)
    assert [p.index for p in picks] == [0, 2, 1]
    assert picks[2].penalty == pytest.approx(0.5 * float(vecs[0] @ vecs[1]))
    assert picks[2].penalty > 0.45


def test_lambda_one_is_pure_relevance():
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((6, 4)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rel = np.array([0.2, 0.9, 0.5, 1.0, 0.1, 0.7])
    picks = mmr(rel, vecs, k=6, lam=1.0)
    assert [p.index for p in picks] == [3, 1, 5, 2, 0, 4]
    assert all(p.penalty == 0.0 for p in picks)


def test_lambda_zero_is_pure_diversity():
    vecs = np.stack([unit(1, 0), unit(0.99, 0.14), unit(0, 1), unit(0.7, 0.7)])
    picks = mmr(np.array([1.0, 0.9, 0.1, 0.5]), vecs, k=3, lam=0.0)
    # the first pick is arbitrary at lambda 0 (all values 0); then the least similar each time
    assert picks[0].index == 0
    assert picks[1].index == 2  # orthogonal to 0
    assert picks[2].index == 3  # cos 0.7 to both beats 1 (0.99 to 0)


def test_k_larger_than_pool_and_empty():
    assert len(mmr(np.array([1.0, 0.5]), np.eye(2, dtype=np.float32), k=5, lam=0.7)) == 2
    assert mmr(np.array([]), np.zeros((0, 3), dtype=np.float32), k=3, lam=0.7) == []


def test_normalise_relevance_puts_fused_scores_on_the_cosine_scale():
    assert list(normalise_relevance(np.array([0.033, 0.0165, 0.0]))) == pytest.approx([1.0, 0.5, 0.0])
    assert list(normalise_relevance(np.array([0.0, 0.0]))) == [0.0, 0.0]


@st.composite
def pools(draw):
    n = draw(st.integers(1, 12))
    dim = draw(st.integers(2, 6))
    vecs = draw(arrays(np.float32, (n, dim), elements=st.floats(-1, 1, width=32)))
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs = np.where(norms > 1e-3, vecs / np.maximum(norms, 1e-3), 0).astype(np.float32)
    rel = np.array(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
    return rel, vecs, draw(st.integers(0, 15)), draw(st.floats(0, 1))


@settings(max_examples=200, deadline=None)
@given(pools())
def test_mmr_invariants(pool):
    rel, vecs, k, lam = pool
    picks = mmr(rel, vecs, k, lam)
    indices = [p.index for p in picks]
    assert len(picks) == min(k, len(rel))
    assert len(set(indices)) == len(indices)
    values = [p.value for p in picks]
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:]))
    assert all(p.penalty >= 0 for p in picks)
    for p in picks:  # the value is what the explanation says it is
        assert p.value == pytest.approx(lam * rel[p.index] - p.penalty)
    scores = mmr_scores(picks, lam)  # what users see: top 1.0, never negative, never rising
    if picks and picks[0].value + (1 - lam) > 0:
        assert scores[0] == pytest.approx(1.0)
    assert all(-1e-9 <= s <= 1 + 1e-9 for s in scores)
    assert all(b <= a + 1e-9 for a, b in zip(scores, scores[1:]))
