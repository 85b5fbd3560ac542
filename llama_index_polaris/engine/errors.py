"""Errors meant for users: each message says what went wrong and what to do.

    PolarisError
     ├── ConfigError            a polaris.toml value or an argument is invalid
     ├── DatabaseError          polaris.db cannot be opened or used
     │    ├── ExtensionError    sqlite-vec or FTS5 cannot be loaded
     │    ├── ModelMismatchError  the index was built with another model or dim
     │    └── ConnectionLostError  the server's connection went away mid-call; retrying reconnects
     ├── ModelError             an embedding model is unknown, missing or corrupt
     │    └── ModelDownloadError  a model could not be fetched (offline, checksum)
     └── InputError             a document, query or filter that cannot be used
          ├── ScopeError        a search scoped to a collection or document the index lacks
          ├── VectorError       a vector with NaN or infinite values, no length, or the wrong size
          └── NodeIdError       a node id given for two documents, or stored in another one
"""

from __future__ import annotations


class PolarisError(Exception):
    """Base of every error Polaris raises for its users."""


class ConfigError(PolarisError, ValueError):
    """A configuration value (file or argument) is invalid."""


class DatabaseError(PolarisError):
    """The database cannot be opened or used."""


class ExtensionError(DatabaseError):
    """sqlite-vec or FTS5 is not available in this Python's SQLite."""


class ModelMismatchError(DatabaseError):
    """The database was built with a different embedding model or dimension."""


class ConnectionLostError(DatabaseError):
    """The connection to a PostgreSQL index was lost during a call (a restart, a failover, an
    ended session) or could not be made again: that call did not finish, and retrying it
    reconnects. A read found the connection lost before it began is reconnected and run again
    without this error; a write lost inside its transaction is never retried (the server rolled
    it back unless its COMMIT had reached it). A SQLite file has no connection to lose: it never
    raises this (a file that cannot be read is a ``DatabaseError``)."""


class ModelError(PolarisError):
    """An embedding model is unknown, missing or corrupt."""


class ModelDownloadError(ModelError):
    """A model's files could not be downloaded or verified."""


class InputError(PolarisError, ValueError):
    """A document, query or filter cannot be used as given."""


class ScopeError(InputError):
    """A search names collections or documents the index does not have (not: has, but empty).

    ``reasons`` maps ``"collection"`` and/or ``"document"`` to one sentence each, naming
    what is missing and what exists; the message is those sentences.
    """

    def __init__(self, reasons: dict[str, str]) -> None:
        super().__init__(" ".join(reasons.values()))
        self.reasons = dict(reasons)


class VectorError(InputError):
    """A vector that cannot be stored or searched with (``engine.vectors``): NaN or infinite
    values, a length of zero (no direction to compare), or not the index's size."""


class NodeIdError(InputError):
    """A node id given twice in one write, or already stored under another document: a node
    id names one node of one document, so writing it would silently take it from the other."""
