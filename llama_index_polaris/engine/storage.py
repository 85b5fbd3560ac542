"""The storage contract: what the Indexer, the Searcher and the doors ask of an index's store.

Two backends implement it: ``store.Store`` (one SQLite file: sqlite-vec, FTS5, the BM25
posting lists and sign bits of ``db/``) and ``postgres.PgStore`` (PostgreSQL + pgvector,
BM25 from posting tables). Everything above it (the recipe, ``rank()``, explanations,
the doors) is shared and imports neither backend; ``open_store`` picks one from what the
user named: a ``postgresql://`` URI selects Postgres, anything else is a file path.

The contract, by what it keeps:

- documents and chunks: ``upsert_document``, ``upsert_nodes``/``upsert_chunks``,
  ``put_document``, ``set_status``, ``delete_*``, ``clear``, ``get_document``,
  ``documents``, ``files``, ``get_chunks``, ``vectors_by_hash``, ``counts``;
- collections and roots: ``collections``, ``collection_root``, ``set_collection_root``,
  ``remove_collection``;
- model binding: ``model``, ``meta``, ``check_model``, ``bind_model``, ``record_proof``,
  ``vector_sample``;
- batches and snapshots: ``run()`` (a write run), ``batch()`` (derived BM25 data updated
  once), ``read()`` (one consistent snapshot; the search reads below run inside it),
  ``writer_lock()`` (one `polaris index` run at a time);
- search reads: ``resolve_scope`` (5ire scope rules: documents, collections' searchable
  documents, filters, node ids), ``knn`` (cosine KNN candidates in scope), ``bm25``
  (FTS5's BM25 candidates in scope, same scores on both backends), ``chunk_texts``,
  ``candidates`` (what ranking needs: section, heading path, vector), ``hit_rows`` (what
  a hit shows), ``section_rows`` (every chunk of some sections);
- copying: ``export_rows`` and ``import_rows`` (``copy.py``: vectors move, nothing is
  re-embedded).
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

MAX_K = 4096  # the deepest candidate list a backend is asked for (sqlite-vec's limit on k)
SERVER_SCHEMES = ("postgresql://", "postgres://")


def is_server_uri(target: Any) -> bool:
    """True when ``target`` names a database server (a ``postgresql://`` URI), not a file."""
    return isinstance(target, str) and target.lower().startswith(SERVER_SCHEMES)


def open_store(target: str | os.PathLike[str], **kwargs: Any) -> "Storage":
    """The store for ``target``: Postgres for a ``postgresql://`` URI, else the SQLite file."""
    if is_server_uri(str(target)):
        from .postgres import PgStore

        return PgStore(str(target), **kwargs)
    from .store import Store

    return Store(target, **kwargs)


def error_message(exc: BaseException, target: str | os.PathLike[str]) -> str | None:
    """What to tell a user about a backend's own error on ``target`` (None: not a backend error):
    a damaged SQLite file gets the check and the cure, a Postgres error names the server."""
    if is_server_uri(str(target)):
        from .postgres.connect import is_driver_error, shown

        if is_driver_error(exc):
            return f"PostgreSQL failed on {shown(str(target))}: {str(exc).strip()}."
        return None
    from .db.connect import sqlite_error_message

    return sqlite_error_message(exc, target)


@runtime_checkable
class Storage(Protocol):
    """What every backend provides (see the module docstring for the groups)."""

    path: str
    readonly: bool
    kind: str  # "sqlite" or "postgres"

    # lifecycle, runs, batches, snapshots
    def close(self) -> None: ...
    def run(self) -> Any: ...
    def batch(self) -> Any: ...
    def read(self) -> Any: ...
    def writer_lock(self, on_wait: Any = None) -> Any: ...
    def schema_version(self) -> int: ...

    # model binding
    @property
    def model(self) -> Any: ...
    @property
    def meta(self) -> dict[str, str]: ...
    def check_model(self, wanted: Any) -> None: ...
    def bind_model(self, wanted: Any, **settings: Any) -> None: ...
    def record_proof(self, proven: Any) -> bool: ...
    def vector_sample(self, n: int) -> list[Any]: ...

    # documents, chunks, collections
    def upsert_document(self, doc: Any, chunks: Sequence[Any], vectors: Any) -> None: ...
    def upsert_nodes(self, groups: Sequence[tuple[Any, Sequence[Any], Any]]) -> None: ...
    def put_document(self, doc: Any) -> None: ...
    def set_status(self, document_id: str, status: str, error: str | None = None) -> None: ...
    def delete_documents(self, document_ids: Any) -> int: ...
    def delete_nodes(self, node_ids: Any) -> int: ...
    def clear(self) -> None: ...
    def get_document(self, document_id: str) -> Any: ...
    def documents(self, collection: str | None = None) -> list[Any]: ...
    def files(self, collection: str) -> dict[str, Any]: ...
    def get_chunks(self, **kwargs: Any) -> list[Any]: ...
    def vectors_by_hash(self, hashes: Any) -> dict[str, np.ndarray]: ...
    def counts(self) -> dict[str, Any]: ...
    def collections(self) -> dict[str, str | None]: ...
    def collection_root(self, collection: str) -> str | None: ...
    def set_collection_root(self, collection: str, root: str, renames: dict[str, str] | None = None) -> None: ...
    def remove_collection(self, collection: str, *, keep: bool = False) -> int: ...

    # search reads, inside ``read()``
    def resolve_scope(self, **kwargs: Any) -> Any: ...
    def knn(self, query: np.ndarray, k: int, scope: Any, fetch_k: int | None = None) -> list[tuple[int, float]]: ...
    def bm25(self, query: str, k: int, scope: Any) -> list[tuple[int, float]]: ...
    def chunk_texts(self, ids: Sequence[int]) -> dict[int, tuple[str, str]]: ...
    def candidates(self, ids: Sequence[int], with_vectors: bool) -> dict[int, tuple[str, str, Any]]: ...
    def hit_rows(self, ids: Sequence[int]) -> dict[int, tuple]: ...
    def section_rows(self, keys: Sequence[tuple[str, str]], with_text: bool) -> list[tuple]: ...

    # copying
    def export_rows(self) -> Iterator[Any]: ...
    def import_rows(self, rows: Any) -> None: ...


def chunk_batches(ids: Sequence[int], size: int = 5_000) -> Iterator[list[int]]:
    """``ids`` in lists of at most ``size`` (bounded statements on either backend)."""
    ids = list(ids)
    for start in range(0, len(ids), size):
        yield ids[start:start + size]
