"""English rankings do not move with CJK bigrams (#36): every ranking, before and after, compared.

    python benchmarks/terms_unchanged.py run LABEL [NAME ...] [--scifact DIR]   # rankings -> out/terms/LABEL.json
    python benchmarks/terms_unchanged.py diff BEFORE AFTER                      # every hit, score and metric
    python benchmarks/terms_unchanged.py kinds LABEL NAME [MODE]                 # nDCG@10 by split and kind

Run ``run`` once with the code before the change (``PYTHONPATH=<an export of main>``) and once
with it; ``diff`` compares them hit by hit. The indexes are built by the engine's own Indexer
and chunker, but vectors come from a hashed bag of words in place of the ONNX model
(``hashed_vectors``), so that every English set and SciFact can be indexed on a busy 2-core
machine in minutes: the terms, FTS5 rows, posting lists, heading boost, fusion and MMR are
the engine's, and the vectors are the same before and after. Real-model scores of the sets
are ``sections.py score``'s (docs/search.md); this script checks that nothing that depends
on terms moved: the hits and scores of every mode (hybrid, vector, bm25; sections) of every
question, and nDCG@10.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import load_set  # noqa: E402
from sections import MODES, K, config, score_query, aggregate, hit_section, summarise  # noqa: E402

ENGLISH = ("cargo-book", "typer", "pydantic", "uv", "sqlmodel", "poetry", "mkdocs", "rust-book", "vite", "prettier",
           "anthropic_docs", "electron-api", "deno-runtime")


def hashed_vectors(texts: list[str], dim: int) -> np.ndarray:
    """Unit vectors of hashed lower-cased words: deterministic, cheap, similar texts near each other."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % dim] += 1.0
        out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        if not out[i].any():
            out[i, 0] = 1.0
    return out


@contextlib.contextmanager
def hashed_embedder() -> Iterator[None]:
    """The engine's Embedder answers with ``hashed_vectors`` inside, and with the model again after."""
    from llama_index_polaris.engine.embed.embedder import Embedder

    real = Embedder.__dict__["_embed"]
    Embedder._embed = lambda self, texts, prefix: hashed_vectors(list(texts), self.dim)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Embedder._embed = real  # type: ignore[method-assign]


def run_set(name: str, label: str) -> dict[str, Any]:
    from llama_index_polaris.engine.index import PolarisIndex

    ds = load_set(name)
    path = out_dir() / "terms" / label / f"{name}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    with PolarisIndex(path, config=config()) as index:
        index.index_paths([ds.docs])
        searcher = index.searcher()
        runs: dict[str, Any] = {}
        for mode in MODES:
            hits = {q: searcher.search(ds.queries[q]["text"], top_k=K, mode=mode, unit="section") for q in sorted(ds.all_qrels)}
            runs[mode] = {q: [(hit_section(h), h.score, h.explain.bm25_score) for h in hs] for q, hs in hits.items()}
            per_query = {q: score_query([s for s, _, _ in r], ds.all_qrels[q]) for q, r in runs[mode].items()}
            runs[f"{mode} ndcg@10"] = aggregate(per_query, per_query)["ndcg@10"]
    return runs


def run_scifact(directory: str, label: str) -> dict[str, Any]:
    from llama_index_polaris.engine.tune.evaluate import build_eval_index, load_beir

    beir = load_beir(directory, "test")
    index, _ = build_eval_index(beir, config(), db=str(out_dir() / "terms" / label / "scifact.db"))
    runs: dict[str, Any] = {}
    with index:
        searcher = index.searcher()
        searcher.max_top_k = 100
        for mode in MODES:
            runs[mode] = {q: [(h.document_id, h.score, h.explain.bm25_score) for h in
                              searcher.search(beir.queries[q], top_k=10, mode=mode)] for q in sorted(beir.qrels)}
    return runs


def diff(before: dict[str, Any], after: dict[str, Any]) -> int:
    moved = 0
    for name in before:
        for mode, runs in before[name].items():
            if mode.endswith("ndcg@10"):
                print(f"{name} {mode}: {runs:.4f} -> {after[name][mode]:.4f}")
                moved += round(runs, 4) != round(after[name][mode], 4)
                continue
            for q, hits in runs.items():
                other = after[name][mode][q]
                same = [h[0] for h in hits] == [h[0] for h in other] and all(
                    round(a[1], 4) == round(b[1], 4) and (a[2] is None) == (b[2] is None)
                    and (a[2] is None or round(a[2], 4) == round(b[2], 4)) for a, b in zip(hits, other))
                if not same:
                    moved += 1
                    print(f"MOVED {name} {mode} {q}: {hits[:3]} -> {other[:3]}")
    print(f"{moved} rankings or metrics differ at the 4th decimal")
    return 1 if moved else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("label")
    r.add_argument("names", nargs="*", default=list(ENGLISH))
    r.add_argument("--scifact", metavar="DIR")
    k = sub.add_parser("kinds")
    k.add_argument("label")
    k.add_argument("name")
    k.add_argument("mode", nargs="?", default="bm25")
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("after")
    args = ap.parse_args()
    if args.cmd == "diff":
        load = lambda label: json.loads((out_dir() / "terms" / f"{label}.json").read_text())  # noqa: E731
        return diff(load(args.before), load(args.after))
    if args.cmd == "kinds":
        runs = json.loads((out_dir() / "terms" / f"{args.label}.json").read_text())[args.name][args.mode]
        ds = load_set(args.name)
        for split in ("train", "test"):
            m = summarise(ds, {q: [h[0] for h in hits] for q, hits in runs.items()}, split)
            print(f"{args.name} {args.label} {args.mode} {split}: nDCG@10 {m['all']['ndcg@10']:.4f} (n {m['all']['n']})"
                  + "".join(f", {kind} {m[kind]['ndcg@10']:.4f}" for kind in ("paraphrase", "identifier", "mixed") if kind in m))
        return 0
    with hashed_embedder():
        results = {name: run_set(name, args.label) for name in args.names}
        if args.scifact:
            results["scifact"] = run_scifact(args.scifact, args.label)
    path = out_dir() / "terms" / f"{args.label}.json"
    path.write_text(json.dumps(results, ensure_ascii=False))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
