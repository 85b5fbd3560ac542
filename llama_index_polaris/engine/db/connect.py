"""Open polaris.db with sqlite-vec and FTS5, whichever sqlite3 module can load them."""

from __future__ import annotations

import functools
import os
import time
import urllib.parse
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import DatabaseError, ExtensionError
from .schema import refuse_foreign_tables, schema_version

BUSY_TIMEOUT_MS = 10_000
MMAP_BYTES = 1 << 36  # memory-mapped reads up to 64 GiB of file (#17: 1,000 random chunk rows 4.5x faster)
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

    if os.environ.get("POLARIS_FORCE_PYSQLITE3") != "1" and _can_load(sqlite3):
        return sqlite3
    try:
        from pysqlite3 import dbapi2
    except ImportError:
        raise ExtensionError(INSTALL_HINT) from None
    if not _can_load(dbapi2):
        raise ExtensionError(INSTALL_HINT)
    return dbapi2


def load_extensions(conn: Any) -> None:
    """Load sqlite-vec into ``conn`` and check that vec0 and FTS5 answer."""
    import sqlite_vec

    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("SELECT vec_version()").fetchone()
    except Exception as exc:  # the driver's own error types differ
        raise ExtensionError(f"sqlite-vec could not be loaded: {exc}. {INSTALL_HINT}") from exc
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.polaris_fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.polaris_fts5_probe")
    except Exception as exc:
        raise ExtensionError(f"This SQLite has no FTS5 ({exc}). {INSTALL_HINT}") from exc


MEMORY = ":memory:"


def connect(path: str | os.PathLike[str], *, readonly: bool = False) -> Any:
    """A connection to ``path`` with extensions, WAL, a busy timeout and foreign keys on.

    ``":memory:"`` is a private in-memory database (no file, no WAL), as in sqlite3.
    """
    sqlite = sqlite_module()
    if str(path) == MEMORY:
        conn = sqlite.connect(MEMORY, isolation_level=None, check_same_thread=False)
        load_extensions(conn)
        conn.execute("PRAGMA foreign_keys = ON")
        return conn
    target = Path(path)
    if readonly and not target.exists():
        raise DatabaseError(f"{target}: no such index. Build one with `polaris index PATH`.")
    if not readonly and not target.parent.exists():
        raise DatabaseError(f"{target}: directory {target.parent} does not exist.")
    # quote the path: '?', '#' and '%' in a directory name would otherwise end the URI path
    path_part = urllib.parse.quote(target.resolve().as_posix(), safe="/")
    uri = f"file:{path_part}?mode={'ro' if readonly else 'rwc'}"
    try:
        conn = sqlite.connect(
            uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
    except sqlite.Error as exc:
        raise DatabaseError(f"{target}: cannot open ({exc}).") from exc
    try:
        _check_is_database(conn, target, sqlite)
        if not readonly:
            _refuse_foreign_file(conn, target)  # before WAL mode rewrites its header
        load_extensions(conn)
        configure(conn, readonly=readonly)
    except BaseException:
        conn.close()
        raise
    return conn


def _refuse_foreign_file(conn: Any, target: Path) -> None:
    """Someone else's database (tables at version 0) is refused, read in one snapshot: another
    process creating this index commits its first tables and version 1 together."""
    conn.execute("BEGIN")
    try:
        if schema_version(conn) == 0:
            refuse_foreign_tables(conn, str(target))
    finally:
        conn.execute("ROLLBACK")


def _check_is_database(conn: Any, target: Path, sqlite: ModuleType) -> None:
    """Read the file header now, so a non-SQLite file is not blamed on the extensions."""
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite.DatabaseError as exc:
        raise DatabaseError(f"{target}: cannot be read as an SQLite database ({exc}).") from exc


def sqlite_error_message(exc: BaseException, path: str | os.PathLike[str]) -> str | None:
    """What to tell a user about an SQLite error on ``path`` (None: not an SQLite error).

    A damaged file ("database disk image is malformed") gets the check and the cure.
    """
    try:
        module = sqlite_module()
    except ExtensionError:
        return None
    if not isinstance(exc, module.Error):
        return None
    return damage_message(exc, path) or f"SQLite failed on {path}: {exc}."


def damage_message(exc: BaseException, path: str | os.PathLike[str]) -> str | None:
    """What to tell a user when ``exc`` says the file at ``path`` is damaged (None: it does not)."""
    try:
        module = sqlite_module()
    except ExtensionError:
        return None
    text = str(exc)
    if not isinstance(exc, module.DatabaseError) or not ("malformed" in text or "not a database" in text):
        return None
    return (
        f"{path} is damaged ({text}). See how with `polaris status --check` (PRAGMA quick_check);"
        " rebuild it by moving it aside and running `polaris index` on your folders again"
        " (the documents themselves are on disk)."
    )


def configure(conn: Any, *, readonly: bool = False) -> None:
    """Per-connection pragmas: WAL, busy timeout, foreign keys, memory-mapped reads.

    Without mmap every page a query touches is a read() into SQLite's small page cache:
    re-scoring 1,000 approximate candidates from chunks.embedding at 100k chunks took
    111 ms that way and 24 ms mapped (same process, load ~8). SQLite clamps the size to
    what its build allows and reads normally where it cannot map.
    """
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        mode = _switch_to_wal(conn)
        if mode.lower() != "wal":
            raise DatabaseError(f"cannot switch to WAL mode (got {mode}); is the file on a network share?")
        conn.execute("PRAGMA synchronous = NORMAL")


def _switch_to_wal(conn: Any) -> str:
    """``PRAGMA journal_mode = WAL``, retried while another process holds the file (SQLite does
    not wait for a lock on this pragma): two runs opening a new index at once both get WAL."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except Exception as exc:
            held = "locked" in str(exc) or "busy" in str(exc)
            if not held or time.monotonic() > deadline:
                raise DatabaseError(f"cannot switch to WAL mode: {exc}") from exc
            time.sleep(0.02)
