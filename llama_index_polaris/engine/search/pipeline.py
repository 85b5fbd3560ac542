"""The query pipeline: embed once, KNN + BM25, then ``rank.rank`` (sections, RRF, heading
boost, MMR, normalise).

The Searcher only reads, and only through the storage contract (``storage.py``): the
scope, the two candidate lists, what ranking needs of each candidate and the rows of the
hits. It imports neither backend: SQLite and Postgres rank through the same code. Each hit carries the explanation
computed in the same pass that scored it, so the figures shown by ``polaris search
--explain`` and the Datasette page cannot drift from the ranking.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from ..config import PolarisConfig
from ..errors import DatabaseError, InputError
from ..storage import MAX_K, Storage
from ..text import heuristic_tokens, nfc
from ..storage.vectors import check_query as check_query_vector
from .boost import boost_terms, heading_key
from .context import bounded, excerpt, runs, section_text
from .display import Hits, hit_html
from . import legend, literal, question, strength
from .terms import query_words
from ..words.bigrams import has_cjk
from ..storage.filters import Filter
from .rank import UNITS, Candidate, Explanation, RankParams, Ranked, rank
from ..storage.scope import Scope

MODES = ("hybrid", "vector", "bm25")
MAX_QUERY_CHARS = 10_000
IDENTIFIER_LOOKUP = True  # a query of identifiers only: BM25 hits that name them as written come first
LOOKUP_POOL = 200  # BM25 hits a lookup is lifted from (cut back to the pool after)
WHOLE_SECTIONS = True  # a CJK question's keyword list, in section unit, scored as whole sections (section_words.py)
POOL_GROWTH = 4  # each deeper pool holds this many times the chunks of the one before (see ``pool_depths``)
ANN_SIZED_FOR = 30  # the approximate KNN sizes its candidates for this many results (or the pool, if deeper)
__all__ = ["Explanation", "Hit", "Searcher", "MODES", "MAX_QUERY_CHARS", "check_query", "check_top_k", "clamp_top_k"]


@dataclass
class Hit:
    """One search result: the chunk, where it came from, its score and why."""

    rank: int
    score: float
    chunk_id: int
    node_id: str
    document_id: str
    document: str
    collection: str
    heading_path: str
    text: str
    start_char: int | None = None
    end_char: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    explain: Explanation = field(default_factory=Explanation)
    document_status: str = "completed"
    document_error: str | None = None  # set when the document is stale: why its re-index failed
    node: str | None = None  # the rest of a LlamaIndex node added through the vector store (JSON)
    unit: str = "chunk"  # "section": the hit stands for its (document, heading path), see below
    section_start: int | None = None  # the section's character span in the document (all its chunks)
    section_end: int | None = None
    section_chunks: list[str] = field(default_factory=list)  # node ids of all the section's chunks, in order
    section_text: str | None = None  # the whole section, bounded by a token budget (context="section")
    section_exact: bool | None = None  # section_text is the file's own text (False: rebuilt from chunks, see documents.NOT_EXACT)
    strength: float | None = None  # how well it matches, on one scale for every query (``strength.py``)
    good_match: bool = False  # strength at or above ``strength.GOOD_MATCH``
    cosine: float | None = None  # the query's cosine similarity to the chunk (None: the query was not embedded)
    term_share: float | None = None  # share of the query's content words in the chunk's heading path and text

    def _repr_html_(self) -> str:
        """The hit as Jupyter shows it: its row of the table of the list it came in (``display.hit_html``)."""
        return hit_html(self)

    def to_dict(self, explain: bool = True) -> dict[str, Any]:
        """A JSON-ready dict: the one shape of a hit in `polaris search --json [--explain]`,
        `polaris_search()` and the Datasette explorer's JSON (``explain`` adds the stage figures)."""
        out = asdict(self)
        out.pop("node")
        if not explain:
            out.pop("explain")
        return out


@dataclass(frozen=True)
class _Row:
    document_id: str
    document: str
    collection: str
    node_id: str
    heading_path: str
    text: str
    start_char: int | None
    end_char: int | None
    metadata: dict[str, Any]
    status: str
    error: str | None
    node: str | None


def check_query(query: Any, what: str = "the query") -> str:
    """``query`` in NFC (the spelling stored text has) if it is a string of at most
    ``MAX_QUERY_CHARS``; InputError otherwise."""
    if not isinstance(query, str):
        raise InputError(f"{what} must be a string, got {type(query).__name__}.")
    if len(query) > MAX_QUERY_CHARS:
        raise InputError(
            f"{what} is {len(query):,} characters; at most {MAX_QUERY_CHARS:,} are accepted. Shorten it"
            " (the embedding model reads only its first few hundred tokens anyway)."
        )
    return nfc(query)


def is_blank(query: str | None) -> bool:
    """Whether ``query`` was given but holds nothing to read (spaces and control characters only):
    it finds nothing, in every door, even beside a vector a caller embedded from it."""
    return bool(query) and not any(c.isprintable() and not c.isspace() for c in query)


def pool_depths(depth: int, cap: int = MAX_K) -> list[int]:
    """The candidate depths a query may rank at, shallowest first: the configured ``depth``,
    then ``POOL_GROWTH`` times deeper each time, up to ``cap`` (sqlite-vec's k limit).

    Every query ranks the first pool. A deeper one is read only when ``top_k`` asks for
    more hits than the pools before it gave, and only adds hits after theirs, so the
    first hits never depend on ``top_k`` (``Searcher._run``)."""
    depth = max(1, min(depth, cap))
    out = [depth]
    while out[-1] < cap:
        out.append(min(out[-1] * POOL_GROWTH, cap))
    return out


def _uses(mode: str, weights: Mapping[str, float] | None, name: str) -> bool:
    """Whether a query in ``mode`` with list ``weights`` reads the ``name`` list at all."""
    return mode == name or (mode == "hybrid" and (weights is None or weights[name] > 0))


def clamp_top_k(top_k: int | None, default: int, upper: int = 100) -> int:
    """The 5ire limit rule: default when absent, clamped to 1..100."""
    if top_k is None:
        return default
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InputError(f"top_k must be an integer, got {top_k!r}.")
    return max(1, min(upper, top_k))


def check_top_k(top_k: Any, upper: int, what: str = "k") -> int:
    """``top_k`` when it is a whole number from 1 to ``upper``; InputError otherwise. For a door
    that tells its caller rather than clamping (the MCP server: an agent asking for 500 hits
    learns the bound instead of silently getting fewer)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= upper:
        raise InputError(f"{what} must be a whole number from 1 to {upper}, got {top_k!r}.")
    return top_k


class Searcher:
    """Runs queries against one store with one query embedder and one config."""

    max_top_k = 100  # the 5ire clamp; evaluation raises it to rank deeper

    def __init__(
        self,
        store: Storage,
        embed_query: Callable[[str], np.ndarray] | None,
        config: PolarisConfig,
        vector_cache: Any = None,
        bm25_cache: Any = None,
        count_tokens: Callable[[str], int] | None = None,
        known_share: Callable[[str], float] | None = None,
    ) -> None:
        self.store = store
        self.embed_query = embed_query
        self.config = config
        self.count_tokens = count_tokens  # the model's tokens, for a section's budget (None: len / 4)
        self.known_share = known_share  # share of a query's tokens the model knows (None: all, unmeasured)
        self.vector_cache = vector_cache  # a backend's KNN from RAM for long-lived processes (SQLite's sign bits)
        self.bm25_cache = bm25_cache  # a backend's BM25 with common words scored from RAM, likewise

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        mode: str = "hybrid",
        documents: Sequence[str] | None = None,
        collections: Sequence[str] | None = None,
        filters: Filter | None = None,
        node_ids: Sequence[str] | None = None,
        query_vector: np.ndarray | None = None,
        mmr_lambda: float | None = None,
        alpha: float | None = None,
        within_collection: str | None = None,
        max_top_k: int | None = None,
        unit: str | None = None,
        context_tokens: int | None = None,
    ) -> Hits:
        """The best ``top_k`` chunks for ``query`` in ``mode`` within the scope given (a list
        of ``Hit`` that a notebook shows as a table, ``display.Hits``).

        ``mmr_lambda`` overrides the configured MMR trade-off for this query; in
        ``vector`` mode giving it re-ranks the vector candidate pool by MMR with the
        cosine similarity as relevance (without it, vector mode is plain KNN).
        ``query_vector`` skips the query embedding (it must have the index's dim).
        ``alpha`` weighs the two lists in hybrid fusion: 1 = vector only, 0 = BM25 only,
        None = equal weights. ``within_collection`` keeps every hit inside one collection
        (the LlamaIndex store's scope). ``top_k`` is clamped to 1..``max_top_k`` (default
        100, the 5ire rule for agents; the LlamaIndex door lifts it). ``unit`` (default:
        the config's) is ``section``, one hit per (document, heading path), or ``chunk``.
        ``context_tokens`` fills each section hit's ``section_text``: the whole section,
        cut to that many of the model's tokens; when the cut would hide the chunk that
        matched, the section's start is shortened to make room for it (``context.excerpt``).
        """
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
        unit = self.config.unit if unit is None else unit
        if unit not in UNITS:
            raise InputError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}.")
        if context_tokens is not None and (isinstance(context_tokens, bool) or not isinstance(context_tokens, int)
                                           or context_tokens < 1):
            raise InputError(f"context_tokens must be a positive whole number, got {context_tokens!r}.")
        if context_tokens is not None and unit != "section":
            raise InputError("a section's text (context_tokens) needs unit='section'.")
        given = check_query(query)
        query = given.strip()
        lam = _check_lambda(self.config.mmr_lambda if mmr_lambda is None else mmr_lambda)
        weights = _alpha_weights(alpha)
        k = clamp_top_k(top_k, self.config.top_k, max_top_k or self.max_top_k)
        if query_vector is not None and self.store.model is None:
            query_vector = None  # text alone: no stored vector to compare it with (a LlamaIndex retriever embeds anyway)
        if query_vector is not None:
            query_vector = self._check_vector(query_vector)
        with self.store.read():  # a scope naming what the index lacks is refused, even for no query
            scope = self.store.resolve_scope(documents=documents, collections=collections, filters=filters,
                                             node_ids=node_ids, within_collection=within_collection)
        settings = {key: getattr(self.config, key) for key in legend.SETTINGS} | {"mmr_lambda": lam}
        if scope.empty or (not query and query_vector is None) or is_blank(given):
            return Hits(query=query, mode=mode, settings=settings)
        if _uses(mode, weights, "vector") and query_vector is None and self.store.model is not None:
            query_vector = self._check_vector(self._embed(query))  # outside the lock: other threads may read
        elif mode == "vector" and query_vector is None:  # text alone (LlamaIndex nodes with no embedding)
            raise DatabaseError(
                "this index records no embedding model (its text was added alone, or polaris_meta lost its"
                " model_id), so it has no vectors to search by meaning: search it by keywords (mode 'bm25') or"
                " hybrid, which then ranks the keyword list alone; `polaris index` with a model adds vectors."
            )
        params = self.params(query, k, mode, unit, lam if mode == "hybrid" else mmr_lambda, weights)
        with self.store.read():  # one snapshot for every stage
            found = self._run(query, params, scope, query_vector, context_tokens)
            return Hits(found, query=query, mode=mode, settings=settings | used_weights(found, weights),
                        tokenizer=self.store.tokenizer().tokenizer)  # marks as BM25 matched

    def params(self, query: str, k: int, mode: str = "hybrid", unit: str = "section", mmr_lambda: float | None = None,
               weights: Mapping[str, float] | None = None) -> RankParams:
        """The ranking settings of one query under this searcher's config (benchmarks reuse them)."""
        c = self.config
        lookup = literal.lookup_terms(query) if IDENTIFIER_LOOKUP else []
        return RankParams(
            k=k, mode=mode, unit=unit, rrf_k=c.rrf_k, heading_boost=c.heading_boost, boost_terms=tuple(boost_terms(query)),
            changelog_penalty=c.changelog_penalty,
            mmr_lambda=mmr_lambda, weights=weights, score_fusion=c.score_fusion,
            score_fusion_vector=c.score_fusion_vector, score_fusion_depth=c.score_fusion_depth,
            fusion_weights=c.fusion_weights, lookup=bool(c.fusion_weights and lookup),
            exact_heading=heading_key(lookup[0]) if len(lookup) == 1 else "",
            query=query, fusion_rule=question.RULE if c.fusion_by_question else None,
            known=self.known_share(query) if self.known_share is not None and mode != "bm25" and query else 1.0,
        )

    def _run(self, query: str, p: RankParams, scope: Scope, qvec: np.ndarray | None,
             context_tokens: int | None = None) -> list[Hit]:
        """Rank the first pool; while ``p.k`` asks for more hits than the pools so far gave,
        rank the next deeper one and append the hits it adds (their scores capped at the
        last hit's, so the list stays in score order). The head never moves with ``p.k``."""
        ranked: list[Ranked] = []
        seen: set[Hashable] = set()
        rerank = bool(self.config.rerank_model and query)
        for depth in pool_depths(self.config.candidate_pool):
            if rerank and not ranked:  # the first pool's rerank_top best, whatever k is, re-ordered
                tier, exhausted = self._rank_pool(query, replace(p, k=max(p.k, self.config.rerank_top)), scope,
                                                  qvec, depth)
                tier = self._reranked(query, tier)
            else:
                tier, exhausted = self._rank_pool(query, p, scope, qvec, depth)
            for key, r in tier:
                if key in seen:
                    continue
                seen.add(key)
                if ranked and r.score > ranked[-1].score:
                    r.score = r.explain.score = ranked[-1].score
                r.explain.pool = depth
                ranked.append(r)
            if len(ranked) >= p.k or exhausted:
                break
        hits = self._hits(ranked[: p.k], p.unit, context_tokens, query)
        self._measure(hits, query, qvec, p.known)
        return hits

    def _measure(self, hits: list[Hit], query: str, qvec: np.ndarray | None, known: float = 1.0) -> None:
        """Each hit's match strength (``strength.py``) from its cosine to the query vector (read when
        the model knows ``known`` of the query: ``strength.readable_cosine``) and the share of the
        query's content words it holds."""
        names = literal.identifiers(query)
        terms = strength.terms_beside(boost_terms(query), names)
        cosines = {h.chunk_id: 1.0 - h.explain.vector_distance for h in hits if h.explain.vector_distance is not None}
        missing = [h.chunk_id for h in hits if h.chunk_id not in cosines] if qvec is not None else []
        for cid, cand in self._candidates(missing, True).items():
            if cand.vector is not None:
                cosines[cid] = float(cand.vector @ (qvec / (np.linalg.norm(qvec) or 1.0)))
        for h in hits:
            cosine = cosines.get(h.chunk_id)
            got = strength.strength(strength.readable_cosine(cosine, known),
                                    strength.term_share(terms, h.heading_path, h.text, names))
            h.strength, h.good_match, h.cosine, h.term_share = got.value, got.good, cosine, got.term_share

    def _rank_pool(self, query: str, p: RankParams, scope: Scope, qvec: np.ndarray | None,
                   depth: int) -> tuple[list[tuple[Hashable, Ranked]], bool]:
        """``rank`` over each list's first ``depth`` chunks: the hits, each with its section key
        (its chunk id in chunk unit), and whether every list returned all it had (a deeper
        pool would add nothing)."""
        vec_hits: list[tuple[int, float]] = []
        bm_hits: list[tuple[int, float]] = []
        pending = None
        whole = bm_more = False
        if _uses(p.mode, p.weights, "vector") and qvec is not None:
            # qvec None: no vectors in this index yet. The approximate path sizes its
            # candidates for ANN_SIZED_FOR results (recall measured there), deeper pools for theirs
            pending = self._start_knn(qvec, depth, scope, fetch_k=min(depth, ANN_SIZED_FOR),
                                      beside=_uses(p.mode, p.weights, "bm25") and bool(query))
        if _uses(p.mode, p.weights, "bm25") and query:
            bm_hits = self._bm25(query, depth, scope)
            bm_more = len(bm_hits) >= depth  # counted in chunks: the whole-section list is shorter
            whole = p.unit == "section" and bool(bm_hits) and WHOLE_SECTIONS and has_cjk(query)
            if whole:
                bm_hits = self._whole_sections(query, bm_hits)
        if pending is not None:
            vec_hits = pending()
        with_vectors = p.mmr_lambda is not None and p.mmr_lambda < 1.0
        candidates = self._candidates([h[0] for h in [*vec_hits, *bm_hits]], with_vectors)
        ranked = rank(vec_hits, bm_hits, candidates, p)
        if _uses(p.mode, p.weights, "bm25") and query:  # say so when the keyword side found nothing (#36)
            for r in ranked:
                r.explain.keyword_match = bool(bm_hits)
                r.explain.bm25_unit = "section" if whole else None
        keyed = [(candidates[r.chunk_id].section if p.unit == "section" else r.chunk_id, r) for r in ranked]
        return keyed, len(vec_hits) < depth and not bm_more

    def _reranked(self, query: str, tier: list[tuple[Hashable, Ranked]]) -> list[tuple[Hashable, Ranked]]:
        """The first pool's ``rerank_top`` best hits re-ordered by the cross-encoder (``rerank.py``)."""
        from ..embed.crossencoder import load_reranker
        from .rerank import reorder

        head = tier[: self.config.rerank_top]
        if not head:
            return tier
        texts = self._texts([r.chunk_id for _, r in head])
        logits = load_reranker(self.config.rerank_model).score(query, [texts.get(r.chunk_id, "") for _, r in head])
        return reorder(tier, logits)

    def _hits(self, ranked: list[Ranked], unit: str, context_tokens: int | None = None, query: str = "") -> list[Hit]:
        rows = self._rows([r.chunk_id for r in ranked])
        ranked = [r for r in ranked if r.chunk_id in rows]
        hits = [_hit(i, r.score, r.chunk_id, rows[r.chunk_id], r.explain) for i, r in enumerate(ranked, start=1)]
        if unit == "section" and hits:
            self._add_sections(hits, context_tokens, query)
        return hits

    def _add_sections(self, hits: list[Hit], context_tokens: int | None, query: str = "") -> None:
        """Each hit's section: its span, the node ids of all its chunks and, if asked, its text
        (cut to the budget with the chunk that matched kept in view: ``context.excerpt``)."""
        keys = list(dict.fromkeys((h.document_id, h.heading_path) for h in hits))
        rows = self.store.section_rows(keys, context_tokens is not None)
        sections: dict[tuple[str, str], list[tuple]] = {}
        for doc, heading, node_id, start, end, chunk_text, chunk_id, ordinal in rows:
            sections.setdefault((doc, heading), []).append((node_id, start, end, chunk_text, chunk_id, ordinal))
        texts = self._section_texts(sections) if context_tokens is not None else {}
        count = self.count_tokens or heuristic_tokens
        for h in hits:
            chunks = sections.get((h.document_id, h.heading_path), [])
            starts = [c[1] for c in chunks if c[1] is not None]
            ends = [c[2] for c in chunks if c[2] is not None]
            h.unit, h.section_chunks = "section", [c[0] for c in chunks]
            position = {c[4]: i for i, c in enumerate(chunks, start=1)}
            h.explain.chunks = [replace(m, position=position.get(m.chunk_id)) for m in h.explain.chunks or []]
            h.section_start, h.section_end = (min(starts) if starts else None), (max(ends) if ends else None)
            if context_tokens is not None:
                full, h.section_exact = texts.get((h.document_id, h.heading_path), ("", True))
                whole = bounded(full, count, context_tokens)
                h.section_text = excerpt(whole, h.text, count, context_tokens, query)

    def _section_texts(self, sections: dict[tuple[str, str], list[tuple]]) -> dict[tuple[str, str], tuple[str, bool]]:
        """Each section's (text, exact): its document's stored text over its runs of chunks, read in one
        call (``context.section_text``); rebuilt from the chunks where the text is not stored."""
        spans = {key: runs([(c[5], c[1], c[2]) for c in chunks]) for key, chunks in sections.items()}
        wanted = [(key[0], s, e) for key, found in spans.items() for s, e in found or ()]
        sliced = iter(self.store.text_slices(wanted))
        out = {}
        for key, chunks in sections.items():
            found = spans[key]
            slices = None if found is None else [next(sliced) for _ in found]
            out[key] = section_text(slices, [(c[3], c[1], c[2]) for c in chunks])
        return out

    def _start_knn(self, qvec: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None,
                   beside: bool = False) -> Callable[[], list[tuple[int, float]]]:
        """The KNN list, begun now; the callable gives its hits. From the long-lived cache when it
        answers; else the store's, which (``beside``: the BM25 list is read meanwhile) may run it
        on another core in the same snapshot (``start_knn``: the SQLite file's, at scale)."""
        if self.vector_cache is not None and self.vector_cache.refresh():
            hits = self.vector_cache.knn(qvec, k, scope, fetch_k=fetch_k)
        elif beside:
            return self.store.start_knn(qvec, k, scope, fetch_k=fetch_k)
        else:
            hits = self.store.knn(qvec, k, scope, fetch_k=fetch_k)
        return lambda: hits

    def _knn(self, qvec: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None) -> list[tuple[int, float]]:
        """The KNN list, here and now (benchmarks time it alone)."""
        return self._start_knn(qvec, k, scope, fetch_k)()

    def _bm25(self, query: str, k: int, scope: Scope) -> list[tuple[int, float]]:
        """The BM25 list; a lookup's is lifted from a deeper one (``LOOKUP_POOL``), so that
        the chunk naming the identifier is found whatever ``k`` asks for."""
        lookup = literal.lookup_terms(query) if IDENTIFIER_LOOKUP else []
        fetch = max(k, LOOKUP_POOL) if lookup else k
        if self.bm25_cache is not None and self.bm25_cache.refresh():
            hits = self.bm25_cache.bm25(query, fetch, scope)
        else:
            hits = self.store.bm25(query, fetch, scope)
        if lookup and hits:
            hits = literal.lift(hits, self._texts([h[0] for h in hits]), lookup)[:k]
        return hits

    def _whole_sections(self, query: str, hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """The keyword list's sections scored again as whole sections (``section_words.py``)."""
        from . import section_words

        section_of = {cid: c.section for cid, c in self._candidates([h[0] for h in hits], False).items()}
        rows = self.store.section_rows(list(dict.fromkeys(section_of.values())), False)
        tokenizer = self.store.tokenizer()
        terms = list(dict.fromkeys(t for word in tokenizer.terms(query_words(query)) for t in word))
        n_rows, total, n_sections, df = self.store.section_stats(terms)
        counts, lengths = self.store.chunk_terms([r[6] for r in rows], terms, df)
        sections: dict[Hashable, tuple[Counter, int]] = {}
        for r in rows:
            held, length = sections.get((r[0], r[1]), (Counter(), 0))
            held.update(counts.get(r[6], {}))
            sections[(r[0], r[1])] = (held, length + lengths.get(r[6], 0))
        scores = section_words.section_scores(terms, sections, n_rows, df, total / max(n_sections, 1))
        return section_words.reorder(hits, section_of, scores)

    def _texts(self, ids: list[int]) -> dict[int, str]:
        """Each chunk's own heading and text, where an identifier is looked for as written."""
        return {cid: heading.rsplit(" > ", 1)[-1] + "\n" + text
                for cid, (heading, text) in self.store.chunk_texts(ids).items()}

    def _embed(self, query: str) -> np.ndarray:
        if self.embed_query is None:
            raise InputError("this searcher has no query embedder; use mode='bm25' or pass query_vector.")
        return self.embed_query(query)

    def _check_vector(self, vector: Any) -> np.ndarray:
        """The query vector as float32, refused clearly (``vectors.check_query``) when it is not a
        valid vector of the index's size: NaN or infinite values, all zeros, another size."""
        model = self.store.model
        return check_query_vector(vector, model.dim if model else None, model.model_id if model else None,
                                  self.store.path)

    def _candidates(self, ids: list[int], with_vectors: bool) -> dict[int, Candidate]:
        """Section, heading path (and stored vector, as a unit row for MMR) of each candidate: all
        that ranking needs. A stored value that is not a valid vector is None (MMR: no similarity)."""
        if not ids:
            return {}
        found = self.store.candidates(ids, with_vectors)
        return {cid: Candidate((doc, heading), heading, _unit(vector)) for cid, (doc, heading, vector) in found.items()}

    def _rows(self, ids: list[int]) -> dict[int, _Row]:
        if not ids:
            return {}
        return {cid: _Row(*row) for cid, row in self.store.hit_rows(ids).items()}


def _unit(vector: np.ndarray | None) -> np.ndarray | None:
    """``vector`` scaled to length 1 (MMR's dot product is then the cosine), None stays None."""
    return None if vector is None else vector / np.float32(np.linalg.norm(vector))


def used_weights(hits: Sequence[Hit], weights: Mapping[str, float] | None) -> dict[str, Any]:
    """The list weights and boost this question's fusion used, over the config's settings: its
    plan's (``question.plan``, by the kind of question), else LlamaIndex's ``alpha``, else 1 and 1.
    What a formula or legend shows is then what made the scores."""
    fusion = hits[0].explain.fusion if hits and hits[0].explain is not None else None
    if fusion:
        return {"vector_weight": fusion["vector_weight"], "bm25_weight": fusion["bm25_weight"],
                "score_fusion_vector": fusion["score_fusion_vector"], "heading_boost": fusion["heading_boost"],
                "fusion_why": fusion["why"]}
    if weights is not None:
        return {"vector_weight": weights["vector"], "bm25_weight": weights["bm25"], "fusion_why": "alpha"}
    return {"vector_weight": 1.0, "bm25_weight": 1.0}


def _alpha_weights(alpha: Any) -> dict[str, float] | None:
    """RRF list weights for LlamaIndex's ``alpha`` (None: equal weights)."""
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise InputError(f"alpha must be a number between 0.0 (BM25 only) and 1.0 (vector only), got {alpha!r}.")
    return {"vector": float(alpha), "bm25": 1.0 - float(alpha)}


def _check_lambda(lam: Any) -> float:
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= lam <= 1.0:
        raise InputError(f"mmr_lambda must be a number between 0.0 and 1.0, got {lam!r}.")
    return float(lam)


def _hit(rank: int, score: float, chunk_id: int, row: _Row, ex: Explanation) -> Hit:
    return Hit(
        rank=rank, score=score, chunk_id=chunk_id, node_id=row.node_id, document_id=row.document_id,
        document=row.document, collection=row.collection, heading_path=row.heading_path, text=row.text,
        start_char=row.start_char, end_char=row.end_char, metadata=row.metadata, explain=ex,
        document_status=row.status, document_error=row.error if row.status == "stale" else None, node=row.node,
    )
