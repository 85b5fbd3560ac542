"""Metadata filters as SQL over ``chunks.metadata``: every value bound, nothing interpolated.

The operators and the meaning of NOT follow LlamaIndex core's ``build_metadata_filter_fn``
(NOT = none of the filters match; a missing key or a JSON null satisfies only ``!=``,
``nin`` and ``is_empty``), but this module knows nothing of LlamaIndex: the adapter
translates its types into these. Every condition is a strict 0/1 (never SQL NULL), so
NOT over a missing key means what it means in Python.

Where core raises TypeError (ordering a string against a number, ``text_match`` on a
number, ``contains`` of a number in a string) a condition here is simply false. As in
core, ``contains``, ``any`` and ``all`` test list membership on a list value and
substring on a string value. ``text_match_insensitive`` folds ASCII case only (SQLite's
``lower``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Union

from ..errors import InputError
from ..text import storable, storable_value

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


DOCUMENT_KEYS = ("ref_doc_id", "doc_id", "document_id")  # LlamaIndex's names for a node's document


def _keys(f: Filter) -> set[str]:
    return {f.key} if isinstance(f, Condition) else {k for child in getattr(f, "filters", ()) for k in _keys(child)}


def with_document_id(f: Filter, column: str, postgres: bool = False) -> str:
    """``column`` (a chunk's metadata as JSON, chunks aliased ``c``) with the chunk's document id
    under LlamaIndex's three names for it when ``f`` reads one of them: ``node_to_metadata_dict``
    adds them, so LlamaIndex's own stores filter on them. Else ``column`` as it is."""
    if not _keys(f) & set(DOCUMENT_KEYS):
        return column
    if postgres:
        pairs = ", ".join(f"'{k}', c.document_id" for k in DOCUMENT_KEYS)
        return f"({column} || jsonb_build_object({pairs}))"
    pairs = ", ".join(f"'$.{k}', c.document_id" for k in DOCUMENT_KEYS)
    return f"json_set({column}, {pairs})"


def filter_sql(f: Filter, column: str = "metadata") -> tuple[str, list[Any]]:
    """A WHERE fragment and its parameters for ``f`` over the JSON ``column``."""
    if isinstance(f, FilterGroup):
        return _group_sql(f, column, filter_sql, "1")
    if isinstance(f, Condition):
        return _condition_sql(f, column)
    raise InputError(f"a filter must be a Condition or FilterGroup, got {type(f).__name__}.")


def _group_sql(g: FilterGroup, column: str, child_sql: Any, true: str) -> tuple[str, list[Any]]:
    """A group's fragment in either dialect: ``child_sql`` renders each child, ``true`` an empty group."""
    if g.condition not in CONDITIONS:
        raise InputError(f"filter condition must be one of {', '.join(CONDITIONS)}, got {g.condition!r}.")
    if not g.filters:
        return true, []
    parts, params = [], []
    for child in g.filters:
        sql, args = child_sql(child, column)
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


def _is_number(v: Any) -> bool:
    """A number SQLite can bind and JSON can carry: no NaN, no infinity, int within 64 bits."""
    if isinstance(v, int):
        return -(2**63) <= v < 2**63
    return isinstance(v, float) and math.isfinite(v)


def _check_value(c: Condition) -> None:
    if c.op not in OPERATORS:
        raise InputError(f"unknown filter operator {c.op!r}; use one of {', '.join(OPERATORS)}.")
    v = c.value
    if c.op in LIST_OPS:
        if not isinstance(v, (list, tuple)):
            raise InputError(f"filter '{c.key} {c.op}' needs a list of values, got {type(v).__name__}.")
        if not all(isinstance(x, str) or _is_number(x) for x in v):
            raise InputError(f"filter '{c.key} {c.op}' takes a flat list of strings or finite numbers.")
    elif c.op in TEXT_OPS:
        if not isinstance(v, str):
            raise InputError(f"filter '{c.key} {c.op}' needs a string, got {type(v).__name__}.")
    elif c.op != "is_empty" and not (isinstance(v, str) or _is_number(v)):
        hint = " (use 'is_empty' to test for a missing value)" if v is None else ""
        raise InputError(f"filter '{c.key} {c.op}' needs a string or finite number, got {v!r}{hint}.")


# SQL types (json_type) a scalar filter value can equal or be ordered against.
NUMBER_TYPES = "('integer', 'real', 'true', 'false')"
TEXT_TYPES = "('text')"


def _as_stored(c: Condition) -> Condition:
    """``c`` with its key and text values as metadata is stored (``text.storable``: a lone surrogate
    written out), so that it can match what it names and is never refused by the driver."""
    key = storable(c.key) if isinstance(c.key, str) else c.key
    return Condition(key, c.op, storable_value(c.value))


def _condition_sql(c: Condition, column: str) -> tuple[str, list[Any]]:
    c = _as_stored(c)
    _check_value(c)
    sql, params = _OPS[c.op](c.value, _path(c.key), column)
    return f"coalesce(({sql}), 0)", params


def _compare(op: str) -> Any:
    def build(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
        types = TEXT_TYPES if isinstance(v, str) else NUMBER_TYPES
        return f"json_type({col}, ?) IN {types} AND json_extract({col}, ?) {op} ?", [p, p, v]
    return build


def _ne(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    sql, params = _compare("=")(v, p, col)
    return f"NOT coalesce(({sql}), 0)", params


def _in(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    return (f"json_type({col}, ?) NOT IN ('array', 'object')"
            f" AND json_extract({col}, ?) IN (SELECT value FROM json_each(?))", [p, p, json.dumps(list(v))])


def _nin(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    sql, params = _in(v, p, col)
    return f"NOT coalesce(({sql}), 0)", params


def _member(item: str, item_is_text: str, p: str, col: str) -> tuple[str, list[Any]]:
    """``item in metadata[key]``: membership in a list, substring of a string (SQL ``item``)."""
    return (
        f"CASE json_type({col}, ?)"
        f" WHEN 'array' THEN EXISTS (SELECT 1 FROM json_each({col}, ?) e"
        f"  WHERE e.type NOT IN ('array', 'object') AND e.value = {item})"
        f" WHEN 'text' THEN {item_is_text} AND instr(json_extract({col}, ?), {item}) > 0"
        " ELSE 0 END",
        [p, p, p],
    )


def _contains(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    sql, params = _member("?", "?", p, col)
    # parameters in textual order: type path, array path, value, is-text flag, text path, value
    return sql, [params[0], params[1], v, int(isinstance(v, str)), params[2], v]


def _any(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    sql, params = _member("w.value", "w.type = 'text'", p, col)
    return f"EXISTS (SELECT 1 FROM json_each(?) w WHERE {sql})", [json.dumps(list(v)), *params]


def _all(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    sql, params = _member("w.value", "w.type = 'text'", p, col)
    present = f"json_type({col}, ?) NOT IN ('null')"
    return (f"{present} AND NOT EXISTS (SELECT 1 FROM json_each(?) w WHERE NOT ({sql}))",
            [p, json.dumps(list(v)), *params])


def _text_match(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    return f"json_type({col}, ?) = 'text' AND instr(json_extract({col}, ?), ?) > 0", [p, p, v]


def _text_match_insensitive(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    return f"json_type({col}, ?) = 'text' AND instr(lower(json_extract({col}, ?)), lower(?)) > 0", [p, p, v]


def _is_empty(v: Any, p: str, col: str) -> tuple[str, list[Any]]:
    return (f"CASE coalesce(json_type({col}, ?), 'null') WHEN 'null' THEN 1"
            f" WHEN 'text' THEN json_extract({col}, ?) = ''"
            f" WHEN 'array' THEN json_array_length({col}, ?) = 0 ELSE 0 END", [p, p, p])


_OPS = {
    "==": _compare("="), "!=": _ne, ">": _compare(">"), "<": _compare("<"), ">=": _compare(">="),
    "<=": _compare("<="), "in": _in, "nin": _nin, "any": _any, "all": _all, "contains": _contains,
    "text_match": _text_match, "text_match_insensitive": _text_match_insensitive, "is_empty": _is_empty,
}
assert set(_OPS) == set(OPERATORS)


# -- the same filters over a jsonb column (the Postgres backend) ---------------------------
# Each operator means what it means above: JSON types line up as SQLite's json_type sees
# them (a boolean compares as 0/1 with numbers, as json_extract reads it), a missing key
# or a JSON null satisfies only ``!=``, ``nin`` and ``is_empty``, and text compares
# bytewise (COLLATE "C", SQLite's BINARY). The value under the key is read once, as
# ``f.v``; parameters are ``?`` (``dialect.execute`` spells them for psycopg), so jsonb's
# own ``?`` operator is never used.

_V = "f.v"
_NUM = ("(CASE jsonb_typeof({0}) WHEN 'number' THEN ({0} #>> '{{}}')::float8 WHEN 'boolean' THEN"
        " (CASE WHEN {0} = 'true'::jsonb THEN 1.0 ELSE 0.0 END) END)")
# SQLite reads a JSON integer as a 64-bit INTEGER and compares it exactly (with an integer, or
# with a double); only other numbers are doubles. float8 alone would make 2**53 + 1 equal 2**53
# (ids, nanosecond timestamps): an integer under the key is compared as numeric (exact) instead.
_INT = "(jsonb_typeof({0}) = 'number' AND ({0} #>> '{{}}') !~ '[.eE]')"
_TXT = "(CASE jsonb_typeof({0}) WHEN 'string' THEN ({0} #>> '{{}}') END)"
_LOWER = "translate({0}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"


def filter_sql_pg(f: Filter, column: str = "metadata") -> tuple[str, list[Any]]:
    """``filter_sql`` for a jsonb ``column``: a WHERE fragment that is true or false, never NULL."""
    if isinstance(f, FilterGroup):
        return _group_sql(f, column, filter_sql_pg, "TRUE")
    if isinstance(f, Condition):
        f = _as_stored(f)
        _check_value(f)
        _path(f.key)
        sql, params = _PG_OPS[f.op](f.value)
        return f"coalesce((SELECT {sql} FROM (SELECT {column} -> ?::text AS v) f), FALSE)", [*params, f.key]
    raise InputError(f"a filter must be a Condition or FilterGroup, got {type(f).__name__}.")


def _pg_compare(op: str) -> Any:
    def build(v: Any) -> tuple[str, list[Any]]:
        from decimal import Decimal  # PostgreSQL's filters alone need it

        if isinstance(v, str):
            return f'{_TXT.format(_V)} COLLATE "C" {op} ?::text COLLATE "C"', [v]
        exact = int(v) if isinstance(v, int) else Decimal(v)  # a double's exact value (True is 1)
        return (f"(CASE WHEN {_INT.format(_V)} THEN ({_V} #>> '{{}}')::numeric {op} ?::numeric"
                f" ELSE {_NUM.format(_V)} {op} ?::float8 END)", [exact, float(v)])
    return build


def _pg_not(build: Any) -> Any:
    def negated(v: Any) -> tuple[str, list[Any]]:
        sql, params = build(v)
        return f"NOT coalesce(({sql}), FALSE)", params
    return negated


def _pg_same(x: str, item: str) -> str:
    """Two JSON scalars equal as SQLite compares them: strings as text, numbers and booleans by value."""
    return (f"(CASE WHEN jsonb_typeof({x}) = 'string' AND jsonb_typeof({item}) = 'string' THEN {x} = {item}"
            f" WHEN jsonb_typeof({x}) IN ('number', 'boolean') AND jsonb_typeof({item}) IN ('number', 'boolean')"
            f" THEN (CASE WHEN {_INT.format(x)} AND {_INT.format(item)} THEN ({x} #>> '{{}}')::numeric ="
            f" ({item} #>> '{{}}')::numeric ELSE {_NUM.format(x)} = {_NUM.format(item)} END) ELSE FALSE END)")


def _pg_in(v: Any) -> tuple[str, list[Any]]:
    return (f"jsonb_typeof({_V}) NOT IN ('array', 'object') AND EXISTS (SELECT 1 FROM"
            f" jsonb_array_elements(?::jsonb) w(value) WHERE {_pg_same(_V, 'w.value')})", [json.dumps(list(v))])


def _pg_member(item: str) -> str:
    """The JSON scalar ``item`` in the list under the key, or a substring of the string there."""
    return (f"(CASE jsonb_typeof({_V}) WHEN 'array' THEN EXISTS (SELECT 1 FROM jsonb_array_elements({_V}) e(value)"
            f" WHERE jsonb_typeof(e.value) NOT IN ('array', 'object') AND {_pg_same('e.value', item)})"
            f" WHEN 'string' THEN jsonb_typeof({item}) = 'string' AND strpos({_V} #>> '{{}}', {item} #>> '{{}}') > 0"
            " ELSE FALSE END)")


def _pg_contains(v: Any) -> tuple[str, list[Any]]:
    return "(SELECT " + _pg_member("i.v") + " FROM (SELECT ?::jsonb AS v) i)", [json.dumps(v)]


def _pg_any(v: Any) -> tuple[str, list[Any]]:
    return (f"EXISTS (SELECT 1 FROM jsonb_array_elements(?::jsonb) w(value) WHERE {_pg_member('w.value')})",
            [json.dumps(list(v))])


def _pg_all(v: Any) -> tuple[str, list[Any]]:
    return (f"jsonb_typeof({_V}) <> 'null' AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(?::jsonb) w(value)"
            f" WHERE NOT {_pg_member('w.value')})", [json.dumps(list(v))])


def _pg_text_match(insensitive: bool) -> Any:
    def build(v: Any) -> tuple[str, list[Any]]:
        text, needle = f"({_V} #>> '{{}}')", "?::text"
        if insensitive:  # ASCII case only, as SQLite's lower()
            text, needle = _LOWER.format(text), _LOWER.format(needle)
        return f"jsonb_typeof({_V}) = 'string' AND strpos({text}, {needle}) > 0", [v]
    return build


def _pg_is_empty(v: Any) -> tuple[str, list[Any]]:
    return (f"CASE coalesce(jsonb_typeof({_V}), 'null') WHEN 'null' THEN TRUE WHEN 'string' THEN"
            f" ({_V} #>> '{{}}') = '' WHEN 'array' THEN jsonb_array_length({_V}) = 0 ELSE FALSE END", [])


_PG_OPS = {
    "==": _pg_compare("="), "!=": _pg_not(_pg_compare("=")), ">": _pg_compare(">"), "<": _pg_compare("<"),
    ">=": _pg_compare(">="), "<=": _pg_compare("<="), "in": _pg_in, "nin": _pg_not(_pg_in), "any": _pg_any,
    "all": _pg_all, "contains": _pg_contains, "text_match": _pg_text_match(False),
    "text_match_insensitive": _pg_text_match(True), "is_empty": _pg_is_empty,
}
assert set(_PG_OPS) == set(OPERATORS)
