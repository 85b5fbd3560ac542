"""Work by id on a big file (#24, 6b): what get_nodes, delete_nodes, delete and the replace inside
add cost through ``PolarisVectorStore``, and the plans of their statements.

    python benchmarks/by_id_speed.py [--size 1000000] [--reps 5]

Opens the file ``speed.py`` builds (``benchmarks/out/hybrid-N-384.db``: N chunks of recombined
SciFact text with synthetic vectors, 10 per document, all in collection ``default``) and, for
``--reps`` chunks spread over the file, times one call of each: ``get_nodes`` of one node id,
``delete_nodes`` of it, ``add`` of it again (the same node id: the replace path), and
``delete`` of its document followed by ``add`` of the document's nodes (the file ends as it
began, under the same ids). Opening the store is timed apart (it runs any pending migration).
Prints a Markdown table of the median milliseconds per call and each call's query plans.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402

from llama_index_polaris import PolarisVectorStore  # noqa: E402
from llama_index_polaris.engine.config import load_config  # noqa: E402


def plans(conn, statements: list[str]) -> set[str]:
    """The plan lines of the traced statements that read chunks or documents."""
    out = set()
    for sql in statements:
        if sql.startswith("--") or not re.search(r"\b(chunks|documents)\b", sql):
            continue
        if sql.split()[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "INSERT"):
            continue
        out.update(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
                   if re.search(r"\b(c|d|chunks|documents)\b", r[3]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    path = out_dir() / f"hybrid-{args.size}-384.db"
    t = time.perf_counter()
    store = PolarisVectorStore(path, config=load_config(use_user_config=False))
    opened = time.perf_counter() - t
    conn = store.client.conn
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    times: dict[str, list[float]] = {}
    seen: dict[str, set[str]] = {}

    def timed(name: str, fn):
        traced.clear()
        t0 = time.perf_counter()
        result = fn()
        times.setdefault(name, []).append(time.perf_counter() - t0)
        seen.setdefault(name, set()).update(plans(conn, traced))
        return result

    step = args.size // args.reps
    for i in range(args.reps):
        node_id = f"n{i * step + step // 2}"
        (node,) = timed("get_nodes (1 id)", lambda: store.get_nodes(node_ids=[node_id]))
        timed("delete_nodes (1 id)", lambda: store.delete_nodes(node_ids=[node_id]))
        timed("add (1 node, new)", lambda: store.add([node]))
        timed("add (1 node, replace)", lambda: store.add([node]))
        doc_id = node.ref_doc_id
        nodes = store.get_nodes(node_ids=[f"n{(i * step + step // 2) // 10 * 10 + j}" for j in range(10)])
        timed("delete (1 document)", lambda: store.delete(doc_id))
        timed("add (10 nodes of a document)", lambda: store.add(nodes))
    conn.set_trace_callback(None)
    store.close()
    print(f"{path.name}: opened in {opened:.1f} s")
    print("| call | median ms | plan |")
    print("|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts) * 1000:.1f} | {'; '.join(sorted(seen[name]))} |")


if __name__ == "__main__":
    main()
