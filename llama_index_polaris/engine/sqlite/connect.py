"""Open polaris.db with sqlite-vec and FTS5, whichever sqlite3 module can load them.

Where the file lives decides how it is opened (#24). A reader needs ``-shm`` and ``-wal``
beside the file, or to create them: in a folder it cannot write, a file whose WAL is
empty (every Polaris write run ends by folding it in, ``checkpoint``) is read as
``immutable=1`` instead. A writer is refused up front, with the reason, when the folder,
the file or its ``-wal``/``-shm`` cannot be written (``write_problem``); a ``-shm`` left
read-only by a reader of a read-only file is given the file's permissions back first.
"""

from __future__ import annotations

import functools
import os
import time
import urllib.parse
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from ..errors import DatabaseError, ExtensionError
from ..sqlite_module import INSTALL_HINT, sqlite_module  # noqa: F401  (importable from here as before)
from .schema import SECURE_FTS_SQLITE, refuse_foreign_tables, schema_version

BUSY_TIMEOUT_MS = 10_000
MMAP_BYTES = 1 << 36  # memory-mapped reads up to 64 GiB of file (#17: 1,000 random chunk rows 4.5x faster)
MAP_FROM_READ = 3  # a read-only connection maps the file from this snapshot on (``map_file``; a search takes two)


@functools.cache
def vec0_path() -> str:
    """sqlite-vec's loadable extension, ``sqlite_vec.loadable_path()`` found without importing the
    package (it imports the standard library's sqlite3: 3 ms of a cold search)."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'sqlite_vec'")
    return os.path.normpath(os.path.join(list(spec.submodule_search_locations)[0], "vec0"))


def load_extensions(conn: Any) -> None:
    """Load sqlite-vec into ``conn`` and check that vec0 and FTS5 answer."""
    try:
        conn.enable_load_extension(True)
        conn.load_extension(vec0_path())
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
    problem = path_problem(path)
    if problem:
        raise DatabaseError(problem)
    target = Path(path)
    if readonly and not target.exists():
        raise DatabaseError(f"{target}: no such index. Build one with `polaris index PATH`.")
    if not readonly and not target.parent.exists():
        raise DatabaseError(f"{target}: directory {target.parent} does not exist.")
    if not readonly:
        restore_side_files(target)
        problem = write_problem(target)
        if problem:
            raise DatabaseError(problem)
    uri = reader_uri(target) if readonly else f"{file_uri(target)}?mode=rwc"
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


def path_problem(path: str | os.PathLike[str]) -> str | None:
    """What is wrong with ``path`` as the index file's name (None: nothing): empty, a folder, or
    a name ending in a slash (a folder meant, or a file of that name would be made)."""
    text = os.fspath(path)
    if not str(text).strip():
        return "The index path is empty: name the index file (db_path in polaris.toml, or --db), such as polaris.db."
    if str(text).endswith(("/", os.sep)):
        return (f"{text}: ends with a slash, so it names a folder: name the index file inside it,"
                f" such as {Path(text) / 'polaris.db'}.")
    if Path(text).is_dir():
        return f"{text}: is a folder, not an index file: name the file inside it, such as {Path(text) / 'polaris.db'}."
    return None


def file_uri(target: Path) -> str:
    """``file:`` and the absolute path, quoted: '?', '#' and '%' in a folder name would otherwise end it."""
    return "file:" + urllib.parse.quote(target.resolve().as_posix(), safe="/")


SIDE_FILES = ("-wal", "-shm")


def _side(target: Path, suffix: str) -> Path:
    return target.with_name(target.name + suffix)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def reader_uri(path: str | os.PathLike[str]) -> str:
    """The URI a reader opens ``path`` with: ``mode=ro``, or ``mode=ro&immutable=1`` when SQLite
    could not create the ``-shm`` it needs (a read-only folder) and the WAL holds nothing.

    An immutable reader does not see later writes; in a folder nobody can write there are none.
    """
    target = Path(path)
    base = f"{file_uri(target)}?mode=ro"
    return base + "&immutable=1" if read_immutably(target) else base


def read_immutably(path: str | os.PathLike[str]) -> bool:
    """True when a reader of ``path`` must open it ``immutable=1``: SQLite would have to create
    its ``-shm`` in a folder it cannot write. A DatabaseError when the WAL holds changes that
    only a ``-shm`` can read."""
    target = Path(path)
    shm, wal = _side(target, "-shm"), _side(target, "-wal")
    if shm.exists() or _writable(target.absolute().parent):
        return False
    if wal.exists() and wal.stat().st_size > 0:
        raise DatabaseError(
            f"{target}: the folder {target.absolute().parent} is read-only and {wal.name} holds changes not yet in"
            f" {target.name}, which SQLite can only read through a {shm.name} it cannot create here. Open it"
            f" once where it can be written (any Polaris write folds the WAL into the file), or copy"
            f" {target.name} and {wal.name} together to a writable folder."
        )
    return True


def write_problem(target: Path) -> str | None:
    """Why this process cannot write the index at ``target`` (None: it can), in a sentence that
    says what to do. Reading works in each of these cases."""
    folder = target.absolute().parent
    if _read_only_mount(folder):
        return (f"{target}: {folder} is on a file system mounted read-only, so nothing there can be written"
                " (chmod cannot change that). Copy the index to a writable place (`polaris backup COPY.db`)"
                " and write there. Reading (search, status) works here.")
    if target.exists() and not _writable(target):
        return (f"{target} is read-only (its permissions); make it writable with `chmod u+w {target}`."
                " Reading (search, status) works as it is.")
    if not _writable(folder):
        return (
            f"{target}: the folder {folder} is read-only, and SQLite writes {target.name}-wal and"
            f" {target.name}-shm beside the index. Make the folder writable, or copy the index to one"
            f" that is (`polaris backup COPY.db`) and write there. Reading (search, status) works here."
        )
    for suffix in SIDE_FILES:
        side = _side(target, suffix)
        if side.exists() and not _writable(side):
            return (
                f"{side} is read-only, so {target} cannot be written although it is writable itself"
                f" (a reader left it so while {target.name} was read-only); make it writable with"
                f" `chmod u+w {side}`."
            )
    return None


def _read_only_mount(folder: Path) -> bool:
    """True when ``folder`` lies on a file system mounted read-only (``ST_RDONLY``)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # gone, or no statvfs (Windows): the other checks speak
        return False


def restore_side_files(target: Path) -> None:
    """Give ``-wal`` and ``-shm`` back the permissions of the file they belong to, when it is
    writable and we own them: SQLite creates them with the file's mode, so a reader of a
    read-only file leaves a read-only ``-shm`` that would block every later write."""
    try:
        st = target.stat()
    except OSError:
        return
    if not _writable(target) or not hasattr(os, "geteuid"):  # Windows: SQLite does not copy modes there
        return
    for suffix in SIDE_FILES:
        side = _side(target, suffix)
        try:
            side_st = side.stat()
            if not _writable(side) and side_st.st_uid == os.geteuid():
                side.chmod((side_st.st_mode & ~0o777) | (st.st_mode & 0o777))
        except OSError:
            continue  # gone meanwhile, or not ours: write_problem says so


class Checkpoint(NamedTuple):
    """What ``PRAGMA wal_checkpoint`` did: ``complete`` when the WAL is now empty."""

    complete: bool
    wal_frames: int
    copied_frames: int


def checkpoint(conn: Any) -> Checkpoint:
    """Fold the WAL into the database file (#24), so that the file alone holds every commit
    (a copy of ``polaris.db`` without its ``-wal`` loses nothing) and the WAL keeps no old
    pages of what was removed.

    ``wal_checkpoint(TRUNCATE)`` with no busy wait: when no reader holds an older snapshot it
    copies every frame and empties the WAL; when one does (or another writer is busy), SQLite
    copies what it can without waiting, as PASSIVE does, and the next run's checkpoint (or
    the last connection closing) folds in the rest.
    """
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        busy, log, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return Checkpoint(busy == 0, log, copied)


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
        if "readonly" in str(exc) or "unable to open" in str(exc):  # permissions, not damage
            raise DatabaseError(
                f"{target}: SQLite cannot open it ({exc}): it needs to read {target.name} and to create or"
                f" open {target.name}-wal and {target.name}-shm in {target.parent}; check their permissions."
            ) from exc
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
    """Per-connection pragmas: WAL, busy timeout, foreign keys, memory-mapped reads; for a
    writer also ``secure_delete``.

    Without mmap every page a query touches is a read() into SQLite's small page cache:
    re-scoring 1,000 approximate candidates from chunks.embedding at 100k chunks took
    111 ms that way and 24 ms mapped (same process, load ~8). SQLite clamps the size to
    what its build allows and reads normally where it cannot map. A read-only connection
    starts without the map (``map_file`` turns it on): a fresh mapping costs a page fault
    per few pages first touched, so a connection that answers one search (``polaris
    search``) is faster reading (docs/benchmarks.md, "A fresh connection reads").
    """
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA mmap_size = {0 if readonly else MMAP_BYTES}")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        # A deleted row, freed page or FTS5 segment is overwritten with zeros, not left readable (#24).
        conn.execute("PRAGMA secure_delete = ON")
        mode = _switch_to_wal(conn)
        if mode.lower() != "wal":
            raise DatabaseError(f"cannot switch to WAL mode (got {mode}); is the file on a network share?")
        conn.execute("PRAGMA synchronous = NORMAL")


def map_file(conn: Any) -> None:
    """Memory-map the file for ``conn``'s reads from its next snapshot on (``configure``)."""
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")


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
