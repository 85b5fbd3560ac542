"""sqlite-vec's tables, hidden the way Datasette hides full-text tables.

Datasette hides an FTS virtual table and its shadow tables (``chunks_fts_data`` ...)
because they are an index, not data. A ``vec0`` table is the same kind of thing: the
vectors of ``chunks.embedding`` again, plus six shadow tables of packed blobs
(``chunks_vec_info``, ``_chunks``, ``_rowids``, ``_vector_chunks00``,
``_metadatachunks00``, ``_metadatatext00``). The plugin marks every ``vec0`` table of a
served file, and the tables named after it, ``hidden`` through the ``get_metadata``
hook; they stay one click away (Datasette's "hidden tables" link) and queryable.

``get_metadata`` is synchronous and called many times per request, so the answer is
cached per file and read again only when the file or its WAL changes on disk.

Polaris's BM25 posting lists (``chunks_bm25`` and the tables named after it: packed
blobs derived from ``chunks_fts``) are an index in the same sense, hidden alike in a file
that Polaris made (one with ``polaris_meta``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from datasette.utils import sqlite3

from llama_index_polaris.engine.sqlite.connect import reader_uri
from llama_index_polaris.engine.errors import DatabaseError

VEC0_TABLES = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage = 0"
    " AND sql LIKE 'CREATE VIRTUAL TABLE%USING vec0%'"
)

POLARIS_INDEXES = ("chunks_bm25",)


def hidden_tables(db: Any) -> tuple[str, ...]:
    """The vec0 tables of a Datasette database and their shadow tables (none for memory)."""
    if db.is_memory or not db.path:
        return ()
    path = str(db.path)
    try:
        signature = (_stat(path), _stat(path + "-wal"))
    except OSError:
        return ()
    return _vec0_tables(path, bool(db.is_mutable), signature)


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if path.endswith("-wal"):
            return None
        raise
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=128)
def _vec0_tables(path: str, mutable: bool, signature: Any) -> tuple[str, ...]:
    try:
        uri = reader_uri(path) if mutable else Path(path).resolve().as_uri() + "?immutable=1"
        conn = sqlite3.connect(uri, uri=True)
    except (sqlite3.Error, DatabaseError):  # a WAL this folder cannot read: hide nothing
        return ()
    try:
        vec0 = [r[0] for r in conn.execute(VEC0_TABLES)]
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.Error:  # not a database, locked, encrypted: hide nothing
        return ()
    finally:
        conn.close()
    derived = vec0 + (list(POLARIS_INDEXES) if "polaris_meta" in tables else [])
    return tuple(t for t in tables if any(t == v or t.startswith(v + "_") for v in derived))


def metadata(datasette: Any) -> dict[str, Any] | None:
    """``{"databases": {name: {"tables": {table: {"hidden": True}}}}}`` for the served files."""
    databases = {}
    for name, db in datasette.databases.items():
        names = hidden_tables(db)
        if names:
            databases[name] = {"tables": {t: {"hidden": True} for t in names}}
    return {"databases": databases} if databases else None
