"""``polaris copy SRC DST``: an index moved between backends with its vectors (nothing re-embedded).

Any two of a polaris.db file and a ``postgresql://`` database: the source is read in one
snapshot (``export_rows``) and written into the new, empty destination in one transaction
(``import_rows``) with the same chunk ids, vectors, node JSON, documents, collections and
roots, model binding and tokenizer; the destination then counts what the source counted,
or the copy is refused. Searching the copy gives the same hits and scores. An error of either
database (PostgreSQL's or SQLite's own) comes back as a DatabaseError naming that side and what
to do (``backends.error_message``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from ..errors import DatabaseError, InputError, PolarisError
from ..backends import error_message, open_store
from ..storage import is_server_uri


def copy_index(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> dict[str, Any]:
    """Copy the index at ``source`` into ``dest`` (a new file, or an empty Postgres database);
    returns the destination's counts."""
    src, dst = str(source), str(dest)
    if not is_server_uri(dst) and Path(dst).exists():
        raise InputError(f"{dst} already exists; name a new file (a copy never overwrites).")
    if not is_server_uri(src) and not Path(src).exists():
        raise InputError(f"{src}: no such index.")
    side = [src]  # the database the step under way reads or writes
    try:
        return _copy(src, dst, side)
    except PolarisError:
        raise
    except Exception as exc:
        message = error_message(exc, getattr(exc, "polaris_target", side[0]))
        if message is None:
            raise
        raise DatabaseError(f"{message} No document was copied into {_shown(dst)}.") from None


def _copy(src: str, dst: str, side: list[str]) -> dict[str, Any]:
    reader = open_store(src, readonly=True)
    try:
        tokenizer = reader.meta.get("fts_tokenizer")
        counts = reader.counts()
        side[0] = dst
        writer = open_store(dst, fts_tokenizer=tokenizer)
        try:
            with writer.run():
                writer.import_rows(_read_from(reader.export_rows(), src))
            got = writer.counts()
        except BaseException:
            writer.close()
            if not is_server_uri(dst):
                for suffix in ("", "-wal", "-shm"):
                    Path(dst + suffix).unlink(missing_ok=True)
            raise
        writer.close()
    finally:
        reader.close()
    if (got["documents"], got["chunks"], got["collections"]) != (counts["documents"], counts["chunks"],
                                                                counts["collections"]):
        raise DatabaseError(f"the copy at {_shown(dst)} holds {got}, not what {_shown(src)} holds ({counts}).")
    return got


def _read_from(rows: Iterator[Any], src: str) -> Iterator[Any]:
    """``rows``, an error among them marked as the source's (the writer reads them as it writes)."""
    try:
        yield from rows
    except Exception as exc:
        exc.polaris_target = src  # type: ignore[attr-defined]
        raise


def _shown(target: str) -> str:
    from ..masking import shown_target

    return shown_target(target)
