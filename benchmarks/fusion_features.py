"""What a hit's explanation holds, per candidate, with its label: the data a learned fusion
is fitted to (issue #27).

    python benchmarks/fusion_features.py [NAME ...] [--scifact DIR] [--depth 50]

For every question of every doc set (both splits; the split is kept with each row) and of
SciFact (train and test), the first ``--depth`` hybrid section hits of today's ranking are
written with their explanation figures and their grade, one JSON line per question, to
``benchmarks/out/fusion/<set>.jsonl``, for looking at. The learned fusion is fitted from
the engine's own features instead (``benchmarks/fusion_fit.py collect``, which runs what
`polaris tune` runs: ``tune_labels.samples``), so the figures fitted are the figures ranked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import ALL_SETS, load_set, section_id  # noqa: E402
from sections import open_index  # noqa: E402

from llama_index_polaris.engine.tune import evaluate  # noqa: E402
from llama_index_polaris.engine.search import literal  # noqa: E402


def hit_row(h: Any) -> dict[str, Any]:
    e = h.explain
    return {
        "document": h.document, "document_id": h.document_id, "heading_path": h.heading_path,
        "score": h.score, "vector_rank": e.vector_rank, "vector_distance": e.vector_distance,
        "bm25_rank": e.bm25_rank, "bm25_score": e.bm25_score, "rrf": e.rrf, "rrf_vector": e.rrf_vector,
        "rrf_bm25": e.rrf_bm25, "fusion_vector": e.fusion_vector, "fusion_bm25": e.fusion_bm25, "fused": e.fused,
        "boost": e.boost, "relevance": e.relevance,
        "chunks": [[m.chunk_id, m.vector_rank, m.bm25_rank] for m in (e.chunks or [])],
        "section_chunks": len(h.section_chunks), "span": [h.section_start, h.section_end],
    }


def dump(name: str, rows: list[dict[str, Any]]) -> Path:
    path = out_dir() / "fusion" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def docset_rows(name: str, depth: int) -> list[dict[str, Any]]:
    ds = load_set(name)
    index, _ = open_index(ds)
    searcher = index.searcher()
    rows = []
    for qid in sorted(ds.all_qrels):
        text = ds.queries[qid]["text"]
        split = "train" if qid in ds.split("train") else ("test" if qid in ds.split("test") else "all")
        hits = searcher.search(text, top_k=depth)
        rels = ds.all_qrels[qid]
        rows.append({"set": name, "qid": qid, "split": split, "kind": ds.queries[qid]["kind"], "query": text,
                     "lookup": bool(literal.lookup_terms(text)), "n_relevant": sum(1 for g in rels.values() if g > 0),
                     "grades": sorted((g for g in rels.values() if g > 0), reverse=True),
                     "hits": [{**hit_row(h), "grade": rels.get(section_id(h.document, h.heading_path), 0)} for h in hits]})
    index.close()
    return rows


def scifact_rows(directory: str, depth: int) -> list[dict[str, Any]]:
    from sections import config

    rows = []
    for split in ("train", "test"):
        beir = evaluate.load_beir(directory, split=split)
        index, _ = evaluate.build_eval_index(beir, config())
        searcher = index.searcher()
        for qid, rels in beir.qrels.items():
            text = beir.queries.get(qid)
            if text is None:
                continue
            hits, seen = [], set()
            for h in searcher.search(text, top_k=depth):  # a document ranks at its best section
                if h.document_id not in seen:
                    seen.add(h.document_id)
                    hits.append(h)
            rows.append({"set": "scifact", "qid": qid, "split": split, "kind": "claim", "query": text,
                         "lookup": bool(literal.lookup_terms(text)),
                         "grades": sorted((g for g in rels.values() if g > 0), reverse=True),
                         "hits": [{**hit_row(h), "grade": rels.get(h.document_id, 0)} for h in hits]})
        index.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(ALL_SETS))
    ap.add_argument("--scifact", default=None)
    ap.add_argument("--depth", type=int, default=50)
    args = ap.parse_args(argv)
    for name in args.names:
        print(name, dump(name, docset_rows(name, args.depth)), flush=True)
    if args.scifact:
        print("scifact", dump("scifact", scifact_rows(args.scifact, args.depth)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
