"""Speed: vector KNN (sqlite-vec vec0) against numpy brute force on the same vectors, FTS5
BM25 over real text, the full hybrid pipeline, indexing throughput and peak memory.

    python benchmarks/speed.py [EVAL_DIR] [--sizes 10000,100000,1000000] [--dims 384,512]
                               [--hybrid-sizes 10000,100000] [--queries 50] [--skip-index]

Vectors are synthetic but clustered (unit vectors around 2,000 random centres), so
nearest neighbours mean something and quantisation recall is not trivially bad; they
are built once per (size, dim) into ``benchmarks/out/`` (``vectors-N-D.npy`` and a
``vec-N-D.db`` holding the engine's vec0 table, a bit-quantised vec0 table and the
float32 blobs) and reused by later runs. FTS5 text is real: SciFact sentences
recombined into chunks (read at run time from EVAL_DIR, never stored in the repo).

Prototypes measured here, not in the engine:
- ``bit`` : sqlite-vec ``bit[D]`` column (sign bits), hamming KNN over an over-fetched
  pool, then exact float re-scoring of that pool; recall@10 against exact search.
- ``numpy cache`` : the whole float matrix held in process (loaded once from SQLite),
  KNN as one matrix-vector product: what the numpy floor costs inside Polaris.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

# sqlite-vec answers a query on one thread; give numpy one BLAS thread too (a multi-threaded
# OpenBLAS spinning on a shared 2-core machine took 20 ms for a 2,000 x 384 product).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, REPO, machine, machine_line, out_dir, pcts, publish, save_json, table  # noqa: E402

from llama_index_polaris.engine.sqlite.connect import connect  # noqa: E402

MODEL = "all-minilm-l6-v2"
N_CENTRES = 2000
POOL = 30  # top_k 10 x mmr_candidate_multiplier 3: what the pipeline asks each retriever for


# -- synthetic vectors -------------------------------------------------------------------
def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def centres(dim: int) -> np.ndarray:
    return _unit(np.random.default_rng(1234 + dim).standard_normal((N_CENTRES, dim)))


def sample(n: int, dim: int, seed: int, spread: float = 0.08) -> np.ndarray:
    """Unit vectors near random centres (noise per coordinate ``spread``)."""
    rng = np.random.default_rng(seed)
    c = centres(dim)
    return _unit(c[rng.integers(0, N_CENTRES, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32))


def vectors_file(n: int, dim: int) -> Path:
    path = out_dir() / f"vectors-{n}-{dim}.npy"
    if not path.exists():
        tmp = path.with_suffix(".tmp.npy")
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))
        step = 100_000
        for i in range(0, n, step):
            arr[i:i + step] = sample(min(step, n - i), dim, seed=i // step + 7 * dim)
        arr.flush()
        del arr
        tmp.rename(path)
    return path


def queries(n: int, dim: int) -> np.ndarray:
    return sample(n, dim, seed=999_999 + dim)


# -- vec0 databases ----------------------------------------------------------------------
def vec_db(n: int, dim: int, vecs: np.ndarray) -> tuple[Path, float]:
    """vec0 (float, cosine, the engine's shape), vec0 bit[dim], and float blobs; built once."""
    path = out_dir() / f"vec-{n}-{dim}.db"
    if path.exists():
        return path, 0.0
    tmp = path.with_suffix(".tmp.db")
    tmp.unlink(missing_ok=True)
    t = time.perf_counter()
    conn = connect(tmp)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(f"CREATE VIRTUAL TABLE vf USING vec0(embedding float[{dim}] distance_metric=cosine, document_id text)")
    conn.execute(f"CREATE VIRTUAL TABLE vb USING vec0(embedding bit[{dim}])")
    conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
    step = 20_000
    for i in range(0, n, step):
        block = np.ascontiguousarray(vecs[i:i + step], dtype="<f4")
        rows = [(i + j + 1, block[j].tobytes(), f"doc{(i + j) // 10}") for j in range(len(block))]
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO vf (rowid, embedding, document_id) VALUES (?, ?, ?)", rows)
        conn.executemany("INSERT INTO vb (rowid, embedding) VALUES (?, vec_quantize_binary(?))",
                         [(r[0], r[1]) for r in rows])
        conn.executemany("INSERT INTO blobs (id, embedding) VALUES (?, ?)", [(r[0], r[1]) for r in rows])
        conn.execute("COMMIT")
    conn.close()
    tmp.rename(path)
    return path, time.perf_counter() - t


def exact_topk(mat: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Ids (1-based, as the rowids) of the k best cosine scores; mat rows are unit vectors."""
    s = mat @ q
    idx = np.argpartition(-s, k)[:k]
    return idx[np.argsort(-s[idx])] + 1


def vector_bench(n: int, dim: int, nq: int, over: Sequence[int]) -> dict[str, Any]:
    print(f"vectors {n} x {dim}: preparing ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    vpath = vectors_file(n, dim)
    gen_s = time.perf_counter() - t
    mat = np.load(vpath, mmap_mode="r")
    dbpath, build_s = vec_db(n, dim, mat)
    mat = np.ascontiguousarray(mat)  # numpy floor: the matrix in RAM
    if n >= 500_000:
        nq = min(nq, 20)  # brute force in SQLite takes seconds per query at this size
    qs = queries(nq, dim)
    conn = connect(dbpath, readonly=True)
    res: dict[str, Any] = {"n": n, "dim": dim, "queries": nq, "vectors_s": gen_s, "db_build_s": build_s,
                           "db_mb": dbpath.stat().st_size / 1e6}

    # warm the page cache for both (first query of each is dropped)
    def run(fn) -> tuple[list, list[float]]:
        fn(qs[0])
        outs, secs = [], []
        for q in qs:
            t0 = time.perf_counter()
            outs.append(fn(q))
            secs.append(time.perf_counter() - t0)
        return outs, secs

    knn_sql = "SELECT rowid, distance FROM vf WHERE embedding MATCH ? AND k = ? ORDER BY distance"
    exact, res["numpy_ms"] = None, None
    exact, secs = run(lambda q: exact_topk(mat, q, POOL))
    res["numpy_ms"] = pcts(secs)
    got, secs = run(lambda q: [r[0] for r in conn.execute(knn_sql, (q.astype("<f4").tobytes(), POOL)).fetchall()])
    res["vec0_ms"] = pcts(secs)
    res["vec0_recall@30"] = float(np.mean([len(set(g) & set(e.tolist())) / POOL for g, e in zip(got, exact)]))

    # bit quantisation with float re-scoring of an over-fetched pool
    bit_sql = "SELECT rowid FROM vb WHERE embedding MATCH vec_quantize_binary(?) AND k = ? ORDER BY distance"
    blob_sql = "SELECT id, embedding FROM blobs WHERE id IN (SELECT value FROM json_each(?))"
    res["bit"] = []
    exact10 = [e[:10] for e in exact]
    for factor in over:
        fetch = min(POOL * factor, 4096)

        def bit_query(q: np.ndarray) -> list[int]:
            ids = [r[0] for r in conn.execute(bit_sql, (q.astype("<f4").tobytes(), fetch)).fetchall()]
            rows = conn.execute(blob_sql, (json.dumps(ids),)).fetchall()
            m = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), dim)
            s = m @ q
            order = np.argsort(-s)[:POOL]
            return [rows[i][0] for i in order]

        got, secs = run(bit_query)
        res["bit"].append({
            "overfetch": factor, "fetched": fetch, "ms": pcts(secs),
            "recall@10": float(np.mean([len(set(g[:10]) & set(e.tolist())) / 10 for g, e in zip(got, exact10)])),
            "recall@30": float(np.mean([len(set(g) & set(e.tolist())) / POOL for g, e in zip(got, exact)])),
        })
    # bit alone (hamming order, no re-scoring) for reference
    got, secs = run(lambda q: [r[0] for r in conn.execute(bit_sql, (q.astype("<f4").tobytes(), POOL)).fetchall()])
    res["bit_only_ms"] = pcts(secs)
    res["bit_only_recall@30"] = float(np.mean([len(set(g) & set(e.tolist())) / POOL for g, e in zip(got, exact)]))

    # in-process numpy matrix cache: load from SQLite once, then matmul
    t = time.perf_counter()
    rows = conn.execute("SELECT id, embedding FROM blobs ORDER BY id").fetchall()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    cache = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), dim)
    del rows
    res["numpy_cache_load_s"] = time.perf_counter() - t
    res["numpy_cache_mb"] = cache.nbytes / 1e6

    def cached(q: np.ndarray) -> list[int]:
        s = cache @ q
        idx = np.argpartition(-s, POOL)[:POOL]
        return ids[idx[np.argsort(-s[idx])]].tolist()

    _, secs = run(cached)
    res["numpy_cache_ms"] = pcts(secs)

    # in-process packed sign bits (n x dim/8 bytes) + hamming by popcount, then exact
    # re-scoring of the over-fetched pool with float32 blobs read from SQLite by id
    t = time.perf_counter()
    packed = np.packbits(cache > 0, axis=1).view(np.uint64)
    res["bit_cache_build_s"] = time.perf_counter() - t
    res["bit_cache_mb"] = packed.nbytes / 1e6
    del cache
    res["bit_cache"] = []
    for factor in over:
        fetch = POOL * factor

        def bit_cached(q: np.ndarray) -> list[int]:
            qb = np.packbits(q > 0).view(np.uint64)
            ham = np.bitwise_count(packed ^ qb).sum(axis=1, dtype=np.int32)
            pool = ids[np.argpartition(ham, fetch)[:fetch]]
            rows = conn.execute(blob_sql, (json.dumps(pool.tolist()),)).fetchall()
            m = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), dim)
            order = np.argsort(-(m @ q))[:POOL]
            return [rows[i][0] for i in order]

        got, secs = run(bit_cached)
        res["bit_cache"].append({
            "overfetch": factor, "fetched": fetch, "ms": pcts(secs),
            "recall@10": float(np.mean([len(set(g[:10]) & set(e.tolist())) / 10 for g, e in zip(got, exact10)])),
            "recall@30": float(np.mean([len(set(g) & set(e.tolist())) / POOL for g, e in zip(got, exact)])),
        })
    conn.close()
    del mat, packed
    print(f"  numpy p50 {res['numpy_ms']['p50']:.1f} ms, vec0 p50 {res['vec0_ms']['p50']:.1f} ms,"
          f" bit x{over[-1]} p50 {res['bit'][-1]['ms']['p50']:.1f} ms", file=sys.stderr, flush=True)
    return res


def eval_copy() -> Path | None:
    """A migrated copy of the newest cached SciFact evaluation index (SQLite's backup API: a
    consistent snapshot even while it is written). The shared cache file itself is never
    migrated: checkouts on an older schema read it too."""
    from llama_index_polaris.engine.tune.evaluate import eval_cache_dir
    from llama_index_polaris.engine.sqlite.store import Store

    complete = []
    for db in sorted(eval_cache_dir().glob("scifact-*.db"), key=lambda p: p.stat().st_mtime):
        c = connect(db, readonly=True)
        try:
            done = c.execute("SELECT count(*) FROM documents WHERE status = 'completed'").fetchone()[0]
            model = dict(c.execute("SELECT key, value FROM polaris_meta").fetchall()).get("model_id")
        finally:
            c.close()
        if done == 5183 and model == MODEL:  # SciFact's corpus, fully indexed (another checkout may be building one)
            complete.append(db)
    if not complete:
        return None
    dbs = complete
    copy = out_dir() / "scifact-eval-copy.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    src = connect(dbs[-1], readonly=True)
    dst = connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    Store(copy).close()  # migrate the copy
    return copy


def real_bit_recall(eval_dir: Path, over: Sequence[int]) -> dict[str, Any] | None:
    """Sign-bit quantisation on real vectors: the cached SciFact index (bundled model) and its
    test queries; recall of bits + float re-scoring against exact search."""
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.tune.evaluate import eval_cache_dir, load_beir
    from llama_index_polaris.engine.sqlite.store import Store

    copy = eval_copy()
    if copy is None:
        return None
    store = Store(copy, readonly=True)
    if store.model is None or store.model.model_id != MODEL:
        return None
    beir = load_beir(eval_dir / "scifact", "test")
    done = store.conn.execute("SELECT count(*) FROM documents WHERE status = 'completed'").fetchone()[0]
    if done < len(beir.corpus):
        store.close()
        return None  # still being built
    rows = store.conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL").fetchall()
    store.close()
    mat = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
    embedder = load_embedder(MODEL)
    qs = embedder._embed([beir.queries[q] for q in beir.qrels if q in beir.queries], embedder.spec.query_prefix)
    packed = np.packbits(mat > 0, axis=1).view(np.uint64)
    out = {"chunks": len(rows), "queries": len(qs), "db": str(copy), "rows": []}
    for factor in over:
        r10 = r30 = 0.0
        for q in qs:
            exact = set(np.argsort(-(mat @ q))[:POOL].tolist())
            ham = np.bitwise_count(packed ^ np.packbits(q > 0).view(np.uint64)).sum(axis=1, dtype=np.int32)
            pool = np.argpartition(ham, POOL * factor)[:POOL * factor]
            got = pool[np.argsort(-(mat[pool] @ q))[:POOL]].tolist()
            exact10 = set(np.argsort(-(mat @ q))[:10].tolist())
            r10 += len(set(got[:10]) & exact10) / 10
            r30 += len(set(got) & exact) / POOL
        out["rows"].append({"overfetch": factor, "recall@10": r10 / len(qs), "recall@30": r30 / len(qs)})
    return out


# -- real text for FTS5: SciFact sentences recombined --------------------------------------
SENT = re.compile(r"(?<=[.!?])\s+")


def scifact_pieces(eval_dir: Path) -> tuple[list[str], list[str], list[str]]:
    sentences, titles = [], []
    with open(eval_dir / "scifact" / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            titles.append(d.get("title") or "")
            sentences += [s for s in SENT.split(d.get("text") or "") if len(s) > 20]
    qs = [json.loads(line)["text"] for line in open(eval_dir / "scifact" / "queries.jsonl", encoding="utf-8")]
    return sentences, titles, qs


def hybrid_db(n: int, dim: int, eval_dir: Path) -> tuple[Path, float]:
    """A real Polaris index of ``n`` chunks: recombined SciFact text, synthetic vectors."""
    from llama_index_polaris.engine.sqlite.store import ModelBinding, Store

    path = out_dir() / f"hybrid-{n}-{dim}.db"
    if path.exists():
        return path, 0.0
    tmp = path.with_suffix(".tmp.db")
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    sentences, titles, _ = scifact_pieces(eval_dir)
    rng = random.Random(n)
    vecs = np.load(vectors_file(n, dim), mmap_mode="r")
    t = time.perf_counter()
    store = Store(tmp)
    store.bind_model(ModelBinding("synthetic", dim, ""))
    store.conn.execute("PRAGMA synchronous=OFF")
    per_doc = 10
    with store.batch():  # the BM25 posting lists built once, at the end (as `polaris index` per batch)
        _fill(store, n, per_doc, rng, titles, sentences, vecs)
    store.close()
    tmp.rename(path)
    for suffix in ("-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    return path, time.perf_counter() - t


def _fill(store: Any, n: int, per_doc: int, rng: random.Random, titles: list[str], sentences: list[str],
          vecs: np.ndarray) -> None:
    from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord

    for d in range(0, n, per_doc):
        title = rng.choice(titles)
        chunks = []
        for j in range(min(per_doc, n - d)):
            text = " ".join(rng.choice(sentences) for _ in range(rng.randint(4, 9)))
            chunks.append(ChunkRecord(node_id=f"n{d + j}", text=text, ordinal=j, heading_path=f"{title} > Part {j}",
                                      heading_level=2, start_char=0, end_char=len(text)))
        store.upsert_document(DocumentRecord(id=f"doc{d // per_doc}", name=title), chunks, vecs[d:d + len(chunks)])


def warm_searchers(n: int, eval_dir: Path, n_queries: int) -> tuple[Any, list[str], np.ndarray, dict[str, Any]]:
    """The ``hybrid-N-384.db`` file's config, query texts and vectors, and a one-shot and a
    long-lived (vector and BM25 caches) searcher on it, warmed by 20 queries."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.sqlite.bm25_cache import Bm25Cache
    from llama_index_polaris.engine.search.pipeline import Searcher
    from llama_index_polaris.engine.sqlite.bits import VectorCache
    from llama_index_polaris.engine.sqlite.store import Store

    path, _ = hybrid_db(n, 384, eval_dir)
    _, _, texts = scifact_pieces(eval_dir)
    texts, qvecs = texts[:n_queries], queries(n_queries, 384)
    cfg = load_config(use_user_config=False, model_id=MODEL)
    store = Store(path, readonly=True)
    searchers = {"one-shot": Searcher(store, None, cfg),
                 "long-lived": Searcher(store, None, cfg, vector_cache=VectorCache(store), bm25_cache=Bm25Cache(store))}
    for s in searchers.values():  # warm: caches loaded, pages read
        for i in range(min(20, len(texts))):
            s.search(texts[i], top_k=10, query_vector=qvecs[i])
    return cfg, texts, qvecs, searchers


def alternated(searcher: Any, texts: list[str], qvecs: np.ndarray, k: int, configs: dict[str, Any]) -> dict[str, list[float]]:
    """Seconds per query under each config, the configs alternated query by query (their order
    flipped every other query) on one searcher; its config is put back."""
    base = searcher.config
    secs: dict[str, list[float]] = {label: [] for label in configs}
    for i, text in enumerate(texts):
        for label, c in (configs.items() if i % 2 else reversed(configs.items())):
            searcher.config = c
            t = time.perf_counter()
            searcher.search(text, top_k=k, query_vector=qvecs[i])
            secs[label].append(time.perf_counter() - t)
    searcher.config = base
    return secs


def exact_ids(vecs: np.ndarray, q: np.ndarray, k: int, rows: np.ndarray | None = None) -> list[int]:
    """Exact top-k chunk ids (row + 1, as hybrid_db stores them), optionally among ``rows`` only."""
    m = vecs if rows is None else vecs[rows]
    s = m @ q
    top = np.argpartition(-s, k)[:k]
    top = top[np.argsort(-s[top])]
    return ((top if rows is None else rows[top]) + 1).tolist()


def recall_at(got: list[list[int]], exact: list[list[int]], k: int) -> float:
    return float(np.mean([len(set(g[:k]) & set(e[:k])) / k for g, e in zip(got, exact)]))


def hybrid_bench(n: int, dim: int, eval_dir: Path, nq: int) -> dict[str, Any]:
    """BM25 alone, vector alone (exact vec0 and the sign-bit index) and the full hybrid pipeline,
    one-shot and long-lived, excluding and including embedding; recall of the approximate path
    against exact search, unscoped and scoped."""
    import functools

    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.sqlite import ann, bm25_postings as postings
    from llama_index_polaris.engine.search import pipeline
    from llama_index_polaris.engine.storage import signbits
    from llama_index_polaris.engine.sqlite import vector as vector_module
    from llama_index_polaris.engine.sqlite.bm25 import bm25
    from llama_index_polaris.engine.search.pipeline import Searcher
    from llama_index_polaris.engine.storage.scope import Scope
    from llama_index_polaris.engine.sqlite.vector import exact_knn, knn
    from llama_index_polaris.engine.sqlite.store import Store

    print(f"hybrid {n} x {dim}: preparing ...", file=sys.stderr, flush=True)
    path, build_s = hybrid_db(n, dim, eval_dir)
    t0 = time.perf_counter()
    Store(path).close()  # a file built before the sign-bit index: the migration backfills it
    migrate_s = time.perf_counter() - t0
    _, _, texts = scifact_pieces(eval_dir)
    texts = texts[:nq]
    qvecs = queries(nq, dim)
    vecs = np.ascontiguousarray(np.load(vectors_file(n, dim), mmap_mode="r"))
    cfg = load_config(use_user_config=False, model_id=MODEL)
    store = Store(path, readonly=True)
    first = store.conn.execute("SELECT embedding FROM chunks WHERE id = 1").fetchone()[0]
    assert np.frombuffer(first, dtype="<f4").tobytes() == vecs[0].tobytes(), "chunk id i+1 must hold vector row i"
    searcher = Searcher(store, None, cfg)
    embedder = load_embedder(MODEL) if dim == 384 else None
    res: dict[str, Any] = {"n": n, "dim": dim, "queries": nq, "db_build_s": build_s, "migrate_s": migrate_s,
                           "db_mb": path.stat().st_size / 1e6, "loadavg": os.getloadavg(),
                           "config": {k: getattr(cfg, k) for k in ("rrf_k", "heading_boost", "mmr_lambda")}}

    def run(fn) -> list[float]:
        fn(0)
        secs = []
        for i in range(nq):
            t0 = time.perf_counter()
            fn(i)
            secs.append(time.perf_counter() - t0)
        return secs

    exact = [exact_ids(vecs, qvecs[i], POOL) for i in range(nq)]
    res["bm25_ms"] = pcts(run(lambda i: bm25(store.conn, texts[i], POOL)))
    tokenizer = store.tokenizer()
    res["bm25_lists_ms"] = pcts(run(lambda i: postings.bm25(store.conn, tokenizer, texts[i], POOL)))
    res["lists_mb"] = store.conn.execute(
        "SELECT (SELECT coalesce(sum(length(rows) + length(tf)), 0) FROM chunks_bm25)"
        " + (SELECT coalesce(sum(length(lengths)), 0) FROM chunks_bm25_lengths)").fetchone()[0] / 1e6
    res["lists_terms"] = store.conn.execute("SELECT count(*) FROM chunks_bm25_terms").fetchone()[0]
    res["vec0_ms"] = pcts(run(lambda i: exact_knn(store.conn, qvecs[i], POOL)))
    got: list[list[int]] = [[] for _ in range(nq)]

    def ann_one(i: int) -> None:  # the sign-bit path whatever the size (knn() is exact below EXACT_BELOW)
        got[i] = [c for c, _ in ann.ann_knn(store.conn, qvecs[i], POOL, exact_below=0)]

    res["ann_ms"] = pcts(run(ann_one))
    res["auto_ms"] = pcts(run(lambda i: knn(store.conn, qvecs[i], POOL)))
    res["auto_is_exact"] = n < signbits.EXACT_BELOW
    res["ann_recall@10"], res["ann_recall@30"] = recall_at(got, exact, 10), recall_at(got, exact, POOL)
    # where the one-shot approximate query spends its time
    bits = ann.read_bits(store.conn)
    fetch = ann.fetch_size(POOL, len(bits))
    pools = [np.sort(bits.ids[ann.nearest_rows(ann.hamming(bits.bits, ann.pack_signs(q)[0]), fetch)]) for q in qvecs]
    res["ann_fetch"] = fetch
    res["ann_parts_ms"] = {
        "read blocks (SQL)": pcts(run(lambda i: store.conn.execute(ann.BLOCKS_SQL).fetchall()))["p50"],
        "read blocks (total)": pcts(run(lambda i: ann.read_bits(store.conn)))["p50"],
        "hamming + pool": pcts(run(lambda i: ann.nearest_rows(ann.hamming(bits.bits, ann.pack_signs(qvecs[i])[0]),
                                                                fetch)))["p50"],
        f"re-score {fetch} from chunks.embedding": pcts(run(lambda i: ann.stored_vectors(store.conn, pools[i], dim)))["p50"],
    }
    del bits, pools
    # scoped: every other document (half the chunks), inside the approximate path
    half = tuple(f"doc{d}" for d in range(0, n // 10, 2))
    rows = np.concatenate([np.arange(d * 10, d * 10 + 10) for d in range(0, n // 10, 2)])
    scoped_q = min(nq, 20)
    scoped_exact = [exact_ids(vecs, qvecs[i], POOL, rows) for i in range(scoped_q)]
    scoped_got = [[c for c, _ in ann.ann_knn(store.conn, qvecs[i], POOL, Scope(document_ids=half), exact_below=0)]
                  for i in range(scoped_q)]
    res["ann_scoped_recall@10"] = recall_at(scoped_got, scoped_exact, 10)
    res["ann_scoped_in_scope"] = all(set(g) <= set((rows + 1).tolist()) for g in scoped_got)

    res["hybrid_ms"] = pcts(run(lambda i: searcher.search(texts[i], top_k=10, query_vector=qvecs[i])))
    real_lists = postings.bm25
    postings.bm25 = lambda *a, **kw: None  # the one-shot pipeline before the posting lists: FTS5 alone
    try:
        res["hybrid_fts5_ms"] = pcts(run(lambda i: searcher.search(texts[i], top_k=10, query_vector=qvecs[i])))
    finally:
        postings.bm25 = real_lists
    real_knn = vector_module.knn  # what the SQLite Store's knn calls
    vector_module.knn = functools.partial(real_knn, exact_below=10**12)  # the one-shot pipeline before #17: exact vec0,
    postings.bm25 = lambda *a, **kw: None  # FTS5 alone
    try:
        res["hybrid_exact_ms"] = pcts(run(lambda i: searcher.search(texts[i], top_k=10, query_vector=qvecs[i])))
    finally:
        vector_module.knn, postings.bm25 = real_knn, real_lists
    # a long-lived process (notebook, retriever, Datasette): sign bits in RAM, floats re-read
    # from SQLite; BM25 with common words' postings from RAM (a cold and a warm pass)
    from llama_index_polaris.engine.sqlite.bm25_cache import Bm25Cache
    from llama_index_polaris.engine.sqlite.bits import VectorCache

    cache = VectorCache(store)
    t0 = time.perf_counter()
    res["cache_active"] = cache.refresh()
    res["cache_load_s"] = time.perf_counter() - t0
    res["cache_bytes_per_chunk"] = (cache.nbytes + sum(sys.getsizeof(d) + 64 for d in cache.snapshot.doc_codes)) / n
    res["float_matrix_bytes_per_chunk"] = dim * 4  # what the cache held before #17

    def cached_knn(i: int) -> None:
        with store.read():
            got[i] = [c for c, _ in cache.knn(qvecs[i], POOL)]

    res["cache_knn_ms"] = pcts(run(cached_knn))
    res["cache_recall@10"] = recall_at(got, exact, 10)
    terms = Bm25Cache(store)
    t0 = time.perf_counter()
    res["bm25_cache_active"] = terms.refresh()
    res["bm25_cache_load_s"] = time.perf_counter() - t0

    def passes(fn) -> tuple[list[float], list[float]]:
        """First sight of every query's words (cold), then the same queries again (warm)."""
        cold = []
        for i in range(nq):
            t0 = time.perf_counter()
            fn(i)
            cold.append(time.perf_counter() - t0)
        return cold, run(fn)

    cold, warm = passes(lambda i: terms.refresh() and terms.bm25(texts[i], POOL))
    res["bm25_cache_cold_ms"], res["bm25_cache_warm_ms"] = pcts(cold), pcts(warm)
    res["bm25_cache_postings"] = terms._held
    terms = Bm25Cache(store)  # empty again for the full pipeline's cold pass
    cached = Searcher(store, None, cfg, cache, terms)
    cold, warm = passes(lambda i: cached.search(texts[i], top_k=10, query_vector=qvecs[i]))
    res["hybrid_cached_cold_ms"], res["hybrid_cached_ms"] = pcts(cold), pcts(warm)
    if embedder is not None:
        from llama_index_polaris.engine.embed import embedder as embedder_module

        embedder_module._RECENT_QUERIES.clear()  # an earlier size embedded the same questions
        embedder.embed_query("warm up")
        res["embed_ms"] = pcts(run(lambda i: embedder.embed_query(texts[i])))
        res["hybrid_with_embed_ms"] = pcts(run(
            lambda i: (embedder.embed_query(texts[i]),
                       searcher.search(texts[i], top_k=10, query_vector=qvecs[i]))))
    store.close()
    res["loadavg_end"] = os.getloadavg()
    print(f"  bm25 p50 {res['bm25_ms']['p50']:.1f}, vec0 p50 {res['vec0_ms']['p50']:.1f}, ann p50"
          f" {res['ann_ms']['p50']:.1f} (R@10 {res['ann_recall@10']:.3f}), hybrid p50 {res['hybrid_ms']['p50']:.1f}"
          f" p95 {res['hybrid_ms']['p95']:.1f} ms (exact {res['hybrid_exact_ms']['p50']:.1f})", file=sys.stderr, flush=True)
    return res


# -- the approximate index against IVF, and on real vectors ------------------------------
def kmeans(sample: np.ndarray, nlist: int, iters: int = 8, seed: int = 0) -> np.ndarray:
    """Spherical k-means centroids (unit rows) of ``sample``."""
    rng = np.random.default_rng(seed)
    cent = sample[rng.choice(len(sample), nlist, replace=False)].copy()
    for _ in range(iters):
        assign = np.argmax(sample @ cent.T, axis=1)
        sums = np.zeros_like(cent)
        np.add.at(sums, assign, sample)
        counts = np.bincount(assign, minlength=nlist)
        cent = np.where(counts[:, None] > 0, sums, cent)
        cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
    return cent.astype(np.float32)


def ivf_bench(conn: Any, floats_sql: str, mat: np.ndarray, ids: np.ndarray, qs: np.ndarray,
              exact: list[list[int]], probes: Sequence[int], tag: str) -> dict[str, Any]:
    """IVF-flat prototype: k-means centroids (sqrt(n) lists) over the stored vectors, each chunk's list in
    a table (index on list), a query probes the nearest lists and re-scores their floats read from
    SQLite. ``floats_sql`` selects (id, embedding) of the ids in a JSON list."""
    n = len(mat)
    nlist = max(16, int(np.sqrt(n)))
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    cent = kmeans(mat[np.sort(rng.choice(n, min(n, 25 * nlist), replace=False))], nlist)
    assign = np.concatenate([np.argmax(mat[i:i + 20_000] @ cent.T, axis=1) for i in range(0, n, 20_000)])
    train_s = time.perf_counter() - t
    path = out_dir() / f"ivf-{tag}.db"
    path.unlink(missing_ok=True)
    side = connect(path)
    side.execute("CREATE TABLE ivf (list INTEGER, id INTEGER, PRIMARY KEY (list, id)) WITHOUT ROWID")
    side.execute("BEGIN")
    side.executemany("INSERT INTO ivf VALUES (?, ?)", zip(assign.tolist(), ids.tolist()))
    side.execute("COMMIT")
    side.close()
    conn.execute(f"ATTACH DATABASE '{path}' AS ivfdb")
    out = {"nlist": nlist, "train_s": train_s, "rows": []}
    try:
        for nprobe in probes:
            got = []

            def query(q: np.ndarray) -> list[int]:
                lists = np.argsort(-(cent @ q))[:nprobe] if nprobe >= len(cent) else \
                    np.argpartition(-(cent @ q), nprobe)[:nprobe]
                members = [r[0] for r in conn.execute(
                    "SELECT id FROM ivfdb.ivf WHERE list IN (SELECT value FROM json_each(?))", (json.dumps(lists.tolist()),))]
                rows = conn.execute(floats_sql, (json.dumps(members),)).fetchall()
                m = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
                order = np.argsort(-(m @ q))[:POOL]
                return [rows[i][0] for i in order]

            query(qs[0])
            secs = []
            for q in qs:
                t0 = time.perf_counter()
                got.append(query(q))
                secs.append(time.perf_counter() - t0)
            out["rows"].append({"nprobe": nprobe, "share": nprobe / nlist, "ms": pcts(secs),
                                "recall@10": recall_at(got, exact, 10)})
    finally:
        conn.execute("DETACH DATABASE ivfdb")
        path.unlink(missing_ok=True)
    return out


def structures_bench(n: int, dim: int, nq: int, eval_dir: Path) -> dict[str, Any]:
    """The sign-bit index (engine) against IVF-flat on the same engine file and queries."""
    from llama_index_polaris.engine.sqlite.vector import knn
    from llama_index_polaris.engine.sqlite.store import Store

    path, _ = hybrid_db(n, dim, eval_dir)
    Store(path).close()
    vecs = np.ascontiguousarray(np.load(vectors_file(n, dim), mmap_mode="r"))
    qs = queries(nq, dim)
    exact = [exact_ids(vecs, q, POOL) for q in qs]
    store = Store(path, readonly=True)
    got, secs = [], []
    knn(store.conn, qs[0], POOL)
    for q in qs:
        t0 = time.perf_counter()
        got.append([c for c, _ in knn(store.conn, q, POOL)])
        secs.append(time.perf_counter() - t0)
    res = {"n": n, "dim": dim, "queries": nq, "loadavg": os.getloadavg(),
           "bits": {"ms": pcts(secs), "recall@10": recall_at(got, exact, 10), "bytes_per_chunk": dim // 8 + 8}}
    ids = np.arange(1, n + 1, dtype=np.int64)
    floats = "SELECT id, embedding FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
    res["ivf"] = ivf_bench(store.conn, floats, vecs, ids, qs, exact, (4, 16, 64), f"synthetic-{n}")
    store.close()
    return res


def real_ann(eval_dir: Path, nq: int = 300) -> dict[str, Any] | None:
    """The engine's approximate path on real MiniLM vectors: the SciFact evaluation index (a copy,
    migrated) and, when built, ``real_vectors.py``'s finer units; SciFact test queries."""
    import shutil

    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.tune.evaluate import eval_cache_dir, load_beir
    from llama_index_polaris.engine.sqlite.ann import ann_knn
    from llama_index_polaris.engine.sqlite.store import Store

    import real_vectors

    beir = load_beir(eval_dir / "scifact", "test")
    embedder = load_embedder(MODEL)
    qs = embedder._embed([beir.queries[q] for q in beir.qrels if q in beir.queries][:nq], embedder.spec.query_prefix)
    sets = []
    copy = eval_copy()
    if copy is not None:
        sets.append(("SciFact chunks (polaris eval index)", copy))
    if real_vectors.path().exists():
        sets.append(("SciFact titles, sentences, sentence pairs (real_vectors.py)", real_vectors.path()))
    out = {"queries": len(qs), "sets": []}
    for name, path in sets:
        Store(path).close()
        store = Store(path, readonly=True)
        rows = store.conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY id").fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        mat = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
        del rows
        exact = []
        for q in qs:
            s = mat @ q
            top = np.argpartition(-s, POOL)[:POOL]
            exact.append(ids[top[np.argsort(-s[top])]].tolist())
        entry = {"name": name, "chunks": len(ids), "rows": []}
        for fetch in (300, 1000, 3000):
            got, secs = [], []
            for q in qs:
                t0 = time.perf_counter()
                got.append([c for c, _ in ann_knn(store.conn, q, POOL, exact_below=0, fetch=fetch)])
                secs.append(time.perf_counter() - t0)
            entry["rows"].append({"fetch": fetch, "ms": pcts(secs), "recall@10": recall_at(got, exact, 10),
                                  "recall@30": recall_at(got, exact, POOL)})
        floats = "SELECT id, embedding FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
        entry["ivf"] = ivf_bench(store.conn, floats, mat, ids, qs, exact, (4, 16, 64), "real")
        store.close()
        out["sets"].append(entry)
    return out


CHILD_CACHE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
from llama_index_polaris.engine.sqlite.bits import VectorCache
from llama_index_polaris.engine.sqlite.store import Store
def rss():  # anonymous (private) memory: the file's pages, mapped or cached, are the OS's page cache
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
store = Store(sys.argv[1], readonly=True)
n = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
before = rss()
cache = VectorCache(store)
t = time.perf_counter()
active = cache.refresh()
print(json.dumps({"n": n, "active": active, "load_s": time.perf_counter() - t, "rss_delta_bytes": rss() - before,
                  "arrays_bytes": cache.nbytes}))
"""


def cache_memory(n: int, dim: int = 384) -> dict[str, Any]:
    """Resident memory a long-lived process adds for the vector side (its own process)."""
    here = str(Path(__file__).resolve().parent)
    r = child(CHILD_CACHE, str(out_dir() / f"hybrid-{n}-{dim}.db"), here)
    r["bytes_per_chunk"] = r["rss_delta_bytes"] / r["n"]
    return r


def cold_search(n: int, eval_dir: Path, reps: int = 5) -> dict[str, Any]:
    """Wall time of `polaris search` in a new process on an n-chunk file bound to the bundled model
    (the hybrid file's copy, its binding rewritten: synthetic vectors, real query embedding)."""
    import shutil

    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.sqlite.store import Store

    src = out_dir() / f"hybrid-{n}-384.db"
    path = out_dir() / f"cold-{n}-384.db"
    if path.exists():
        Store(path).close()  # made by an earlier version: `polaris search` reads only, so upgrade it here
    else:
        Store(src).close()
        shutil.copy(src, path)
        e = load_embedder(MODEL)
        with Store(path) as store, store._write():
            from llama_index_polaris.engine.sqlite.schema import set_meta

            set_meta(store.conn, model_id=e.model_id, model_fingerprint=e.fingerprint,
                     doc_prefix=e.spec.doc_prefix, query_prefix=e.spec.query_prefix)
    exe = str(Path(sys.executable).with_name("polaris"))
    texts = scifact_pieces(eval_dir)[2][:reps + 1]
    import resource

    secs, cpu = [], []
    for i, text in enumerate(texts):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run([exe, "search", text, "--db", str(path), "-k", "10", "--json"],
                             capture_output=True, text=True, cwd=out_dir())
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        if i:  # the first run warms the page cache
            secs.append(wall)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {"n": n, "runs": len(secs), "wall_s": [round(x, 3) for x in secs], "p50_s": float(np.median(secs)),
            "cpu_p50_s": float(np.median(cpu)), "loadavg": os.getloadavg()}


BITS_TRIGGERS = ("chunks_bits_ai", "chunks_bits_ad", "chunks_bits_au", "chunks_bits_au_null")
POSTINGS_TRIGGERS = ("chunks_bm25_ai", "chunks_bm25_ad", "chunks_bm25_au")


def _drop(st: Any, triggers: Sequence[str], tables: Sequence[str]) -> None:
    with st._write():
        for trig in triggers:
            st.conn.execute(f"DROP TRIGGER {trig}")
        for table in tables:
            st.conn.execute(f"DROP TABLE {table}")


def write_overhead(eval_dir: Path, n_chunks: int = 2000, dim: int = 384, base: Path | None = None,
                   batch_docs: int = 1) -> dict[str, Any]:
    """What the derived indexes add to storing chunks: the same chunks and vectors written
    (10 per document, the stores taking turns, same process) into a store with everything,
    one without the sign-bit index, and one without the BM25 posting lists. ``base``: each
    store starts as a copy of that file (the posting lists' upkeep grows with the index: a
    write edits the lists of the common terms it touches); None: each starts empty."""
    from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store

    sentences, _, _ = scifact_pieces(eval_dir)
    rng = random.Random(7)
    vecs = sample(n_chunks, dim, seed=4242)
    texts = [" ".join(rng.choice(sentences) for _ in range(6)) for _ in range(n_chunks)]
    stores = {}
    for mode in ("with", "no-bits", "no-postings"):
        p = out_dir() / f"write-{mode}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(p) + suffix).unlink(missing_ok=True)
        if base is not None:
            shutil.copy(base, p)
        st = Store(p)
        if base is None:
            st.bind_model(ModelBinding("synthetic", dim))
        if mode == "no-bits":
            _drop(st, BITS_TRIGGERS, ["chunks_bits"])
        elif mode == "no-postings":
            _drop(st, POSTINGS_TRIGGERS, ["chunks_bm25", "chunks_bm25_terms", "chunks_bm25_lengths", "chunks_bm25_dirty"])
        stores[mode] = st
    secs = dict.fromkeys(stores, 0.0)
    step = 10 * batch_docs
    for d in range(0, n_chunks, step):
        order = list(stores)[d // step % 3:] + list(stores)[:d // step % 3]
        for mode in order:
            t0 = time.perf_counter()
            with stores[mode].batch():  # one update of the BM25 lists per batch, as the Indexer does
                for e in range(d, min(d + step, n_chunks), 10):
                    chunks = [ChunkRecord(f"new{e + j}", texts[e + j], ordinal=j) for j in range(10)]
                    stores[mode].upsert_document(DocumentRecord(f"newdoc{e}"), chunks, vecs[e:e + 10])
            secs[mode] += time.perf_counter() - t0
    for mode, st in stores.items():
        st.close()
        for suffix in ("", "-wal", "-shm"):
            Path(str(out_dir() / f"write-{mode}.db") + suffix).unlink(missing_ok=True)
    return {"chunks": n_chunks, "base_chunks": _count(base) if base else 0, "batch_docs": batch_docs,
            **{f"{mode}_ms_per_chunk": 1000 * t / n_chunks for mode, t in secs.items()}, "loadavg": os.getloadavg()}


def _count(path: Path) -> int:
    from llama_index_polaris.engine.sqlite.store import Store

    with Store(path, readonly=True) as st:
        return st.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


# -- indexing throughput and peak memory, each in its own process ------------------------
CHILD_INDEX = r"""
import json, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[4])
from common import peak_rss_mb
from pathlib import Path
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.tune.evaluate import corpus_markdown
from llama_index_polaris.engine.ingest.indexer import IndexReport, SourceDocument
from llama_index_polaris.engine.index import PolarisIndex
mode, eval_dir, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
docs = []
with open(eval_dir / "scifact" / "corpus.jsonl", encoding="utf-8") as fh:
    for line in fh:
        d = json.loads(line)
        docs.append(SourceDocument(id=d["_id"], text=corpus_markdown(d), name=d.get("title") or d["_id"]))
        if len(docs) == n:
            break
cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
with tempfile.TemporaryDirectory() as tmp:
    index = PolarisIndex(Path(tmp) / "p.db", config=cfg)
    indexer = index.indexer()
    # the same chunks and embedding inputs the Indexer makes
    inputs = [t for doc in docs for t in indexer._chunks(doc, doc.text, IndexReport())[1]]
    embedder = index.embedder
    embedder.embed_documents(["warm up"])
    base = peak_rss_mb()
    t = time.perf_counter()
    if mode == "indexer":
        report = indexer.index_documents(docs)
        chunks = report.chunks
    else:
        embedder.embed_documents(inputs)
        chunks = len(inputs)
    secs = time.perf_counter() - t
print(json.dumps({"mode": mode, "docs": len(docs), "chunks": chunks, "unique_inputs": len(set(inputs)),
                  "seconds": secs, "chunks_per_s": chunks / secs, "rss_before_mb": base,
                  "peak_rss_mb": peak_rss_mb()}))
"""

CHILD_QUERY = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[3])
from common import peak_rss_mb
from speed import queries, POOL
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.search.pipeline import Searcher
from llama_index_polaris.engine.sqlite.store import Store
path, dim = sys.argv[1], int(sys.argv[2])
texts = json.loads(sys.argv[4])
store = Store(path, readonly=True)
base = peak_rss_mb()
s = Searcher(store, None, load_config(use_user_config=False, model_id="all-minilm-l6-v2"))
qv = queries(len(texts), dim)
for t, q in zip(texts, qv):
    s.search(t, top_k=10, query_vector=q)
print(json.dumps({"rss_after_open_mb": base, "peak_rss_mb": peak_rss_mb()}))
"""


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def indexing_bench(eval_dir: Path, n_docs: int) -> dict[str, Any]:
    print(f"indexing {n_docs} SciFact documents (Indexer vs raw embedder) ...", file=sys.stderr, flush=True)
    here = str(Path(__file__).resolve().parent)
    raw = child(CHILD_INDEX, "raw", str(eval_dir), str(n_docs), here)
    idx = child(CHILD_INDEX, "indexer", str(eval_dir), str(n_docs), here)
    return {"raw": raw, "indexer": idx}


# -- main --------------------------------------------------------------------------------
def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--sizes", type=ints, default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--dims", type=ints, default=[384, 512])
    ap.add_argument("--hybrid-sizes", type=ints, default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--overfetch", type=ints, default=[4, 10, 30])
    ap.add_argument("--index-docs", type=int, default=200, help="SciFact documents for the throughput run (0 skips)")
    ap.add_argument("--skip-vector", action="store_true")
    ap.add_argument("--reuse-vector", metavar="JSON", help="take the vector KNN results from an earlier speed.json")
    ap.add_argument("--reuse-hybrid", metavar="JSON", help="take the full-pipeline results from an earlier run's JSON"
                    " (speed-partial.json of an interrupted run)")
    ap.add_argument("--structures-sizes", type=ints, default=[100_000, 1_000_000],
                    help="sizes at which the sign-bit index is compared with IVF")
    ap.add_argument("--cold-sizes", type=ints, default=[100_000], help="`polaris search` in a new process")
    ap.add_argument("--skip-real", action="store_true", help="skip the real-vector recall (needs the SciFact index)")
    ap.add_argument("--write-chunks", type=int, default=2000, help="chunks written per store for the write overhead")
    args = ap.parse_args(argv)
    eval_dir = Path(args.eval_dir).resolve()
    t0 = time.perf_counter()
    res: dict[str, Any] = {"machine": machine(), "loadavg_start": os.getloadavg(), "pool": POOL}
    if args.reuse_vector:
        res["vector"] = json.loads(Path(args.reuse_vector).read_text())["vector"]
        res["vector_reused_from"] = args.reuse_vector
    else:
        res["vector"] = [] if args.skip_vector else [vector_bench(n, d, args.queries, args.overfetch)
                                                      for n in args.sizes for d in args.dims]
    res["real_bits"] = real_bit_recall(eval_dir, sorted(set(args.overfetch) | {2, 4, 10}))
    if args.reuse_hybrid:
        res["hybrid"] = json.loads(Path(args.reuse_hybrid).read_text())["hybrid"]
        res["hybrid_reused_from"] = args.reuse_hybrid
    else:
        res["hybrid"] = [hybrid_bench(n, 384, eval_dir, args.queries) for n in args.hybrid_sizes]
    save_json("speed-partial.json", res)
    res["structures"] = [structures_bench(n, 384, args.queries, eval_dir) for n in args.structures_sizes]
    save_json("speed-partial.json", res)
    res["real_ann"] = None if args.skip_real else real_ann(eval_dir)
    res["cache_memory"] = [cache_memory(n) for n in args.hybrid_sizes if n >= 100_000]
    res["cold_search"] = [cold_search(n, eval_dir) for n in args.cold_sizes]
    res["write_overhead"] = [write_overhead(eval_dir, args.write_chunks)] + [  # 100k: three copies of a 1M file would be 19 GB
        write_overhead(eval_dir, base=out_dir() / f"hybrid-{n}-384.db", batch_docs=b)
        for n in args.hybrid_sizes if n == 100_000 for b in (1, 4)]  # 4 x 10 chunks: the Indexer's batch of 32+
    texts = scifact_pieces(eval_dir)[2][:args.queries]
    res["query_memory"] = []
    for n in args.hybrid_sizes:
        r = child(CHILD_QUERY, str(out_dir() / f"hybrid-{n}-384.db"), "384", str(Path(__file__).parent),
                  json.dumps(texts))
        res["query_memory"].append({"n": n, **r})
    if args.index_docs:
        res["indexing"] = indexing_bench(eval_dir, args.index_docs)
    res["loadavg_end"] = os.getloadavg()
    res["seconds"] = time.perf_counter() - t0
    publish("speed", res, render)
    return res


def _pp(p: dict) -> str:
    return f"{p['p50']:.1f} / {p['p95']:.1f}"


def render(r: dict) -> str:
    lines = ["## Speed", "", f"Machine: {machine_line(r['machine'])}. Load average at start"
             f" {', '.join(f'{x:.1f}' for x in r['loadavg_start'])}, at end {', '.join(f'{x:.1f}' for x in r['loadavg_end'])}"
             " (other jobs shared the machine).", "",
             f"Each query asks for the pipeline's candidate pool ({r['pool']} = top_k 10 x multiplier 3). Times are"
             " ms p50 / p95 per query, warm page cache, one thread.", ""]
    if r["vector"]:
        lines += ["### Vector KNN: sqlite-vec vec0 against numpy brute force (same vectors, same run)", ""]
        if r.get("vector_reused_from"):
            lines += [f"(Vector KNN figures from an earlier run: {r['vector_reused_from']}.)", ""]
        rows = []
        for v in r["vector"]:
            bc = (v.get("bit_cache") or [None])[-1]
            rows.append([f"{v['n']:,}", v["dim"], _pp(v["numpy_ms"]), _pp(v["vec0_ms"]),
                         f"{v['vec0_ms']['p50'] / v['numpy_ms']['p50']:.1f}x", _pp(v["numpy_cache_ms"]),
                         f"{v['numpy_cache_load_s']:.1f} s / {v['numpy_cache_mb']:.0f} MB",
                         f"{_pp(bc['ms'])} (R@10 {bc['recall@10']:.3f}, {v['bit_cache_mb']:.0f} MB)" if bc else ""])
        lines += [table(["chunks", "dim", "numpy (in RAM)", "vec0 float", "vec0 / numpy", "numpy cache (from SQLite)",
                         "cache load / size", f"in-process bits x{(r['vector'][0].get('bit_cache') or [{}])[-1].get('overfetch')} + float re-score"], rows), ""]
        lines += ["Bit quantisation (hamming KNN over pool x over-fetch, then exact float re-scoring):", ""]
        rows = []
        for v in r["vector"]:
            for b in v["bit"]:
                rows.append([f"{v['n']:,}", v["dim"], f"x{b['overfetch']} ({b['fetched']})", _pp(b["ms"]),
                             b["recall@10"], b["recall@30"]])
            rows.append([f"{v['n']:,}", v["dim"], "none (hamming order)", _pp(v["bit_only_ms"]), None,
                         v["bit_only_recall@30"]])
            for b in v.get("bit_cache", []):
                rows.append([f"{v['n']:,}", v["dim"], f"in-process bits ({v['bit_cache_mb']:.0f} MB) x{b['overfetch']}"
                             f" ({b['fetched']})", _pp(b["ms"]), b["recall@10"], b["recall@30"]])
        lines += [table(["chunks", "dim", "over-fetch (rows)", "ms p50 / p95", "recall@10", "recall@30"], rows), ""]
    if r.get("real_bits"):
        rb = r["real_bits"]
        lines += [f"Sign bits on real vectors: the SciFact index ({rb['chunks']:,} chunks, bundled MiniLM) and its"
                  f" {rb['queries']} test queries, bits + exact re-scoring against exact search:", "",
                  table(["over-fetch", "recall@10", "recall@30"],
                        [[f"x{x['overfetch']} ({x['overfetch'] * r['pool']} rows)", x["recall@10"], x["recall@30"]]
                         for x in rb["rows"]]), ""]
    if r["hybrid"]:
        lines += ["### Full pipeline on a real Polaris file (recombined SciFact text, synthetic 384-d vectors)", ""]
        rows = []
        for h in r["hybrid"]:
            active = h.get("cache_active")
            cached = (_pp(h["hybrid_cached_ms"]) + f" (load {h['cache_load_s'] + h.get('bm25_cache_load_s', 0):.1f} s)") \
                if active else "= one-shot (below 20k chunks)"
            cold = _pp(h["hybrid_cached_cold_ms"]) if active and "hybrid_cached_cold_ms" in h else ""
            bm_cached = (f"{_pp(h['bm25_cache_warm_ms'])} (cold {_pp(h['bm25_cache_cold_ms'])})"
                         if h.get("bm25_cache_active") else "")
            rows.append([f"{h['n']:,}", f"{h['db_mb']:.0f} MB", _pp(h["bm25_ms"]), bm_cached, _pp(h["vec0_ms"]),
                         _pp(h["hybrid_ms"]), cached, cold,
                         _pp(h["embed_ms"]) if "embed_ms" in h else "", _pp(h["hybrid_with_embed_ms"]) if "embed_ms" in h else ""])
        lines += [table(["chunks", "file", "FTS5 BM25", "BM25 cache warm (cold)", "vec0 KNN", "hybrid, one-shot",
                         "hybrid, long-lived (warm)", "long-lived, first sight of the words",
                         "query embedding", "one-shot hybrid incl. embedding"], rows), ""]
        lines += ["Long-lived = a process that keeps its `PolarisIndex` (notebook, retriever, Datasette): the"
                  " vector cache and the BM25 cache. Its BM25 cache loads a common word's postings the first"
                  " time a query uses it, so the first pass over the queries is shown apart (cold) from the"
                  " second (warm).", ""]
        cfgs = r["hybrid"][0]["config"]
        lines += [f"Hybrid = the engine's Searcher with its defaults ({cfgs}), top_k 10.", ""]
    if r.get("query_memory"):
        rows = [[f"{m['n']:,}", f"{m['rss_after_open_mb']:.0f}", f"{m['peak_rss_mb']:.0f}"] for m in r["query_memory"]]
        lines += ["Peak RSS of a process that opens the file and runs the hybrid queries (MB; since #17 the file is"
                  " memory-mapped, so pages of it that a query read count here too):", "",
                  table(["chunks", "after open", "peak"], rows), ""]
    if r.get("indexing"):
        raw, idx = r["indexing"]["raw"], r["indexing"]["indexer"]
        lines += ["### Indexing throughput (SciFact documents, bundled model, same chunks)", "",
                  table(["path", "docs", "chunks", "seconds", "chunks/s", "peak RSS MB"], [
                      ["raw embedder (embed_documents on the Indexer's inputs)", raw["docs"], raw["chunks"],
                       raw["seconds"], raw["chunks_per_s"], raw["peak_rss_mb"]],
                      ["Polaris Indexer (chunk + embed + store, FTS and vec0 triggers)", idx["docs"], idx["chunks"],
                       idx["seconds"], idx["chunks_per_s"], idx["peak_rss_mb"]]], floatfmt=".1f"), "",
                  f"Indexer throughput is {idx['chunks_per_s'] / raw['chunks_per_s']:.0%} of the raw embedder's.", ""]
    lines += render_ann(r)
    lines += [f"Speed run took {r['seconds'] / 60:.1f} min.", ""]
    return "\n".join(lines)


def _load(x: Any) -> str:
    return f"{x[0]:.1f}" if x else "?"


def render_ann(r: dict) -> list[str]:
    """The tables of #17: the sign-bit index, against exact search and IVF, in the same run."""
    lines = ["### Approximate vector search: the sign-bit index (#17)", ""]
    if r.get("hybrid"):
        rows = []
        for h in r["hybrid"]:
            if "ann_ms" not in h:
                continue
            rows.append([f"{h['n']:,}", _load(h.get("loadavg")), _pp(h["bm25_ms"]), _pp(h["vec0_ms"]),
                         f"{_pp(h['ann_ms'])} (R@10 {h['ann_recall@10']:.3f}, R@30 {h['ann_recall@30']:.3f})",
                         ("exact: " if h["auto_is_exact"] else "sign bits: ") + _pp(h["auto_ms"]),
                         f"{h['ann_scoped_recall@10']:.3f}" + ("" if h["ann_scoped_in_scope"] else " (OUT OF SCOPE)"),
                         _pp(h["hybrid_exact_ms"]), _pp(h["hybrid_fts5_ms"]) if "hybrid_fts5_ms" in h else "",
                         _pp(h["bm25_lists_ms"]) if "bm25_lists_ms" in h else "",
                         f"{h['lists_mb']:.0f} MB, {h['lists_terms']:,} terms" if "lists_mb" in h else "",
                         f"**{_pp(h['hybrid_ms'])}**",
                         (f"{_pp(h['cache_knn_ms'])} (R@10 {h['cache_recall@10']:.3f})" if h.get("cache_active") else "exact"),
                         _pp(h["hybrid_cached_ms"]), _pp(h["hybrid_cached_cold_ms"]),
                         f"{h['cache_load_s']:.2f} s / {h['cache_bytes_per_chunk']:.0f} B" if h.get("cache_active") else "",
                         f"{h['migrate_s']:.1f} s"])
        lines += ["One-shot = a new `Searcher` on the file, no caches (`polaris search`); long-lived = the"
                  " `PolarisIndex` caches (sign bits and BM25 postings in RAM). Query vectors given; ms p50 / p95;"
                  " recall against exact search over the same vectors (synthetic clusters), pool 30.", "",
                  table(["chunks", "load", "FTS5 BM25", "exact KNN (vec0)", "sign-bit KNN, one-shot",
                         "knn() as chosen automatically",
                         "scoped R@10 (half the documents)", "hybrid one-shot, exact vector, FTS5 (before #17)",
                         "hybrid one-shot, sign bits, FTS5", "BM25 from the posting lists", "posting lists in the file",
                         "hybrid one-shot, sign bits + posting lists", "long-lived KNN", "long-lived hybrid (warm)",
                         "long-lived hybrid, first sight of the words", "cache load / bytes per chunk",
                         "migration backfill"], rows), ""]
        parts = [[f"{h['n']:,}"] + [f"{v:.1f}" for v in h["ann_parts_ms"].values()]
                 for h in r["hybrid"] if "ann_parts_ms" in h]
        if parts:
            names = list(next(h for h in r["hybrid"] if "ann_parts_ms" in h)["ann_parts_ms"])
            lines += ["Where a one-shot approximate query goes (ms p50):", "", table(["chunks"] + names, parts), ""]
    if r.get("structures"):
        rows = []
        for st in r["structures"]:
            b = st["bits"]
            rows.append([f"{st['n']:,}", _load(st["loadavg"]), "sign bits + exact re-score (engine)", "",
                         _pp(b["ms"]), f"{b['recall@10']:.3f}", f"{b['bytes_per_chunk']} (one-shot: 0)", ""])
            iv = st["ivf"]
            for x in iv["rows"]:
                rows.append([f"{st['n']:,}", "", f"IVF-flat, {iv['nlist']} lists", f"{x['nprobe']} ({x['share']:.1%})",
                             _pp(x["ms"]), f"{x['recall@10']:.3f}", "centroids only",
                             f"k-means + assign {iv['train_s']:.0f} s"])
        lines += ["Structures compared on the same engine file and queries (one-shot, floats re-scored from"
                  " chunks.embedding in both):", "",
                  table(["chunks", "load", "structure", "probes", "ms p50 / p95", "recall@10",
                         "RAM bytes per chunk (long-lived)", "build"], rows), ""]
    if r.get("real_ann"):
        ra = r["real_ann"]
        rows = []
        for st in ra["sets"]:
            for x in st["rows"]:
                rows.append([st["name"], f"{st['chunks']:,}", f"sign bits, {x['fetch']} re-scored", _pp(x["ms"]),
                             f"{x['recall@10']:.3f}", f"{x['recall@30']:.3f}"])
            for x in st["ivf"]["rows"]:
                rows.append([st["name"], f"{st['chunks']:,}", f"IVF-flat {st['ivf']['nlist']} lists, {x['nprobe']} probed",
                             _pp(x["ms"]), f"{x['recall@10']:.3f}", ""])
        lines += [f"Real MiniLM vectors (bundled model), {ra['queries']} SciFact test queries, against exact search:", "",
                  table(["set", "chunks", "structure", "ms p50 / p95", "recall@10", "recall@30"], rows), ""]
    if r.get("cache_memory"):
        rows = [[f"{m['n']:,}", f"{m['rss_delta_bytes'] / 1e6:.0f} MB", f"{m['bytes_per_chunk']:.0f}",
                 f"{m['arrays_bytes'] / m['n']:.0f}", f"{m['load_s']:.1f} s"] for m in r["cache_memory"]]
        lines += ["Resident memory a long-lived process adds for the vector side (its own process, RssAnon: private"
                  " memory; pages of the file itself are the OS page cache, shared and reclaimable):", "",
                  table(["chunks", "RSS added", "bytes per chunk", "of which arrays", "load"], rows), ""]
    if r.get("cold_search"):
        rows = [[f"{c['n']:,}", _load(c["loadavg"]), f"{c['p50_s']:.2f} s", f"{c['cpu_p50_s']:.2f} s",
                 ", ".join(f"{x:.2f}" for x in c["wall_s"])] for c in r["cold_search"]]
        lines += ["`polaris search QUERY --json` in a new process (model load, query embedding, hybrid search);"
                  " CPU = user + system time of that process (steadier than wall on a shared machine):", "",
                  table(["chunks", "load", "wall p50", "CPU p50", "runs (wall)"], rows), ""]
    if r.get("write_overhead"):
        embed = (1000 / r["indexing"]["raw"]["chunks_per_s"]) if r.get("indexing") else None
        rows = []
        for w in r["write_overhead"]:
            bits = w["with_ms_per_chunk"] - w["no-bits_ms_per_chunk"]
            lists = w["with_ms_per_chunk"] - w["no-postings_ms_per_chunk"]
            rows.append([f"{w['base_chunks']:,}", f"{w['chunks']:,}", w.get("batch_docs", 1), f"{w['with_ms_per_chunk']:.3f}",
                         f"{w['no-bits_ms_per_chunk']:.3f} (+{bits:.3f})", f"{w['no-postings_ms_per_chunk']:.3f} (+{lists:.3f})",
                         f"{(bits + lists) / embed:.2%}" if embed else ""])
        lines += ["Storing chunks (10 per document, 384-d), ms per chunk; the difference is what each derived index"
                  " adds" + (f", against the {embed:.1f} ms it took to embed a chunk in this run:" if embed else ":"), "",
                  table(["chunks already in the file", "chunks written", "documents per batch", "everything", "without sign bits",
                         "without BM25 lists", "both, of embedding time"], rows), ""]
    return lines


if __name__ == "__main__":
    main()
