"""A hit's explanation as one line of text, for the doors that print it (the CLI's
``--explain``, the MCP server's answers). The figures are the ``Explanation`` the ranking
computed (``rank.py``); these functions only format them.

- ``explain_line``: every stage (vector, BM25, RRF, score fusion, boost, the learned
  fusion's contributions when ``fusion_weights`` are set, MMR, score).
- ``fusion_line``: the weights and boost the question got by its kind, and why (once per result).
- ``brief_line``: what found the hit and what moved it, for a reader paying per token:
  ``vector #1 · bm25 #5 · boost +0.10 · score 0.962``.

A stage that did not see the hit reads ``-``; when the query's keywords matched no chunk at
all, the BM25 part says so (``no keyword match``) instead.
"""

from __future__ import annotations

from typing import Any

from .rank import Explanation


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def explain_line(e: Explanation) -> str:
    """Every stage's figures on one line (``polaris search --explain``)."""
    return (
        f"vector #{_fmt(e.vector_rank, 'd')} dist {_fmt(e.vector_distance, '.4f')} | "
        f"{_bm25_part(e)} | "
        f"rrf {_fmt(e.rrf, '.5f')} (v {_fmt(e.rrf_vector, '.5f')} + b {_fmt(e.rrf_bm25, '.5f')}) | "
        f"score fusion v {_fmt(e.fusion_vector, '.3f')} + b {_fmt(e.fusion_bm25, '.3f')} | fused {_fmt(e.fused, '.3f')} | "
        f"boost {_fmt(e.boost, '.4f')} | {learned_part(e)}mmr penalty {_fmt(e.mmr_penalty, '.4f')} | "
        f"{'' if e.rerank is None else f'rerank {e.rerank:.3f} | '}score {e.score:.3f}"
    )


def _bm25_part(e: Explanation) -> str:
    if e.keyword_match is False:
        return "bm25 no keyword match"
    whole = " (whole section)" if e.bm25_unit == "section" and e.bm25_rank is not None else ""
    return f"bm25 #{_fmt(e.bm25_rank, 'd')} score {_fmt(e.bm25_score, '.3f')}{whole}"


def fusion_line(fusion: dict[str, Any]) -> str:
    """The question's plan (``Explanation.fusion``): ``fusion: vector 0.70, bm25 0.30, boost 0.20
    (a question in words: vector 0.65; 12 content words: +0.05; ...)``."""
    return (f"fusion: vector {fusion['vector_weight']:.2f}, bm25 {fusion['bm25_weight']:.2f}, score fusion vector"
            f" {fusion['score_fusion_vector']:.2f}, heading boost {fusion['heading_boost']:.2f} ({fusion['why']})")


def learned_part(e: Explanation) -> str:
    """The learned fusion's non-zero contributions, ``learned fixed 0.612 + bm25_rr 0.250 | ``
    (they add up to the relevance; empty without ``fusion_weights``)."""
    if not e.contributions:
        return ""
    parts = [f"{name} {c:.3f}" for name, c in e.contributions.items() if c]
    return f"learned {' + '.join(parts) or '0'} | "


def brief_line(e: Explanation) -> str:
    """Each list's rank of the hit, the heading boost and MMR penalty when they are not zero,
    and the score."""
    bm25 = "bm25 no keyword match" if e.keyword_match is False else f"bm25 #{_fmt(e.bm25_rank, 'd')}"
    parts = [f"vector #{_fmt(e.vector_rank, 'd')}", bm25]
    if e.boost:
        parts.append(f"boost {e.boost:+.2f}")
    if e.mmr_penalty:
        parts.append(f"mmr -{e.mmr_penalty:.2f}")
    if e.rerank is not None:
        parts.append(f"rerank {e.rerank:.2f}")
    parts.append(f"score {e.score:.3f}")
    return " · ".join(parts)
