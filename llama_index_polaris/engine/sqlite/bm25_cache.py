"""BM25 from RAM for long-lived processes: FTS5's own scores, common terms from memory.

An FTS5 OR query visits every chunk that holds any query word and scores each one; for
SciFact questions over 100k chunks that is 40 ms, nearly all of it spent on the few
common words ("cell", "patients", "increase") that match tens of thousands of chunks.
FTS5's ``bm25()`` is a sum over the query's phrases of ``idf * tf(k1+1) / (tf + k1(1 -
b + b*len/avglen))``, so the phrases can be scored apart and added. This cache keeps the
chunk lengths, the row count and the average length (read from FTS5's own tables) and,
once a common word has been asked for, its posting list (the file's, ``postings.py``;
``fts5vocab`` when it has none); a query's common single-word phrases are scored here
with numpy and the rest by FTS5 itself, over just the rare words. Same scores as ``bm25()`` (to rounding), same scope rules.

It reloads when the database changed, like the vector cache, and holds at most
``max_postings`` postings (least recently used words go first): by default 32 per chunk
and at least 8M, 8 bytes each (64 MB up to 250k chunks, 256 MB at 1M).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from .connect import sqlite_module
from .bm25 import HEADING_WEIGHT, TEXT_WEIGHT, bm25, bm25_sql, phrases_query, query_words
from .postings import fts_tokenizer, varints, vocab
from ..words.tokenize import Tokenizer
from .bm25_postings import idf, phrase_scores, posting, top_hits
from ..storage.scoring import K1, PRUNE_FROM, Term, located, top_pruned
from ..storage.scope import Scope
from .store_cache import BATCH_ROWS, Changed, StoreCache
from ..storage.signbits import scope_rows
from .bits import MIN_CHUNKS

log = logging.getLogger(__name__)
COMMON_DF = 1_000  # a word in at least this many chunks is scored from RAM
MAX_POSTINGS = 8_000_000  # (int32 row, float32 weighted count) each: 64 MB
POSTINGS_PER_CHUNK = 32  # the bound grows with the index: 50 SciFact questions touch 20M at 1M chunks
MAX_WORDS = 100_000  # query words remembered (their terms and document frequencies)
COLUMN_WEIGHTS = {"text": TEXT_WEIGHT, "heading_path": HEADING_WEIGHT}
COLUMN_OF = {"fts_text": "text", "fts_heading_path": "heading_path"}  # chunks_fts's columns since #36 (CJK bigrams)


@dataclass(frozen=True)
class _Base:
    """One consistent load: chunk ids (sorted), their lengths and documents, the averages."""

    ids: np.ndarray
    lengths: np.ndarray
    n_rows: int
    avg_length: float
    docs: np.ndarray
    doc_codes: dict[str, int]


class Bm25Cache(StoreCache):
    """Chunk lengths and common words' posting lists of one store, in RAM."""

    def __init__(
        self,
        store: Any,
        min_chunks: int = MIN_CHUNKS,
        common_df: int = COMMON_DF,
        max_postings: int | None = None,
        *,
        background: bool = False,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        super().__init__(store, min_chunks, background=background, batch_rows=batch_rows)
        self.common_df = common_df
        self.max_postings = max_postings
        self._base: _Base | None = None
        self._df: dict[str, int] = {}
        self._postings: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._held = 0
        self._terms: dict[str, tuple[str, ...]] = {}
        self._tokenizer: Any = None
        self._vocab: dict[str, str] = {}  # fts5vocab tables by kind, made at the first load

    def bm25(self, query: str, limit: int, scope: Scope = Scope()) -> list[tuple[int, float]]:
        """What ``bm25(conn, query, limit, scope)`` returns, common words scored from RAM."""
        words = query_words(query)
        if not words or scope.empty or limit <= 0:
            return []
        with self._lock:
            base, common = self._base, []
            if base is not None:
                try:
                    terms = self._query_terms(words)
                    common = [t[0] for t in terms if len(t) == 1 and self._doc_freq(t[0]) >= self.common_df]
                except sqlite_module().OperationalError as exc:  # an unreadable FTS table: the plain path degrades alike
                    log.debug("BM25 cache skipped: %s", exc)
                    common = []
            if not common:
                return bm25(self.store.conn, query, limit, scope)
            rare = [w for w, t in zip(words, terms) if not (len(t) == 1 and t[0] in common)]
            if sum(self._doc_freq(t) for t in common) >= PRUNE_FROM:
                return self._top_pruned(base, common, rare, limit, scope)
            scores = np.zeros(len(base.ids))
            # Each (distinct) query word is scored exactly once: a word that is one common term
            # from its posting list here, every other word by FTS5 in _add_fts. The phrases of
            # bm25() score apart, so ``scores`` ends as its sum over all of them.
            for term in common:
                rows, tf = self._posting(term, base)
                weight = idf(base.n_rows, self._doc_freq(term))
                scores[rows] += phrase_scores(tf, base.lengths[rows], base.avg_length, weight)
            if rare:
                self._add_fts(scores, base, phrases_query(rare), scope)
        return top_hits(scores, limit, scope_rows(base.ids, base.docs, base.doc_codes, scope), base.ids)

    def _top_pruned(self, base: _Base, common: list[str], rare: list[str], limit: int,
                    scope: Scope) -> list[tuple[int, float]]:
        """The dense sum's top ``limit``, the same floats (``scoring.top_pruned``), for a query
        whose common words hold ``PRUNE_FROM`` postings or more."""
        def term(word: str) -> Term:
            rows, tf = self._posting(word, base)
            weight = idf(base.n_rows, self._doc_freq(word))

            def at(cand: np.ndarray) -> np.ndarray:
                where, hit = located(rows, cand)
                part = np.zeros(len(cand), dtype=np.float64)
                part[hit] = phrase_scores(tf[where[hit]], base.lengths[cand[hit]], base.avg_length, weight)
                return part
            return Term(weight * (K1 + 1.0), lambda: (rows, phrase_scores(tf, base.lengths[rows], base.avg_length, weight)), at)

        extra = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        if rare:
            extra = self._fts_rows(base, phrases_query(rare), scope)
        allowed = scope_rows(base.ids, base.docs, base.doc_codes, scope)
        cand, exact = top_pruned([term(w) for w in common], extra, len(base.ids), limit, allowed)
        return top_hits(exact, limit, ids=base.ids[cand])

    # -- loading ------------------------------------------------------------------------
    def _install(self, state: _Base | None, active: bool) -> None:
        self._base, self.active = state, active
        self._df, self._postings, self._held = {}, OrderedDict(), 0

    def _read(self, version: tuple[int, int]) -> tuple[_Base | None, bool]:
        try:
            count = self._locked(version, "SELECT count(*) FROM chunks_fts_docsize")[0][0]
            if count < self.min_chunks:
                return None, False
            averages = varints(self._locked(version, "SELECT block FROM chunks_fts_data WHERE id = 1")[0][0])
            with self.store._lock:
                tokenizer = fts_tokenizer(self.store.conn)
                self._vocab = {kind: vocab(self.store.conn, kind) for kind in ("row", "instance")}
        except Changed:
            raise
        except sqlite_module().OperationalError as exc:  # no FTS table (or not ours): the plain path degrades itself
            log.debug("BM25 cache off: %s", exc)
            return None, False
        codes: dict[str, int] = {}
        ids, lengths, docs = [], [], []
        sql = (
            "SELECT d.id, d.sz, c.document_id FROM chunks_fts_docsize AS d LEFT JOIN chunks AS c ON c.id = d.id"
            " WHERE d.id > ? ORDER BY d.id LIMIT ?"
        )
        for rows in self._batches(version, sql):
            ids.append(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)))
            lengths.append(np.fromiter((sum(varints(r[1])) for r in rows), dtype=np.float64, count=len(rows)))
            docs.append(np.fromiter((codes.setdefault(r[2] or "", len(codes)) for r in rows), dtype=np.int64, count=len(rows)))
        if not ids:
            return None, False
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(tokenizer)
        n_rows = averages[0]
        base = _Base(
            ids=np.concatenate(ids),
            lengths=np.concatenate(lengths),
            n_rows=n_rows,
            avg_length=sum(averages[1:]) / n_rows if n_rows else 1.0,
            docs=np.concatenate(docs),
            doc_codes=codes,
        )
        return base, True

    def _doc_freq(self, term: str) -> int:
        if term not in self._df:
            if len(self._df) >= MAX_WORDS:
                self._df.clear()
            row = self.store.conn.execute(f"SELECT doc FROM {self._vocab['row']} WHERE term = ?", (term,)).fetchone()
            self._df[term] = row[0] if row else 0
        return self._df[term]

    def _posting(self, term: str, base: _Base) -> tuple[np.ndarray, np.ndarray]:
        if term in self._postings:
            self._postings.move_to_end(term)
            return self._postings[term]
        conn, weights = self.store.conn, set(COLUMN_WEIGHTS.values())
        kept = posting(conn, term) if len(weights) == 1 else None
        if kept is not None:  # the file's posting list (postings.py): no instance rows to count
            unique, tf = kept[0], kept[1] * weights.pop()
        elif len(weights) == 1:  # every column weighs the same: count instances, half the rows to read
            found = conn.execute(f"SELECT doc FROM {self._vocab['instance']} WHERE term = ?", (term,)).fetchall()
            unique, counts = np.unique(np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found)), return_counts=True)
            tf = counts * weights.pop()
        else:
            found = conn.execute(f"SELECT doc, col FROM {self._vocab['instance']} WHERE term = ?", (term,)).fetchall()
            ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
            weight = np.fromiter((COLUMN_WEIGHTS.get(COLUMN_OF.get(r[1], r[1]), 1.0) for r in found), dtype=np.float64, count=len(found))
            unique, inverse = np.unique(ids, return_inverse=True)
            tf = np.bincount(inverse, weight)
        entry = (np.searchsorted(base.ids, unique).astype(np.int32), tf.astype(np.float32))
        self._postings[term] = entry
        self._held += len(unique)
        bound = self.max_postings or max(MAX_POSTINGS, POSTINGS_PER_CHUNK * len(base.ids))
        # ``_held`` is the number of postings in ``_postings``; least recently used words go
        # until it is within ``bound``, never the word just added (so a query always runs).
        while self._held > bound and len(self._postings) > 1:
            _, (old, _) = self._postings.popitem(last=False)
            self._held -= len(old)
        return entry

    def _query_terms(self, words: list[str]) -> list[tuple[str, ...]]:
        unseen = [w for w in dict.fromkeys(words) if w not in self._terms]
        # ``_terms`` never holds more than MAX_WORDS words: when this query's would overflow
        # it, it starts again from this query's words alone.
        if unseen:
            if len(self._terms) + len(unseen) > MAX_WORDS:
                self._terms.clear()  # start afresh, keeping nothing this query still needs
                unseen = list(dict.fromkeys(words))
            self._terms.update(zip(unseen, self._tokenizer.terms(unseen)))
        return [self._terms[w] for w in words]

    def _add_fts(self, scores: np.ndarray, base: _Base, match: str, scope: Scope) -> None:
        rows, found = self._fts_rows(base, match, scope)
        scores[rows] += found

    def _fts_rows(self, base: _Base, match: str, scope: Scope) -> tuple[np.ndarray, np.ndarray]:
        """FTS5's (rows of ``base``, bm25()) for the phrases in ``match`` in ``scope`` (an error: none)."""
        sql, args = bm25_sql(scope, ordered=False)
        try:
            found = self.store.conn.execute(sql, [match, *args]).fetchall()
        except sqlite_module().OperationalError:  # as the plain path: a full-text error loses the rare words only
            found = []
        ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        return np.searchsorted(base.ids, ids), np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
