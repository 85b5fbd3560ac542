"""How much of a question the embedding model can read, and the fusion that follows (issues #36, #37).

    python benchmarks/known_share.py [NAME ...] [--split train|test]   # after fusion_kinds.py collect NAME ...

The bundled all-MiniLM-L6-v2 knows 244 Chinese characters: most of a Chinese question reaches
it as ``[UNK]``, so its vector ranks noise and fusing it in costs the BM25 list its head.
``Embedder.known_share`` is the share of a query's tokens the model's vocabulary holds;
``question.Rule.known_full`` scales the vector list's weight down below that share. This
reads the cached lists of ``fusion_kinds.py collect`` (no model run, no database), measures
each question's known share with the model's tokenizer, and prints, per set, nDCG@10 and
hit@1 of BM25 alone, vector alone and the rule at each ``known_full`` (0: off, today), each
set weighing the same in the mean. Choose on ``--split train``; report ``--split test``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion_kinds  # noqa: E402
from docsets import MODEL  # noqa: E402

from llama_index_polaris.engine.embed import load_embedder  # noqa: E402
from llama_index_polaris.engine.search import question  # noqa: E402

FULLS = ((None, 1.0), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0), (0.3, 1.0), (0.3, 2.0), (0.5, 1.0), (0.5, 2.0), (0.6, 1.0),
         (0.7, 1.0), (0.8, 1.0), (1.0, 1.0))  # (known_floor, known_power); None: off, 1.0: vector 0 below full
CJK = ("react-zh", "vue-ja")


def table(names: Sequence[str], split: str) -> str:
    data = fusion_kinds.sets(names)
    if not data:
        return "no cached lists: run `python benchmarks/fusion_kinds.py collect NAME ...` first"
    embedder = load_embedder(MODEL)
    head = ["set", "n", "known (mean)", "BM25", "vector", *[("off" if f is None else f"{f:g}^{p:g}") for f, p in FULLS]]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    means: dict[str, list[float]] = {}
    for name, rows in data.items():
        rs = [r for r in rows if fusion_kinds.in_split(r, split)]
        if not rs:
            continue
        known = [embedder.known_share(r["text"]) for r in rs]
        cells = {}
        for system in ("bm25", "vector"):
            cells[system] = np.mean([fusion_kinds.measure(r, fusion_kinds.params(r, system))[0] for r in rs])
        for full in FULLS:
            rule = replace(question.RULE, known_floor=full[0], known_power=full[1])
            cells[full] = np.mean([fusion_kinds.measure(r, replace(fusion_kinds.params(r, "rule", rule), known=k))[0]
                                   for r, k in zip(rs, known)])
        for key, value in cells.items():
            means.setdefault(str(key), []).append(float(value))
        lines.append(f"| {name} | {len(rs)} | {np.mean(known):.2f} | {cells['bm25']:.4f} | {cells['vector']:.4f} | "
                     + " | ".join(f"{cells[f]:.4f}" for f in FULLS) + " |")
    lines.append(f"| **mean of sets** | | | {np.mean(means['bm25']):.4f} | {np.mean(means['vector']):.4f} | "
                 + " | ".join(f"{np.mean(means[str(f)]):.4f}" for f in FULLS) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=[*CJK, *fusion_kinds.FIT_SETS])
    ap.add_argument("--split", default="train", choices=("train", "test"))
    args = ap.parse_args(argv)
    print(f"nDCG@10 on the {args.split} split, hybrid by question at each known_full (0: off)")
    print(table(args.names, args.split))
    return 0


if __name__ == "__main__":
    sys.exit(main())
