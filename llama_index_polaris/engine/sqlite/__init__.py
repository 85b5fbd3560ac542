"""SQLite access: connections with extensions, schema and migrations."""

from .connect import (MAP_FROM_READ, MEMORY, checkpoint, connect, load_extensions, map_file, restore_side_files,
                      sqlite_module, write_problem)
from .schema import SCHEMA_VERSION, create_vec_table, migrate, rebuild_fts, schema_version, transaction

__all__ = [
    "MAP_FROM_READ",
    "MEMORY",
    "SCHEMA_VERSION",
    "checkpoint",
    "connect",
    "create_vec_table",
    "load_extensions",
    "map_file",
    "migrate",
    "rebuild_fts",
    "restore_side_files",
    "schema_version",
    "sqlite_module",
    "transaction",
    "write_problem",
]
