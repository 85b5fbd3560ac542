"""MaxScore (``storage.scoring.top_pruned``): the top of a sum of terms without scoring every
posting gives the dense sum's hits and floats, whatever the terms, their bounds and the scope."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.storage.scoring import Term, located, top_hits, top_pruned


def term(ids: np.ndarray, values: np.ndarray, bound: float, asked: list[int]) -> Term:
    def at(cand: np.ndarray) -> np.ndarray:
        asked.append(len(cand))
        where, hit = located(ids, cand)
        part = np.zeros(len(cand))
        part[hit] = values[where[hit]]
        return part
    return Term(bound, lambda: (ids, values), at)


@st.composite
def sums(draw):
    size = draw(st.integers(1, 400))
    n_terms = draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    terms = []
    for _ in range(n_terms):
        share = draw(st.sampled_from([0.01, 0.1, 0.5, 0.9]))
        ids = np.flatnonzero(rng.random(size) < share)
        top = draw(st.sampled_from([0.5, 1.0, 3.0, 10.0]))
        # ties on purpose: a few distinct values, one of them the bound itself (a tight bound)
        values = rng.choice([top, top / 2, top / 3, top * 0.999], size=len(ids))
        terms.append((ids, values, float(top) if len(ids) else float(top)))
    extra_ids = np.flatnonzero(rng.random(size) < draw(st.sampled_from([0.0, 0.05, 0.3])))
    extra = (rng.permutation(extra_ids), rng.choice([0.7, 2.0, 5.0], size=len(extra_ids)))
    inside = None if draw(st.booleans()) else rng.random(size) < 0.6
    return size, terms, extra, inside, draw(st.sampled_from([1, 2, 5, 10, 50]))


@settings(max_examples=400, deadline=None)
@given(sums())
def test_the_same_hits_and_floats_as_the_dense_sum(case):
    size, terms, (extra_ids, extra_scores), inside, limit = case
    dense = np.zeros(size)
    for ids, values, _ in terms:
        dense[ids] += values
    dense[extra_ids] += extra_scores
    expected = top_hits(dense, limit, None if inside is None else np.flatnonzero(inside))
    asked: list[int] = []
    cand, exact = top_pruned([term(i, v, b, asked) for i, v, b in terms], (extra_ids, extra_scores), size, limit,
                             None if inside is None else np.flatnonzero(inside))
    assert top_hits(exact, limit, ids=cand) == expected


def test_a_term_that_cannot_lift_anything_is_asked_only_about_the_leaders():
    size = 10_000
    rare = term(np.arange(0, size, 1000), np.full(10, 9.0), 9.0, [])
    asked: list[int] = []
    common = term(np.arange(size), np.full(size, 0.5), 0.5, asked)
    cand, exact = top_pruned([common, rare], (np.zeros(0, dtype=np.int64), np.zeros(0)), size, 3)
    assert asked == [10]  # the ten chunks holding the rare term, not the 10,000 holding the common one
    assert top_hits(exact, 3, ids=cand) == [(0, 9.5), (1000, 9.5), (2000, 9.5)]
