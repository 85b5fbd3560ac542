"""Helpers shared by the tests (plain functions; the fixtures are in conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from llama_index_polaris.engine.sqlite.store import ChunkRecord, ModelBinding

REPO = Path(__file__).resolve().parents[1]
FAKE_FINGERPRINT = "f" * 64


def examples(n: int) -> int:
    """A property's example count: ``n`` (sized for CI) times ``$POLARIS_EXAMPLES`` (default 1;
    e.g. ``POLARIS_EXAMPLES=5`` for a deeper run before a release)."""
    return max(1, round(n * float(os.environ.get("POLARIS_EXAMPLES") or 1)))


def unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """``n`` deterministic L2-normalised float32 vectors of size ``dim``."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype("<f4")
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_chunks(doc_id: str, n: int, word: str = "chunk") -> list[ChunkRecord]:
    """``n`` chunks whose node ids and texts are unique and searchable by ``word``."""
    return [
        ChunkRecord(
            node_id=f"{doc_id}:{i}",
            text=f"{word} number {i} of {doc_id}",
            ordinal=i,
            heading_path=f"{doc_id} > part {i}",
            start_char=i * 100,
            end_char=i * 100 + 50,
        )
        for i in range(n)
    ]


def fake_binding(dim: int = 4, model_id: str | None = None) -> ModelBinding:
    """A model binding for a model that does not exist: only its name and size matter."""
    return ModelBinding(model_id or f"fake-{dim}", dim, FAKE_FINGERPRINT, "doc: ", "query: ")


def start_script(tmp_path: Path, name: str, code: str, *args: object) -> subprocess.Popen:
    """Run ``code`` as ``tmp_path/name`` in a fresh interpreter on this checkout; stdout and stderr piped."""
    script = tmp_path / name
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_mid_transaction(tmp_path: Path, writer: str, db_path: Path, n: int = 20000) -> str:
    """Run ``writer`` (argv: db path, n) until it prints "in-transaction ...", SIGKILL it there.

    Returns that line. The writer must then block with its transaction still open.
    """
    proc = start_script(tmp_path, "writer.py", writer, db_path, n)
    try:
        line = proc.stdout.readline()
        assert line.startswith("in-transaction"), (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return line


def copy_index(src: Path, dest_dir: Path) -> Path:
    """``src`` and its WAL copied into ``dest_dir`` as polaris.db."""
    import shutil

    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", dest_dir / f"polaris.db{suffix}")
    return dest_dir / "polaris.db"


# -- both backends ---------------------------------------------------------------------------
BACKENDS = ("sqlite", "postgres")


def new_database(server_uri: str, prefix: str = "polaris") -> str:
    """A new, empty database on the session's PostgreSQL server; its URI. (The server, and every
    database on it, goes at the end of the session.)"""
    import urllib.parse
    import uuid

    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    parts = urllib.parse.urlsplit(server_uri)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def module_target(request, tmp_path_factory) -> str:
    """For a module-scoped fixture with ``params=BACKENDS``: a polaris.db path in a new folder, or
    a new database on the session's server (``pg_server``), built once per module and backend."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("sqlite") / "polaris.db")
    return new_database(request.getfixturevalue("pg_server"), "polaris_mod")


def project_toml(target: str, model_id: str = "all-minilm-l6-v2") -> str:
    """A polaris.toml naming the model, and for a Postgres ``target`` its URI as ``db_path`` (a file
    target is the default polaris.db of the folder, so it is left unnamed): every command run in
    the folder then uses that index, as a user's project does."""
    text = f'model_id = "{model_id}"\n'
    if target.startswith(("postgresql://", "postgres://")):
        text += f'db_path = "{target}"\n'
    return text


def index_counts(target: str) -> dict[str, int]:
    """Documents, completed documents, chunks and chunks with a vector, read from the backend's own
    tables (0 each when there is no index yet)."""
    from llama_index_polaris.engine.storage import is_server_uri

    if is_server_uri(target):
        import psycopg

        sql = ("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM documents WHERE status = 'completed'),"
               " (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks WHERE embedding IS NOT NULL)")
        try:
            with psycopg.connect(target) as conn:
                row = conn.execute(sql).fetchone()
        except psycopg.Error:
            row = (0, 0, 0, 0)
    else:
        from llama_index_polaris.engine.sqlite.store import Store

        sql = ("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM documents WHERE status = 'completed'),"
               " (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks_vec)")
        if not Path(target).exists():
            return dict.fromkeys(("documents", "completed", "chunks", "vectors"), 0)
        try:
            with Store(target, readonly=True) as s:
                row = s.conn.execute(sql).fetchone()
        except Exception:
            row = (0, 0, 0, 0)
    return dict(zip(("documents", "completed", "chunks", "vectors"), row))


def database_from_template(server_uri: str, template_uri: str, prefix: str = "polaris") -> str:
    """A new database on the session's server made as a copy of ``template_uri``'s (no session may
    be open on the template); its URI."""
    import urllib.parse
    import uuid

    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    template = urllib.parse.urlsplit(template_uri).path.lstrip("/")
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    parts = urllib.parse.urlsplit(server_uri)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


class DocsProject(NamedTuple):
    """A folder of Markdown pages indexed once on one backend: its root, the index and whether it is SQLite."""

    root: Path
    db: str
    sqlite: bool


def docs_project(tmp_path_factory, targets, pages: dict[str, str], name: str = "docs",
                 model_id: str = "all-minilm-l6-v2") -> DocsProject:
    """``pages`` (file name -> Markdown) written under ``<root>/docs`` and indexed with the project's
    polaris.toml (``model_id``), into a polaris.db in the root or a new database of ``targets``."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    root = tmp_path_factory.mktemp(name)
    (root / "docs").mkdir()
    for file, text in pages.items():
        (root / "docs" / file).write_text(text)
    (root / "polaris.toml").write_text(f'model_id = "{model_id}"\n')
    db = str(root / "polaris.db") if targets.backend == "sqlite" else targets.new()
    with PolarisIndex(db, config=load_config(root, use_user_config=False)) as index:
        index.index_paths([root / "docs"])
    return DocsProject(root, db, targets.backend == "sqlite")
