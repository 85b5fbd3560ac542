"""The schema of polaris.db and its numbered, transactional migrations.

``PRAGMA user_version`` holds the number of the last migration applied, so a file
made by this version opens in later ones. The vector table's size depends on the
model, so ``chunks_vec`` is created when a model is first bound (``create_vec_table``).
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import DatabaseError

META_TABLE = "polaris_meta"

CORE_SQL = """
CREATE TABLE polaris_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE documents (
    id           TEXT PRIMARY KEY,
    path         TEXT,
    name         TEXT,
    collection   TEXT NOT NULL DEFAULT 'default',
    status       TEXT NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    error        TEXT,
    content_hash TEXT,
    metadata     TEXT NOT NULL DEFAULT '{}',
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX documents_collection_status ON documents (collection, status);
CREATE INDEX documents_path ON documents (path);
CREATE TABLE chunks (
    id            INTEGER PRIMARY KEY,
    node_id       TEXT NOT NULL UNIQUE,
    document_id   TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    ordinal       INTEGER NOT NULL,
    heading_path  TEXT NOT NULL DEFAULT '',
    heading_level INTEGER NOT NULL DEFAULT 0,
    text          TEXT NOT NULL,
    start_char    INTEGER,
    end_char      INTEGER,
    token_count   INTEGER,
    text_hash     TEXT NOT NULL,
    metadata      TEXT NOT NULL DEFAULT '{}',
    embedding     BLOB
);
CREATE INDEX chunks_document_ordinal ON chunks (document_id, ordinal);
CREATE INDEX chunks_text_hash ON chunks (text_hash);
"""


def fts_sql(tokenizer: str) -> str:
    """The FTS5 external-content table over chunks and the triggers that sync it.

    ``content="chunks"`` is double-quoted because that is the declaration Datasette (and
    sqlite-utils) recognise as the full-text index of ``chunks``: its table search box and
    ``?_search=`` use it. FTS5 reads the quoted and single-quoted forms the same way.
    """
    return f"""
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text, heading_path, content="chunks", content_rowid='id', tokenize='{tokenizer}'
);
CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
END;
CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading_path)
    VALUES ('delete', old.id, old.text, old.heading_path);
END;
CREATE TRIGGER chunks_fts_au AFTER UPDATE OF text, heading_path ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text, heading_path)
    VALUES ('delete', old.id, old.text, old.heading_path);
    INSERT INTO chunks_fts (rowid, text, heading_path) VALUES (new.id, new.text, new.heading_path);
END;
INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
"""


def vec_sql(dim: int) -> str:
    """The vec0 table (cosine) and the triggers that keep it equal to chunks.embedding."""
    return f"""
CREATE VIRTUAL TABLE chunks_vec USING vec0(
    embedding float[{int(dim)}] distance_metric=cosine,
    document_id text
);
CREATE TRIGGER chunks_vec_ai AFTER INSERT ON chunks WHEN new.embedding IS NOT NULL BEGIN
    INSERT INTO chunks_vec (rowid, embedding, document_id) VALUES (new.id, new.embedding, new.document_id);
END;
CREATE TRIGGER chunks_vec_ad AFTER DELETE ON chunks BEGIN
    DELETE FROM chunks_vec WHERE rowid = old.id;
END;
CREATE TRIGGER chunks_vec_au AFTER UPDATE OF embedding ON chunks BEGIN
    DELETE FROM chunks_vec WHERE rowid = old.id;
    INSERT INTO chunks_vec (rowid, embedding, document_id)
    SELECT new.id, new.embedding, new.document_id WHERE new.embedding IS NOT NULL;
END;
INSERT INTO chunks_vec (rowid, embedding, document_id)
    SELECT id, embedding, document_id FROM chunks WHERE embedding IS NOT NULL;
"""


def _migration_1(conn: Any, fts_tokenizer: str) -> None:
    """Core tables: meta, documents, chunks."""
    _script(conn, CORE_SQL)


def _migration_2(conn: Any, fts_tokenizer: str) -> None:
    """Full-text index over chunk text and heading path (backfilled from chunks)."""
    _script(conn, fts_sql(fts_tokenizer))
    set_meta(conn, fts_tokenizer=fts_tokenizer)


def _migration_fts_for_datasette(conn: Any, fts_tokenizer: str) -> None:
    """Re-declare chunks_fts with content="chunks" (was content='chunks', which Datasette's
    FTS detection does not see): the table and its triggers are rebuilt from chunks with
    the tokenizer the file records, not the one configured now."""
    recorded = get_meta(conn).get("fts_tokenizer") or fts_tokenizer
    rebuild_fts(conn, recorded)


MIGRATIONS: tuple[tuple[int, str, Callable[[Any, str], None]], ...] = (
    (1, "core tables", _migration_1),
    (2, "full-text index", _migration_2),
    (3, "full-text index declared so that Datasette detects it", _migration_fts_for_datasette),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def _script(conn: Any, sql: str) -> None:
    for statement in _statements(sql):
        conn.execute(statement)


def _statements(sql: str) -> list[str]:
    """Split a script into statements (triggers contain inner semicolons)."""
    out, buf = [], []
    for line in sql.strip().splitlines():
        buf.append(line)
        text = "\n".join(buf).strip()
        if text.endswith(";") and (not text.upper().startswith("CREATE TRIGGER") or text.endswith("END;")):
            out.append(text)
            buf = []
    if "\n".join(buf).strip():
        out.append("\n".join(buf))
    return out


def schema_version(conn: Any) -> int:
    """The number of the last migration applied to this file."""
    return conn.execute("PRAGMA user_version").fetchone()[0]


def migrate(conn: Any, fts_tokenizer: str) -> list[int]:
    """Apply the pending migrations, each in its own transaction; return their numbers."""
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise DatabaseError(
            f"this index has schema version {current}, newer than this Polaris ({SCHEMA_VERSION});"
            " upgrade Polaris (`pip install -U llama-index-polaris`)."
        )
    applied = []
    for number, _name, step in MIGRATIONS:
        if number <= current:
            continue
        with transaction(conn):
            if schema_version(conn) >= number:  # another process got there first
                continue
            if number == 1:
                refuse_foreign_tables(conn)
            step(conn, fts_tokenizer)
            conn.execute(f"PRAGMA user_version = {number}")
        applied.append(number)
    return applied


def refuse_foreign_tables(conn: Any, where: str = "this SQLite file") -> None:
    """A file at version 0 with tables is someone else's database: do not write into it."""
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    )]
    if names:
        raise DatabaseError(
            f"{where} is not a Polaris index (it already has tables: {', '.join(names[:5])});"
            " pass --db with a new file."
        )


class transaction:
    """``with transaction(conn):`` BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        # SQLite may already have rolled back (SQLITE_FULL, an interrupt): a second
        # ROLLBACK would raise and hide the original error.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


def get_meta(conn: Any) -> dict[str, str]:
    """All polaris_meta rows (empty before the first migration)."""
    if not has_table(conn, META_TABLE):
        return {}
    return dict(conn.execute(f"SELECT key, value FROM {META_TABLE}").fetchall())


def set_meta(conn: Any, **values: Any) -> None:
    """Upsert polaris_meta rows (values stored as text)."""
    conn.executemany(
        f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [(k, str(v)) for k, v in values.items()],
    )


def has_table(conn: Any, name: str) -> bool:
    """True when ``name`` is a table or virtual table in the main schema."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ? AND type = 'table'", (name,)).fetchone()
    return row is not None


def create_vec_table(conn: Any, dim: int) -> None:
    """Create chunks_vec for ``dim`` and backfill it (inside the caller's transaction)."""
    _script(conn, vec_sql(dim))


def rebuild_fts(conn: Any, tokenizer: str) -> None:
    """Recreate chunks_fts with another tokenizer (inside the caller's transaction)."""
    for name in ("chunks_fts_ai", "chunks_fts_ad", "chunks_fts_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE IF EXISTS chunks_fts")
    _script(conn, fts_sql(tokenizer))
    set_meta(conn, fts_tokenizer=tokenizer)
