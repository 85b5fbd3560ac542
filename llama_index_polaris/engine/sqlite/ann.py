"""Approximate vector search: sign bits choose the candidates, the stored floats decide.

Every chunk vector's signs (bit i set when component i > 0: sqlite-vec's
``vec_quantize_binary``) are kept by triggers in the vec0 table ``chunks_bits``
(``db/schema.py``), inside the same transactions as the chunks themselves. The Hamming
distance between two sign patterns tracks the angle between the vectors, so a query
counts differing bits against every chunk (48 bytes each at 384 dims), takes the
``fetch_size`` nearest, reads those chunks' float32 vectors from ``chunks.embedding``
and returns the best ``k`` by exact cosine distance. Only the choice of candidates is
approximate: every distance returned is exact, and when the candidates cover the whole
scope (a small index, a small scope) the answer is the exact one.

A scope (documents, collections, filters, node ids) is applied before the candidates
are chosen, never after: the pool is drawn from the chunks in scope only.

The bits are read straight from the vec0 table's blocks (its ``_chunks`` and
``_vector_chunks00`` shadow tables: 1,024 rows per block) and counted with numpy.
sqlite-vec's own KNN over a bit column is correct but selects its top k with a scan of
k x 1,024 per block (``min_idx`` in v0.1.9): an over-fetch of 900 took 173 ms at 100k
chunks, the whole query here 9 ms. It remains the fallback for a table whose block layout
this module does not recognise (``LayoutError``); sqlite-vec is pinned below 0.2 for that
layout.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .schema import BITS_TABLE, has_table
from ..storage.vectors import decode_rows
from ..storage import signbits
from ..storage.cosine import rescore
from ..storage.scope import Scope
from ..storage.scoring import sorted_unique
from ..storage.signbits import SignBits, as_words, choose, fetch_size, hamming, nearest_rows, pack_signs  # noqa: F401  (this module's names before)


class LayoutError(Exception):
    """The sign-bit table's blocks are not laid out as this module reads them."""


# -- reading the index ---------------------------------------------------------------------
# vec0 declares the vectors table's key as ``rowid PRIMARY KEY`` (no type, so BLOB affinity): a
# join on ``v.rowid = c.chunk_id`` compares with INTEGER affinity and cannot use that key's index,
# and the planner either scanned the vectors for every block or sorted all 56 MB of rows in a
# temporary b-tree (32 to 36 ms at 1M chunks). ``+c.chunk_id`` has no affinity, so the key's index
# answers, and CROSS JOIN keeps the blocks outside, read in chunk_id order: 6.4 ms.
BLOCKS_SQL = (
    f"SELECT c.chunk_id, c.size, c.validity, c.rowids, v.vectors FROM {BITS_TABLE}_chunks c"
    f" CROSS JOIN {BITS_TABLE}_vector_chunks00 v ON v.rowid = +c.chunk_id"
)


def has_index(conn: Any) -> bool:
    """True when this file has the sign-bit index (a model is bound and its dim packs into bytes)."""
    return has_table(conn, BITS_TABLE)


def blocks_to_bits(rows: list[tuple]) -> SignBits:
    """SignBits from vec0 block rows (chunk_id, size, validity, rowids, vectors), each column
    joined in one copy (``_joined``); ``live`` from the blocks' validity bitmaps."""
    if not rows:
        return SignBits(np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.uint64))
    ids, valid, bits = _joined(rows)
    live = np.unpackbits(valid, bitorder="little").astype(bool)
    return SignBits(ids, bits, None if live.all() else live)


def read_bits(conn: Any) -> SignBits:
    """Every live chunk's sign bits, read from the index's blocks in one statement."""
    return blocks_to_bits(conn.execute(BLOCKS_SQL + " ORDER BY c.chunk_id").fetchall())


STREAM_BLOCKS = 32  # blocks counted per numpy pass in a one-shot query (1.5 MB of bits at 384 dims)


def stream_distances(conn: Any, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(ids, Hamming distances to ``query``'s signs, live) of every slot of the index's blocks,
    counted ``STREAM_BLOCKS`` blocks at a time as the rows arrive.

    ``read_bits`` then ``hamming`` give the same numbers, but hold every block at once: 48 MB
    of blobs and 48 MB of arrays at 1M chunks, all fresh memory whose page faults cost more
    than the counting."""
    qbits = pack_signs(query)[0]
    blocks, size = conn.execute(f"SELECT count(*), max(size) FROM {BITS_TABLE}_chunks").fetchone()
    slots = (blocks or 0) * (size or 0)
    ids = np.empty(slots, dtype=np.int64)
    distances = np.empty(slots, dtype=np.uint16)
    valid = np.empty(slots // 8 + 1, dtype=np.uint8)
    filled = 0
    cursor = conn.execute(BLOCKS_SQL + " ORDER BY c.chunk_id")
    while batch := cursor.fetchmany(STREAM_BLOCKS):
        part = _joined(batch)
        n = len(part[0])
        if filled + n > len(ids):  # more blocks than counted (no snapshot held): grow
            ids, distances = (np.concatenate([a, np.empty(filled + n - len(a), dtype=a.dtype)]) for a in (ids, distances))
            valid = np.concatenate([valid, np.empty((filled + n) // 8 + 1 - len(valid), dtype=np.uint8)])
        ids[filled:filled + n] = part[0]
        distances[filled:filled + n] = hamming(part[2], qbits)
        valid[filled // 8:(filled + n) // 8] = part[1]
        filled += n
    ids, distances = ids[:filled], distances[:filled]
    live = np.unpackbits(valid[:filled // 8], bitorder="little").astype(bool)
    return ids, distances, None if live.all() else live


def _joined(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, validity bytes, bits as words) of vec0 block rows, each column joined in one copy;
    ``LayoutError`` unless every block has the layout this module reads."""
    size = rows[0][1]
    per_row = len(rows[0][4]) // size if size else 0
    if size % 8 or per_row == 0 or any(
        r[1] != size or len(r[2]) != size // 8 or len(r[3]) != size * 8 or len(r[4]) != size * per_row for r in rows
    ):
        raise LayoutError(f"{BITS_TABLE}: unexpected block layout (sizes {sorted({r[1] for r in rows})}).")
    ids = np.frombuffer(b"".join(r[3] for r in rows), dtype="<i8")
    valid = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.uint8)
    bits = as_words(np.frombuffer(b"".join(r[4] for r in rows), dtype=np.uint8).reshape(-1, per_row))
    return ids, valid, bits


def stored_vectors(conn: Any, ids: np.ndarray | list[int], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The float32 vectors of chunks ``ids`` from chunks.embedding: (ids found, matrix). A stored
    value that is not a valid vector of ``dim`` (``vectors.decode_rows``) is skipped."""
    rows = conn.execute(
        "SELECT id, embedding FROM chunks WHERE id IN (SELECT value FROM json_each(?)) AND embedding IS NOT NULL",
        (json.dumps([int(i) for i in ids]),),
    ).fetchall()
    return decode_rows([r[0] for r in rows], [r[1] for r in rows], dim)


def scope_chunk_ids(conn: Any, scope: Scope) -> np.ndarray | None:
    """The chunk ids a scope allows, sorted (None: every chunk)."""
    allowed = None
    if scope.document_ids is not None:
        rows = conn.execute(
            "SELECT id FROM chunks WHERE document_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(scope.document_ids)),),
        ).fetchall()
        allowed = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    if scope.chunk_ids is not None:
        chunk_ids = np.fromiter(scope.chunk_ids, dtype=np.int64, count=len(scope.chunk_ids))
        allowed = chunk_ids if allowed is None else np.intersect1d(allowed, chunk_ids)
    return None if allowed is None else sorted_unique(allowed)


def search_bits(
    conn: Any, bits: SignBits, query: np.ndarray, k: int, rows: np.ndarray | None = None, fetch: int | None = None,
    fetch_k: int | None = None,
) -> list[tuple[int, float]]:
    """``signbits.search_bits`` with the floats read from the file's chunks.embedding."""
    return signbits.search_bits(lambda ids, dim: stored_vectors(conn, ids, dim), bits, query, k, rows, fetch, fetch_k)


def vec0_candidates(conn: Any, query: np.ndarray, fetch: int, allowed: np.ndarray | None) -> np.ndarray:
    """The fallback: sqlite-vec's own Hamming KNN over the bit table (correct, slower)."""
    sql = f"SELECT rowid FROM {BITS_TABLE} WHERE embedding MATCH vec_quantize_binary(?) AND k = ?"
    args: list[Any] = [np.asarray(query, dtype="<f4").tobytes(), min(fetch, 4096)]
    if allowed is not None:
        sql += " AND rowid IN (SELECT value FROM json_each(?))"
        args.append(json.dumps(allowed.tolist()))
    return np.array([r[0] for r in conn.execute(sql, args).fetchall()], dtype=np.int64)


def ann_knn(
    conn: Any, query: np.ndarray, k: int, scope: Scope = Scope(), exact_below: int | None = None,
    fetch: int | None = None, fetch_k: int | None = None,
) -> list[tuple[int, float]] | None:
    """The ``k`` nearest chunks in ``scope`` by the sign-bit index: (chunk id, cosine distance).

    None when exact search is the better choice: no index, or fewer than ``exact_below``
    chunks in it. A scope no larger than the candidates is answered exactly from its own
    vectors. ``fetch``: candidates to re-score (default ``fetch_size(fetch_k or k, n)``: a
    caller that wants a deeper list but no more recall work sizes it for a smaller k).
    """
    if not has_index(conn):
        return None
    exact_below = signbits.EXACT_BELOW if exact_below is None else exact_below  # read now: a test may lower it
    allowed = scope_chunk_ids(conn, scope)
    sized_for = fetch_k or k
    if allowed is not None and len(allowed) <= (signbits.exact_up_to(sized_for) if fetch is None else fetch):
        return rescore(*stored_vectors(conn, allowed, len(query)), query, k)  # a small scope: all of it, exactly, no bits read
    try:
        ids, distances, live = stream_distances(conn, query)
    except LayoutError:
        n = conn.execute(f"SELECT count(*) FROM {BITS_TABLE}_rowids").fetchone()[0]
        if n < exact_below:
            return None
        pool = vec0_candidates(conn, query, fetch_size(sized_for, n) if fetch is None else fetch, allowed)
        return rescore(*stored_vectors(conn, pool, len(query)), query, k)
    n_live = len(ids) if live is None else int(np.count_nonzero(live))
    if n_live < exact_below:
        return None
    if allowed is not None:
        keep = np.isin(ids, allowed)
        keep = keep if live is None else keep & live
        ids, distances = ids[keep], distances[keep]
    elif live is not None and n_live > (fetch_size(sized_for, n_live) if fetch is None else fetch):
        # a few free or deleted slots: farther than any live row (at most 8 bits a byte), so never
        # chosen while the live rows outnumber the candidates; no copy of the arrays
        distances[~live] = np.iinfo(distances.dtype).max
    elif live is not None:
        ids, distances = ids[live], distances[live]
    return rescore(*stored_vectors(conn, choose(ids, distances, k, fetch, fetch_k), len(query)), query, k)
