"""The Postgres store's collections and their roots (a root moved renames its files' paths)."""

from __future__ import annotations

import json
from typing import Any

from ..storage.records import file_document_id
from ..text import nfc
from .rows import NOW, _retried


class Collections:
    """The store's collections and their roots."""

    def remove_collection(self, collection: str, *, keep: bool = False) -> int:
        """Remove a collection: its documents (with chunks, vectors, postings) and, unless ``keep``, its root."""
        collection = nfc(collection)
        with self._write() as conn:
            self._drop_chunks(conn, "document_id IN (SELECT id FROM documents WHERE collection = %s)", (collection,))
            removed = conn.execute("DELETE FROM documents WHERE collection = %s", (collection,)).rowcount
            if not keep:
                conn.execute("DELETE FROM collections WHERE name = %s", (collection,))
            return removed

    # -- collections -------------------------------------------------------------------
    @_retried
    def collection_root(self, collection: str) -> str | None:
        """The folder a collection's file paths are relative to (None: not set yet)."""
        from ..storage.documents import collection_root  # here: its 8 dataclasses are 5 ms of a cold search

        with self._lock:
            return collection_root(self.conn, collection)

    @_retried
    def collections(self) -> dict[str, str | None]:
        """Every collection and its root."""
        from ..storage.documents import collection_roots  # here: its 8 dataclasses are 5 ms of a cold search

        with self._lock:
            return collection_roots(self.conn)

    def add_collection(self, collection: str) -> None:
        """Record ``collection`` (empty, no root) if it is not there: a name searches may scope to."""
        from ..storage.documents import add_collection  # here: its 8 dataclasses are 5 ms of a cold search

        with self._write():
            add_collection(self.conn, collection)

    def set_collection_root(self, collection: str, root: str, renames: dict[str, str] | None = None) -> None:
        """Set ``collection``'s root; ``renames`` (old path -> new path) re-keys its files with it."""
        collection = nfc(collection)
        with self._write() as conn:
            conn.execute("INSERT INTO collections (name, root) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
                         f" SET root = excluded.root, updated_at = {NOW}", (collection, root))
            for old, new in (renames or {}).items():
                self._rename_file(conn, collection, old, new)

    def _rename_file(self, conn: Any, collection: str, old: str, new: str) -> None:
        row = conn.execute("SELECT id, metadata FROM documents WHERE collection = %s AND path = %s",
                           (collection, old)).fetchone()
        if row is None:
            return
        old_id, meta = row
        new_id = file_document_id(collection, new) if old_id == file_document_id(collection, old) else old_id
        meta = json.dumps({**json.loads(meta), "file_path": new})
        if new_id != old_id:
            conn.execute("INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata,"
                         " created_at) SELECT %s, %s, name, collection, status, error, content_hash, %s, created_at"
                         " FROM documents WHERE id = %s", (new_id, new, meta, old_id))
            conn.execute("UPDATE chunks SET document_id = %s WHERE document_id = %s", (new_id, old_id))
            conn.execute("UPDATE document_texts SET document_id = %s WHERE document_id = %s", (new_id, old_id))
            conn.execute("DELETE FROM documents WHERE id = %s", (old_id,))
        else:
            conn.execute("UPDATE documents SET path = %s, metadata = %s WHERE id = %s", (new, meta, old_id))
