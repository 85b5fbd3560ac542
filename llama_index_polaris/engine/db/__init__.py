"""SQLite access: connections with extensions, schema and migrations."""

from .connect import connect, load_extensions, sqlite_module
from .schema import SCHEMA_VERSION, create_vec_table, migrate, rebuild_fts, schema_version, transaction

__all__ = [
    "SCHEMA_VERSION",
    "connect",
    "create_vec_table",
    "load_extensions",
    "migrate",
    "rebuild_fts",
    "schema_version",
    "sqlite_module",
    "transaction",
]
