"""SQL functions registered on every Datasette connection.

    polaris_embed(text)                 -> float32 blob of the query vector (for vec0 MATCH)
    polaris_search(query[, k[, opts]])  -> JSON array of hybrid hits with their explanation

``opts`` is a JSON object with any of ``mode`` ("hybrid", "vector", "bm25"),
``collections`` and ``documents`` (lists of names), ``unit`` ("section", the
default, or "chunk") and ``context_tokens`` (each section hit's text, cut to that many
tokens, as ``section_text``). Both functions use the model
recorded in the database they run on.

A function that cannot answer returns ``{"error": "<function>: <reason>"}`` (JSON text)
instead of its result. Raising would fail the query, but Python's sqlite3 replaces the
message of any exception raised in a SQL function by "user-defined function raised
exception", and that fixed text is all Datasette (or any client) ever receives: the
reason would only reach the server's stderr. A JSON object cannot be mistaken for the
hits (always an array) and ``json_each`` over it yields one row, key ``error``; for
``polaris_embed`` a vec0 ``MATCH`` refuses the text, as it should, and selecting the
function alone shows why. Unexpected failures (bugs) are also logged with a traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from llama_index_polaris.engine.sqlite.connect import sqlite_error_message
from llama_index_polaris.engine.errors import DatabaseError, InputError, PolarisError
from llama_index_polaris.engine.search.pipeline import check_query
from llama_index_polaris.engine.sqlite.store import to_blob

from .engines import database_path, index_for

log = logging.getLogger(__name__)


def register(conn: Any, database: str, datasette: Any) -> None:
    """Create the functions on ``conn``, bound to the file behind ``database``."""
    path = database_path(datasette, database)

    def embed(text: Any) -> bytes:
        if not isinstance(text, str):
            raise InputError(f"polaris_embed(text) needs text, got {_type(text)}.")
        return to_blob(_index(path, database).embed_query(check_query(text, "polaris_embed(text)")))

    def search(query: Any, k: Any = None, options: Any = None) -> str:
        if not isinstance(query, str):
            raise InputError(f"polaris_search(query, k) needs a text query, got {_type(query)}.")
        if isinstance(k, str) and k.strip().lstrip("+-").isdigit():
            k = int(k)  # a named parameter (`polaris_search(:q, :k)`) arrives from the URL as text
        if isinstance(k, float) and k.is_integer():
            k = int(k)  # SQLite reads a literal past 2**63 as REAL: a whole number all the same (clamped below)
        if k is not None and not isinstance(k, int):
            raise InputError(f"polaris_search: k must be an integer, got {_type(k)}.")
        hits = _index(path, database).searcher().search(query, top_k=k, **_options(options))
        return json.dumps([h.to_dict() for h in hits], ensure_ascii=False)

    where = path or database
    conn.create_function("polaris_embed", 1, _reported("polaris_embed", embed, where), deterministic=True)
    for n in (1, 2, 3):
        conn.create_function("polaris_search", n, _reported("polaris_search", search, where))


def _index(path: str | None, database: str) -> Any:
    if path is None:
        raise DatabaseError(f"database {database!r} is not a file, so it holds no Polaris index.")
    return index_for(path)


OPTIONS = ("mode", "collections", "documents", "unit", "context_tokens")


def _options(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        opts = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        opts = None
    if not isinstance(opts, dict):
        raise InputError("polaris_search: options must be a JSON object, e.g. '{\"mode\": \"bm25\"}'.")
    unknown = set(opts) - set(OPTIONS)
    if unknown:
        raise InputError(f"polaris_search: unknown options {', '.join(sorted(unknown))}; use {', '.join(OPTIONS)}.")
    return opts


def _type(value: Any) -> str:
    return "NULL" if value is None else type(value).__name__


def _reported(name: str, fn: Callable[..., Any], where: str) -> Callable[..., Any]:
    """Wrap ``fn`` so that a failure returns ``{"error": ...}`` naming the function and the reason."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except PolarisError as exc:  # meant for users: the message is the whole story
            return error_value(name, str(exc))
        except Exception as exc:  # a damaged file, or a bug: the traceback goes to the log, the gist to the client
            damaged = sqlite_error_message(exc, where)
            if damaged is not None:
                return error_value(name, damaged)
            log.exception("%s failed", name)
            return error_value(name, f"{type(exc).__name__}: {exc}")

    call.__name__ = name
    return call


def error_value(name: str, reason: str) -> str:
    """The JSON text a failed function returns: ``{"error": "name: reason"}``."""
    message = reason if reason.startswith(name) else f"{name}: {reason}"
    return json.dumps({"error": message}, ensure_ascii=False)
