"""The query pipeline: embed once, KNN + BM25, RRF, heading boost, MMR, normalise.

Each hit carries the explanation computed in the same pass that scored it, so the
figures shown by ``polaris search --explain`` and the Datasette page cannot drift
from the ranking.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..config import PolarisConfig
from ..db.schema import CHUNKS_WITH_DOCUMENTS, MERGED_METADATA
from ..errors import InputError
from ..store import Store, from_blob
from .boost import boost_terms, boosted_relevance, heading_boost
from .bm25 import bm25
from .bm25_cache import Bm25Cache
from .filters import Filter
from .fuse import Fused, rrf
from .mmr import mmr, mmr_scores
from .normalise import relative_to_top
from .scope import Scope, resolve_scope
from .vector import MAX_K, knn
from .vector_cache import VectorCache

MODES = ("hybrid", "vector", "bm25")
MAX_QUERY_CHARS = 10_000


@dataclass
class Explanation:
    """Per-stage figures for one hit; None where a stage did not see the chunk."""

    vector_rank: int | None = None
    vector_distance: float | None = None
    bm25_rank: int | None = None
    bm25_score: float | None = None
    rrf: float | None = None
    rrf_vector: float | None = None
    rrf_bm25: float | None = None
    boost: float | None = None
    relevance: float | None = None
    mmr_penalty: float | None = None
    score: float = 0.0


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
    """``query`` if it is a string of at most ``MAX_QUERY_CHARS``; InputError otherwise."""
    if not isinstance(query, str):
        raise InputError(f"{what} must be a string, got {type(query).__name__}.")
    if len(query) > MAX_QUERY_CHARS:
        raise InputError(
            f"{what} is {len(query):,} characters; at most {MAX_QUERY_CHARS:,} are accepted. Shorten it"
            " (the embedding model reads only its first few hundred tokens anyway)."
        )
    return query


def clamp_top_k(top_k: int | None, default: int, upper: int = 100) -> int:
    """The 5ire limit rule: default when absent, clamped to 1..100."""
    if top_k is None:
        return default
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InputError(f"top_k must be an integer, got {top_k!r}.")
    return max(1, min(upper, top_k))


class Searcher:
    """Runs queries against one store with one query embedder and one config."""

    max_top_k = 100  # the 5ire clamp; evaluation raises it to rank deeper

    def __init__(
        self,
        store: Store,
        embed_query: Callable[[str], np.ndarray] | None,
        config: PolarisConfig,
        vector_cache: VectorCache | None = None,
        bm25_cache: Bm25Cache | None = None,
    ) -> None:
        self.store = store
        self.embed_query = embed_query
        self.config = config
        self.vector_cache = vector_cache  # exact KNN from RAM for long-lived processes
        self.bm25_cache = bm25_cache  # FTS5's BM25 with common words scored from RAM, likewise

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
    ) -> list[Hit]:
        """The best ``top_k`` chunks for ``query`` in ``mode`` within the scope given.

        ``mmr_lambda`` overrides the configured MMR trade-off for this query; in
        ``vector`` mode giving it re-ranks the vector candidate pool by MMR with the
        cosine similarity as relevance (without it, vector mode is plain KNN).
        ``query_vector`` skips the query embedding (it must have the index's dim).
        ``alpha`` weighs the two lists in hybrid fusion: 1 = vector only, 0 = BM25 only,
        None = equal weights. ``within_collection`` keeps every hit inside one collection
        (the LlamaIndex store's scope). ``top_k`` is clamped to 1..``max_top_k`` (default
        100, the 5ire rule for agents; the LlamaIndex door lifts it).
        """
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}.")
        query = check_query(query).strip()
        lam = _check_lambda(self.config.mmr_lambda if mmr_lambda is None else mmr_lambda)
        weights = _alpha_weights(alpha)
        k = clamp_top_k(top_k, self.config.top_k, max_top_k or self.max_top_k)
        if query_vector is not None:
            query_vector = self._check_vector(query_vector)
        if not query and query_vector is None:
            return []
        with self.store.read() as conn:
            scope = resolve_scope(conn, documents=documents, collections=collections, filters=filters,
                                  node_ids=node_ids, within_collection=within_collection)
        if scope.empty:
            return []
        needs_vector = mode == "vector" or (mode == "hybrid" and (weights is None or weights["vector"] > 0))
        if needs_vector and query_vector is None and self.store.model is not None:
            query_vector = self._check_vector(self._embed(query))  # outside the lock: other threads may read
        with self.store.read():  # one snapshot for every stage
            return self._run(query, k, mode, scope, query_vector, lam if mode == "hybrid" else mmr_lambda, weights)

    def _run(self, query: str, k: int, mode: str, scope: Scope, qvec: np.ndarray | None,
             lam: float | None, weights: dict[str, float] | None = None) -> list[Hit]:
        pool = min(k * self.config.mmr_candidate_multiplier, MAX_K)
        vec_hits: list[tuple[int, float]] = []
        bm_hits: list[tuple[int, float]] = []
        use = weights or {"vector": 1.0, "bm25": 1.0}
        if mode in ("hybrid", "vector") and qvec is not None and (mode == "vector" or use["vector"] > 0):
            vec_hits = self._knn(qvec, pool, scope)  # qvec None: no vectors in this index yet
        if mode in ("hybrid", "bm25") and query and (mode == "bm25" or use["bm25"] > 0):
            bm_hits = self._bm25(query, pool, scope)
        if mode == "hybrid":
            return self._hybrid(query, k, vec_hits, bm_hits, lam, weights)
        if mode == "vector" and lam is not None:
            return self._vector_mmr(k, vec_hits, lam)
        return self._single(k, vec_hits if mode == "vector" else bm_hits, mode)

    def _knn(self, qvec: np.ndarray, k: int, scope: Scope) -> list[tuple[int, float]]:
        if self.vector_cache is not None and self.vector_cache.refresh():
            return self.vector_cache.knn(qvec, k, scope)
        return knn(self.store.conn, qvec, k, scope)

    def _bm25(self, query: str, k: int, scope: Scope) -> list[tuple[int, float]]:
        if self.bm25_cache is not None and self.bm25_cache.refresh():
            return self.bm25_cache.bm25(query, k, scope)
        return bm25(self.store.conn, query, k, scope)

    def _embed(self, query: str) -> np.ndarray:
        if self.embed_query is None:
            raise InputError("this searcher has no query embedder; use mode='bm25' or pass query_vector.")
        return self.embed_query(query)

    def _check_vector(self, vector: Any) -> np.ndarray:
        """The query vector as float32, refused clearly when its size is not the index's."""
        try:
            arr = np.asarray(vector, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise InputError(f"the query vector must be a list of numbers ({exc}).") from None
        model = self.store.model
        if model is not None and arr.shape[0] != model.dim:
            raise InputError(
                f"the query vector has {arr.shape[0]} dims but {self.store.path} holds {model.dim}-dim"
                f" vectors of {model.model_id}; embed the query with that model."
            )
        if not np.all(np.isfinite(arr)):
            raise InputError("the query vector contains NaN or infinite values.")
        return arr

    def _vector_mmr(self, k: int, vec_hits: list[tuple[int, float]], lam: float) -> list[Hit]:
        """MMR over the vector candidates; relevance is the cosine similarity itself."""
        cands = self._candidates([h[0] for h in vec_hits], with_vectors=True)
        vec_hits = [h for h in vec_hits if h[0] in cands]
        if not vec_hits:
            return []
        relevance = np.array([1.0 - d for _, d in vec_hits])
        picks = mmr(relevance, _matrix([cands[cid][1] for cid, _ in vec_hits]), k, lam)
        scores = mmr_scores(picks, lam)
        rows = self._rows([vec_hits[p.index][0] for p in picks])
        out = []
        for rank, (pick, score) in enumerate(zip(picks, scores), start=1):
            cid, distance = vec_hits[pick.index]
            ex = Explanation(vector_rank=pick.index + 1, vector_distance=distance,
                             relevance=float(relevance[pick.index]), mmr_penalty=pick.penalty, score=score)
            out.append(_hit(rank, score, cid, rows[cid], ex))
        return out

    def _single(self, k: int, hits: list[tuple[int, float]], mode: str) -> list[Hit]:
        """Vector-only or BM25-only: the retriever's own order and score, top = 1.0."""
        hits = hits[:k]
        rows = self._rows([h[0] for h in hits])
        raw = [(1.0 - v) if mode == "vector" else v for _, v in hits]
        scores = relative_to_top(raw)
        out = []
        for rank, ((cid, value), score) in enumerate(zip(hits, scores), start=1):
            ex = Explanation(score=score)
            if mode == "vector":
                ex.vector_rank, ex.vector_distance = rank, value
            else:
                ex.bm25_rank, ex.bm25_score = rank, value
            out.append(_hit(rank, score, cid, rows[cid], ex))
        return out

    def _hybrid(self, query: str, k: int, vec_hits: list, bm_hits: list, lam: float,
                weights: dict[str, float] | None = None) -> list[Hit]:
        cfg = self.config
        lists = {"vector": [h[0] for h in vec_hits], "bm25": [h[0] for h in bm_hits]}
        cands = self._candidates(lists["vector"] + lists["bm25"], with_vectors=lam < 1.0)
        fused = [f for f in rrf({n: ids for n, ids in lists.items() if ids}, cfg.rrf_k, weights) if f.id in cands]
        if not fused:
            return []
        terms = boost_terms(query)
        boosts = [heading_boost(terms, cands[f.id][0], cfg.heading_boost) for f in fused]
        relevance = boosted_relevance(np.array([f.score for f in fused]), np.array(boosts))
        vectors = _matrix([cands[f.id][1] for f in fused]) if lam < 1.0 else None
        picks = mmr(relevance, vectors, k, lam)
        scores = mmr_scores(picks, lam)
        rows = self._rows([fused[p.index].id for p in picks])
        vec_info = dict(vec_hits)
        bm_info = dict(bm_hits)
        out = []
        for rank, (pick, score) in enumerate(zip(picks, scores), start=1):
            f = fused[pick.index]
            ex = _explain(f, vec_info, bm_info, boosts[pick.index], float(relevance[pick.index]), pick.penalty, score)
            out.append(_hit(rank, score, f.id, rows[f.id], ex))
        return out

    def _candidates(self, ids: list[int], with_vectors: bool) -> dict[int, tuple[str, np.ndarray | None]]:
        """Heading path (and stored vector) of each candidate: all that fusion, boost and MMR need."""
        if not ids:
            return {}
        column = "embedding" if with_vectors else "NULL"
        sql = f"SELECT id, heading_path, {column} FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
        rows = self.store.conn.execute(sql, (json.dumps(ids),)).fetchall()
        return {r[0]: (r[1], from_blob(r[2]) if r[2] is not None else None) for r in rows}

    def _rows(self, ids: list[int]) -> dict[int, _Row]:
        if not ids:
            return {}
        sql = (
            "SELECT c.id, c.document_id, coalesce(d.path, d.id), d.collection, c.node_id, c.heading_path, c.text,"
            f" c.start_char, c.end_char, {MERGED_METADATA}, d.status, d.error, c.node"
            f" FROM {CHUNKS_WITH_DOCUMENTS} WHERE c.id IN (SELECT value FROM json_each(?))"
        )
        out = {}
        for r in self.store.conn.execute(sql, (json.dumps(ids),)).fetchall():
            out[r[0]] = _Row(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], json.loads(r[9]), r[10], r[11], r[12])
        return out


def _matrix(vectors: list[np.ndarray | None]) -> np.ndarray:
    """Candidate vectors as rows (zeros for a chunk stored without one)."""
    dim = next((v.shape[0] for v in vectors if v is not None), 1)
    zero = np.zeros(dim, dtype=np.float32)
    return np.stack([v if v is not None else zero for v in vectors])


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


def _explain(f: Fused, vec: dict, bm: dict, boost: float, relevance: float, penalty: float, score: float) -> Explanation:
    return Explanation(
        vector_rank=f.ranks.get("vector"),
        vector_distance=vec.get(f.id),
        bm25_rank=f.ranks.get("bm25"),
        bm25_score=bm.get(f.id),
        rrf=f.score,
        rrf_vector=f.contributions.get("vector"),
        rrf_bm25=f.contributions.get("bm25"),
        boost=boost,
        relevance=relevance,
        mmr_penalty=penalty,
        score=score,
    )


def _hit(rank: int, score: float, chunk_id: int, row: _Row, ex: Explanation) -> Hit:
    return Hit(
        rank=rank, score=score, chunk_id=chunk_id, node_id=row.node_id, document_id=row.document_id,
        document=row.document, collection=row.collection, heading_path=row.heading_path, text=row.text,
        start_char=row.start_char, end_char=row.end_char, metadata=row.metadata, explain=ex,
        document_status=row.status, document_error=row.error if row.status == "stale" else None, node=row.node,
    )
