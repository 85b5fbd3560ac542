"""Same question, same answer at every k: how often the hits change with top_k, and what the
candidate pool's depth does to quality.

    python benchmarks/k_stability.py [NAME ...] [--split train|test|all] [--pools 60,100,...]
                                     [--scifact DIR] [--ks 1,3,5,10,20,50,100]

For each doc set of ``benchmarks/docsets.py`` (its cached index, the engine's defaults on
the bundled model) every question of the split is asked at each ``k`` of ``--ks`` in
hybrid mode, sections. Reported per set and pooled:

- nDCG@10 of the k=10 list (sections, as ``benchmarks/sections.py`` scores them);
- hit@1: the first section at k=1 is labelled relevant;
- ``top1 moved``: share of questions whose first hit at k=1 is not k=10's;
- ``k5 order differs``: share whose k=5 sections are not the first five of k=10's;
- ``k5 not prefix``: the same for sections and scores;
- ``any not prefix``: share with some k1 < k2 of ``--ks`` where k1's list is not k2's head.

``--pools`` runs the engine once per ``candidate_pool`` value (chunks per list); on code
before that setting existed (``PYTHONPATH`` at an older checkout) one row, ``pool -``.
``--scifact DIR`` adds SciFact's split (documents: a document ranks at its best hit), nDCG@10
of the top-10 hits and of ``polaris eval``'s deep run (top_k 300).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir, table  # noqa: E402
from docsets import ALL_SETS, load_set  # noqa: E402
from sections import hit_section, open_index, questions, score_query  # noqa: E402

from llama_index_polaris.engine.tune import evaluate  # noqa: E402


def lists_at(searcher: Any, text: str, ks: Sequence[int], key: Any) -> dict[int, list[tuple[str, float]]]:
    """The hits at each k as (key, score rounded to 1e-9)."""
    return {k: [(key(h), round(h.score, 9)) for h in searcher.search(text, top_k=k)] for k in ks}


def stability(lists: dict[int, list[tuple[str, float]]], ks: Sequence[int]) -> dict[str, float]:
    ks = sorted(ks)
    out = {}
    if 1 in lists and 10 in lists:
        out["top1 moved"] = float([s for s, _ in lists[1][:1]] != [s for s, _ in lists[10][:1]])
    if 5 in lists and 10 in lists:
        out["k5 not prefix"] = float(lists[5] != lists[10][:5])
        out["k5 order differs"] = float([s for s, _ in lists[5]] != [s for s, _ in lists[10][:5]])
    out["any not prefix"] = float(any(lists[a] != lists[b][: len(lists[a])] or len(lists[a]) < min(a, len(lists[b]))
                                      for i, a in enumerate(ks) for b in ks[i + 1:]))
    return out


def configured(searcher: Any, pool: int | None) -> None:
    if pool is not None:
        searcher.config = searcher.config.replace(candidate_pool=pool)


def has_pool_setting() -> bool:
    from llama_index_polaris.engine.config import SETTINGS_BY_NAME

    return "candidate_pool" in SETTINGS_BY_NAME


def run_docset(name: str, split: str, pools: Sequence[int | None], ks: Sequence[int]) -> dict[Any, dict[str, Any]]:
    ds = load_set(name)
    split, qids = questions(ds, split)
    qrels = ds.all_qrels if split == "all" else ds.split(split)
    index, _ = open_index(ds)
    base = index.searcher()
    base.max_top_k = max(ks)
    out = {}
    for pool in pools:
        searcher = index.searcher()
        searcher.max_top_k = max(ks)
        configured(searcher, pool)
        per_q = {}
        for q in qids:
            lists = lists_at(searcher, ds.queries[q]["text"], ks, hit_section)
            rels = qrels[q]
            m = stability(lists, ks)
            m["ndcg@10"] = score_query([s for s, _ in lists.get(10, [])], rels)["ndcg@10"]
            m["hit@1"] = float(bool(lists.get(1)) and rels.get(lists[1][0][0], 0) > 0)
            m["hit@1 (k=10)"] = float(bool(lists.get(10)) and rels.get(lists[10][0][0], 0) > 0)
            per_q[q] = m
        out[pool] = {"split": split, "per_query": per_q}
    index.close()
    return out


def run_scifact(directory: str, split: str, pools: Sequence[int | None], ks: Sequence[int]) -> dict[Any, dict[str, Any]]:
    from sections import config

    beir = evaluate.load_beir(directory, split=split)
    index, _ = evaluate.build_eval_index(beir, config())
    out = {}
    for pool in pools:
        searcher = index.searcher()
        searcher.max_top_k = evaluate.CHUNKS_PER_DOC * evaluate.DEPTH
        configured(searcher, pool)
        per_q = {}
        for qid, rels in beir.qrels.items():
            text = beir.queries.get(qid)
            if text is None:
                continue
            lists = lists_at(searcher, text, ks, lambda h: h.document_id)
            m = stability(lists, ks)
            top10 = evaluate.documents_in_order(d for d, _ in lists.get(10, []))
            deep = evaluate.documents_in_order(h.document_id for h in searcher.search(text, top_k=searcher.max_top_k))
            m["ndcg@10"] = evaluate.ndcg_at_k(top10, rels, 10)
            m["ndcg@10 eval"] = evaluate.ndcg_at_k(deep, rels, 10)
            m["hit@1"] = float(bool(lists.get(1)) and rels.get(lists[1][0][0], 0) > 0)
            m["hit@1 (k=10)"] = float(bool(top10) and rels.get(top10[0], 0) > 0)
            per_q[qid] = m
        out[pool] = {"split": split, "per_query": per_q}
    index.close()
    return out


COLUMNS = ("ndcg@10", "hit@1", "hit@1 (k=10)", "top1 moved", "k5 order differs", "k5 not prefix", "any not prefix",
           "ndcg@10 eval")


def rows_of(name: str, results: dict[Any, dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for pool, r in results.items():
        pq = r["per_query"]
        n = len(pq)
        row = [name, r["split"], "-" if pool is None else pool, n]
        for c in COLUMNS:
            vals = [m[c] for m in pq.values() if c in m]
            row.append(f"{sum(vals) / len(vals):.4f}" if vals else "")
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(ALL_SETS))
    ap.add_argument("--split", default="train")
    ap.add_argument("--pools", default="")
    ap.add_argument("--ks", default="1,3,5,10,20,50,100")
    ap.add_argument("--scifact", default=None, help="a BEIR folder (SciFact) to add")
    ap.add_argument("--tag", default="", help="suffix of the JSON written to benchmarks/out/")
    ap.add_argument("--no-docsets", action="store_true", help="SciFact only")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    pools: list[int | None] = [int(p) for p in args.pools.split(",") if p] if has_pool_setting() else [None]
    pools = pools or [None]
    everything: dict[str, Any] = {}
    rows: list[list[Any]] = []
    pooled: dict[Any, dict[str, Any]] = {}
    for name in ([] if args.no_docsets else args.names):
        res = run_docset(name, args.split, pools, ks)
        everything[name] = {str(p): r for p, r in res.items()}
        rows += rows_of(name, res)
        for p, r in res.items():
            pooled.setdefault(p, {"split": args.split, "per_query": {}})["per_query"].update(
                {f"{name}/{q}": m for q, m in r["per_query"].items()})
        print(table(["set", "split", "pool", "n", *COLUMNS], rows[-len(pools):]), flush=True)
    if len(args.names) > 1 and not args.no_docsets:
        rows += rows_of("pooled doc sets", pooled)
    if args.scifact:
        split = "train" if args.split == "train" else "test"
        res = run_scifact(args.scifact, split, pools, ks)
        everything["scifact"] = {str(p): r for p, r in res.items()}
        rows += rows_of("scifact", res)
    text = table(["set", "split", "pool", "n", *COLUMNS], rows)
    print(text)
    (out_dir() / f"k_stability-{args.split}{args.tag}.json").write_text(json.dumps(everything))
    (out_dir() / f"k_stability-{args.split}{args.tag}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
