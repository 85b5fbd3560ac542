"""The schema of polaris.db and its numbered, transactional migrations.

``PRAGMA user_version`` holds the number of the last migration applied, so a file
made by this version opens in later ones. The vector table's size depends on the
model, so ``chunks_vec`` is created when a model is first bound (``create_vec_table``).

A document's identity is its collection plus its path relative to that collection's
root (``collections.root``); ``documents.id`` is a key given once (``collection:path``
for files, the LlamaIndex ref_doc_id for nodes added through the vector store).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from ..words.bigrams import SEGMENTER, spaced
from ..words.blobs import readable
from ..config import SETTINGS_BY_NAME
from ..errors import DatabaseError
from ..storage.scope import CHUNKS_WITH_DOCUMENTS, MERGED_METADATA  # noqa: F401
from ..storage.records import CHUNK_OWN_KEYS, DEFAULT_COLLECTION, STATUSES, file_document_id, recorded_dim  # noqa: F401

META_TABLE = "polaris_meta"
from ..sqlite_module import SECURE_FTS_SQLITE  # noqa: E402  the first SQLite with FTS5 'secure-delete'

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


LEGACY_FTS_COLUMNS = ("text", "heading_path")  # what chunks_fts indexed before migration 9
FTS_COLUMNS = ("fts_text", "fts_heading_path")  # generated: the CJK bigram text when there is one, else the text


def fts_sql(tokenizer: str, columns: tuple[str, str] = FTS_COLUMNS) -> str:
    """The FTS5 external-content table over chunks and the triggers that sync it.

    ``content="chunks"`` is double-quoted because that is the declaration Datasette (and
    sqlite-utils) recognise as the full-text index of ``chunks``: its table search box and
    ``?_search=`` use it. FTS5 reads the quoted and single-quoted forms the same way.
    Since migration 9 it indexes the generated columns ``fts_text`` and ``fts_heading_path``
    (``CJK_SQL``: a chunk's text without blobs and with CJK runs as bigrams, where that differs
    from the text): the index holds exactly what its content table says, so FTS5's
    'rebuild' and 'integrity-check' (sqlite-utils', Datasette's) keep working.
    """
    text, heading = columns
    changed = "text, heading_path" + (", cjk_text, cjk_heading" if columns == FTS_COLUMNS else "")
    check_tokenizer(tokenizer)
    return f"""
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    {text}, {heading}, content="chunks", content_rowid='id', tokenize='{tokenizer}'
);
CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, {text}, {heading}) VALUES (new.id, new.{text}, new.{heading});
END;
CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, {text}, {heading})
    VALUES ('delete', old.id, old.{text}, old.{heading});
END;
CREATE TRIGGER chunks_fts_au AFTER UPDATE OF {changed} ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, {text}, {heading})
    VALUES ('delete', old.id, old.{text}, old.{heading});
    INSERT INTO chunks_fts (rowid, {text}, {heading}) VALUES (new.id, new.{text}, new.{heading});
END;
INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
"""


def check_tokenizer(tokenizer: Any) -> None:
    """DatabaseError unless ``tokenizer`` is a ``tokenize=`` argument the config would accept. A
    file records its tokenizer in polaris_meta, and an upgrade makes SQL of it: a file edited by
    hand must not run what it likes in the process that opens it (other files included)."""
    problem = SETTINGS_BY_NAME["fts_tokenizer"].check(tokenizer)
    if problem:
        raise DatabaseError(
            f"this index records the FTS5 tokenizer {tokenizer!r}, which {problem}: the file was edited or damaged."
            " Nothing was changed. Restore it from a backup, or delete it and run `polaris index` again."
        )


VEC_DOCUMENT_TRIGGER = """
CREATE TRIGGER chunks_vec_adoc AFTER UPDATE OF document_id ON chunks BEGIN
    UPDATE chunks_vec SET document_id = new.document_id WHERE rowid = new.id;
END;"""


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
END;{VEC_DOCUMENT_TRIGGER}
INSERT INTO chunks_vec (rowid, embedding, document_id)
    SELECT id, embedding, document_id FROM chunks WHERE embedding IS NOT NULL;
"""


BITS_TABLE = "chunks_bits"


def bits_sql(dim: int) -> str:
    """The sign-bit index (#17): a vec0 ``bit[dim]`` table holding ``vec_quantize_binary`` of
    every chunk vector (bit i set when component i > 0), kept equal to chunks.embedding by
    triggers and backfilled from it. Search reads it to pick candidates by Hamming
    distance, then re-scores them exactly from chunks.embedding (``search/ann.py``).

    Inside a trigger an ``INSERT ... SELECT`` loses the bit subtype that
    ``vec_quantize_binary`` sets (vec0 then refuses the row), so every trigger inserts
    with ``VALUES``; the NULL case of an update has a trigger of its own."""
    return f"""
CREATE VIRTUAL TABLE {BITS_TABLE} USING vec0(embedding bit[{int(dim)}]);
CREATE TRIGGER chunks_bits_ai AFTER INSERT ON chunks WHEN new.embedding IS NOT NULL BEGIN
    INSERT INTO {BITS_TABLE} (rowid, embedding) VALUES (new.id, vec_quantize_binary(new.embedding));
END;
CREATE TRIGGER chunks_bits_ad AFTER DELETE ON chunks BEGIN
    DELETE FROM {BITS_TABLE} WHERE rowid = old.id;
END;
CREATE TRIGGER chunks_bits_au AFTER UPDATE OF embedding ON chunks WHEN new.embedding IS NOT NULL BEGIN
    DELETE FROM {BITS_TABLE} WHERE rowid = old.id;
    INSERT INTO {BITS_TABLE} (rowid, embedding) VALUES (new.id, vec_quantize_binary(new.embedding));
END;
CREATE TRIGGER chunks_bits_au_null AFTER UPDATE OF embedding ON chunks WHEN new.embedding IS NULL BEGIN
    DELETE FROM {BITS_TABLE} WHERE rowid = old.id;
END;
INSERT INTO {BITS_TABLE} (rowid, embedding)
    SELECT id, vec_quantize_binary(embedding) FROM chunks WHERE embedding IS NOT NULL ORDER BY id;
"""


def create_bits_table(conn: Any, dim: int) -> bool:
    """Create and backfill the sign-bit index (caller's transaction); False when ``dim`` is
    not a multiple of 8 (sign bits pack by bytes: such an index stays on exact search)."""
    if dim % 8 or has_table(conn, BITS_TABLE):
        return False
    _script(conn, bits_sql(dim))
    return True


def _migration_sign_bits(conn: Any, fts_tokenizer: str) -> None:
    """The sign-bit vector index (#17) for a file that already has vectors (backfilled)."""
    meta = get_meta(conn)
    if "embedding_dim" in meta and has_table(conn, "chunks_vec"):
        create_bits_table(conn, recorded_dim(meta))


POSTINGS_SQL = """
CREATE TABLE chunks_bm25_terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE chunks_bm25 (
    term  TEXT NOT NULL,
    block INTEGER NOT NULL,
    rows  BLOB NOT NULL,
    tf    BLOB NOT NULL,
    PRIMARY KEY (term, block)
) WITHOUT ROWID;
CREATE TABLE chunks_bm25_lengths (block INTEGER PRIMARY KEY, lengths BLOB NOT NULL);
CREATE TABLE chunks_bm25_dirty (id INTEGER PRIMARY KEY, text TEXT, heading_path TEXT, counted INTEGER NOT NULL);
CREATE TRIGGER chunks_bm25_ai AFTER INSERT ON chunks BEGIN
    INSERT OR IGNORE INTO chunks_bm25_dirty (id, text, heading_path, counted) VALUES (new.id, NULL, NULL, 0);
END;
CREATE TRIGGER chunks_bm25_ad AFTER DELETE ON chunks BEGIN
    INSERT OR IGNORE INTO chunks_bm25_dirty (id, text, heading_path, counted)
    VALUES (old.id, old.text, old.heading_path, 1);
END;
CREATE TRIGGER chunks_bm25_au AFTER UPDATE OF text, heading_path ON chunks BEGIN
    INSERT OR IGNORE INTO chunks_bm25_dirty (id, text, heading_path, counted)
    VALUES (old.id, old.text, old.heading_path, 1);
END;
"""


def _migration_postings(conn: Any, fts_tokenizer: str) -> None:
    """BM25 posting lists of common terms (#17, ``search/postings.py``), built from chunks_fts.

    A chunk noted dirty keeps the text its postings were counted from (``counted``), the
    first time it changes after a flush: INSERT OR IGNORE keeps that first note."""
    from .postings import rebuild

    _script(conn, POSTINGS_SQL)
    rebuild(conn)


def _migration_1(conn: Any, fts_tokenizer: str) -> None:
    """Core tables: meta, documents, chunks."""
    _script(conn, CORE_SQL)


CJK_SQL = """
ALTER TABLE chunks ADD COLUMN cjk_text TEXT;
ALTER TABLE chunks ADD COLUMN cjk_heading TEXT;
ALTER TABLE chunks ADD COLUMN fts_text TEXT GENERATED ALWAYS AS (coalesce(cjk_text, text)) VIRTUAL;
ALTER TABLE chunks ADD COLUMN fts_heading_path TEXT GENERATED ALWAYS AS (coalesce(cjk_heading, heading_path)) VIRTUAL;
CREATE TRIGGER IF NOT EXISTS chunks_cjk_stale BEFORE UPDATE OF text, heading_path ON chunks
WHEN (old.cjk_text IS NOT NULL AND new.cjk_text IS old.cjk_text AND new.text IS NOT old.text)
  OR (old.cjk_heading IS NOT NULL AND new.cjk_heading IS old.cjk_heading AND new.heading_path IS NOT old.heading_path)
BEGIN
    SELECT RAISE(ABORT, 'chunks.cjk_text and cjk_heading (the CJK bigram text, bigrams.spaced) must be written with text and heading_path');
END;
"""


def cjk_columns(text: str, heading_path: str) -> tuple[str | None, str | None]:
    """``chunks.cjk_text`` and ``cjk_heading`` for a chunk: what FTS5 indexes of its text (without
    blobs, ``blobs.readable``; CJK runs as bigrams, ``bigrams.spaced``) and of its heading path
    (bigrams), each NULL when it is the value as stored."""
    return _indexed(text, readable), _indexed(heading_path, _as_is)


def _as_is(value: str) -> str:
    return value


def _indexed(value: str | None, words: Callable[[str], str]) -> str | None:
    if value is None:
        return None
    out = spaced(words(value))
    return None if out == value else out


def _migration_cjk_bigrams(conn: Any, fts_tokenizer: str) -> None:
    """Chinese, Japanese and Korean runs as character bigrams (#36), and blobs not words (#37):
    ``chunks.cjk_text`` and ``cjk_heading`` filled for the chunks that hold CJK letters or blobs, chunks_fts declared again over
    the generated ``fts_text``/``fts_heading_path`` and rebuilt from them in place (no re-index,
    no embedding), the posting lists rebuilt from it, and ``fts_segmenter`` recorded. A column
    that is there already is kept (a file whose version was set back runs it again)."""
    have = {row[1] for row in conn.execute("PRAGMA table_xinfo(chunks)")}
    _script(conn, "\n".join(line for line in CJK_SQL.strip().splitlines()
                            if not (line.startswith("ALTER TABLE chunks ADD COLUMN ") and line.split()[5] in have)))
    rows = conn.execute("SELECT id, text, heading_path FROM chunks").fetchall()
    filled = [(*columns, cid) for cid, text, heading in rows
              if (columns := cjk_columns(text, heading)) != (None, None)]
    conn.executemany("UPDATE chunks SET cjk_text = ?, cjk_heading = ? WHERE id = ?", filled)
    rebuild_fts(conn, get_meta(conn).get("fts_tokenizer") or fts_tokenizer)
    if has_table(conn, "chunks_bm25_terms"):
        from .postings import rebuild

        rebuild(conn)
    set_meta(conn, fts_segmenter=SEGMENTER)


def _migration_han_characters(conn: Any, fts_tokenizer: str) -> None:
    """A Han run's characters are terms beside its bigrams (segmenter ``cjk-bigram-2``). Only a chunk
    whose full-text columns are not its own text can change (``cjk_text`` or ``cjk_heading`` set: CJK
    letters or blobs); each one that does is written again, chunks_fts following by its trigger, and
    the posting lists are rebuilt if any did. A file without Han letters only records the segmenter:
    an English index of a million chunks is not rewritten."""
    rows = conn.execute("SELECT id, text, heading_path, cjk_text, cjk_heading FROM chunks"
                        " WHERE cjk_text IS NOT NULL OR cjk_heading IS NOT NULL").fetchall()
    changed = [(*new, cid) for cid, text, heading, *old in rows if (new := cjk_columns(text, heading)) != tuple(old)]
    if changed:
        conn.executemany("UPDATE chunks SET cjk_text = ?, cjk_heading = ? WHERE id = ?", changed)
        if has_table(conn, "chunks_bm25_terms"):
            from .postings import rebuild

            rebuild(conn)
    set_meta(conn, fts_segmenter=SEGMENTER)


def _migration_2(conn: Any, fts_tokenizer: str) -> None:
    """Full-text index over chunk text and heading path (backfilled from chunks)."""
    _script(conn, fts_sql(fts_tokenizer, LEGACY_FTS_COLUMNS))
    secure_fts(conn)
    set_meta(conn, fts_tokenizer=fts_tokenizer)


def sqlite_version(conn: Any) -> tuple[int, ...]:
    """The version of the SQLite library behind ``conn``."""
    return tuple(int(x) for x in conn.execute("SELECT sqlite_version()").fetchone()[0].split("."))


def secure_fts(conn: Any) -> bool:
    """Turn on FTS5 ``secure-delete`` for chunks_fts (#24): a deleted or edited chunk's words
    leave the index at once instead of staying in its segments until they are merged. It
    needs SQLite 3.42+ to read the table afterwards (FTS5 format 5). False on an older
    SQLite: the Store then merges the index after a run that removed text (``purge_fts``)."""
    if sqlite_version(conn) < SECURE_FTS_SQLITE:
        return False
    conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('secure-delete', 1)")
    return True


def fts_is_secure(conn: Any) -> bool:
    """True when chunks_fts erases what is deleted from it (``secure_fts``)."""
    row = conn.execute("SELECT v FROM chunks_fts_config WHERE k = 'secure-delete'").fetchone()
    return bool(row and row[0])


def purge_fts(conn: Any) -> None:
    """Merge chunks_fts into one segment, which drops the entries of deleted rows that a
    non-secure delete leaves behind (a rewrite of the whole full-text index; inside the
    caller's transaction).

    FTS5's 'optimize' leaves an index that is one segment already as it is, delete markers
    and the words they cancel included; a row added and deleted first (row -1, no chunk's
    id; its counts cancel out) gives it a second segment, so the merge happens."""
    text, heading = fts_columns(conn)
    conn.execute(f"INSERT INTO chunks_fts (rowid, {text}, {heading}) VALUES (-1, 'polaris', '')")
    conn.execute(f"INSERT INTO chunks_fts (chunks_fts, rowid, {text}, {heading}) VALUES ('delete', -1, 'polaris', '')")
    conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('optimize')")


def fts_columns(conn: Any) -> tuple[str, str]:
    """The two columns chunks_fts indexes (``FTS_COLUMNS`` since migration 9, ``LEGACY_FTS_COLUMNS``
    before). They are read from the file and become SQL, so they must be one of those two pairs: a
    file whose table names other columns was edited by hand, and is refused (``DatabaseError``)."""
    names = tuple(r[1] for r in conn.execute("PRAGMA table_info(chunks_fts)"))
    if len(names) < 2:
        return FTS_COLUMNS
    if names[:2] not in (FTS_COLUMNS, LEGACY_FTS_COLUMNS):
        raise DatabaseError(
            f"this index's full-text table chunks_fts has the columns {list(names)!r}, not Polaris's"
            f" {list(FTS_COLUMNS)!r}: the file was edited or damaged. Nothing was changed. Restore it from a"
            " backup, or delete it and run `polaris index` again."
        )
    return names[0], names[1]


def _migration_erase(conn: Any, fts_tokenizer: str) -> None:
    """What was removed is gone from the file (#24): chunks_fts in secure-delete mode from now
    on, the entries of rows deleted before merged out, and terms that no chunk holds any
    more dropped from the posting lists."""
    secure_fts(conn)
    purge_fts(conn)
    if has_table(conn, "chunks_bm25_terms"):
        from . import postings
        from ..words.tokenize import Tokenizer

        postings.flush(conn, Tokenizer(postings.fts_tokenizer(conn)))  # old text noted by a raw write
        conn.execute("DELETE FROM chunks_bm25_terms WHERE term NOT IN (SELECT term FROM chunks_bm25)")



DOCUMENTS_V3_SQL = f"""
CREATE TABLE collections (
    name       TEXT PRIMARY KEY,
    root       TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE documents_v3 (
    id           TEXT PRIMARY KEY,
    path         TEXT,
    name         TEXT,
    collection   TEXT NOT NULL DEFAULT 'default',
    status       TEXT NOT NULL DEFAULT 'pending'
                 CHECK (status IN ({", ".join(repr(s) for s in STATUSES)})),
    error        TEXT,
    content_hash TEXT,
    metadata     TEXT NOT NULL DEFAULT '{{}}',
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
INSERT INTO documents_v3 SELECT id, path, name, collection, status, error, content_hash, metadata,
    created_at, updated_at FROM documents;
DROP TABLE documents;
ALTER TABLE documents_v3 RENAME TO documents;
CREATE INDEX documents_collection_status ON documents (collection, status);
CREATE INDEX documents_collection_path ON documents (collection, path);
"""



def _migration_3(conn: Any, fts_tokenizer: str) -> None:
    """Collections with a root; file documents keyed by (collection, path under that root).

    Release 0.1 keyed a file by its path relative to whatever folder was typed, so one
    file could be stored twice (``docs`` and ``docs/auth`` indexed). Each collection's
    root becomes the common folder of the roots its documents recorded; every file is
    re-keyed relative to it, and of two rows for one file the one indexed from the outer
    root is kept. Front matter moves from every chunk to its document (stored once).
    """
    _script(conn, DOCUMENTS_V3_SQL)
    if has_table(conn, "chunks_vec"):
        _script(conn, VEC_DOCUMENT_TRIGGER)
    rows = conn.execute("SELECT id, path, collection, metadata, updated_at FROM documents").fetchall()
    files: dict[str, list[tuple]] = {}
    for doc_id, path, collection, metadata, updated in rows:
        meta = json.loads(metadata)
        if isinstance(meta.get("root"), str) and path and not posixpath.isabs(path):
            files.setdefault(collection, []).append((doc_id, path, meta, updated))
    for collection in {r[2] for r in rows}:
        root = _common_root([m["root"] for _, _, m, _ in files.get(collection, [])])
        conn.execute("INSERT INTO collections (name, root) VALUES (?, ?)", (collection, root))
        if root is not None:
            _rekey_0_1(conn, collection, root, files[collection])


def _common_root(roots: list[str]) -> str | None:
    return posixpath.commonpath(roots) if roots else None


def _rekey_0_1(conn: Any, collection: str, root: str, docs: list[tuple]) -> None:
    """Give each 0.1 file document its (collection, path under ``root``) identity."""
    by_path: dict[str, list[tuple]] = {}
    for doc in docs:
        rel = posixpath.relpath(posixpath.join(doc[2]["root"], doc[1]), root)
        by_path.setdefault(rel, []).append(doc)
    for rel, same in by_path.items():
        same.sort(key=lambda d: (d[2]["root"] == root, d[3]), reverse=True)  # outer root first, then newest
        for doc_id, *_ in same[1:]:
            conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
            conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
        doc_id, _, meta, _ = same[0]
        new_id = file_document_id(collection, rel)
        taken = conn.execute("SELECT 1 FROM documents WHERE id = ?", (new_id,)).fetchone()
        if taken and new_id != doc_id:
            new_id = doc_id
        doc_meta = {k: v for k, v in meta.items() if k != "root"} | {"file_path": rel}
        conn.execute(
            "UPDATE documents SET id = ?, path = ?, metadata = ? WHERE id = ?",
            (new_id, rel, json.dumps(doc_meta), doc_id),
        )
        for chunk_id, chunk_meta in conn.execute(
            "SELECT id, metadata FROM chunks WHERE document_id = ?", (doc_id,)
        ).fetchall():
            own = {k: v for k, v in json.loads(chunk_meta).items() if k in CHUNK_OWN_KEYS}
            conn.execute(
                "UPDATE chunks SET document_id = ?, metadata = ? WHERE id = ?", (new_id, json.dumps(own), chunk_id)
            )


@dataclass(frozen=True)
class Migration:
    """One numbered step; ``foreign_keys_off`` for steps that rebuild a referenced table."""

    number: int
    name: str
    step: Callable[[Any, str], None]
    foreign_keys_off: bool = False


def _migration_fts_for_datasette(conn: Any, fts_tokenizer: str) -> None:
    """Re-declare chunks_fts with content="chunks" (was content='chunks', which Datasette's
    FTS detection does not see): the table and its triggers are rebuilt from chunks with
    the tokenizer the file records, not the one configured now."""
    recorded = get_meta(conn).get("fts_tokenizer") or fts_tokenizer
    rebuild_fts(conn, recorded, LEGACY_FTS_COLUMNS)


def _migration_4(conn: Any, fts_tokenizer: str) -> None:
    """``chunks.node``: the rest of a LlamaIndex node (class, excluded keys, templates, relationships)."""
    conn.execute("ALTER TABLE chunks ADD COLUMN node TEXT")


# A document's text as it was indexed (decoded, NFC): what its chunks' offsets point into, so a
# section is read as the file's own slice (``context.section_text``). Its own table, not a column of
# documents: a document row stays small for the scans that list and name documents, and a
# document indexed before this migration simply has no row (its sections are rebuilt from its
# chunks and say so, until the next `polaris index` stores its text: ``Indexer``).
DOCUMENT_TEXTS_SQL = """
CREATE TABLE IF NOT EXISTS document_texts (
    document_id TEXT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE ON UPDATE CASCADE,
    text        TEXT NOT NULL
);
"""


def _migration_document_texts(conn: Any, fts_tokenizer: str) -> None:
    """``document_texts``: each document's indexed text, which sections are sliced from (#34)."""
    _script(conn, DOCUMENT_TEXTS_SQL)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "core tables", _migration_1),
    Migration(2, "full-text index", _migration_2),
    Migration(3, "collections with roots, documents by (collection, path)", _migration_3, foreign_keys_off=True),
    Migration(4, "LlamaIndex node fields", _migration_4),
    Migration(5, "full-text index declared so that Datasette detects it", _migration_fts_for_datasette),
    Migration(6, "sign-bit vector index", _migration_sign_bits),
    Migration(7, "BM25 posting lists of common terms", _migration_postings),
    Migration(8, "removed text erased: FTS5 secure-delete, old entries merged out", _migration_erase),
    Migration(9, "CJK runs as character bigrams and blobs left out in the full-text index (cjk_text)",
              _migration_cjk_bigrams),
    Migration(10, "documents' own text, which sections are read from", _migration_document_texts),
    Migration(11, "a Han run's characters as terms beside its bigrams (cjk_text written again)", _migration_han_characters),
)
SCHEMA_VERSION = MIGRATIONS[-1].number


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
    for m in MIGRATIONS:
        if m.number <= current:
            continue
        if _apply(conn, m, fts_tokenizer):
            applied.append(m.number)
    return applied


def _apply(conn: Any, m: Migration, fts_tokenizer: str) -> bool:
    """Run one migration in its own transaction; False when another process got there first."""
    if m.foreign_keys_off:  # SQLite's table-rebuild recipe: a no-op inside a transaction
        conn.execute("PRAGMA foreign_keys = OFF")
    try:
        with transaction(conn):
            if schema_version(conn) >= m.number:
                return False
            if m.number == 1:
                refuse_foreign_tables(conn)
            m.step(conn, fts_tokenizer)
            if m.foreign_keys_off and conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
                raise DatabaseError(f"migration {m.number} ({m.name}) left dangling rows; nothing was changed.")
            conn.execute(f"PRAGMA user_version = {m.number}")
        return True
    finally:
        if m.foreign_keys_off:
            conn.execute("PRAGMA foreign_keys = ON")


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


OWN_TABLES = ("polaris_meta", "documents", "collections", "document_texts", "chunks", "chunks_fts", "chunks_vec",
              "chunks_bits", "chunks_bm25", "chunks_bm25_terms", "chunks_bm25_lengths", "chunks_bm25_dirty")


def refuse_views_of_own_tables(conn: Any) -> None:
    """DatabaseError when one of Polaris's table names is a view: a file whose table was renamed
    and replaced by a view (over an endless recursive query, say) would run the view's query in
    every door that reads it. Views of other names (a Datasette user's own) are left alone."""
    marks = ", ".join("?" * len(OWN_TABLES))
    views = [r[0] for r in conn.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'view' AND name IN ({marks}) ORDER BY name", OWN_TABLES)]
    if views:
        raise DatabaseError(
            f"this index's {', '.join(views)} {'is a view' if len(views) == 1 else 'are views'}, not Polaris's"
            " table: the file was edited or damaged. Nothing was read or changed. Restore it from a backup, or"
            " delete it and run `polaris index` again."
        )


class transaction:
    """``with transaction(conn):`` BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error.

    ``begin="BEGIN"`` takes no write lock: a read snapshot for the statements inside.
    ``before_commit(conn)`` runs last inside the transaction (derived tables brought up to date).
    """

    def __init__(self, conn: Any, begin: str = "BEGIN IMMEDIATE", before_commit: Callable[[Any], None] | None = None) -> None:
        self.conn, self.begin, self.before_commit = conn, begin, before_commit

    def __enter__(self) -> Any:
        self.conn.execute(self.begin)
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                if self.before_commit is not None:
                    self.before_commit(self.conn)
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
    """Create chunks_vec (and the sign-bit index) for ``dim`` and backfill them (inside the caller's transaction)."""
    _script(conn, vec_sql(dim))
    create_bits_table(conn, dim)


def rebuild_fts(conn: Any, tokenizer: str, columns: tuple[str, str] = FTS_COLUMNS) -> None:
    """Recreate chunks_fts with another tokenizer (inside the caller's transaction)."""
    for name in ("chunks_fts_ai", "chunks_fts_ad", "chunks_fts_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE IF EXISTS chunks_fts")
    _script(conn, fts_sql(tokenizer, columns))
    secure_fts(conn)
    set_meta(conn, fts_tokenizer=tokenizer)
    if has_table(conn, "chunks_bm25"):  # counted with the old tokenizer's terms
        from .postings import rebuild

        rebuild(conn)
