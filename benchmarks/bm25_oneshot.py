"""Where one-shot BM25 (FTS5) spends its time on OR queries of common words, and what was
tried to cut it without changing a score (#17).

    python benchmarks/bm25_oneshot.py [EVAL_DIR] [--size 100000] [--queries 50]

Runs on speed.py's hybrid file (recombined SciFact text), with SciFact questions, all in
one process. Prints, p50 / p95 ms:

- the engine's statement (``bm25.bm25``: quoted words joined by OR, ORDER BY bm25() LIMIT 30);
- the parts of its cost: matching alone (``sum(rowid)``), matching plus a trivial auxiliary
  call per row (``fts5_get_locale``), bm25's idf pass alone (the query pinned to one rowid);
- ``optimize`` (all segments merged into one) on a copy of the file;
- MaxScore pruning, exact: rare phrases first, then the full score of their rows with
  ``(common) AND (rare)`` (FTS5 sums every phrase once), repeated until the common phrases'
  bound ``idf * (k1 + 1)`` falls below the 30th score; checked hit for hit against the plain query;
- each phrase on its own, summed with UNION ALL and GROUP BY.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, out_dir, pcts  # noqa: E402
from speed import hybrid_db, scifact_pieces  # noqa: E402

from llama_index_polaris.engine.sqlite.connect import connect  # noqa: E402
from llama_index_polaris.engine.sqlite.bm25 import bm25, fts_query, query_words  # noqa: E402
from llama_index_polaris.engine.sqlite.postings import fts_tokenizer  # noqa: E402
from llama_index_polaris.engine.sqlite.bm25_postings import K1, idf  # noqa: E402
from llama_index_polaris.engine.words.tokenize import Tokenizer  # noqa: E402

ORDERED = ("SELECT rowid, -bm25(chunks_fts, 1.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ?"
           " ORDER BY bm25(chunks_fts, 1.0, 1.0), rowid LIMIT ?")
SCORES = "SELECT rowid, -bm25(chunks_fts, 1.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ?"


def phrases(words: list[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def timed(fn, texts: list[str]) -> tuple[list, dict]:
    fn(texts[0])
    out, secs = [], []
    for t in texts:
        t0 = time.perf_counter()
        out.append(fn(t))
        secs.append(time.perf_counter() - t0)
    return out, pcts(secs)


def maxscore(conn, tok, n_rows: int, text: str, k: int = 30, common_df: int = 1000, stats: list | None = None):
    """Exact top-k by pruning: see the module docstring."""
    words = query_words(text)
    bound: dict[str, tuple[int, float]] = {}
    for w, terms in zip(words, tok.terms(words)):
        if len(terms) == 1:  # a multi-term phrase's frequency is unknown: it stays essential
            df = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (f'"{w}"',)).fetchone()[0]
            bound[w] = (df, idf(n_rows, df) * (K1 + 1))
    essential = [w for w in words if w not in bound or bound[w][0] < common_df]
    common = sorted((w for w in words if w not in essential), key=lambda w: -bound[w][1])
    rounds = 0
    while True:
        rounds += 1
        if not common or not essential:
            if stats is not None:
                stats.append((rounds, None))
            return conn.execute(ORDERED, (phrases(words), k)).fetchall()
        scores = dict(conn.execute(SCORES, (phrases(essential),)).fetchall())
        scores.update(conn.execute(SCORES, (f"({phrases(common)}) AND ({phrases(essential)})",)).fetchall())
        top = sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]
        theta = top[-1][1] if len(top) == k else 0.0
        if sum(bound[w][1] for w in common) <= theta:
            if stats is not None:
                stats.append((rounds, len(scores)))
            return top
        essential.append(common.pop(0))


def per_phrase(conn, text: str, k: int = 30):
    ws = query_words(text)
    one = "SELECT rowid AS r, -bm25(chunks_fts, 1.0, 1.0) AS s FROM chunks_fts WHERE chunks_fts MATCH ?"
    sql = f"SELECT r, sum(s) AS t FROM ({' UNION ALL '.join([one] * len(ws))}) GROUP BY r ORDER BY t DESC, r LIMIT ?"
    return conn.execute(sql, [f'"{w}"' for w in ws] + [k]).fetchall()


def same(a: list, b: list) -> bool:
    return [x[0] for x in a] == [x[0] for x in b] and all(abs(x[1] - y[1]) <= 1e-9 * max(1.0, abs(y[1]))
                                                          for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    eval_dir = Path(args.eval_dir)
    path, _ = hybrid_db(args.size, 384, eval_dir)
    texts = scifact_pieces(eval_dir)[2][:args.queries]
    conn = connect(path, readonly=True)
    n_rows = conn.execute("SELECT count(*) FROM chunks_fts_docsize").fetchone()[0]
    tok = Tokenizer(fts_tokenizer(conn))
    rows = []
    ref, p = timed(lambda t: bm25(conn, t, 30), texts)
    rows.append(("engine: OR of quoted words, ORDER BY bm25() LIMIT 30", p, "reference"))
    _, p = timed(lambda t: conn.execute("SELECT sum(rowid) FROM chunks_fts WHERE chunks_fts MATCH ?", (fts_query(t),)).fetchall(), texts)
    rows.append(("matching alone (sum(rowid))", p, ""))
    _, p = timed(lambda t: conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY"
                                        " fts5_get_locale(chunks_fts, 0) LIMIT 30", (fts_query(t),)).fetchall(), texts)
    rows.append(("matching + a trivial auxiliary call per row", p, ""))
    _, p = timed(lambda t: conn.execute("SELECT bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = 5",
                                        (fts_query(t),)).fetchall(), texts)
    rows.append(("bm25's idf pass alone (query pinned to one row)", p, ""))
    stats: list = []
    got, p = timed(lambda t: maxscore(conn, tok, n_rows, t, stats=stats), texts)
    agree = sum(same(g, r) for g, r in zip(got, ref))
    rounds = [s[0] for s in stats[-len(texts):]]
    touched = [s[1] for s in stats[-len(texts):] if s[1] is not None]
    rows.append(("MaxScore pruning (exact)", p, f"{agree}/{len(texts)} identical; rounds median {np.median(rounds):.0f}"
                 f" (max {max(rounds)}); rows scored median {np.median(touched):.0f}" if touched else ""))
    got, p = timed(lambda t: per_phrase(conn, t), texts)
    rows.append(("each phrase alone, UNION ALL + GROUP BY", p, f"{sum(same(g, r) for g, r in zip(got, ref))}/{len(texts)} identical"))
    segments = conn.execute("SELECT count(DISTINCT segid) FROM chunks_fts_idx").fetchone()[0]
    conn.close()
    copy = out_dir() / f"bm25-optimized-{args.size}.db"
    shutil.copy(path, copy)
    c2 = connect(copy)
    t0 = time.perf_counter()
    c2.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('optimize')")
    opt_s = time.perf_counter() - t0
    c2.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    got, p = timed(lambda t: bm25(c2, t, 30), texts)
    rows.append((f"after 'optimize' ({segments} segments merged into 1, {opt_s:.1f} s)", p,
                 f"{sum(same(g, r) for g, r in zip(got, ref))}/{len(texts)} identical"))
    c2.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    print(f"{args.size:,} chunks, {len(texts)} SciFact questions, load average {os.getloadavg()[0]:.1f}\n")
    print("| statement | ms p50 / p95 | note |\n|---|---|---|")
    for name, p, note in rows:
        print(f"| {name} | {p['p50']:.1f} / {p['p95']:.1f} | {note} |")


if __name__ == "__main__":
    main()
