"""BM25 on Postgres with FTS5's numbers: the same phrases, idf, lengths and ties.

FTS5's ``bm25()`` for a row is ``sum over the query's phrases of idf * (f * (k1 + 1)) /
(f + k1 * (1 - b + b * D / avgdl))`` with ``f`` the phrase's count in the row (over text
and heading path), ``D`` the row's length in tokens, ``avgdl`` the average over all rows
and ``idf = log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6), ``n`` the rows holding the
phrase. Here ``f`` and ``D`` come from ``chunks_bm25`` (written with the chunks, terms from
the index's own FTS5 tokenizer), ``N`` and the total length from ``chunks_bm25_stats``. A
query word of one term is scored from its postings on the server; a word of several terms (``rrf_k``,
``codegen-units``) is a phrase, matched from its terms' stored positions (read from the posting
table's covering index), the few chunks whose postings keep none tokenized again. Sums run in
the query's phrase order, as FTS5's do; ties go by chunk id.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..search.terms import query_words
from ..storage.scoring import B, K1, sorted_unique, top_hits
from ..storage.scope import Scope
from ..words.tokenize import Tokenizer


def fts5_idf(n_rows: int, n_hit: int) -> float:
    """FTS5's idf (never below 1e-6)."""
    value = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5))
    return value if value > 0 else 1e-6


def fts5_terms(idf: float, tf: np.ndarray, dl: np.ndarray, avgdl: float) -> np.ndarray:
    """One phrase's BM25 term for each row, in FTS5's order of operations."""
    tf = tf.astype(np.float64)
    return idf * ((tf * (K1 + 1.0)) / (tf + K1 * (1.0 - B + B * dl.astype(np.float64) / avgdl)))


def phrase_counts(positions: list[tuple[str, int, int]], phrase: Sequence[str]) -> int:
    """How often ``phrase`` (terms) occurs in a row's (term, column, offset) list: its terms at
    consecutive offsets of one column, as an FTS5 phrase matches."""
    at = {(col, off): term for term, col, off in positions}
    return sum(1 for term, col, off in positions if term == phrase[0]
               and all(at.get((col, off + i)) == t for i, t in enumerate(phrase[1:], start=1)))


def scope_sql(scope: Scope, column: str) -> tuple[str, list[Any]]:
    """``AND ...`` keeping ``column`` (a chunk id) inside ``scope``."""
    parts, args = [], []
    if scope.document_ids is not None:
        parts.append(f"{column} IN (SELECT id FROM chunks WHERE document_id = ANY(%s))")
        args.append(list(scope.document_ids))
    if scope.chunk_ids is not None:
        parts.append(f"{column} = ANY(%s)")
        args.append(list(scope.chunk_ids))
    return "".join(f" AND {p}" for p in parts), args


def bm25(conn: Any, tokenizer: Tokenizer, query: str, limit: int, scope: Scope = Scope(),
         postings: "Postings | None" = None) -> list[tuple[int, float]]:
    """Up to ``limit`` chunks by BM25 in ``scope``: (chunk id, score), best first, ties by id.

    Each one-term phrase's whole posting list is read as three packed arrays (``Postings``,
    which keeps them between queries while the term's version is unchanged) and scored in
    numpy, as the file scores its blocks; a phrase of several terms is counted by ``_phrase``.
    Phrases are added in the query's order with FTS5's order of operations: FTS5's doubles."""
    words = query_words(query)
    if not words or scope.empty or limit <= 0:
        return []
    n_rows, total = conn.execute("SELECT n_rows, total_length FROM chunks_bm25_stats WHERE id = 1").fetchone()
    if not n_rows:
        return []
    avgdl = total / n_rows
    phrases = [p for p in tokenizer.terms(words) if p]
    singles = sorted({p[0] for p in phrases if len(p) == 1})
    postings = postings or Postings(0)
    postings.fit(n_rows)
    lists = postings.lists(conn, singles)
    allowed = _in_scope(conn, scope)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for phrase in phrases:
        found = lists.get(phrase[0]) if len(phrase) == 1 else postings.phrase(conn, tokenizer, phrase)
        if found is not None and allowed is not None:
            keep = np.isin(found[0], allowed, assume_unique=True)
            found = (found[0][keep], found[1][keep], found[2][keep], found[3])
        if found is not None and len(found[0]):
            ids, tf, dl, n_hit = found
            parts.append((ids, fts5_terms(fts5_idf(n_rows, n_hit), tf, dl, avgdl)))
    if not parts:
        return []
    scores, ids = summed(parts)
    return top_hits(scores, limit, None, ids)


def summed(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray | None]:
    """Each chunk's sum of the phrases' ``(ids, values)`` parts (a part's ids distinct), added
    phrase by phrase as FTS5 adds them: (scores, their chunk ids; None when a score's position
    is its id). Long lists (a common word at 1M chunks) go into an array indexed by chunk id,
    short ones into their sorted distinct ids: the same sums, without sorting millions of ids."""
    postings = sum(len(p[0]) for p in parts)
    span = max(int(p[0].max()) for p in parts) + 1
    if span <= 8 * postings:
        scores = np.zeros(span)
        for part_ids, values in parts:
            scores[part_ids] += values
        return scores, None
    ids = sorted_unique(np.concatenate([p[0] for p in parts]))
    scores = np.zeros(len(ids))
    for part_ids, values in parts:
        scores[np.searchsorted(ids, part_ids)] += values
    return scores, ids


def _in_scope(conn: Any, scope: Scope) -> np.ndarray | None:
    """The chunk ids of ``scope``, sorted (None: every chunk)."""
    if scope.document_ids is None and scope.chunk_ids is None:
        return None
    where, args = scope_sql(scope, "id")
    rows = conn.execute(f"SELECT id FROM chunks WHERE TRUE{where} ORDER BY id", args).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


class Postings:
    """Posting lists read whole, kept between queries: term -> (version, chunk ids, frequencies,
    lengths, document frequency). A writer gives every term it touches a new ``version`` (from
    one sequence, never reused) in its own transaction, so a list is reused only by a snapshot
    that sees the same version: never stale. ``budget``: the most postings kept (least recently
    used go first; 0 keeps none), raised to ``per_chunk`` postings per chunk of the index
    (``fit``). A kept list is held in the narrowest integers its values fit (8 bytes a posting
    where chunk ids fit 32 bits, as the file's cache holds them)."""

    def __init__(self, budget: int = 8_000_000, per_chunk: int = 0) -> None:
        import threading
        from collections import OrderedDict

        self.budget = self.base = budget
        self.per_chunk = per_chunk  # the budget grows to this many postings per chunk of the index, as the file's
        self._kept: "OrderedDict[str, tuple]" = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def fit(self, n_rows: int) -> None:
        """Size the budget for an index of ``n_rows`` chunks (at least the base budget)."""
        if self.per_chunk:
            self.budget = max(self.base, self.per_chunk * n_rows)

    def prefetch(self, conn: Any, terms: Sequence[tuple[str, int]], share: float = 0.5, batch: int = 16) -> int:
        """Read and keep the lists of ``terms`` ((term, its document frequency), longest first) while
        the kept lists stay within ``share`` of the budget: a long-lived reader's first queries then
        find them. Returns the postings kept."""
        chosen, total = [], self._size
        for term, df in terms:
            if total + df > self.budget * share:
                break
            chosen.append(term)
            total += df
        for start in range(0, len(chosen), batch):
            self.lists(conn, chosen[start:start + batch])
        return self._size

    def lists(self, conn: Any, terms: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
        """Each of ``terms``' (chunk ids, frequencies, lengths, document frequency) as this
        snapshot sees them; terms in no chunk are left out."""
        if not terms:
            return {}
        seen = dict((t, (v, n)) for t, v, n in conn.execute(
            "SELECT term, version, df FROM chunks_bm25_terms WHERE term = ANY(%s)", (list(terms),)).fetchall())
        out, missing = {}, []
        with self._lock:
            for term, (version, df) in seen.items():
                kept = self._kept.get(term)
                if kept is not None and kept[0] == version:
                    self._kept.move_to_end(term)
                    out[term] = (*kept[1:4], int(df))
                else:
                    missing.append(term)
        if missing:
            for term, ids, tf, dl in conn.execute(
                    "SELECT term, string_agg(int8send(chunk_id), ''::bytea ORDER BY chunk_id),"
                    " string_agg(int4send(tf), ''::bytea ORDER BY chunk_id),"
                    " string_agg(int4send(dl), ''::bytea ORDER BY chunk_id)"
                    " FROM chunks_bm25 WHERE term = ANY(%s) GROUP BY term", (missing,), binary=True).fetchall():
                arrays = (np.frombuffer(ids, ">i8").astype(np.int64), np.frombuffer(tf, ">i4").astype(np.int32),
                          np.frombuffer(dl, ">i4").astype(np.int32))
                out[term] = (*arrays, int(seen[term][1]))
                self._keep(term, seen[term][0], tuple(narrow(a) for a in arrays))
        return out

    def phrase(self, conn: Any, tokenizer: Tokenizer, phrase: Sequence[str]) -> tuple[np.ndarray, ...] | None:
        """A phrase's (chunk ids, counts, lengths, rows holding it) over the whole index, kept
        while the versions of all its terms are unchanged; None when no chunk holds it."""
        terms = sorted(set(phrase))
        versions = dict(conn.execute("SELECT term, version FROM chunks_bm25_terms WHERE term = ANY(%s)",
                                     (terms,)).fetchall())
        if len(versions) < len(terms):
            return None
        key, version = "\x00".join(phrase), tuple(versions[t] for t in terms)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and kept[0] == version:
                self._kept.move_to_end(key)
                return kept[1]
        found = _phrase(conn, tokenizer, phrase)
        if found is not None:
            self._keep(key, version, (found,), len(found[0]))
        return found

    def _keep(self, term: str, version: Any, arrays: tuple[Any, ...], size: int | None = None) -> None:
        size = len(arrays[0]) if size is None else size
        if size > self.budget:
            return
        with self._lock:
            old = self._kept.pop(term, None)
            if old is not None:
                self._size -= old[-1]
            self._kept[term] = (version, *arrays, size)
            self._size += size
            while self._size > self.budget:
                _, dropped = self._kept.popitem(last=False)
                self._size -= dropped[-1]


def narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (non-negative integers) in the narrowest of uint16, int32 and their own type that holds them."""
    top = int(values.max()) if len(values) else 0
    for dtype in (np.uint16, np.int32):
        if top <= np.iinfo(dtype).max and np.dtype(dtype).itemsize < values.dtype.itemsize:
            return values.astype(dtype)
    return values


OFFSET_BITS = 25  # a position: column << 25 | token offset (a column holds fewer than 32M tokens)
POSITION_BITS = OFFSET_BITS + 1  # columns 0 (text) and 1 (heading path)
# positions live in the posting table's covering index (migration 6), so that a phrase reads its
# terms' postings in term order, index-only; a btree entry holds at most ~2.7 KB, so a posting
# keeps its positions up to this many (1 KB) and NULL beyond (a term that often in one chunk)
MAX_POSITIONS = 256
HOLDERS_READ_BY_ID = 50_000  # a phrase whose rarest term is in fewer chunks reads the others' postings there only


def position(column: int, offset: int) -> int:
    """One token's place in a chunk, as ``pos`` stores it."""
    return column << OFFSET_BITS | offset


def pack_positions(positions: Sequence[int]) -> bytes | None:
    """A posting's positions (ascending) as ``chunks_bm25.pos`` holds them: big-endian int32s;
    None past ``MAX_POSITIONS`` (a phrase then tokenizes that chunk again)."""
    if len(positions) > MAX_POSITIONS:
        return None
    return np.asarray(positions, dtype=">i4").tobytes()


def postings_of(items: Any) -> list[tuple[str, int, int, int, bytes]]:
    """(term, chunk id, term frequency, chunk length, positions) of each term of each of the
    (chunk id, its tokenizer positions) ``items``: the rows of ``chunks_bm25``."""
    postings = []
    for chunk_id, positions in items:
        at: dict[str, list[int]] = {}
        for term, column, offset in positions:
            at.setdefault(term, []).append(position(column, offset))
        postings += [(term, chunk_id, len(offsets), len(positions), pack_positions(sorted(offsets)))
                     for term, offsets in at.items()]
    return postings


def copy_postings(conn: Any, postings: Sequence[tuple[str, int, int, int, bytes]], table: str = "chunks_bm25") -> None:
    """Write ``postings_of`` rows into ``table`` by one binary COPY."""
    if not postings:
        return
    from psycopg import sql

    statement = sql.SQL("COPY {} (term, chunk_id, tf, dl, pos) FROM STDIN (FORMAT BINARY)").format(sql.Identifier(table))
    with conn.cursor() as cur, cur.copy(statement) as copy:
        copy.set_types(["text", "bigint", "integer", "integer", "bytea"])
        for row in postings:
            copy.write_row(row)


def phrase_rows(lists: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                phrase: Sequence[str]) -> tuple[np.ndarray, ...] | None:
    """A phrase's (chunk ids, counts, lengths, rows holding it) from its terms' postings with
    positions (term -> ids ascending, frequencies, lengths, positions in posting order): every
    start where term i of the phrase is at offset + i of the same column counts, overlaps
    included, as ``phrase_counts`` (and FTS5) count them. None when no chunk holds it."""
    def places(term: str, shift: int) -> np.ndarray:
        ids, tf, _, pos = lists[term]
        key = (np.repeat(ids, tf) << POSITION_BITS) | pos  # ascending: ids ascending, positions within
        key = key[(pos & ((1 << OFFSET_BITS) - 1)) >= shift]
        return key - shift

    starts = places(phrase[0], 0)
    for shift, term in enumerate(phrase[1:], start=1):
        if not len(starts):
            break
        other = places(term, shift)
        if not len(other):
            return None
        at = np.minimum(np.searchsorted(other, starts), len(other) - 1)
        starts = starts[other[at] == starts]
    if not len(starts):
        return None
    chunk = starts >> POSITION_BITS
    edges = np.flatnonzero(np.concatenate(([True], chunk[1:] != chunk[:-1])))
    ids = chunk[edges]
    counts = np.diff(np.append(edges, len(chunk)))
    first_ids, _, first_dl, _ = lists[phrase[0]]
    return ids, counts.astype(np.int64), first_dl[np.searchsorted(first_ids, ids)].astype(np.int64), len(ids)


def _positions(conn: Any, phrase: Sequence[str]) -> tuple[dict[str, tuple[np.ndarray, ...]], np.ndarray] | None:
    """The postings with positions of a phrase's terms, and the chunks where a term's posting has
    none (NULL: written before positions were kept, or past ``MAX_POSITIONS``), which are left out
    of the lists: the rarest term's whole list, the others' in its chunks when it is rare enough,
    else whole. None when a term is in no chunk."""
    terms = sorted(set(phrase))
    df = dict(conn.execute("SELECT term, df FROM chunks_bm25_terms WHERE term = ANY(%s)", (terms,)).fetchall())
    if len(df) < len(terms):
        return None
    rarest = min(terms, key=lambda t: (df[t], t))
    columns = ("SELECT term, string_agg(int8send(chunk_id), ''::bytea ORDER BY chunk_id),"
               " string_agg(int4send(tf), ''::bytea ORDER BY chunk_id), string_agg(int4send(dl), ''::bytea ORDER BY"
               " chunk_id), string_agg(coalesce(pos, ''::bytea), ''::bytea ORDER BY chunk_id),"
               " string_agg(int4send((pos IS NOT NULL)::int), ''::bytea ORDER BY chunk_id)"
               " FROM chunks_bm25 WHERE term = ANY(%s)")
    out: dict[str, tuple[np.ndarray, ...]] = {}
    unknown: list[np.ndarray] = []

    def read(rows: Any) -> None:
        for term, ids, tf, dl, pos, known in rows:
            ids, known = np.frombuffer(ids, ">i8").astype(np.int64), np.frombuffer(known, ">i4").astype(bool)
            tf, dl = np.frombuffer(tf, ">i4").astype(np.int64), np.frombuffer(dl, ">i4").astype(np.int64)
            unknown.append(ids[~known])
            out[term] = (ids[known], tf[known], dl[known], np.frombuffer(pos, ">i4").astype(np.int64), ids)

    read(conn.execute(columns + " GROUP BY term", ([rarest],), binary=True).fetchall())
    others = [t for t in terms if t != rarest]
    if others:
        by_id = df[rarest] < HOLDERS_READ_BY_ID
        read(conn.execute(columns + (" AND chunk_id = ANY(%s)" if by_id else "") + " GROUP BY term",
                          (others, out[rarest][4].tolist()) if by_id else (others,), binary=True).fetchall())
    if len(out) < len(terms):
        return None
    return {t: v[:4] for t, v in out.items()}, sorted_unique(np.concatenate(unknown)) if unknown else np.zeros(0, np.int64)


def _phrase(conn: Any, tokenizer: Tokenizer, phrase: Sequence[str]) -> tuple[np.ndarray, ...] | None:
    """A phrase's rows in the whole index (its count of rows, ``n_hit``, is FTS5's): matched from
    its terms' stored positions; the chunks where a term's posting has no positions (see
    ``_positions``) and that hold every term are tokenized again, and the two are merged."""
    found = _positions(conn, phrase)
    if found is None:
        return None
    lists, unknown = found
    matched = phrase_rows(lists, phrase) if all(len(v[0]) for v in lists.values()) else None
    parts = [] if matched is None else [matched[:3]]
    if len(unknown):
        terms = sorted(set(phrase))
        holders = conn.execute(
            "SELECT chunk_id FROM chunks_bm25 WHERE term = ANY(%s) AND chunk_id = ANY(%s) GROUP BY chunk_id"
            " HAVING count(*) = %s", (terms, unknown.tolist(), len(terms))).fetchall()
        retokenized = _tokenized_again(conn, tokenizer, phrase, [r[0] for r in holders])
        if retokenized is not None:
            parts.append(retokenized)
    if not parts:
        return None
    ids = np.concatenate([p[0] for p in parts])
    order = np.argsort(ids, kind="stable")
    return ids[order], np.concatenate([p[1] for p in parts])[order], np.concatenate([p[2] for p in parts])[order], len(ids)


def _tokenized_again(conn: Any, tokenizer: Tokenizer, phrase: Sequence[str],
                     chunk_ids: Sequence[int]) -> tuple[np.ndarray, ...] | None:
    """(ids, counts, lengths) of the phrase in ``chunk_ids``, found by tokenizing their text again."""
    if not chunk_ids:
        return None
    texts = conn.execute("SELECT id, text, heading_path, bm25_length FROM chunks WHERE id = ANY(%s) ORDER BY id",
                         (list(chunk_ids),)).fetchall()
    positions = tokenizer.positions([(r[0], r[1], r[2]) for r in texts], sorted(set(phrase)))
    found = [(r[0], phrase_counts(positions[r[0]], phrase), r[3]) for r in texts]
    found = [f for f in found if f[1] > 0]
    if not found:
        return None
    data = np.array(found, dtype=np.int64)
    return data[:, 0], data[:, 1], data[:, 2]
