"""The Postgres store's model binding: the model its vectors are of, checked on every write, and its proof."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ModelMismatchError
from ..storage.records import (UNKNOWN_MODEL, ChunkRecord, ModelBinding, check_binding, recorded_binding, recorded_dim,
                               spread_sample, unknown_model_message)
from . import schema
from .rows import _chunk, CHUNK_COLUMNS, _retried


class Binding:
    """The store's model binding: which model's vectors it holds, and their proof."""

    # -- model binding -----------------------------------------------------------------
    @property
    @_retried
    def meta(self) -> dict[str, str]:
        """The polaris_meta rows."""
        with self._lock:
            return dict(self.conn.execute("SELECT key, value FROM polaris_meta").fetchall())

    @property
    def model(self) -> ModelBinding | None:
        """The model this index was built with, or None before the first write (a named model,
        once read, is kept: a binding never changes)."""
        if self._model is not None:
            return self._model
        meta = self.meta
        recorded = recorded_binding(meta, self._proven)
        if recorded is not None and meta["model_id"] != UNKNOWN_MODEL:
            self._model = recorded
        return recorded

    def check_model(self, wanted: ModelBinding) -> None:
        """Raise ModelMismatchError when ``wanted`` differs from the recorded model."""
        check_binding(self.model, wanted, self.path)

    def _set_meta(self, conn: Any, **values: Any) -> None:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO polaris_meta (key, value) VALUES (%s, %s)"
                            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            [(k, str(v)) for k, v in values.items()])

    def bind_model(self, wanted: ModelBinding, **settings: Any) -> None:
        """Record ``wanted`` (and chunker ``settings``) on first use; refuse a different one."""
        self.check_model(wanted)
        with self._write() as conn:
            self.check_model(wanted)  # again inside the lock: another process may have bound one
            if self.model is None:
                self._set_meta(conn, model_id=wanted.model_id, embedding_dim=wanted.dim,
                               model_fingerprint=wanted.fingerprint, doc_prefix=wanted.doc_prefix,
                               query_prefix=wanted.query_prefix)
                schema.retype_vectors(conn, wanted.dim)
            if settings:
                self._set_meta(conn, chunker=json.dumps(settings, sort_keys=True))

    def record_proof(self, proven: ModelBinding) -> bool:
        """Record ``proven`` as the model of an index whose binding is ``unknown`` (``proof.prove``)."""
        if self.readonly:
            self._proven = proven
            return False
        with self._write() as conn:
            meta = self.meta
            if meta.get("model_id") != UNKNOWN_MODEL:
                if "model_id" in meta:
                    self.check_model(proven)
                return True
            dim = recorded_dim(meta)
            if dim != proven.dim:
                raise ModelMismatchError(unknown_model_message(
                    ModelBinding(UNKNOWN_MODEL, dim), proven, self.path))
            self._set_meta(conn, model_id=proven.model_id, model_fingerprint=proven.fingerprint,
                           doc_prefix=proven.doc_prefix, query_prefix=proven.query_prefix)
        return True

    @_retried
    def vector_sample(self, n: int) -> list[ChunkRecord]:
        """Up to ``n`` chunks that have a vector, spread evenly over the index (by id), each with
        its own metadata and its vector."""
        with self._lock:
            ids = spread_sample(self.conn, n, "%s")
            if not ids:
                return []
            rows = self.conn.execute(f"SELECT {CHUNK_COLUMNS}, c.embedding FROM chunks c JOIN documents d"
                                     " ON d.id = c.document_id WHERE c.id = ANY(%s) ORDER BY c.id", (ids,)).fetchall()
        return [_chunk(r, True, own=True) for r in rows]
