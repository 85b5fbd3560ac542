"""One-shot hybrid on the file, and its parts, in one run (#38 item 3).

    python benchmarks/oneshot_parts.py [EVAL_DIR] [--n 1000000] [--queries 40] [--rounds 3] [--first 8]

On ``speed.py``'s ``hybrid-N-384.db`` (recombined SciFact sentences, synthetic vectors; built
on first use), query vectors given (embedding excluded), top 10, section unit:

- **hybrid, one-shot**: a ``Searcher`` without the long-lived caches (what `polaris search`
  and ``speed.py``'s ``hybrid_ms`` time), the KNN beside the BM25 list on a second connection
  where the file is large enough (``sqlite.reads.PARALLEL_FROM``);
- **hybrid, one connection**: the same with the KNN run after the BM25 list, on one connection;
- **KNN alone** and **BM25 alone**: ``Store.knn`` and ``Store.bm25`` inside one snapshot;
- **BM25 alone, every posting scored**: the same with MaxScore off (``bm25_postings.PRUNE_FROM``),
  which must give the same hits and scores (the run fails otherwise);
- **BM25 from a long-lived cache** (``Bm25Cache``, loaded first), with and without MaxScore
  (``bm25_cache.PRUNE_FROM``), which must agree too;
- **long-lived, first query**: a new ``Searcher`` on a new read-only ``Store`` with both caches
  loading in the background (as a ``PolarisIndex`` has), timed on its first query, ``--first``
  times; its connections read that query's pages (``sqlite.connect.MAP_FROM_READ``);
- **long-lived, first query, file mapped at once**: the same, alternating with it, both
  connections mapping the file from their first read (what every connection did before);
- **two threads at once** (``pair_speedup``): numpy work that streams through memory (32 MB
  arrays) and work that stays in the CPU's cache, each run twice in a row and then in two
  threads at once: how much of the machine a KNN beside the BM25 list can use.

Each round times every query once on each path; a query's time on a path is its fastest over
the rounds, and the table gives p50 / p95 over the queries. The two hybrid paths must return the
same hits (the run fails otherwise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, save_json  # noqa: E402
from speed import hybrid_db, queries, scifact_pieces  # noqa: E402


def pcts(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": 1000 * statistics.median(ordered), "p95": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]}


def measure(n: int, eval_dir: Path, nq: int, rounds: int, first: int) -> dict:
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.search.pipeline import Searcher
    from llama_index_polaris.engine.sqlite import bm25_cache, bm25_postings, reads
    from llama_index_polaris.engine.sqlite.bits import VectorCache
    from llama_index_polaris.engine.sqlite.bm25_cache import Bm25Cache
    from llama_index_polaris.engine.sqlite.store import Store
    from llama_index_polaris.engine.storage.scope import Scope

    path, _ = hybrid_db(n, 384, eval_dir)
    Store(path).close()  # any migration done before timing
    texts = scifact_pieces(eval_dir)[2][:nq]
    qvecs = queries(len(texts), 384)
    cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    parallel_from = reads.PARALLEL_FROM
    store = Store(path, readonly=True)
    searcher = Searcher(store, None, cfg)
    answers: dict[str, list] = {"hybrid, one-shot": [None] * len(texts), "hybrid, one connection": [None] * len(texts)}

    def hybrid(i: int, one_connection: bool) -> None:
        reads.PARALLEL_FROM = 2**62 if one_connection else parallel_from
        try:
            hits = searcher.search(texts[i], top_k=10, query_vector=qvecs[i])
        finally:
            reads.PARALLEL_FROM = parallel_from
        answers["hybrid, one connection" if one_connection else "hybrid, one-shot"][i] = [
            (h.chunk_id, round(h.score, 12)) for h in hits]

    bm25_answers: dict[str, list] = {"BM25 alone": [None] * len(texts), "BM25 alone, every posting scored": [None] * len(texts)}
    cache_answers: dict[str, list] = {"BM25 from a long-lived cache": [None] * len(texts),
                                      "BM25 from a long-lived cache, every posting scored": [None] * len(texts)}
    prune_from = bm25_postings.PRUNE_FROM
    ram = Bm25Cache(store, min_chunks=1)
    ram.refresh()  # loaded in the foreground: the warm path of a long-lived process

    def from_ram(i: int, dense: bool) -> None:
        bm25_cache.PRUNE_FROM = 2**62 if dense else prune_from
        try:
            found = ram.bm25(texts[i], cfg.candidate_pool, Scope())
        finally:
            bm25_cache.PRUNE_FROM = prune_from
        cache_answers["BM25 from a long-lived cache" + (", every posting scored" if dense else "")][i] = found

    def alone(i: int, side: str) -> None:
        with store.read():
            if side == "knn":
                store.knn(qvecs[i], 30, Scope(), fetch_k=10)
                return
            bm25_postings.PRUNE_FROM = 2**62 if side == "dense" else prune_from
            try:
                found = store.bm25(texts[i], cfg.candidate_pool, Scope())
            finally:
                bm25_postings.PRUNE_FROM = prune_from
            bm25_answers["BM25 alone, every posting scored" if side == "dense" else "BM25 alone"][i] = found

    paths = {"hybrid, one-shot": lambda i: hybrid(i, False), "hybrid, one connection": lambda i: hybrid(i, True),
             "KNN alone": lambda i: alone(i, "knn"), "BM25 alone": lambda i: alone(i, "bm25"),
             "BM25 alone, every posting scored": lambda i: alone(i, "dense"),
             "BM25 from a long-lived cache": lambda i: from_ram(i, False),
             "BM25 from a long-lived cache, every posting scored": lambda i: from_ram(i, True)}
    try:
        for fn in paths.values():  # warm: the file's pages in the OS cache, the modules loaded
            for i in range(len(texts)):
                fn(i)
        best = {name: [float("inf")] * len(texts) for name in paths}
        names = list(paths)
        for r in range(rounds):
            for i in range(len(texts)):
                for name in names[r % len(names):] + names[:r % len(names)]:  # each path first in turn
                    t = time.perf_counter()
                    paths[name](i)
                    best[name][i] = min(best[name][i], time.perf_counter() - t)
            print(f"round {r + 1}: " + ", ".join(f"{k} {1000 * statistics.median(v):.1f}" for k, v in best.items()),
                  file=sys.stderr, flush=True)
        differ = sum(a != b for a, b in zip(answers["hybrid, one-shot"], answers["hybrid, one connection"]))
        differ += sum(a != b for a, b in zip(*bm25_answers.values()))
        differ += sum(a != b for a, b in zip(*cache_answers.values()))
    finally:
        store.close()
    firsts: dict[str, list[float]] = {"long-lived, first query": [], "long-lived, first query, file mapped at once": []}
    for i in range(first):
        for name in list(firsts)[i % 2:] + list(firsts)[:i % 2]:
            s = Store(path, readonly=True)
            if name.endswith("mapped at once"):
                map_at_once(s, path)
            try:
                fresh = Searcher(s, None, cfg, vector_cache=VectorCache(s, background=True),
                                 bm25_cache=Bm25Cache(s, background=True))
                t = time.perf_counter()
                fresh.search(texts[i % len(texts)], top_k=10, query_vector=qvecs[i % len(texts)])
                firsts[name].append(time.perf_counter() - t)
            finally:
                for cache in (fresh.vector_cache, fresh.bm25_cache):
                    getattr(cache, "wait", lambda: None)()
                s.close()
    out = {"n": n, "queries": len(texts), "rounds": rounds, "parallel_from": parallel_from,
           "hybrid answers that differ between the two paths": differ, "two threads at once": pair_speedup(),
           **{name: pcts(v) for name, v in best.items()},
           "machine": machine_line(machine()), "loadavg": os.getloadavg()}
    out.update({name: pcts(v) for name, v in firsts.items() if v})
    return out


def pair_speedup(rounds: int = 5) -> dict[str, float]:
    """Time of two runs in a row over time of the same two in two threads at once (best of
    ``rounds``), for numpy work that streams 32 MB arrays and for work that stays in cache."""
    import threading

    import numpy as np

    big = [np.random.default_rng(i).random(4_000_000) for i in range(2)]

    def streaming(a: np.ndarray) -> None:
        for _ in range(10):
            np.multiply(a, 1.0000001, out=a)

    def cached(a: np.ndarray) -> None:
        b = a[:50_000].copy()
        for _ in range(400):
            np.multiply(b, 1.0000001, out=b)

    out = {}
    for name, work in (("streaming through memory", streaming), ("in cache", cached)):
        serial = pair = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            work(big[0])
            work(big[1])
            serial = min(serial, time.perf_counter() - t)
            t = time.perf_counter()
            other = threading.Thread(target=work, args=(big[0],))
            other.start()
            work(big[1])
            other.join()
            pair = min(pair, time.perf_counter() - t)
        out[name] = round(serial / pair, 2)
    return out


def map_at_once(store: object, path: Path) -> None:
    """``store``'s connection and a second one for its KNN, both mapping the file from their first read."""
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    connect = importlib.import_module("llama_index_polaris.engine.sqlite.connect")
    connect.map_file(store.conn)
    store._twin = connect.connect(path, readonly=True)
    connect.map_file(store._twin)
    store._twin_knns = 1  # counted as used: it stays mapped
    store._knn_worker = ThreadPoolExecutor(1, thread_name_prefix="polaris-knn")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--first", type=int, default=8, help="new long-lived searchers timed on their first query")
    args = ap.parse_args(argv)
    got = measure(args.n, Path(args.eval_dir), args.queries, args.rounds, args.first)
    save_json(f"oneshot_parts-{args.n}.json", got)
    print(f"{args.n:,} chunks, {got['queries']} queries, per-query best of {args.rounds} rounds (ms p50 / p95):")
    for name in ("hybrid, one-shot", "hybrid, one connection", "KNN alone", "BM25 alone", "BM25 alone, every posting scored",
                 "BM25 from a long-lived cache", "BM25 from a long-lived cache, every posting scored",
                 "long-lived, first query", "long-lived, first query, file mapped at once"):
        if name in got:
            print(f"  {name}: {got[name]['p50']:.1f} / {got[name]['p95']:.1f}")
    print("  two threads at once, speed-up over one after the other: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in got["two threads at once"].items()))
    print(f"  answers that differ between paths that must agree: {got['hybrid answers that differ between the two paths']}")
    return 1 if got["hybrid answers that differ between the two paths"] else 0


if __name__ == "__main__":
    sys.exit(main())
