"""What each figure of a hit means, written with the settings in effect.

The Datasette page shows these sentences as the score legend and as each column's tooltip,
and a result list in a notebook (``display``) shows the same columns; they describe the
engine's formulas (``engine/search``: fuse, boost, mmr) and compute nothing themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


SETTINGS = ("rrf_k", "score_fusion", "score_fusion_vector", "score_fusion_depth", "heading_boost", "changelog_penalty",
            "mmr_lambda",
            "candidate_pool")  # the config values the sentences below are written with
COLUMNS_BY_MODE = {
    "hybrid": ("vector_rank", "vector_distance", "bm25_rank", "bm25_score", "rrf_vector", "rrf_bm25", "rrf",
               "fusion_vector", "fusion_bm25", "fused", "boost", "relevance", "mmr_penalty", "score"),
    "vector": ("vector_rank", "vector_distance", "score"),
    "bm25": ("bm25_rank", "bm25_score", "score"),
}
LABELS = {
    "vector_rank": "Vector rank", "vector_distance": "Distance", "bm25_rank": "BM25 rank", "bm25_score": "BM25 score",
    "rrf_vector": "RRF vector", "rrf_bm25": "RRF BM25", "rrf": "RRF", "fusion_vector": "Score fusion vector",
    "fusion_bm25": "Score fusion BM25", "fused": "Fused", "boost": "Boost", "relevance": "Relevance",
    "mmr_penalty": "MMR penalty", "score": "Score", "learned": "Learned",
}
DIGITS = {"rrf_vector": 5, "rrf_bm25": 5, "rrf": 5, "fusion_vector": 3, "fusion_bm25": 3, "fused": 3, "score": 3}


@dataclass(frozen=True)
class Column:
    key: str  # the field of Hit.explain
    label: str
    digits: int
    meaning: str


def columns(mode: str, settings: Mapping[str, Any]) -> list[Column]:
    """The figures shown for a hit in ``mode``, each with what it means under ``settings``."""
    meanings = _meanings(mode, settings)
    keys = COLUMNS_BY_MODE[mode]
    if mode == "hybrid" and settings.get("fusion_weights"):  # the learned fusion ranks: its score before relevance
        keys = keys[: keys.index("relevance")] + ("learned",) + keys[keys.index("relevance"):]
    return [Column(key, LABELS[key], DIGITS.get(key, 4), meanings[key]) for key in keys]


def formula(mode: str, settings: Mapping[str, Any]) -> str:
    """The final score in one line, with the live numbers."""
    if mode == "vector":
        return "Score = (1 − distance) ÷ the top hit's (1 − distance)"
    if mode == "bm25":
        return "Score = BM25 score ÷ the top hit's BM25 score"
    k, boost, lam = settings["rrf_k"], settings["heading_boost"], settings["mmr_lambda"]
    share, alpha, depth = settings["score_fusion"], settings["score_fusion_vector"], settings["score_fusion_depth"]
    wv, wb = _num(settings.get("vector_weight", 1.0)), _num(settings.get("bm25_weight", 1.0))
    rrf = f"RRF = {wv}/({k} + vector rank) + {wb}/({k} + BM25 rank)"
    if settings.get("fusion_why"):
        rrf = f"weights for this question ({settings['fusion_why']});  {rrf}"
    if share > 0:
        rrf += (f";  score fusion = {_num(alpha)} × similarity + {_num(1 - alpha)} × BM25, each rescaled from its"
                f" list's best (1) to its rank {depth} (0);  fused = {_num(1 - share)} × RRF ÷ best RRF"
                f" + {_num(share)} × score fusion ÷ best")
    else:
        rrf += ";  fused = RRF (score_fusion = 0)"
    relevance = f"relevance = (fused ÷ best fused + {boost} × heading match) ÷ best"
    if settings.get("fusion_weights"):
        relevance += f";  learned = {_weights(settings['fusion_weights'])};  relevance = learned ÷ best learned"
    if lam >= 1.0:
        return f"{rrf};  {relevance};  Score = relevance (MMR off: mmr_lambda = {lam})"
    return (f"{rrf};  {relevance};  Score = ({lam} × relevance − MMR penalty + {_num(1 - lam)}) ÷ hit 1's,"
            f"  MMR penalty = {_num(1 - lam)} × highest similarity to a hit above")


def candidates(settings: Mapping[str, Any]) -> int:
    """How many chunks each list returns before fusion, whatever k is: the pipeline's first pool."""
    return settings["candidate_pool"]


def _meanings(mode: str, s: Mapping[str, Any]) -> dict[str, str]:
    k, boost, lam = s.get("rrf_k"), s.get("heading_boost"), s.get("mmr_lambda")
    share, alpha, depth = s.get("score_fusion") or 0.0, s.get("score_fusion_vector", 0.4), s.get("score_fusion_depth")
    top = "the top hit reads 1.000"
    score = {
        "hybrid": (f"the final score: relevance after MMR, divided by the first hit's, so {top}"
                   + (" (MMR is off, so Score = Relevance)" if lam is not None and lam >= 1.0 else "")),
        "vector": f"cosine similarity (1 − distance) divided by the first hit's, so {top}",
        "bm25": f"the BM25 score divided by the first hit's, so {top}",
    }[mode]
    return {
        "vector_rank": ("place in the vector list (nearest first), each section counted once at its best chunk;"
                        " – : the vector search did not return it"),
        "vector_distance": ("cosine distance between the query and the best chunk's vector"
                            " (0 = same direction, lower is closer)"),
        "bm25_rank": ("place in the full-text (FTS5) list, each section counted once at its best chunk;"
                      " – : no query word matched it. A query of identifiers only (OUT_DIR, --locked) lists"
                      " the chunks naming one as written first"),
        "bm25_score": ("FTS5's BM25 score of the best chunk, over text and heading path (higher is better);"
                       " in a query of identifiers only, the score of the place the chunk moved to"),
        "rrf_vector": (f"the vector list's share of RRF: {_num(s.get('vector_weight', 1.0))} / (rrf_k + vector rank),"
                       f" rrf_k = {k}"),
        "rrf_bm25": (f"the full-text list's share of RRF: {_num(s.get('bm25_weight', 1.0))} / (rrf_k + BM25 rank),"
                     f" rrf_k = {k}"),
        "rrf": "Reciprocal Rank Fusion: RRF vector + RRF BM25 (ranks only, the lists' scores are not used)",
        "fusion_vector": (f"score fusion, vector side: {_num(alpha)} × the cosine similarity rescaled so the list's best"
                          f" reads 1 and its rank {depth} reads 0 (clipped to 0..1); – : score fusion is off"),
        "fusion_bm25": (f"score fusion, full-text side: {_num(1 - alpha)} × the BM25 score rescaled so the list's best"
                        f" reads 1 and its rank {depth} reads 0 (clipped to 0..1); – : score fusion is off"),
        "fused": (f"{_num(1 - share)} × RRF ÷ the best RRF + {_num(share)} × (score fusion vector + BM25) ÷ the best"
                  " such sum: the ranks and how far apart the scores are, mixed"
                  if share else "equal to RRF: score_fusion is 0, so only ranks are fused"),
        "boost": (f"heading boost: heading_boost ({boost}) × the share of the query's words (3+ letters,"
                  " stop words left out) found in the heading path; minus changelog_penalty"
                  f" ({s.get('changelog_penalty', 0)}) for a changelog or release-notes entry; plus 1 + heading_boost"
                  " for the section whose own heading is the one identifier looked up"),
        "relevance": ("Learned divided by the best learned among the candidates (the learned fusion ranks;"
                      " its contributions add up to this)" if s.get("fusion_weights") else
                      "Fused divided by the best fused among the candidates, plus the boost, divided again so the best is 1.000"),
        "mmr_penalty": (f"(1 − mmr_lambda) × the highest cosine similarity to a hit ranked above; mmr_lambda = {lam}"
                        + (", so MMR is off and the penalty is 0" if lam is not None and lam >= 1.0 else "")),
        "score": score,
        "learned": ("the learned fusion's score (fusion_weights in polaris.toml, fitted by `polaris tune`): the sum"
                    " of each feature's contribution, weight × feature (|weight| × (1 − feature) for a negative"
                    f" weight), features from this explanation; weights: {_weights(s.get('fusion_weights') or {})}."
                    " The JSON lists each feature and contribution"),
    }


def _weights(weights: Mapping[str, float]) -> str:
    return " + ".join(f"{w:.3g} × {name}" for name, w in weights.items()) or "none"


def fmt(value: float | None, digits: int = 4) -> str:
    """A stage figure for a table cell: '–' where the stage did not see the chunk."""
    if value is None:
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")
