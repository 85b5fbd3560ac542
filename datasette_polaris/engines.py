"""The engine behind the plugin: one read-only ``PolarisIndex`` per database file, made once
per process and only when first needed.

Datasette opens many connections (one per thread per database); none of them builds
anything heavy. The ONNX embedder exists once per (model, dim) through the engine's own
cache. The index's config is the ``polaris.toml`` beside the database file.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.sqlite.connect import INSTALL_HINT, read_immutably, reader_uri
from llama_index_polaris.engine.errors import DatabaseError
from llama_index_polaris.engine.index import PolarisIndex

log = logging.getLogger(__name__)

POLARIS_TABLES = frozenset({"polaris_meta", "documents", "chunks"})

_LOCK = threading.Lock()
_INDEXES: dict[tuple[str, int], PolarisIndex] = {}
_warned_no_extensions = False


def index_for(path: str) -> PolarisIndex:
    """The read-only PolarisIndex of the file at ``path``; a file replaced on disk gets a fresh one."""
    real = os.path.realpath(path)
    try:
        key = (real, os.stat(real).st_ino)
    except OSError as exc:
        raise DatabaseError(f"{path}: cannot be read ({exc.strerror or exc}).") from exc
    with _LOCK:
        index = _INDEXES.get(key)
        if index is None:
            index = _INDEXES[key] = PolarisIndex(real, config=load_config(Path(real).parent), readonly=True)
        return index


def open_indexes() -> list[str]:
    """The files this process has opened an index for (for tests and diagnostics)."""
    with _LOCK:
        return [path for path, _ in _INDEXES]


def database_path(datasette: Any, database: str) -> str | None:
    """The file behind a Datasette database name, or None (in-memory, unknown)."""
    db = datasette.databases.get(database)
    if db is None or db.is_memory or not db.path:
        return None
    return str(db.path)


async def is_polaris(db: Any) -> bool:
    """True when a Datasette database has the Polaris tables."""
    if db.is_memory or not db.path:
        return False
    return POLARIS_TABLES <= set(await db.table_names())


def load_sqlite_vec(conn: Any) -> bool:
    """Load sqlite-vec into one of Datasette's connections; warn once if this SQLite cannot."""
    global _warned_no_extensions
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            conn.enable_load_extension(False)
        return True
    except Exception as exc:  # AttributeError without enable_load_extension; driver errors differ
        if not _warned_no_extensions:
            _warned_no_extensions = True
            log.warning(
                "datasette-polaris: sqlite-vec could not be loaded into Datasette's connections (%s)."
                " Pages and SQL that need chunks_vec will fail; everything else works. %s",
                exc, INSTALL_HINT,
            )
        return False


def serve_read_only_folders(datasette: Any) -> list[str]:
    """Serve a Polaris file that SQLite can only read as immutable here (its folder read-only
    and no ``-shm`` beside it: ``read_immutably``) the way `datasette -i` would: Datasette's
    own ``mode=ro`` connections would fail on every page with "attempt to write a readonly
    database". Nobody can write such a file, so there is nothing an immutable reader misses."""
    names = []
    for name, db in datasette.databases.items():
        if not db.is_mutable or db.is_memory or not db.path:
            continue
        try:
            if read_immutably(db.path) and _has_polaris_tables(db.path):
                db.is_mutable = False
                names.append(name)
        except (DatabaseError, OSError):  # a WAL only a -shm can read: Datasette's error page says so
            continue
    return names


def _has_polaris_tables(path: str) -> bool:
    from datasette.utils import sqlite3

    try:
        conn = sqlite3.connect(reader_uri(path), uri=True)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return POLARIS_TABLES <= names


def warm(paths: list[str]) -> None:
    """Open the engine of each Polaris file and load its model now, so no query pays for it."""
    for path in paths:
        try:
            index = index_for(path)
        except DatabaseError:  # not a Polaris index: nothing to warm
            continue
        try:
            index.embedder.embed_query("warm up")
        except Exception as exc:  # a broken index must not stop Datasette starting
            log.warning("datasette-polaris: could not load the model for %s: %s", path, exc)
