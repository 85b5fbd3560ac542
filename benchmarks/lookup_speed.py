"""What an identifier lookup costs: the docs sets' lookups with the lift on and off, one process.

    python benchmarks/lookup_speed.py [NAME ...] [--rounds 5]

Each set's cached index (``benchmarks/sections.py`` builds it) answers its questions that
are queries of identifiers only (``literal.is_lookup``), hybrid, section unit, long-lived
(one searcher; the query vectors come from the engine's recent-query cache after the
warm-up), alternating ``IDENTIFIER_LOOKUP`` off and on round by round so that both see the
same machine load. Prints p50 / p95 per setting and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsets import load_set  # noqa: E402
from sections import open_index  # noqa: E402

from llama_index_polaris.engine.search import literal, pipeline  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=["cargo-book", "uv"])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print("| set | lookups | off p50 / p95 ms | on p50 / p95 ms | on / off (p50) |")
    print("|---|---|---|---|---|")
    for name in args.names:
        ds = load_set(name)
        index, _ = open_index(ds)
        searcher = index.searcher()
        queries = [q["text"] for q in ds.queries.values() if literal.is_lookup(q["text"])]
        for q in queries:
            searcher.search(q, top_k=10)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for on in (False, True):
                pipeline.IDENTIFIER_LOOKUP = on
                for q in queries:
                    t = time.perf_counter()
                    searcher.search(q, top_k=10)
                    times[on].append(1000 * (time.perf_counter() - t))
        pipeline.IDENTIFIER_LOOKUP = True
        p = {on: (statistics.median(ts), sorted(ts)[int(0.95 * (len(ts) - 1))]) for on, ts in times.items()}
        print(f"| {name} | {len(queries)} | {p[False][0]:.2f} / {p[False][1]:.2f} | {p[True][0]:.2f} / {p[True][1]:.2f} |"
              f" {p[True][0] / p[False][0]:.2f} |", flush=True)
        index.close()


if __name__ == "__main__":
    main()
