"""SQLite access: connections with extensions, schema and migrations."""

from .connect import MEMORY, checkpoint, connect, load_extensions, restore_side_files, sqlite_module, write_problem
from .schema import SCHEMA_VERSION, create_vec_table, migrate, rebuild_fts, schema_version, transaction

__all__ = [
    "MEMORY",
    "SCHEMA_VERSION",
    "checkpoint",
    "connect",
    "create_vec_table",
    "load_extensions",
    "migrate",
    "rebuild_fts",
    "restore_side_files",
    "schema_version",
    "sqlite_module",
    "transaction",
    "write_problem",
]
