"""What a fixed candidate pool costs: hybrid p50/p95 at several k, the pool of today's
``candidate_pool`` against the pool that followed k before (top_k x 3, x 2 in section unit),
alternated query by query in one process on the same file.

    python benchmarks/pool_speed.py [EVAL_DIR] [--n 100000] [--queries 100] [--ks 1,3,5,10,20]

The file is ``benchmarks/speed.py``'s ``hybrid-N-384.db`` (recombined SciFact sentences,
synthetic vectors; built on first use). One-shot (no caches) and long-lived (vector and BM25
caches) searchers, query vectors given (embedding excluded), section unit.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, pcts, save_json, table  # noqa: E402
from speed import alternated, warm_searchers  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ks", default="1,3,5,10,20")
    args = ap.parse_args(argv)
    cfg, texts, qvecs, searchers = warm_searchers(args.n, Path(args.eval_dir), args.queries)
    rows, out = [], {"n": args.n, "queries": len(texts), "machine": machine_line(machine()), "loadavg_start": os.getloadavg()}
    for name, s in searchers.items():
        for k in (int(x) for x in args.ks.split(",")):
            pools = {"fixed": cfg.candidate_pool, "followed k": min(k * 3 * 2, 4096)}
            secs = alternated(s, texts, qvecs, k, {label: cfg.replace(candidate_pool=pool)
                                                   for label, pool in pools.items()})
            f, o = pcts(secs["fixed"]), pcts(secs["followed k"])
            out[f"{name} k={k}"] = {"fixed": f, "followed k": o, "pools": pools}
            rows.append([name, k, pools["fixed"], f"{f['p50']:.2f} / {f['p95']:.2f}", pools["followed k"],
                         f"{o['p50']:.2f} / {o['p95']:.2f}", f"{f['p50'] / o['p50']:.2f}"])
            print(table(["searcher", "k", "pool", "p50 / p95 ms", "pool before", "p50 / p95 ms before", "p50 ratio"],
                        rows[-1:]), flush=True)
    out["loadavg_end"] = os.getloadavg()
    text = table(["searcher", "k", "pool", "p50 / p95 ms", "pool before", "p50 / p95 ms before", "p50 ratio"], rows)
    print(text)
    save_json(f"pool_speed-{args.n}.json", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
