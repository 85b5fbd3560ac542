"""Connections to a Polaris index on PostgreSQL: psycopg 3, pgvector's adapters, clear errors.

psycopg and pgvector come with the ``postgres`` extra; without them a ``postgresql://``
URI is refused with the command that installs them. A server that cannot be reached is
named by its URI, with the password left out.

Opening never creates anything: a database without pgvector is read as one without an index
(``vector_schema`` is None), and the extension is created by the first migration of a writer
(``ensure_vector``, in ``public`` when the database has that schema), once it knows the schema is
its own. pgvector may live in another schema
than the index (``?options=-csearch_path%3Dpolaris`` with the extension in ``public``): its
schema is added to the end of the session's search path, so its types and operators resolve.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConnectionLostError, DatabaseError, ExtensionError
from ..masking import scrub, shown_target as shown

INSTALL_HINT = "in the clone of Polaris, pip install -e '.[postgres]'"
CONNECT_TIMEOUT_S = 10
EXTENSION_LOCK = 0x706F6C61_72697300  # the database's ("polaris" + 0); schema.lock_key: a schema's


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
        polaris_schema = "public"
        vector_schema: str | None = None

    return PolarisPgConnection


_CLASS: type | None = None


def connect(uri: str) -> Any:
    """An autocommit connection to ``uri`` with pgvector's types registered when the database has
    the extension (nothing is created: see ``ensure_vector``)."""
    global _CLASS
    psycopg = driver()

    if _CLASS is None:
        _CLASS = connection_class()
    try:
        conn = _CLASS.connect(uri, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
        raise DatabaseError(scrub(
            f"cannot connect to {shown(uri)} ({reason}). Check that the server is running and the URI's host,"
            " port, user, password and database are right.", [uri])) from None
    conn.polaris_name = shown(uri)
    try:
        use_vector(conn)
    except psycopg.Error as exc:
        conn.close()
        raise DatabaseError(scrub(f"{shown(uri)}: {str(exc).strip()}", [uri])) from None
    return conn


def use_vector(conn: Any) -> None:
    """Find pgvector's schema (``conn.vector_schema``, None without the extension) and Polaris's
    (``conn.polaris_schema``: the first of the search path, made or not); put the extension's
    schema on the search path when it is not, and register its types."""
    from pgvector.psycopg import register_vector

    current, path, found, visible = conn.execute(
        "SELECT current_schema(), current_setting('search_path'), (SELECT n.nspname FROM pg_extension e JOIN"
        " pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'), current_schemas(true)").fetchone()
    conn.polaris_schema = current or first_in_path(path, conn.info.user)
    conn.vector_schema = found
    if found is None:
        return
    if found not in visible:
        conn.execute("SELECT set_config('search_path', current_setting('search_path') || ', ' || quote_ident(%s),"
                     " false)", (found,))
    register_vector(conn)


def first_in_path(search_path: str, user: str) -> str:
    """The first schema a ``search_path`` names (where CREATE puts tables once it exists)."""
    import re

    for item in re.findall(r'"(?:[^"]|"")*"|[^,\s]+', search_path):
        name = item[1:-1].replace('""', '"') if item.startswith('"') else item.lower()
        return user if name == "$user" else name
    return "public"


def ensure_vector(conn: Any, where: str) -> None:
    """Create pgvector when the database has none (a writer's first migration, inside its
    transaction), in ``public`` when the database has that schema (the extension is the
    database's, not one index's), else in Polaris's schema; then register its types. An
    ExtensionError says what to do."""
    psycopg = driver()
    if conn.vector_schema is not None:
        return
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (EXTENSION_LOCK,))  # two schemas at once: one creates it
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public" if conn.execute(
                "SELECT to_regnamespace('public') IS NOT NULL").fetchone()[0] else "CREATE EXTENSION IF NOT EXISTS vector")
        use_vector(conn)
    except psycopg.Error as exc:
        raise ExtensionError(scrub(
            f"{where}: the pgvector extension is not available ({str(exc).strip()}). Install pgvector on the"
            " server (https://github.com/pgvector/pgvector) or have its owner (or a superuser) run CREATE EXTENSION"
            " vector in this database.", [where])) from None


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


def driver_error_message(exc: BaseException, target: str) -> str:
    """What to tell a user about an error psycopg raised on ``target``: what failed and what to do,
    every password masked."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    text = str(exc).strip()
    reason = text.splitlines()[0].strip() if text else type(exc).__name__
    if sqlstate == "42501":
        advice = ("the role lacks a privilege this needs. Have the owner of the database grant it (a new index needs"
                  " GRANT CREATE ON SCHEMA <schema> TO <role>; a new schema GRANT CREATE ON DATABASE <db> TO <role>),"
                  " or name a schema the role may create in (?options=-csearch_path%3DNAME in the URI).")
    elif sqlstate.startswith("08") or type(exc).__name__ == "OperationalError":
        advice = "check that the server is running and reachable, then run the command again."
    elif sqlstate.startswith("53"):
        advice = "the server is short of disk, memory or connections: free some, then run the command again."
    else:
        advice = ("the statement that failed changed nothing (each write is one transaction): fix the cause, then run"
                  " the command again.")
    return scrub(f"PostgreSQL failed on {shown(target)}: {reason}. To go on: {advice}", [target])
