"""Match strength: how well a hit matches its query, on one scale for every query (#37 item 3).

A hit's score is relative (the best hit reads 1.0 whatever it is), so it cannot say that
nothing matched. Its strength can: the chance, estimated from labelled questions, that the
hit is a section answering the question, read from two figures any query has

- ``cosine``: the query vector's cosine similarity to the hit's chunk (None when the query
  was not embedded: bm25 mode, an index without vectors);
- ``term_share``: the share of the query's content words (stems, as the heading boost reads
  them) found in the chunk's heading path and text (None when the query has none). An
  identifier of the query (``literal.identifiers``: ``LUM-4011``, ``rrf_k``, ``--locked``) is
  one term, found only where it is written as itself: a made-up ``LUM-9999`` shares ``lum``
  with every error code of the table, which is not the code asked about.

A logistic model over whichever figures there are (``MODELS``, fitted on the train splits of
the documentation sets by ``benchmarks/match_strength.py``, with the unanswerable questions
as hits that answer nothing). A hit is a good match at ``GOOD_MATCH`` or above; a result
with no good match says so (``Hits.no_good_match``). Fitted for the bundled model's cosines
(all-MiniLM-L6-v2): another model's cosines sit elsewhere, and its strengths are estimates.
Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..words.blobs import readable
from .literal import occurs
from .terms import stem, words

# Fitted by ``benchmarks/match_strength.py fit`` on the train splits of vite and prettier (1,140
# hits of 76 questions, 12 of them unanswerable; docs/search.md, "Match strength").
# key: which figures the hit has -> (intercept, weight of cosine, weight of term share)
MODELS: dict[tuple[bool, bool], tuple[float, float, float]] = {
    (True, True): (-5.518, 5.058, 3.06),
    (True, False): (-4.52, 6.188, 0.0),
    (False, True): (-3.358, 0.0, 3.323),
}
GOOD_MATCH = 0.07  # a hit at or above this strength matches well: the best F1 of "no good match" on train
# A cosine is read only for a query the model knows at least this share of (``Embedder.known_share``):
# a Chinese question reaches the bundled English model as [UNK]s, and its cosine to a chunk says
# nothing (react-zh and vue-ja train: 0.461 for the best hit of an answerable question, 0.458 of an
# unanswerable one); every English question of every set is known in full.
COSINE_KNOWN = 0.9


@dataclass(frozen=True)
class Strength:
    """A hit's match strength (0..1, None when there is nothing to read it from) and its figures."""

    value: float | None
    cosine: float | None
    term_share: float | None

    @property
    def good(self) -> bool:
        """Whether the hit matches well (``GOOD_MATCH`` or above)."""
        return self.value is not None and self.value >= GOOD_MATCH


def readable_cosine(cosine: float | None, known: float) -> float | None:
    """``cosine`` when the model knows enough of the query to mean it (``COSINE_KNOWN``), else None."""
    return cosine if known >= COSINE_KNOWN else None


def strength(cosine: float | None, term_share: float | None) -> Strength:
    """The strength of a hit with these figures (``MODELS``)."""
    model = MODELS.get((cosine is not None, term_share is not None))
    if model is None:
        return Strength(None, cosine, term_share)
    b0, b_cos, b_share = model
    z = b0 + b_cos * (cosine or 0.0) + b_share * (term_share or 0.0)
    return Strength(1.0 / (1.0 + math.exp(-z)), cosine, term_share)


def term_share(query_terms: list[str], heading_path: str, text: str,
               identifiers: Sequence[str] = ()) -> float | None:
    """The share of the query's terms found in the heading path and the readable text (blobs out):
    ``query_terms`` (distinct stems, ``boost.boost_terms``) among the text's stems, and each of
    ``identifiers`` where it occurs as written (``literal.occurs``); None when there are none.
    ``query_terms`` then holds the stems of the query's other words (``terms_beside``)."""
    if not query_terms and not identifiers:
        return None
    body = heading_path + "\n" + readable(text)
    found = {stem(w) for w in set(words(body))}
    hits = sum(t in found for t in query_terms) + sum(occurs(body, name) for name in identifiers)
    return hits / (len(query_terms) + len(identifiers))


def terms_beside(query_terms: list[str], identifiers: Sequence[str]) -> list[str]:
    """``query_terms`` without the stems that belong to ``identifiers`` (counted whole instead)."""
    inside = {stem(w) for name in identifiers for w in words(name)}
    return [t for t in query_terms if t not in inside]


def no_good_match(strengths: list[Strength]) -> bool:
    """Whether a result has no good match (an empty result has none)."""
    return not any(s.good for s in strengths)


def no_match_note(best: float | None) -> str:
    """What every door says of a result with no good match (``best``: its best strength)."""
    shown = "none" if best is None else f"{best:.2f}"
    return (f"No hit matches well (best match strength {shown}; a good match is {GOOD_MATCH:.2f} or more):"
            " the documents may not answer this.")
