"""One indexing run per database at a time: an advisory lock file beside it.

SQLite already serialises each transaction; this lock keeps two `polaris index` runs
from embedding the same files twice. The second run says who holds the lock and waits.
Readers never take it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Callable, Iterator


@contextlib.contextmanager
def index_lock(db_path: str | os.PathLike[str], on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold ``<db>.lock`` for the duration; call ``on_wait(message)`` if we have to wait."""
    if sys.platform == "win32" or str(db_path) == ":memory:":  # no fcntl / no file: SQLite's locking applies
        yield
        return
    import fcntl

    path = Path(str(db_path) + ".lock")
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            if on_wait:
                on_wait(f"another `polaris index` run (pid {holder}) holds {db_path}; waiting for it to finish")
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)
