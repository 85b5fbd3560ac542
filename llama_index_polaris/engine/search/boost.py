"""Heading boost: query terms found in a chunk's heading path add a small bonus."""

from __future__ import annotations

from .terms import content_terms, stem, words

MIN_TERM_CHARS = 3


def boost_terms(query: str) -> list[str]:
    """Stems of the query's content words of three or more characters."""
    return list(dict.fromkeys(stem(t) for t in content_terms(query, MIN_TERM_CHARS)))


def heading_match(terms: list[str], heading_path: str) -> float:
    """Fraction of ``terms`` present (by stem) among the heading path's words."""
    if not terms or not heading_path:
        return 0.0
    heading = {stem(w) for w in words(heading_path)}
    return sum(t in heading for t in terms) / len(terms)


def heading_boost(terms: list[str], heading_path: str, weight: float) -> float:
    """The additive bonus: ``weight * matched_fraction``."""
    return weight * heading_match(terms, heading_path) if weight else 0.0
