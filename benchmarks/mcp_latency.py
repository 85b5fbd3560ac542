"""How fast `polaris mcp` answers: a fresh server's first answer, and warm calls.

    python benchmarks/mcp_latency.py [NAME ...] [--fresh 5] [--calls 60]

On each doc set's cached index (``benchmarks/sections.py index``), with the MCP SDK's own
client (``mcp.Client``, ``mode="legacy"``: the initialize handshake the agents' clients use):

- fresh: the process an agent starts. ``--fresh`` times, a new `polaris mcp --db DB` over
  stdio: spawn -> session initialized -> first ``search`` answered, the first call sent as
  soon as the session is up (the server's background warm-up is still loading the model).
- warm: one session, ``--calls`` calls of each tool over the set's questions: ``search``
  (defaults), ``read_section`` of the first hit, ``outline`` of its document, ``status``
  (compares every file on disk with the index; hashes are remembered per file version),
  over stdio and over streamable HTTP (`polaris mcp --http 127.0.0.1:0`).
- for reference, `polaris search QUERY --json` as a new process each time (``--fresh`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, machine_line, out_dir, pcts, publish, table  # noqa: E402
from docsets import load_set  # noqa: E402
from sections import index_path  # noqa: E402

from mcp import Client, StdioServerParameters  # noqa: E402

POLARIS = str(Path(sys.executable).with_name("polaris"))


def server(db: Path) -> StdioServerParameters:
    return StdioServerParameters(command=POLARIS, args=["mcp", "--db", str(db)], cwd=str(out_dir()))


async def fresh_once(db: Path, query: str) -> dict[str, float]:
    t0 = time.perf_counter()
    async with Client(server(db), mode="legacy") as client:
        t1 = time.perf_counter()
        result = await client.call_tool("search", {"query": query})
        t2 = time.perf_counter()
        assert not result.is_error, result.content
    return {"initialize": t1 - t0, "first_search": t2 - t1, "total": t2 - t0}


async def warm(target: Any, queries: list[str], calls: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {"search": [], "read_section": [], "outline": [], "status": []}
    async with Client(target, mode="legacy") as client:
        await client.call_tool("search", {"query": queries[0]})  # the warm-up finished
        for i in range(calls):
            q = queries[i % len(queries)]
            t = time.perf_counter()
            hits = (await client.call_tool("search", {"query": q})).structured_content["hits"]
            times["search"].append(time.perf_counter() - t)
            if not hits:
                continue
            h = hits[0]
            for tool, args in (("read_section", {"document": h["document"], "heading_path": h["heading_path"],
                                                 "collection": h["collection"]}),
                               ("outline", {"document": h["document"], "collection": h["collection"]}),
                               ("status", {})):
                t = time.perf_counter()
                result = await client.call_tool(tool, args)
                times[tool].append(time.perf_counter() - t)
                assert not result.is_error, result.content
    return {tool: pcts(ts) for tool, ts in times.items()}


def http_server(db: Path) -> tuple[str, subprocess.Popen]:
    proc = subprocess.Popen([POLARIS, "mcp", "--db", str(db), "--http", "127.0.0.1:0"], cwd=out_dir(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"MCP server at (http://\S+/mcp)", line)
        if found:
            return found.group(1), proc
    raise SystemExit(f"`polaris mcp --http` did not start: {proc.wait()}")


def cli_once(db: Path, query: str) -> float:
    t = time.perf_counter()
    subprocess.run([POLARIS, "search", query, "--db", str(db), "--json"], cwd=out_dir(), check=True,
                   capture_output=True)
    return time.perf_counter() - t


def measure(name: str, fresh: int, calls: int) -> dict[str, Any]:
    ds = load_set(name)
    db = index_path(ds)
    if not db.exists():
        raise SystemExit(f"{db}: no cached index; run `python benchmarks/sections.py index {name}` first.")
    queries = [q["text"] for q in ds.queries.values()]
    runs = [asyncio.run(fresh_once(db, queries[i % len(queries)])) for i in range(fresh)]
    cold = {k: statistics.median(r[k] for r in runs) * 1000 for k in ("initialize", "first_search", "total")}
    stdio = asyncio.run(warm(server(db), queries, calls))
    url, proc = http_server(db)
    try:
        http = asyncio.run(warm(url, queries, calls))
    finally:
        proc.terminate()
        proc.wait(30)
    cli = statistics.median(cli_once(db, queries[i % len(queries)]) for i in range(fresh)) * 1000
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    return {"set": name, "documents": docs, "chunks": chunks, "fresh": cold, "fresh_runs": runs,
            "stdio": stdio, "http": http, "cli_ms": cli}


def render(results: dict[str, Any]) -> str:
    rows = []
    for r in results["sets"]:
        f = r["fresh"]
        rows.append([r["set"], f"{r['documents']} / {r['chunks']}", f"{f['initialize']:.0f}", f"{f['first_search']:.0f}",
                     f"{f['total']:.0f}", f"{r['cli_ms']:.0f}"])
    out = [f"`polaris mcp` latency (ms), {machine_line(results['machine'])}", "",
           f"Fresh server over stdio (median of {results['fresh_n']}): spawn -> initialized -> first search answered;"
           " `polaris search --json` as a new process for reference.", "",
           table(["set", "documents / chunks", "spawn -> initialized", "-> first search", "spawn -> first answer",
                  "CLI search (new process)"], rows), "",
           f"Warm calls, p50 / p95 ({results['calls']} of each, one session):", ""]
    rows = []
    for r in results["sets"]:
        for transport in ("stdio", "http"):
            t = r[transport]
            rows.append([r["set"], transport] + [f"{t[tool]['p50']:.1f} / {t[tool]['p95']:.1f}"
                                                 for tool in ("search", "read_section", "outline", "status")])
    out.append(table(["set", "transport", "search", "read_section", "outline", "status"], rows))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=["cargo-book", "typer"])
    ap.add_argument("--fresh", type=int, default=5)
    ap.add_argument("--calls", type=int, default=60)
    args = ap.parse_args(argv)
    results = {"machine": machine(), "fresh_n": args.fresh, "calls": args.calls,
               "sets": [measure(n, args.fresh, args.calls) for n in args.names]}
    publish("mcp_latency", results, render)


if __name__ == "__main__":
    main()
