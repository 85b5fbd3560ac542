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

It answers only for the version of the vectors it holds: ``chunks_version`` is bumped by every
statement that changes a vector or a chunk's document, read in the query's snapshot. A newer
version (a write from this or another process) is caught up with in that snapshot: the ids the
versions since changed (``chunks_changes``, written by the same trigger) and those chunks' bits
now, a few rows for a document's commit, applied to the arrays held (``catch_up``: new chunks
go in the arrays' spare room, gone ones are masked, and the arrays are packed again once a
quarter is dead). Only a reader too far behind (``logged_from``: a bulk copy, a TRUNCATE, or
more than ``schema.CHANGES_KEPT`` versions) takes the server's own KNN (``PgStore.knn``) while
the bits load again whole in the background, on a connection of their own, in one snapshot.
So does a store that has connected again since the load began (``PgStore.generation``): the
new connection may reach a server whose version counter names other rows (a failover to a
replica that was behind, a restore).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
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
VERSION_SQL = "SELECT version, vectors, logged_from FROM chunks_version"  # in the caller's snapshot
CATCH_UP_ROWS = 50_000  # changed chunks read in a query's snapshot at most; beyond, the bits load whole
# the chunks changed since a version, with their bits now (NULL: no vector any more), by id
CHANGED_SQL = ("SELECT c.id, b.document_id, substr(varbit_send(b.bits), 5) FROM (SELECT DISTINCT id FROM chunks_changes"
               " WHERE version > %s) c LEFT JOIN chunks_bits b ON b.id = c.id ORDER BY c.id LIMIT %s")


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
        self._held = EMPTY  # replaced whole: a query never mixes two states
        self._loader: threading.Thread | None = None
        self._lock = threading.Lock()
        self.caught_up = 0  # times caught up from the change log, and the bytes of rows read for it (the benchmark's)
        self.caught_bytes = 0
        self.loads = 0  # whole loads done

    @property
    def version(self) -> int | None:
        """The version of the vectors held (None: nothing loaded)."""
        key = self._held.key
        return None if key is None else key[1]

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (ids, bits, document codes); the document names come on top."""
        held = self._held
        return held.bits.nbytes + held.docs.nbytes

    def refresh(self) -> bool:
        """True when the bits held are the ones the caller's snapshot sees (call it inside
        ``store.read()``), catching up with a few changed chunks when it must; otherwise
        starts a load and answers False (use the server)."""
        if not self.store.uses_sign_bits():
            return False
        version, vectors, logged_from = self.store.conn.execute(VERSION_SQL).fetchone()
        key = (self.store.generation, version)
        held = self._held
        if key == held.key:
            return self.active
        if vectors < self.min_chunks:
            return False
        if (self.active and held.key is not None and held.key[0] == key[0]
                and logged_from <= held.key[1] < version and self._catch_up(held, key)):
            return self.active
        if not self.background:
            self._load()
            return self._held.key == key and self.active
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
        held = held_arrays((generation, version), np.concatenate(ids), np.concatenate(bits), docs_array, codes) \
            if ids else Held((generation, version), EMPTY.bits, EMPTY.docs, {}, EMPTY.room)
        with self._lock:
            self._held = held  # replaced whole: never two loads mixed
            self.loads += 1
            self.active = len(held.bits) >= self.min_chunks

    def _catch_up(self, held: "Held", key: tuple[int, int]) -> bool:
        """Apply the chunks changed since ``held`` (read in the caller's snapshot, which sees
        ``key``); False when there are too many (load whole) or another thread moved meanwhile."""
        rows = self.store.conn.execute(CHANGED_SQL, (held.key[1], CATCH_UP_ROWS + 1)).fetchall()
        if len(rows) > CATCH_UP_ROWS:
            return False
        present = [r for r in rows if r[1] is not None]
        with self._lock:
            if self._held is not held:  # another query caught up or loaded first: its state may be newer
                return self._held.key == key
            self._held = catch_up(
                held, key, np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[0] for r in present], dtype=np.int64),
                file_order(b"".join(r[2] for r in present), len(present)) if present else held.bits.bits[:0],
                [r[1] for r in present])
            self.active = len(self._held.bits) >= self.min_chunks
            self.caught_up += 1
            self.caught_bytes += sum(8 + len(r[1] or "") + len(r[2] or b"") for r in rows)
        return True

    def knn(
        self, query: np.ndarray, k: int, scope: Scope = Scope(), fetch: int | None = None, fetch_k: int | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks in ``scope``: (chunk id, cosine distance), nearest first (call it
        inside the snapshot ``refresh`` answered True in: the floats are read there)."""
        held = self._held
        bits = held.bits
        rows = scope_rows(bits.ids, held.docs, held.codes, scope)
        if rows is not None and bits.live is not None:
            rows = rows[bits.live[rows]]
        if rows is not None and len(rows) == 0 or k <= 0 or len(bits) == 0:
            return []
        return search_bits(self.store.stored_vectors, bits, query, k, rows, fetch, fetch_k)


@dataclass(frozen=True)
class Held:
    """What a cache holds: its key (the store's connection, the version of the vectors), the
    sign bits by id (``live`` masks the rows of chunks gone since the load), each row's document
    code, and the arrays the views are the heads of (their tail is room for new chunks)."""

    key: tuple[int, int] | None
    bits: SignBits
    docs: np.ndarray
    codes: dict[str, int]
    room: tuple[np.ndarray, np.ndarray, np.ndarray]


def held_arrays(key: tuple[int, int] | None, ids: np.ndarray, bits: np.ndarray, docs: np.ndarray,
                codes: dict[str, int]) -> Held:
    """A ``Held`` of rows sorted by id, in new arrays with a sixteenth more room."""
    n = len(ids)
    room = n + max(1_024, n // 16)
    ids_room, bits_room = np.empty(room, dtype=np.int64), np.empty((room, bits.shape[1]), dtype=bits.dtype)
    docs_room = np.empty(room, dtype=np.int32)
    ids_room[:n], bits_room[:n], docs_room[:n] = ids, bits, docs
    return Held(key, SignBits(ids_room[:n], bits_room[:n]), docs_room[:n], codes, (ids_room, bits_room, docs_room))


def catch_up(held: Held, key: tuple[int, int], changed: np.ndarray, ids: np.ndarray, bits: np.ndarray,
             documents: list[str]) -> Held:
    """``held`` after the chunks ``changed`` (sorted ids) changed: those of them with a vector
    now (``ids``, sorted, their ``bits`` and ``documents``) take their new rows, the others go.
    New ids above every id held (what the server's sequence gives) go in the room after the
    rows, which no older state's views reach; an id held before (a chunk moved or re-embedded)
    makes the arrays again, in id order, as a load would."""
    old, n = held.bits, len(held.bits.ids)
    if n == 0:  # nothing held (its width unknown): the new rows alone
        codes = {}
        docs = np.fromiter((codes.setdefault(d, len(codes)) for d in documents), dtype=np.int32, count=len(documents))
        return held_arrays(key, ids, bits, docs, codes) if len(ids) else Held(key, old, held.docs, {}, held.room)
    live = np.ones(n, dtype=bool) if old.live is None else old.live.copy()
    at = np.searchsorted(old.ids, changed)
    inside = at < n
    live[at[inside][old.ids[at[inside]] == changed[inside]]] = False
    codes = dict(held.codes)
    docs = np.fromiter((codes.setdefault(d, len(codes)) for d in documents), dtype=np.int32, count=len(documents))
    m = len(ids)
    if m and n and ids[0] <= old.ids[-1] or np.count_nonzero(~live) * 4 > n + m:  # reorder, or pack a quarter dead
        keep = np.flatnonzero(live)
        every = np.concatenate([old.ids[keep], ids])
        order = np.argsort(every, kind="stable")
        return held_arrays(key, every[order], np.concatenate([old.bits[keep], bits])[order],
                           np.concatenate([held.docs[keep], docs])[order], codes)
    ids_room, bits_room, docs_room = held.room
    live = np.concatenate([live, np.ones(m, dtype=bool)])
    if n + m > len(ids_room):  # no room left: new arrays, a sixteenth larger
        grown = held_arrays(key, np.concatenate([old.ids, ids]), np.concatenate([old.bits, bits]),
                            np.concatenate([held.docs, docs]), codes)
        return Held(key, SignBits(grown.bits.ids, grown.bits.bits, None if live.all() else live), grown.docs,
                    codes, grown.room)
    ids_room[n:n + m], bits_room[n:n + m], docs_room[n:n + m] = ids, bits, docs
    return Held(key, SignBits(ids_room[:n + m], bits_room[:n + m], None if live.all() else live),
                docs_room[:n + m], codes, (ids_room, bits_room, docs_room))


EMPTY = Held(None, SignBits(np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.uint64)),
             np.zeros(0, dtype=np.int32), {}, (np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.uint64),
                                               np.zeros(0, dtype=np.int32)))
