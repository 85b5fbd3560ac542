"""#24: what a file system, a copy or a removal does to polaris.db loses and leaks nothing.

4: a finished run is in polaris.db alone (the WAL folded in), whatever reader holds the file.
6b: every by-id and by-document lookup leads with an index (plans asserted, not timed).
7: removed and edited-out words leave the file: SQL finds them nowhere, nor do its bytes.
11: `polaris status` upgrades an older schema, and every read-only door names it.
12: a read-only folder: every reader works, every writer says the folder is read-only.
13: a read-only ``-shm`` left by a reader of a read-only file does not block writes later.

Real files in tmp_path: the `polaris` command on the bundled ONNX model, real sqlite-vec,
a real Datasette client. Permissions are tested without root's override (``as_user``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from datasette.app import Datasette

from llama_index_polaris.engine.sqlite import SCHEMA_VERSION
from llama_index_polaris.engine.sqlite.connect import BUSY_TIMEOUT_MS, connect
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, Store
from polaris_search_testing import embed, fill
from polaris_testing import REPO

POLARIS = str(Path(sys.executable).with_name("polaris"))
MODEL = "all-minilm-l6-v2"
SECRET, HEADING, NAME, EDITED = "zqapikey9931", "Zqheading7713", "zqfile4417", "zqedit5521"


def as_user(cmd: list[str]) -> list[str]:
    """``cmd`` without root's power to ignore file permissions (these tests are about them)."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop the permission override")
    return [setpriv, "--bounding-set=-all", "--", *cmd]


def run(*args: str, cwd: Path, check: bool = True, unprivileged: bool = False) -> subprocess.CompletedProcess:
    cmd = as_user([POLARIS, *args]) if unprivileged else [POLARIS, *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg")})
    if check and proc.returncode != 0:
        raise AssertionError(f"polaris {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def python(code: str, *args: str, cwd: Path, unprivileged: bool = False) -> subprocess.CompletedProcess:
    script = cwd / "door.py"
    script.write_text(code)
    cmd = [sys.executable, str(script), *args]
    return subprocess.run(as_user(cmd) if unprivileged else cmd, cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def write_project(root: Path) -> Path:
    docs = root / "project" / "docs"
    docs.mkdir(parents=True)
    (docs / "auth.md").write_text(
        "# Auth\n\n## Sessions\n\nExpired sessions are refreshed with the refresh token.\n\n"
        "## Tokens\n\nAccess tokens are valid for fifteen minutes.\n"
    )
    (docs / f"{NAME}.md").write_text(
        f"# {HEADING}\n\nThe deploy key is {SECRET}; rotate it every quarter.\n\n"
        "## Rollback\n\nRoll back with the previous image tag if error rates climb.\n"
    )
    (root / "project" / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    return root / "project"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = write_project(tmp_path)
    run("index", "docs", "--quiet", cwd=root)
    return root


def state(db: Path) -> dict:
    """What the index holds: documents, chunks, vectors, full-text rows, and who is where."""
    with Store(db, readonly=True) as s:
        c = s.conn
        return {
            "documents": sorted(r[0] for r in c.execute("SELECT coalesce(path, id) FROM documents")),
            "chunks": c.execute("SELECT count(*) FROM chunks").fetchone()[0],
            "vectors": c.execute("SELECT count(*) FROM chunks_vec").fetchone()[0],
            "fts": c.execute("SELECT count(*) FROM chunks_fts_docsize").fetchone()[0],
            "schema": c.execute("PRAGMA user_version").fetchone()[0],
        }


def found(root: Path, query: str, *extra: str, unprivileged: bool = False) -> list[str]:
    out = run("search", query, "--json", "--mode", "bm25", *extra, cwd=root, unprivileged=unprivileged).stdout
    return list(dict.fromkeys(h["document"] for h in json.loads(out)))  # each document once, best first


def copy_alone(db: Path, to: Path) -> Path:
    """``cp polaris.db`` (what a backup or sync tool that ignores ``-wal`` does)."""
    to.mkdir(exist_ok=True)
    shutil.copyfile(db, to / db.name)
    return to / db.name


class Reader:
    """Another process holding the file open: idle, or inside a read transaction (``snapshot``)."""

    CODE = (
        "import sys\nfrom llama_index_polaris.engine.sqlite.connect import connect\n"
        "conn = connect(sys.argv[1], readonly=True)\n"
        "if sys.argv[2] == 'snapshot':\n    conn.execute('BEGIN')\n"
        "print(conn.execute('SELECT count(*) FROM documents').fetchone()[0], flush=True)\n"
        "sys.stdin.readline()\n"
    )

    def __init__(self, db: Path, mode: str = "idle") -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(db), mode], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        self.documents = int(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.communicate("\n", timeout=30)


# -- 4: a finished run lives in polaris.db, not only in its WAL --------------------------------
ADD_NODE = """
import sys
from llama_index.core.schema import MetadataMode, TextNode
from llama_index_polaris import PolarisEmbedding, PolarisVectorStore
embed = PolarisEmbedding(model_id="all-minilm-l6-v2")
store = PolarisVectorStore(db_path=sys.argv[1], embed_model=embed)
text = "Canary releases go to one percent of users first."
node = TextNode(id_="canary", text=text, metadata={"heading_path": "Canary"})
node.embedding = embed.get_text_embedding(node.get_content(metadata_mode=MetadataMode.EMBED))  # what add() re-embeds
getattr(store, sys.argv[2])(*([[node]] if sys.argv[2] == "add" else [sys.argv[3]]))
store.close()
"""
INDEX_PATHS = """
import sys
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
with PolarisIndex(sys.argv[1], config=load_config()) as index:
    print(index.index_paths(["docs"]).summary())
"""


def _write_door(root: Path, door: str) -> None:
    db = root / "polaris.db"
    if door == "polaris index":
        (root / "docs" / "deploy.md").write_text("# Deploys\n\nDeploys go out from the main branch.\n")
        run("index", "docs", "--quiet", cwd=root)
    elif door == "polaris remove":
        run("remove", f"docs/{NAME}.md", cwd=root)
    elif door == "PolarisIndex.index_paths":
        (root / "docs" / "deploy.md").write_text("# Deploys\n\nDeploys go out from the main branch.\n")
        assert python(INDEX_PATHS, str(db), cwd=root).returncode == 0
    elif door == "PolarisVectorStore.add":
        proc = python(ADD_NODE, str(db), "add", cwd=root)
        assert proc.returncode == 0, proc.stderr
    elif door == "PolarisVectorStore.delete":
        proc = python(ADD_NODE, str(db), "delete", f"default:{NAME}.md", cwd=root)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("door", ["polaris index", "polaris remove", "PolarisIndex.index_paths",
                                  "PolarisVectorStore.add", "PolarisVectorStore.delete"])
def test_a_finished_run_is_in_polaris_db_alone_while_a_reader_holds_it_open(project: Path, door: str) -> None:
    db = project / "polaris.db"
    before = state(db)
    reader = Reader(db)
    try:
        _write_door(project, door)
        after = state(db)
        assert after != before  # the run changed something
        wal = Path(f"{db}-wal")
        assert not wal.exists() or wal.stat().st_size == 0, "the run stayed in polaris.db-wal"
        copy = copy_alone(db, project / "copy")
        assert state(copy) == after
    finally:
        reader.close()
    assert reader.documents == len(before["documents"])


def test_a_reader_mid_query_does_not_hold_a_run_back(db_path: Path, tmp_path: Path) -> None:
    """The checkpoint does not wait for a reader's older snapshot (SQLite would until the busy
    timeout); what it could not fold in, the next run does."""
    with Store(db_path) as store:
        fill(store, {"a": [("A", "alpha text")]})
        reader = Reader(db_path, "snapshot")
        try:
            started = time.perf_counter()
            fill(store, {"b": [("B", "beta text")]})
            assert time.perf_counter() - started < BUSY_TIMEOUT_MS / 1000 / 2
            assert Path(f"{db_path}-wal").stat().st_size > 0  # the reader pins the pages it sees
        finally:
            reader.close()
        store.set_status("a", "completed")  # the next run
        assert Path(f"{db_path}-wal").stat().st_size == 0
    with Store(copy_alone(db_path, tmp_path / "copy"), readonly=True) as copy:
        assert {d.id for d in copy.documents()} == {"a", "b"} and copy.counts()["chunks"] == 2
        assert copy.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'beta'").fetchone()[0] == 1


def test_polaris_backup_is_one_complete_checked_file(project: Path, tmp_path: Path) -> None:
    db = project / "polaris.db"
    reader = Reader(db, "snapshot")  # the newest run stays in the WAL: a plain copy would miss it
    (project / "docs" / "deploy.md").write_text("# Deploys\n\nDeploys go out from the main branch.\n")
    try:
        run("index", "docs", "--quiet", cwd=project)
        assert Path(f"{db}-wal").stat().st_size > 0
        out = run("backup", str(tmp_path / "copy.db"), cwd=project).stdout
    finally:
        reader.close()
    copy = tmp_path / "copy.db"
    assert "3 documents" in out and not Path(f"{copy}-wal").exists()
    assert state(copy) == state(db)
    assert found(project, "branch", "--db", str(copy)) == ["deploy.md"]
    again = run("backup", str(copy), cwd=project, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr  # never overwrites
    (tmp_path / "backups").mkdir()
    run("backup", str(tmp_path / "backups"), cwd=project)  # a folder: the copy keeps the file's name
    assert state(tmp_path / "backups" / "polaris.db") == state(db)


# -- 6b: work by id uses an index ------------------------------------------------------------
WALKS = re.compile(r"\bSCAN (c|d|chunks|documents)\b|\(collection=")


def _plans(conn, statements: list[str]) -> list[tuple[str, str]]:
    """(statement, plan) of each traced statement that reads chunks or documents."""
    out = []
    for sql in statements:
        if sql.startswith("--") or not re.search(r"\b(chunks|documents)\b", sql) or sql.split()[0].upper() in (
                "BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "INSERT"):
            continue
        plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall())
        out.append((sql, plan))
    return out


def test_every_by_id_path_uses_an_index(db_path: Path) -> None:
    """get_nodes, delete_nodes, delete, the replace inside add and the section lookup each
    read by the id's index, never by walking a collection (3.8 s at 1M chunks before)."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

    from llama_index_polaris import PolarisVectorStore
    from llama_index_polaris.engine.config import load_config

    with Store(db_path) as s:
        for collection in ("default", "other"):
            fill(s, {f"{collection}-{d}": [(f"H{d} > part {i}", f"text {i} of doc {d} in {collection}")
                                           for i in range(4)] for d in range(6)}, collection=collection)
    store = PolarisVectorStore(db_path, config=load_config(use_user_config=False), model_id="fake-bow")
    conn = store.client.conn
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    node = TextNode(id_="default-2#1", text="replaced text", metadata={"heading_path": "H2 > part 1"},
                    embedding=[float(x) for x in embed("replaced text")])
    node.relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id="default-2")}
    calls = {
        "get_nodes": lambda: store.get_nodes(node_ids=["default-1#2"]),
        "get_nodes with filters": lambda: store.get_nodes(
            node_ids=["default-1#2"], filters=MetadataFilters(filters=[MetadataFilter(key="i", value=2)])),
        "delete_nodes": lambda: store.delete_nodes(node_ids=["default-3#0"]),
        "delete": lambda: store.delete("default-4"),
        "add (replace by node id)": lambda: store.add([node]),
    }
    # the store's lock held throughout: the search starts a cache loader on this connection, and
    # EXPLAIN run beside it (a trace callback needing the GIL inside SQLite's mutex) deadlocks
    with store.client._lock:
        try:
            for name, call in calls.items():
                traced.clear()
                call()
                plans = _plans(conn, traced)
                assert plans, name
                walks = [(sql, plan) for sql, plan in plans if WALKS.search(plan)]
                assert not walks, (name, walks)
            traced.clear()
            store.search("text of doc", query_vector=embed("text of doc"), unit="section")
            sections = [p for p in _plans(conn, traced) if "json_extract(k.value, '$[1]')" in p[0]]
            assert sections and not any(WALKS.search(plan) for _, plan in sections), sections
        finally:
            conn.set_trace_callback(None)
    assert [n.node_id for n in store.get_nodes(node_ids=["default-1#2", "default-2#1"])] == ["default-1#2", "default-2#1"]
    assert store.get_nodes(node_ids=["default-3#0", "other-1#0"]) == []  # deleted; another collection's
    assert {d.id for d in store.client.documents("default")} == {f"default-{d}" for d in (0, 1, 2, 3, 5)}
    assert store.client.counts()["chunks"] == 48 - 1 - 4
    store.close()


# -- 7: removed and edited-out words leave the file ----------------------------------------------
SQL_LEAK = "select count(*) as n from chunks_fts_data where instr(block, cast(:w as blob)) > 0"


def _leaks(db: Path, words: list[str], blobs: list[bytes]) -> list[str]:
    """Where ``words`` (or ``blobs``) can still be read: any column of any table, or the file's bytes."""
    where = []
    conn = connect(db, readonly=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE"
                                             " 'CREATE VIRTUAL TABLE%'")]
        for table in tables:
            for col in [r[1] for r in conn.execute(f"PRAGMA table_info('{table}')")]:
                for word in words:
                    n = conn.execute(f'SELECT count(*) FROM "{table}" WHERE instr(CAST("{col}" AS BLOB),'
                                     " CAST(? AS BLOB)) > 0", (word,)).fetchone()[0]
                    if n:
                        where.append(f"{table}.{col}: {word}")
    finally:
        conn.close()
    raw = b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())
    where += [f"bytes: {w}" for w in words if w.encode() in raw]
    where += [f"bytes: a removed vector ({len(b)} bytes)" for b in blobs if b in raw]
    return where


async def _datasette_count(db: Path, word: str) -> int:
    ds = Datasette([str(db)])
    response = await ds.client.get("/polaris.json", params={"sql": SQL_LEAK, "w": word, "_shape": "array"})
    assert response.status_code == 200, response.text
    return response.json()[0]["n"]


STORE_CALL = """
import json, sys
from llama_index_polaris import PolarisVectorStore
store = PolarisVectorStore(db_path=sys.argv[1])
getattr(store, sys.argv[2])(**json.loads(sys.argv[3]))
store.close()
"""


def _store_call(root: Path, method: str, **kwargs) -> None:
    proc = python(STORE_CALL, str(root / "polaris.db"), method, json.dumps(kwargs), cwd=root)
    assert proc.returncode == 0, proc.stderr


def _secret_node_ids(root: Path) -> list[str]:
    with Store(root / "polaris.db", readonly=True) as s:
        return [c.node_id for c in s.get_chunks(document_id=f"default:{NAME}.md")]


# door: (what it does, the documents left, the words that must be gone)
REMOVE_DOORS = {
    "polaris remove": (lambda root: (run("remove", f"docs/{NAME}.md", cwd=root), (root / "docs" / f"{NAME}.md").unlink()),
                       ["auth.md"], [SECRET, HEADING, NAME]),
    "file deleted, polaris index": (lambda root: ((root / "docs" / f"{NAME}.md").unlink(),
                                                  run("index", "docs", "--quiet", cwd=root)),
                                    ["auth.md"], [SECRET, HEADING, NAME]),
    "PolarisVectorStore.delete": (lambda root: _store_call(root, "delete", ref_doc_id=f"default:{NAME}.md"),
                                  ["auth.md"], [SECRET, HEADING, NAME]),
    "PolarisVectorStore.delete_nodes": (lambda root: _store_call(root, "delete_nodes", node_ids=_secret_node_ids(root)),
                                        ["auth.md", f"{NAME}.md"], [SECRET, HEADING]),  # the document row stays
    "PolarisVectorStore.clear": (lambda root: _store_call(root, "clear"), [], [SECRET, HEADING, NAME]),
}


@pytest.mark.parametrize("door", list(REMOVE_DOORS))
async def test_a_removed_document_leaves_nothing_readable(project: Path, door: str) -> None:
    db = project / "polaris.db"
    remove, remaining, words = REMOVE_DOORS[door]
    with Store(db, readonly=True) as s:
        gone = [bytes(r[0]) for r in s.conn.execute("SELECT embedding FROM chunks WHERE document_id = ?",
                                                     (f"default:{NAME}.md",))]
    assert gone and await _datasette_count(db, SECRET) > 0 and found(project, SECRET) == [f"{NAME}.md"]
    remove(project)
    assert await _datasette_count(db, SECRET) == 0
    assert _leaks(db, words, gone) == []
    after = state(db)
    assert after["documents"] == remaining and after["chunks"] == after["vectors"] == after["fts"]
    assert found(project, SECRET) == []
    assert found(project, "refresh token") == (["auth.md"] if "auth.md" in remaining else [])
    assert after["chunks"] > 0 or not remaining


async def test_an_edited_out_word_leaves_nothing_readable(project: Path) -> None:
    db = project / "polaris.db"
    doc = project / "docs" / "auth.md"
    doc.write_text(doc.read_text() + f"\n## Keys\n\nThe staging key is {EDITED}.\n")
    run("index", "docs", "--quiet", cwd=project)
    assert found(project, EDITED) == ["auth.md"] and await _datasette_count(db, EDITED) > 0
    doc.write_text(doc.read_text().replace(f"The staging key is {EDITED}.", "The staging key is in the vault."))
    run("index", "docs", "--quiet", cwd=project)
    assert await _datasette_count(db, EDITED) == 0
    assert _leaks(db, [EDITED], []) == []
    assert state(db)["documents"] == ["auth.md", f"{NAME}.md"]
    assert found(project, EDITED) == [] and found(project, "vault") == ["auth.md"]
    assert found(project, SECRET) == [f"{NAME}.md"]  # the other document kept every word


def _common_word_store(path: Path) -> Store:
    """A store where ``SECRET`` is common enough to have a BM25 posting list (1,100 chunks)."""
    store = Store(path)
    fill(store, {"keep": [("Keep", f"kept chunk {i} about sessions") for i in range(50)]})
    chunks = [ChunkRecord(node_id=f"s#{i}", text=f"chunk {i} holds {SECRET}", ordinal=i) for i in range(1100)]
    store.upsert_document(DocumentRecord("secret", path="secret.md"), chunks,
                          np.stack([embed(c.text) for c in chunks]))
    assert store.conn.execute("SELECT count(*) FROM chunks_bm25_terms WHERE term = ?", (SECRET,)).fetchone()[0] == 1
    return store


def test_a_removed_common_word_leaves_the_posting_lists(db_path: Path) -> None:
    with _common_word_store(db_path) as store:
        assert store.delete_document("secret")
        assert store.conn.execute("SELECT count(*) FROM chunks_bm25 WHERE term = ?", (SECRET,)).fetchone()[0] == 0
    assert _leaks(db_path, [SECRET], []) == []
    with Store(db_path, readonly=True) as store:
        assert store.counts()["documents"] == 1 and store.counts()["chunks"] == 50
        assert store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'sessions'").fetchone()[0] == 50


def test_without_fts5_secure_delete_a_run_that_removed_text_merges_the_index(db_path: Path) -> None:
    """An SQLite older than 3.42 has no secure-delete: the run's end merges chunks_fts instead."""
    with _common_word_store(db_path) as store:
        store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('secure-delete', 0)")
        with store.run():
            store.delete_document("secret")
            assert store.conn.execute(SQL_LEAK.replace(":w", "?"), (SECRET,)).fetchone()[0] > 0  # until the run ends
        assert store.conn.execute(SQL_LEAK.replace(":w", "?"), (SECRET,)).fetchone()[0] == 0
    assert _leaks(db_path, [SECRET], []) == []
    with Store(db_path, readonly=True) as store:
        assert store.counts()["chunks"] == 50


def test_the_upgrade_erases_what_an_older_polaris_left(db_path: Path) -> None:
    with _common_word_store(db_path) as store:  # as a schema-7 file: deletes left the words in chunks_fts
        store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('secure-delete', 0)")
        store.conn.execute("PRAGMA secure_delete = OFF")
        store.conn.execute("DELETE FROM chunks WHERE document_id = 'secret'")
        store.conn.execute("DELETE FROM documents WHERE id = 'secret'")
        store.conn.execute("PRAGMA user_version = 7")
        assert store.conn.execute(SQL_LEAK.replace(":w", "?"), (SECRET,)).fetchone()[0] > 0
    Store(db_path).close()  # a writer's open upgrades
    with Store(db_path, readonly=True) as store:
        assert store.conn.execute(SQL_LEAK.replace(":w", "?"), (SECRET,)).fetchone()[0] == 0
        assert store.conn.execute("SELECT count(*) FROM chunks_bm25_terms WHERE term = ?", (SECRET,)).fetchone()[0] == 0
        assert store.counts()["chunks"] == 50 and store.quick_check() == ["ok"]


# -- 11: an older schema is upgraded by `polaris status` ------------------------------------------
def as_schema_6(db: Path) -> None:
    """What a file of schema 6 looks like: no BM25 posting lists, no secure-delete."""
    conn = connect(db)
    for name in ("chunks_bm25_ai", "chunks_bm25_ad", "chunks_bm25_au"):
        conn.execute(f"DROP TRIGGER {name}")
    for name in ("chunks_bm25_terms", "chunks_bm25", "chunks_bm25_lengths", "chunks_bm25_dirty"):
        conn.execute(f"DROP TABLE {name}")
    conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('secure-delete', 0)")
    conn.execute("PRAGMA user_version = 6")
    conn.close()


async def test_an_older_schema_is_upgraded_by_the_command_its_message_names(project: Path) -> None:
    db = project / "polaris.db"
    before = state(db)
    as_schema_6(db)
    refused = run("search", "refresh token", cwd=project, check=False)
    assert refused.returncode == 1 and "`polaris status" in refused.stderr
    ds = Datasette([str(db)])
    page = (await ds.client.get("/polaris/-/polaris.json", params={"q": "refresh"})).text
    assert "polaris status --db" in page
    status = run("status", "--json", cwd=project)
    assert "upgraded" in status.stderr and json.loads(status.stdout)["schema_version"] == SCHEMA_VERSION
    assert state(db) == before
    assert state(copy_alone(db, project / "copy")) == before  # the upgrade is in polaris.db too
    assert found(project, "refresh token") == ["auth.md"]


# -- 12 and 13: permissions ------------------------------------------------------------------------
READ_DOORS = """
import asyncio, json, sys
from datasette.app import Datasette
from llama_index_polaris import PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import DatabaseError
from llama_index_polaris.engine.index import PolarisIndex
db = sys.argv[1]
out = {}
with PolarisIndex(db, config=load_config(), readonly=True) as index:
    out["PolarisIndex"] = [h.document for h in index.search("refresh token", mode="bm25")][:1]
store = PolarisVectorStore(db_path=db)
out["PolarisVectorStore"] = [h.document for h in store.search("refresh token")][:1]
try:
    store.delete("default:auth.md")
except DatabaseError as exc:
    out["write"] = str(exc)
store.close()
async def page():
    ds = Datasette([db])
    r = await ds.client.get("/-/polaris.json", params={"q": "refresh token", "mode": "bm25"})
    t = await ds.client.get("/polaris.json", params={"sql": "select count(*) as n from chunks", "_shape": "array"})
    return r.status_code, [h["document"] for h in r.json().get("hits", [])][:1], t.status_code
out["Datasette"] = asyncio.run(page())
print(json.dumps(out))
"""


def test_a_read_only_folder_serves_every_reader_and_writers_say_why(project: Path, tmp_path: Path) -> None:
    db = project / "polaris.db"
    before = state(db)
    for leftover in (f"{db}-wal", f"{db}-shm", f"{db}.lock"):
        Path(leftover).unlink(missing_ok=True)
    (project / ".xdg").mkdir(exist_ok=True)
    project.chmod(0o555)
    try:
        status = json.loads(run("status", "--json", cwd=project, unprivileged=True).stdout)
        assert (status["documents"], status["chunks"]) == (len(before["documents"]), before["chunks"])
        assert found(project, "refresh token", unprivileged=True) == ["auth.md"]
        doors = python(READ_DOORS, str(db), cwd=tmp_path, unprivileged=True)
        assert doors.returncode == 0, doors.stderr
        seen = json.loads(doors.stdout)
        assert seen["PolarisIndex"] == ["auth.md"] and seen["PolarisVectorStore"] == ["auth.md"]
        assert seen["Datasette"][0] == 200 and seen["Datasette"][1] == ["auth.md"] and seen["Datasette"][2] == 200
        assert "is read-only" in seen["write"] and str(project) in seen["write"]
        run("backup", str(tmp_path / "copy.db"), cwd=project, unprivileged=True)
        for args in (("index", "docs", "--quiet"), ("remove", f"docs/{NAME}.md")):
            refused = run(*args, cwd=project, check=False, unprivileged=True)
            assert refused.returncode == 1, args
            assert f"the folder {project} is read-only" in refused.stderr and "cannot be read" not in refused.stderr
    finally:
        project.chmod(0o755)
    assert state(db) == before == state(tmp_path / "copy.db")


def test_a_read_only_mount_is_named_as_one_not_cured_with_chmod(project: Path, tmp_path: Path) -> None:
    """On a file system mounted read-only, a write says so (chmod cannot help there); reading works."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare to mount a folder read-only (CI runs as root)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    (project / ".xdg").mkdir(exist_ok=True)
    script = (f"mount --bind -o ro {shlex.quote(str(project))} {shlex.quote(str(mount))} && cd {shlex.quote(str(mount))}"
              f" && {shlex.quote(POLARIS)} index docs --quiet; echo \"index: $?\";"
              f" {shlex.quote(POLARIS)} search 'refresh token' --json --mode bm25")
    proc = subprocess.run([unshare, "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / ".xdg")})
    if "index:" not in proc.stdout:  # unshare or mount refused (a container without the right): nothing ran
        pytest.skip(f"cannot mount a folder read-only here: {proc.stderr.strip()[:200]}")
    assert "index: 1" in proc.stdout, (proc.stdout, proc.stderr)
    assert "mounted read-only" in proc.stderr and "chmod u+w" not in proc.stderr, proc.stderr
    hits = json.loads(proc.stdout.split("\n", 1)[1])
    assert hits and hits[0]["document"] == "auth.md"


def test_a_read_only_folder_with_changes_left_in_the_wal_says_so(db_path: Path, tmp_path: Path) -> None:
    with Store(db_path) as store:
        fill(store, {"a": [("A", "alpha text")]})
    writer = ("import sys, os\nfrom llama_index_polaris.engine.sqlite.connect import connect\n"
              "conn = connect(sys.argv[1])\nconn.execute('PRAGMA wal_autocheckpoint = 0')\n"
              "conn.execute(\"INSERT INTO documents (id, path, status) VALUES ('b', 'b.md', 'completed')\")\n"
              "os._exit(0)\n")  # another program's write, and it dies before any checkpoint
    proc = subprocess.run([sys.executable, "-c", writer, str(db_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    Path(f"{db_path}-shm").unlink()
    assert Path(f"{db_path}-wal").stat().st_size > 0
    db_path.parent.chmod(0o555)
    try:
        probe = ("import sys\nfrom llama_index_polaris.engine.sqlite.store import Store\n"
                 "try:\n    Store(sys.argv[1], readonly=True)\nexcept Exception as exc:\n    print(exc)\n")
        said = python(probe, str(db_path), cwd=_scratch(tmp_path), unprivileged=True)
        assert "polaris.db-wal holds changes not yet in polaris.db" in said.stdout, said.stdout + said.stderr
    finally:
        db_path.parent.chmod(0o755)
    with Store(db_path, readonly=True) as store:  # writable again: SQLite reads the WAL, nothing was lost
        assert {d.id for d in store.documents()} == {"a", "b"}


def _scratch(tmp_path: Path) -> Path:
    """A writable folder beside the read-only one (for the probe script)."""
    path = tmp_path.parent / f"{tmp_path.name}-scratch"
    path.mkdir(exist_ok=True)
    return path


def test_a_read_only_shm_left_by_a_reader_does_not_block_writes(project: Path) -> None:
    db, shm = project / "polaris.db", project / "polaris.db-shm"
    before = state(db)
    for side in (shm, project / "polaris.db-wal"):  # as the last writer leaves them: gone
        side.unlink(missing_ok=True)
    db.chmod(0o444)
    assert found(project, "refresh token", unprivileged=True) == ["auth.md"]  # reading works
    assert shm.exists() and not stat.S_IMODE(shm.stat().st_mode) & 0o200  # SQLite gave it the file's mode
    refused = run("index", "docs", "--quiet", cwd=project, check=False, unprivileged=True)
    assert refused.returncode == 1 and "polaris.db is read-only" in refused.stderr and "chmod u+w" in refused.stderr
    db.chmod(0o644)
    (project / "docs" / "deploy.md").write_text("# Deploys\n\nDeploys go out from the main branch.\n")
    run("index", "docs", "--quiet", cwd=project, unprivileged=True)  # chmod 644 brought writes back
    after = state(db)
    assert after["documents"] == sorted([*before["documents"], "deploy.md"]) and after["chunks"] > before["chunks"]
    assert found(project, "branch", unprivileged=True) == ["deploy.md"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to leave a -shm that another user owns")
def test_a_read_only_shm_that_is_not_ours_is_named_with_the_cure(project: Path) -> None:
    db, shm = project / "polaris.db", project / "polaris.db-shm"
    before = state(db)
    reader = Reader(db)  # holds -shm in place while it is made someone else's
    try:
        os.chown(shm, 65534, 65534)
        shm.chmod(0o444)
        refused = run("index", "docs", "--quiet", cwd=project, check=False, unprivileged=True)
    finally:
        reader.close()
    assert refused.returncode == 1 and "polaris.db-shm is read-only" in refused.stderr
    assert "chmod u+w polaris.db-shm" in refused.stderr
    assert state(db) == before


@pytest.mark.parametrize("name", ["", "  ", "{tmp}", "{tmp}/", "{tmp}/new/", "."])
def test_an_index_path_that_names_no_file_is_refused_with_what_to_name(tmp_path: Path, name: str) -> None:
    """Empty, a folder, or a name ending in a slash: a sentence saying what to name, from the
    Python API and from the CLI (never a traceback), and nothing made on disk."""
    from llama_index_polaris.engine.errors import PolarisError

    target = name.format(tmp=tmp_path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(PolarisError, match="empty|folder"):
        Store(target)
    for command in (["search", "x"], ["index", str(REPO / "examples" / "handbook")]):
        run = subprocess.run([sys.executable, "-m", "llama_index_polaris.cli", *command, "--db", target],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
        assert re.search(r"polaris: error: .*(empty|folder)", run.stderr), run.stderr
    (tmp_path / "polaris.toml").write_text(f'db_path = "{target}"\n')
    run = subprocess.run([sys.executable, "-m", "llama_index_polaris.cli", "search", "x"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "Traceback" not in run.stderr and re.search("empty|folder", run.stderr), run.stderr
    (tmp_path / "polaris.toml").unlink()
    assert sorted(tmp_path.iterdir()) == before
