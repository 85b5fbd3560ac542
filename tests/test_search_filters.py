"""Metadata filters: SQL over chunks.metadata must mean what LlamaIndex core means.

The reference is core's own ``build_metadata_filter_fn`` (llama_index/core/vector_stores/
utils.py), run on the same random metadata. Where core raises TypeError (ordering a string
against a number and the like) Polaris documents that the condition is false; the test
checks that rule separately from core's composite meaning.

Every test runs on both backends: SQLite's JSON SQL (``filter_sql``) over a text column, and its
jsonb twin (``filter_sql_pg``) on the session's PostgreSQL server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters
from llama_index.core.vector_stores.utils import build_metadata_filter_fn

from llama_index_polaris.engine.sqlite import sqlite_module
from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.storage.filters import Condition, FilterGroup, filter_sql, filter_sql_pg
from llama_index_polaris.vector_store import to_engine_filter
from polaris_testing import BACKENDS, examples, new_database

KEYS = ["a", "b", "c"]
TEXT = st.text(alphabet="aAbé ", max_size=3)  # no non-ASCII capitals: SQLite lower() folds ASCII only
INTS = st.integers(-3, 3)
FLOATS = st.sampled_from([-1.5, 0.0, 0.5, 2.0])  # exact in binary, so JSON round-trips them
SCALARS = st.one_of(TEXT, INTS, FLOATS)
META_VALUES = st.one_of(st.none(), TEXT, INTS, FLOATS, st.booleans(), st.lists(st.one_of(TEXT, INTS), max_size=3))
METADATA = st.dictionaries(st.sampled_from(KEYS), META_VALUES, max_size=3)


def value_for(op: FilterOperator) -> st.SearchStrategy[Any]:
    if op in (FilterOperator.IN, FilterOperator.NIN, FilterOperator.ANY, FilterOperator.ALL):
        return st.one_of(st.lists(TEXT, max_size=3), st.lists(INTS, max_size=3))
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        return TEXT
    if op == FilterOperator.IS_EMPTY:
        return st.none()
    if op == FilterOperator.CONTAINS:
        return st.one_of(TEXT, INTS)
    return SCALARS


@st.composite
def leaf(draw) -> MetadataFilter:
    op = draw(st.sampled_from(list(FilterOperator)))
    return MetadataFilter(key=draw(st.sampled_from(KEYS)), operator=op, value=draw(value_for(op)))


def flat_filters() -> st.SearchStrategy[MetadataFilters]:
    return st.builds(
        MetadataFilters, filters=st.lists(leaf(), min_size=1, max_size=3), condition=st.sampled_from(list(FilterCondition))
    )


def nested_filters() -> st.SearchStrategy[MetadataFilters]:
    return st.recursive(
        flat_filters(),
        lambda children: st.builds(
            MetadataFilters, filters=st.lists(st.one_of(leaf(), children), min_size=1, max_size=3),
            condition=st.sampled_from(list(FilterCondition)),
        ),
        max_leaves=6,
    )


def core_leaf(f: MetadataFilter, meta: dict) -> bool:
    """Core's verdict on one condition; a TypeError in core counts as no match (Polaris' rule)."""
    try:
        return build_metadata_filter_fn(lambda _: meta, MetadataFilters(filters=[f]))("n")
    except TypeError:
        return False


def core_tree(fs: MetadataFilters, meta: dict) -> bool:
    """Core's combination rules (and = all, or = any, not = none) applied at every level."""
    results = [core_tree(f, meta) if isinstance(f, MetadataFilters) else core_leaf(f, meta) for f in fs.filters]
    cond = fs.condition or FilterCondition.AND
    return all(results) if cond == FilterCondition.AND else any(results) if cond == FilterCondition.OR else not any(results)


@pytest.fixture(scope="module")
def pg_conn(pg_server: str):
    """One table of metadata as the Postgres store keeps it (JSON text, read as jsonb by the filters)."""
    import psycopg

    c = psycopg.connect(new_database(pg_server, "polaris_filters"), autocommit=True)
    c.execute("CREATE TABLE chunks (id integer PRIMARY KEY, metadata text NOT NULL)")
    yield c
    c.close()


@pytest.fixture(params=BACKENDS)
def conn(request: pytest.FixtureRequest):
    """A connection with a ``chunks (id, metadata)`` table, marked with its backend (``conn.backend``)."""
    if request.param == "postgres":
        yield Table(request.getfixturevalue("pg_conn"), "postgres")
        return
    c = sqlite_module().connect(":memory:")
    c.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, metadata TEXT NOT NULL)")
    yield Table(c, "sqlite")
    c.close()


class Table:
    def __init__(self, conn, backend: str) -> None:
        self.conn, self.backend = conn, backend

    def execute(self, sql: str, params=()):
        return self.conn.execute(sql.replace("?", "%s") if self.backend == "postgres" else sql, params)


def where(backend: str, f) -> tuple[str, list]:
    """The WHERE fragment of each backend for the engine filter ``f`` (Postgres: jsonb, as its store reads it)."""
    if backend == "postgres":
        sql, params = filter_sql_pg(f, "(metadata::jsonb)")
        return sql.replace("?", "%s"), params
    return filter_sql(f)


def matching(conn: Table, rows: list[dict], f) -> set[int]:
    conn.execute("DELETE FROM chunks")
    insert = "INSERT INTO chunks (id, metadata) VALUES (?, ?)"
    values = [(i, json.dumps(m)) for i, m in enumerate(rows)]
    if conn.backend == "postgres":
        conn.conn.cursor().executemany(insert.replace("?", "%s"), values)
    else:
        conn.conn.executemany(insert, values)
    sql, params = where(conn.backend, to_engine_filter(f))
    return {r[0] for r in conn.conn.execute(f"SELECT id FROM chunks WHERE {sql}", params)}


SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(rows=st.lists(METADATA, min_size=1, max_size=8), filters=flat_filters())
def test_flat_filters_match_llamaindex_core_exactly(conn, rows, filters):
    ours = matching(conn, rows, filters)
    fn = build_metadata_filter_fn(lambda i: rows[int(i)], filters)
    for i, meta in enumerate(rows):
        try:
            expected = fn(str(i))
        except TypeError:  # core cannot answer; the documented rule is checked below
            expected = core_tree(filters, meta)
        assert (i in ours) == expected, (meta, filters)


@SETTINGS
@given(rows=st.lists(METADATA, min_size=1, max_size=8), filters=nested_filters())
def test_nested_filters_follow_core_rules_at_every_level(conn, rows, filters):
    ours = matching(conn, rows, filters)
    assert ours == {i for i, meta in enumerate(rows) if core_tree(filters, meta)}


@pytest.mark.parametrize(
    "op, value, meta, expected",
    [
        ("==", "x", {}, False), ("!=", "x", {}, True), ("nin", ["x"], {}, True), ("in", ["x"], {}, False),
        ("is_empty", None, {}, True), ("is_empty", None, {"k": None}, True), ("is_empty", None, {"k": []}, True),
        ("is_empty", None, {"k": ""}, True), ("is_empty", None, {"k": 0}, False), (">", 1, {"k": None}, False),
        ("!=", 1, {"k": None}, True), ("==", "1", {"k": 1}, False), ("==", 1, {"k": True}, True),
        (">", 1, {"k": "z"}, False), ("contains", "b", {"k": "abc"}, True), ("contains", "b", {"k": ["abc"]}, False),
        ("contains", 2, {"k": [1, 2]}, True), ("contains", "2", {"k": [1, 2]}, False),
        ("any", ["x", "q"], {"k": ["q"]}, True), ("all", ["x", "q"], {"k": ["q"]}, False), ("all", [], {"k": 5}, True),
        ("text_match", "b", {"k": 123}, False), ("text_match_insensitive", "AB", {"k": "xaby"}, True),
        ("==", "[1]", {"k": [1]}, False), ("in", [1], {"k": [1]}, False),
    ],
)
def test_operator_edge_cases_on_missing_null_and_mixed_types(conn, op, value, meta, expected):
    rows = [meta]
    assert matching(conn, rows, MetadataFilters(filters=[MetadataFilter(key="k", operator=op, value=value)])) == (
        {0} if expected else set()
    )
    # NOT over the same condition is its exact complement: no SQL NULL leaks through
    negated = MetadataFilters(filters=[MetadataFilter(key="k", operator=op, value=value)], condition="not")
    assert matching(conn, rows, negated) == (set() if expected else {0})


INJECTIONS = ["a'); DROP TABLE chunks; --", 'k"] OR 1=1 --', "$.x", "\\", "' OR '1'='1", "k\") IS NULL OR (\"1"]


@pytest.mark.parametrize("text", INJECTIONS)
def test_sql_injection_in_keys_and_values_is_inert(conn, text):
    rows = [{text: "v", "k": text}, {"k": "other"}]
    assert matching(conn, rows, MetadataFilters(filters=[MetadataFilter(key=text, value="v")])) == {0}
    assert matching(conn, rows, MetadataFilters(filters=[MetadataFilter(key="k", value=text)])) == {0}
    assert matching(conn, rows, MetadataFilters(filters=[MetadataFilter(key="k", operator="in", value=[text])])) == {0}
    assert matching(conn, rows, MetadataFilters(filters=[MetadataFilter(key=text, operator="!=", value="v")])) == {1}
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 2


@pytest.mark.parametrize("build", [filter_sql, filter_sql_pg])
def test_values_are_bound_never_interpolated(build):
    sql, params = build(Condition("k';--", "==", "x' OR 1=1"))
    assert "x' OR" not in sql and "k';--" not in sql
    assert "x' OR 1=1" in params


@pytest.mark.parametrize(
    "condition",
    [
        Condition("k", "like", "x"), Condition("k", "in", "abc"), Condition("k", "==", None),
        Condition("k", "==", ["x"]), Condition("k", "==", float("nan")), Condition("k", ">", 2**70),
        Condition("k", "any", [["x"]]), Condition("k", "text_match", 3), Condition("", "==", 1),
        Condition(3, "==", 1), FilterGroup((Condition("k", "==", 1),), "xor"),
    ],
)
@pytest.mark.parametrize("build", [filter_sql, filter_sql_pg])
def test_filters_of_the_wrong_type_are_clear_errors(condition, build):
    with pytest.raises(InputError):
        build(condition)


@pytest.mark.parametrize("build", [filter_sql, filter_sql_pg])
def test_wrong_filter_object_is_a_clear_error(build):
    with pytest.raises(InputError, match="MetadataFilters"):
        to_engine_filter({"k": 1})
    with pytest.raises(InputError):
        build("k = 1")  # type: ignore[arg-type]


def test_empty_group_matches_everything_like_core(conn):
    rows = [{"k": 1}, {}]
    assert matching(conn, rows, MetadataFilters(filters=[])) == {0, 1}
    assert matching(conn, rows, MetadataFilters(filters=[], condition="not")) == {0, 1}
