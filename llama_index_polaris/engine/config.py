"""Configuration: one table of settings, merged from defaults, files and arguments.

Sources, later wins: built-in defaults, the user file
(``$XDG_CONFIG_HOME/polaris/polaris.toml``, else ``~/.config/polaris/polaris.toml``),
``polaris.toml`` in the project root, explicit arguments. Everything is validated
before any model or database is opened.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from .errors import ConfigError
from .paths import config_root
from .text import CHARS_PER_TOKEN  # noqa: F401  (read from here by the chunker)

FTS_TOKENIZERS = ("unicode61", "porter", "ascii", "trigram")


@dataclass(frozen=True)
class Setting:
    """One configuration key: its default, accepted type, check and help text."""

    name: str
    default: Any
    type: type | tuple[type, ...]
    help: str
    check: Callable[[Any], str | None] = lambda v: None
    nullable: bool = False


def _positive(v: Any) -> str | None:
    return None if v > 0 else "must be greater than 0"


def _non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must be 0 or greater"


def _unit_interval(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be between 0.0 and 1.0"


def _top_k(v: Any) -> str | None:
    return None if 1 <= v <= 100 else "must be between 1 and 100"


def _fts_tokenizer(v: str) -> str | None:
    """Why ``v`` cannot be a ``tokenize=`` argument, or None. The one rule for the configured value
    and for the one a file records (``sqlite.schema.fts_sql`` checks again where the SQL is made)."""
    if not isinstance(v, str):
        return "must be a string"
    words = v.split()
    if not words:
        return "must name an FTS5 tokenizer"
    if not any(w in FTS_TOKENIZERS for w in words):
        return f"must use one of the FTS5 tokenizers {', '.join(FTS_TOKENIZERS)}"
    if not all(c.isascii() and (c.isalnum() or c in " _.-") for c in v):
        return "may hold only letters, digits, spaces, '_', '.' and '-' (no quotes, semicolons or parentheses)"
    return None


def _db_path(v: str) -> str | None:
    if not v.strip():
        return "is empty: name the index file (such as polaris.db) or a postgresql:// URI"
    if "://" not in v and v.endswith(("/", "\\")):
        return "ends with a slash, so it names a folder: name the index file inside it (such as polaris.db)"
    return None


def _pool(v: Any) -> str | None:
    return None if 1 <= v <= 4096 else "must be between 1 and 4096 (sqlite-vec's limit)"


def _unit(v: str) -> str | None:
    return None if v in ("section", "chunk") else "must be section or chunk"


# the learned fusion's features (search/learned.py), name -> what it is; the order is the column order
# of ``learned.features``: a ``fusion_weights`` table names some of them
FUSION_FEATURES: dict[str, str] = {
    "fixed": "the fixed fusion's relevance (RRF + score fusion + heading boost, best = 1): today's ranking",
    "vector_rr": "1 / the section's rank in the vector list (0 when the list did not return it)",
    "bm25_rr": "1 / the section's rank in the BM25 list (0 when absent)",
    "vector_rrf": "the vector list's RRF term relative to rank 1's: (rrf_k + 1) / (rrf_k + rank)",
    "bm25_rrf": "the BM25 list's RRF term relative to rank 1's",
    "vector_sim": "cosine similarity of the section's best chunk (clipped to 0..1)",
    "vector_scaled": "that similarity rescaled between the list's best (1) and its 50th section (0)",
    "bm25_ratio": "BM25 score of the section's best chunk over the list's best",
    "bm25_scaled": "BM25 rescaled between the list's best (1) and its 50th section (0)",
    "heading": "share of the query's content words found in the heading path",
    "both": "1 when both lists returned the section",
    "same_chunk": "1 when the best vector chunk and the best BM25 chunk are the same chunk",
    "chunks": "chunks of the section that the lists returned: 1 - 1 / n",
    "depth": "heading depth: 1 / number of headings in the path (a page's title reads 1)",
    "lookup_bm25": "1 / BM25 rank when the query is an identifier lookup, else 0",
    "lookup_vector": "1 / vector rank when the query is an identifier lookup, else 0",
    "words_heading": "heading match when the query is words (not a lookup), else 0",
    "own_heading": "share of the query's content words found in the section's own (last) heading",
    "changelog": "1 when the section is a changelog or release-notes entry (its page is titled so, or a heading "
                 "below the page's is a version or a date)",
    "page_best": "the fixed fusion's relevance of the best section of the same document in the pool",
    "page_share": "the section's fixed relevance over its document's best in the pool (1: the page's best section)",
    "parent_in_pool": "1 when the section's parent section (same document) is in the pool too",
    "child_in_pool": "1 when a subsection of the section (same document) is in the pool too",
}


def check_weights(weights: object) -> str | None:
    """What is wrong with a ``fusion_weights`` table (None when it can be used)."""
    import numpy as np

    if not isinstance(weights, Mapping):
        return "must be a table of feature = weight"
    unknown = [k for k in weights if k not in FUSION_FEATURES]
    if unknown:
        return f"has unknown features {', '.join(map(repr, unknown))} (features: {', '.join(FUSION_FEATURES)})"
    for k, v in weights.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            return f"weight of '{k}' must be a finite number, got {v!r}"
    if not any(weights.values()):
        return "has no weight other than 0 (remove the table for the fixed fusion)"
    return None


def _fusion_weights(v: Any) -> str | None:
    return check_weights(v)


def _rerank_top(v: Any) -> str | None:
    return None if 2 <= v <= 200 else "must be between 2 and 200"


def _threads(v: Any) -> str | None:
    return None if v >= 1 else "must be 1 or greater"


SETTINGS: tuple[Setting, ...] = (
    Setting("max_chunk_tokens", 450, int, "chunk budget in the model's own tokens", _positive),
    Setting("chunk_overlap_chars", 200, int, "characters carried across chunk boundaries", _non_negative),
    Setting("min_chunk_chars", 50, int, "pieces shorter than this merge into a neighbour", _non_negative),
    Setting("model_id", "nomic-embed-text-v1.5", str, "embedding model (see `polaris models`)"),
    Setting("embedding_dim", None, int, "vector size; Matryoshka models may truncate (default: the model's)", _positive, nullable=True),
    Setting("model_dir", None, str, "local directory holding the model's ONNX and tokenizer.json", nullable=True),
    Setting("rrf_k", 20, (int, float), "reciprocal rank fusion constant (spec: 60; 20 measured better)", _non_negative),
    Setting("score_fusion", 0.5, (int, float), "share of score fusion mixed into RRF's ranks; 0 = RRF alone (spec; 0.5 measured better, docs/search.md)", _unit_interval),
    Setting("score_fusion_vector", 0.4, (int, float), "the vector list's weight in score fusion (BM25's: 1 minus it); LlamaIndex's alpha replaces it", _unit_interval),
    Setting("score_fusion_depth", 50, int, "score fusion rescales each list between its best score (1) and the score at this rank (0)", _positive),
    Setting("fusion_weights", None, dict, "learned fusion: a table of feature = weight over each hit's explanation (`polaris tune` writes it; see docs/search.md); unset = the fixed fusion", _fusion_weights, nullable=True),
    Setting("fusion_by_question", True, bool, "weigh the two lists and the heading boost by the kind of question (identifiers, a how-to naming one, a question in words) and how far the lists' heads agree (docs/search.md); false = the same fixed weights for every question"),
    Setting("changelog_penalty", 0.1, (int, float), "taken off the boost of a changelog or release-notes entry (its page is titled so, or a heading below the page's is a version or a date), on the heading boost's scale; 0 disables (measured on the train splits, docs/search.md)", _unit_interval),
    Setting("heading_boost", 0.2, (int, float), "bonus for query terms in the heading path, on the scale where the best fused score is 1.0; 0 disables (spec: 0.05; 0.2 measured better on sections)", _non_negative),
    Setting("mmr_lambda", 1.0, (int, float), "1.0 = pure relevance (MMR off), 0.0 = pure diversity (spec: 0.7; measured to lose)", _unit_interval),
    Setting("candidate_pool", 60, int, "chunks each list (vector, BM25) returns for ranking, whatever top_k is (spec: top_k x 3; this is the pool of top_k 10 in section unit), deeper only for hits past what it gives", _pool),
    Setting("rerank_model", None, str, "optional cross-encoder that re-orders the first hits: a registry id (ms-marco-minilm-l6-v2, downloaded on first use) or a folder holding model.onnx and tokenizer.json; unset = off (docs/search.md)", nullable=True),
    Setting("rerank_top", 20, int, "hits of the first candidate pool the cross-encoder re-orders (2 to 200), whatever top_k is", _rerank_top),
    Setting("top_k", 10, int, "hits returned by default (1 to 100)", _top_k),
    Setting("unit", "section", str, "what a hit is: a section (document + heading path, each once) or a chunk", _unit),
    Setting("db_path", "polaris.db", str, "the index file, or a postgresql:// URI (the Postgres backend)", _db_path),
    Setting("fts_tokenizer", "porter unicode61 remove_diacritics 2", str, "FTS5 tokenizer for BM25", _fts_tokenizer),
    Setting("max_file_mb", 10, (int, float), "files larger than this are skipped (marked failed) when indexing", _positive),
    Setting("embed_batch_size", 8, int, "texts per ONNX batch", _positive),
    Setting("intra_op_threads", None, int, "ONNX threads (default: physical cores)", _threads, nullable=True),
    Setting("follow_symlinks", False, bool, "index symlinked files whose target lies outside the collection root"),
)
SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}
# keys that no longer exist, with what to write instead (an unknown key stops with this hint)
REMOVED = {
    "mmr_candidate_multiplier": (
        "it made each list's candidate pool top_k x this, so the first hits changed with top_k; the pool is now"
        " fixed: set candidate_pool (chunks per list, default 60, the pool top_k 10 had) or remove the key"
    ),
}
HEADING_CHARS = 200  # at most this much of one heading (or a title) enters a chunk's heading path


class _ConfigMethods:
    """What every PolarisConfig can do; its fields come from ``SETTINGS`` (see below)."""

    sources: Mapping[str, str]

    def is_explicit(self, name: str) -> bool:
        """True when setting ``name`` was given by a file or an argument, not left at its default."""
        return self.sources.get(name, "default") != "default"

    @property
    def model_explicit(self) -> bool:
        """True when model_id was set by a file or an argument, not the default."""
        return self.is_explicit("model_id")

    def replace(self, **values: Any) -> "PolarisConfig":
        """A copy with ``values`` validated and applied (None values are ignored)."""
        return self.merged(values, "argument")

    def merged(self, values: Mapping[str, Any], source: str) -> "PolarisConfig":
        """A copy with ``values`` from ``source`` validated and applied (None ignored)."""
        given = {k: v for k, v in values.items() if v is not None}
        merged = {s.name: getattr(self, s.name) for s in SETTINGS}
        merged.update(_validated(given, source))
        _check_relations(merged, source)
        sources = dict(self.sources)
        sources.update({k: source for k in given})
        return PolarisConfig(**merged, sources=sources)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (no sources)."""
        return {s.name: getattr(self, s.name) for s in SETTINGS}


# The merged, validated settings (one field per row of SETTINGS, its default the row's);
# ``sources`` says where each value came from.
PolarisConfig = dataclasses.make_dataclass(
    "PolarisConfig",
    [(s.name, Any, field(default=s.default)) for s in SETTINGS]
    + [("sources", Mapping[str, str], field(default_factory=dict, compare=False, repr=False))],
    bases=(_ConfigMethods,),
    frozen=True,
)
PolarisConfig.__module__ = __name__
PolarisConfig.__doc__ = "The merged, validated settings; ``sources`` says where each value came from."


def _validated(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        setting = SETTINGS_BY_NAME.get(key)
        if setting is None and key in REMOVED:
            raise ConfigError(f"{source}: '{key}' is no longer a setting: {REMOVED[key]}.")
        if setting is None:
            from difflib import get_close_matches

            close = get_close_matches(key, SETTINGS_BY_NAME, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else "."
            valid = ", ".join(SETTINGS_BY_NAME)
            raise ConfigError(f"{source}: unknown key '{key}'{hint} Valid keys: {valid}.")
        if value is None and setting.nullable:
            out[key] = None
            continue
        types = setting.type if isinstance(setting.type, tuple) else (setting.type,)
        if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
            names = " or ".join("number" if t is float else t.__name__ for t in types)
            raise ConfigError(
                f"{source}: '{key}' must be {names}, got {type(value).__name__} {value!r}"
                f" (default {setting.default!r}: {setting.help})."
            )
        problem = "must be a finite number" if isinstance(value, float) and not math.isfinite(value) else None
        problem = problem or setting.check(value)
        if problem:
            raise ConfigError(
                f"{source}: '{key}' {problem}, got {value!r} (default {setting.default!r}: {setting.help})."
            )
        out[key] = value
    return out


def _check_relations(values: Mapping[str, Any], source: str) -> None:
    budget_chars = values["max_chunk_tokens"] * CHARS_PER_TOKEN
    if values["chunk_overlap_chars"] * 2 > budget_chars:
        raise ConfigError(
            f"{source}: 'chunk_overlap_chars' ({values['chunk_overlap_chars']}) must be at most half the"
            f" chunk budget (max_chunk_tokens {values['max_chunk_tokens']} x {CHARS_PER_TOKEN} chars"
            f" = {budget_chars}); lower the overlap or raise the budget."
        )
    if values["min_chunk_chars"] >= budget_chars:
        raise ConfigError(
            f"{source}: 'min_chunk_chars' ({values['min_chunk_chars']}) must be smaller than the chunk"
            f" budget ({budget_chars} chars)."
        )


def user_config_path() -> Path:
    """Where the per-user polaris.toml lives (XDG_CONFIG_HOME honoured)."""
    return config_root() / "polaris.toml"


def read_toml(path: Path) -> dict[str, Any]:
    """Parse one polaris.toml; the error names the file and the line."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}). Fix the file or remove it.") from exc
    except UnicodeDecodeError as exc:  # tomllib decodes before parsing
        raise ConfigError(f"{path}: not valid TOML (not UTF-8: {exc.reason} at byte {exc.start}).") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc}).") from exc
    if "polaris" in data and isinstance(data["polaris"], dict) and len(data) == 1:
        data = data["polaris"]  # a [polaris] table is accepted too
    return data


def load_config(
    project_root: str | os.PathLike[str] | None = None,
    *,
    config_file: str | os.PathLike[str] | None = None,
    use_user_config: bool = True,
    **overrides: Any,
) -> PolarisConfig:
    """Merge defaults, the user file, the project's polaris.toml and ``overrides``.

    ``config_file`` names a polaris.toml explicitly (it must exist); otherwise
    ``project_root`` (default: the current directory) is searched. Overrides that
    are None are ignored, so callers can pass their optional arguments straight in.
    """
    cfg = PolarisConfig(sources={s.name: "default" for s in SETTINGS})
    files: list[Path] = []
    # exists(), not is_file(): a polaris.toml that cannot be read is an error, not absent
    if use_user_config and user_config_path().exists():
        files.append(user_config_path())
    if config_file is not None:
        path = Path(config_file)
        if not path.exists():
            raise ConfigError(f"{path}: config file not found.")
        files.append(path)
    else:
        path = Path(project_root or ".") / "polaris.toml"
        if path.exists():
            files.append(path)
    for path in files:
        cfg = cfg.merged(read_toml(path), str(path))
    return cfg.merged(overrides, "argument")


def describe(cfg: PolarisConfig) -> list[tuple[str, Any, str]]:
    """(key, value, source) rows for every setting, for `polaris status` (a db_path URI without its password)."""
    from .masking import shown_target

    def value(name: str) -> Any:
        v = getattr(cfg, name)
        return shown_target(v) if name == "db_path" and "://" in str(v) else v

    return [(s.name, value(s.name), cfg.sources.get(s.name, "default")) for s in SETTINGS]

