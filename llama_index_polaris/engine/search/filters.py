"""Metadata filters as SQL over ``chunks.metadata``: every value bound, nothing interpolated.

The operators and the meaning of NOT follow LlamaIndex core (NOT = none of the
filters match; a missing key satisfies only ``!=`` and ``nin``), but this module
knows nothing of LlamaIndex: the adapter translates its types into these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Union

from ..errors import InputError

SCALAR_OPS = ("==", "!=", ">", "<", ">=", "<=")
LIST_OPS = ("in", "nin", "any", "all")
TEXT_OPS = ("text_match", "text_match_insensitive")
OPERATORS = SCALAR_OPS + LIST_OPS + TEXT_OPS + ("contains", "is_empty")
CONDITIONS = ("and", "or", "not")


@dataclass(frozen=True)
class Condition:
    """``metadata[key] <op> value``."""

    key: str
    op: str
    value: Any = None


@dataclass(frozen=True)
class FilterGroup:
    """Filters joined by ``and``, ``or`` or ``not`` (none of them matches)."""

    filters: tuple["Filter", ...]
    condition: str = "and"


Filter = Union[Condition, FilterGroup]


def filter_sql(f: Filter, column: str = "metadata") -> tuple[str, list[Any]]:
    """A WHERE fragment and its parameters for ``f`` over the JSON ``column``."""
    if isinstance(f, FilterGroup):
        return _group_sql(f, column)
    if isinstance(f, Condition):
        return _condition_sql(f, column)
    raise InputError(f"a filter must be a Condition or FilterGroup, got {type(f).__name__}.")


def _group_sql(g: FilterGroup, column: str) -> tuple[str, list[Any]]:
    if g.condition not in CONDITIONS:
        raise InputError(f"filter condition must be one of {', '.join(CONDITIONS)}, got {g.condition!r}.")
    if not g.filters:
        return "1", []
    parts, params = [], []
    for child in g.filters:
        sql, args = filter_sql(child, column)
        parts.append(f"({sql})")
        params += args
    if g.condition == "and":
        return " AND ".join(parts), params
    joined = " OR ".join(parts)
    return (joined, params) if g.condition == "or" else (f"NOT ({joined})", params)


def _path(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise InputError(f"a filter key must be a non-empty string, got {key!r}.")
    return '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_value(c: Condition) -> None:
    if c.op not in OPERATORS:
        raise InputError(f"unknown filter operator {c.op!r}; use one of {', '.join(OPERATORS)}.")
    v = c.value
    if c.op in LIST_OPS and not isinstance(v, (list, tuple)):
        raise InputError(f"filter '{c.key} {c.op}' needs a list of values, got {type(v).__name__}.")
    if c.op in LIST_OPS and any(isinstance(x, (list, tuple, dict)) for x in v):
        raise InputError(f"filter '{c.key} {c.op}' takes a flat list of strings or numbers.")
    if c.op in SCALAR_OPS + ("contains",) and not isinstance(v, (str, int, float)):
        raise InputError(f"filter '{c.key} {c.op}' needs a string or number, got {type(v).__name__}.")
    if c.op in TEXT_OPS and not isinstance(v, str):
        raise InputError(f"filter '{c.key} {c.op}' needs a string, got {type(v).__name__}.")


def _condition_sql(c: Condition, column: str) -> tuple[str, list[Any]]:
    _check_value(c)
    p, v = _path(c.key), c.value
    value = f"json_extract({column}, ?)"
    elements = f"json_each({column}, ?)"
    is_array = f"json_type({column}, ?) = 'array'"
    if c.op in ("==", ">", "<", ">=", "<="):
        return f"{value} {'=' if c.op == '==' else c.op} ?", [p, v]
    if c.op == "!=":
        return f"({value} IS NULL OR {value} != ?)", [p, p, v]
    if c.op == "in":
        return f"{value} IN (SELECT value FROM json_each(?))", [p, json.dumps(list(v))]
    if c.op == "nin":
        return f"({value} IS NULL OR {value} NOT IN (SELECT value FROM json_each(?)))", [p, p, json.dumps(list(v))]
    if c.op == "any":
        return (f"({is_array} AND EXISTS (SELECT 1 FROM {elements} e"
                " WHERE e.value IN (SELECT value FROM json_each(?))))", [p, p, json.dumps(list(v))])
    if c.op == "all":
        return (f"({is_array} AND NOT EXISTS (SELECT 1 FROM json_each(?) w"
                f" WHERE w.value NOT IN (SELECT e.value FROM {elements} e)))", [p, json.dumps(list(v)), p])
    if c.op == "contains":
        return (f"(CASE WHEN {is_array} THEN EXISTS (SELECT 1 FROM {elements} e WHERE e.value = ?)"
                f" ELSE instr({value}, ?) > 0 END)", [p, p, v, p, str(v)])
    if c.op == "text_match":
        return f"instr({value}, ?) > 0", [p, v]
    if c.op == "text_match_insensitive":
        return f"instr(lower({value}), lower(?)) > 0", [p, v]
    return (f"({value} IS NULL OR {value} = '' OR ({is_array} AND json_array_length({column}, ?) = 0))",
            [p, p, p, p])
