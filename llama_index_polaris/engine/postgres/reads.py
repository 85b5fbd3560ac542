"""What a search reads from the server, inside one snapshot (``PgStore.read``): scope, KNN
(exact, sign bits or HNSW, re-scored in float32), BM25 from the posting tables, rows."""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..storage import vectors as vectors_module
from ..storage import scope as scope_module
from ..storage.filters import Filter
from ..storage.scope import Scope
from ..storage import MAX_K
from . import bm25 as bm25_module, schema
from .connect import connect
from .json_patch import merged
from .rows import log, rescore, _vector


PARALLEL_FROM = 200_000  # vectors from which a one-shot KNN runs on a second connection beside the BM25 list
# (the file's threshold; at 1M, docs/benchmarks.md "PostgreSQL")
SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9A-F]+)?")  # what pg_export_snapshot() returns


COMMON_DF = 1_000  # a long-lived reader reads ahead the lists of terms in at least this many chunks (the file's threshold)


EF_SEARCH = 100  # HNSW candidates per query, at least


RESCORE_MARGIN = 32  # half-precision candidates beyond k, re-scored in float32


HNSW_M, HNSW_EF_CONSTRUCTION = 16, 64  # pgvector's defaults


BUILD_MEMORY_CAP = 2 * 2**30  # the most an HNSW build asks for (a server set higher keeps its own)


def build_memory(n: int, dim: int, have: int) -> int:
    """Bytes of ``maintenance_work_mem`` for an HNSW build over ``n`` half-precision vectors of
    ``dim``: the graph in memory (a build that spills is many times slower), at least 512 MB,
    at most ``BUILD_MEMORY_CAP``, and never less than the server's own setting ``have``."""
    graph = n * (2 * dim + 2 * HNSW_M * 16 + 200) * 5 // 4  # vector, layer-0 neighbours, element; +25%
    return max(have, min(BUILD_MEMORY_CAP, max(512 * 2**20, graph)))


class SearchReads:
    """What a search reads, inside ``PgStore.read()``: scope, KNN and BM25 candidates, rows."""

    # -- search reads (inside ``read()``) ----------------------------------------------
    def resolve_scope(self, *, documents: Sequence[str] | None = None, collections: Sequence[str] | None = None,
                      filters: Filter | None = None, node_ids: Sequence[str] | None = None,
                      within_collection: str | None = None) -> Scope:
        """The scope of a query, by the same rules and messages as the SQLite backend (``search.scope``)."""
        return scope_module.resolve_scope(self.conn, documents=documents, collections=collections, filters=filters,
                                          node_ids=node_ids, within_collection=within_collection)

    def start_knn(self, query: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None) -> Callable[[], list]:
        """``knn``, started now; the callable returned gives its hits. Call inside ``read()``.

        On a large index (``PARALLEL_FROM`` vectors, sign bits, no HNSW) the server counts the
        sign bits on a second connection, in a worker thread, while the caller reads the BM25 list
        on this one: the second connection's transaction imports this snapshot
        (``pg_export_snapshot``, ``SET TRANSACTION SNAPSHOT``), so both see the same database. If
        that connection cannot answer, the KNN runs here, after. Elsewhere it runs at once, here."""
        if self._snapshot_read and not scope.empty and k > 0 and self.model is not None \
                and not self.has_ann_index() and self.uses_sign_bits():
            n = self.conn.execute("SELECT vectors FROM chunks_version").fetchone()[0]
            if n >= PARALLEL_FROM:
                snapshot = self.conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
                q = np.asarray(query, dtype=np.float32)
                future = self._knn_worker().submit(self._knn_beside, snapshot, q, min(k, MAX_K), scope, fetch_k)

                def result() -> list[tuple[int, float]]:
                    hits = future.result()
                    return self.knn(query, k, scope, fetch_k=fetch_k) if hits is None else hits
                return result
        hits = self.knn(query, k, scope, fetch_k=fetch_k)
        return lambda: hits

    def _knn_worker(self) -> Any:
        """The one thread that runs the KNN on the second connection (made on first use)."""
        if self._beside is None:
            from concurrent.futures import ThreadPoolExecutor

            self._beside = ThreadPoolExecutor(1, thread_name_prefix="polaris-pg-knn")
        return self._beside

    def _knn_beside(self, snapshot: str, q: np.ndarray, k: int, scope: Scope,
                    fetch_k: int | None) -> list[tuple[int, float]] | None:
        """The sign-bit KNN on the second connection in snapshot ``snapshot``; None when it
        cannot answer there (the exact path's size, or any error: the caller's runs it)."""
        if not SNAPSHOT_ID.fullmatch(snapshot):
            return None
        try:
            if self._twin is None or self._twin.closed:
                self._twin = connect(self.uri)
            twin = self._twin
            twin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                twin.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")  # checked above: hex digits and dashes
                return self._sign_bits_knn(q, k, scope, fetch_k, conn=twin)
            finally:
                twin.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001  (a lost or refused second connection: the first answers)
            log.debug("the KNN beside the BM25 list fell back to the reader's connection: %s", exc)
            self.close_twin(wait=False)
            return None

    def close_twin(self, wait: bool = True) -> None:
        """Close the second connection and, with ``wait``, its worker thread."""
        twin, self._twin = self._twin, None
        if twin is not None:
            with contextlib.suppress(Exception):
                twin.close()
        if wait and self._beside is not None:
            self._beside.shutdown(wait=True)
            self._beside = None

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

    def stored_vectors(self, ids: np.ndarray | Sequence[int], dim: int, conn: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The float32 vectors of chunks ``ids``: (ids found, matrix), read packed in one value; a
        stored vector that is not valid for ``dim`` is skipped (``vectors.valid_rows``, as the file)."""
        n, packed_ids, packed = (self.conn if conn is None else conn).execute(
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

    def _sign_bits_knn(self, q: np.ndarray, k: int, scope: Scope, fetch_k: int | None,
                       conn: Any = None) -> list[tuple[int, float]] | None:
        """The file's approximate KNN (``search/signbits.py``) on the server: the candidates with the fewest
        differing sign bits (ties by id, as the file breaks them), counted over ``chunks_bits`` in
        ``scope`` by the server, re-scored exactly. None where the file searches exactly too:
        fewer than ``signbits.EXACT_BELOW`` vectors, or a scope no larger than the candidates."""
        from pgvector import Vector

        from ..storage import signbits
        from ..storage.cosine import rescore as exact

        conn = self.conn if conn is None else conn  # (``_knn_beside``: the second connection)
        sized_for = fetch_k or k
        n = conn.execute("SELECT vectors FROM chunks_version").fetchone()[0]
        if n < signbits.EXACT_BELOW:
            return None
        where, args = bm25_module.scope_sql(scope, "id")
        if where:
            n = conn.execute(f"SELECT count(*) FROM chunks_bits WHERE TRUE{where}", args).fetchone()[0]
            if n <= signbits.exact_up_to(sized_for):
                return None
        rows = conn.execute(
            f"SELECT id FROM chunks_bits WHERE TRUE{where} ORDER BY bits <~> binary_quantize(%s::vector), id LIMIT %s",
            (*args, Vector(q), signbits.fetch_size(sized_for, n))).fetchall()
        return exact(*self.stored_vectors([r[0] for r in rows], len(q), conn=conn), q, k)

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

    def section_stats(self, terms: Sequence[str]) -> tuple[int, int, int, dict[str, int]]:
        """(chunks, their total length in tokens, sections, each of ``terms``' chunk count), as
        the file's (``Store.section_stats``): the posting tables' statistics."""
        n_rows, total = self.conn.execute("SELECT n_rows, total_length FROM chunks_bm25_stats WHERE id = 1").fetchone()
        sections = self.conn.execute("SELECT count(*) FROM (SELECT DISTINCT document_id, heading_path FROM chunks) s").fetchone()[0]
        held = dict(self.conn.execute("SELECT term, df FROM chunks_bm25_terms WHERE term = ANY(%s)", (list(terms),)).fetchall()) \
            if terms else {}
        return int(n_rows), int(total), int(sections), {t: int(held.get(t, 0)) for t in terms}

    def chunk_terms(self, ids: Sequence[int], terms: Sequence[str], df: Mapping[str, int]
                    ) -> tuple[dict[int, dict[str, int]], dict[int, int]]:
        """Each of chunks ``ids``' counts of ``terms`` and its length in tokens, from the posting
        table (the file's ``Store.chunk_terms``; ``df`` is not needed here)."""
        lengths = dict(self.conn.execute("SELECT id, bm25_length FROM chunks WHERE id = ANY(%s)", (list(ids),)).fetchall())
        counts: dict[int, dict[str, int]] = {int(i): {} for i in lengths}
        if terms:
            for chunk, term, tf in self.conn.execute("SELECT chunk_id, term, tf FROM chunks_bm25 WHERE term = ANY(%s)"
                                                     " AND chunk_id = ANY(%s)", (list(terms), list(ids))):
                counts[int(chunk)][term] = int(tf)
        return counts, {int(i): int(n) for i, n in lengths.items()}

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
