"""Which backend an index lives in: a ``postgresql://`` URI is Postgres, anything else a file.

The one place that imports the backends (``store.Store``, ``postgres.PgStore``): everything
else talks to the storage contract (``storage.py``).
"""

from __future__ import annotations

import os
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
