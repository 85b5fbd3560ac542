"""What the RAM caches share: a view of one store, reloaded whenever the database changes.

A cache answers only for the database version it was read at (``PRAGMA data_version``
for other connections' commits, ``total_changes`` for this one's own writes). Reading
happens in batches, each under the store's lock with the version checked first, so a
query waits at most one batch and a load is never a mix of two versions: a change
starts it again, after a pause that doubles (up to 30 s) while a writer keeps
committing. With ``background=True`` the load runs in a thread and ``refresh`` answers
False (use SQLite) until it is complete: a long-lived process never stalls its first
query on a load, however large the index.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Iterator

log = logging.getLogger(__name__)
BATCH_ROWS = 5_000  # rows read per turn of the store's lock (about 20 ms)
MAX_BACKOFF_S = 30.0  # a load restarted by writes waits up to this long before trying again


class Changed(Exception):
    """The database changed while a cache was reading it."""


class StoreCache:
    """Base class: ``_read(version)`` builds the state, ``_install(state, active)`` holds it."""

    def __init__(self, store: Any, min_chunks: int, *, background: bool = False, batch_rows: int = BATCH_ROWS) -> None:
        self.store = store
        self.min_chunks = min_chunks
        self.background = background
        self.batch_rows = batch_rows
        self._lock = threading.Lock()
        self._version: tuple[int, int] | None = None
        self._loader: threading.Thread | None = None
        self.active = False

    def _read(self, version: tuple[int, int]) -> tuple[Any, bool]:
        raise NotImplementedError

    def _install(self, state: Any, active: bool) -> None:
        raise NotImplementedError

    def _current_version(self) -> tuple[int, int]:
        conn = self.store.conn
        return conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes

    def refresh(self) -> bool:
        """Reload if the database changed; True when the cache should answer now."""
        with self.store._lock, self._lock:
            version = self._current_version()
            if version == self._version:
                return self.active
            self._install(None, False)  # never answer from an older database
            if not self.background:
                while True:
                    try:
                        state = self._read(version)
                        break
                    except Changed:  # another process committed meanwhile: read its version
                        version = self._current_version()
                self._install(*state)
                self._version = version
                return self.active
            if self._loader is None or not self._loader.is_alive():
                self._loader = threading.Thread(target=self._load_in_background, name=type(self).__name__, daemon=True)
                self._loader.start()
            return False

    def wait(self, timeout: float = 60.0) -> bool:
        """Block until the cache holds the current database (or ``timeout``); True when active."""
        deadline = time.monotonic() + timeout
        while True:
            loader = self._loader
            if loader is not None:
                loader.join(max(0.0, deadline - time.monotonic()))
            if self.refresh():
                return True
            if self._loader is None or not self._loader.is_alive() or time.monotonic() >= deadline:
                return False

    def _load_in_background(self) -> None:
        try:
            for attempt in itertools.count():
                with self.store._lock:
                    version = self._current_version()
                try:
                    state, active = self._read(version)
                except Changed:  # a writer is busy: wait longer each time rather than re-read
                    time.sleep(min(MAX_BACKOFF_S, 0.25 * 2**attempt))
                    continue
                with self.store._lock, self._lock:
                    if self._current_version() == version:
                        self._install(state, active)
                        self._version = version
                        return
        except Exception as exc:  # the store was closed, or the file went away: stay on SQLite
            log.debug("%s load stopped: %s", type(self).__name__, exc)

    def _locked(self, version: tuple[int, int], sql: str, args: tuple = ()) -> list[tuple]:
        """All rows of ``sql``, read under the store's lock at ``version`` (else ``Changed``)."""
        with self.store._lock:
            if self._current_version() != version:
                raise Changed
            return self.store.conn.execute(sql, args).fetchall()

    def _batches(self, version: tuple[int, int], sql: str) -> Iterator[list[tuple]]:
        """``sql`` (``... WHERE <id> > ? ORDER BY <id> LIMIT ?``, id first) in batches at ``version``."""
        last = -(2**63)
        while True:
            rows = self._locked(version, sql, (last, self.batch_rows))
            if not rows:
                return
            last = rows[-1][0]
            yield rows
