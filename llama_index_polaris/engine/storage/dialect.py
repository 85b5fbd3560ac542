"""One catalog query text for both backends: the SQLite spelling, rewritten for Postgres.

The lookups that name things (collections and documents by name, a document's chunks, a
page of documents: ``search/names.py``, ``search/scope.py``, ``documents.py``) are plain
SQL that both backends answer alike, so they are written once, in SQLite's spelling, and
run through ``execute``. For a Postgres connection (one whose ``dialect`` is
``"postgres"``) two things change: ``?`` becomes ``%s``, and a JSON array parameter read
as a set, ``(SELECT value FROM json_each(?))``, becomes ``jsonb_array_elements_text``, and ``instr(`` ``strpos(`` (the same arguments and answer).
Nothing else is translated: a query that needs more (FTS5, vec0, JSON paths) belongs to
one backend and is written there.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Sequence

_JSON_SET = re.compile(r"\(SELECT value FROM json_each\(\?\)\)")


def dialect(conn: Any) -> str:
    """``"postgres"`` for a Polaris Postgres connection, else ``"sqlite"``."""
    return getattr(conn, "dialect", "sqlite")


@functools.lru_cache(maxsize=256)
def to_postgres(sql: str) -> str:
    """``sql`` (SQLite spelling, see the module docstring) in Postgres's."""
    if "%" in sql:
        raise ValueError(f"a catalog query must not contain '%': {sql[:60]}")
    sql = _JSON_SET.sub("(SELECT jsonb_array_elements_text(?::jsonb))", sql).replace("instr(", "strpos(")
    return sql.replace("?", "%s")


def execute(conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
    """``conn.execute(sql, args)`` in ``conn``'s dialect; returns its cursor."""
    if dialect(conn) == "postgres":
        return conn.execute(to_postgres(sql), tuple(args))
    return conn.execute(sql, args)


def where(conn: Any) -> str:
    """What ``conn`` reads, for messages: the SQLite file, or the Postgres database's URI."""
    if dialect(conn) == "postgres":
        return conn.polaris_name
    row = conn.execute("PRAGMA database_list").fetchone()
    return row[2] if row and row[2] else "this index"
