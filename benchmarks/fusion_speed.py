"""What the learned fusion costs (#27): hybrid p50/p95, the fixed fusion against learned
weights on every feature (``fusion_weights``, the most work it can do), alternated query by
query in one process on the same file.

    python benchmarks/fusion_speed.py [EVAL_DIR] [--n 100000] [--queries 100] [--ks 10] [--rank-only]

Then ``rank()`` alone on each query's real first pool, CPU time (``time.process_time``),
fixed and learned alternated: the only code the learned fusion adds to a query.

The file is ``benchmarks/speed.py``'s ``hybrid-N-384.db`` (recombined SciFact sentences,
synthetic vectors; built on first use). One-shot (no caches) and long-lived (vector and BM25
caches) searchers, query vectors given (embedding excluded), section unit.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, pcts, save_json, table  # noqa: E402
from speed import alternated, warm_searchers  # noqa: E402


HEAD = ["searcher", "k", "fixed p50 / p95 ms", "learned p50 / p95 ms", "p50 difference ms", "p50 ratio"]


def rank_only(s: Any, texts: list[str], qvecs: Any, cfg: Any, weights: dict, reps: int = 20) -> dict:
    """CPU time of ``rank()`` alone (``time.process_time``, less sensitive to other jobs than the
    wall clock) on each query's real first pool, fixed and learned alternated: the only code
    the learned fusion adds to a query."""
    from llama_index_polaris.engine.search.rank import rank

    pools = []
    for text, qvec in zip(texts, qvecs):
        vec = s._knn(qvec, cfg.candidate_pool, _scope(s))
        bm = s._bm25(text, cfg.candidate_pool, _scope(s))
        pools.append((vec, bm, s._candidates([h[0] for h in [*vec, *bm]], False),
                      s.params(text, 10), s.params(text, 10)))
    learned_cfg = cfg.replace(fusion_weights=weights)
    s.config = learned_cfg
    pools = [(v, b, c, p, s.params(t, 10)) for (v, b, c, p, _), t in zip(pools, texts)]
    s.config = cfg
    secs: dict[str, list[float]] = {"fixed": [], "learned": []}
    for rep in range(reps):
        for v, b, c, fixed, learned in pools:
            for label, p in ((("fixed", fixed), ("learned", learned)) if rep % 2 else (("learned", learned), ("fixed", fixed))):
                t = time.process_time()
                rank(v, b, c, p)
                secs[label].append(time.process_time() - t)
    f, o = pcts(secs["fixed"]), pcts(secs["learned"])
    print(f"rank() alone, CPU ms per query: fixed p50 {f['p50']:.3f} / mean {f.get('mean', 0):.3f}, learned p50"
          f" {o['p50']:.3f}, difference {o['p50'] - f['p50']:+.3f} ms", flush=True)
    return {"fixed": f, "learned": o}


def _scope(s: Any) -> Any:
    from llama_index_polaris.engine.storage.scope import resolve_scope

    with s.store.read() as conn:
        return resolve_scope(conn)


def main(argv: Sequence[str] | None = None) -> int:
    from llama_index_polaris.engine.search.learned import NAMES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ks", default="10")
    ap.add_argument("--rank-only", action="store_true", help="only the CPU time of rank() on each query's real pool")
    args = ap.parse_args(argv)
    cfg, texts, qvecs, searchers = warm_searchers(args.n, Path(args.eval_dir), args.queries)
    rows, out = [], {"n": args.n, "queries": len(texts), "machine": machine_line(machine()), "loadavg_start": os.getloadavg()}
    weights = {n: 0.1 * (j + 1) * (-1) ** j for j, n in enumerate(NAMES)}
    for name, s in ({} if args.rank_only else searchers).items():
        for k in (int(x) for x in args.ks.split(",")):
            configs = {"fixed": cfg, "learned": cfg.replace(fusion_weights=weights)}
            secs = alternated(s, texts, qvecs, k, configs)
            f, o = pcts(secs["fixed"]), pcts(secs["learned"])
            out[f"{name} k={k}"] = {"fixed": f, "learned": o}
            rows.append([name, k, f"{f['p50']:.2f} / {f['p95']:.2f}", f"{o['p50']:.2f} / {o['p95']:.2f}",
                         f"{o['p50'] - f['p50']:+.2f}", f"{o['p50'] / f['p50']:.3f}"])
            print(table(HEAD, rows[-1:]), flush=True)
    out["rank only"] = rank_only(searchers["long-lived"], texts, qvecs, cfg, weights)
    out["loadavg_end"] = os.getloadavg()
    if rows:
        print(table(HEAD, rows))
    save_json(f"fusion_speed-{args.n}.json", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
