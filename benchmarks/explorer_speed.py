"""The Datasette explorer against the engine on one big file, in one process, one run.

    python benchmarks/explorer_speed.py [DB] [--queries N] [--reps N]

DB defaults to benchmarks/out/hybrid-1000000-384.db (1M chunks, 100k documents, built by
benchmarks/speed.py; its vectors are synthetic, so queries are BM25, as the page's mode=bm25).
Each query is timed warm, five ways, interleaved so load on the machine falls on all alike:

    engine      Searcher.search(q, mode="bm25") on the plugin's own PolarisIndex
    cli         `polaris search q --mode bm25 --json`'s work in this process (a fresh
                fast_start index per query, as each CLI run opens one)
    json        GET /<db>/-/polaris.json?q=...&mode=bm25   (Datasette's ASGI client, no socket)
    page        GET /<db>/-/polaris?q=...&mode=bm25        (the HTML page)
    page_empty  GET /<db>/-/polaris                        (the page before any query)
    documents   GET /<db>/-/polaris/documents.json?q=...   (the document filter's query)

and reports p50/p95 in ms, the page's size, and json / engine and page / engine as ratios
of medians from this same run. Writes benchmarks/out/explorer_speed.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, pcts  # noqa: E402

QUERIES = [
    "vitamin D deficiency", "tumour suppressor gene expression", "insulin resistance in obese mice",
    "antibiotic resistance bacteria", "risk of breast cancer", "stem cell differentiation",
    "blood pressure in elderly patients", "immune response to infection", "protein folding",
    "smoking and lung function", "malaria transmission", "dna methylation aging",
]
TYPED = ["a", "ab", "abst", "000", "doc-1", "doc-12", "doc-123"]


async def bench(db: Path, nq: int, reps: int, queries: Sequence[str] = QUERIES) -> dict[str, Any]:
    from datasette.app import Datasette

    from datasette_polaris.engines import index_for
    from llama_index_polaris.engine.index import PolarisIndex

    ds = Datasette([str(db)])
    await ds.invoke_startup()
    name = next(iter(ds.databases.keys() - {"_internal", "_memory"}))
    base = f"/{name}/-/polaris"
    engine = index_for(str(db))
    queries = list(queries)[:nq]
    times: dict[str, list[float]] = {k: [] for k in ("engine", "cli", "json", "page", "page_empty", "documents")}
    sizes: dict[str, int] = {}

    async def get(path: str, key: str) -> None:
        t = time.perf_counter()
        r = await ds.client.get(path)
        times[key].append(time.perf_counter() - t)
        assert r.status_code == 200, (path, r.status_code, r.text[:500])
        sizes[key] = max(sizes.get(key, 0), len(r.content))

    def timed(key: str, fn: Any) -> Any:
        t = time.perf_counter()
        out = fn()
        times[key].append(time.perf_counter() - t)
        return out

    def one_shot(q: str) -> list[Any]:
        with PolarisIndex(db, config=engine.config, readonly=True, fast_start=True) as index:
            return index.searcher(lambda _q: None).search(q, mode="bm25", top_k=10)

    for q in queries:  # warm-up: the first query of each kind reads the file's pages
        engine.searcher().search(q, mode="bm25", top_k=10)
        await ds.client.get(f"{base}.json?q={q}&mode=bm25")
    await ds.client.get(base)
    for _ in range(reps):
        for q in queries:
            hits = timed("engine", lambda: engine.searcher().search(q, mode="bm25", top_k=10))
            timed("cli", lambda: one_shot(q))
            await get(f"{base}.json?q={q}&mode=bm25", "json")
            await get(f"{base}?q={q}&mode=bm25", "page")
            assert hits, q
        await get(base, "page_empty")
        for typed in TYPED:
            await get(f"{base}/documents.json?q={typed}&_size=20", "documents")
    stats = {k: pcts(v) for k, v in times.items()}
    p50 = {k: s["p50"] for k, s in stats.items()}
    counts = engine.store.counts()
    return {
        "db": str(db), "documents": counts["documents"], "chunks": counts["chunks"], "queries": len(queries),
        "reps": reps, "ms": stats, "bytes": sizes,
        "ratios": {"json/engine": p50["json"] / p50["engine"], "page/engine": p50["page"] / p50["engine"],
                   "cli/engine": p50["cli"] / p50["engine"]},
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db", nargs="?", default=str(OUT / "hybrid-1000000-384.db"))
    ap.add_argument("--queries", type=int, default=len(QUERIES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--query", action="append", help="the queries (default: SciFact topics that match the file)")
    args = ap.parse_args(argv)
    result = asyncio.run(bench(Path(args.db), args.queries, args.reps, args.query or QUERIES))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "explorer_speed.json").write_text(json.dumps(result, indent=2))
    print(f"{result['db']}: {result['documents']:,} documents, {result['chunks']:,} chunks;"
          f" {result['queries']} BM25 queries x {result['reps']}")
    print("| request | p50 ms | p95 ms | bytes |\n|---|---|---|---|")
    for key, s in result["ms"].items():
        print(f"| {key} | {s['p50']:.1f} | {s['p95']:.1f} | {result['bytes'].get(key, '')} |")
    print("ratios of medians: " + ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items()))
    return result


if __name__ == "__main__":
    main()
