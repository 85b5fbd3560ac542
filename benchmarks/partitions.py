"""Could a partitioned KNN read fewer sign bits and keep recall? (#38 item 3)

    python benchmarks/partitions.py [EVAL_DIR] [--n 1000000] [--lists 1024] [--shares 0.1,0.25,0.5,0.75]
                                    [--queries 200] [--real NAME ...]

The one-shot KNN reads every chunk's sign bits (48 bytes at 384 dims: 48 MB at 1M chunks) and
counts them all. A partitioned index (IVF: chunks grouped by their nearest of ``--lists``
centroids, a query reading only the groups of its nearest centroids) would read a share of
them. This measures what that share costs in recall@10 against exact float search, on:

- **the benchmark's vectors**: ``speed.py``'s ``hybrid-N-384.db`` (built on first use) and its
  query vectors, the data the 1M goals are measured on;
- **real chunk vectors** (``--real``): every chunk of the named doc sets' indexes
  (``benchmarks/out/docsets``, built by ``sections.py index``) pooled, the sets' questions
  embedded with the bundled model as queries.

Centroids: spherical k-means (10 rounds) over the chunks' sign vectors (+1/-1 per bit,
unit length) of a sample of 40 per list; every chunk is assigned by the same sign vectors
(no float read, as an index kept beside the bits would be). A query probes the lists of its
nearest centroids (by its float vector) until ``share`` of the lists is read, counts those
lists' bits, re-scores ``signbits.fetch_size`` candidates exactly (as the engine does) and is
scored against the exact top 10. "every bit" is the engine's one-shot path (share 1).

It also prints how near the neighbours are: the median cosine of a query's 1st and 10th
nearest chunk, against that of a random pair. Nothing in the engine changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, save_json  # noqa: E402
from sections import index_path  # noqa: E402
from speed import hybrid_db, queries  # noqa: E402


def sign_vectors(bits: np.ndarray) -> np.ndarray:
    """+1/-1 float rows, unit length, from packed sign bits (``signbits.pack_signs``'s packing)."""
    u = np.unpackbits(np.ascontiguousarray(bits).view(np.uint8), axis=1, bitorder="little").astype(np.float32)
    return (2 * u - 1) / np.sqrt(u.shape[1], dtype=np.float32)


def train(bits: np.ndarray, lists: int, seed: int = 0, rounds: int = 10, rows_of=sign_vectors) -> np.ndarray:
    """Unit centroids of spherical k-means over a sample of the rows (``rows_of``: their sign vectors)."""
    rng = np.random.default_rng(seed)
    sample = rows_of(bits[rng.choice(len(bits), min(len(bits), 40 * lists), replace=False)])
    cent = sample[rng.choice(len(sample), lists, replace=False)].copy()
    for _ in range(rounds):
        near = np.argmax(sample @ cent.T, axis=1)
        sums = np.zeros_like(cent)
        np.add.at(sums, near, sample)
        filled = np.linalg.norm(sums, axis=1) > 0
        cent[filled] = sums[filled] / np.linalg.norm(sums[filled], axis=1, keepdims=True)
    return cent


def assign(bits: np.ndarray, cent: np.ndarray, step: int = 32_768, rows_of=sign_vectors) -> np.ndarray:
    """Each row's nearest centroid, by its sign vector (``rows_of``)."""
    out = np.empty(len(bits), dtype=np.int32)
    for i in range(0, len(bits), step):
        out[i:i + step] = np.argmax(rows_of(bits[i:i + step]) @ cent.T, axis=1)
    return out


def recall_table(ids: np.ndarray, bits: np.ndarray, floats: np.ndarray, qvecs: np.ndarray, lists: int,
                 shares: list[float], by_floats: bool = False) -> dict:
    """Recall@10 and the probe's ms p50 for each share of lists read (1.0: every bit, no lists);
    ``by_floats``: the lists from the float vectors rather than the sign vectors."""
    from llama_index_polaris.engine.storage.signbits import choose, fetch_size, hamming, pack_signs

    n = len(ids)
    t = time.perf_counter()
    if by_floats:
        cent, where = train(floats, lists, rows_of=np.asarray), None
        where = assign(floats, cent, rows_of=np.asarray)
    else:
        cent = train(bits, lists)
        where = assign(bits, cent)
    built = time.perf_counter() - t
    order = np.argsort(where, kind="stable")
    starts = np.searchsorted(where[order], np.arange(lists + 1))
    sizes = np.diff(starts)
    exact = [set(ids[np.argpartition(-(floats @ q), 10)[:10]].tolist()) for q in qvecs]
    position = {int(c): i for i, c in enumerate(ids)}
    out: dict = {"chunks": n, "lists": lists, "lists from": "floats" if by_floats else "sign bits", "build_s": round(built, 2),
                 "list sizes min / median / max": [int(sizes.min()), int(np.median(sizes)), int(sizes.max())],
                 "shares": {}}
    for share in sorted(set(shares) | {1.0}):
        found, ms, rows_read = [], [], []
        for q, truth in zip(qvecs, exact):
            t = time.perf_counter()
            if share >= 1.0:
                rows = None
                d = hamming(bits, pack_signs(q)[0])
                pool = choose(ids, d, 10, fetch_size(10, n))
            else:
                probe = np.argpartition(-(cent @ q), max(1, round(share * lists)) - 1)[:max(1, round(share * lists))]
                rows = np.concatenate([order[starts[p]:starts[p + 1]] for p in probe])
                d = hamming(bits[rows], pack_signs(q)[0])
                pool = choose(ids[rows], d, 10, fetch_size(10, n))
            ms.append(1000 * (time.perf_counter() - t))
            rows_read.append(n if rows is None else len(rows))
            at = np.array([position[int(c)] for c in pool])
            top = pool[np.argsort(-(floats[at] @ q))[:10]]
            found.append(len(truth & set(top.tolist())) / 10)
        out["shares"][str(share)] = {"recall@10": round(float(np.mean(found)), 4),
                                     "rows read": round(float(np.mean(rows_read)) / n, 3),
                                     "count ms p50": round(float(np.median(ms)), 2)}
    return out


def neighbours(floats: np.ndarray, qvecs: np.ndarray) -> dict:
    """Median cosine of each query's 1st and 10th nearest row, and of a random query-row pair."""
    sims = [np.sort(floats @ q)[-10:] for q in qvecs[:100]]
    rng = np.random.default_rng(1)
    pairs = floats[rng.integers(0, len(floats), len(qvecs))] @ qvecs.T
    return {"1st": round(float(np.median([s[-1] for s in sims])), 3),
            "10th": round(float(np.median([s[0] for s in sims])), 3),
            "random pair": round(float(np.median(np.diagonal(pairs))), 3)}


def benchmark_vectors(n: int, eval_dir: Path, nq: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, bits, floats, queries) of speed.py's hybrid file."""
    from llama_index_polaris.engine.sqlite import ann
    from llama_index_polaris.engine.sqlite.store import Store

    path, _ = hybrid_db(n, 384, eval_dir)
    store = Store(path, readonly=True)
    try:
        with store.read():
            signs = ann.read_bits(store.conn)
            live = np.ones(len(signs.ids), dtype=bool) if signs.live is None else signs.live
            ids, bits = signs.ids[live], signs.bits[live]
            found, floats = ann.stored_vectors(store.conn, ids, 384) if n <= 200_000 else _all_floats(store)
    finally:
        store.close()
    at = np.searchsorted(found, ids)
    return ids, bits, floats[at], queries(nq, 384)


def _all_floats(store: object) -> tuple[np.ndarray, np.ndarray]:
    from llama_index_polaris.engine.storage.vectors import decode_rows

    rows = store.conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY id").fetchall()
    return decode_rows([r[0] for r in rows], [r[1] for r in rows], 384)


def real_vectors(names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, bits, floats, queries): the chunks of the named doc sets' indexes (built when missing,
    as ``sections.py index``), their questions embedded with the bundled model."""
    from sections import load_set, open_index  # noqa: F401  (load_set: docsets.py's)
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.storage.signbits import pack_signs

    floats, texts = [], []
    for name in names:
        ds = load_set(name)
        index, _ = open_index(ds, build=not index_path(ds).exists())
        with index:
            blobs = [r[0] for r in index.store.conn.execute("SELECT embedding FROM chunks WHERE embedding IS NOT NULL")]
        floats.append(np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1))
        texts += [q["text"] for q in ds.queries.values()]
    matrix = np.concatenate(floats).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    embedder = load_embedder("all-minilm-l6-v2")
    qvecs = np.stack([embedder.embed_query(t) for t in texts]).astype(np.float32)
    return np.arange(1, len(matrix) + 1, dtype=np.int64), pack_signs(matrix), matrix, qvecs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--lists", type=int, default=1024, help="lists for the benchmark's vectors")
    ap.add_argument("--shares", default="0.1,0.25,0.5,0.75")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--real", nargs="*", default=[], metavar="NAME", help="doc sets whose chunk vectors to pool")
    ap.add_argument("--by-floats", action="store_true", help="group by the float vectors, not the sign bits")
    ap.add_argument("--real-lists", type=int, default=0, help="lists for the real vectors (default: chunks / 1000, at least 4)")
    args = ap.parse_args(argv)
    shares = [float(s) for s in args.shares.split(",") if s]
    got: dict = {"machine": machine_line(machine())}
    if args.n:
        ids, bits, floats, qvecs = benchmark_vectors(args.n, Path(args.eval_dir), args.queries)
        got["benchmark"] = {"neighbours": neighbours(floats, qvecs),
                            **recall_table(ids, bits, floats, qvecs, min(args.lists, max(4, len(ids) // 100)), shares,
                                         args.by_floats)}
    if args.real:
        ids, bits, floats, qvecs = real_vectors(args.real)
        lists = args.real_lists or max(4, len(ids) // 1000)
        got["real"] = {"sets": args.real, "questions": len(qvecs), "neighbours": neighbours(floats, qvecs),
                       **recall_table(ids, bits, floats, qvecs, lists, shares, args.by_floats)}
    save_json(f"partitions-{args.n}.json", got)
    for name in ("benchmark", "real"):
        if name in got:
            g = got[name]
            print(f"{name}: {g['chunks']:,} chunks, {g['lists']} lists from {g['lists from']} (sizes {g['list sizes min / median / max']}), "
                  f"built in {g['build_s']} s; neighbour cosine: {g['neighbours']}")
            for share, r in g["shares"].items():
                what = "every bit (the engine)" if float(share) >= 1 else f"{float(share):.0%} of the lists"
                print(f"  {what}: recall@10 {r['recall@10']:.4f}, rows read {r['rows read']:.0%}, count {r['count ms p50']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
