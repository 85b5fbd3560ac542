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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..db.schema import BITS_TABLE, has_table
from ..vectors import decode_rows
from .cosine import rescore
from .scope import Scope
from .scoring import sorted_unique

OVERFETCH = 30  # candidates re-scored per result asked for (recall@10 0.996 at 100k: docs/benchmarks.md)
MIN_FETCH = 1_000  # and never fewer: small k would otherwise leave too few candidates
FETCH_SHARE = 0.002  # nor fewer than this share of the index: at 1M chunks 1,000 gave recall@10 0.978, 2,000 0.99
EXACT_BELOW = 20_000  # fewer chunks: exact vec0 search (at most ~11 ms; sign bits would save ~7 and recall less)


class LayoutError(Exception):
    """The sign-bit table's blocks are not laid out as this module reads them."""


@dataclass(frozen=True)
class SignBits:
    """Chunk ids and their packed sign bits (rows of unsigned words); ``live`` marks the rows
    that hold a chunk (None: all do). Free and deleted slots of the index's blocks stay in
    place in a one-shot read: copying 48 MB to drop them cost more than skipping them."""

    ids: np.ndarray
    bits: np.ndarray
    live: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids) if self.live is None else int(np.count_nonzero(self.live))

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        return self.ids.nbytes + self.bits.nbytes + (0 if self.live is None else self.live.nbytes)


# -- the maths (pure) ---------------------------------------------------------------------
_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def pack_signs(vectors: np.ndarray) -> np.ndarray:
    """Sign bits of each row as ``vec_quantize_binary`` packs them (component > 0 is 1, bit i
    of byte i // 8 counted from the least significant), as words (see ``as_words``)."""
    v = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    return as_words(np.packbits(v > 0, axis=1, bitorder="little"))


def as_words(packed: np.ndarray) -> np.ndarray:
    """Packed bytes (rows) viewed as 64-bit words when the row length allows, else bytes."""
    packed = np.ascontiguousarray(packed, dtype=np.uint8)
    return packed.view(np.uint64) if packed.shape[-1] % 8 == 0 else packed


def hamming(bits: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Differing bits between every row of ``bits`` and the one row ``query`` (same packing)."""
    diff = np.bitwise_xor(bits, query.reshape(1, -1))
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0: the CPU's popcount
        counts = np.bitwise_count(diff)
    else:
        counts = _POP8[diff.view(np.uint8)]
    out = counts[:, 0].astype(np.uint16)
    for j in range(1, counts.shape[1]):  # column by column: 2x faster than sum(axis=1) here
        out += counts[:, j]
    return out


def fetch_size(k: int, n: int) -> int:
    """How many candidates to re-score for ``k`` results among ``n`` chunks."""
    return min(n, max(k * OVERFETCH, MIN_FETCH, int(n * FETCH_SHARE)))


def nearest_rows(distances: np.ndarray, fetch: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``fetch`` smallest distances (any order; all when fewer). Among equal
    distances at the cut the smallest ``ids`` are taken (else the first positions), so the same
    bits choose the same candidates whatever order a backend holds them in."""
    if fetch >= len(distances):
        return np.arange(len(distances))
    cut = distances[np.argpartition(distances, fetch - 1)[fetch - 1]]
    below = np.flatnonzero(distances < cut)
    ties = np.flatnonzero(distances == cut)
    need = fetch - len(below)
    if ids is not None and need < len(ties):
        ties = ties[np.argpartition(ids[ties], need - 1)[:need]] if need > 0 else ties[:0]
    return np.concatenate([below, ties[:need]])


# -- reading the index ---------------------------------------------------------------------
BLOCKS_SQL = (
    f"SELECT c.chunk_id, c.size, c.validity, c.rowids, v.vectors FROM {BITS_TABLE}_chunks c"
    f" JOIN {BITS_TABLE}_vector_chunks00 v ON v.rowid = c.chunk_id"
)


def has_index(conn: Any) -> bool:
    """True when this file has the sign-bit index (a model is bound and its dim packs into bytes)."""
    return has_table(conn, BITS_TABLE)


def blocks_to_bits(rows: list[tuple]) -> SignBits:
    """SignBits from vec0 block rows (chunk_id, size, validity, rowids, vectors), every slot
    copied once into place; ``live`` from the blocks' validity bitmaps."""
    if not rows:
        return SignBits(np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.uint64))
    sizes = {r[1] for r in rows}
    size = sizes.pop()
    per_row = len(rows[0][4]) // size if size else 0
    if sizes or size % 8 or per_row == 0 or any(
        len(r[2]) != size // 8 or len(r[3]) != size * 8 or len(r[4]) != size * per_row for r in rows
    ):
        raise LayoutError(f"{BITS_TABLE}: unexpected block layout (sizes {sorted({r[1] for r in rows})}).")
    n = len(rows) * size
    valid = np.empty(n // 8, dtype=np.uint8)
    ids = np.empty(n, dtype=np.int64)
    packed = np.empty((n, per_row), dtype=np.uint8)
    for i, r in enumerate(rows):
        valid[i * size // 8:(i + 1) * size // 8] = np.frombuffer(r[2], dtype=np.uint8)
        ids[i * size:(i + 1) * size] = np.frombuffer(r[3], dtype="<i8")
        packed[i * size:(i + 1) * size] = np.frombuffer(r[4], dtype=np.uint8).reshape(size, per_row)
    live = np.unpackbits(valid, bitorder="little").astype(bool)
    return SignBits(ids, as_words(packed), None if live.all() else live)


def read_bits(conn: Any) -> SignBits:
    """Every live chunk's sign bits, read from the index's blocks in one statement."""
    return blocks_to_bits(conn.execute(BLOCKS_SQL + " ORDER BY c.chunk_id").fetchall())


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
    """The ``k`` nearest chunks among ``bits`` (only positions ``rows`` when given): ``fetch``
    candidates (default ``fetch_size`` for ``fetch_k``, else ``k``) by Hamming distance,
    re-scored exactly from chunks.embedding. ``conn`` reads the floats: a connection to the
    file, or any callable ``(ids, dim) -> (ids found, matrix)`` (another backend's reader)."""
    if rows is None and bits.live is not None:
        rows = np.flatnonzero(bits.live)
    ids = bits.ids if rows is None else bits.ids[rows]
    fetch = fetch_size(fetch_k or k, len(ids)) if fetch is None else min(fetch, len(ids))
    if fetch >= len(ids):
        pool = ids  # the candidates are the whole scope: exact
    else:
        if rows is None or len(rows) * 4 < len(bits.ids):
            distances = hamming(bits.bits if rows is None else bits.bits[rows], pack_signs(query)[0])
        else:  # most rows: count them all (no copy of the bits) and keep the scope's
            distances = hamming(bits.bits, pack_signs(query)[0])[rows]
        pool = np.sort(ids[nearest_rows(distances, fetch, ids)])  # read in file order
    read = (lambda i, d: stored_vectors(conn, i, d)) if hasattr(conn, "execute") else conn
    found, matrix = read(pool, len(query))
    return rescore(found, matrix, query, k)


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
    exact_below = EXACT_BELOW if exact_below is None else exact_below  # read now: a test may lower it
    allowed = scope_chunk_ids(conn, scope)
    sized_for = fetch_k or k
    if allowed is not None and len(allowed) <= (max(sized_for * OVERFETCH, MIN_FETCH) if fetch is None else fetch):
        return rescore(*stored_vectors(conn, allowed, len(query)), query, k)  # a small scope: all of it, exactly, no bits read
    try:
        bits = read_bits(conn)
    except LayoutError:
        n = conn.execute(f"SELECT count(*) FROM {BITS_TABLE}_rowids").fetchone()[0]
        if n < exact_below:
            return None
        pool = vec0_candidates(conn, query, fetch_size(sized_for, n) if fetch is None else fetch, allowed)
        return rescore(*stored_vectors(conn, pool, len(query)), query, k)
    if len(bits) < exact_below:
        return None
    rows = None
    if allowed is not None:
        mask = np.isin(bits.ids, allowed)
        rows = np.flatnonzero(mask if bits.live is None else mask & bits.live)
    return search_bits(conn, bits, query, k, rows, fetch, fetch_k)
