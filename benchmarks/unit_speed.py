"""What answering in sections costs: hybrid latency, unit chunk against unit section, same process.

    python benchmarks/unit_speed.py [EVAL_DIR] [--sizes 10000,100000] [--queries 50]

On speed.py's hybrid files (recombined SciFact text, synthetic clustered vectors; built if
missing) each query runs in both units back to back, one-shot (a new Searcher, no caches:
`polaris search`) and long-lived (the sign-bit and BM25 caches loaded and warm: a notebook,
a retriever, Datasette). Section mode fetches twice the chunks per list and reads each
hit's section (its span and chunks). Query vectors are given, so no embedding is timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, pcts  # noqa: E402
from speed import hybrid_db, queries, scifact_pieces  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.sqlite.bm25_cache import Bm25Cache  # noqa: E402
from llama_index_polaris.engine.search.pipeline import Searcher  # noqa: E402
from llama_index_polaris.engine.sqlite.bits import VectorCache  # noqa: E402
from llama_index_polaris.engine.sqlite.store import Store  # noqa: E402


def timed(searcher: Searcher, texts: list[str], qvecs, unit: str, i: int) -> float:
    t = time.perf_counter()
    searcher.search(texts[i], top_k=10, query_vector=qvecs[i], unit=unit)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("eval_dir", nargs="?", type=Path, default=DEFAULT_EVAL)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    _, _, texts = scifact_pieces(args.eval_dir)
    cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    print(f"{machine_line(machine())}; load {os.getloadavg()[0]:.1f}\n")
    print("| chunks | process | unit chunk p50 / p95 ms | unit section p50 / p95 ms | section / chunk (p50) |")
    print("|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        path, _ = hybrid_db(n, 384, args.eval_dir)
        qvecs = queries(args.queries, 384)
        store = Store(path, readonly=True)
        one_shot = Searcher(store, None, cfg)
        vector_cache, bm25_cache = VectorCache(store), Bm25Cache(store)
        vector_cache.refresh(), bm25_cache.refresh()
        long_lived = Searcher(store, None, cfg, vector_cache, bm25_cache)
        for name, searcher in (("one-shot", one_shot), ("long-lived", long_lived)):
            for i in range(min(5, args.queries)):  # warm both paths (page cache, postings) before timing
                timed(searcher, texts, qvecs, "chunk", i), timed(searcher, texts, qvecs, "section", i)
            times = {"chunk": [], "section": []}
            for i in range(args.queries):
                for unit in (("chunk", "section") if i % 2 else ("section", "chunk")):  # alternate the order
                    times[unit].append(timed(searcher, texts, qvecs, unit, i))
            c, s = pcts(times["chunk"]), pcts(times["section"])
            print(f"| {n:,} | {name} | {c['p50']:.1f} / {c['p95']:.1f} | {s['p50']:.1f} / {s['p95']:.1f} |"
                  f" {s['p50'] / c['p50']:.2f} |", flush=True)
        store.close()


if __name__ == "__main__":
    main()
