"""The Postgres backend of the storage contract (``engine/storage.py``): PostgreSQL + pgvector.

Selected by a ``postgresql://`` URI wherever a ``polaris.db`` path is accepted. Needs the
``postgres`` extra (psycopg 3 and pgvector's adapters).
"""

from .store import HNSW_FROM, PgStore

__all__ = ["HNSW_FROM", "PgStore"]
