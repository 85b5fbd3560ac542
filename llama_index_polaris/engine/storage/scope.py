"""Search scope: which documents and chunks a query may return (5ire's scoping).

Documents and collections are resolved to a set of document ids (a collection means
its searchable documents, joined with the documents named); metadata filters and node
ids to a set of chunk ids. Both are applied inside the KNN and FTS queries.

5ire scopes a collection to its completed documents. Polaris takes every document that has a
committed version (``SEARCHABLE``): ``completed``; ``stale``, a file whose re-index failed,
which keeps serving its last good version (each such hit says so); and ``processing``, a
document whose new version is being written, or was when a run was killed (#34). A
document's chunks are only ever written, and swapped for the old ones, in the transaction
that marks it ``completed`` (both backends refuse chunks under ``processing``), so what a
processing document holds is the version last committed, never half of the new one; a new
document holds nothing until then. ``pending`` (chunks a store user wrote but did not
release) and ``failed`` stay out. A document being rewritten answers in a collection as it does
unscoped, by its name or through a filter.

A collection or document named that the index does not have is a ``ScopeError`` naming it
(``names``); one that exists but has nothing searchable scopes to nothing (an empty list).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from .dialect import dialect, execute
from ..errors import InputError, ScopeError
from ..text import storable
from .filters import Filter, filter_sql, filter_sql_pg, with_document_id
from .names import collections_named, known_documents

SEARCHABLE = ("completed", "stale", "processing")  # the statuses of a document with a committed version
CHUNKS_WITH_DOCUMENTS = "chunks c JOIN documents d ON d.id = c.document_id"
# A chunk's metadata as readers see it: its document's (front matter, file_path), then its own.
MERGED_METADATA = "CASE d.metadata WHEN '{}' THEN c.metadata ELSE json_patch(d.metadata, c.metadata) END"


@dataclass(frozen=True)
class Scope:
    """Resolved scope; None means no restriction, an empty tuple means nothing."""

    document_ids: tuple[str, ...] | None = None
    chunk_ids: tuple[int, ...] | None = None

    @property
    def empty(self) -> bool:
        """True when the scope can match nothing."""
        return self.document_ids == () or self.chunk_ids == ()

    def sql(self, id_column: str, doc_column: str | None) -> tuple[str, list[Any]]:
        """``AND ...`` restricting ``id_column`` (a chunk id) to this scope."""
        parts, args = [], []
        if self.document_ids is not None:
            if doc_column:
                parts.append(f"{doc_column} IN (SELECT value FROM json_each(?))")
            else:
                parts.append(f"{id_column} IN (SELECT id FROM chunks WHERE document_id IN (SELECT value FROM json_each(?)))")
            args.append(json.dumps(list(self.document_ids)))
        if self.chunk_ids is not None:
            parts.append(f"{id_column} IN (SELECT value FROM json_each(?))")
            args.append(json.dumps(list(self.chunk_ids)))
        return "".join(f" AND {p}" for p in parts), args


def _unique(values: Sequence[str] | None, what: str) -> list[str]:
    """Distinct ids; a bare string, a non-string item or an empty name is refused, not guessed at."""
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, set, frozenset)):
        raise InputError(f"{what} must be a list of strings, got {type(values).__name__} {values!r:.60}.")
    bad = [v for v in values if not isinstance(v, str)]
    if bad:
        raise InputError(f"{what} must be a list of strings; {bad[0]!r} is a {type(bad[0]).__name__}.")
    if any(not v for v in values):  # it named nothing: an error, never a silently empty scope
        raise InputError(f"{what} holds an empty name; leave it out to search every one.")
    return list(dict.fromkeys(values))


def resolve_documents(conn: Any, documents: Sequence[str] | None, collections: Sequence[str] | None) -> tuple[str, ...] | None:
    """Document ids for the named documents (id or path) and searchable docs of collections;
    a ScopeError names the collections and documents the index does not have."""
    if documents is None and collections is None:
        return None
    docs, cols = _unique(documents, "documents"), _unique(collections, "collections")
    reasons: dict[str, str] = {}
    found: dict[str, None] = {}
    for names, resolve in ((docs, known_documents), (cols, _collection_documents)):
        try:
            found.update(dict.fromkeys(resolve(conn, names) if names else ()))
        except ScopeError as exc:
            reasons.update(exc.reasons)
    if reasons:
        raise ScopeError(reasons)
    return tuple(found)


def _collection_documents(conn: Any, names: Sequence[str]) -> list[str]:
    stored = collections_named(conn, names)
    return list(_ids(conn, _IN_COLLECTIONS, SEARCHABLE, stored)) if stored else []


_IN_COLLECTIONS = ("SELECT id FROM documents WHERE status IN (SELECT value FROM json_each(?))"
                   " AND collection IN (SELECT value FROM json_each(?))")


def _ids(conn: Any, sql: str, *lists: Sequence[str]) -> dict[str, None]:
    """The first column of ``sql``'s rows, in order, each list passed as one JSON array."""
    return dict.fromkeys(r[0] for r in execute(conn, sql, [json.dumps(list(v)) for v in lists]))


def resolve_chunks(conn: Any, filters: Filter | None, node_ids: Sequence[str] | None) -> tuple[int, ...] | None:
    """Chunk ids passing ``filters`` and in ``node_ids`` (an empty node_ids list means no filter)."""
    where, args = [], []
    if filters is not None:
        # jsonb's || is a shallow merge and json_patch (the metadata shown) a deep one, but a filter reads
        # one top-level key: both give it the chunk's value, else the document's; a null there (which
        # json_patch removes) is a missing key to every operator, and no operator reads inside an object
        # (tests/test_backend_parity.py checks every operator over nested metadata on both backends)
        if dialect(conn) == "postgres":  # jsonb: the document's metadata, then the chunk's own
            sql, params = filter_sql_pg(filters, with_document_id(filters, "(d.metadata::jsonb || c.metadata::jsonb)", True))
        else:
            sql, params = filter_sql(filters, with_document_id(filters, f"({MERGED_METADATA})"))
        where.append(f"({sql})")
        args += params
    if node_ids:
        node_ids = [storable(i) for i in _unique(node_ids, "node_ids")]  # as stored, as get_chunks reads them
        where.append("c.node_id IN (SELECT value FROM json_each(?))")
        args.append(json.dumps(list(node_ids)))
    if not where:
        return None
    rows = execute(conn, f"SELECT c.id FROM {CHUNKS_WITH_DOCUMENTS} WHERE {' AND '.join(where)}", args).fetchall()
    return tuple(r[0] for r in rows)


def within(conn: Any, document_ids: tuple[str, ...] | None, collection: str) -> tuple[str, ...] | None:
    """``document_ids`` (None: all) narrowed to the documents of ``collection`` (a ScopeError
    when the index has no such collection)."""
    stored = collections_named(conn, [collection])
    if not stored:
        return ()  # ``default`` in a file without collections: nothing yet
    names = json.dumps(stored)
    if document_ids is None:
        others = execute(conn, "SELECT 1 FROM documents WHERE collection NOT IN (SELECT value FROM json_each(?))"
                              " LIMIT 1", (names,)).fetchone()
        if others is None:
            return None  # the whole index is this collection: no filter to pay for
        rows = execute(conn, "SELECT id FROM documents WHERE collection IN (SELECT value FROM json_each(?))",
                            (names,)).fetchall()
        return tuple(r[0] for r in rows)
    rows = execute(conn, 
        "SELECT id FROM documents WHERE collection IN (SELECT value FROM json_each(?))"
        " AND id IN (SELECT value FROM json_each(?))",
        (names, json.dumps(list(document_ids))),
    ).fetchall()
    keep = {r[0] for r in rows}
    return tuple(d for d in document_ids if d in keep)


def resolve_scope(
    conn: Any,
    *,
    documents: Sequence[str] | None = None,
    collections: Sequence[str] | None = None,
    filters: Filter | None = None,
    node_ids: Sequence[str] | None = None,
    within_collection: str | None = None,
) -> Scope:
    """The Scope for these restrictions (``within_collection`` intersects, the others unite)."""
    document_ids = resolve_documents(conn, documents, collections)
    if within_collection is not None:
        document_ids = within(conn, document_ids, within_collection)
    return Scope(document_ids, resolve_chunks(conn, filters, node_ids))
