"""PostgreSQL security and hygiene (#34): catalog names are never spliced into SQL, a password is
never shown, reading commands create nothing, schemas of one database are separate indexes.

All on a real server (``pg_server``), through the engine and the `polaris` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

from llama_index_polaris.engine.ingest.copy import copy_index
from llama_index_polaris.engine.errors import DatabaseError
from llama_index_polaris.engine.postgres import PgStore
from llama_index_polaris.engine.storage.records import DocumentRecord

psycopg = pytest.importorskip("psycopg")
from psycopg import sql  # noqa: E402

POLARIS = str(Path(sys.executable).with_name("polaris"))
HOSTILE = 'documents_path";COMMIT;CREATE TABLE public.pwned();--'
SECRET = "hunter2-Sekret"


def polaris(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(cwd / ".xdg"), "PATH": str(Path(sys.executable).parent),
                               **(env or {})})


def with_params(uri: str, **params: str) -> str:
    """``uri`` with more query parameters (``options`` and ``password`` written as a user would)."""
    extra = "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in params.items())
    return uri + ("&" if "?" in uri else "?") + extra


def in_schema(uri: str, name: str) -> str:
    """The docs' recipe: ``?options=-csearch_path%3DNAME``."""
    return with_params(uri, options=f"-csearch_path={name}")


def database_name(uri: str) -> str:
    return urllib.parse.urlsplit(uri).path.lstrip("/")


def as_role(uri: str, role: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))


@pytest.fixture
def role(pg_server: str):
    """A new unprivileged login role (dropped afterwards, with what it owns)."""
    name = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(pg_server, autocommit=True) as conn:
        for (db,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'polaris_%'").fetchall():
            with psycopg.connect(_on(pg_server, db), autocommit=True) as other:
                other.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def _on(server: str, db: str) -> str:
    parts = urllib.parse.urlsplit(server)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{db}"))


def schema_objects(uri: str, schema: str) -> tuple[list, list]:
    """Every index and every key of one schema's tables, by definition (the schema's name left out)."""
    with psycopg.connect(uri) as conn:
        indexes = conn.execute("SELECT tablename, indexname, replace(indexdef, %s, '') FROM pg_indexes"
                               " WHERE schemaname = %s ORDER BY 1, 2", (f"{schema}.", schema)).fetchall()
        keys = conn.execute("SELECT conrelid::regclass::text, conname, contype, replace(pg_get_constraintdef(oid), %s, '')"
                            " FROM pg_constraint WHERE connamespace = %s::regnamespace ORDER BY 1, 2",
                            (f"{schema}.", schema)).fetchall()
    return indexes, [(t.rsplit(".", 1)[-1], *rest) for t, *rest in keys]


# -- 1. catalog names ------------------------------------------------------------------------------
def test_a_hostile_index_name_in_another_schema_is_never_run(built_handbook: Path, pg_uri: str, role: str) -> None:
    with psycopg.connect(pg_uri, autocommit=True) as admin:
        admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(database_name(pg_uri)),
                                                                       sql.Identifier(role)))
    with psycopg.connect(as_role(pg_uri, role), autocommit=True) as mallory:
        mallory.execute("CREATE SCHEMA mallory")
        mallory.execute("CREATE TABLE mallory.chunks_bm25 (chunk_id int)")
        mallory.execute(sql.SQL("CREATE INDEX {} ON mallory.chunks_bm25 (chunk_id)").format(sql.Identifier(HOSTILE)))

    counts = copy_index(built_handbook, pg_uri)

    assert counts["chunks"] > 0
    with psycopg.connect(pg_uri) as conn:
        assert conn.execute("SELECT to_regclass('public.pwned')").fetchone()[0] is None
        assert conn.execute("SELECT to_regclass('public.documents_path')").fetchone()[0] is not None
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'mallory'").fetchone()[0] == 1
    with PgStore(pg_uri, readonly=True) as store:
        assert store.counts()["chunks"] == counts["chunks"] and store.quick_check() == ["ok"]


def test_two_polaris_schemas_in_one_database_copy_and_stay_apart(built_handbook: Path, pg_uri: str) -> None:
    first, second = in_schema(pg_uri, "team_a"), in_schema(pg_uri, "team_b")
    copied = copy_index(built_handbook, first)
    assert copy_index(built_handbook, second) == copied  # not: index "chunks_bm25_chunk" does not exist
    assert schema_objects(pg_uri, "team_a") == schema_objects(pg_uri, "team_b")
    assert schema_objects(pg_uri, "team_a")[0]  # both have every index
    with PgStore(first, readonly=True) as a, PgStore(second) as b:
        b.delete_documents([d.id for d in b.documents()])
        assert a.counts()["documents"] == copied["documents"] and b.counts()["documents"] == 0
    with psycopg.connect(pg_uri) as conn:  # nothing went into public
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


# -- 2. passwords --------------------------------------------------------------------------------
def test_a_password_in_the_uri_is_never_shown(built_handbook: Path, pg_uri: str, tmp_path: Path) -> None:
    copy_index(built_handbook, pg_uri)
    target = with_params(pg_uri, password=SECRET)  # the test server trusts its socket: any password opens it

    text = polaris(tmp_path, "status", "--db", target)
    assert text.returncode == 0, text.stderr
    assert SECRET not in text.stdout + text.stderr and "password=***" in text.stdout
    as_json = polaris(tmp_path, "status", "--json", "--db", target)
    assert as_json.returncode == 0, as_json.stderr
    assert SECRET not in as_json.stdout + as_json.stderr
    status = json.loads(as_json.stdout)
    assert "password=***" in status["db_path"] and "password=***" in status["config"]["db_path"]["value"]

    fresh = with_params(pg_uri + "_nope", password=SECRET)  # errors that name the URI: no such database,
    for args in (("search", "x", "--db", fresh), ("search", "x", "--collection", "nope", "--db", target),  # scope,
                 ("status", "--db", target.replace("?", "?port=notaport&", 1))):  # what libpq cannot parse
        run = polaris(tmp_path, *args)
        assert run.returncode == 1 and run.stderr.startswith("polaris: error:"), run.stderr
        assert SECRET not in run.stdout + run.stderr and "Traceback" not in run.stderr, run.stderr
        assert "password=***" in run.stderr, run.stderr


@pytest.mark.parametrize("uri", [
    f"postgresql://bob:{SECRET}@/db?host=/nowhere&port=1",
    f"postgresql://bob@/db?host=/nowhere&password={SECRET}&port=1",
    f"postgresql://bob@/db?host=/nowhere&password={SECRET}%zz",  # libpq echoes a token it cannot decode
    f"postgresql://bob:{SECRET}%zz@/db?host=/nowhere",
])
def test_every_way_of_writing_a_password_is_masked_in_errors(uri: str, tmp_path: Path) -> None:
    from llama_index_polaris.engine.storage import shown_target

    assert SECRET not in shown_target(uri)
    with pytest.raises(DatabaseError) as caught:
        PgStore(uri)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)
    run = polaris(tmp_path, "status", "--db", uri, env={"PGPASSWORD": SECRET})
    assert run.returncode == 1 and SECRET not in run.stdout + run.stderr and "Traceback" not in run.stderr, run.stderr


def test_pgpassword_is_masked_if_an_error_repeats_it(tmp_path: Path) -> None:
    from llama_index_polaris.engine.masking import scrub

    os.environ["PGPASSWORD"] = SECRET
    try:
        assert scrub(f'bad token "{SECRET}" in postgresql://u:x@h/db?password=y&a=b') == \
            'bad token "***" in postgresql://u:***@h/db?password=***&a=b'
    finally:
        del os.environ["PGPASSWORD"]


# -- 3. reading creates nothing ------------------------------------------------------------------
def test_reading_commands_create_nothing_in_a_database(pg_uri: str, tmp_path: Path) -> None:
    def created() -> tuple:
        with psycopg.connect(pg_uri) as conn:
            return (conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchall(),
                    conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = 'polaris'").fetchall(),
                    conn.execute("SELECT tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog',"
                                 " 'information_schema')").fetchall())

    assert created() == ([], [], [])
    for target in (pg_uri, in_schema(pg_uri, "polaris")):
        for args in (("status",), ("status", "--json"), ("search", "sessions"), ("search", "x", "--mode", "bm25")):
            run = polaris(tmp_path, *args, "--db", target)
            assert run.returncode == 1, run.stdout + run.stderr
            assert "nothing is indexed" in run.stderr and "polaris index" in run.stderr, run.stderr
            assert "Traceback" not in run.stderr
        with pytest.raises(DatabaseError, match="nothing is indexed"):
            PgStore(target, readonly=True)
        assert created() == ([], [], []), target


def test_a_writer_refused_by_a_foreign_database_creates_nothing(pg_uri: str) -> None:
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(DatabaseError, match="not a Polaris index"):
        PgStore(pg_uri)
    with psycopg.connect(pg_uri) as conn:
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone()[0] == 0


# -- 12. the schema recipe, copy's errors, locks per schema ------------------------------------------
def test_the_schema_recipe_works_with_pgvector_in_public(built_handbook: Path, pg_uri: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector SCHEMA public")
    target = in_schema(pg_uri, "polaris")
    copied = copy_index(built_handbook, target)
    with PgStore(target) as store:
        assert store.counts()["chunks"] == copied["chunks"] and store.quick_check() == ["ok"]
    run = polaris(tmp_path, "search", "expired sessions", "--db", target, "--mode", "bm25", "-k", "1")
    assert run.returncode == 0 and run.stdout.strip(), run.stderr
    with psycopg.connect(pg_uri) as conn:
        tables = conn.execute("SELECT schemaname, count(*) FROM pg_tables WHERE schemaname IN ('public', 'polaris')"
                              " GROUP BY 1").fetchall()
        ours = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'polaris' AND tablename IN"
                            " ('documents', 'document_texts', 'chunks', 'collections')").fetchone()[0]
        assert tables == [("polaris", tables[0][1])] and ours == 4  # every table in polaris's schema, none in public
        assert conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
                            ).fetchone()[0] == "public"


def test_postgres_errors_in_copy_are_polaris_errors(built_handbook: Path, pg_uri: str, role: str,
                                                    tmp_path: Path) -> None:
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")  # the role may not create tables in public (PostgreSQL 15+)
    run = polaris(tmp_path, "copy", str(built_handbook), as_role(pg_uri, role))
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr.startswith("polaris: error:") and "Traceback" not in run.stderr, run.stderr
    assert "permission denied" in run.stderr and "CREATE" in run.stderr, run.stderr
    run = polaris(tmp_path, "copy", in_schema(as_role(pg_uri, role), "nope"), str(tmp_path / "out.db"))
    assert run.returncode == 1 and "Traceback" not in run.stderr and "nothing is indexed" in run.stderr, run.stderr
    assert not (tmp_path / "out.db").exists()


def hold_run_lock(store: PgStore, waited: list[str]) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """``store.writer_lock()`` taken in a thread: (taken, release, thread)."""
    taken, release = threading.Event(), threading.Event()

    def run() -> None:
        with store.writer_lock(on_wait=waited.append):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return taken, release, thread


def test_indexes_in_two_schemas_do_not_wait_for_each_other(pg_uri: str) -> None:
    first, second = in_schema(pg_uri, "team_a"), in_schema(pg_uri, "team_b")
    with PgStore(first) as a, PgStore(second) as b, PgStore(first) as a2:
        waited: list[str] = []
        with a.writer_lock():
            taken, release, thread = hold_run_lock(b, waited)
            assert taken.wait(5) and not waited, "team_b's run waited for team_a's"
            release.set()
            thread.join(10)
            taken, release, thread = hold_run_lock(a2, waited)
            deadline = time.monotonic() + 5
            while not waited and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not taken.is_set() and waited, waited
            assert "team_a" in waited[0] and "team_b" not in waited[0], waited  # names the one it waits for
        assert taken.wait(10)
        release.set()
        thread.join(10)
        with a._write():  # a write in one schema does not hold up the other's writers
            wrote = threading.Event()
            w = threading.Thread(target=lambda: (b.put_document(DocumentRecord("d", path="d.md")), wrote.set()),
                                 daemon=True)
            w.start()
            assert wrote.wait(5), "team_b's write waited for team_a's"
        w.join(10)
