"""Whole-section BM25 for Chinese, Japanese and Korean questions (#36).

A question in a CJK language is many overlapping bigrams, and the words that answer it are
spread over a section's chunks: a section scored at its best chunk sees only some of them.
Measured on the train questions of react-zh and vue-ja (``benchmarks/bigram_bm25.py --ablate``,
docs/search.md), scoring each section's whole text as one BM25 unit is what a hand-written
bigram BM25 gains over the chunk list on natural-language questions, and Lucene's idf
``ln(1 + (N - n + 0.5) / (n + 0.5))`` the rest (FTS5's floors a bigram that half the chunks
hold at nothing, and CJK sets have many).

So, for a query with a CJK letter in section unit, the keyword list's sections are scored
again: each section's term counts and length are its chunks' summed, as the index holds them
(``Storage.chunk_terms``), ``n`` is the chunks holding the term and ``N`` all chunks
(``Storage.section_stats``: the index's own statistics, equal on both backends), the average
length is the index's tokens over its sections. Each section keeps its best chunk as its representative; the list is the sections
in their new order. A query without a CJK letter never comes here, so English rankings do
not move. The maths is pure; the Searcher reads the rows.
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Sequence

from ..storage.scoring import B, K1  # FTS5's constants (the baseline's too)


def lucene_idf(n_rows: int, n_hit: int) -> float:
    """Lucene's BM25 idf: positive for every term, however common."""
    return math.log(1.0 + (n_rows - n_hit + 0.5) / (n_hit + 0.5))


def section_scores(
    terms: Sequence[str], sections: Mapping[Hashable, tuple[Mapping[str, int], int]],
    n_rows: int, df: Mapping[str, int], average: float,
) -> dict[Hashable, float]:
    """BM25 of each section (its summed term counts and length) for the distinct ``terms``."""
    idf = {t: lucene_idf(n_rows, df[t]) for t in dict.fromkeys(terms) if df.get(t)}
    average = average or 1.0
    out = {}
    for key, (counts, length) in sections.items():
        norm = K1 * (1.0 - B + B * length / average)
        out[key] = sum(w * counts[t] * (K1 + 1.0) / (counts[t] + norm) for t, w in idf.items() if counts.get(t))
    return out


def reorder(hits: Sequence[tuple[int, float]], section_of: Mapping[int, Hashable],
            scores: Mapping[Hashable, float]) -> list[tuple[int, float]]:
    """The keyword list as sections: each section once, at its best chunk (its first in
    ``hits``), in order of its whole-section score (ties: the chunk list's order)."""
    first: dict[Hashable, tuple[int, int]] = {}
    for place, (cid, _) in enumerate(hits):
        first.setdefault(section_of[cid], (place, cid))
    ordered = sorted(first.items(), key=lambda kv: (-scores.get(kv[0], 0.0), kv[1][0]))
    return [(cid, float(scores.get(key, 0.0))) for key, (_, cid) in ordered]
