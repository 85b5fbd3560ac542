"""Retrieval quality: Polaris modes, an ablation of every pipeline stage, and the LlamaIndex
alternatives a user would reach for, on SciFact (BEIR) and anthropic_docs.

    python benchmarks/quality.py [EVAL_DIR] [--skip-llamaindex] [--quick]

EVAL_DIR defaults to ``../shared/eval`` relative to the repository; nothing from it is
copied into the repository. Writes ``benchmarks/out/quality.json`` and ``quality.md``.

How each set is scored
- SciFact: the cached evaluation index of ``polaris eval`` (``build_eval_index``: corpus,
  model and chunker key; bundled all-MiniLM-L6-v2). A document's rank is its best chunk's.
  Decisions are tuned on ``qrels/train.tsv`` (809 queries); ``qrels/test.tsv`` is reported.
- anthropic_docs: the 232 sections are put back into their 45 pages (ordered by
  ``section_index_in_page``; each section becomes ``## title`` + its body, the page gets
  ``# <slug>`` from its URL), the pages are indexed as Markdown by the engine's Indexer
  (the real chunker), and each retrieved chunk is mapped back to the sections whose
  character span in the rebuilt page its ``[start_char, end_char)`` overlaps; a section
  takes its best chunk's rank (max score per section).

Ablations never re-embed: the index is built once, every query is embedded once
(cached by text) and passed as ``query_vector``; only query-time settings change.
KNN and BM25 candidate lists are memoised per (query, pool size, BM25 weights) inside
this script, so a config changes only RRF, boost and MMR, which run the engine's code.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, out_dir, pcts, publish, save_json, table  # noqa: E402

from llama_index_polaris.engine.config import SETTINGS, load_config  # noqa: E402
from llama_index_polaris.engine.tune.evaluate import (  # noqa: E402
    build_eval_index, corpus_markdown, documents_in_order, load_beir, read_qrels, score_run,
)
from llama_index_polaris.engine.ingest.indexer import SourceDocument  # noqa: E402
from llama_index_polaris.engine.sqlite import bm25 as bm25_mod  # noqa: E402
from llama_index_polaris.engine.search import pipeline  # noqa: E402
from llama_index_polaris.engine.storage.scope import Scope  # noqa: E402
from llama_index_polaris.engine.index import PolarisIndex  # noqa: E402
from llama_index_polaris.engine.sqlite.store import from_blob, text_hash  # noqa: E402

MODEL = "all-minilm-l6-v2"
DEPTH = 100
LATENCY_QUERIES = 100  # LlamaIndex's SimpleVectorStore scores every node in Python: keep its timing pass short
PUBLISHED_SCIFACT = [
    ("BM25, Anserini multifield (BEIR paper)", 0.665, 0.908),
    ("BM25, Anserini flat", 0.679, 0.925),
    ("BM25, bm25s (MTEB baseline)", 0.687, 0.913),
    ("all-MiniLM-L6-v2 (MTEB)", 0.645, 0.925),
]
PUBLISHED_ANTHROPIC = {"recall@3": 0.659, "mrr@3": 0.737}


# -- query vectors, once per text --------------------------------------------------------
class QueryVectors:
    """Embeds each query text once; records the time of each embedding."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}
        self.seconds: list[float] = []

    def __call__(self, text: str) -> np.ndarray:
        text = text.strip()
        vec = self.cache.get(text)
        if vec is None:
            t = time.perf_counter()
            vec = self.embedder.embed_query(text)
            self.seconds.append(time.perf_counter() - t)
            self.cache[text] = vec
        return vec


# -- candidate memo: KNN and BM25 lists depend only on the query, pool and BM25 weights ----
_KNN_MEMO: dict[Any, Any] = {}
_BM25_MEMO: dict[Any, Any] = {}


@contextlib.contextmanager
def memoised_candidates(conn_id: str):
    """Patch the SQLite Store's knn/bm25 (``search.vector.knn``, ``search.bm25.bm25``) with memoised
    versions (unscoped queries only)."""
    from llama_index_polaris.engine.sqlite import vector as vector_mod

    real_knn, real_bm25 = vector_mod.knn, bm25_mod.bm25

    def knn(conn, query, k, scope=Scope(), **kw):
        key = (conn_id, np.asarray(query, dtype="<f4").tobytes(), k, scope, tuple(sorted(kw.items())))
        if key not in _KNN_MEMO:
            _KNN_MEMO[key] = real_knn(conn, query, k, scope, **kw)
        return _KNN_MEMO[key]

    def bm25(conn, query, limit, scope=Scope()):
        key = (conn_id, query, limit, scope, bm25_mod.TEXT_WEIGHT, bm25_mod.HEADING_WEIGHT)
        if key not in _BM25_MEMO:
            _BM25_MEMO[key] = real_bm25(conn, query, limit, scope)
        return _BM25_MEMO[key]

    vector_mod.knn, bm25_mod.bm25 = knn, bm25
    try:
        yield
    finally:
        vector_mod.knn, bm25_mod.bm25 = real_knn, real_bm25


_REAL_BM25_SQL = bm25_mod.bm25_sql


def _weighted_bm25_sql(scope: Any) -> tuple[str, list[Any]]:
    # The engine orders by FTS5's ``rank``, which is bm25() with default weights: the
    # weights in its SELECT change the score shown but not the order. Order by the
    # weighted score so that the weights are really measured.
    sql, args = _REAL_BM25_SQL(scope)
    return sql.replace("ORDER BY rank", "ORDER BY score DESC"), args


@contextlib.contextmanager
def bm25_weights(text: float, heading: float):
    """bm25(chunks_fts, text, heading): the column weights, applied to the order too."""
    old = bm25_mod.TEXT_WEIGHT, bm25_mod.HEADING_WEIGHT
    bm25_mod.TEXT_WEIGHT, bm25_mod.HEADING_WEIGHT = text, heading
    if (text, heading) != old:
        bm25_mod.bm25_sql = _weighted_bm25_sql
    try:
        yield
    finally:
        bm25_mod.TEXT_WEIGHT, bm25_mod.HEADING_WEIGHT = old
        bm25_mod.bm25_sql = _REAL_BM25_SQL


# -- configurations ----------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One row of the ablation: a mode and query-time settings."""

    name: str
    mode: str = "hybrid"
    rrf_k: float = 60
    heading_boost: float = 0.0
    mmr_lambda: float = 1.0
    unit: str = "chunk"
    bm25_text: float = 1.0
    bm25_heading: float = 1.0
    group: str = ""
    score_fusion: float = 0.0  # the ablation's rows fuse ranks alone unless they say otherwise

    def overrides(self) -> dict[str, Any]:
        return {"rrf_k": self.rrf_k, "heading_boost": self.heading_boost, "mmr_lambda": self.mmr_lambda,
                "score_fusion": self.score_fusion}


def base_variants() -> list[Variant]:
    v = [
        Variant("vector", mode="vector", group="modes"),
        Variant("bm25", mode="bm25", group="modes"),
        Variant("RRF (k=60, no boost, no MMR)", group="modes"),
        Variant("spec constants (k=60, boost 0.05 raw, MMR 0.7)", heading_boost=0.05, mmr_lambda=0.7,
                group="modes"),
    ]
    for k in (10, 20, 40, 100):
        v.append(Variant(f"RRF k={k}", rrf_k=k, group="rrf_k"))
    for w in (0.02, 0.05, 0.1, 0.2, 0.3):
        v.append(Variant(f"RRF + boost {w} (after normalising to [0,1])", heading_boost=w, group="boost"))
    for lam in (0.5, 0.7, 0.85, 0.9, 1.0):
        v.append(Variant(f"RRF + MMR {lam}", mmr_lambda=lam, group="mmr"))
    for t, h in ((1.0, 0.0), (1.0, 0.5), (1.0, 2.0), (1.0, 5.0)):
        v.append(Variant(f"bm25 weights text {t}, heading {h}", mode="bm25", bm25_text=t, bm25_heading=h,
                         group="bm25w"))
        v.append(Variant(f"RRF with bm25 weights text {t}, heading {h}", bm25_text=t, bm25_heading=h,
                         group="bm25w"))
    for k in (10, 20):
        for w in (0.05, 0.1, 0.2):
            v.append(Variant(f"RRF k={k} + boost {w}", rrf_k=k, heading_boost=w, group="combo"))
    defaults = {s.name: s.default for s in SETTINGS}
    for unit in ("chunk", "section"):
        v.append(Variant(f"defaults, unit {unit}", rrf_k=defaults["rrf_k"], heading_boost=defaults["heading_boost"],
                         unit=unit, group="unit", score_fusion=defaults["score_fusion"]))
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        v.append(Variant(f"defaults with score_fusion {share}", rrf_k=defaults["rrf_k"],
                         heading_boost=defaults["heading_boost"], unit="section", group="fusion", score_fusion=share))
    return v


def with_boost_and_mmr(best: Variant) -> list[Variant]:
    """MMR sweep on top of the selected boost setting."""
    out = []
    for lam in (0.5, 0.7, 0.85, 0.9, 1.0):
        out.append(Variant(f"{best.name} + MMR {lam}", rrf_k=best.rrf_k, heading_boost=best.heading_boost,
                           mmr_lambda=lam, unit=best.unit, bm25_text=best.bm25_text, score_fusion=best.score_fusion,
                           bm25_heading=best.bm25_heading, group="boost+mmr"))
    return out


# -- evaluation sets ---------------------------------------------------------------------
@dataclass
class EvalSet:
    """Queries and qrels, an index, and how hits become a ranking of judged ids."""

    name: str
    index: PolarisIndex
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    to_ranking: Callable[[Sequence[Any]], list[str]]
    metrics: Callable[[dict[str, list[str]], dict[str, dict[str, int]]], dict[str, float]]


def scifact_metrics(run: dict, qrels: dict) -> dict[str, float]:
    return score_run(run, qrels)


SECTION_METRICS = ("recall@3", "mrr@3", "ndcg@10", "recall@10", "mrr@10")


def section_metrics(run: dict, qrels: dict) -> dict[str, float]:
    """Recall@3, MRR@3 (the dataset authors' figures), nDCG@10, Recall@10, MRR@10."""
    return score_run(run, qrels, SECTION_METRICS)


def run_variant(es: EvalSet, qv: QueryVectors, variant: Variant, cfg: Any, depth: int = DEPTH) -> dict[str, float]:
    """The engine's own Searcher (one scoring path), with this variant's query-time settings."""
    searcher = pipeline.Searcher(es.index.store, None, cfg.replace(**variant.overrides(), unit=variant.unit))
    searcher.max_top_k = depth
    run = {}
    with bm25_weights(variant.bm25_text, variant.bm25_heading):
        for qid, text in es.queries.items():
            vec = qv(text) if variant.mode != "bm25" else None
            hits = searcher.search(text, top_k=depth, mode=variant.mode, query_vector=vec)
            run[qid] = es.to_ranking(hits)
    return es.metrics(run, es.qrels)


# -- SciFact -----------------------------------------------------------------------------
def scifact_sets(eval_dir: Path, cfg: Any, quick: bool) -> tuple[Any, EvalSet, EvalSet, Any]:
    beir = load_beir(eval_dir / "scifact", "test")
    t = time.perf_counter()
    index, report = build_eval_index(beir, cfg)
    build = {"seconds": time.perf_counter() - t, "summary": report.summary()}
    train_qrels = read_qrels(eval_dir / "scifact" / "qrels" / "train.tsv")

    def ranking(hits: Sequence[Any]) -> list[str]:
        return documents_in_order(h.document_id for h in hits)

    def queries_for(qrels: dict) -> dict[str, str]:
        qs = {q: beir.queries[q] for q in qrels if q in beir.queries}
        if quick:
            qs = dict(list(qs.items())[:60])
        return qs

    test_q, train_q = queries_for(beir.qrels), queries_for(train_qrels)
    test = EvalSet("scifact-test", index, test_q, {q: beir.qrels[q] for q in test_q}, ranking, scifact_metrics)
    train = EvalSet("scifact-train", index, train_q, {q: train_qrels[q] for q in train_q}, ranking, scifact_metrics)
    return beir, test, train, build


# -- anthropic_docs: pages rebuilt from sections -----------------------------------------
def slug_title(url: str) -> str:
    slug = url.rstrip("/").rsplit("/", 1)[-1] or url
    return slug.replace("-", " ").replace("_", " ").capitalize()


def rebuild_pages(corpus: dict[str, dict]) -> tuple[list[SourceDocument], dict[str, list[tuple[str, int, int]]]]:
    """Pages as Markdown and, per page, (section id, start, end) character spans."""
    pages: dict[str, list[dict]] = {}
    for d in corpus.values():
        pages.setdefault(d["metadata"]["page_url"], []).append(d)
    docs, spans = [], {}
    for url, sections in sorted(pages.items(), key=lambda kv: kv[1][0]["metadata"]["page_index"]):
        sections.sort(key=lambda d: d["metadata"]["section_index_in_page"])
        text = f"# {slug_title(url)}\n\n"
        page_spans = []
        for i, d in enumerate(sections):
            title = d["title"].strip()
            body = d["text"]
            if body.startswith(d["title"]):
                body = body[len(d["title"]):]
            start = 0 if i == 0 else len(text)  # the page heading belongs to the first section
            text += f"## {title}\n\n{body.strip()}\n\n"
            page_spans.append((d["_id"], start, len(text)))
        docs.append(SourceDocument(id=url, text=text, name=slug_title(url), metadata={"url": url}))
        spans[url] = page_spans
    return docs, spans


def sections_in_order(hits: Iterable[Any], spans: dict[str, list[tuple[str, int, int]]]) -> list[str]:
    """Chunks (best first) to sections: each section at its best overlapping chunk's place."""
    out: dict[str, None] = {}
    for h in hits:
        for sid, s, e in spans.get(h.document_id, ()):
            if h.start_char is None or min(e, h.end_char) > max(s, h.start_char):
                out.setdefault(sid, None)
    return list(out)


def anthropic_set(eval_dir: Path, cfg: Any) -> tuple[EvalSet, dict]:
    beir = load_beir(eval_dir / "anthropic_docs", "test")
    docs, spans = rebuild_pages(beir.corpus)
    key = hashlib.sha256(json.dumps([[d.id, d.text] for d in docs]).encode()).hexdigest()[:12]
    path = out_dir() / f"anthropic_docs-{MODEL}-{key}.db"
    index = PolarisIndex(path, config=cfg)
    t = time.perf_counter()
    report = index.indexer().index_documents(docs, total=len(docs))
    info = {"seconds": time.perf_counter() - t, "summary": report.summary(), "pages": len(docs),
            "chunks": index.store.counts().get("chunks"), "db": str(path)}
    qs = {q: beir.queries[q] for q in beir.qrels if q in beir.queries}
    es = EvalSet("anthropic_docs", index, qs, beir.qrels, lambda hits: sections_in_order(hits, spans),
                 section_metrics)
    es.spans = spans  # type: ignore[attr-defined]
    return es, info


# -- LlamaIndex alternatives -------------------------------------------------------------
@dataclass
class _Span:
    document_id: str
    start_char: int | None
    end_char: int | None


def llamaindex_nodes_scifact(beir: Any, index: PolarisIndex) -> tuple[list[Any], dict]:
    """One TextNode per corpus document (title + text, as Polaris indexes it), vectors reused.

    A document Polaris stored as a single chunk whose embedded text is the whole
    document reuses that vector (identical input, identical model); the rest
    (documents Polaris split) are embedded whole with PolarisEmbedding, as a
    LlamaIndex user would, truncated by the model at its window.
    """
    from llama_index.core.schema import TextNode

    rows = index.store.conn.execute(
        "SELECT document_id, count(*), max(text_hash), max(embedding) FROM chunks GROUP BY document_id").fetchall()
    single = {r[0]: (r[2], r[3]) for r in rows if r[1] == 1}
    nodes, todo = [], []
    for did, d in beir.corpus.items():
        text = corpus_markdown(d)
        node = TextNode(text=text, id_=did, metadata={"document_id": did})
        got = single.get(did)
        if got is not None and got[0] == text_hash(text):
            node.embedding = from_blob(got[1]).tolist()
        else:
            todo.append(node)
        nodes.append(node)
    t = time.perf_counter()
    if todo:
        vecs = index.embedder.embed_documents([n.text for n in todo])
        for n, v in zip(todo, vecs):
            n.embedding = v.tolist()
    return nodes, {"nodes": len(nodes), "reused_vectors": len(nodes) - len(todo), "embedded": len(todo),
                   "embed_seconds": time.perf_counter() - t}


def llamaindex_nodes_chunks(index: PolarisIndex) -> list[Any]:
    """The chunks Polaris made, as TextNodes with Polaris's stored vectors."""
    from llama_index.core.schema import TextNode

    nodes = []
    for cid, did, text, s, e, blob in index.store.conn.execute(
            "SELECT id, document_id, text, start_char, end_char, embedding FROM chunks ORDER BY id"):
        nodes.append(TextNode(text=text, id_=str(cid), embedding=from_blob(blob).tolist(),
                              metadata={"document_id": did, "start_char": s, "end_char": e}))
    return nodes


class LlamaIndexSystems:
    """VectorStoreIndex (default SimpleVectorStore) and QueryFusionRetriever(vector + BM25)."""

    def __init__(self, nodes: list[Any], embed_model: Any, top_k: int) -> None:
        from llama_index.core import VectorStoreIndex
        from llama_index.core.llms import MockLLM
        from llama_index.core.retrievers import QueryFusionRetriever

        t = time.perf_counter()
        self.vindex = VectorStoreIndex(nodes, embed_model=embed_model)
        self.build_vector_s = time.perf_counter() - t
        self.vector = self.vindex.as_retriever(similarity_top_k=top_k)
        self.bm25 = None
        self.fusion = None
        self.bm25_error = None
        try:
            import Stemmer
            from llama_index.retrievers.bm25 import BM25Retriever

            t = time.perf_counter()
            self.bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=top_k,
                                                    stemmer=Stemmer.Stemmer("english"), language="english")
            self.build_bm25_s = time.perf_counter() - t
            self.fusion = QueryFusionRetriever([self.vector, self.bm25], llm=MockLLM(), similarity_top_k=top_k,
                                               num_queries=1, mode="reciprocal_rerank", use_async=False)
        except ImportError as exc:
            self.bm25_error = f"llama-index-retrievers-bm25 not installed ({exc})"

    def systems(self) -> dict[str, Any]:
        out = {"LlamaIndex VectorStoreIndex (SimpleVectorStore)": self.vector}
        if self.bm25 is not None:
            out["LlamaIndex BM25Retriever (bm25s)"] = self.bm25
            out["LlamaIndex QueryFusionRetriever (vector + BM25, RRF)"] = self.fusion
        return out


def run_llamaindex(retriever: Any, es: EvalSet, qv: QueryVectors, span_of: Callable[[Any], Any]) -> tuple[dict, list]:
    """Quality and per-query latency (query vector precomputed: excludes the embedding)."""
    from llama_index.core.schema import QueryBundle

    run, secs = {}, []
    for qid, text in es.queries.items():
        qb = QueryBundle(query_str=text.strip(), embedding=qv(text).tolist())
        t = time.perf_counter()
        res = retriever.retrieve(qb)
        secs.append(time.perf_counter() - t)
        run[qid] = es.to_ranking([span_of(n) for n in res])
    return es.metrics(run, es.qrels), secs


def polaris_latency(es: EvalSet, qv: QueryVectors, variant: Variant, cfg: Any, top_k: int) -> dict:
    """Per-query latency of the real Searcher (no memo, no row cache), query vector given."""
    searcher = pipeline.Searcher(es.index.store, None, cfg.replace(**variant.overrides()))
    searcher.max_top_k = max(100, top_k)
    secs = []
    with bm25_weights(variant.bm25_text, variant.bm25_heading):
        for text in es.queries.values():
            vec = qv(text) if variant.mode != "bm25" else None
            t = time.perf_counter()
            searcher.search(text, top_k=top_k, mode=variant.mode, query_vector=vec)
            secs.append(time.perf_counter() - t)
    return pcts(secs)


def llamaindex_latency(retriever_factory: Callable[[], Any], es: EvalSet, qv: QueryVectors) -> dict:
    from llama_index.core.schema import QueryBundle

    retriever = retriever_factory()
    secs = []
    for text in list(es.queries.values())[:LATENCY_QUERIES]:
        qb = QueryBundle(query_str=text.strip(), embedding=qv(text).tolist())
        t = time.perf_counter()
        retriever.retrieve(qb)
        secs.append(time.perf_counter() - t)
    return pcts(secs)


# -- main --------------------------------------------------------------------------------
def selection_score(r: dict) -> float:
    """Tuning objective: mean nDCG@10 of SciFact train and anthropic_docs (never test)."""
    return (r["scifact-train"]["ndcg@10"] + r["anthropic_docs"]["ndcg@10"]) / 2


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL), help="folder holding scifact/ and anthropic_docs/")
    ap.add_argument("--skip-llamaindex", action="store_true")
    ap.add_argument("--quick", action="store_true", help="60 SciFact queries per split (smoke run)")
    ap.add_argument("--only-group", metavar="GROUP",
                    help="re-run one ablation group (e.g. bm25w) into the existing quality.json and re-render")
    ap.add_argument("--latency-top-k", type=int, default=10)
    ap.add_argument("--li-scifact-nodes", choices=("chunks", "docs"), default="chunks",
                    help="LlamaIndex nodes on SciFact: Polaris's chunks (vectors reused) or whole documents"
                         " (documents Polaris split are embedded again)")
    args = ap.parse_args(argv)
    eval_dir = Path(args.eval_dir).resolve()
    cfg = load_config(use_user_config=False, model_id=MODEL)
    results: dict[str, Any] = {"machine": machine(), "config_defaults": cfg.as_dict(), "eval_dir": str(eval_dir),
                               "latency_top_k": args.latency_top_k}
    t0 = time.perf_counter()

    print("SciFact: opening / building the cached eval index ...", file=sys.stderr, flush=True)
    beir, sf_test, sf_train, sf_build = scifact_sets(eval_dir, cfg, args.quick)
    results["scifact_index"] = {**sf_build, "chunks": sf_test.index.store.counts().get("chunks"),
                                "db": str(sf_test.index.path)}
    print(f"  {results['scifact_index']}", file=sys.stderr, flush=True)
    print("anthropic_docs: rebuilding pages and indexing them ...", file=sys.stderr, flush=True)
    an, an_build = anthropic_set(eval_dir, cfg)
    results["anthropic_index"] = an_build
    print(f"  {an_build}", file=sys.stderr, flush=True)

    qv = QueryVectors(sf_test.index.embedder)
    sets = [sf_train, sf_test, an]
    for es in sets:
        for text in es.queries.values():
            qv(text)
    results["query_embedding_ms"] = pcts(qv.seconds)

    ablation: dict[str, dict] = {}

    def evaluate(v: Variant) -> dict:
        if v.name not in ablation:
            t = time.perf_counter()
            ablation[v.name] = {"variant": v.__dict__, **{
                es.name: run_variant(es, qv, v, cfg) for es in sets}}
            print(f"  {v.name}: train {ablation[v.name]['scifact-train']['ndcg@10']:.4f}"
                  f" test {ablation[v.name]['scifact-test']['ndcg@10']:.4f}"
                  f" anthropic nDCG@10 {ablation[v.name]['anthropic_docs']['ndcg@10']:.4f}"
                  f" R@3 {ablation[v.name]['anthropic_docs']['recall@3']:.4f}"
                  f" ({time.perf_counter() - t:.0f}s)", file=sys.stderr, flush=True)
            save_json("quality-ablation-partial.json", ablation)
        return ablation[v.name]

    if args.only_group:
        previous = json.loads((out_dir() / "quality.json").read_text())
        ablation.update(previous["ablation"])
        with memoised_candidates("bench"):
            for v in base_variants():
                if v.group in args.only_group.split(","):
                    ablation.pop(v.name, None)
                    evaluate(v)
        previous["ablation"] = ablation
        hybrids = [Variant(**r["variant"]) for r in ablation.values() if r["variant"]["mode"] == "hybrid"]
        best = max(hybrids, key=lambda v: selection_score(ablation[v.name]))
        if best.name != previous["selected"]:
            previous["selected"] = best.name
            sel = Variant(**{**best.__dict__, "name": "selected"})
            previous["polaris_latency_ms"]["selected"] = {
                es.name: polaris_latency(es, qv, sel, cfg, args.latency_top_k) for es in (sf_test, an)}
        previous.setdefault("notes", []).append(f"group {args.only_group} re-run at {time.strftime('%H:%M')}")
        save_json("quality.json", previous)
        md = render(previous)
        (out_dir() / "quality.md").write_text(md)
        print(md)
        return previous

    print("ablation ...", file=sys.stderr, flush=True)
    with memoised_candidates("bench"):
        for v in base_variants():
            evaluate(v)
        boosts = [Variant(**r["variant"]) for r in ablation.values() if r["variant"]["group"] in ("boost", "modes")
                  and r["variant"]["mode"] == "hybrid" and r["variant"]["mmr_lambda"] == 1.0]
        best_boost = max(boosts, key=lambda v: selection_score(ablation[v.name]))
        results["selected_boost"] = best_boost.name
        for v in with_boost_and_mmr(best_boost):
            evaluate(v)
        hybrids = [Variant(**r["variant"]) for r in ablation.values() if r["variant"]["mode"] == "hybrid"]
        best = max(hybrids, key=lambda v: selection_score(ablation[v.name]))
        results["selected"] = best.name
    results["ablation"] = ablation

    # the three modes from the same index, timed with the real Searcher (no memo)
    defaults = Variant("spec constants", heading_boost=0.05, mmr_lambda=0.7, rrf_k=60)
    latency = {}
    for v in (Variant("vector", mode="vector"), Variant("bm25", mode="bm25"), defaults,
              Variant("RRF (k=60, no boost, no MMR)"), Variant(**{**best.__dict__, "name": "selected"})):
        latency[v.name] = {es.name: polaris_latency(es, qv, v, cfg, args.latency_top_k) for es in (sf_test, an)}
    results["polaris_latency_ms"] = latency

    if not args.skip_llamaindex:
        print("LlamaIndex alternatives ...", file=sys.stderr, flush=True)
        results["llamaindex"] = llamaindex_part(beir, sf_test, an, qv, args.latency_top_k, args.li_scifact_nodes)
    results["seconds"] = time.perf_counter() - t0
    publish("quality", results, render)
    return results


def llamaindex_part(beir: Any, sf: EvalSet, an: EvalSet, qv: QueryVectors, latency_k: int,
                    node_mode: str = "chunks") -> dict:
    from llama_index_polaris.embedding import PolarisEmbedding

    embed = PolarisEmbedding(model_id=MODEL)
    out: dict[str, Any] = {}
    # SciFact: Polaris's chunks with their vectors (same chunks, same vectors: only retrieval
    # differs), or --li-scifact-nodes docs: one node per corpus document (title + text)
    if node_mode == "docs":
        nodes, info = llamaindex_nodes_scifact(beir, sf.index)
    else:
        nodes = llamaindex_nodes_chunks(sf.index)
        info = {"nodes": len(nodes), "kind": "Polaris chunks, vectors reused; a document ranks at its best chunk"}
    out["scifact_nodes"] = info
    doc_span = lambda n: _Span(n.node.metadata["document_id"], None, None)  # noqa: E731
    out["scifact-test"], out["bm25_error"] = llamaindex_set(nodes, embed, sf, qv, doc_span, latency_k, "ndcg@10")
    del nodes
    # anthropic_docs: the chunks Polaris made
    chunk_span = lambda n: _Span(n.node.metadata["document_id"], n.node.metadata["start_char"],  # noqa: E731
                                 n.node.metadata["end_char"])
    out["anthropic_docs"], _ = llamaindex_set(llamaindex_nodes_chunks(an.index), embed, an, qv, chunk_span, latency_k,
                                              "recall@3")
    return out


def llamaindex_set(nodes: list, embed: Any, es: EvalSet, qv: QueryVectors, span: Any, latency_k: int,
                   shown: str) -> tuple[dict, Any]:
    """Every LlamaIndex system over ``nodes`` on one set: metrics at depth 100, then latency at ``latency_k``."""
    li = LlamaIndexSystems(nodes, embed, DEPTH)
    out = {}
    for name, r in li.systems().items():
        metrics, secs = run_llamaindex(r, es, qv, span)
        out[name] = {**metrics, "latency_depth100_ms": pcts(secs)}
        print(f"  {name} {es.name}: {shown} {metrics[shown]:.4f}", file=sys.stderr, flush=True)
    for name, r in LlamaIndexSystems(nodes, embed, latency_k).systems().items():
        out[name]["latency_ms"] = llamaindex_latency(lambda r=r: r, es, qv)
    return out, li.bm25_error


def render(r: dict) -> str:
    ab = r["ablation"]
    lines = ["## Retrieval quality", "", f"Machine: {machine_line(r['machine'])}.", "",
             f"Model: bundled {MODEL} (int8 ONNX). Depth {DEPTH} for every system (R@100 needs it);"
             " SciFact scores a document at its best chunk's rank.", ""]
    sf_i, an_i = r["scifact_index"], r["anthropic_index"]
    lines += [f"SciFact index: {sf_i['chunks']} chunks ({sf_i['summary']}). anthropic_docs: {an_i['pages']} pages"
              f" rebuilt from 232 sections, {an_i['chunks']} chunks ({an_i['summary']}).", ""]
    qe = r["query_embedding_ms"]
    lines += [f"Query embedding (each query once): p50 {qe['p50']:.1f} ms, p95 {qe['p95']:.1f} ms over {qe['n']} queries.", ""]

    # main SciFact table
    lines += ["### SciFact test (300 queries), one index, three modes", ""]
    rows = []
    for name in ("vector", "bm25", "RRF (k=60, no boost, no MMR)", "spec constants (k=60, boost 0.05 raw, MMR 0.7)",
                 r["selected"]):
        m = ab[name]["scifact-test"]
        rows.append([("selected: " if name == r["selected"] else "") + name, m["ndcg@10"], m["recall@10"],
                     m["recall@100"], m["mrr@10"]])
    for name, nd, r100 in PUBLISHED_SCIFACT:
        rows.append([f"published: {name}", nd, None, r100, None])
    lines += [table(["system", "nDCG@10", "R@10", "R@100", "MRR@10"], rows), ""]

    lines += ["### anthropic_docs (100 questions, sections from re-chunked pages)", ""]
    rows = []
    for name in ("vector", "bm25", "RRF (k=60, no boost, no MMR)", "spec constants (k=60, boost 0.05 raw, MMR 0.7)",
                 r["selected"]):
        m = ab[name]["anthropic_docs"]
        rows.append([("selected: " if name == r["selected"] else "") + name, m["recall@3"], m["mrr@3"], m["ndcg@10"],
                     m["recall@10"]])
    rows.append(["published: voyage-2 embeddings (dataset authors)", 0.659, 0.737, None, None])
    lines += [table(["system", "R@3", "MRR@3", "nDCG@10", "R@10"], rows), ""]

    lines += ["### Ablation (tuned on SciFact train + anthropic_docs; SciFact test reported, not used to choose)", "",
              "Selection score = mean of SciFact-train nDCG@10 and anthropic_docs nDCG@10.", ""]
    rows = []
    for name, res in ab.items():
        rows.append([name, res["scifact-train"]["ndcg@10"], res["scifact-test"]["ndcg@10"],
                     res["scifact-test"]["recall@100"], res["anthropic_docs"]["recall@3"],
                     res["anthropic_docs"]["mrr@3"], res["anthropic_docs"]["ndcg@10"],
                     selection_score(res) if res["variant"]["mode"] == "hybrid" else None])
    lines += [table(["variant", "SciFact train nDCG@10", "SciFact test nDCG@10", "test R@100", "anthropic R@3",
                     "anthropic MRR@3", "anthropic nDCG@10", "selection"], rows), ""]
    lines += [f"Best boost setting on the tuning data: **{r['selected_boost']}**; best hybrid overall:"
              f" **{r['selected']}**.", ""]

    lat = r["polaris_latency_ms"]
    if "llamaindex" in r:
        li = r["llamaindex"]
        lines += ["### Against LlamaIndex (same model, same vectors, same run)", "",
                  f"Latency: top_k={r.get('latency_top_k', 10)}, query vector precomputed (add the query embedding"
                  f" above for end to end), p50/p95 ms. SciFact nodes: {li['scifact_nodes']}."
                  " anthropic_docs nodes: Polaris's own chunks and vectors.", ""]
        if li.get("bm25_error"):
            lines += [f"BM25 retriever unavailable: {li['bm25_error']}", ""]
        rows = []
        for label, key in (("Polaris vector", "vector"), ("Polaris bm25", "bm25"),
                           ("Polaris hybrid (spec constants: k=60, boost 0.05 raw, MMR 0.7)", "spec constants (k=60, boost 0.05 raw, MMR 0.7)"),
                           ("Polaris hybrid (selected)", r["selected"])):
            latkey = {"spec constants (k=60, boost 0.05 raw, MMR 0.7)": "spec constants"}.get(key, key)
            latkey = "selected" if key == r["selected"] else latkey
            s, a = ab[key]["scifact-test"], ab[key]["anthropic_docs"]
            ls, la = lat[latkey]["scifact-test"], lat[latkey]["anthropic_docs"]
            rows.append([label, s["ndcg@10"], s["recall@100"], f"{ls['p50']:.1f} / {ls['p95']:.1f}",
                         a["recall@3"], a["mrr@3"], a["ndcg@10"], f"{la['p50']:.1f} / {la['p95']:.1f}"])
        for name in li["scifact-test"]:
            s, a = li["scifact-test"][name], li["anthropic_docs"][name]
            ls, la = s["latency_ms"], a["latency_ms"]
            rows.append([name, s["ndcg@10"], s["recall@100"], f"{ls['p50']:.1f} / {ls['p95']:.1f}",
                         a["recall@3"], a["mrr@3"], a["ndcg@10"], f"{la['p50']:.1f} / {la['p95']:.1f}"])
        lines += [table(["system", "SciFact nDCG@10", "SciFact R@100", "SciFact ms p50/p95", "anthropic R@3",
                         "anthropic MRR@3", "anthropic nDCG@10", "anthropic ms p50/p95"], rows), ""]
    else:
        rows = [[k, f"{v['scifact-test']['p50']:.1f} / {v['scifact-test']['p95']:.1f}",
                 f"{v['anthropic_docs']['p50']:.1f} / {v['anthropic_docs']['p95']:.1f}"] for k, v in lat.items()]
        lines += ["### Polaris query latency (ms p50 / p95, query vector given)", "",
                  table(["config", "SciFact", "anthropic_docs"], rows), ""]
    lines += [f"Quality run took {r['seconds'] / 60:.1f} min.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
