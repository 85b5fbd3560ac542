"""Indexing against the raw embedder on the same chunks, in one run (#38, item 5).

    python benchmarks/index_speed.py [DOCS ...] [--rounds 2] [--profile OUT.prof]

DOCS: Markdown folders (default: the typer and sqlmodel doc sets, prepared by
``benchmarks/docsets.py prepare``). Each round, in alternating order so that drift in the
machine's load falls on both:

- ``index``: the engine's Indexer (`polaris index`'s work: walk, read, chunk, embed, store,
  the BM25 lists and sign bits) into a new SQLite file, with the bundled model's default
  config (its batch size and threads);
- ``embed``: the same Embedder object, ``embed_documents`` of the very texts the Indexer
  embedded (each chunk's recipe text: heading context + chunk), in file order, as one call.

The session is warmed once before the first round. Reported per side: chunks/s and
tokens/s (the model's tokens of the texts embedded, special tokens included, cut at its
window: what the model reads, so that chunk length flatters neither side), wall and CPU
time, the tokens the model runs with padding (each side's embedding calls, batched by the
embedder's length sort: the Indexer's calls are of ``EMBED_BATCH_CHUNKS`` chunks or more, the
raw side's is one), and index / embed as a ratio of throughputs (the median over rounds). ``--profile``
writes a cProfile of the last index round. Writes benchmarks/out/index_speed.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DOCSETS, machine, machine_line, out_dir  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.index import PolarisIndex  # noqa: E402
from llama_index_polaris.engine.ingest.indexer import Indexer  # noqa: E402

MODEL = "all-minilm-l6-v2"
DEFAULT_SETS = ("typer", "sqlmodel")


def embedded_texts(indexer: Indexer, docs: Sequence[Path], group: int) -> tuple[list[str], list[list[str]]]:
    """The texts the Indexer embeds for ``docs``, in its order: walked, read, chunked and put
    in the recipe's form by the Indexer's own steps (no store touched); and the same texts in
    the calls the Indexer hands the embedder (``group`` chunks or more: whole documents)."""
    from llama_index_polaris.engine.ingest.indexer import IndexReport
    from llama_index_polaris.engine.ingest.sources import plan_root, walk
    from llama_index_polaris.engine.text import nfc

    texts: list[str] = []
    groups: list[list[str]] = [[]]
    root = plan_root(None, list(docs), indexer.collection).root
    for f in walk(list(docs), root, indexer.config.follow_symlinks).files:
        doc = indexer._file_document(f)
        _, inputs = indexer._chunks(doc, nfc(doc.read()), IndexReport())
        texts += inputs
        groups[-1] += inputs
        if len(groups[-1]) >= group:
            groups.append([])
    seen: set[str] = set()  # the Indexer embeds a repeated text once
    unique = [[t for t in g if not (t in seen or seen.add(t))] for g in groups]
    return list(dict.fromkeys(texts)), [g for g in unique if g]


def padded_tokens(embedder: Any, groups: Sequence[Sequence[str]]) -> int:
    """Tokens the model runs (padding included) when each group is one ``embed_documents`` call:
    the embedder's own length-sorted batches (``runtime.plan_batches``), each padded to its longest."""
    from llama_index_polaris.engine.embed.runtime import plan_batches

    tok = embedder._tokenizers_loaded()
    total = 0
    for g in groups:
        lengths = np.array([len(e.ids) for e in tok.encoder.encode_batch([embedder.spec.doc_prefix + t for t in g],
                                                                          add_special_tokens=True)])
        total += sum(len(b) * int(lengths[b].max()) for b in plan_batches(lengths, embedder.batch_size))
    return total


def model_tokens(embedder: Any, texts: Sequence[str]) -> int:
    """Tokens the model reads for ``texts``: document prefix and special tokens, cut at the window."""
    tok = embedder._tokenizers_loaded()
    prefix = embedder.spec.doc_prefix
    return sum(len(e.ids) for e in tok.encoder.encode_batch([prefix + t for t in texts], add_special_tokens=True))


def timed(fn: Any) -> tuple[float, float, Any]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def run(docs: Sequence[Path], rounds: int, profile: Path | None, groups_of: Sequence[int] = ()) -> dict[str, Any]:
    """``groups_of``: also index with these ``EMBED_BATCH_CHUNKS`` (side ``index@N``), same rounds."""
    from llama_index_polaris.engine.ingest import indexer as indexer_module

    engine_group = indexer_module.EMBED_BATCH_CHUNKS
    cfg = load_config(use_user_config=False, model_id=MODEL)
    work = Path(tempfile.mkdtemp(prefix="polaris-index-speed-"))
    probe = PolarisIndex(work / "probe.db", config=cfg)
    embedder = probe.embedder
    probe_indexer = Indexer(probe.store, embedder, cfg)
    texts, _ = embedded_texts(probe_indexer, docs, engine_group)
    groups = {"index": engine_group, **{f"index@{g}": g for g in groups_of if g != engine_group}}
    padded = {side: padded_tokens(embedder, embedded_texts(probe_indexer, docs, g)[1]) for side, g in groups.items()}
    padded["embed"] = padded_tokens(embedder, [texts])
    probe.close()
    tokens = model_tokens(embedder, texts)
    embedder.embed_documents(texts[:8])  # the session and the first batch's allocations
    sides: dict[str, list[dict[str, float]]] = {side: [] for side in ["embed", *groups]}

    def index_round(side: str, i: int) -> dict[str, float]:
        indexer_module.EMBED_BATCH_CHUNKS = groups[side]
        try:
            with PolarisIndex(work / f"round-{i}-{groups[side]}.db", config=cfg) as index:
                prof = cProfile.Profile() if profile and side == "index" and i == rounds - 1 else None
                if prof:
                    prof.enable()
                wall, cpu, report = timed(lambda: index.index_paths(list(docs)))
                if prof:
                    prof.disable()
                    prof.dump_stats(str(profile))
                assert report.chunks_embedded == len(texts), (report.chunks_embedded, len(texts))
        finally:
            indexer_module.EMBED_BATCH_CHUNKS = engine_group
        return {"wall_s": wall, "cpu_s": cpu}

    def embed_round() -> dict[str, float]:
        wall, cpu, _ = timed(lambda: embedder.embed_documents(texts))
        return {"wall_s": wall, "cpu_s": cpu}

    for i in range(rounds):
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]  # drift in the load falls on every side
        for side in order:
            sides[side].append(embed_round() if side == "embed" else index_round(side, i))
    med = statistics.median
    out: dict[str, Any] = {"docs": [str(d) for d in docs], "chunks": len(texts), "tokens": tokens, "rounds": rounds,
                           "batch_size": embedder.batch_size, "threads": embedder.threads, "machine": machine(),
                           "groups": groups, "sides": {}}
    for side, rows in sides.items():
        wall = med(r["wall_s"] for r in rows)
        out["sides"][side] = {
            "wall_s": wall, "cpu_s": med(r["cpu_s"] for r in rows), "chunks_per_s": len(texts) / wall,
            "tokens_per_s": tokens / wall, "walls": [r["wall_s"] for r in rows], "padded_tokens": padded[side],
            "ratio": med(e["wall_s"] / x["wall_s"] for x, e in zip(rows, sides["embed"])),
            "cpu_ratio": med(e["cpu_s"] / x["cpu_s"] for x, e in zip(rows, sides["embed"])),
        }
    return out


def render(r: dict[str, Any]) -> str:
    lines = [f"{r['chunks']:,} chunks, {r['tokens']:,} model tokens ({', '.join(Path(d).parent.name for d in r['docs'])});"
             f" {r['rounds']} rounds, batch {r['batch_size']}; {machine_line(r['machine'])}", "",
             "| side | chunks per call | wall s | CPU s | chunks/s | tokens/s | tokens run, padding included |"
             " throughput / raw embedder (wall, CPU) |", "|---|---|---|---|---|---|---|---|"]
    for side, s in r["sides"].items():
        per_call = "all" if side == "embed" else f"{r['groups'][side]}+"
        lines.append(f"| {side} | {per_call} | {s['wall_s']:.2f} | {s['cpu_s']:.2f} | {s['chunks_per_s']:.1f} |"
                     f" {s['tokens_per_s']:,.0f} | {s['padded_tokens']:,} (+{100 * (s['padded_tokens'] / r['tokens'] - 1):.1f}%) |"
                     f" {100 * s['ratio']:.1f}%, {100 * s['cpu_ratio']:.1f}% |")
    lines += ["", f"indexing at **{100 * r['sides']['index']['ratio']:.1f}%** of the raw embedder's throughput"
              " (median of the rounds' ratios, wall clock)"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", nargs="*", type=Path, default=[DOCSETS / n / "docs" for n in DEFAULT_SETS])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", type=Path, default=None, help="cProfile of the last index round")
    ap.add_argument("--groups", default="", help="also index with these EMBED_BATCH_CHUNKS, e.g. 32 (side index@32)")
    args = ap.parse_args(argv)
    groups_of = [int(g) for g in args.groups.split(",") if g.strip()]
    result = run([d.resolve() for d in args.docs], args.rounds, args.profile, groups_of)
    (out_dir() / "index_speed.json").write_text(json.dumps(result, indent=2))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
