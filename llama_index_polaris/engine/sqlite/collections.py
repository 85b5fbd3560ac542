"""The SQLite store's collections and their roots (a root moved renames its files' paths)."""

from __future__ import annotations

import json

from .schema import file_document_id
from ..text import nfc


class Collections:
    """The store's collections and their roots."""

    def remove_collection(self, collection: str, *, keep: bool = False) -> int:
        """Remove a collection: its documents (with chunks, vectors, FTS rows) and its root.

        ``keep``: the collection stays, empty (a search of it answers no hits, not an unknown name)."""
        collection = nfc(collection)
        with self._write():
            removed = self.conn.execute("DELETE FROM documents WHERE collection = ?", (collection,)).rowcount
            if not keep:
                self.conn.execute("DELETE FROM collections WHERE name = ?", (collection,))
            return removed

    # -- collections ------------------------------------------------------------------
    def collection_root(self, collection: str) -> str | None:
        """The folder a collection's file paths are relative to (None: not set yet)."""
        from ..storage.documents import collection_root  # here: its 8 dataclasses are 5 ms of a cold search

        with self._lock:
            return collection_root(self.conn, collection)

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
        """Set ``collection``'s root; ``renames`` (old path -> new path) re-keys its files with it.

        One transaction: a file keyed ``collection:path`` gets the id of its new path;
        chunks, vectors and FTS rows follow; nothing is re-embedded.
        """
        collection = nfc(collection)
        with self._write():
            self.conn.execute(
                "INSERT INTO collections (name, root) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
                " SET root = excluded.root, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
                (collection, root),
            )
            for old, new in (renames or {}).items():
                self._rename_file(collection, old, new)

    def _rename_file(self, collection: str, old: str, new: str) -> None:
        row = self.conn.execute(
            "SELECT id, metadata FROM documents WHERE collection = ? AND path = ?", (collection, old)
        ).fetchone()
        if row is None:
            return
        old_id, meta = row
        new_id = file_document_id(collection, new) if old_id == file_document_id(collection, old) else old_id
        meta = {**json.loads(meta), "file_path": new}
        if new_id != old_id:  # a new key: insert it, move the chunks, drop the old row (foreign keys stay on)
            self.conn.execute(
                "INSERT INTO documents (id, path, name, collection, status, error, content_hash, metadata,"
                " created_at) SELECT ?, ?, name, collection, status, error, content_hash, ?, created_at"
                " FROM documents WHERE id = ?",
                (new_id, new, json.dumps(meta), old_id),
            )
            self.conn.execute("UPDATE chunks SET document_id = ? WHERE document_id = ?", (new_id, old_id))
            self.conn.execute("UPDATE document_texts SET document_id = ? WHERE document_id = ?", (new_id, old_id))
            self.conn.execute("DELETE FROM documents WHERE id = ?", (old_id,))
        else:
            self.conn.execute(
                "UPDATE documents SET path = ?, metadata = ? WHERE id = ?", (new, json.dumps(meta), old_id)
            )
