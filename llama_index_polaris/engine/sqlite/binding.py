"""The SQLite store's model binding: the model its vectors are of, checked on every write, and its proof."""

from __future__ import annotations

import json
from typing import Any

from .. import sqlite as db
from .schema import get_meta, set_meta, transaction
from ..storage.records import (UNKNOWN_MODEL, ChunkRecord, ModelBinding, check_binding, recorded_binding, recorded_dim,
                               spread_sample, unknown_model_message)
from ..errors import DatabaseError, ModelMismatchError
from .rows import _chunk_from_row, OWN_CHUNK_COLUMNS


class Binding:
    """The store's model binding: which model's vectors it holds, and their proof."""

    # -- model guard -------------------------------------------------------------
    @property
    def meta(self) -> dict[str, str]:
        """The polaris_meta rows."""
        with self._lock:
            return get_meta(self.conn)

    @property
    def model(self) -> ModelBinding | None:
        """The model this index was built with, or None before the first write."""
        return recorded_binding(self.meta, self._proven)

    def check_model(self, wanted: ModelBinding) -> None:
        """Raise ModelMismatchError when ``wanted`` differs from the recorded model."""
        check_binding(self.model, wanted, self.path)

    def bind_model(self, wanted: ModelBinding, **settings: Any) -> None:
        """Record ``wanted`` (and chunker ``settings``) on first use; refuse a different one."""
        self.check_model(wanted)
        with self._write():
            self.check_model(wanted)  # again inside the lock: another process may have bound one
            if self.model is None:
                set_meta(
                    self.conn,
                    model_id=wanted.model_id,
                    embedding_dim=wanted.dim,
                    model_fingerprint=wanted.fingerprint,
                    doc_prefix=wanted.doc_prefix,
                    query_prefix=wanted.query_prefix,
                )
                db.create_vec_table(self.conn, wanted.dim)
            if settings:
                set_meta(self.conn, chunker=json.dumps(settings, sort_keys=True))

    def record_proof(self, proven: ModelBinding) -> bool:
        """Record ``proven`` as the model of a file whose binding is ``unknown`` (see ``proof.prove``).

        A read-only Store records it through a short write of its own; where the file cannot
        be written at all, this Store alone trusts ``proven`` until it is closed. Returns True
        when the file now records it.
        """
        if not self.readonly:
            with self._write():
                self._record_proof(self.conn, proven)
            return True
        try:
            conn = db.connect(self.path)
            try:
                with transaction(conn):
                    self._record_proof(conn, proven)
            finally:
                conn.close()
        except ModelMismatchError:
            raise
        except (DatabaseError, db.sqlite_module().Error):  # a read-only file or file system
            self._proven = proven
            return False
        return True

    def _record_proof(self, conn: Any, proven: ModelBinding) -> None:
        meta = get_meta(conn)
        if meta.get("model_id") != UNKNOWN_MODEL:  # another process recorded a model meanwhile
            if "model_id" in meta:
                self.check_model(proven)
            return
        dim = recorded_dim(meta)
        if dim != proven.dim:
            raise ModelMismatchError(unknown_model_message(ModelBinding(UNKNOWN_MODEL, dim),
                                                           proven, self.path))
        set_meta(conn, model_id=proven.model_id, model_fingerprint=proven.fingerprint,
                 doc_prefix=proven.doc_prefix, query_prefix=proven.query_prefix)

    def vector_sample(self, n: int) -> list[ChunkRecord]:
        """Up to ``n`` chunks that have a vector, spread evenly over the file (by rowid), each
        with its own metadata (not merged with its document's) and its vector."""
        with self._lock:
            ids = spread_sample(self.conn, n, "?")
            if not ids:
                return []
            rows = self.conn.execute(
                f"SELECT {OWN_CHUNK_COLUMNS}, c.embedding FROM chunks c"
                " WHERE c.id IN (SELECT value FROM json_each(?)) ORDER BY c.id",
                (json.dumps(ids),),
            ).fetchall()
        return [_chunk_from_row(r, True) for r in rows]
