"""Vector KNN for long-lived processes on Postgres: the sign bits held in RAM, as the file's.

A process that serves many queries (an MCP server, a LlamaIndex app, a notebook) loads every
chunk's sign bits from ``chunks_bits`` (``schema.SIGN_BITS_SQL``: 48 bytes a chunk at 384
dims, kept equal to ``chunks.embedding`` by triggers) with its id and document, and answers a
query as the SQLite file's ``VectorCache`` does, with the same code (``search/signbits.py``): the
candidates with the fewest differing bits, re-scored exactly from the float32 vectors read in
the query's own snapshot. The same bits choose the same candidates on both backends, so a
long-lived reader gets the same hits from a file and from its copy on a server, at any size;
at 1M chunks recall@10 against exact search was 1.00 over 100 queries, where the HNSW graph
(m 16) gave 0.66 at its default ``ef_search`` (docs/postgres.md).

It answers only for the version of the vectors it was loaded at: ``chunks_version`` is bumped
by every statement that changes a vector or a chunk's document, read in the query's snapshot.
Any other version (a write from this or another process) makes the query take the server's
own KNN (``PgStore.knn``) while the bits load again in the background, on a connection of
their own, in one snapshot. So does a store that has connected again since the load began
(``PgStore.generation``): the new connection may reach a server whose version counter names
other rows (a failover to a replica that was behind, a restore).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from ..storage import signbits
from ..storage.scope import Scope
from ..storage.signbits import SignBits, as_words, scope_rows, search_bits
from .connect import connect

log = logging.getLogger(__name__)
LOAD_ROWS = 100_000  # chunks read per statement of a load (ids and bits come packed in one value each)
# pgvector's bit strings put component 0 in the most significant bit of byte 0; the file's
# ``vec_quantize_binary`` (and ``signbits.pack_signs``) in the least: reverse each byte
_REVERSED = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint8)
VERSION_SQL = "SELECT version, vectors FROM chunks_version"  # in the caller's snapshot


def file_order(raw: bytes, n: int) -> np.ndarray:
    """``n`` rows of pgvector bit strings (packed bytes, concatenated) as ``signbits.pack_signs`` packs them."""
    packed = np.frombuffer(raw, dtype=np.uint8)
    return as_words(_REVERSED[packed].reshape(n, -1) if n else packed.reshape(0, 1))


class PgVectorCache:
    """The sign bits of one ``PgStore``'s chunk vectors, in RAM, with each chunk's document.

    ``background=True`` (what a ``PolarisIndex`` uses) loads in a thread while the server
    answers. Inactive below ``min_chunks`` vectors (the file's threshold, ``signbits.EXACT_BELOW``:
    below it both backends search exactly) and for a dimension that does not pack into whole
    bytes (exact search, as the file).
    """

    def __init__(self, store: Any, min_chunks: int | None = None, *, background: bool = False) -> None:
        self.store = store
        if min_chunks is None:  # read now, so that a test can lower it
            min_chunks = signbits.EXACT_BELOW
        self.min_chunks = min_chunks
        self.background = background
        self.active = False
        # (the store's connection it was loaded through, the version of the vectors) or None, then the arrays
        self._state: tuple[tuple[int, int] | None, SignBits, np.ndarray, dict[str, int]] = (None, *_empty())
        self._loader: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def version(self) -> int | None:
        """The version of the vectors held (None: nothing loaded)."""
        held = self._state[0]
        return None if held is None else held[1]

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (ids, bits, document codes); the document names come on top."""
        _, bits, docs, _ = self._state
        return bits.nbytes + docs.nbytes

    def refresh(self) -> bool:
        """True when the bits held are the ones the caller's snapshot sees (call it inside
        ``store.read()``); otherwise starts a load and answers False (use the server)."""
        if not self.store.uses_sign_bits():
            return False
        version, vectors = self.store.conn.execute(VERSION_SQL).fetchone()
        if (self.store.generation, version) == self._state[0]:
            return self.active
        if vectors < self.min_chunks:
            return False
        if not self.background:
            self._load()
            return self._state[0] == (self.store.generation, version) and self.active
        with self._lock:
            if self._loader is None or not self._loader.is_alive():
                self._loader = threading.Thread(target=self._load_logged, name="PgVectorCache", daemon=True)
                self._loader.start()
        return False

    def wait(self, timeout: float = 120.0) -> bool:
        """Block until a load started by ``refresh`` has finished; True when the cache is active."""
        loader = self._loader
        if loader is not None:
            loader.join(timeout)
        return self.active

    def _load_logged(self) -> None:
        try:
            self._load()
        except Exception as exc:  # the server went away, the store was closed: the server's KNN answers
            log.debug("PgVectorCache load stopped: %s", exc)

    def _load(self) -> None:
        """Every chunk's bits and document, in one snapshot of a connection of its own."""
        generation = self.store.generation  # before connecting: a load that straddles a reconnect is stale
        with connect(self.store.uri) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            version = conn.execute(VERSION_SQL).fetchone()[0]
            ids: list[np.ndarray] = []
            bits: list[np.ndarray] = []
            documents: list[str] = []
            last = -(2**63)
            while True:
                n, packed_ids, packed_bits, docs = conn.execute(
                    "SELECT count(*), string_agg(int8send(id), ''::bytea ORDER BY id),"
                    " string_agg(substr(varbit_send(bits), 5), ''::bytea ORDER BY id), array_agg(document_id ORDER BY id)"
                    " FROM (SELECT id, document_id, bits FROM chunks_bits WHERE id > %s ORDER BY id LIMIT %s) s",
                    (last, LOAD_ROWS)).fetchone()
                if not n:
                    break
                ids.append(np.frombuffer(packed_ids, ">i8").astype(np.int64))
                bits.append(file_order(packed_bits, n))
                documents.extend(docs)
                last = int(ids[-1][-1])
            conn.execute("COMMIT")
        codes: dict[str, int] = {}
        docs_array = np.fromiter((codes.setdefault(d, len(codes)) for d in documents), dtype=np.int32,
                                 count=len(documents))
        signs = SignBits(np.concatenate(ids), np.concatenate(bits)) if ids else _empty()[0]
        self._state = ((generation, version), signs, docs_array, codes)  # replaced whole: never two loads mixed
        self.active = len(signs) >= self.min_chunks

    def knn(
        self, query: np.ndarray, k: int, scope: Scope = Scope(), fetch: int | None = None, fetch_k: int | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks in ``scope``: (chunk id, cosine distance), nearest first (call it
        inside the snapshot ``refresh`` answered True in: the floats are read there)."""
        _, bits, docs, codes = self._state
        rows = scope_rows(bits.ids, docs, codes, scope)
        if rows is not None and len(rows) == 0 or k <= 0 or len(bits) == 0:
            return []
        return search_bits(self.store.stored_vectors, bits, query, k, rows, fetch, fetch_k)


def _empty() -> tuple[SignBits, np.ndarray, dict[str, int]]:
    return SignBits(np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.uint64)), np.zeros(0, dtype=np.int32), {}
