"""Section-level BM25: does scoring a section's whole text rank better than its best chunk?

    python benchmarks/section_bm25.py [NAME ...] [--split train|test|all] [--variants a,b,...]

Polaris's BM25 list ranks chunks and a section stands at its best chunk; markdown-memory
indexes whole sections (parts of at most 3,200 characters). This script measures, without
touching the engine, what a section-level full-text list would do to the engine's hybrid
section ranking on the docs sets: each set's cached index gives the chunks; each section's
text is stitched from its chunks (``engine.search.context.stitch``, overlaps removed) and
put, with its heading path, in an in-memory FTS5 table with the index's own tokenizer and
BM25 weights; the query is the engine's (``bm25.fts_query``). Every question is answered by
``engine.search.rank.rank`` with the engine's settings and vector list; only the BM25 list
changes:

- ``baseline``: the engine's chunk list (must equal section_ablation.py's ``section``);
- ``section``: the section list, each section standing at its first chunk;
- ``section-capN``: the same with sections cut into parts of at most N characters (at
  chunk boundaries), as markdown-memory does at 3,200;
- ``max``: each section at the better of its section-list and chunk-list places (both lists
  interleaved by rescaled score).

Decide on ``--split train``; report ``test`` once. Measured on the six sets' train splits
(2026-12-01, today's defaults; baseline -> section / cap3200 / cap2000 / max): cargo-book .7205 ->
.7331 / .7346 / .7482 / .7224, typer .8260 -> .8104 / .8238 / .8175 / .8241, pydantic .7831 ->
.7603 / .7533 / .7646 / .7705, anthropic_docs .8338 -> .8136 / .8206 / .8201 / .8266, uv .8371 ->
.8508 / .8494 / .8559 / .8419, sqlmodel .7160 -> .7157 / .7135 / .7063 / .7110: the six-set mean
falls by 0.001 to 0.005, so the engine keeps its chunk list. (The section lists here are
FTS5's alone, without the engine's identifier lookup.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docsets import ALL_SETS, load_set, section_id  # noqa: E402
from sections import K, ablation_header, ablation_row, open_index, questions, summarise  # noqa: E402

from llama_index_polaris.engine.sqlite.connect import sqlite_module  # noqa: E402
from llama_index_polaris.engine.sqlite import bm25 as bm25_mod  # noqa: E402
from llama_index_polaris.engine.search import pipeline  # noqa: E402
from llama_index_polaris.engine.search.context import stitch  # noqa: E402
from llama_index_polaris.engine.words.bigrams import spaced  # noqa: E402  (CJK runs as the index reads them)
from llama_index_polaris.engine.sqlite.postings import fts_tokenizer  # noqa: E402
from llama_index_polaris.engine.search.rank import Candidate, rank  # noqa: E402
from llama_index_polaris.engine.storage.scope import resolve_scope  # noqa: E402

VARIANTS = ("baseline", "section", "section-cap3200", "section-cap2000", "max")


def section_table(index: Any, cap: int | None) -> tuple[Any, dict[int, int]]:
    """An in-memory FTS5 of the sections (or their parts): rowid -> the part's first chunk id."""
    rows = index.store.conn.execute(
        "SELECT id, document_id, heading_path, text, start_char, end_char FROM chunks ORDER BY document_id, ordinal"
    ).fetchall()
    groups: dict[tuple[str, str], list[tuple]] = {}
    for r in rows:
        groups.setdefault((r[1], r[2]), []).append(r)
    mem = sqlite_module().connect(":memory:")
    tok = fts_tokenizer(index.store.conn)
    mem.execute(f"CREATE VIRTUAL TABLE s USING fts5(text, heading_path, tokenize={tok!r})")
    first: dict[int, int] = {}
    n = 0
    for (doc, heading), chunks in groups.items():
        parts: list[list[tuple]] = [[]]
        size = 0
        for c in chunks:
            if cap is not None and parts[-1] and size + len(c[3]) > cap:
                parts.append([])
                size = 0
            parts[-1].append(c)
            size += len(c[3])
        for part in parts:
            n += 1
            mem.execute("INSERT INTO s(rowid, text, heading_path) VALUES (?, ?, ?)",
                        (n, spaced(stitch([(c[3], c[4], c[5]) for c in part])), spaced(heading)))
            first[n] = part[0][0]
    return mem, first


def section_list(mem: Any, first: dict[int, int], query: str, limit: int) -> list[tuple[int, float]]:
    match = bm25_mod.fts_query(query)
    if match is None:
        return []
    w = (bm25_mod.TEXT_WEIGHT, bm25_mod.HEADING_WEIGHT)
    sql = f"SELECT rowid, -bm25(s, {w[0]}, {w[1]}) FROM s WHERE s MATCH ? ORDER BY bm25(s, {w[0]}, {w[1]}), rowid LIMIT ?"
    try:
        return [(first[r], float(sc)) for r, sc in mem.execute(sql, (match, limit)).fetchall()]
    except sqlite_module().OperationalError:
        return []


def interleave(a: list[tuple[int, float]], b: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    """Both lists rescaled to their best (1.0) and merged, each chunk at its better value."""
    best: dict[int, float] = {}
    for lst in (a, b):
        top = lst[0][1] if lst and lst[0][1] > 0 else 1.0
        for cid, s in lst:
            best[cid] = max(best.get(cid, 0.0), s / top)
    return sorted(best.items(), key=lambda x: -x[1])[:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(ALL_SETS))
    ap.add_argument("--split", default="train")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    print(ablation_header())
    for name in args.names:
        ds = load_set(name)
        split, qids = questions(ds, args.split)
        index, _ = open_index(ds)
        searcher = index.searcher()
        cfg = searcher.config
        pool = cfg.candidate_pool  # each list's chunks, as Searcher._rank_pool's first pool
        chunks = index.store.conn.execute("SELECT id, document_id, heading_path FROM chunks").fetchall()
        candidates = {c[0]: Candidate((c[1], c[2]), c[2]) for c in chunks}
        docs = dict(index.store.conn.execute("SELECT id, coalesce(path, id) FROM documents").fetchall())
        section_of = {c[0]: section_id(docs[c[1]], c[2]) for c in chunks}
        tables = {v: section_table(index, int(v.split("cap")[1]) if "cap" in v else None)
                  for v in args.variants.split(",") if v.startswith("section")}
        if "max" in args.variants.split(","):
            tables["max"] = tables.get("section") or section_table(index, None)
        with searcher.store.read() as conn:
            scope = resolve_scope(conn)
        for variant in args.variants.split(","):
            runs = {}
            for q in qids:
                text = ds.queries[q]["text"].strip()
                qvec = searcher._check_vector(searcher._embed(text))
                with searcher.store.read():
                    vec = searcher._knn(qvec, pool, scope, fetch_k=min(pool, pipeline.ANN_SIZED_FOR))
                    bm = searcher._bm25(text, pool, scope)
                if variant in tables and variant != "max":
                    bm = section_list(*tables[variant], text, pool)
                elif variant == "max":
                    bm = interleave(bm, section_list(*tables["max"], text, pool), pool)
                params = searcher.params(text, K, mmr_lambda=cfg.mmr_lambda)
                runs[q] = [section_of[r.chunk_id] for r in rank(vec, bm, candidates, params)][:K]
            print(ablation_row(name, split, variant, summarise(ds, runs, split)), flush=True)
        index.close()


if __name__ == "__main__":
    main()
