"""Two places where the backends answered differently, checked on both (#26).

- Listing documents: the SQLite file lists them in the order of its (collection, path) index,
  documents without a path (added through LlamaIndex) first, in the order they were first added;
  Postgres put them last, in whatever order its heap held them (an updated row moved).
- Metadata filters over nested metadata: a hit's metadata is its document's merged with the
  chunk's own (RFC 7396, SQLite's ``json_patch``); every operator must select, on both backends,
  exactly the chunks whose metadata *as shown* passes the filter.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np
import pytest
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery

from llama_index_polaris import PolarisVectorStore
from llama_index_polaris.engine.storage import documents
from llama_index_polaris.engine.backends import open_store
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.sqlite import sqlite_module
from llama_index_polaris.engine.postgres.json_patch import patch
from llama_index_polaris.engine.storage.filters import filter_sql
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord
from llama_index_polaris.vector_store import to_engine_filter
from polaris_testing import BACKENDS, fake_binding, make_chunks, module_target, unit_vectors


# -- listing documents ----------------------------------------------------------------------
def test_documents_without_a_path_come_first_in_the_order_they_were_added(backend_target: str) -> None:
    store = open_store(backend_target)
    try:
        store.bind_model(fake_binding(4))
        added = [("zeta", None, "default"), ("b", "b.md", "default"), ("alpha", None, "default"),
                 ("a", "a.md", "default"), ("mid", None, "default"), ("x", None, "other"), ("o", "o.md", "other")]
        for i, (doc_id, path, collection) in enumerate(added):
            store.upsert_document(DocumentRecord(doc_id, path=path, collection=collection), make_chunks(doc_id, 1),
                                  unit_vectors(1, 4, seed=i))
        # written again (an update keeps the document's place, as SQLite keeps its rowid)
        store.upsert_document(DocumentRecord("zeta", metadata={"v": 2}), make_chunks("zeta", 2), unit_vectors(2, 4))
        with store.read() as conn:
            def ids(**kw: Any) -> list[str]:
                return [r.id for r in documents.list_documents(conn, **kw).rows]

            assert ids() == ["zeta", "alpha", "mid", "a", "b", "x", "o"]
            assert ids(limit=2, offset=1) == ["alpha", "mid"]
            assert ids(collection="default", offset=2) == ["mid", "a", "b"]
            assert ids(collection=["other"]) == ["x", "o"]
            assert ids(prefix="m") == ["mid"]
            assert ids(contains="A") == ["zeta", "alpha", "a"]
            assert documents.list_documents(conn, limit=3).total == 7
    finally:
        store.close()


def test_documents_with_the_same_path_in_two_collections_and_a_copy_list_alike(
        backend_target: str, tmp_path, request: pytest.FixtureRequest) -> None:
    """``documents()`` orders equal paths by collection (then id) on both; ``polaris copy`` writes the
    documents in the order they were added, so the copy lists them as the source does."""
    from llama_index_polaris.engine.ingest.copy import copy_index
    from polaris_testing import new_database

    store = open_store(backend_target)
    try:
        store.bind_model(fake_binding(4))
        for i, (doc_id, path, collection) in enumerate([("z:README.md", "README.md", "zeta"), ("n2", None, "default"),
                                                        ("a:README.md", "README.md", "alpha"), ("n1", None, "default")]):
            store.upsert_document(DocumentRecord(doc_id, path=path, collection=collection), make_chunks(doc_id, 1),
                                  unit_vectors(1, 4, seed=i))
        assert [d.id for d in store.documents()] == ["a:README.md", "z:README.md", "n1", "n2"]
        with store.read() as conn:
            listed = [r.id for r in documents.list_documents(conn).rows]
        assert listed == ["a:README.md", "n2", "n1", "z:README.md"]  # by collection, no path first, as added
    finally:
        store.close()
    for dest in (str(tmp_path / "copy.db"), new_database(request.getfixturevalue("pg_server"), "polaris_copy")):
        copy_index(backend_target, dest)
        copied = open_store(dest)
        try:
            with copied.read() as conn:
                assert [r.id for r in documents.list_documents(conn).rows] == listed, dest
            assert [d.id for d in copied.documents()] == ["a:README.md", "z:README.md", "n1", "n2"]
        finally:
            copied.close()


# -- nested metadata and every filter operator ----------------------------------------------
DOC_META = {
    "team": {"name": "core", "size": 3, "deep": {"a": 1, "b": 2}},
    "tags": ["a", "b"], "owner": "ann", "level": 1, "gone": "doc", "flag": True, "empty": "",
    "obj": {"x": 1}, "big": 9007199254740993, "ratio": 0.1, "word": "Ärger straße",
}
CHUNK_META = [
    {},  # the document's metadata as it is
    {"team": {"size": 5, "lead": "bob", "deep": {"b": None, "c": 3}}, "gone": None, "level": 2},
    {"team": "solo", "tags": ["c"], "owner": {"first": "ann"}, "obj": None, "flag": False},
    {"team": {"name": None}, "tags": [], "level": 1.5, "empty": [], "big": 9007199254740992, "extra": [1, "a"]},
    {"obj": {"x": {"y": [1]}}, "owner": None, "ratio": 0.30000000000000004, "word": "ärger"},
]
KEYS = ("team", "tags", "owner", "level", "gone", "flag", "empty", "obj", "big", "ratio", "word", "extra", "missing")
VALUES: dict[str, list[Any]] = {  # a few values per operator, of every type a filter takes
    "scalar": ["ann", "solo", "", 1, 1.5, 0, 9007199254740992, 9007199254740993, 0.1, "ärger"],
    "list": [["ann", "solo"], ["c", "b"], [1, 2], [9007199254740993], []],
    "text": ["an", "ÄR", "ärg", ""],
}
OPERATORS = {
    FilterOperator.EQ: "scalar", FilterOperator.NE: "scalar", FilterOperator.GT: "scalar",
    FilterOperator.LT: "scalar", FilterOperator.GTE: "scalar", FilterOperator.LTE: "scalar",
    FilterOperator.IN: "list", FilterOperator.NIN: "list", FilterOperator.ANY: "list", FilterOperator.ALL: "list",
    FilterOperator.CONTAINS: "scalar", FilterOperator.TEXT_MATCH: "text", FilterOperator.TEXT_MATCH_INSENSITIVE: "text",
    FilterOperator.IS_EMPTY: None,
}


def leaves(op: FilterOperator) -> list[MetadataFilter]:
    kind = OPERATORS[op]
    values = [None] if kind is None else VALUES[kind]
    if op == FilterOperator.CONTAINS:
        values = [v for v in values if not isinstance(v, float)]
    return [MetadataFilter(key=k, operator=op, value=v) for k in KEYS for v in values]


@pytest.fixture(scope="module", params=BACKENDS)
def nested(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two documents with nested metadata, chunks overriding parts of it, on one backend."""
    target = module_target(request, tmp_path_factory)
    store = open_store(target)
    store.bind_model(fake_binding(4))
    for d, doc_meta in enumerate((DOC_META, {})):
        doc_id = f"doc{d}"
        chunks = [ChunkRecord(f"{doc_id}:{i}", f"chunk {i} of {doc_id}", ordinal=i, heading_path=f"H{i}", metadata=m)
                  for i, m in enumerate(CHUNK_META)]
        store.upsert_document(DocumentRecord(doc_id, path=f"{doc_id}.md", metadata=doc_meta), chunks,
                              unit_vectors(len(chunks), 4, seed=d))
    store.close()
    vector_store = PolarisVectorStore(target, config=load_config(use_user_config=False))
    yield {"target": target, "vector_store": vector_store}
    vector_store.close()


def shown(store_target: str) -> dict[str, dict]:
    store = open_store(store_target)
    try:
        return {c.node_id: c.metadata for c in store.get_chunks()}
    finally:
        store.close()


def test_the_metadata_shown_is_the_documents_patched_with_the_chunks(nested: dict) -> None:
    metadata = shown(nested["target"])
    for d, doc_meta in enumerate((DOC_META, {})):
        for i, own in enumerate(CHUNK_META):
            expected = patch(doc_meta, own) if doc_meta else own  # a document without metadata: the chunk's own
            assert metadata[f"doc{d}:{i}"] == expected
    assert metadata["doc0:1"]["team"] == {"name": "core", "size": 5, "deep": {"a": 1, "c": 3}, "lead": "bob"}
    assert "gone" not in metadata["doc0:1"] and "obj" not in metadata["doc0:2"]
    nodes = nested["vector_store"].get_nodes(node_ids=["doc0:1"])
    assert {k: v for k, v in nodes[0].metadata.items() if k in DOC_META} == {
        k: v for k, v in metadata["doc0:1"].items() if k in DOC_META}


def passing(metadata: dict[str, dict], filters: MetadataFilters) -> set[str]:
    """The node ids whose shown metadata passes ``filters``: the SQLite filter SQL over that metadata alone."""
    conn = sqlite_module().connect(":memory:")
    try:
        conn.execute("CREATE TABLE m (node_id TEXT, metadata TEXT)")
        conn.executemany("INSERT INTO m VALUES (?, ?)", [(k, json.dumps(v)) for k, v in metadata.items()])
        sql, params = filter_sql(to_engine_filter(filters))
        return {r[0] for r in conn.execute(f"SELECT node_id FROM m WHERE {sql}", params)}
    finally:
        conn.close()


@pytest.mark.parametrize("op", list(OPERATORS), ids=lambda op: op.value)
def test_every_operator_filters_the_metadata_as_shown(nested: dict, op: FilterOperator) -> None:
    metadata = shown(nested["target"])
    vector_store = nested["vector_store"]
    query = np.ones(4, dtype=np.float32) / 2
    found_any = False
    for leaf in leaves(op):
        for condition in ("and", "not"):
            filters = MetadataFilters(filters=[leaf], condition=condition)
            expected = passing(metadata, filters)
            found_any |= bool(expected) and condition == "and"
            if condition == "and":  # the search door; NOT goes through the same SQL (checked below)
                got = vector_store.query(VectorStoreQuery(query_embedding=list(query), similarity_top_k=100,
                                                          filters=filters))
                assert set(got.ids) == expected, (leaf, condition)
            assert {n.node_id for n in vector_store.get_nodes(filters=filters)} == expected, (leaf, condition)
    assert found_any, "no filter of this operator matched anything: nothing was compared"


def test_filters_on_nested_values_combine_the_same_way(nested: dict) -> None:
    metadata = shown(nested["target"])
    vector_store = nested["vector_store"]
    f = MetadataFilters(filters=[
        MetadataFilter(key="team", operator="==", value="solo"),
        MetadataFilters(filters=[MetadataFilter(key="level", operator=">", value=1),
                                 MetadataFilter(key="gone", operator="is_empty", value=None)], condition="and"),
    ], condition="or")
    expected = passing(metadata, f)
    assert expected == {"doc0:1", "doc0:2", "doc1:1", "doc1:2", "doc1:3"}
    assert {n.node_id for n in vector_store.get_nodes(filters=f)} == expected


# -- names that are not valid Unicode (a file name's undecodable byte, as the shell passes it) -------
def test_a_scope_named_with_a_lone_surrogate_finds_the_escaped_name(backend_target: str) -> None:
    from llama_index_polaris.engine.storage.names import documents_named

    store = open_store(backend_target)
    try:
        store.bind_model(fake_binding(4))
        store.upsert_document(DocumentRecord("default:bad\udcffname.md", path="bad\udcffname.md"),
                              make_chunks("bad\udcffname", 2), unit_vectors(2, 4))
        (doc,) = store.documents()
        assert doc.path == "bad\\xffname.md"  # stored escaped (text.storable)
        with store.read() as conn:
            for name in ("bad\udcffname.md", "bad\\xffname.md", doc.id):
                assert documents_named(conn, [name]) == ([doc.id], [])
            scope = store.resolve_scope(documents=["bad\udcffname.md"], node_ids=["bad\udcffname:1"])
        assert len(scope.chunk_ids) == 1 and [c.node_id for c in store.get_chunks(node_ids=["bad\udcffname:1"])] == \
            ["bad\\xffname:1"]
    finally:
        store.close()


def test_a_filter_with_a_lone_surrogate_matches_the_metadata_as_stored(backend_target: str) -> None:
    from llama_index_polaris.engine.storage.filters import Condition

    store = open_store(backend_target)
    try:
        store.bind_model(fake_binding(4))
        store.upsert_document(DocumentRecord("d", metadata={"note": "x\ud800y"}),
                              [ChunkRecord("n", "text", 0, metadata={"k\udcff": ["a\udcffb"]})], unit_vectors(1, 4))
        assert store.get_chunks()[0].metadata == {"note": "x\\ud800y", "k\\xff": ["a\\xffb"]}
        for c in (Condition("note", "==", "x\ud800y"), Condition("note", "text_match", "\ud800"),
                  Condition("k\udcff", "contains", "a\udcffb"), Condition("k\udcff", "any", ["a\udcffb", "z"]),
                  Condition("note", "in", ["x\\ud800y"])):
            assert [x.node_id for x in store.get_chunks(filters=c)] == ["n"], c
            with store.read():
                assert len(store.resolve_scope(filters=c).chunk_ids) == 1, c
        assert store.get_chunks(filters=Condition("note", "!=", "x\ud800y")) == []
    finally:
        store.close()


def test_a_postgres_index_made_before_documents_had_a_rowid_is_upgraded(pg_uri: str) -> None:
    """Postgres only (the file has had its rowid all along): migration 2 numbers the documents a
    version-1 database holds and lists them as the file does from then on."""
    import psycopg

    from llama_index_polaris.engine.postgres import schema as pg_schema

    old = open_store(pg_uri)
    old.bind_model(fake_binding(4))
    for i, (doc_id, path) in enumerate([("b", "b.md"), ("n", None), ("a", "a.md")]):
        old.upsert_document(DocumentRecord(doc_id, path=path), make_chunks(doc_id, 1), unit_vectors(1, 4, seed=i))
    old.close()
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # back to version 1's documents table
        conn.execute("ALTER TABLE documents DROP COLUMN rowid")
        conn.execute("CREATE INDEX documents_collection_path ON documents (collection, path)")
        conn.execute("UPDATE polaris_meta SET value = '1' WHERE key = 'schema_version'")
    store = open_store(pg_uri)
    try:
        store.upsert_document(DocumentRecord("m", path=None), make_chunks("m", 1), unit_vectors(1, 4))
        with store.read() as conn:
            assert conn.execute("SELECT value FROM polaris_meta WHERE key = 'schema_version'").fetchone()[0] == str(pg_schema.SCHEMA_VERSION)
            assert [r.id for r in documents.list_documents(conn).rows] == ["n", "m", "a", "b"]
    finally:
        store.close()


def test_nan_and_infinity_in_metadata_are_stored_as_null_and_filters_still_answer(backend_target: str) -> None:
    from llama_index_polaris.engine.storage.filters import Condition

    store = open_store(backend_target)
    try:
        store.bind_model(fake_binding(4))
        store.upsert_document(DocumentRecord("d", metadata={"x": float("nan"), "y": float("inf"), "s": "NaN"}),
                              [ChunkRecord("n", "text", 0, metadata={"k": 1, "z": [float("-inf"), 2]})],
                              unit_vectors(1, 4))
        store.upsert_document(DocumentRecord("e"), [ChunkRecord("m", "more", 0, metadata={"k": float("nan")})],
                              unit_vectors(1, 4, seed=1))
        shown = {c.node_id: c.metadata for c in store.get_chunks()}
        assert shown == {"n": {"x": None, "y": None, "s": "NaN", "k": 1, "z": [None, 2]}, "m": {"k": None}}
        for c, expected in ((Condition("k", "==", 1), ["n"]), (Condition("x", "is_empty"), ["n", "m"]),
                            (Condition("k", "is_empty"), ["m"]), (Condition("z", "contains", 2), ["n"]),
                            (Condition("s", "==", "NaN"), ["n"])):
            assert [x.node_id for x in store.get_chunks(filters=c)] == expected, c
    finally:
        store.close()
