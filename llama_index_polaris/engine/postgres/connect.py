"""Connections to a Polaris index on PostgreSQL: psycopg 3, pgvector's adapters, clear errors.

psycopg and pgvector come with the ``postgres`` extra; without them a ``postgresql://``
URI is refused with the command that installs them. A server that cannot be reached is
named by its URI, with the password left out.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from ..errors import ConnectionLostError, DatabaseError, ExtensionError

INSTALL_HINT = "in the clone of Polaris, pip install -e '.[postgres]'"
CONNECT_TIMEOUT_S = 10
EXTENSION_LOCK = 0x706F6C61_72697300  # advisory lock key: "polaris" + 0 (schema.py numbers the others)


def shown(uri: str) -> str:
    """``uri`` without its password, for messages."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.password:
        return uri
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def driver() -> Any:
    """The psycopg module, or an ExtensionError that says how to install it."""
    try:
        import psycopg
        import pgvector.psycopg  # noqa: F401
    except ImportError as exc:
        raise ExtensionError(
            f"a postgresql:// index needs psycopg 3 and pgvector ({exc.name} is not installed): {INSTALL_HINT}"
        ) from None
    return psycopg


def connection_class() -> type:
    """A psycopg Connection that says it speaks Postgres (``dialect.execute`` reads that)."""
    psycopg = driver()

    class PolarisPgConnection(psycopg.Connection):  # type: ignore[misc, valid-type]
        dialect = "postgres"
        polaris_name = ""

    return PolarisPgConnection


_CLASS: type | None = None


def connect(uri: str) -> Any:
    """An autocommit connection to ``uri`` with pgvector's types registered (the extension is
    created when the database has none yet)."""
    global _CLASS
    psycopg = driver()
    from pgvector.psycopg import register_vector

    if _CLASS is None:
        _CLASS = connection_class()
    try:
        conn = _CLASS.connect(uri, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
        raise DatabaseError(
            f"cannot connect to {shown(uri)} ({reason}). Check that the server is running and the URI's host,"
            " port, user, password and database are right."
        ) from None
    conn.polaris_name = shown(uri)
    try:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
            with conn.transaction():  # two processes opening a new database at once: one creates it
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (EXTENSION_LOCK,))
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
    except psycopg.Error as exc:
        conn.close()
        raise ExtensionError(
            f"{shown(uri)}: the pgvector extension is not available ({str(exc).strip()}). Install pgvector on the"
            " server (https://github.com/pgvector/pgvector) or have its owner run CREATE EXTENSION vector."
        ) from None
    return conn


def is_driver_error(exc: BaseException) -> bool:
    """True for an error psycopg raised (a server or connection error)."""
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, psycopg.Error)


def is_lost(exc: BaseException, conn: Any) -> bool:
    """True when ``exc`` is ``conn`` going away (a restart, a failover, an ended session): psycopg
    closes a connection whose server is gone, and only then (a cancelled statement leaves it open)."""
    return is_driver_error(exc) and bool(conn.closed)


def lost_error(name: str, exc: BaseException | None, *, write: bool = False,
               reconnect: BaseException | None = None) -> ConnectionLostError:
    """The ConnectionLostError for ``exc`` on the index ``name`` (None: found closed by an earlier
    call; a write's: not retried; with the ``reconnect`` error when no new connection could be made)."""
    lines = str(exc).strip().splitlines() if exc is not None else []
    lost = f"the connection to {name} was lost" + (f" ({lines[0].strip()})" if lines else "")
    if reconnect is not None:
        return ConnectionLostError(f"{lost} and a new one could not be made: {reconnect} Retrying will reconnect once"
                                   " the server answers.")
    if write:
        return ConnectionLostError(f"{lost} during a write, which was not retried: the server rolled it back unless"
                                   " its COMMIT had reached it. Run it again; retrying will reconnect.")
    return ConnectionLostError(f"{lost} and this call did not finish. Retrying will reconnect.")
