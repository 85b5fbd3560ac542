"""End-to-end tests of the `polaris` console script, in subprocesses, on the bundled model."""

from __future__ import annotations

import json
import os
import signal
import sqlite3 as _stdlib_sqlite3  # noqa: F401  (never used to open polaris.db: it cannot load vec0)
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llama_index_polaris.engine.sqlite import SCHEMA_VERSION
from llama_index_polaris.engine.ingest.indexer import EMBED_BATCH_CHUNKS

from llama_index_polaris.engine.sqlite.store import Store
from polaris_testing import index_counts, project_toml

POLARIS = str(Path(sys.executable).with_name("polaris"))
MODEL_TOML = 'model_id = "all-minilm-l6-v2"\n'


def run(*args: str, cwd: Path, check: bool = True, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([POLARIS, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg"), **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"polaris {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def index_json(cwd: Path, *paths: str) -> dict:
    return json.loads(run("index", *paths, "--json", "--quiet", cwd=cwd).stdout)


def write_docs(root: Path, target: str | None = None) -> None:
    """docs/ and a polaris.toml in ``root``; the index is ``target`` (default: root's polaris.db)."""
    (root / "docs" / "auth").mkdir(parents=True)
    (root / "docs" / "auth" / "tokens.md").write_text(
        "# Tokens\n\n## Token lifetime\n\nAccess tokens are valid for fifteen minutes. When a request is"
        " rejected with token_expired, the client exchanges its refresh token for a new pair.\n\n"
        "## Revocation\n\nAdmins can revoke every refresh token of a user from the console.\n"
    )
    (root / "docs" / "config.md").write_text(
        "# Configuration\n\n## Ranking keys\n\nThe fusion constant is `rrf_k`, default 60. Larger values"
        " flatten the rank curve.\n\n## Storage keys\n\nThe index file is set by `db_path`.\n"
    )
    (root / "docs" / "deploy.md").write_text(
        "# Deploys\n\nDeploys go out from the main branch after the checks pass. Roll back with the"
        " previous image tag if error rates climb.\n"
    )
    (root / "polaris.toml").write_text(project_toml(target or str(root / "polaris.db")))


@pytest.fixture
def project(tmp_path: Path, backend_target: str) -> Path:
    """docs/ in tmp_path, indexed (by the tests) into its polaris.db or, named in polaris.toml, a database."""
    write_docs(tmp_path, backend_target)
    return tmp_path


def target_of(root: Path) -> str:
    """The index the project in ``root`` uses (its polaris.toml's db_path)."""
    from llama_index_polaris.engine.config import load_config

    db = load_config(root, use_user_config=False).db_path
    return db if "://" in str(db) else str(root / db)


def counts(root: Path) -> tuple[int, int, int]:
    c = index_counts(target_of(root))
    return c["documents"], c["chunks"], c["vectors"]


def test_index_search_reindex_edit_delete(project: Path) -> None:
    first = index_json(project, "docs")
    assert (first["added"], first["failed"]) == (3, [])
    assert first["chunks_embedded"] == first["chunks"] > 0

    hits = json.loads(run("search", "rrf_k", "--json", "--explain", "-k", "3", cwd=project).stdout)
    assert hits[0]["document"] == "config.md"
    assert hits[0]["heading_path"] == "Configuration > Ranking keys"
    assert hits[0]["score"] == 1.0 and hits[0]["rank"] == 1
    assert set(hits[0]["explain"]) >= {"vector_rank", "vector_distance", "bm25_rank", "bm25_score", "rrf", "boost", "mmr_penalty"}
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))

    again = index_json(project, "docs")
    assert (again["unchanged"], again["chunks_embedded"], again["added"], again["updated"]) == (3, 0, 0, 0)

    tokens = project / "docs" / "auth" / "tokens.md"
    tokens.write_text(tokens.read_text().replace("from the console", "from the admin console"))
    edited = index_json(project, "docs")
    assert (edited["updated"], edited["unchanged"]) == (1, 2)
    assert edited["chunks_embedded"] == 1  # only the changed section; the others reuse their vectors
    assert edited["chunks_reused"] >= 1

    (project / "docs" / "deploy.md").unlink()
    removed = index_json(project, "docs")
    assert removed["removed"] == 1
    docs, chunks, vecs = counts(project)
    assert docs == 2 and chunks == vecs
    gone = json.loads(run("search", "deploys", "--json", "--mode", "bm25", cwd=project).stdout)
    assert "deploy.md" not in {h["document"] for h in gone}  # nor its full-text rows


def test_search_output_for_people(project: Path) -> None:
    index_json(project, "docs")
    out = run("search", "when does an access token expire", "-k", "2", cwd=project).stdout
    assert out.splitlines()[0].startswith(" 1. 1.000  auth/tokens.md  ›  Tokens > Token lifetime")
    status = json.loads(run("status", "--json", cwd=project).stdout)
    assert status["model_id"] == "all-minilm-l6-v2" and status["embedding_dim"] == 384
    assert (status["documents"], status["schema_version"]) == (3, schema_version_of(target_of(project)))
    assert status["config"]["model_id"]["source"].endswith("polaris.toml")


def test_scoped_search(project: Path) -> None:
    index_json(project, "docs")
    hits = json.loads(run("search", "tokens", "--json", "--document", "config.md", cwd=project).stdout)
    assert hits and {h["document"] for h in hits} == {"config.md"}
    none = run("search", "tokens", "--json", "--collection", "nope", cwd=project, check=False)
    assert none.returncode == 1 and none.stdout == ""
    error = json.loads(none.stderr)["error"]  # under --json, the error is JSON too
    assert error["type"] == "ScopeError"
    assert error["message"].startswith("no collection 'nope' in ") and "which has 1: 'default'." in error["message"]


def schema_version_of(target: str) -> int:
    """The schema version this Polaris writes on ``target``'s backend (each numbers its own migrations)."""
    from llama_index_polaris.engine.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION

    return PG_SCHEMA_VERSION if "://" in target else SCHEMA_VERSION


def _many_files(root: Path, n: int, target: str | None = None) -> None:
    docs = root / "many"
    docs.mkdir()
    for i in range(n):
        (docs / f"note{i:03d}.md").write_text(f"# Note {i}\n\nThis note number {i} records decision {i * 7} of the team.\n")
    (root / "polaris.toml").write_text(project_toml(target or str(root / "polaris.db")))


def _completed(db: Path | str) -> int:
    return index_counts(str(db))["completed"]


def _chunks_per_document(target: str) -> list[tuple[str, int]]:
    """(status, chunks) of every document, on either backend."""
    sql = "SELECT d.status, count(c.id) FROM documents d LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.id"
    if "://" in target:
        import psycopg

        with psycopg.connect(target) as conn:
            return conn.execute(sql).fetchall()
    with Store(target, readonly=True) as s:
        return s.conn.execute(sql).fetchall()


def _full_text_is_whole(target: str) -> None:
    """FTS5's integrity-check on the file; on Postgres the BM25 counts agree with the chunks."""
    if "://" in target:
        from llama_index_polaris.engine.backends import open_store

        with open_store(target, readonly=True) as s:
            assert s.quick_check() == ["ok"]
        return
    with Store(target) as s:  # FTS5's integrity-check is a write statement
        s.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")


N_INTERRUPT = 5 * EMBED_BATCH_CHUNKS  # one-chunk files; it commits every EMBED_BATCH_CHUNKS: the run outlives its first commit


def _interrupt_and_resume(root: Path, sig: int, target: str) -> None:
    _many_files(root, N_INTERRUPT, target)
    db = target
    # SIGINT at its default: a suite started in the background of a non-interactive shell
    # passes SIGINT on as ignored, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen([POLARIS, "index", "many", "--quiet"], cwd=root, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XDG_CONFIG_HOME": str(root / ".xdg")},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while _completed(db) == 0 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGSTOP)  # frozen where it was seen: it cannot finish before the signal lands
    assert proc.poll() is None and _completed(db) < N_INTERRUPT, "the run finished before it could be interrupted"
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    proc.wait(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "run the same command to resume" in proc.stderr.read()
    done = _completed(db)
    assert 0 < done < N_INTERRUPT
    rows = _chunks_per_document(db)  # every committed document is whole, nothing half-written
    assert all(n == 1 for status, n in rows if status == "completed")
    assert all(n == 0 for status, n in rows if status != "completed")
    if sig == signal.SIGINT:  # the documents it had started and not written are put back, not left processing
        assert not [status for status, _ in rows if status == "processing"], rows
    c = index_counts(db)
    assert c["chunks"] == c["vectors"]
    _full_text_is_whole(db)
    resumed = index_json(root, "many")
    assert resumed["unchanged"] == done
    assert resumed["added"] + resumed["updated"] == N_INTERRUPT - done
    assert _completed(db) == N_INTERRUPT


def test_sigint_mid_run_then_resume(tmp_path: Path, backend_target: str) -> None:
    _interrupt_and_resume(tmp_path, signal.SIGINT, backend_target)


def test_sigkill_mid_run_then_resume(tmp_path: Path, backend_target: str) -> None:
    _interrupt_and_resume(tmp_path, signal.SIGKILL, backend_target)


def test_two_index_runs_and_a_search_meanwhile(tmp_path: Path, backend_target: str) -> None:
    _many_files(tmp_path, 100, backend_target)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / ".xdg")}
    cmd = [POLARIS, "index", "many", "--quiet", "--json"]
    a = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    b = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    db = backend_target
    while _completed(db) == 0 and a.poll() is None and b.poll() is None:
        time.sleep(0.02)
    for p in (a, b):  # a run that ended before anything was committed says why
        assert p.poll() in (None, 0), p.communicate()[1]
    hits = json.loads(run("search", "decision", "--json", "--mode", "bm25", cwd=tmp_path).stdout)
    assert hits, "a search during an index run answers from the committed state"
    reports = [json.loads(p.communicate(timeout=240)[0]) for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0
    # one run embedded everything, the other found it done: nothing was embedded twice
    assert sum(r["chunks_embedded"] for r in reports) == 100
    assert sorted(r["unchanged"] for r in reports) == [0, 100]
    assert counts(tmp_path) == (100, 100, 100)


def test_a_second_run_says_it_waits_for_the_first(tmp_path: Path, backend_target: str) -> None:
    from llama_index_polaris.engine.backends import open_store

    _many_files(tmp_path, 3, backend_target)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / ".xdg")}
    first = open_store(backend_target)
    with first.writer_lock():  # this test process is "the first run"
        b = subprocess.Popen([POLARIS, "index", "many", "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        line = b.stderr.readline()
        assert "another `polaris index` run" in line and "holds" in line and "waiting" in line
        if "://" not in backend_target:  # the lock file records its holder's pid; a server lock has none to read
            assert f"(pid {os.getpid()}) holds" in line
        time.sleep(0.5)
        assert b.poll() is None and _completed(backend_target) == 0
    first.close()
    out, _ = b.communicate(timeout=240)
    assert b.returncode == 0 and "3 added" in out


def test_bad_inputs_are_clear_and_lose_nothing(tmp_path: Path, backend_target: str) -> None:
    write_docs(tmp_path, backend_target)
    docs = tmp_path / "docs"
    (docs / "latin1.md").write_bytes("# Caf\xe9\n\nna\xefve text\n".encode("latin-1"))
    (docs / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00binary")
    (docs / "big.md").write_bytes(b"# Big\n\n" + b"word " * (11 * 10**6 // 5))
    locked = docs / "locked.md"
    locked.write_text("# Locked\n\nsecret\n")
    locked.chmod(0)
    os.symlink(docs, docs / "loop")  # a symlinked directory is not followed
    (tmp_path / "empty").mkdir()
    try:
        report = index_json(tmp_path, "docs")
    finally:
        locked.chmod(0o644)
    failed = dict(report["failed"])
    assert "not valid UTF-8" in failed["latin1.md"] and "iconv" in failed["latin1.md"]
    assert "binary" in failed["binary.md"]
    assert "too large" in failed["big.md"] and "max_file_mb" in failed["big.md"]
    if os.geteuid() != 0:  # root reads anything
        assert "permission" in failed["locked.md"]
    assert report["added"] >= 3

    missing = run("index", "no/such/dir", cwd=tmp_path, check=False)
    assert missing.returncode == 1 and "no/such/dir: no such file or directory" in missing.stderr
    empty = json.loads(run("index", "empty", "--json", "--quiet", "--db", "empty.db", cwd=tmp_path).stdout)
    assert empty["added"] == 0 and empty["failed"] == []


def index_state(target: str) -> Any:
    """All an index holds but its vectors (the file's bytes; a database's rows and meta)."""
    if "://" not in target:
        return Path(target).read_bytes()
    from llama_index_polaris.engine.backends import open_store

    with open_store(target, readonly=True) as s:
        return [(kind, repr(row)) for kind, row in s.export_rows() if kind != "chunks"], index_counts(target)


def test_other_model_and_bad_config_refused_before_work(project: Path) -> None:
    index_json(project, "docs")
    target = target_of(project)
    before = index_state(target)
    other = run("index", "docs", "--model", "nomic-embed-text-v1.5", cwd=project, check=False)
    assert other.returncode == 1
    # refused (wrong model) or unavailable offline: either way nothing changed
    assert "all-minilm-l6-v2" in other.stderr
    (project / "polaris.toml").write_text(project_toml(target) + "mmr_lamda = 0.5\n")
    bad = run("search", "tokens", cwd=project, check=False)
    assert bad.returncode == 1
    assert "polaris.toml: unknown key 'mmr_lamda'; did you mean 'mmr_lambda'?" in bad.stderr
    (project / "polaris.toml").write_text("model_id = [unclosed\n")
    broken = run("status", cwd=project, check=False)
    assert broken.returncode == 1 and "polaris.toml: not valid TOML" in broken.stderr
    assert index_state(target) == before


def test_search_does_not_import_llama_index(project: Path) -> None:
    index_json(project, "docs")
    code = (
        "import sys; from llama_index_polaris.cli import main; main(['search', 'tokens', '--json']);"
        "bad = [m for m in sys.modules if m.startswith(('llama_index.', 'datasette'))] + "
        "[m for m in sys.modules if m == 'llama_index'];"
        "sys.stderr.write(repr(bad)); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "XDG_CONFIG_HOME": str(project / ".xdg")})
    assert proc.returncode == 0, proc.stderr


def test_a_model_that_cannot_load_leaves_no_empty_index(project: Path) -> None:
    target = target_of(project)
    new = "new.db" if "://" not in target else target  # a fresh database: nothing in it yet
    # offline: the model is not in the cache and cannot be fetched (at once, without the hub's retries)
    env_offline = run("index", "docs", "--model", "mxbai-embed-large-v1", "--db", new, cwd=project, check=False,
                      env={"POLARIS_OFFLINE": "1"})
    assert env_offline.returncode == 1
    assert 'model_id = "all-minilm-l6-v2"' in env_offline.stderr  # names the bundled alternative
    assert not list(project.glob("new.db*"))
    if "://" in target:
        import psycopg

        with psycopg.connect(target) as conn:  # no tables written for an index that was never built
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()").fetchone()[0] == 0


def test_a_query_spelled_like_a_flag_is_the_query(project: Path) -> None:
    """`polaris search --revoke-all` would be an unknown option to argparse; alone, it is the query."""
    from llama_index_polaris.cli import build_parser, flag_query

    parser = build_parser()
    assert flag_query(["search", "--locked"], parser) == ["search", "--", "--locked"]
    assert flag_query(["search", "-k", "3", "--mode", "bm25", "-v"], parser) == ["search", "-k", "3", "--mode", "bm25",
                                                                                 "--", "-v"]
    assert flag_query(["search", "--mode=bm25", "--locked"], parser) == ["search", "--mode=bm25", "--", "--locked"]
    for unchanged in (["search", "foo", "--bar"], ["search", "--", "--x"], ["search", "--a", "--b"], ["index", "--x"]):
        assert flag_query(unchanged, parser) == unchanged
    (project / "docs" / "admin.md").write_text("# Admin\n\n## Flags\n\nPass `--revoke-all` to revoke every token.\n")
    index_json(project, "docs")
    hits = json.loads(run("search", "--revoke-all", "-k", "1", "--json", cwd=project).stdout)
    assert [(h["document"], h["heading_path"]) for h in hits] == [("admin.md", "Admin > Flags")]
    assert "unrecognized arguments: --bar" in run("search", "foo", "--bar", cwd=project, check=False).stderr


def test_the_snippet_of_a_lookup_shows_where_the_identifier_is_named() -> None:
    from llama_index_polaris.cli import snippet

    text = "Pass --out-dir to copy the artifacts out to a dir. " * 8 + "Cargo sets OUT_DIR for build scripts."
    assert "Cargo sets \033[1;33mOUT_DIR\033[0m for" in snippet(text, "OUT_DIR", color=True, width=80)
    assert snippet(text, "copy dir", width=80).startswith("Pass --out-dir to copy")  # words: the first of them


def test_the_terminal_marks_the_words_the_page_marks() -> None:
    """The CLI's excerpt marks through the engine's Highlighter, as the page and the notebook
    do: "expired" is marked inside ``token_expired`` (unicode61 splits it at the underscore)."""
    from llama_index_polaris.cli import snippet
    from llama_index_polaris.engine.search.highlight import Highlighter

    text = "When the access token lapses the API answers 401 with the code token_expired; refresh it."
    line = snippet(text, "expired", color=True, width=200)
    assert "token_\033[1;33mexpired\033[0m" in line
    page = Highlighter("expired").mark(text)
    assert page.count("<mark>") == line.count("\033[1;33m") == 1


def test_a_database_password_is_never_shown(tmp_path: Path, pg_uri: str) -> None:
    """Postgres only (a file has no password): `polaris status` and the MCP server name the database
    without it (the session's server trusts its socket, so any password connects)."""
    from mcp_testing import McpSession, stdio

    secret = pg_uri.replace("postgres:@", "postgres:s3cret-pw@", 1)
    assert "s3cret-pw" in secret
    write_docs(tmp_path, secret)
    index_json(tmp_path, "docs")
    status = run("status", "--json", cwd=tmp_path)
    assert "s3cret-pw" not in status.stdout + status.stderr and json.loads(status.stdout)["db_path"].count("***") == 1
    plain = run("status", cwd=tmp_path)
    assert "s3cret-pw" not in plain.stdout + plain.stderr
    session = McpSession(stdio(tmp_path))
    try:
        answer = session.call("status")
        assert "s3cret-pw" not in json.dumps(answer.structured_content) + answer.content[0].text
        missing = session.call("reindex", {"collection": "nope"})  # not offered read-only: an error either way
        assert "s3cret-pw" not in missing.content[0].text
    finally:
        session.close()


# -- newcomer frictions (#34, item 13) ---------------------------------------------------------------
def test_version_is_the_installed_package_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    shown = run("--version", cwd=tmp_path)
    assert shown.stdout == f"polaris {version('llama-index-polaris')}\n" and shown.stderr == ""


def json_error(proc: subprocess.CompletedProcess, code: int = 1) -> dict:
    """The error a command run with --json printed: one JSON object on stderr, nothing on stdout."""
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "" or json.loads(proc.stdout) is not None  # a report already printed stays JSON
    error = json.loads(proc.stderr)["error"]
    assert set(error) == {"type", "message"} and error["type"] and error["message"]
    return error


# the commands that take --json: argv that fails, and the error's type
JSON_FAILURES = {
    "index": (["index", "no/such/dir"], "InputError"),
    "search": (["search", "tokens", "--collection", "nope"], "ScopeError"),
    "status": (["status", "--config", "missing.toml"], "ConfigError"),
    "models": (["models", "--config", "missing.toml"], "ConfigError"),
    "eval": (["eval", "no-beir-here"], "InputError"),
    "tune": (["tune", "no-labels.jsonl"], "InputError"),
    "backup": (["backup", "polaris.toml"], "InputError"),
    "copy": (["copy", "no-such.db", "new.db"], "InputError"),
    "remove": (["remove", "--collection", "nope"], "ScopeError"),
}


def test_every_command_that_takes_json_says_its_errors_in_json(project: Path) -> None:
    from llama_index_polaris.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {name for name, p in commands.items() if "--json" in p._option_string_actions} == set(JSON_FAILURES)
    index_json(project, "docs")
    for command, (argv, kind) in JSON_FAILURES.items():
        error = json_error(run(*argv, "--json", cwd=project, check=False))
        assert error["type"] == kind, (command, error)
        plain = run(*argv, cwd=project, check=False)  # without --json: the same message, as text
        assert plain.returncode == 1 and plain.stderr == f"polaris: error: {error['message']}\n", command
    scope = json_error(run("search", "tokens", "--json", "--collection", "nope", cwd=project, check=False))
    assert scope["message"].startswith("no collection 'nope' in ") and "which has 1: 'default'." in scope["message"]
    usage = json_error(run("search", "--json", "-k", "many", "tokens", cwd=project, check=False), code=2)
    assert usage == {"type": "UsageError", "message": "polaris search: argument -k: invalid int value: 'many'"}
    nothing = json_error(run("remove", "--json", cwd=project, check=False), code=2)  # a usage error, as the README says
    assert nothing["type"] == "UsageError" and "name what to remove" in nothing["message"]
    assert run("remove", cwd=project, check=False).returncode == 2


def test_backup_copy_and_remove_print_their_summary_as_json(project: Path) -> None:
    index_json(project, "docs")
    target = target_of(project)
    copied = json.loads(run("copy", target, str(project / "copy.db"), "--json", cwd=project).stdout)
    assert copied == {"target": str(project / "copy.db"), "documents": 3, "chunks": counts(project)[1]}
    if "://" not in target:  # a database is backed up with `polaris copy` or pg_dump (its error is the test above's)
        backup = json.loads(run("backup", str(project / "b.db"), "--json", cwd=project).stdout)
        assert backup == {"target": str(project / "b.db"), "documents": 3, "chunks": copied["chunks"]}
    removed = json.loads(run("remove", "docs/deploy.md", "--json", cwd=project).stdout)
    assert removed == {"removed": 1, "collection": "default"}
    assert counts(project)[0] == 2


def test_every_command_names_a_collection_as_search_does(project: Path) -> None:
    """`remove --collection Default` is refused with search's words (the engine's one rule), not "0 removed"."""
    index_json(project, "docs")
    searched = run("search", "tokens", "--collection", "Default", cwd=project, check=False)
    assert searched.returncode == 1 and "Did you mean 'default'?" in searched.stderr
    for argv in (["remove", "--collection", "Default"], ["remove", "docs/deploy.md", "--collection", "Default"]):
        removed = run(*argv, cwd=project, check=False)
        assert (removed.returncode, removed.stdout, removed.stderr) == (1, "", searched.stderr), argv
    assert counts(project)[0] == 3


def test_remove_refuses_paths_that_match_nothing(project: Path) -> None:
    """A path outside the collection's root, or naming no indexed file, is an error naming the roots
    (and the nearest names); nothing is removed, not even the paths that did match."""
    index_json(project, "docs")
    (project / "notes").mkdir()
    (project / "notes" / "plan.md").write_text("# Plan\n\nShip the release on Friday.\n")
    run("index", "notes", "--collection", "notes", "--quiet", cwd=project)
    root = str((project / "docs").resolve())

    outside = run("remove", "../elsewhere", cwd=project, check=False)
    assert outside.returncode == 1 and outside.stdout == ""
    assert outside.stderr.startswith(f"polaris: error: {project.parent / 'elsewhere'} is outside")
    assert f"is outside the root of collection 'default' ({root}). Nothing was removed" in outside.stderr
    other = run("remove", "notes/plan.md", cwd=project, check=False)
    assert other.returncode == 1 and "collection 'notes'" in other.stderr and "--collection notes" in other.stderr
    typo = run("remove", "docs/deplyo.md", "docs/deploy.md", cwd=project, check=False)
    assert typo.returncode == 1 and typo.stderr.startswith("polaris: error: no indexed file of collection 'default' is at"
                                                           f" {project / 'docs' / 'deplyo.md'}. Did you mean 'deploy.md'?")
    assert counts(project)[0] == 4  # deploy.md too: the run removed nothing
    assert run("remove", "notes/plan.md", "--collection", "notes", cwd=project).stdout == "1 removed\n"


def test_a_documents_control_characters_reach_the_terminal_as_escapes(project: Path) -> None:
    """A document cannot recolour the output, retitle the window, clear the screen or reverse the
    text of a terminal that shows `polaris search` or `status`: every control character but
    newline and tab, and the marks that reorder text, are written as escapes; --json keeps the
    text as stored (JSON escapes it itself)."""
    hostile = "The \x1b[31mgannet\x1b[0m harbour has \x1b]0;pwned\x07 a title, \x1b[2J a clear and \u202eright to left."
    (project / "docs" / "ansi.md").write_text(f"# Harbour\n\n{hostile}\n")
    (project / "docs" / "bad\x1b[2Jname.md").write_bytes(b"# Bad\n\n\xff\n")
    index = run("index", "docs", cwd=project)
    out = run("search", "harbour title clear", "-k", "1", "--context", "section", cwd=project).stdout
    status = run("status", cwd=project).stdout
    for text in (out, status, index.stderr):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert "\\x1b[31mgannet\\x1b[0m" in out and "\\x07" in out and "\\u202e" in out
    assert "bad\\x1b[2Jname.md" in index.stderr and "bad\\x1b[2Jname.md" in status
    hit = json.loads(run("search", "harbour title clear", "-k", "1", "--json", cwd=project).stdout)[0]
    assert hostile in hit["text"]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_without_utf8_gets_escapes_never_a_crash(project: Path, encoding: str) -> None:
    """Windows code pages and PYTHONIOENCODING: every hit's heading line holds a '›', and Chinese
    text fits no code page. Text output writes what the encoding lacks as escapes; --json escapes
    it as JSON does, so the answer parses to the stored text."""
    (project / "docs" / "zh.md").write_text("# 状态提升\n\n当两个组件的状态需要同步时，把状态提升到它们最近的共同父组件。\n")
    run("index", "docs", cwd=project)
    env = {"PYTHONIOENCODING": encoding}
    text = run("search", "状态提升", "-k", "1", cwd=project, env=env)
    assert "Traceback" not in text.stderr and "\\u203a" in text.stdout and "\\u72b6" in text.stdout
    hits = json.loads(run("search", "状态提升", "-k", "1", "--json", cwd=project, env=env).stdout)
    assert hits[0]["heading_path"] == "状态提升"
    error = run("search", "x", "--collection", "中文", "--json", cwd=project, env=env, check=False)
    assert error.returncode == 1 and json.loads(error.stderr)["error"]["message"].startswith("no collection '中文'")


def test_a_name_stays_one_line_in_every_listing(project: Path) -> None:
    """A file or folder name with a newline, a tab, an escape or a reversing mark cannot add a line to
    what the CLI and the MCP server list (a name could forge a listing entry, "\\n- secret.md"), nor
    recolour or reverse it: names are written as escapes (``\\n``), a section's own text keeps its lines."""
    from mcp_testing import McpSession, stdio, text_of

    forged = "plan.md\n- forged.md\t\x1b[31m\u202eright.md"
    (project / "docs" / "odd\nfolder").mkdir()
    (project / "docs" / "odd\nfolder" / forged).write_text("# Ferry\n\nThe ferry leaves the harbour at noon.\n\nLast boat at six.\n")
    run("index", "docs", "--quiet", cwd=project)
    escaped = "odd\\nfolder/plan.md\\n- forged.md\\t\\x1b[31m\\u202eright.md"
    out = run("search", "ferry harbour noon", "-k", "1", "--context", "section", cwd=project).stdout
    assert escaped in out.splitlines()[0] and "Last boat at six." in out, out  # the section's own lines stay lines

    def mcp(*calls: tuple[str, dict]) -> dict[str, str]:
        session = McpSession(stdio(project, "--db", target_of(project)))
        try:
            return {tool: text_of(session.call(tool, args)) for tool, args in calls}
        finally:
            session.close()

    texts = {"CLI search": out, **mcp(("list_documents", {}), ("search", {"query": "ferry harbour noon", "k": 3}))}
    (project / "docs" / "odd\nfolder" / forged).unlink()
    texts.update({"CLI status": run("status", cwd=project).stdout, **mcp(("status", {}))})
    for where, text in texts.items():
        assert escaped in text, (where, text)
        assert not any(line.lstrip().startswith("- forged") for line in text.splitlines()), (where, text)
        assert "\x1b" not in text and "\u202e" not in text, (where, text)


def test_a_root_and_a_collection_name_stay_one_line_in_status(project: Path) -> None:
    """A root folder and a collection named with a newline and an escape cannot forge a status line
    ("on disk   every file as indexed") in the CLI or the MCP server; the suggested command quotes
    them for the shell, on one line."""
    from mcp_testing import McpSession, stdio, text_of

    folder = project / "evil\non disk   every file as indexed\x1b[2K"
    folder.mkdir()
    (folder / "a.md").write_text("# Lantern\n\nThe lantern is lit at dusk.\n")
    run("index", folder.name, "--collection", "c\nx", "--quiet", cwd=project)
    (folder / "a.md").write_text("# Lantern\n\nThe lantern is lit at dusk and put out at dawn.\n")
    session = McpSession(stdio(project, "--db", target_of(project)))
    try:
        texts = {"CLI status": run("status", cwd=project).stdout, "MCP status": text_of(session.call("status"))}
    finally:
        session.close()
    for where, text in texts.items():
        lines = text.splitlines()
        assert not any(line.startswith("on disk   every file as indexed") for line in lines), (where, text)
        assert not any(line.strip() in ("x", "x:", "x'") or line.startswith("x") for line in lines), (where, text)
        assert "\x1b" not in text and "c\\nx" in text, (where, text)
        update = [line for line in lines if "update: polaris index" in line]
        assert update and all("'" in line and "\\n" in line for line in update), (where, update)
