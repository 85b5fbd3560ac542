"""Which backend an index lives in: a ``postgresql://`` URI is Postgres, anything else a file.

The one place that imports the backends (``sqlite/``, ``postgres/``): everything else talks to
the storage contract (``storage/``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .storage import Storage, is_server_uri


def open_store(target: str | os.PathLike[str], **kwargs: Any) -> "Storage":
    """The store for ``target``: Postgres for a ``postgresql://`` URI, else the SQLite file."""
    if is_server_uri(str(target)):
        from .postgres import PgStore

        return PgStore(str(target), **kwargs)
    from .sqlite.store import Store

    return Store(target, **kwargs)


def error_message(exc: BaseException, target: str | os.PathLike[str]) -> str | None:
    """What to tell a user about a backend's own error on ``target`` (None: not a backend error):
    a damaged SQLite file gets the check and the cure, a Postgres error names the server."""
    if is_server_uri(str(target)):
        from .postgres.connect import driver_error_message, is_driver_error

        return driver_error_message(exc, str(target)) if is_driver_error(exc) else None
    from .sqlite.connect import sqlite_error_message

    return sqlite_error_message(exc, target)


def schema_versions(target: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(the schema version of the index at ``target``, this Polaris's), read without writing; None
    for a file that is missing or cannot be written here (0: not a Polaris index)."""
    if is_server_uri(str(target)):
        from .postgres import schema as versions
        from .postgres.connect import connect

        conn = connect(str(target))
    else:
        from . import sqlite as versions
        from .sqlite.store import _read_only_reason

        if not Path(target).exists() or _read_only_reason(str(target)) is not None:
            return None
        conn = versions.connect(Path(target), readonly=True)
    try:
        return versions.schema_version(conn), versions.SCHEMA_VERSION
    finally:
        conn.close()


def vector_cache_type(kind: str) -> type:
    """The long-lived processes' sign bits in RAM for a ``kind`` store: ``sqlite/bits.py`` or
    ``postgres/bits.py`` (imported only when asked: a one-shot search loads no cache module)."""
    if kind == "postgres":
        from .postgres.bits import PgVectorCache

        return PgVectorCache
    from .sqlite.bits import VectorCache

    return VectorCache


def bm25_cache_type() -> type:
    """The file's BM25 from RAM (``sqlite/bm25_cache.py``); the server keeps its own lists."""
    from .sqlite.bm25_cache import Bm25Cache

    return Bm25Cache
