"""Sign bits: the candidate choice both backends share (the file's ``ann.py``, the server's
``postgres/bits.py`` and ``PgStore.knn`` call it), so the same bits give the same hits.

Each chunk vector's signs (bit i set when component i > 0) are kept beside it; the Hamming
distance between two sign patterns tracks the angle between the vectors. A query takes the
``fetch_size`` chunks with the fewest differing bits (ties at the cut go to the smallest chunk
ids, whatever order a backend holds its rows in), reads their float32 vectors and returns the
best ``k`` by exact cosine distance. Pure maths and one reader callable: no database here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .cosine import rescore
from .scope import Scope

OVERFETCH = 30  # candidates re-scored per result asked for (recall@10 0.996 at 100k: docs/benchmarks.md)
MIN_FETCH = 1_000  # and never fewer: small k would otherwise leave too few candidates
FETCH_SHARE = 0.002  # nor fewer than this share of the index: at 1M chunks 1,000 gave recall@10 0.978, 2,000 0.99
EXACT_BELOW = 20_000  # fewer chunks: exact vec0 search (at most ~11 ms; sign bits would save ~7 and recall less)


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


HAMMING_ROWS = 32_768  # rows counted per pass: the temporaries stay in cache and are reused


def hamming(bits: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Differing bits between every row of ``bits`` and the one row ``query`` (same packing).

    Counted ``HAMMING_ROWS`` rows at a time into reused buffers: one pass over 1M rows made
    48 MB of fresh temporaries, and their page faults cost more than the counting (12.5
    against 8.8 ms at 1M x 384 here)."""
    n, width = bits.shape
    out = np.empty(n, dtype=np.uint16)
    step = min(HAMMING_ROWS, max(n, 1))
    diff = np.empty((step, width), dtype=bits.dtype)
    counts = np.empty((step, width), dtype=np.uint8)
    q = query.reshape(1, -1)
    for start in range(0, n, step):
        part = bits[start:start + step]
        m = len(part)
        x = np.bitwise_xor(part, q, out=diff[:m])
        if hasattr(np, "bitwise_count"):  # numpy >= 2.0: the CPU's popcount
            c = np.bitwise_count(x, out=counts[:m])
        else:
            c = _POP8[x.view(np.uint8)].reshape(m, -1)
        o = out[start:start + m]
        if c.shape[1] == 1:
            o[:] = c[:, 0]
            continue
        np.add(c[:, 0], c[:, 1], out=o, dtype=np.uint16)
        for j in range(2, c.shape[1]):  # column by column: 2x faster than sum(axis=1) here
            np.add(o, c[:, j], out=o)
    return out


def exact_up_to(k: int) -> int:
    """The largest scope searched exactly for ``k`` results: no larger than the candidates would be."""
    return max(k * OVERFETCH, MIN_FETCH)


def fetch_size(k: int, n: int) -> int:
    """How many candidates to re-score for ``k`` results among ``n`` chunks."""
    return min(n, max(k * OVERFETCH, MIN_FETCH, int(n * FETCH_SHARE)))


def nearest_rows(distances: np.ndarray, fetch: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``fetch`` smallest distances (any order; all when fewer). Among equal
    distances at the cut the smallest ``ids`` are taken (else the first positions), so the same
    bits choose the same candidates whatever order a backend holds them in."""
    if fetch >= len(distances):
        return np.arange(len(distances))
    if fetch <= 0:
        return np.zeros(0, dtype=np.int64)
    cut = _kth_smallest(distances, fetch)
    below = np.flatnonzero(distances < cut)
    ties = np.flatnonzero(distances == cut)
    need = fetch - len(below)
    if ids is not None and need < len(ties):
        ties = ties[np.argpartition(ids[ties], need - 1)[:need]] if need > 0 else ties[:0]
    return np.concatenate([below, ties[:need]])


def _kth_smallest(distances: np.ndarray, k: int) -> int:
    """The ``k``-th smallest of ``distances`` (1-based): counted for small unsigned integers (a
    Hamming distance is at most the bits per row; 1.2 ms at 1M against 6.6 for argpartition)."""
    if distances.dtype.kind == "u" and distances.dtype.itemsize <= 2:
        return int(np.searchsorted(np.cumsum(np.bincount(distances)), k))
    return distances[np.argpartition(distances, k - 1)[k - 1]]


def search_bits(
    read: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]], bits: SignBits, query: np.ndarray, k: int,
    rows: np.ndarray | None = None, fetch: int | None = None, fetch_k: int | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` nearest chunks among ``bits`` (only positions ``rows`` when given): ``fetch``
    candidates (default ``fetch_size`` for ``fetch_k``, else ``k``) by Hamming distance,
    re-scored exactly from the float32 vectors ``read(ids, dim)`` returns (ids found, matrix):
    each backend reads its own, in the caller's snapshot."""
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
        pool = choose(ids, distances, k, fetch)
    found, matrix = read(pool, len(query))
    return rescore(found, matrix, query, k)


def choose(ids: np.ndarray, distances: np.ndarray, k: int, fetch: int | None = None,
           fetch_k: int | None = None) -> np.ndarray:
    """The candidates to re-score from distances already counted: the ``fetch`` nearest (default
    ``fetch_size`` for ``fetch_k``, else ``k``), sorted by id (read in file order)."""
    fetch = fetch_size(fetch_k or k, len(ids)) if fetch is None else min(fetch, len(ids))
    if fetch >= len(ids):
        return np.sort(ids)
    return np.sort(ids[nearest_rows(distances, fetch, ids)])


def scope_rows(ids: np.ndarray, docs: np.ndarray, doc_codes: dict[str, int], scope: Scope) -> np.ndarray | None:
    """Positions of the chunks in ``scope`` (``docs`` holds each chunk's document code); None: all."""
    mask = None
    if scope.document_ids is not None:
        codes = [doc_codes[d] for d in scope.document_ids if d in doc_codes]
        mask = np.isin(docs, np.array(codes, dtype=docs.dtype))
    if scope.chunk_ids is not None:
        chunk_mask = np.isin(ids, np.fromiter(scope.chunk_ids, dtype=np.int64))
        mask = chunk_mask if mask is None else mask & chunk_mask
    return None if mask is None else np.flatnonzero(mask)
