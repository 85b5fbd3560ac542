"""An index made before CJK bigrams (#36) is upgraded in place on both backends.

The old index is made by this code with the bigram step switched off (``spaced`` as the
identity: what Polaris read before), then put back to the schema it had (SQLite: version
8, chunks_fts over ``text``/``heading_path``; Postgres: version 6). Opening it for writing
upgrades it without re-indexing: 缓存 is then found inside a run, FTS5's integrity-check
passes against its content table, the posting lists score as FTS5 does, and the file
records ``fts_segmenter``. English chunks keep their terms and scores.
"""

from __future__ import annotations

import pytest

from llama_index_polaris.engine.words import tokenize
from llama_index_polaris.engine.words.bigrams import SEGMENTER
from llama_index_polaris.engine.backends import open_store
from llama_index_polaris.engine.sqlite import schema
from llama_index_polaris.engine.search import literal, terms
from llama_index_polaris.engine.sqlite import postings as postings_module
from llama_index_polaris.engine.sqlite.bm25 import bm25 as fts_bm25
from llama_index_polaris.engine.storage.scope import Scope
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord
from polaris_testing import fake_binding, unit_vectors

TEXTS = ["React 会缓存组件的计算结果，使用 useMemo 缓存计算。", "The cache keeps computed values; expired entries go.",
         "组件的生命周期包括挂载和卸载。", "Sessions expire after an hour; the token cache is cleared."]


def write(store, texts=TEXTS, heading="文档 {}") -> None:
    store.bind_model(fake_binding(4))
    for i, text in enumerate(texts):
        chunk = ChunkRecord(node_id=f"d{i}:0", text=text, ordinal=0, heading_path=heading.format(i), start_char=0,
                            end_char=len(text))
        store.upsert_document(DocumentRecord(f"d{i}"), [chunk], unit_vectors(1, 4, seed=i))


def old_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (tokenize, terms, literal, schema):
        monkeypatch.setattr(module, "spaced", lambda text, unigrams=True: text)


def bigrams_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terms as segmenter ``cjk-bigram-1`` made them: a Han run's bigrams, not its characters."""
    from llama_index_polaris.engine.words.bigrams import spaced

    for module in (tokenize, terms, literal, schema):
        monkeypatch.setattr(module, "spaced", lambda text, unigrams=True: spaced(text, unigrams=False))


def to_sqlite_8(conn) -> None:
    conn.execute("BEGIN")
    conn.execute("DROP TABLE document_texts")  # schema 10's
    conn.execute("DROP TRIGGER chunks_cjk_stale")
    schema.rebuild_fts(conn, schema.get_meta(conn)["fts_tokenizer"], schema.LEGACY_FTS_COLUMNS)
    for column in ("fts_heading_path", "fts_text", "cjk_heading", "cjk_text"):
        conn.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
    conn.execute("DELETE FROM polaris_meta WHERE key = 'fts_segmenter'")
    conn.execute("PRAGMA user_version = 8")
    conn.execute("COMMIT")


def test_an_old_file_is_upgraded_in_place(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "polaris.db"
    with monkeypatch.context() as m:
        old_terms(m)
        store = open_store(str(path))
        write(store)
        before = {q: fts_bm25(store.conn, q, 10) for q in ("cache", "expired sessions")}
        store.close()
    from llama_index_polaris.engine.sqlite import connect

    conn = connect(path)
    to_sqlite_8(conn)
    assert conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH '缓存'").fetchall() == []  # a run is one token
    conn.close()
    store = open_store(str(path))
    try:
        assert schema.schema_version(store.conn) == schema.SCHEMA_VERSION
        assert store.meta["fts_segmenter"] == SEGMENTER
        assert [h[0] for h in fts_bm25(store.conn, "缓存", 10)] == [1]
        # English: the same hits (the scores follow the average length, which the CJK chunks' bigrams changed)
        assert {q: [h[0] for h in fts_bm25(store.conn, q, 10)] for q in before} == {q: [h[0] for h in v] for q, v in before.items()}
        store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        assert store.conn.execute("SELECT count(*) FROM chunks WHERE cjk_text IS NOT NULL").fetchone()[0] == 2
        lengths = dict(store.conn.execute("SELECT id, sz FROM chunks_fts_docsize"))
        tokenizer = store.tokenizer()
        _, counted = tokenizer.counts(store.conn.execute("SELECT id, text, heading_path FROM chunks").fetchall())
        assert {i: sum(postings_module.varints(sz)) for i, sz in lengths.items()} == counted  # FTS5 counts the bigrams
    finally:
        store.close()


def test_an_english_file_keeps_its_scores_exactly(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index_polaris.engine.sqlite import connect

    path, english = tmp_path / "polaris.db", [t for t in TEXTS if t.isascii()] + ["Deploys need approval from on-call."]
    with monkeypatch.context() as m:
        old_terms(m)
        store = open_store(str(path))
        write(store, english, heading="Page {}")
        store.close()
    conn = connect(path)
    to_sqlite_8(conn)
    before = {q: fts_bm25(conn, q, 10) for q in ("cache", "expired sessions", "approval")}
    conn.close()
    store = open_store(str(path))
    try:
        assert {q: fts_bm25(store.conn, q, 10) for q in before} == before
    finally:
        store.close()


def test_a_raw_write_of_cjk_text_without_its_bigrams_is_refused(tmp_path) -> None:
    store = open_store(str(tmp_path / "polaris.db"))
    try:
        write(store)
        with pytest.raises(Exception, match="cjk_text"):
            store.conn.execute("UPDATE chunks SET text = '别的文字' WHERE node_id = 'd0:0'")
        store.conn.execute("UPDATE chunks SET text = 'plain words' WHERE node_id = 'd1:0'")  # no CJK: nothing to keep
    finally:
        store.close()


@pytest.mark.parametrize("made_by, version, probe, found", [
    (old_terms, "6", "缓存", [1]),  # before #36: a CJK run was one token (schema 6; migration 7 cuts it)
    (bigrams_only, "9", "期", [3]),  # segmenter cjk-bigram-1: no Han character of a run was a term (migration 10)
])
def test_an_older_postgres_index_is_upgraded_in_place(pg_uri: str, monkeypatch: pytest.MonkeyPatch, made_by,
                                                        version: str, probe: str, found: list[int]) -> None:
    from llama_index_polaris.engine.postgres import schema as pg_schema

    with monkeypatch.context() as m:
        made_by(m)
        store = open_store(pg_uri)
        write(store)
        with store.read():
            before = {q: store.bm25(q, 10, Scope()) for q in ("cache", "expired sessions")}
            assert store.bm25(probe, 10, Scope()) == []
        with store._write() as conn:
            conn.execute("DELETE FROM polaris_meta WHERE key = 'fts_segmenter'")
            if version == "6":
                conn.execute("DROP TABLE document_texts")  # schema 8's
            conn.execute("UPDATE polaris_meta SET value = %s WHERE key = 'schema_version'", (version,))
        store.close()
    store = open_store(pg_uri)  # a writer upgrades it
    try:
        assert pg_schema.schema_version(store.conn) == pg_schema.SCHEMA_VERSION
        assert store.meta["fts_segmenter"] == SEGMENTER
        with store.read():
            assert [h[0] for h in store.bm25(probe, 10, Scope())] == found
            assert {q: [h[0] for h in store.bm25(q, 10, Scope())] for q in before} == \
                {q: [h[0] for h in v] for q, v in before.items()}
        assert store.quick_check() == ["ok"]
    finally:
        store.close()



def test_a_bigram_file_gets_its_han_characters_as_terms(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of segmenter ``cjk-bigram-1`` (schema 10) is upgraded by migration 11: a Han character
    inside a run is a term (before, 期 was found only standing alone), FTS5 and the posting lists
    count the same tokens, and English chunks keep their hits."""
    path = tmp_path / "polaris.db"
    with monkeypatch.context() as m:
        bigrams_only(m)
        store = open_store(str(path))
        write(store)
        assert fts_bm25(store.conn, "期", 10) == []
        before = {q: [h[0] for h in fts_bm25(store.conn, q, 10)] for q in ("cache", "expired sessions")}
        store.conn.execute("DELETE FROM polaris_meta WHERE key = 'fts_segmenter'")
        store.conn.execute("PRAGMA user_version = 10")
        store.close()
    store = open_store(str(path))
    try:
        assert schema.schema_version(store.conn) == schema.SCHEMA_VERSION and store.meta["fts_segmenter"] == SEGMENTER
        assert [h[0] for h in fts_bm25(store.conn, "期", 10)] == [3]
        assert [h[0] for h in store.bm25("期", 10, Scope())] == [3]  # the posting lists
        assert {q: [h[0] for h in fts_bm25(store.conn, q, 10)] for q in before} == before
        store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        lengths = dict(store.conn.execute("SELECT id, sz FROM chunks_fts_docsize"))
        _, counted = store.tokenizer().counts(store.conn.execute("SELECT id, text, heading_path FROM chunks").fetchall())
        assert {i: sum(postings_module.varints(sz)) for i, sz in lengths.items()} == counted
    finally:
        store.close()


def test_an_english_file_is_not_rewritten_for_han_characters(tmp_path) -> None:
    """Migration 11 touches only chunks with CJK letters or blobs: an English file keeps its
    full-text segments and posting lists byte for byte, and records the segmenter."""
    path = tmp_path / "polaris.db"
    store = open_store(str(path))
    write(store, [t for t in TEXTS if t.isascii()], heading="Page {}")
    store.conn.execute("DELETE FROM polaris_meta WHERE key = 'fts_segmenter'")
    store.conn.execute("PRAGMA user_version = 10")
    tables = ("chunks_fts_data", "chunks_bm25", "chunks_bm25_terms", "chunks_bm25_lengths")
    before = {t: store.conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
    store.close()
    store = open_store(str(path))
    try:
        assert schema.schema_version(store.conn) == schema.SCHEMA_VERSION and store.meta["fts_segmenter"] == SEGMENTER
        assert {t: store.conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables} == before
    finally:
        store.close()


def test_an_english_postgres_index_is_not_rewritten_for_han_characters(pg_uri: str) -> None:
    """PostgreSQL migration 10 writes again only the postings of chunks holding a Han letter: an
    English index keeps every posting and every term's version."""
    store = open_store(pg_uri)
    write(store, [t for t in TEXTS if t.isascii()], heading="Page {}")
    read = ("SELECT term, chunk_id, tf, dl FROM chunks_bm25 ORDER BY 1, 2", "SELECT term, df, version FROM chunks_bm25_terms ORDER BY 1")
    with store.read() as conn:
        before = [conn.execute(q).fetchall() for q in read]
    with store._write() as conn:
        conn.execute("DELETE FROM polaris_meta WHERE key = 'fts_segmenter'")
        conn.execute("UPDATE polaris_meta SET value = '9' WHERE key = 'schema_version'")
    store.close()
    store = open_store(pg_uri)
    try:
        assert store.meta["fts_segmenter"] == SEGMENTER
        with store.read() as conn:
            assert [conn.execute(q).fetchall() for q in read] == before
    finally:
        store.close()
