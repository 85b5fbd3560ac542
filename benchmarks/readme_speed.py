"""The README's speed table, every row from this one run on this machine.

    python benchmarks/readme_speed.py [--docs DIR...] [--queries 30] [--repeat 3]

Rows: `polaris index` of the example handbook (chunk + embed + store, new file), an
unchanged re-index, `polaris search` cold in a new process, one hybrid query in a
long-lived process (engine, and through LlamaIndex's `index.as_retriever()`), and
chunking through `PolarisNodeParser` against LlamaIndex's `MarkdownNodeParser` +
`SentenceSplitter` (benchmarks/bench_chunk.py's functions, CPU time, best of
``--repeat``) on the held-out doc sets. Prints the Markdown table with the date, the
machine and its load average, for pasting into the README; older and larger runs are in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_chunk  # noqa: E402
from common import DEFAULT_EVAL, DOCSETS, REPO, machine, machine_line, pcts  # noqa: E402

POLARIS = str(Path(sys.executable).with_name("polaris"))
HELD_OUT = ("pydantic", "sqlmodel", "typer", "uv", "mkdocs", "poetry")
QUESTIONS = ("how do we handle expired sessions", "rrf_k", "rate limits per plan", "restore a backup",
             "who approves a deploy", "retention of audit logs")


def polaris(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    proc = subprocess.run([POLARIS, *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg")})
    return proc, time.perf_counter() - started


def index_rows(work: Path, cold_runs: int = 5) -> list[tuple[str, str]]:
    shutil.copytree(REPO / "examples" / "handbook", work / "handbook")
    (work / "polaris.toml").write_text('model_id = "all-minilm-l6-v2"\n')
    proc, first = polaris("index", "handbook", "--json", "--quiet", cwd=work)
    report = json.loads(proc.stdout)
    proc, again = polaris("index", "handbook", "--json", "--quiet", cwd=work)
    second = json.loads(proc.stdout)
    colds = [polaris("search", "how do we handle expired sessions", "--json", cwd=work)[1] for _ in range(cold_runs)]
    return [
        (f"`polaris index` of the example handbook, new file ({report['added']} files, {report['chunks_embedded']}"
         " chunks: chunk + embed + store, process start included)",
         f"{first:.1f} s wall, {report['chunks_embedded'] / first:.0f} chunks/s"),
        ("the same `polaris index` again, nothing changed",
         f"{again:.2f} s wall, {second['chunks_embedded']} chunks embedded"),
        ("`polaris search` cold, new process (imports, model session, query)",
         f"{statistics.median(colds):.2f} s wall (median of {cold_runs})"),
    ]


def query_rows(work: Path, queries: int) -> list[tuple[str, str]]:
    from llama_index.core import VectorStoreIndex

    from llama_index_polaris import PolarisEmbedding, PolarisVectorStore
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    asked = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" {i}") for i in range(queries)]
    with PolarisIndex(work / "polaris.db", config=cfg, readonly=True) as index:
        index.search("warm up")
        engine = [_timed(index.search, q) for q in asked]
    store = PolarisVectorStore(db_path=str(work / "polaris.db"), config=cfg)
    retriever = VectorStoreIndex.from_vector_store(
        store, embed_model=PolarisEmbedding("all-minilm-l6-v2", config=cfg)).as_retriever(similarity_top_k=10)
    retriever.retrieve("warm up")
    door = [_timed(retriever.retrieve, f"{q}?") for q in asked]  # new texts: query vectors are cached per text
    store.close()
    e, d = pcts(engine), pcts(door)
    return [
        (f"one hybrid query, long-lived process, handbook ({queries} questions, query embedding included)",
         f"{e['p50']:.1f} / {e['p95']:.1f} ms p50 / p95"),
        ("the same through LlamaIndex (`VectorStoreIndex.from_vector_store(...).as_retriever()`)",
         f"{d['p50']:.1f} / {d['p95']:.1f} ms p50 / p95"),
    ]


def chunk_rows(folders: list[str], repeat: int) -> list[tuple[str, str]]:
    import logging

    import llama_index.core  # noqa: F401  (imported before the clock, as bench_chunk does)

    logging.getLogger("llama_index_polaris").setLevel(logging.ERROR)  # the parser's per-file cut warnings
    texts = [t for _, t in bench_chunk.docs_corpus(folders)]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    counter = bench_chunk.minilm_counter()
    fresh = [bench_chunk.minilm_counter() for _ in range(repeat)]
    _, polaris_cpu, _ = bench_chunk.timed(lambda: bench_chunk.polaris_node_parser(texts, fresh.pop()), repeat)
    _, llama_cpu, _ = bench_chunk.timed(lambda: bench_chunk.llamaindex(texts, counter), repeat)
    ours, theirs = megabytes / polaris_cpu, megabytes / llama_cpu
    return [(f"chunking {megabytes:.2f} MB of held-out docs ({len(texts)} files), `PolarisNodeParser` against"
             " LlamaIndex `MarkdownNodeParser` + `SentenceSplitter`, same MiniLM tokenizer",
             f"{ours:.2f} against {theirs:.2f} MB per CPU-second: **{ours / theirs:.2f}x**")]


def _timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", nargs="*", default=[str(DOCSETS / n / "docs") for n in HELD_OUT])
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold-runs", type=int, default=5, help="cold `polaris search` runs (the median is shown)")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = index_rows(work, args.cold_runs) + query_rows(work, args.queries)
    rows += chunk_rows(args.docs, args.repeat)
    print(f"One run, {started}, {machine_line(machine())}; load average {load[0]:.1f} at the start,"
          f" {os.getloadavg()[0]:.1f} at the end (2 cores shared).\n")
    print("| what | figure |\n|---|---|")
    for what, figure in rows:
        print(f"| {what} | {figure} |")


if __name__ == "__main__":
    main()
