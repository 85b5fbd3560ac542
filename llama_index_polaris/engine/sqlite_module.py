"""Which sqlite3 module Polaris uses: one that loads extensions and has FTS5.

The SQLite backend opens polaris.db with it; both backends tokenize with FTS5's own
tokenizer on a private in-memory database made with it (``tokenize.py``).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType

from .errors import ExtensionError

SECURE_FTS_SQLITE = (3, 42, 0)  # the first SQLite with FTS5 'secure-delete'
INSTALL_HINT = (
    "Polaris needs an SQLite that can load extensions (for sqlite-vec) and has FTS5."
    " This Python's sqlite3 cannot; install the fallback with `pip install pysqlite3-binary`"
    " (Linux) or use a Python built with loadable SQLite extensions (python.org or Homebrew"
    " builds; pyenv with PYTHON_CONFIGURE_OPTS=--enable-loadable-sqlite-extensions)."
)



def _can_load(module: ModuleType) -> bool:
    conn = module.connect(":memory:")
    try:
        return hasattr(conn, "enable_load_extension")
    finally:
        conn.close()


@functools.lru_cache(maxsize=1)
def sqlite_module() -> ModuleType:
    """The DB-API module to use: stdlib sqlite3 if it loads extensions, else pysqlite3."""
    import sqlite3

    stdlib = os.environ.get("POLARIS_FORCE_PYSQLITE3") != "1" and _can_load(sqlite3)
    if stdlib and sqlite3.sqlite_version_info >= SECURE_FTS_SQLITE:
        return sqlite3
    try:  # an older stdlib SQLite only when there is no newer one: it cannot erase removed text
        from pysqlite3 import dbapi2
    except ImportError:
        if stdlib:
            return sqlite3
        raise ExtensionError(INSTALL_HINT) from None
    if not _can_load(dbapi2):
        if stdlib:
            return sqlite3
        raise ExtensionError(INSTALL_HINT)
    return dbapi2


