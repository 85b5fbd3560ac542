"""What a search reads from the SQLite file, inside one snapshot (``Store.read``)."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..storage import vectors as vectors_module
from .schema import BITS_TABLE, CHUNKS_WITH_DOCUMENTS, MERGED_METADATA
from . import bm25 as fts, bm25_postings as search_postings, vector as vector_search
from ..storage.scope import Scope, resolve_scope

PARALLEL_FROM = 200_000  # sign-bit slots from which a one-shot KNN runs beside the BM25 list (at 100k it
# saved nothing: 11.8 ms p50 either way; at 1M 59.4 -> 47.7 ms, docs/benchmarks.md)
RARE_TERM_CHUNKS = 20_000  # a term in at most this many chunks is counted from FTS5's vocabulary (chunk_terms;
# about as fast as tokenizing the few hundred chunks asked for, which does not grow with the index)


def _knn_in(conn: Any, query: np.ndarray, k: int, scope: Scope, fetch_k: int | None,
            map_after: bool = False) -> list[tuple[int, float]]:
    """``vector.knn`` on ``conn`` inside the read transaction begun for it, ended after; with
    ``map_after`` the file is mapped for the next one (``connect.map_file``)."""
    try:
        return vector_search.knn(conn, query, k, scope, fetch_k=fetch_k)
    finally:
        conn.execute("ROLLBACK")
        if map_after:
            from .connect import map_file

            map_file(conn)


class SearchReads:
    """What a search reads, inside ``Store.read()``: scope, KNN and BM25 candidates, rows."""

    # -- search reads: the contract's read side (``storage.py``), inside ``read()`` -----------
    def resolve_scope(self, **restrictions: Any) -> Scope:
        """The scope of a query (``search.scope.resolve_scope``: documents, collections, filters,
        node ids, within_collection)."""
        return resolve_scope(self.conn, **restrictions)

    def knn(self, query: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks in ``scope``: exact vec0 below ``signbits.EXACT_BELOW``, sign bits above."""
        return vector_search.knn(self.conn, query, k, scope, fetch_k=fetch_k)

    def start_knn(self, query: np.ndarray, k: int, scope: Scope, fetch_k: int | None = None) -> Callable[[], list]:
        """``knn``, started now; the callable returned gives its hits. Call inside ``read()``.

        On a large index (``PARALLEL_FROM`` sign-bit slots) it runs on a second connection in a
        worker thread, so that the caller reads the BM25 list on the other core meanwhile, in
        the same snapshot: the second connection read ``PRAGMA data_version`` before this
        one's snapshot began (``note_twin_version``) and reads it again once its own has; it
        runs only when the two agree, nothing having been committed in between (else the KNN
        runs here, after). Elsewhere it runs at once, here."""
        twin, before = getattr(self, "_twin", None), getattr(self, "_twin_version", None)
        if twin is not None and before is not None:
            try:
                twin.execute("BEGIN")
                same = twin.execute("PRAGMA data_version").fetchone()[0] == before
            except self._sqlite_error():
                same = False
            if same:
                self._twin_knns = getattr(self, "_twin_knns", 0) + 1  # its first reads, the next map (``configure``)
                self._knn_future = future = self._knn_worker.submit(_knn_in, twin, query, k, scope, fetch_k,
                                                                    self._twin_knns == 1)

                def result() -> list[tuple[int, float]]:
                    self._knn_future = None
                    return future.result()
                return result
            if twin.in_transaction:
                twin.execute("ROLLBACK")
        hits = self.knn(query, k, scope, fetch_k=fetch_k)
        return lambda: hits

    def note_twin_version(self) -> None:
        """Before a ``read()`` begins: on a large index, open the second connection if need be and
        note its ``PRAGMA data_version`` (what ``start_knn`` compares); else note nothing."""
        self._twin_version = None
        if getattr(self, "_knn_future", None) is not None:
            from concurrent.futures import wait

            wait([self._knn_future])  # one a caller left unread (it raised before reading it)
            self._knn_future = None
        if str(self.path) == ":memory:":
            return
        try:
            slots = self.conn.execute(f"SELECT max(rowid) FROM {BITS_TABLE}_rowids").fetchone()[0] or 0
        except self._sqlite_error():
            return  # no sign-bit index
        if slots < PARALLEL_FROM:
            return
        if getattr(self, "_twin", None) is None:
            from concurrent.futures import ThreadPoolExecutor
            from .connect import connect

            try:
                self._twin = connect(self.path, readonly=True)
            except Exception:  # noqa: BLE001  (no second connection: the KNN runs on this one)
                return
            self._knn_worker = ThreadPoolExecutor(1, thread_name_prefix="polaris-knn")
        try:
            self._twin_version = self._twin.execute("PRAGMA data_version").fetchone()[0]
        except self._sqlite_error():
            self._twin_version = None  # the KNN runs on this connection

    def _sqlite_error(self) -> type:
        from .connect import sqlite_module

        return sqlite_module().Error

    def close_twin(self) -> None:
        """Close the second connection and its worker, if they were opened."""
        if getattr(self, "_twin", None) is not None:
            self._knn_worker.shutdown(wait=True)
            self._twin.close()
            self._twin = None

    def bm25(self, query: str, k: int, scope: Scope) -> list[tuple[int, float]]:
        """FTS5's BM25 candidates in ``scope``, common words scored from the posting lists."""
        hits = search_postings.bm25(self.conn, self.tokenizer(), query, k, scope)
        return fts.bm25(self.conn, query, k, scope) if hits is None else hits

    def chunk_texts(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """Each chunk's (heading path, text)."""
        sql = "SELECT id, heading_path, text FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
        return {r[0]: (r[1] or "", r[2] or "") for r in self.conn.execute(sql, (json.dumps(list(ids)),))}

    def candidates(self, ids: Sequence[int], with_vectors: bool) -> dict[int, tuple[str, str, np.ndarray | None]]:
        """(document id, heading path, stored vector or None) of each chunk: what ranking needs."""
        column = "embedding" if with_vectors else "NULL"
        sql = f"SELECT id, document_id, heading_path, {column} FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
        rows = self.conn.execute(sql, (json.dumps(list(dict.fromkeys(ids))),)).fetchall()
        dim = self.model.dim if with_vectors and self.model else None
        return {r[0]: (r[1], r[2], vectors_module.decode(r[3], dim) if with_vectors else None) for r in rows}

    def hit_rows(self, ids: Sequence[int]) -> dict[int, tuple]:
        """What a hit shows of each chunk: (document id, document, collection, node id, heading path,
        text, start, end, merged metadata, status, error, node JSON)."""
        sql = (
            "SELECT c.id, c.document_id, coalesce(d.path, d.id), d.collection, c.node_id, c.heading_path, c.text,"
            f" c.start_char, c.end_char, {MERGED_METADATA}, d.status, d.error, c.node"
            f" FROM {CHUNKS_WITH_DOCUMENTS} WHERE c.id IN (SELECT value FROM json_each(?))"
        )
        return {r[0]: (*r[1:9], json.loads(r[9]), *r[10:]) for r in self.conn.execute(sql, (json.dumps(list(ids)),))}

    def section_rows(self, keys: Sequence[tuple[str, str]], with_text: bool) -> list[tuple]:
        """Every chunk of the sections ``keys`` (document id, heading path), in document order:
        (document id, heading path, node id, start, end, text or None, chunk id, ordinal)."""
        text = "c.text" if with_text else "NULL"
        return self.conn.execute(
            f"SELECT c.document_id, c.heading_path, c.node_id, c.start_char, c.end_char, {text}, c.id, c.ordinal"
            " FROM chunks c"
            " JOIN json_each(?) k ON c.document_id = json_extract(k.value, '$[0]') AND c.heading_path = json_extract(k.value, '$[1]')"
            " ORDER BY c.document_id, c.ordinal",
            (json.dumps([list(k) for k in keys]),),
        ).fetchall()

    def section_stats(self, terms: Sequence[str]) -> tuple[int, int, int, dict[str, int]]:
        """(chunks in the full-text index, their total length in tokens, sections, and each of
        ``terms``' chunk count), FTS5's own numbers (its averages record and vocabulary)."""
        from .postings import averages, vocab

        n_rows, average = averages(self.conn)
        sections = self._section_count()
        held: dict[str, int] = {}
        if terms:
            table = vocab(self.conn, "row")  # a temp table: no change to the file, nothing reloads
            held = dict(self.conn.execute(f"SELECT term, doc FROM {table} WHERE term IN ({', '.join('?' * len(terms))})",
                                          tuple(terms)).fetchall())
        return n_rows, round(n_rows * average), sections, {t: int(held.get(t, 0)) for t in terms}

    def _section_count(self) -> int:
        """The distinct sections of the file, counted once per version of it (a scan of ``chunks``:
        8 ms at 6k chunks, growing with the file)."""
        version = (self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes)
        memo = getattr(self, "_sections_memo", None)
        if memo is None or memo[0] != version:
            count = self.conn.execute("SELECT count(*) FROM (SELECT DISTINCT document_id, heading_path FROM chunks)").fetchone()[0]
            self._sections_memo = memo = (version, int(count))
        return memo[1]

    def chunk_terms(self, ids: Sequence[int], terms: Sequence[str], df: Mapping[str, int]
                    ) -> tuple[dict[int, dict[str, int]], dict[int, int]]:
        """Each of chunks ``ids``' counts of ``terms`` and its length in tokens, as FTS5 holds
        them: lengths from its docsize records; a term in few chunks (``df``, as
        ``section_stats`` gives it) from its vocabulary (every place it occurs), a common one by
        tokenizing just these chunks (what FTS5 did to them), so that the cost does not grow
        with the index."""
        from .postings import varints, vocab

        wanted = json.dumps(list(ids))
        lengths = {int(i): sum(varints(sz)) for i, sz in self.conn.execute(
            "SELECT id, sz FROM chunks_fts_docsize WHERE id IN (SELECT value FROM json_each(?))", (wanted,))}
        counts: dict[int, dict[str, int]] = {i: {} for i in lengths}
        if not terms:
            return counts, lengths
        instances = vocab(self.conn, "instance")
        common = [t for t in terms if df.get(t, 0) > RARE_TERM_CHUNKS]
        rare = [t for t in terms if 0 < df.get(t, 0) <= RARE_TERM_CHUNKS]
        if rare:  # one statement, the chunks filtered in SQLite (a Han character's thousands of places never reach Python)
            for term, doc, n in self.conn.execute(
                    f"SELECT term, doc, count(*) FROM {instances} WHERE term IN ({', '.join('?' * len(rare))})"
                    " AND doc IN (SELECT value FROM json_each(?)) GROUP BY term, doc", (*rare, wanted)):
                if doc in counts:
                    counts[doc][term] = n
        if common:
            texts = self.conn.execute("SELECT id, text, heading_path FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
                                      (wanted,)).fetchall()
            for cid, found in self.tokenizer().positions([(int(i), t or "", h or "") for i, t, h in texts], common).items():
                for term, _, _ in found:
                    counts.setdefault(cid, {})[term] = counts.get(cid, {}).get(term, 0) + 1
        return counts, lengths

    def text_slices(self, spans: Sequence[tuple[str, int, int]]) -> list[str | None]:
        """The stored text of document ``id`` from ``start`` to ``end`` (characters), for each
        ``(id, start, end)`` of ``spans``; None where the document's text is not stored."""
        if not spans:
            return []
        rows = self.conn.execute(
            "SELECT k.key, substr(t.text, json_extract(k.value, '$[1]') + 1,"
            " json_extract(k.value, '$[2]') - json_extract(k.value, '$[1]'))"
            " FROM json_each(?) k LEFT JOIN document_texts t ON t.document_id = json_extract(k.value, '$[0]')",
            (json.dumps([list(s) for s in spans]),)).fetchall()
        out: list[str | None] = [None] * len(spans)
        for i, text in rows:
            out[i] = text
        return out
