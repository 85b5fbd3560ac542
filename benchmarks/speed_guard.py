"""The speed guard (#38): fails when the one-shot hybrid path at 100k chunks is 20% slower than
the recorded figure, measured as a ratio against FTS5 BM25 alone in the same run.

    python benchmarks/speed_guard.py [EVAL_DIR] [--n 100000] [--queries 40] [--rounds 5]
                                     [--record] [--recorded FILE] [--tolerance 0.2]

A wall-clock figure moves with the machine and its load; a ratio of two paths timed in one
process, query by query and alternated, moves far less. The one-shot path is what
``benchmarks/speed.py`` calls ``hybrid_ms``: a ``Searcher`` without the long-lived caches
(a `polaris search`), query vectors given (embedding excluded), top 10 in section unit. The
yardstick is FTS5's own BM25 over the same file (``sqlite.bm25.bm25``, a pool of 30), the
part of the work the engine does not write. Each round times every query once on each path
(alternating which goes first); each query's time on each path is its fastest over the
rounds (the work is the same every round; what is slower is another job's), and the ratio
is p50(hybrid) / p50(FTS5) over those, so one noisy round does not decide.

The file is ``speed.py``'s ``hybrid-N-384.db`` (recombined SciFact sentences, synthetic
vectors; built on first use). ``--record`` writes the figure to ``benchmarks/speed_guard.json``
(the one in the repository holds the recorded figures), one per kind of CPU (``lscpu``'s model
name): the ratio still moves with the machine's kind (the KNN streams memory, FTS5 computes; an
Intel Xeon measured 0.326 where the AMD EPYC recorded 0.262, with the same code). Otherwise the
run exits 1 when its ratio is above this kind's recorded one times 1 + tolerance, saying both,
and 2 when nothing is recorded for this kind of CPU or for this size.
"""

from __future__ import annotations

import argparse
import json
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
from speed import POOL, hybrid_db, queries, scifact_pieces  # noqa: E402

RECORDED = Path(__file__).resolve().parent / "speed_guard.json"


def measure(n: int, eval_dir: Path, nq: int, rounds: int) -> dict:
    """Per round, p50 of each path over the queries, and their ratio."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.search.pipeline import Searcher
    from llama_index_polaris.engine.sqlite.bm25 import bm25
    from llama_index_polaris.engine.sqlite.store import Store

    path, _ = hybrid_db(n, 384, eval_dir)
    Store(path).close()  # any migration done before timing
    texts = scifact_pieces(eval_dir)[2][:nq]
    qvecs = queries(len(texts), 384)
    cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    store = Store(path, readonly=True)
    try:
        searcher = Searcher(store, None, cfg)
        paths = {"fts5": lambda i: bm25(store.conn, texts[i], POOL),
                 "hybrid": lambda i: searcher.search(texts[i], top_k=10, query_vector=qvecs[i])}
        for fn in paths.values():  # warm: the file's pages in the OS cache, the modules loaded
            for i in range(len(texts)):
                fn(i)
        per_round, best = [], {"fts5": [float("inf")] * len(texts), "hybrid": [float("inf")] * len(texts)}
        for r in range(rounds):
            secs: dict[str, list[float]] = {"fts5": [], "hybrid": []}
            for i in range(len(texts)):
                for name in (("fts5", "hybrid") if (r + i) % 2 else ("hybrid", "fts5")):
                    t = time.perf_counter()
                    paths[name](i)
                    secs[name].append(time.perf_counter() - t)
                    best[name][i] = min(best[name][i], secs[name][-1])
            p50 = {name: 1000 * statistics.median(s) for name, s in secs.items()}
            per_round.append({**{f"{name}_p50_ms": v for name, v in p50.items()}, "ratio": p50["hybrid"] / p50["fts5"]})
            print(f"round {r + 1}: hybrid p50 {p50['hybrid']:.1f} ms, FTS5 p50 {p50['fts5']:.1f} ms,"
                  f" ratio {per_round[-1]['ratio']:.3f}", file=sys.stderr, flush=True)
    finally:
        store.close()
    p50 = {name: 1000 * statistics.median(b) for name, b in best.items()}
    return {"n": n, "queries": len(texts), "rounds": per_round, "ratio": p50["hybrid"] / p50["fts5"],
            "hybrid_p50_ms": p50["hybrid"], "fts5_p50_ms": p50["fts5"],
            "machine": machine_line(machine()), "cpu": machine().get("cpu", "?"), "loadavg": os.getloadavg()}


def figures(recorded: Path) -> list[dict]:
    """The recorded figures, one per kind of CPU (an older file holds one figure)."""
    if not recorded.exists():
        return []
    data = json.loads(recorded.read_text())
    found = data["figures"] if "figures" in data else [data]
    for figure in found:  # a figure recorded before the CPU was kept: its machine line begins with it
        figure.setdefault("cpu", figure.get("machine", "?").split(",")[0])
    return found


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--record", action="store_true", help="write this run's figure as the recorded one")
    ap.add_argument("--recorded", default=str(RECORDED), help="the recorded figure (JSON)")
    ap.add_argument("--tolerance", type=float, default=0.2, help="how much slower than recorded fails (0.2: 20%%)")
    args = ap.parse_args(argv)
    got = measure(args.n, Path(args.eval_dir), args.queries, args.rounds)
    save_json(f"speed_guard-{args.n}.json", got)
    recorded = Path(args.recorded)
    line = (f"one-shot hybrid at {args.n:,} chunks: p50 {got['hybrid_p50_ms']:.1f} ms, FTS5 alone"
            f" {got['fts5_p50_ms']:.1f} ms: ratio {got['ratio']:.3f}")
    kept = figures(recorded)
    if args.record:
        kept = [f for f in kept if f["cpu"] != got["cpu"]] + [got]
        recorded.write_text(json.dumps({"figures": kept}, indent=1) + "\n")
        print(f"{line} (recorded for {got['cpu']} in {recorded})")
        return 0
    was = next((f for f in kept if f["cpu"] == got["cpu"]), None)
    if was is None:
        print(f"{line}; no figure recorded for this kind of CPU ({got['cpu']}) in {recorded}"
              f" (recorded for: {', '.join(f['cpu'] for f in kept) or 'none'}): on a quiet machine of this kind,"
              " run again with --record", file=sys.stderr)
        return 2
    if was["n"] != args.n:
        print(f"{line}; the recorded figure is for {was['n']:,} chunks: pass --n {was['n']}", file=sys.stderr)
        return 2
    limit = was["ratio"] * (1 + args.tolerance)
    verdict = "ok" if got["ratio"] <= limit else "SLOWER"
    print(f"{line}; recorded {was['ratio']:.3f}, limit {limit:.3f} (+{args.tolerance:.0%}): {verdict}")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
