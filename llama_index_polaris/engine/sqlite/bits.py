"""Vector KNN for long-lived processes: the sign-bit index held in RAM.

A process that serves many queries (a notebook, a retriever, Datasette) keeps every
chunk's sign bits (``ann.py``: 48 bytes per chunk at 384 dims), its id and its
document, about 70 bytes per chunk with the document names, and re-scores each query's
candidates from the float32 vectors in SQLite. It used to hold the float matrix itself
(1.5 KB per chunk, 13 s to load at 1M chunks); the bits load from the index's blocks in
a fraction of that and answer with the same recall as the one-shot path. It reloads
when the database changed (``PRAGMA data_version`` or this connection's own writes);
until it has loaded, queries take the one-shot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .schema import BITS_TABLE
from ..storage import signbits
from .ann import BLOCKS_SQL, LayoutError, SignBits, blocks_to_bits, has_index, search_bits
from ..storage.scope import Scope
from ..storage.signbits import scope_rows  # noqa: F401  (the BM25 cache's too)
from .store_cache import BATCH_ROWS, StoreCache

MIN_CHUNKS = 20_000  # below this the plain paths are as fast and need no RAM (the BM25 cache shares it)
BLOCK_BATCH = 16  # index blocks (1,024 chunks each) read per turn of the store's lock


@dataclass(frozen=True)
class _Snapshot:
    """One consistent load: the sign bits, and a document code per row."""

    bits: SignBits
    docs: np.ndarray
    doc_codes: dict[str, int]


EMPTY = _Snapshot(SignBits(np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.uint64)),
                  np.zeros(0, dtype=np.int32), {})


class VectorCache(StoreCache):
    """The sign bits of one store's chunk vectors, in RAM, with the document of each row.

    ``background=True`` (what a ``PolarisIndex`` uses) loads in a thread while the
    one-shot path answers. Inactive below ``min_chunks`` (default: where exact search
    takes over) or when the file has no sign-bit index.
    """

    def __init__(
        self, store: Any, min_chunks: int | None = None, *, background: bool = False,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        if min_chunks is None:  # read now, so that a test can lower them
            min_chunks = max(MIN_CHUNKS, signbits.EXACT_BELOW)
        super().__init__(store, min_chunks, background=background, batch_rows=batch_rows)
        self.snapshot = EMPTY  # replaced whole, so a reader never mixes two loads

    @property
    def ids(self) -> np.ndarray:
        """The chunk ids currently held."""
        return self.snapshot.bits.ids

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (ids, bits, document codes); the document names come on top."""
        snap = self.snapshot
        return snap.bits.nbytes + snap.docs.nbytes

    def _install(self, state: _Snapshot | None, active: bool) -> None:
        self.snapshot, self.active = state or EMPTY, active

    def _read(self, version: tuple[int, int]) -> tuple[_Snapshot | None, bool]:
        with self.store._lock:
            present = has_index(self.store.conn)
        if not present:
            return None, False
        count = self._locked(version, f"SELECT count(*) FROM {BITS_TABLE}_rowids")[0][0]
        if count < self.min_chunks:
            return None, False
        try:
            bits = self._read_bits(version)
        except LayoutError:
            return None, False  # the one-shot path falls back to sqlite-vec's own KNN
        order = np.argsort(bits.ids, kind="stable")  # to find a chunk's row by its id
        sorted_ids = bits.ids[order]
        codes: dict[str, int] = {}
        docs = np.full(len(bits), -1, dtype=np.int32)
        for rows in self._document_batches(version):
            ids = np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))
            at = np.minimum(np.searchsorted(sorted_ids, ids), max(len(bits) - 1, 0))
            ok = sorted_ids[at] == ids  # chunks without a vector are not in the index
            codes_here = np.fromiter((codes.setdefault(r[0], len(codes)) for r in rows), dtype=np.int32, count=len(rows))
            docs[order[at[ok]]] = codes_here[ok]
        return _Snapshot(bits, docs, codes), True

    def _read_bits(self, version: tuple[int, int]) -> SignBits:
        """The live rows of the index's blocks, BLOCK_BATCH blocks per turn of the store's lock,
        copied straight into arrays sized once (no second copy of the bits, nothing left behind
        in the heap by a list of blobs)."""
        blocks = self._locked(version, f"SELECT count(*), max(size) FROM {BITS_TABLE}_chunks")[0]
        ids = bits = None
        filled, last = 0, -(2**63)
        while True:
            rows = self._locked(version, BLOCKS_SQL + " WHERE c.chunk_id > ? ORDER BY c.chunk_id LIMIT ?",
                                (last, BLOCK_BATCH))
            if not rows:
                break
            last = rows[-1][0]
            part = blocks_to_bits(rows)
            if bits is None:
                ids = np.empty(blocks[0] * blocks[1], dtype=np.int64)
                bits = np.empty((len(ids), part.bits.shape[1]), dtype=part.bits.dtype)
            keep = slice(None) if part.live is None else part.live
            n = len(part)
            ids[filled:filled + n], bits[filled:filled + n] = part.ids[keep], part.bits[keep]
            filled += n
        if bits is None:
            return EMPTY.bits
        if filled < 0.9 * len(ids):  # many free slots: do not keep them
            return SignBits(ids[:filled].copy(), bits[:filled].copy())
        return SignBits(ids[:filled], bits[:filled])

    def _document_batches(self, version: tuple[int, int]) -> Any:
        """(document_id, ordinal, id) of every chunk from the (document_id, ordinal) index alone:
        reading the chunk rows themselves would page the whole file through memory."""
        sql = ("SELECT document_id, ordinal, id FROM chunks INDEXED BY chunks_document_ordinal"
               " WHERE (document_id, ordinal, id) > (?, ?, ?) ORDER BY document_id, ordinal, id LIMIT ?")
        last: tuple = ("", -(2**63), -(2**63))
        while True:
            rows = self._locked(version, sql, (*last, self.batch_rows))
            if not rows:
                return
            last = rows[-1]
            yield rows

    def knn(
        self, query: np.ndarray, k: int, scope: Scope = Scope(), fetch: int | None = None, fetch_k: int | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks in ``scope``: (chunk id, cosine distance), nearest first.

        ``fetch`` candidates (default ``ann.fetch_size``) by Hamming distance from RAM,
        re-scored exactly from the store (call it inside the caller's read snapshot, as the
        Searcher does).
        """
        snap = self.snapshot
        rows = scope_rows(snap.bits.ids, snap.docs, snap.doc_codes, scope)
        if rows is not None and len(rows) == 0 or k <= 0 or len(snap.bits) == 0:
            return []
        with self.store._lock:
            return search_bits(self.store.conn, snap.bits, query, k, rows, fetch, fetch_k)
