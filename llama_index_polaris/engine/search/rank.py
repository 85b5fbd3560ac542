"""Ranking as one pure function: candidate lists in, ranked hits with their explanations out.

``rank`` is the whole scoring path of every mode (the Searcher only reads the database,
the benchmarks call it with their own parameters): each retriever's list is reduced to
sections (a section ranks at its best chunk in that list; its chunks' scores are never
summed, so a long section does not win by length), then fusion (RRF mixed with score
fusion, ``fuse.py``), the heading boost, the learned fusion when ``fusion_weights`` are set
(``learned.py``) and MMR run over sections, and scores are
normalised so that the top hit reads 1.0. With
``unit="chunk"`` every chunk is its own section, which is the chunk-level ranking.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Hashable, Mapping, Sequence

import numpy as np

from . import question
from .boost import boosted_relevance, exact_headings, heading_boost, heading_matches, is_changelog
from .fuse import mix, rrf, score_fusion
from .mmr import mmr
from .normalise import mmr_scores, relative_to_max, relative_to_top

UNITS = ("section", "chunk")
Hits = Sequence[tuple[int, float]]  # (chunk id, distance or BM25 score), best first


@dataclass(frozen=True)
class Candidate:
    """What ranking needs of one chunk: its section, heading path and stored vector."""

    section: Hashable
    heading_path: str
    vector: np.ndarray | None = None


@dataclass(frozen=True)
class ChunkMatch:
    """A chunk of a hit's section that a retriever returned, with its rank in each list
    (``position``: its place among the section's chunks, from 1, once the hit is read)."""

    chunk_id: int
    vector_rank: int | None = None
    bm25_rank: int | None = None
    position: int | None = None


@dataclass
class Explanation:
    """Per-stage figures for one hit; None where a stage did not see it.

    In section mode the ranks are the section's in each list (reduced to sections), the
    distance and BM25 score are its best chunk's, and ``chunks`` lists every chunk of the
    section that a list returned, with its own ranks.
    """

    vector_rank: int | None = None
    vector_distance: float | None = None
    bm25_rank: int | None = None
    bm25_score: float | None = None
    rrf: float | None = None
    rrf_vector: float | None = None
    rrf_bm25: float | None = None
    fusion_vector: float | None = None  # score fusion: the list's rescaled score x its weight
    fusion_bm25: float | None = None
    fused: float | None = None  # RRF and score fusion mixed, each relative to its best: what the boost is added to
    boost: float | None = None
    relevance: float | None = None
    mmr_penalty: float | None = None
    score: float = 0.0
    chunks: list[ChunkMatch] | None = None
    features: dict[str, float] | None = None  # learned fusion: the value of each feature its weights name
    contributions: dict[str, float] | None = None  # each feature's share of ``relevance``: they add up to it
    learned: float | None = None  # the learned model's score before it is divided by the best hit's
    pool: int | None = None  # chunks per list in the candidate pool that ranked this hit (``pipeline.pool_depths``)
    rerank: float | None = None  # the cross-encoder's logit (``rerank_model``); the score is its logistic
    keyword_match: bool | None = None  # False: the query's keywords matched no chunk in scope (#36); None: no BM25 side
    bm25_unit: str | None = None  # "section": the BM25 score is the whole section's (a CJK question: section_words.py)
    fusion: dict[str, object] | None = None  # the question's kind and the weights and boost it got (``question.plan``)


@dataclass(frozen=True)
class RankParams:
    """The query-time settings of one ranking."""

    k: int
    mode: str = "hybrid"
    unit: str = "section"
    rrf_k: float = 20
    heading_boost: float = 0.05
    changelog_penalty: float = 0.0  # taken off a changelog entry's boost (``boost.is_changelog``)
    boost_terms: tuple[str, ...] = ()
    mmr_lambda: float | None = None  # None or 1.0: no MMR
    weights: Mapping[str, float] | None = None  # each list's weight (LlamaIndex's alpha); None: RRF's equal
    score_fusion: float = 0.0  # share of score fusion mixed into RRF; 0: RRF alone (the spec)
    score_fusion_vector: float = 0.4  # the vector list's weight in score fusion when ``weights`` is None
    score_fusion_depth: int = 50  # each list's scores are rescaled between its best and this rank
    fusion_weights: Mapping[str, float] | None = None  # learned fusion's weights by feature; None: the fixed fusion
    lookup: bool = False  # the query is an identifier lookup (``literal.lookup_terms``), a learned-fusion feature
    exact_heading: str = ""  # a lookup of one identifier, as ``boost.heading_key``: a section of that own heading comes first
    query: str = ""  # the query's text: what ``fusion_rule`` reads the kind of question from
    fusion_rule: question.Rule | None = None  # weights and boost by kind of question (``question.plan``); None: fixed
    known: float = 1.0  # share of the query's tokens the embedding model knows (``Embedder.known_share``)


@dataclass
class Ranked:
    """One ranked hit: the chunk that represents it, its score and why."""

    chunk_id: int
    score: float
    explain: Explanation


@dataclass
class _Section:
    """A section's place in one retriever's list."""

    key: Hashable
    rank: int
    best: int  # the chunk that put it there
    value: float  # that chunk's distance or score
    ranks: dict[int, int] = field(default_factory=dict)  # every chunk of it in the list -> its rank


def by_section(hits: Hits, candidates: Mapping[int, Candidate]) -> list[_Section]:
    """The list reduced to sections, each at its best chunk's place (chunks gone since are skipped)."""
    out: dict[Hashable, _Section] = {}
    for rank, (cid, value) in enumerate(hits, start=1):
        cand = candidates.get(cid)
        if cand is None:
            continue
        entry = out.get(cand.section)
        if entry is None:
            out[cand.section] = entry = _Section(cand.section, len(out) + 1, cid, value)
        entry.ranks[cid] = rank
    return list(out.values())


def rank(vector: Hits, bm25: Hits, candidates: Mapping[int, Candidate], p: RankParams) -> list[Ranked]:
    """The top ``p.k`` hits of ``p.mode`` from the KNN and BM25 lists, with explanations."""
    documents = None  # the chunk unit keys sections by chunk: the structural features need each one's document
    if p.unit == "chunk":
        documents = {cid: _document(c.section) for cid, c in candidates.items()} if p.fusion_weights else None
        candidates = {cid: Candidate(cid, c.heading_path, c.vector) for cid, c in candidates.items()}
    lists = {"vector": by_section(vector, candidates), "bm25": by_section(bm25, candidates)}
    if p.mode == "hybrid":
        return _hybrid(lists, candidates, p, documents)
    if p.mode == "vector" and p.mmr_lambda is not None:
        return _vector_mmr(lists["vector"], candidates, p)
    return _single(lists[p.mode], p)


def _document(section: Hashable) -> Hashable:
    """The document of a section key (``(document, heading path)``; any other key is its own document)."""
    return section[0] if isinstance(section, tuple) and section else section


def _matches(entries: Mapping[str, _Section | None]) -> list[ChunkMatch]:
    """Every chunk of a section that a list returned, best first, with its rank in each list."""
    ranks: dict[int, dict[str, int]] = {}
    for name, entry in entries.items():
        for cid, r in (entry.ranks.items() if entry else ()):
            ranks.setdefault(cid, {})[name] = r
    order = sorted(ranks, key=lambda c: min(ranks[c].values()))
    return [ChunkMatch(c, ranks[c].get("vector"), ranks[c].get("bm25")) for c in order]


def _single(sections: list[_Section], p: RankParams) -> list[Ranked]:
    """One retriever's own order and score, top = 1.0."""
    top = sections[: p.k]
    raw = [(1.0 - s.value) if p.mode == "vector" else s.value for s in top]
    out = []
    for s, score in zip(top, relative_to_top(raw)):
        ex = Explanation(score=score)
        if p.mode == "vector":
            ex.vector_rank, ex.vector_distance = s.rank, s.value
        else:
            ex.bm25_rank, ex.bm25_score = s.rank, s.value
        ex.chunks = _matches({p.mode: s}) if p.unit == "section" else None
        out.append(Ranked(s.best, score, ex))
    return out


def _vector_mmr(sections: list[_Section], candidates: Mapping[int, Candidate], p: RankParams) -> list[Ranked]:
    """MMR over the vector list; relevance is the cosine similarity itself."""
    if not sections:
        return []
    lam = float(p.mmr_lambda if p.mmr_lambda is not None else 1.0)
    relevance = np.array([1.0 - s.value for s in sections])
    picks = mmr(relevance, _matrix([candidates[s.best].vector for s in sections]), p.k, lam)
    out = []
    for pick, score in zip(picks, mmr_scores(picks, lam)):
        s = sections[pick.index]
        ex = Explanation(vector_rank=s.rank, vector_distance=s.value, relevance=float(relevance[pick.index]),
                         mmr_penalty=pick.penalty, score=score,
                         chunks=_matches({"vector": s}) if p.unit == "section" else None)
        out.append(Ranked(s.best, score, ex))
    return out


def _planned(lists: Mapping[str, list[_Section]], p: RankParams) -> tuple[RankParams, question.Plan | None]:
    """``p`` with the weights and boost its question gets (``question.plan``), when it has a
    fusion rule and no list weights of its own (LlamaIndex's ``alpha`` wins)."""
    if p.fusion_rule is None or p.weights is not None:
        return p, None
    agree = question.agreement([s.key for s in lists["vector"]], [s.key for s in lists["bm25"]])
    plan = question.plan(question.read(p.query, p.known), agree, p.fusion_rule)
    return replace(p, weights=plan.weights(), score_fusion_vector=plan.score_vector,
                   heading_boost=plan.heading_boost), plan


def _hybrid(lists: Mapping[str, list[_Section]], candidates: Mapping[int, Candidate], p: RankParams,
            documents: Mapping[int, Hashable] | None = None) -> list[Ranked]:
    p, plan = _planned(lists, p)
    index = {name: {s.key: s for s in sections} for name, sections in lists.items()}
    fused = rrf({n: [s.key for s in ss] for n, ss in lists.items() if ss}, p.rrf_k, p.weights)
    if not fused:
        return []
    rrf_of = {f.id: (f.score, dict(f.contributions)) for f in fused}
    shares = _score_shares(lists, p, plan) if p.score_fusion > 0 else {}
    fused = mix(fused, shares, p.score_fusion)
    lam = float(p.mmr_lambda if p.mmr_lambda is not None else 1.0)
    if p.fusion_weights:  # learned fusion, a setting: its module is loaded only then (2 dataclasses)
        from . import learned

        names = learned.named(p.fusion_weights)
        weights = learned.weight_vector(p.fusion_weights, names)
    else:
        names, weights = (), None
    # every chunk of a section has its heading path: any of them gives the section's
    first = [(index["vector"].get(f.id) or index["bm25"][f.id]).best for f in fused]
    headings = [candidates[c].heading_path for c in first]
    exact = exact_headings(p.exact_heading, headings)
    if weights is None:
        boosts = _boosts(fused, headings, p, k=p.k if lam >= 1.0 else None, exact=exact)
    else:  # the learned score reads every section's heading match
        matched = heading_matches(list(p.boost_terms), headings)
        boosts = (p.heading_boost * matched).tolist() if p.heading_boost else [0.0] * len(fused)
        boosts = [b + _extra(p, i in exact, h) for i, (b, h) in enumerate(zip(boosts, headings))]
    relevance = boosted_relevance(np.array([f.score for f in fused]), np.array(boosts))
    x = parts = raw = None
    if weights is not None:
        docs = [documents[c] for c in first] if documents is not None else [_document(f.id) for f in fused]
        figures = _figures(fused, lists, index, headings, relevance, matched, p, docs, names)
        x = learned.features(figures, p.rrf_k, p.lookup, names)
        raw = learned.scores(x, weights)
        top = float(raw.max(initial=0.0))
        if top > 0:  # else no feature the weights count is present: the fixed fusion's order stands
            relevance = relative_to_max(raw)
        parts = learned.contributions(x, weights) / top if top > 0 else np.zeros_like(x)
    best = {i: _representative(f.id, index, p) for i, f in enumerate(fused)} if lam < 1.0 else {}
    vectors = _matrix([candidates[best[i]].vector for i in range(len(fused))]) if lam < 1.0 else None
    picks = mmr(relevance, vectors, p.k, lam)
    out = []
    for pick, score in zip(picks, mmr_scores(picks, lam)):
        f = fused[pick.index]
        chunk = best[pick.index] if pick.index in best else _representative(f.id, index, p)
        vec, bm = index["vector"].get(f.id), index["bm25"].get(f.id)
        ex = Explanation(
            vector_rank=vec.rank if vec else None, vector_distance=vec.value if vec else None,
            bm25_rank=bm.rank if bm else None, bm25_score=bm.value if bm else None,
            rrf=rrf_of[f.id][0], rrf_vector=rrf_of[f.id][1].get("vector"), rrf_bm25=rrf_of[f.id][1].get("bm25"),
            fusion_vector=shares.get(f.id, {}).get("vector"), fusion_bm25=shares.get(f.id, {}).get("bm25"),
            fused=f.score,
            boost=boosts[pick.index], relevance=float(relevance[pick.index]), mmr_penalty=pick.penalty, score=score,
            chunks=_matches({name: index[name].get(f.id) for name in lists}) if p.unit == "section" else None,
        )
        if plan is not None:
            ex.fusion = plan.as_dict()
        if x is not None:
            i = pick.index
            ex.features = dict(zip(names, x[i].tolist()))
            ex.contributions = dict(zip(names, parts[i].tolist()))
            ex.learned = float(raw[i])
        out.append(Ranked(chunk, score, ex))
    return out


def _figures(fused: list, lists: Mapping[str, list[_Section]], index: Mapping[str, dict], headings: list[str],
             relevance: np.ndarray, matched: np.ndarray, p: RankParams, documents: list[Hashable],
             names: tuple[str, ...]) -> learned.Figures:
    """What the learned fusion reads of each fused section, as arrays: its explanation's figures."""
    from . import learned

    vec_of, bm_of = index["vector"], index["bm25"]
    vr, br, chunks, same = [], [], [], []
    for f in fused:
        vec, bm = vec_of.get(f.id), bm_of.get(f.id)
        vr.append(vec.rank if vec else 0)
        br.append(bm.rank if bm else 0)
        chunks.append(len(vec.ranks.keys() | bm.ranks.keys()) if vec and bm else len((vec or bm).ranks))
        same.append(1.0 if vec and bm and vec.best == bm.best else 0.0)
    v_rank, b_rank = np.array(vr, dtype=np.float64), np.array(br, dtype=np.float64)
    sims = np.array([1.0 - s.value for s in lists["vector"]] + [np.nan])  # [-1] (NaN) for an absent section
    bm25 = np.array([s.value for s in lists["bm25"]] + [np.nan])
    v_at, b_at = np.array(vr) - 1, np.array(br) - 1  # rank 0 reads index -1: NaN, then 0 once rescaled
    v_scaled = np.append(learned.rescaled(sims[:-1], p.score_fusion_depth), 0.0)[v_at]
    b_scaled = np.append(learned.rescaled(bm25[:-1], p.score_fusion_depth), 0.0)[b_at]
    depth = np.array([h.count(" > ") + 1 if h else 1 for h in headings], dtype=np.float64)
    structure = None
    if any(n in learned.STRUCTURAL for n in names):
        own = heading_matches(list(p.boost_terms), [h.rsplit(" > ", 1)[-1] for h in headings])
        structure = learned.structure(headings, documents, own, relevance)
    return learned.Figures(relevance, v_rank, sims[v_at], b_rank, bm25[b_at], v_scaled, b_scaled, matched, depth,
                           np.array(chunks, dtype=np.float64), np.array(same), structure)


def _score_shares(lists: Mapping[str, list[_Section]], p: RankParams,
                  plan: question.Plan | None = None) -> dict[Hashable, dict[str, float]]:
    """Score fusion's share of each section from each list (vector: cosine similarity)."""
    if plan is not None:
        alpha = plan.score_vector
    else:
        alpha = p.score_fusion_vector if p.weights is None else p.weights.get("vector", 0.5)
    scored = {name: [(s.key, (1.0 - s.value) if name == "vector" else s.value) for s in sections]
              for name, sections in lists.items()}
    return score_fusion(scored, {"vector": alpha, "bm25": 1.0 - alpha}, p.score_fusion_depth)


def _extra(p: RankParams, exact: bool, heading_path: str) -> float:
    """What a section's boost gets besides its heading match: the section whose own heading is
    the looked-up identifier 1 + the heading boost (more than any other section's relevance
    can reach); a changelog or release-notes entry minus ``changelog_penalty``."""
    extra = 1.0 + p.heading_boost if exact else 0.0
    return extra - (p.changelog_penalty if p.changelog_penalty and is_changelog(heading_path) else 0.0)


def _boosts(fused: list, headings: list[str], p: RankParams, k: int | None, exact: set[int] = frozenset()) -> list[float]:
    """Each candidate's heading boost (and the exact heading's bonus), best fused first; with
    ``k`` (no MMR), only as far down the list as a candidate could still reach the top ``k``:
    below that, fused / best + the largest boost is under the k-th relevance found, so its
    boost changes no result (an exact heading further down is always reached)."""
    terms, weight = list(p.boost_terms), p.heading_boost
    top = fused[0].score if fused and fused[0].score > 0 else 1.0
    last_exact = max(exact, default=-1)
    boosts: list[float] = []
    kept: list[float] = []  # a heap of the k best relevances so far: kept[0] is the k-th
    for i, (f, heading) in enumerate(zip(fused, headings)):
        if k is not None and len(kept) >= k and i > last_exact and f.score / top + weight < kept[0]:
            return boosts + [0.0] * (len(fused) - len(boosts))
        boosts.append(heading_boost(terms, heading, weight) + _extra(p, i in exact, heading))
        if k is not None:
            (heapq.heappush if len(kept) < k else heapq.heappushpop)(kept, f.score / top + boosts[-1])
    return boosts


def _representative(key: Hashable, index: Mapping[str, dict], p: RankParams) -> int:
    """The chunk that stands for a section: the one with the best chunk-level fused score."""
    score: dict[int, float] = {}
    for name, sections in index.items():
        entry = sections.get(key)
        weight = 1.0 if p.weights is None else p.weights.get(name, 1.0)
        for cid, r in (entry.ranks.items() if entry else ()):
            score[cid] = score.get(cid, 0.0) + weight / (p.rrf_k + r)
    return max(score, key=lambda c: (score[c], -c))


def _matrix(vectors: list[np.ndarray | None]) -> np.ndarray:
    """Candidate vectors as rows (zeros for a chunk stored without one)."""
    dim = next((v.shape[0] for v in vectors if v is not None), 1)
    zero = np.zeros(dim, dtype=np.float32)
    return np.stack([v if v is not None else zero for v in vectors])
