"""rank(): the one scoring path, a pure function over candidate lists (no database)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.search.rank import Candidate, ChunkMatch, RankParams, by_section, rank

# chunk id -> section: "long" has five chunks, the others one each
SECTIONS = {1: "long", 2: "long", 3: "long", 4: "long", 5: "long", 6: "short", 7: "other", 8: "third"}
CANDIDATES = {cid: Candidate(("doc", sec), f"Doc > {sec}") for cid, sec in SECTIONS.items()}


def test_a_list_is_reduced_to_sections_at_their_best_chunk() -> None:
    reduced = by_section([(6, 0.1), (2, 0.2), (1, 0.3), (7, 0.4), (3, 0.5)], CANDIDATES)
    assert [(s.key[1], s.rank, s.best, s.value) for s in reduced] == [
        ("short", 1, 6, 0.1), ("long", 2, 2, 0.2), ("other", 3, 7, 0.4)]
    assert reduced[1].ranks == {2: 2, 1: 3, 3: 5}


def test_a_long_section_does_not_win_by_length() -> None:
    """Five chunks of one section near the top of both lists against one chunk that both put first."""
    vector = [(6, 0.1), (1, 0.2), (2, 0.21), (3, 0.22), (4, 0.23), (5, 0.24)]
    bm25 = [(6, 9.0), (1, 8.0), (2, 7.9), (3, 7.8), (4, 7.7), (5, 7.6)]
    hits = rank(vector, bm25, CANDIDATES, RankParams(k=2, heading_boost=0.0))
    assert [SECTIONS[h.chunk_id] for h in hits] == ["short", "long"]
    assert hits[0].score == 1.0 and hits[1].score < 1.0
    long = hits[1].explain
    assert (long.vector_rank, long.bm25_rank) == (2, 2)  # the section's place in each reduced list
    assert long.chunks[:2] == [ChunkMatch(1, 2, 2), ChunkMatch(2, 3, 3)]  # every chunk that matched
    assert len(long.chunks) == 5 and hits[1].chunk_id == 1  # the best chunk stands for it


def test_chunk_unit_keeps_every_chunk() -> None:
    vector = [(1, 0.1), (2, 0.2), (6, 0.3)]
    hits = rank(vector, [], CANDIDATES, RankParams(k=3, mode="vector", unit="chunk"))
    assert [h.chunk_id for h in hits] == [1, 2, 6] and all(h.explain.chunks is None for h in hits)
    sections = rank(vector, [], CANDIDATES, RankParams(k=3, mode="vector"))
    assert [h.chunk_id for h in sections] == [1, 6]


def test_weights_zero_drop_a_list() -> None:
    vector, bm25 = [(7, 0.1), (8, 0.2)], [(8, 5.0), (6, 4.0)]
    only_bm25 = rank(vector, bm25, CANDIDATES, RankParams(k=3, weights={"vector": 0.0, "bm25": 1.0}))
    assert [h.chunk_id for h in only_bm25] == [8, 6]
    only_vector = rank(vector, bm25, CANDIDATES, RankParams(k=3, weights={"vector": 1.0, "bm25": 0.0}))
    assert [h.chunk_id for h in only_vector] == [7, 8]


def test_mmr_over_sections_uses_the_representative_vectors() -> None:
    near = np.array([1.0, 0.0], dtype=np.float32)
    far = np.array([0.0, 1.0], dtype=np.float32)
    cands = {1: Candidate("a", "A", near), 2: Candidate("b", "B", near), 3: Candidate("c", "C", far)}
    vector = [(1, 0.1), (2, 0.11), (3, 0.5)]
    plain = rank(vector, [], cands, RankParams(k=2, heading_boost=0.0))
    diverse = rank(vector, [], cands, RankParams(k=2, heading_boost=0.0, mmr_lambda=0.3))
    assert [h.chunk_id for h in plain] == [1, 2] and [h.chunk_id for h in diverse] == [1, 3]
    assert diverse[1].explain.mmr_penalty == 0.0 and diverse[0].score == 1.0


chunk_ids = st.integers(min_value=1, max_value=40)
ranked_list = st.lists(chunk_ids, unique=True, max_size=25)


@settings(max_examples=200, deadline=None)
@given(vec=ranked_list, bm=ranked_list, sections=st.lists(st.integers(0, 6), min_size=40, max_size=40),
       k=st.integers(1, 12), mode=st.sampled_from(["hybrid", "vector", "bm25"]), share=st.sampled_from([0.0, 0.5, 1.0]))
def test_sections_never_repeat_and_scores_fall_from_one(vec, bm, sections, k, mode, share) -> None:
    cands = {cid: Candidate(("d", sections[cid - 1]), f"H{sections[cid - 1]}") for cid in range(1, 41)}
    vector = [(cid, i / 100) for i, cid in enumerate(vec)]
    bm25 = [(cid, 10 - i / 10) for i, cid in enumerate(bm)]
    hits = rank(vector, bm25, cands, RankParams(k=k, mode=mode, score_fusion=share, score_fusion_depth=5))
    keys = [cands[h.chunk_id].section for h in hits]
    assert len(keys) == len(set(keys)) <= k
    listed = {cands[c].section for c in (vec if mode == "vector" else bm if mode == "bm25" else vec + bm)}
    assert set(keys) <= listed
    assert len(keys) == min(k, len(listed))  # as many as asked, while sections are left
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and (not scores or scores[0] == 1.0)
    for h in hits:  # the chunk that stands for a section is one of its chunks that matched
        assert h.chunk_id in {m.chunk_id for m in h.explain.chunks}


# -- a section's text, stitched from its chunks ------------------------------------------------
from llama_index_polaris.engine.search.context import ELLIPSIS, bounded, stitch  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(source=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=400),
       cuts=st.lists(st.integers(0, 400), max_size=6), overlap=st.integers(0, 30))
def test_overlapping_chunks_stitch_back_to_their_source(source, cuts, overlap) -> None:
    bounds = sorted({0, len(source), *[c % (len(source) + 1) for c in cuts]})
    chunks = []
    for a, b in zip(bounds, bounds[1:]):
        start = max(0, a - overlap)  # each chunk repeats the tail of the one before
        chunks.append((source[start:b], start, b))
    assert stitch(chunks) == source


def test_a_re_fenced_chunk_is_kept_whole_and_the_budget_cuts_at_a_boundary() -> None:
    assert stitch([("```\na\n```", 0, 6), ("```\nb\n```", 6, 12)]) == "```\na\n```\n\n```\nb\n```"
    text = "one two three\nfour five six\nseven"
    words = lambda t: len(t.split())  # noqa: E731
    assert bounded(text, words, 7) == text
    assert bounded(text, words, 5) == "one two three" + ELLIPSIS


@settings(max_examples=300, deadline=None)
@given(scores=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=40),
       matched=st.lists(st.integers(0, 2), min_size=40, max_size=40), k=st.integers(1, 10),
       weight=st.sampled_from([0.0, 0.05, 0.2, 1.0]))
def test_boosts_stop_where_no_candidate_can_reach_the_top_k(scores, matched, k, weight) -> None:
    """The pruned boosts pick exactly the top k that boosting every candidate picks."""
    from llama_index_polaris.engine.search.boost import boosted_relevance
    from llama_index_polaris.engine.search.fuse import Fused
    from llama_index_polaris.engine.search.rank import _boosts

    fused = [Fused(i, s) for i, s in enumerate(sorted(scores, reverse=True))]
    headings = [["Other", "Tokens", "Tokens expire"][m] for m in matched[: len(fused)]]
    p = RankParams(k=k, heading_boost=weight, boost_terms=("token", "expir"))
    full, pruned = _boosts(fused, headings, p, None), _boosts(fused, headings, p, k)
    base = np.array([f.score for f in fused])
    order = lambda b: list(np.argsort(-boosted_relevance(base, np.array(b)), kind="stable")[:k])  # noqa: E731
    assert order(pruned) == order(full)


# -- score fusion mixed into RRF ------------------------------------------------------------------
def test_score_fusion_keeps_how_far_apart_the_scores_are() -> None:
    """BM25 finds "other" far ahead of everything; the vector list has it last, the rest close
    together. Ranks alone put it third; score fusion puts it first."""
    vector = [(8, 0.30), (6, 0.31), (1, 0.32), (7, 0.33)]
    bm25 = [(7, 30.0), (6, 5.0), (8, 4.9), (1, 4.8)]
    ranks_only = rank(vector, bm25, CANDIDATES, RankParams(k=3, heading_boost=0.0))
    assert [SECTIONS[h.chunk_id] for h in ranks_only] == ["third", "short", "other"]
    mixed = rank(vector, bm25, CANDIDATES, RankParams(k=4, heading_boost=0.0, score_fusion=0.5,
                                                      score_fusion_vector=0.4, score_fusion_depth=4))
    assert [SECTIONS[h.chunk_id] for h in mixed] == ["other", "third", "short", "long"]
    ex = mixed[0].explain
    assert ex.rrf == pytest.approx(1 / 24 + 1 / 21) and ex.rrf_bm25 == pytest.approx(1 / 21)  # RRF itself, unmixed
    assert ex.fusion_bm25 == pytest.approx(0.6) and ex.fusion_vector == pytest.approx(0.0)  # BM25's best; vector's 4th
    short = mixed[2].explain
    assert short.fusion_vector == pytest.approx(0.4 * 0.02 / 0.03) and short.fusion_bm25 == pytest.approx(0.6 * 0.2 / 25.2)
    best_rrf = max(h.explain.rrf for h in mixed)
    best_fusion = max(h.explain.fusion_vector + h.explain.fusion_bm25 for h in mixed)
    for h in mixed:  # fused = half RRF, half score fusion, each relative to its best
        e = h.explain
        assert e.fused == pytest.approx(0.5 * e.rrf / best_rrf + 0.5 * (e.fusion_vector + e.fusion_bm25) / best_fusion)


def test_score_fusion_zero_is_rrf_alone() -> None:
    vector = [(8, 0.30), (6, 0.31), (7, 0.32)]
    bm25 = [(7, 30.0), (6, 5.0), (8, 4.9)]
    hits = rank(vector, bm25, CANDIDATES, RankParams(k=3, score_fusion=0.0))
    assert all(h.explain.fused == h.explain.rrf and h.explain.fusion_bm25 is None for h in hits)


def test_score_fusion_rescales_at_a_fixed_depth() -> None:
    from llama_index_polaris.engine.search.fuse import score_fusion

    shares = score_fusion({"bm25": [("a", 9.0), ("b", 5.0), ("c", 1.0), ("d", 0.5)]}, {"bm25": 0.5}, depth=3)
    assert shares == {"a": {"bm25": 0.5}, "b": {"bm25": pytest.approx(0.25)}, "c": {"bm25": 0.0}, "d": {"bm25": 0.0}}
    short = score_fusion({"bm25": [("a", 9.0), ("b", 5.0)]}, {"bm25": 1.0}, depth=50)  # shorter than depth: its last
    assert short == {"a": {"bm25": 1.0}, "b": {"bm25": 0.0}}
    assert score_fusion({"bm25": [("a", 2.0), ("b", 2.0)]}, {"bm25": 1.0}, depth=5) == {"a": {"bm25": 1.0},
                                                                                          "b": {"bm25": 1.0}}
    assert score_fusion({"vector": [("a", 0.9)]}, {"vector": 0.0}, depth=5) == {}  # a list of weight 0 takes no part
