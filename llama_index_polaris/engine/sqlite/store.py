"""The store: documents, chunks and their vectors in one SQLite file.

Every write is one transaction: a crash leaves the previous state readable. Vectors
are little-endian float32 blobs in ``chunks.embedding``; triggers copy them into the
vec0 table ``chunks_vec`` and the text into the FTS5 table ``chunks_fts``.

Text is stored in NFC (``text.nfc``), whichever door wrote it: chunk text and heading
paths, document paths and names, collection names (a collection named in a read or a
delete is looked up in NFC too). Ids (document ids, node ids) are keys, kept as given.

Write runs (#24). Writes are grouped into runs (``Store.run``; a write outside one is a run
of its own). A run ends by folding the WAL into the file (``db.checkpoint``), so that
``polaris.db`` alone holds it, and, where the SQLite cannot erase text from FTS5 as it
deletes it (before 3.42), by merging chunks_fts when the run removed any. What is
removed is gone from the file: rows and pages are zeroed (``secure_delete``), FTS5 and
sqlite-vec drop the deleted entries, the posting lists drop terms no chunk holds.

This module keeps the connection, runs, batches and snapshots; ``Store`` gets the rest of the
contract from one class per group of what it keeps (``storage/``): ``documents.py``,
``collections.py``, ``binding.py`` (the model), ``reads.py`` (a search's reads) and
``copying.py``, with the chunk-row helpers they share in ``rows.py``; ``postgres/`` has the same files.
"""

from __future__ import annotations
import contextlib
import os
import threading
from pathlib import Path
from typing import Any, Iterator

from .. import sqlite as db
from ..storage import vectors as vectors_module
from .schema import (SECURE_FTS_SQLITE, fts_is_secure, get_meta, has_table, purge_fts, refuse_views_of_own_tables,
                     sqlite_version, transaction)
from ..config import SETTINGS_BY_NAME
from ..storage.records import (  # noqa: F401  (the records are the contract's; names kept importable from here)
    DEFAULT_COLLECTION, UNKNOWN_MODEL, ChunkRecord, DocumentRecord, ModelBinding, _check_unique, _check_unique_across, check_committable,
    check_status, from_blob, is_relative_path, mismatch_message, normal_document, normal_chunk, text_hash, to_blob,
    unknown_model_message,
)
from ..errors import ConfigError, DatabaseError, InputError
from . import postings
from ..words.tokenize import Tokenizer
from .documents import Documents
from .collections import Collections
from .binding import Binding
from .reads import SearchReads
from .copying import Copying

DEFAULT_FTS_TOKENIZER = SETTINGS_BY_NAME["fts_tokenizer"].default


class Store(Documents, Collections, Binding, SearchReads, Copying):
    """The SQLite backend of the storage contract (``storage.py``): read and write polaris.db. Thread-safe; one writer at a time per file (SQLite's lock).

    ``fts_tokenizer``: None keeps the tokenizer the file was built with (a new file gets
    ``DEFAULT_FTS_TOKENIZER``); a different explicit value rebuilds ``chunks_fts``.
    ``readonly=None``: write when this process can write the file, else read it and say
    why at the first write (a read-only folder, a read-only file: ``db.write_problem``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = False,
        fts_tokenizer: str | None = None,
    ) -> None:
        self.path = str(path)
        self.kind = "sqlite"
        self.readonly_reason: str | None = None
        if readonly is None:
            self.readonly_reason = _read_only_reason(self.path)
            readonly = self.readonly_reason is not None
        self.readonly = readonly
        self._lock = threading.RLock()
        self._tokenizer: Tokenizer | None = None
        self._batched = 0
        self._proven: ModelBinding | None = None  # proven on a file this process cannot write (see record_proof)
        self._runs = 0
        self._erased = False  # this run removed or replaced chunk text
        self._folded = True  # the last checkpoint emptied the WAL
        self._reads = 0  # snapshots begun by read()
        if fts_tokenizer is not None:
            problem = SETTINGS_BY_NAME["fts_tokenizer"].check(fts_tokenizer)
            if problem:
                raise ConfigError(f"'fts_tokenizer' {problem}, got {fts_tokenizer!r}.")
        self.conn = db.connect(path, readonly=readonly)
        try:
            refuse_views_of_own_tables(self.conn)
            if readonly:
                self._check_readable()
            else:
                if db.migrate(self.conn, fts_tokenizer or DEFAULT_FTS_TOKENIZER):
                    self._checkpoint()
                if fts_tokenizer is not None:
                    self._sync_fts_tokenizer(fts_tokenizer)
            self._check_fts_format()
        except BaseException:
            self.conn.close()
            raise

    # -- lifecycle -------------------------------------------------------------
    def after_interrupt(self) -> None:
        """After a KeyboardInterrupt: nothing to do (SQLite rolled the statement back)."""

    def close(self) -> None:
        """Close the connection (after any statement another thread is running on it); a writer
        whose last checkpoint was held back by a reader tries once more first."""
        with self._lock:
            if not self.readonly and not self._folded:
                with contextlib.suppress(Exception):  # closing must not fail; the WAL stays valid
                    self._checkpoint()
            self.close_twin()
            self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_readable(self) -> None:
        version = db.schema_version(self.conn)
        if version == 0 or not has_table(self.conn, "chunks"):
            raise DatabaseError(f"{self.path} is not a Polaris index (no Polaris tables). Build one with `polaris index PATH`.")
        if version > db.SCHEMA_VERSION:
            raise DatabaseError(f"{self.path} has schema version {version}, newer than this Polaris; upgrade Polaris.")
        if version < db.SCHEMA_VERSION:
            blocked = None if self.path == db.MEMORY else db.write_problem(Path(self.path))
            raise DatabaseError(
                f"{self.path} has schema version {version}, older than this Polaris ({db.SCHEMA_VERSION})"
                f" and was opened read-only; upgrade it with `polaris status --db {self.path}` (or any"
                " command that writes to it), which needs write access to the file and its folder"
                + (f", which it does not have here: {blocked}" if blocked else ".")
            )

    def _check_fts_format(self) -> None:
        """Refuse, with the cure, a full-text index this SQLite cannot read (FTS5 secure-delete
        needs 3.42+): its searches would otherwise find nothing by keyword, silently."""
        version = sqlite_version(self.conn)
        if version >= SECURE_FTS_SQLITE or not has_table(self.conn, "chunks_fts"):
            return
        if fts_is_secure(self.conn):
            raise DatabaseError(
                f"{self.path} was written by SQLite 3.42 or later (its full-text index erases deleted"
                f" words), and this Python's SQLite is {'.'.join(map(str, version))}, which cannot read it;"
                " `pip install pysqlite3-binary` (Polaris then uses it) or use a newer Python."
            )

    def _sync_fts_tokenizer(self, tokenizer: str) -> None:
        if get_meta(self.conn).get("fts_tokenizer", tokenizer) != tokenizer:
            with self._write():
                db.rebuild_fts(self.conn, tokenizer)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        if self.readonly:
            raise DatabaseError(self.readonly_reason or f"{self.path} was opened read-only.")
        with self.run():
            with _LockedTransaction(self._lock, self.conn, transaction(self.conn, before_commit=self._flush)) as conn:
                yield conn

    def _flush(self, conn: Any) -> None:
        """Derived tables that triggers cannot keep (BM25 posting lists) brought up to date."""
        if not self._batched and has_table(conn, "chunks_bm25"):
            if conn.execute(f"SELECT 1 FROM {postings.DIRTY} WHERE counted = 1 LIMIT 1").fetchone():
                self._erased = True  # a chunk's counted text was deleted or replaced
            postings.flush(conn, self.tokenizer())

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """``with store.run():`` the writes inside are one run (runs nest; the outermost counts).

        At its end the WAL is folded into the file (``db.checkpoint``: a copy of polaris.db
        alone, a backup or a sync tool then has the whole run) and, where FTS5 cannot erase
        as it deletes, the full-text index is merged if the run removed text."""
        if self.readonly:
            yield
            return
        with self._lock:
            self._runs += 1
        try:
            yield
        except BaseException:
            with self._lock:
                self._runs -= 1
                if not self._runs:
                    with contextlib.suppress(Exception):  # what was committed stays valid in the WAL
                        self._end_run()
            raise
        with self._lock:
            self._runs -= 1
            if not self._runs:
                self._end_run()

    def _end_run(self) -> None:
        erased, self._erased = self._erased, False
        if erased and not fts_is_secure(self.conn):
            with _LockedTransaction(self._lock, self.conn, transaction(self.conn)):
                purge_fts(self.conn)
        self._checkpoint()

    def _checkpoint(self) -> None:
        self._folded = db.checkpoint(self.conn).complete

    def backup(self, dest: str | os.PathLike[str]) -> Path:
        """A consistent copy of the index at ``dest`` (a new file, or a folder to put it in; the
        index may be in use meanwhile), written by ``VACUUM INTO``: compact, one file with no
        WAL and no free pages, checked before it takes its name. Returns its path."""
        target = Path(dest)
        if target.is_dir():
            target = target / Path(self.path).name
        if target.exists():
            raise InputError(f"{target} already exists; name a new file (a backup never overwrites).")
        if not target.parent.is_dir():
            raise InputError(f"{target}: directory {target.parent} does not exist.")
        partial = target.with_name(f".{target.name}.partial")
        partial.unlink(missing_ok=True)
        try:
            with self._lock:
                version = self.conn.execute("PRAGMA data_version").fetchone()[0]
                counts = self.counts()
                self.conn.execute("VACUUM INTO ?", (str(partial),))  # one snapshot, in rollback-journal mode
                unchanged = self.conn.execute("PRAGMA data_version").fetchone()[0] == version
            _check_copy(partial, counts if unchanged else None)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """``with store.batch():`` the writes inside update the BM25 posting lists once, at the end
        (a write that changes many chunks costs less than many small ones; meanwhile readers
        score with FTS5 alone, exactly). Each write still commits on its own."""
        self._batched += 1
        try:
            yield
        except BaseException:
            self._batched -= 1
            with contextlib.suppress(Exception):  # the lists catch up at the next write if this fails
                self._end_batch()
            raise
        self._batched -= 1
        self._end_batch()

    def _end_batch(self) -> None:
        if not self._batched and not self.readonly:
            with self._write():
                pass  # the flush runs before COMMIT

    def tokenizer(self) -> Tokenizer:
        """The index's FTS5 tokenizer, on a private in-memory connection (made once per tokenizer)."""
        name = postings.fts_tokenizer(self.conn)
        if self._tokenizer is None or self._tokenizer.tokenizer != name:
            self._tokenizer = Tokenizer(name)
        return self._tokenizer

    def read(self) -> Any:
        """``with store.read() as conn:`` one consistent snapshot, the store's lock held."""
        return _LockedTransaction(self._lock, self.conn, transaction(self.conn, "BEGIN"), before=self._before_read)

    def _before_read(self) -> None:
        """Before a snapshot begins (the lock held): the second connection's version noted; from a
        read-only connection's ``MAP_FROM_READ``-th snapshot on, the file mapped (``db.configure``)."""
        self._reads += 1
        if self._reads == db.MAP_FROM_READ and self.readonly:
            db.map_file(self.conn)
        self.note_twin_version()

    def writer_lock(self, on_wait: Any = None) -> Any:
        """``with store.writer_lock():`` one `polaris index` run at a time (a lock file beside the index)."""
        from ..ingest.lock import index_lock

        return index_lock(self.path, on_wait)

    def vector_report(self) -> dict[str, Any]:
        """The rows vector search skips (``vectors.report``: bad stored vectors, vec0 rows that are
        missing, invalid or different from their chunk's), for ``polaris status --check``."""
        with self.read() as conn:
            if not has_table(conn, "chunks_vec"):
                return {"skipped": 0, "rows": []}
            return vectors_module.report(conn, self.model.dim)

    def schema_version(self) -> int:
        """The number of the last migration applied to this file."""
        with self._lock:
            return db.schema_version(self.conn)

    def quick_check(self) -> list[str]:
        """``PRAGMA quick_check``: ["ok"], or what is wrong with the file."""
        with self._lock:
            return [r[0] for r in self.conn.execute("PRAGMA quick_check").fetchall()]

    def size_bytes(self) -> int:
        """The size of the database file and its WAL on disk (0 in memory)."""
        if self.path == ":memory:":
            return 0
        return sum(Path(self.path + s).stat().st_size for s in ("", "-wal") if Path(self.path + s).exists())


def _read_only_reason(path: str) -> str | None:
    """Why the index at ``path`` can only be read here (None: it can be written, or it does not
    exist yet, when the writer's open says what is wrong)."""
    target = Path(path)
    if path == db.MEMORY or not target.exists():
        return None
    db.restore_side_files(target)
    return db.write_problem(target)


def _check_copy(path: Path, counts: dict[str, Any] | None) -> None:
    """Refuse a copy that is damaged or does not hold what the index held (``counts``; None when
    another process wrote meanwhile, so the copy may rightly hold more)."""
    copy = Store(path, readonly=True)
    try:
        problems = [r for r in copy.quick_check() if r != "ok"]
        got = copy.counts()
    finally:
        copy.close()
    if counts is None:
        counts = got
    if problems or (got["documents"], got["chunks"]) != (counts["documents"], counts["chunks"]):
        raise DatabaseError(
            f"the copy at {path} did not check out ({'; '.join(problems[:3]) or got}); nothing was written."
        )


class _LockedTransaction:
    """The store's lock held around one transaction (a write, or a read snapshot)."""

    def __init__(self, lock: threading.RLock, conn: Any, tx: Any, before: Any = None) -> None:
        self.lock, self.tx, self.before = lock, tx, before

    def __enter__(self) -> Any:
        self.lock.acquire()
        try:
            if self.before is not None:
                self.before()  # the lock held, the transaction not begun
            return self.tx.__enter__()
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.tx.__exit__(*exc)
        finally:
            self.lock.release()
