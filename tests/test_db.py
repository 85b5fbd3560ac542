"""polaris.db on disk: schema, migrations, other processes, crashes, WAL, the sqlite3 fallback."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from llama_index_polaris.engine import sqlite as db
from llama_index_polaris.engine.sqlite import SCHEMA_VERSION, sqlite_module
from llama_index_polaris.engine.errors import DatabaseError
from llama_index_polaris.engine.sqlite.store import DocumentRecord, Store, to_blob
from polaris_testing import fake_binding, kill_mid_transaction, make_chunks, start_script, unit_vectors

# -- schema ---------------------------------------------------------------------------

def tables(conn) -> dict[str, str]:
    return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())


def test_a_new_file_gets_the_schema(db_path: Path, open_store: Callable[..., Store]) -> None:
    store = open_store(db_path)
    conn = store.conn
    found = tables(conn)
    assert {"polaris_meta", "documents", "chunks", "chunks_fts"} <= set(found)
    assert "chunks_vec" not in found  # its size comes from the model
    assert 'content="chunks"' in found["chunks_fts"] and "content_rowid='id'" in found["chunks_fts"]
    assert db.schema_version(conn) == SCHEMA_VERSION == 11
    assert "document_texts" in found  # each document's indexed text, which sections are read from
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
    assert store.meta == {"fts_tokenizer": "porter unicode61 remove_diacritics 2", "fts_segmenter": "cjk-bigram-2"}
    assert store.model is None
    assert conn.execute("SELECT vec_version()").fetchone()[0].startswith("v")


def test_binding_a_model_creates_a_cosine_vector_table(make_store: Callable[..., Store]) -> None:
    store = make_store(dim=8, docs={})
    sql = tables(store.conn)["chunks_vec"]
    assert "vec0" in sql and "float[8]" in sql and "distance_metric=cosine" in sql


def test_reopened_by_a_second_process(make_store: Callable[..., Store], db_path: Path,
                                      run_python: Callable[..., subprocess.CompletedProcess]) -> None:
    store = make_store(dim=4, docs={"doc-a": 3, "doc-b": 2})  # stays open: the reader shares the file
    code = f"""
import json
from llama_index_polaris.engine.sqlite.store import Store
with Store({str(db_path)!r}, readonly=True) as s:
    m = s.model
    hits = s.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'number'").fetchone()[0]
    vecs = s.conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0]
    print(json.dumps({{"counts": s.counts(), "model": [m.model_id, m.dim], "fts": hits, "vec": vecs}}))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["counts"] == store.counts() == {
        "documents": 2, "chunks": 5, "collections": {"default": {"completed": 2}}}
    assert got["model"] == ["fake-4", 4]
    assert (got["fts"], got["vec"]) == (5, 5)


# A polaris.db as version 1 of the schema wrote it (frozen here on purpose: it must not
# follow later edits of CORE_SQL).
SCHEMA_V1 = """
CREATE TABLE polaris_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents (
    id TEXT PRIMARY KEY, path TEXT, name TEXT, collection TEXT NOT NULL DEFAULT 'default',
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    error TEXT, content_hash TEXT, metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX documents_collection_status ON documents (collection, status);
CREATE INDEX documents_path ON documents (path);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY, node_id TEXT NOT NULL UNIQUE,
    document_id TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL, heading_path TEXT NOT NULL DEFAULT '',
    heading_level INTEGER NOT NULL DEFAULT 0, text TEXT NOT NULL, start_char INTEGER,
    end_char INTEGER, token_count INTEGER, text_hash TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}', embedding BLOB
);
CREATE INDEX chunks_document_ordinal ON chunks (document_id, ordinal);
CREATE INDEX chunks_text_hash ON chunks (text_hash);
PRAGMA user_version = 1;
"""


def write_v1_fixture(path: Path) -> np.ndarray:
    """A version-1 file with one document and two chunks, by plain SQL (no Polaris code)."""
    vectors = unit_vectors(2, 4, seed=3)
    conn = sqlite3.connect(path)  # the stdlib module: version 1 needed no extension
    conn.executescript(SCHEMA_V1)
    conn.execute("INSERT INTO documents (id, path, status) VALUES ('old-doc', 'old.md', 'completed')")
    conn.executemany(
        "INSERT INTO chunks (id, node_id, document_id, ordinal, heading_path, text, text_hash, embedding)"
        " VALUES (?, ?, 'old-doc', ?, ?, ?, ?, ?)",
        [(10, "old:0", 0, "Legacy > Tokens", "rotating refresh tokens", "h0", to_blob(vectors[0])),
         (11, "old:1", 1, "Legacy > Sessions", "expired sessions are purged", "h1", to_blob(vectors[1]))],
    )
    conn.commit()
    conn.close()
    return vectors


def test_migrated_from_version_1(db_path: Path, open_store: Callable[..., Store]) -> None:
    vectors = write_v1_fixture(db_path)
    with pytest.raises(DatabaseError, match="schema version 1, older than this Polaris"):
        Store(db_path, readonly=True)  # read-only cannot upgrade: says how to
    store = open_store(db_path)
    assert db.schema_version(store.conn) == SCHEMA_VERSION
    assert "chunks_fts" in tables(store.conn)
    assert store.meta["fts_tokenizer"] == "porter unicode61 remove_diacritics 2"
    hits = store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'purged'").fetchall()
    assert hits == [(11,)]
    heading_hits = store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'fts_heading_path:legacy'")
    assert {r[0] for r in heading_hits} == {10, 11}
    store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
    # binding a model backfills the vector table from the old blobs
    store.bind_model(fake_binding(4))
    rows = store.conn.execute(
        "SELECT rowid FROM chunks_vec WHERE embedding MATCH ? AND k = 2 ORDER BY distance", (to_blob(vectors[1]),)
    ).fetchall()
    assert [r[0] for r in rows] == [11, 10]
    # and the old chunks behave like new ones
    store.upsert_document(DocumentRecord("old-doc"), make_chunks("old-doc", 1), unit_vectors(1, 4))
    assert store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'purged'").fetchone()[0] == 0
    assert store.counts()["chunks"] == 1


# What version 2 added to version 1 (frozen here as written then): the FTS table declared
# with content='chunks' in single quotes, which Datasette's FTS detection does not match.
SCHEMA_V2_FTS = """
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text, heading_path, content='chunks', content_rowid='id', tokenize='unicode61'
);
CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
END;
CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading_path)
    VALUES ('delete', old.id, old.text, old.heading_path);
END;
CREATE TRIGGER chunks_fts_au AFTER UPDATE OF text, heading_path ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading_path)
    VALUES ('delete', old.id, old.text, old.heading_path);
    INSERT INTO chunks_fts (rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
END;
INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
INSERT INTO polaris_meta (key, value) VALUES ('fts_tokenizer', 'unicode61');
PRAGMA user_version = 2;
"""


def test_migrated_from_version_2_fts_declared_for_datasette(db_path: Path, open_store: Callable[..., Store]) -> None:
    from datasette.utils import detect_fts

    write_v1_fixture(db_path)
    conn = sqlite3.connect(db_path)
    conn.executescript(SCHEMA_V2_FTS)  # recorded tokenizer: unicode61, not the default porter
    assert detect_fts(conn, "chunks") is None  # what Datasette saw in version 2 files
    conn.close()
    store = open_store(db_path)
    assert db.schema_version(store.conn) == SCHEMA_VERSION
    sql = tables(store.conn)["chunks_fts"]
    assert 'content="chunks"' in sql and "tokenize='unicode61'" in sql  # the recorded tokenizer, kept
    assert store.meta["fts_tokenizer"] == "unicode61"
    assert detect_fts(store.conn, "chunks") == "chunks_fts"
    match = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
    assert store.conn.execute(match, ("purged",)).fetchall() == [(11,)]  # rebuilt from chunks
    assert store.conn.execute(match, ("purge",)).fetchall() == []  # no porter stemming: unicode61 as recorded
    store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
    store.bind_model(fake_binding(4))
    store.upsert_document(DocumentRecord("old-doc"), make_chunks("old-doc", 1), unit_vectors(1, 4))
    assert store.conn.execute(match, ("purged",)).fetchall() == []  # the new triggers keep it in sync
    assert store.conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == 1


def test_a_newer_schema_is_refused(db_path: Path, open_store: Callable[..., Store]) -> None:
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(DatabaseError, match="schema version 99, newer than this Polaris"):
        Store(db_path)
    with pytest.raises(DatabaseError, match="schema version 99, newer than this Polaris"):
        Store(db_path, readonly=True)


def test_another_programs_sqlite_file_is_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE documents (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=r"not a Polaris index \(it already has tables: documents\)"):
        Store(path)
    with pytest.raises(DatabaseError, match="is not a Polaris index"):
        Store(path, readonly=True)
    assert path.read_bytes() == before


def test_a_new_index_opened_while_another_process_writes_the_file_waits_for_wal(tmp_path: Path) -> None:
    """SQLite answers `PRAGMA journal_mode = WAL` with "database is locked" at once, without its
    busy wait, while another connection holds a write lock on a rollback-journal file: two
    `polaris index` runs creating one index together failed that way. The switch is retried
    until the lock goes."""
    path = tmp_path / "polaris.db"
    # the engine's own SQLite library: two copies in one process would not see each other's locks
    other = sqlite_module().connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # a write lock on a new, rollback-journal file
    release = threading.Timer(0.4, lambda: other.execute("COMMIT"))
    release.start()
    try:
        store = Store(path)
    finally:
        release.join()
        other.close()
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    store.close()


def test_an_index_created_by_another_process_meanwhile_is_not_called_foreign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other half of that race: an opener read version 0, the first run then committed its
    tables and version 1, and the opener called the file someone else's database. Version and
    tables are read in one snapshot, so the first run's commit waits for the opener instead."""
    import importlib

    connect_module = importlib.import_module("llama_index_polaris.engine.sqlite.connect")

    path = tmp_path / "polaris.db"
    sqlite_module().connect(str(path)).close()  # an empty file, as the first run leaves it at first
    real = connect_module.schema_version
    first: list[threading.Thread] = []

    def version_then_the_other_run_creates_the_index(conn):
        version = real(conn)
        if not first:  # the other run creates the whole index now, while this opener checks
            first.append(threading.Thread(target=lambda: Store(path).close()))
            first[0].start()
            first[0].join(timeout=1.5)  # done at once if nothing holds it off; else it waits for us
        return version

    monkeypatch.setattr(connect_module, "schema_version", version_then_the_other_run_creates_the_index)
    store = Store(path)
    first[0].join(timeout=30)
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    store.close()


def test_a_file_that_is_not_sqlite_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("# not a database\n" * 300)
    with pytest.raises(DatabaseError, match="cannot be read as an SQLite database") as info:
        Store(path)
    assert type(info.value) is DatabaseError  # not an ExtensionError telling the user to install things


def test_a_path_with_uri_characters(tmp_path: Path, open_store: Callable[..., Store]) -> None:
    folder = tmp_path / "docs?v=1#top %20"
    folder.mkdir()
    store = open_store(folder / "polaris.db")
    store.put_document(DocumentRecord("d"))
    assert (folder / "polaris.db").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # nothing written beside it


def test_a_missing_directory_is_a_database_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="does not exist"):
        Store(tmp_path / "nowhere" / "polaris.db")


# -- crash safety ---------------------------------------------------------------------

CRASH_WRITER = """
import os, sys, time
import numpy as np
from llama_index_polaris.engine.sqlite.store import Store, DocumentRecord, ChunkRecord
path, n = sys.argv[1], int(sys.argv[2])
wal = path + "-wal"
store = Store(path)
store.conn.execute("PRAGMA cache_size = 16")   # spill dirty pages to the WAL early
start = os.path.getsize(wal) if os.path.exists(wal) else 0

def progress():
    # called every 1000 VM steps while the replacement runs; once uncommitted pages are in
    # the WAL, tell the parent and wait to be killed (the transaction is still open)
    if store.conn.in_transaction and os.path.getsize(wal) > start + 512 * 1024:
        print("in-transaction", os.path.getsize(wal), flush=True)
        time.sleep(60)
    return 0

store.conn.set_progress_handler(progress, 1000)
chunks = [ChunkRecord(f"doc:{i}", f"replacement text {i} " * 8, ordinal=i) for i in range(n)]
vectors = np.full((n, 4), 0.5, dtype="<f4")
store.upsert_document(DocumentRecord("doc", status="completed"), chunks, vectors)
print("committed", flush=True)
"""


def test_a_writer_killed_mid_replace_leaves_the_previous_version(
    make_store: Callable[..., Store], open_store: Callable[..., Store], db_path: Path, tmp_path: Path
) -> None:
    make_store(dim=4, docs={"doc": 40, "other": 5}).close()
    with Store(db_path, readonly=True) as reader:
        before = {(c.node_id, c.text) for c in reader.get_chunks(document_id="doc")}
    wal_at_kill = int(kill_mid_transaction(tmp_path, CRASH_WRITER, db_path).split()[1])
    assert Path(str(db_path) + "-wal").stat().st_size >= wal_at_kill  # uncommitted frames are on disk

    store = open_store(db_path)
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    chunks = store.get_chunks(document_id="doc", with_embedding=True)
    assert {(c.node_id, c.text) for c in chunks} == before and len(chunks) == 40
    np.testing.assert_array_equal(np.stack([c.embedding for c in chunks]), unit_vectors(40, 4, seed=0))
    chunk_ids = {r[0] for r in store.conn.execute("SELECT id FROM chunks")}
    assert {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_vec")} == chunk_ids
    assert len(chunk_ids) == 45
    fts = {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'chunk'")}
    assert fts == chunk_ids
    assert store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'replacement'").fetchone()[0] == 0
    store.conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('integrity-check')")
    store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
    # and the file takes the next write
    store.upsert_document(DocumentRecord("doc"), make_chunks("doc", 2, word="fresh"), unit_vectors(2, 4))
    assert store.counts()["chunks"] == 7


# -- WAL: readers and writers at once --------------------------------------------------

WAL_WRITER = """
import sys, time
import numpy as np
from llama_index_polaris.engine.sqlite.store import Store, DocumentRecord, ChunkRecord
store = Store(sys.argv[1])
print("ready", flush=True)
deadline, i = time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < deadline:
    n = 20 + i % 30
    chunks = [ChunkRecord(f"w{i % 7}:{j}", f"written text {i} {j}", ordinal=j) for j in range(n)]
    store.upsert_document(DocumentRecord(f"w{i % 7}"), chunks, np.full((n, 4), 0.5, dtype="<f4"))
    i += 1
print(i, flush=True)
"""


def read_snapshot(store: Store) -> tuple[int, int, int]:
    """Chunk, vector and FTS row counts, read in one transaction (one snapshot)."""
    conn = store.conn
    conn.execute("BEGIN")
    try:
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        vecs = conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0]
        fts = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'text'").fetchone()[0]
    finally:
        conn.execute("COMMIT")
    return chunks, vecs, fts


def test_readers_query_while_a_writer_writes(make_store: Callable[..., Store], db_path: Path,
                                             tmp_path: Path) -> None:
    make_store(dim=4, docs={}).close()
    proc = start_script(tmp_path, "wal_writer.py", WAL_WRITER, db_path, "2.0")
    errors: list[BaseException] = []
    seen: list[set[int]] = [set(), set()]

    def reader(slot: int, readonly: bool) -> None:
        try:
            store = Store(db_path, readonly=readonly)
            try:
                while proc.poll() is None:
                    chunks, vecs, fts = read_snapshot(store)
                    assert chunks == vecs == fts, (chunks, vecs, fts)
                    store.get_chunks(document_id="w1")
                    seen[slot].add(chunks)
            finally:
                store.close()
        except BaseException as exc:  # reported below, with "database is locked" if that was it
            errors.append(exc)

    assert proc.stdout.readline().strip() == "ready"
    threads = [threading.Thread(target=reader, args=(0, True)), threading.Thread(target=reader, args=(1, False))]
    for t in threads:
        t.start()
    out, err = proc.communicate(timeout=60)
    for t in threads:
        t.join(timeout=30)
    assert proc.returncode == 0, err
    assert not errors, errors
    writes = int(out.split()[-1])
    assert writes >= 10
    assert min(len(s) for s in seen) >= 3, seen  # both readers saw the data change under them


def test_two_writers_take_turns(make_store: Callable[..., Store], open_store: Callable[..., Store],
                                db_path: Path) -> None:
    make_store(dim=4, docs={}).close()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            with Store(db_path) as store:
                for i in range(30):
                    store.upsert_document(DocumentRecord(f"{name}{i % 3}"), make_chunks(f"{name}{i % 3}", 10),
                                          unit_vectors(10, 4, seed=i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert open_store(db_path).counts()["chunks"] == 60


# -- the sqlite3 fallback -----------------------------------------------------------------

def stdlib_can_load_extensions() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        return hasattr(conn, "enable_load_extension")
    finally:
        conn.close()


def test_the_module_in_use_can_load_extensions() -> None:
    module = sqlite_module()
    if stdlib_can_load_extensions():
        assert module is sqlite3
    else:  # this machine: the stdlib cannot, so the fallback must be in use
        assert module.__name__ == "pysqlite3.dbapi2"
    assert hasattr(module.connect(":memory:"), "enable_load_extension")


def test_everything_works_through_pysqlite3(db_path: Path,
                                            run_python: Callable[..., subprocess.CompletedProcess]) -> None:
    code = f"""
import json
import numpy as np
from llama_index_polaris.engine.sqlite import sqlite_module
from llama_index_polaris.engine.sqlite.store import Store, DocumentRecord, ChunkRecord, ModelBinding, to_blob
with Store({str(db_path)!r}) as s:
    s.bind_model(ModelBinding("fake", 2))
    s.upsert_document(DocumentRecord("d"), [ChunkRecord("a", "alpha text"), ChunkRecord("b", "beta text")],
                      np.array([[1, 0], [0, 1]], dtype="f4"))
    knn = s.conn.execute("SELECT rowid FROM chunks_vec WHERE embedding MATCH ? AND k = 1",
                         (to_blob(np.array([0.1, 1.0])),)).fetchall()
    fts = s.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'alpha'").fetchall()
    ids = dict(s.conn.execute("SELECT node_id, id FROM chunks").fetchall())
    print(json.dumps({{"module": sqlite_module().__name__, "knn": knn[0][0] == ids["b"],
                       "fts": fts[0][0] == ids["a"], "counts": s.counts()["chunks"]}}))
"""
    result = run_python(code, env={"POLARIS_FORCE_PYSQLITE3": "1"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"module": "pysqlite3.dbapi2", "knn": True, "fts": True, "counts": 2}


def test_with_neither_module_the_error_names_what_to_install(
    db_path: Path, tmp_path: Path, run_python: Callable[..., subprocess.CompletedProcess]
) -> None:
    fake = tmp_path / "fake_site" / "pysqlite3"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('pysqlite3 is not installed here')\n")
    code = f"""
from llama_index_polaris.engine.errors import ExtensionError
from llama_index_polaris.engine.sqlite.store import Store
try:
    Store({str(db_path)!r})
except ExtensionError as exc:
    print(exc)
else:
    raise SystemExit("no error")
"""
    # POLARIS_FORCE_PYSQLITE3 stands in for "stdlib cannot" on machines where it can
    result = run_python(code, env={"POLARIS_FORCE_PYSQLITE3": "1"}, pythonpath=[str(fake.parent)])
    assert result.returncode == 0, result.stderr + result.stdout
    assert "pip install pysqlite3-binary" in result.stdout
    assert "enable-loadable-sqlite-extensions" in result.stdout
    assert not db_path.exists()  # refused before the file was created
