"""The Store API on real SQLite files: writes keep chunks, vectors and FTS rows in step."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from llama_index_polaris.engine.sqlite import sqlite_module
from llama_index_polaris.engine.errors import ConfigError, DatabaseError, InputError, ModelMismatchError, NodeIdError
from llama_index_polaris.engine.sqlite.store import (
    ChunkRecord,
    DocumentRecord,
    ModelBinding,
    Store,
    from_blob,
    text_hash,
    to_blob,
)
from polaris_testing import FAKE_FINGERPRINT, fake_binding, make_chunks, unit_vectors


def fts_rowids(store: Store, query: str) -> set[int]:
    rows = store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (query,)).fetchall()
    return {r[0] for r in rows}


def assert_in_step(store: Store) -> None:
    """chunks, chunks_vec and chunks_fts hold the same rows, and FTS agrees with its content."""
    conn = store.conn
    chunk_ids = {r[0] for r in conn.execute("SELECT id FROM chunks WHERE embedding IS NOT NULL")}
    vec_ids = {r[0] for r in conn.execute("SELECT rowid FROM chunks_vec")}
    assert vec_ids == chunk_ids
    for rowid, blob in conn.execute("SELECT c.id, v.embedding FROM chunks c JOIN chunks_vec v ON v.rowid = c.id"):
        stored = conn.execute("SELECT embedding FROM chunks WHERE id = ?", (rowid,)).fetchone()[0]
        assert bytes(blob) == bytes(stored)
    conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('integrity-check')")
    conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")  # against content


def dump_sha(path: Path) -> str:
    """sha256 of the schema, user_version and every row of every plain table (vec0 and FTS5
    keep their data in plain shadow tables, so those are covered). Like ``iterdump()``,
    which neither pysqlite3 nor a stdlib sqlite3 without vec0 can run on this file."""
    conn = sqlite_module().connect(f"file:{path}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256(repr(conn.execute("PRAGMA user_version").fetchall()).encode())
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        for kind, name, sql in schema:
            digest.update(repr((kind, name, sql)).encode())
            if kind == "table" and not (sql or "").startswith("CREATE VIRTUAL TABLE"):
                for row in conn.execute(f'SELECT * FROM "{name}" ORDER BY 1'):
                    digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        conn.close()


# -- model guard -------------------------------------------------------------------

def test_binding_is_recorded(make_store: Callable[..., Store]) -> None:
    store = make_store(dim=8)
    assert store.model == fake_binding(8)
    meta = store.meta
    assert (meta["model_id"], meta["embedding_dim"], meta["model_fingerprint"]) == ("fake-8", "8", FAKE_FINGERPRINT)
    store.bind_model(fake_binding(8))  # the same model again is fine


def test_bind_records_chunker_settings(make_store: Callable[..., Store]) -> None:
    store = make_store()
    store.bind_model(fake_binding(4), max_chunk_tokens=450, chunk_overlap_chars=200)
    assert store.meta["chunker"] == '{"chunk_overlap_chars": 200, "max_chunk_tokens": 450}'


@pytest.mark.parametrize(
    ("wanted", "asked"),
    [
        (ModelBinding("other-model", 4, FAKE_FINGERPRINT), "other-model at 4 dims"),
        (ModelBinding("fake-4", 8, FAKE_FINGERPRINT), "fake-4 at 8 dims"),
        (ModelBinding("fake-4", 4, "0" * 64), "a different build of fake-4 (ONNX sha256 000000000000...)"),
    ],
)
def test_a_mismatched_model_is_refused_and_nothing_changes(
    make_store: Callable[..., Store], open_store: Callable[..., Store], db_path: Path, wanted: ModelBinding, asked: str
) -> None:
    make_store().close()
    before_dump, before_bytes = dump_sha(db_path), hashlib.sha256(db_path.read_bytes()).hexdigest()
    store = open_store(db_path)
    with pytest.raises(ModelMismatchError) as info:
        store.bind_model(wanted, max_chunk_tokens=10)
    message = str(info.value)
    assert f"{db_path} was built with fake-4 at 4 dims (ONNX sha256 ffffffffffff...)" in message
    assert f"but {asked} was asked for" in message
    assert "Re-index into a new file" in message
    assert 'use model_id = "fake-4" with embedding_dim = 4' in message
    with pytest.raises(ModelMismatchError):
        store.check_model(wanted)
    store.close()
    assert dump_sha(db_path) == before_dump
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before_bytes


def test_a_binding_made_by_another_connection_is_seen(db_path: Path, open_store: Callable[..., Store]) -> None:
    first, second = open_store(db_path), open_store(db_path)
    first.bind_model(fake_binding(4))
    with pytest.raises(ModelMismatchError):
        second.bind_model(fake_binding(8))
    assert second.model == fake_binding(4)


def test_vectors_need_a_bound_model(db_path: Path, open_store: Callable[..., Store]) -> None:
    store = open_store(db_path)
    with pytest.raises(DatabaseError, match="no model is bound"):
        store.upsert_document(DocumentRecord("d"), make_chunks("d", 1), unit_vectors(1, 4))
    store.upsert_document(DocumentRecord("d"), make_chunks("d", 2), None)  # text only is fine
    store.upsert_document(DocumentRecord("e"), [], [])
    assert store.counts()["chunks"] == 2


def test_binding_later_backfills_the_vector_table(db_path: Path, open_store: Callable[..., Store]) -> None:
    store = open_store(db_path)
    store.upsert_document(DocumentRecord("d"), make_chunks("d", 2), None)
    store.bind_model(fake_binding(4))
    store.upsert_document(DocumentRecord("e"), make_chunks("e", 2), unit_vectors(2, 4))
    assert store.conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0] == 2
    assert_in_step(store)


# -- writes ------------------------------------------------------------------------

def test_upsert_replaces_old_chunks_with_their_vectors_and_fts_rows(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 3, "doc-b": 2})
    old_ids = {c.id for c in store.get_chunks(document_id="doc-a")}
    assert fts_rowids(store, "chunk") >= old_ids
    new = [ChunkRecord("doc-a:new", "replacement text about sessions", heading_path="Auth > Sessions")]
    store.upsert_document(DocumentRecord("doc-a", path="doc-a.md"), new, unit_vectors(1, 4, seed=9))
    chunks = store.get_chunks(document_id="doc-a", with_embedding=True)
    assert [c.node_id for c in chunks] == ["doc-a:new"]
    np.testing.assert_array_equal(chunks[0].embedding, unit_vectors(1, 4, seed=9)[0])
    assert not old_ids & {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_vec")}
    assert fts_rowids(store, "chunk") == {c.id for c in store.get_chunks(document_id="doc-b")}
    assert fts_rowids(store, "sessions") == {chunks[0].id}
    assert store.counts()["chunks"] == 3
    assert_in_step(store)


def test_upsert_updates_the_document_row(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 1})
    created = store.get_document("doc-a").created_at
    doc = DocumentRecord("doc-a", path="a/b.md", name="b", collection="guides", content_hash="h1",
                         metadata={"author": "me", "tags": ["x"]})
    store.upsert_document(doc, make_chunks("doc-a", 1), unit_vectors(1, 4))
    got = store.get_document("doc-a")
    assert (got.path, got.name, got.collection, got.content_hash) == ("a/b.md", "b", "guides", "h1")
    assert got.metadata == {"author": "me", "tags": ["x"]}
    assert got.created_at == created and got.updated_at >= created


def test_a_failed_upsert_leaves_the_previous_version(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 3})
    before = [(c.id, c.text) for c in store.get_chunks(document_id="doc-a")]
    bad = make_chunks("doc-a", 3, word="new")
    bad[2].start_char = object()  # not bindable: fails after two rows were inserted
    with pytest.raises(sqlite_module().Error):
        store.upsert_document(DocumentRecord("doc-a", status="failed"), bad, unit_vectors(3, 4))
    assert not store.conn.in_transaction
    assert [(c.id, c.text) for c in store.get_chunks(document_id="doc-a")] == before
    assert store.get_document("doc-a").status == "completed"
    assert fts_rowids(store, "new") == set()
    assert_in_step(store)


def test_a_wrong_dim_vector_is_an_input_error(make_store: Callable[..., Store]) -> None:
    store = make_store(dim=4, docs={"doc-a": 2})
    vectors = [unit_vectors(1, 4)[0], unit_vectors(1, 8)[0]]
    with pytest.raises(InputError, match="has 8 dims, but this index holds 4-dim vectors"):
        store.upsert_document(DocumentRecord("doc-a"), make_chunks("doc-a", 2, word="new"), vectors)
    with pytest.raises(InputError, match="2 chunks but 1 vectors"):
        store.upsert_document(DocumentRecord("doc-a"), make_chunks("doc-a", 2, word="new"), unit_vectors(1, 4))
    assert fts_rowids(store, "new") == set()
    assert len(store.get_chunks(document_id="doc-a")) == 2


def test_duplicate_node_ids_are_an_input_error(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={})
    chunks = [ChunkRecord("n1", "a"), ChunkRecord("n1", "b")]
    with pytest.raises(InputError, match="duplicate node ids n1"):
        store.upsert_document(DocumentRecord("d"), chunks, unit_vectors(2, 4))
    assert store.get_document("d") is None


def test_a_node_id_stored_in_another_document_is_refused_and_nothing_is_written(
        make_store: Callable[..., Store]) -> None:
    """A node id names one node of one document: writing it under another would take it from
    the first silently (which could be left a completed document with no chunks)."""
    store = make_store(docs={"doc-a": 2, "doc-b": 1})
    before = [(c.node_id, c.document_id, c.text) for c in store.get_chunks()]
    moved = ChunkRecord("doc-a:1", "moved text", ordinal=0)
    for write in (store.upsert_document, store.upsert_chunks):
        with pytest.raises(NodeIdError, match="node 'doc-a:1' is stored in document 'doc-a'.*'doc-b'.*delete it"):
            write(DocumentRecord("doc-b"), [moved], unit_vectors(1, 4, seed=5))
        assert [(c.node_id, c.document_id, c.text) for c in store.get_chunks()] == before
    store.delete_nodes(["doc-a:1"])  # what the message says: delete it there first, then it moves
    store.upsert_chunks(DocumentRecord("doc-b"), [moved], unit_vectors(1, 4, seed=5))
    (got,) = store.get_chunks(node_ids=["doc-a:1"])
    assert (got.document_id, got.text) == ("doc-b", "moved text")
    assert_in_step(store)


def test_delete_document_cascades_to_vectors_and_fts(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 3, "doc-b": 2})
    assert store.delete_document("doc-a") is True
    assert store.delete_document("doc-a") is False
    assert store.get_document("doc-a") is None
    remaining = {c.id for c in store.get_chunks()}
    assert {c.document_id for c in store.get_chunks()} == {"doc-b"}
    assert {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_vec")} == remaining
    assert fts_rowids(store, "chunk") == remaining
    assert_in_step(store)


def test_delete_nodes(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 3, "doc-b": 2})
    assert store.delete_nodes(["doc-a:0", "doc-b:1", "missing"]) == 2
    assert store.delete_nodes([]) == 0
    assert sorted(c.node_id for c in store.get_chunks()) == ["doc-a:1", "doc-a:2", "doc-b:0"]
    assert fts_rowids(store, "chunk") == {c.id for c in store.get_chunks()}
    assert store.get_document("doc-a") is not None  # the document stays
    assert_in_step(store)


def test_clear_keeps_the_model_binding(make_store: Callable[..., Store]) -> None:
    store = make_store(dim=8)
    store.clear()
    assert store.counts() == {"documents": 0, "chunks": 0, "collections": {}}
    assert store.conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0] == 0
    assert fts_rowids(store, "chunk") == set()
    assert store.model == fake_binding(8)
    store.upsert_document(DocumentRecord("d"), make_chunks("d", 1), unit_vectors(1, 8))
    assert_in_step(store)


# -- reads ---------------------------------------------------------------------------

def test_get_chunks_by_node_ids_ids_and_document(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 3, "doc-b": 2})
    by_doc = store.get_chunks(document_id="doc-a")
    assert [c.node_id for c in by_doc] == ["doc-a:0", "doc-a:1", "doc-a:2"]
    first = by_doc[0]
    assert (first.ordinal, first.heading_path, first.start_char, first.end_char) == (0, "doc-a > part 0", 0, 50)
    assert first.embedding is None
    assert [c.node_id for c in store.get_chunks(node_ids=["doc-b:1", "doc-a:2"])] == ["doc-a:2", "doc-b:1"]
    assert [c.node_id for c in store.get_chunks(ids=[by_doc[1].id])] == ["doc-a:1"]
    assert store.get_chunks(node_ids=[]) == []
    assert len(store.get_chunks()) == 5
    with_vec = store.get_chunks(document_id="doc-b", with_embedding=True)
    np.testing.assert_array_equal(np.stack([c.embedding for c in with_vec]), unit_vectors(2, 4, seed=1))


def test_documents_and_counts_per_collection_and_status(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={})
    for doc_id, collection, status in [("a", "default", "completed"), ("b", "default", "pending"),
                                       ("c", "guides", "completed"), ("d", "guides", "completed")]:
        store.put_document(DocumentRecord(doc_id, path=f"{doc_id}.md", collection=collection, status=status))
    store.upsert_document(DocumentRecord("a", path="a.md"), make_chunks("a", 2), unit_vectors(2, 4))
    assert store.counts() == {
        "documents": 4,
        "chunks": 2,
        "collections": {"default": {"completed": 1, "pending": 1}, "guides": {"completed": 2}},
    }
    assert [d.id for d in store.documents("guides")] == ["c", "d"]
    assert [d.id for d in store.documents()] == ["a", "b", "c", "d"]


def test_status_transitions(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={})
    store.put_document(DocumentRecord("d", status="pending"))
    for status in ("processing", "completed", "pending"):
        store.set_status("d", status)
        assert store.get_document("d").status == status
    store.set_status("d", "failed", error="could not parse")
    got = store.get_document("d")
    assert (got.status, got.error) == ("failed", "could not parse")
    store.set_status("d", "completed")
    assert store.get_document("d").error is None


def test_an_invalid_status_is_refused(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"d": 1})
    with pytest.raises(InputError, match="status must be one of pending, processing, completed, stale, failed, got 'done'"):
        store.set_status("d", "done")
    with pytest.raises(InputError, match="got 'done'"):
        store.upsert_document(DocumentRecord("d", status="done"), make_chunks("d", 1), unit_vectors(1, 4))
    with pytest.raises(sqlite_module().IntegrityError):  # the schema refuses it too
        store.conn.execute("UPDATE documents SET status = 'done' WHERE id = 'd'")
    assert store.get_document("d").status == "completed"


def test_vectors_by_hash(make_store: Callable[..., Store]) -> None:
    store = make_store(docs={"doc-a": 2})
    chunks = store.get_chunks(document_id="doc-a", with_embedding=True)
    wanted = [chunks[1].text_hash, text_hash("never stored")]
    found = store.vectors_by_hash(wanted)
    assert list(found) == [chunks[1].text_hash]
    np.testing.assert_array_equal(found[chunks[1].text_hash], unit_vectors(2, 4)[1])
    assert store.vectors_by_hash([]) == {}


def test_blob_format_is_little_endian_float32() -> None:
    v = np.array([1.0, -2.5, 0.25], dtype=np.float64)
    assert to_blob(v) == b"\x00\x00\x80?\x00\x00 \xc0\x00\x00\x80>"
    np.testing.assert_array_equal(from_blob(to_blob(v)), v.astype(np.float32))


def test_cosine_knn_in_the_vector_table(make_store: Callable[..., Store]) -> None:
    store = make_store(dim=4, docs={})
    vectors = np.array([[1, 0, 0, 0], [0.6, 0.8, 0, 0], [0, 0, 1, 0]], dtype="<f4")
    store.upsert_document(DocumentRecord("d"), make_chunks("d", 3), vectors)
    rows = store.conn.execute(
        "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = 3 ORDER BY distance",
        (to_blob(np.array([2, 0, 0, 0])),),  # not normalised: cosine ignores length
    ).fetchall()
    ids = {c.node_id: c.id for c in store.get_chunks()}
    assert [r[0] for r in rows] == [ids["d:0"], ids["d:1"], ids["d:2"]]
    np.testing.assert_allclose([r[1] for r in rows], [0.0, 0.4, 1.0], atol=1e-6)


# -- read-only and tokenizer -----------------------------------------------------------

def test_a_readonly_store_refuses_writes(make_store: Callable[..., Store], open_store: Callable[..., Store],
                                         db_path: Path) -> None:
    make_store().close()
    ro = open_store(db_path, readonly=True)
    assert ro.counts()["chunks"] == 5
    with pytest.raises(DatabaseError, match="opened read-only"):
        ro.delete_document("doc-a")
    with pytest.raises(DatabaseError, match="no such index"):
        Store(db_path.with_name("missing.db"), readonly=True)
    assert not db_path.with_name("missing.db").exists()


def test_the_recorded_fts_tokenizer_is_kept_unless_one_is_given(
    make_store: Callable[..., Store], open_store: Callable[..., Store], db_path: Path
) -> None:
    make_store(docs={"doc-a": 2}, fts_tokenizer="trigram").close()
    store = open_store(db_path)  # no tokenizer given: the file's stays
    assert store.meta["fts_tokenizer"] == "trigram"
    assert fts_rowids(store, "umbe") != set()  # a substring: only trigram finds it
    store.close()
    store = open_store(db_path, fts_tokenizer="porter unicode61")
    assert store.meta["fts_tokenizer"] == "porter unicode61"
    assert fts_rowids(store, "umbe") == set()
    assert fts_rowids(store, "numbers") == {c.id for c in store.get_chunks()}  # porter stems
    assert_in_step(store)


def test_an_unsafe_fts_tokenizer_is_refused(db_path: Path) -> None:
    with pytest.raises(ConfigError, match="no quotes, semicolons or parentheses"):
        Store(db_path, fts_tokenizer="porter ascii'); DROP TABLE x; --")
    assert not db_path.exists()
