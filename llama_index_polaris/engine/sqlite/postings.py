"""The SQLite file's BM25 posting lists of common terms (#17): written here, read by search.

Maintaining the lists is the SQLite backend's job; scoring from them is search's
(``search/postings.py``). For every term in at least ``COMMON_DF`` chunks (stop words
aside: queries drop them) the file keeps which chunks hold it and how often
(``chunks_bm25``, one row per term and block of ``BLOCK`` chunk ids), and every chunk's
length in tokens (``chunks_bm25_lengths``), both as FTS5 counts them.

Upkeep: triggers on ``chunks`` note each chunk whose text changes in
``chunks_bm25_dirty`` (with the text that was counted, if any), and every Store write
calls ``flush`` before COMMIT: it tokenizes those chunks with the index's own tokenizer
(``engine/words/tokenize.py``) and edits the blocks they touch, in the same transaction, so a
crash keeps the file consistent. A term is counted from the write that takes it to
``COMMON_DF`` chunks (built then from FTS5's own vocabulary).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any, Iterable

import numpy as np

from ..words.tokenize import Tokenizer

COMMON_DF = 1_000  # a term in at least this many chunks gets a posting list in the file
BLOCK = 4_096  # chunk ids per row: a write rewrites small rows, a query reads few
REBUILD_SHARE = 4  # a write that changes more than 1/4 of the chunks rebuilds instead
_TOKENIZE = re.compile(r"tokenize\s*=\s*'((?:[^']|'')*)'", re.IGNORECASE)
DIRTY = "chunks_bm25_dirty"
MAX_SIGHTINGS = 1_000_000  # uncounted terms remembered per process


def varints(blob: bytes) -> list[int]:
    """The SQLite varints packed in ``blob`` (FTS5's docsize and averages records)."""
    out, value = [], 0
    # ``value`` holds the 7-bit groups of the varint read so far, most significant first;
    # a byte without the high bit ends it.
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            out.append(value)
            value = 0
    return out


def averages(conn: Any) -> tuple[int, float]:
    """FTS5's row count and average row length in tokens (its averages record)."""
    row = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    values = varints(row[0]) if row and row[0] else [0]  # empty until FTS5 first writes it (a new table)
    n_rows = values[0]
    return n_rows, (sum(values[1:]) / n_rows if n_rows else 1.0)


def fts_tokenizer(conn: Any) -> str:
    """The ``tokenize=`` argument chunks_fts was created with (FTS5's default when none)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()
    found = _TOKENIZE.search(row[0] or "") if row else None
    return found.group(1).replace("''", "'") if found else "unicode61"


# -- blocks ------------------------------------------------------------------------------
def _encode(offsets: np.ndarray, tf: np.ndarray) -> tuple[bytes, bytes]:
    """A block's postings: offsets as uint16, counts as uint8 (uint16 when one is over 255)."""
    wide = tf.size and int(tf.max()) > 255
    return offsets.astype("<u2").tobytes(), tf.astype("<u2" if wide else "u1").tobytes()


def _decode(offsets: bytes, tf: bytes) -> tuple[np.ndarray, np.ndarray]:
    off = np.frombuffer(offsets, dtype="<u2")
    return off, np.frombuffer(tf, dtype="<u2" if len(tf) == 2 * len(off) else "u1")


def _encode_lengths(lengths: np.ndarray) -> bytes:
    return lengths.astype("<u2" if int(lengths.max(initial=0)) <= 0xFFFF else "<u4").tobytes()


def _decode_lengths(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<u2" if len(blob) == 2 * BLOCK else "<u4")


BLOCKS_OF_KEYS = ("SELECT p.term, p.block, p.rows, p.tf FROM json_each(?) AS k JOIN chunks_bm25 AS p"
                  " ON p.term = json_extract(k.value, '$[0]') AND p.block = json_extract(k.value, '$[1]')")


def _edit_blocks(conn: Any, gone: dict[tuple[str, int], list[int]], come: dict[tuple[str, int], list[tuple[int, int]]]) -> None:
    """Remove the ``gone`` offsets from, and add the ``come`` (offset, count) pairs to, each
    (term, block) row: read in one statement, written in two."""
    keys = sorted(gone.keys() | come.keys())
    current = {(t, b): (o, f) for t, b, o, f in conn.execute(BLOCKS_OF_KEYS, (json.dumps(keys),))}
    writes, deletes = [], []
    for key in keys:
        old_rows, old_tf = current.get(key, (b"", b""))
        added = sorted(come.get(key, []))
        removed = gone.get(key)
        n = len(old_rows) // 2
        narrow = len(old_tf) == n and all(c <= 255 for _, c in added)
        if not removed and narrow and (not n or not added or added[0][0] > int.from_bytes(old_rows[-2:], "little")):
            # the common case, new chunks after the block's last one: append the bytes
            rows = old_rows + np.array([a[0] for a in added], dtype="<u2").tobytes()
            tf = old_tf + bytes(c for _, c in added)
        else:
            offsets, counts = _decode(old_rows, old_tf)
            keep = ~np.isin(offsets, removed or [])
            offsets = np.concatenate([offsets[keep].astype(np.int64), np.array([a[0] for a in added], dtype=np.int64)])
            counts = np.concatenate([counts[keep].astype(np.int64), np.array([a[1] for a in added], dtype=np.int64)])
            order = np.argsort(offsets, kind="stable")
            rows, tf = _encode(offsets[order], counts[order])
        if rows:
            writes.append((*key, rows, tf))
        elif key in current:
            deletes.append(key)
    conn.executemany("INSERT OR REPLACE INTO chunks_bm25 (term, block, rows, tf) VALUES (?, ?, ?, ?)", writes)
    conn.executemany("DELETE FROM chunks_bm25 WHERE term = ? AND block = ?", deletes)
    # A term no chunk holds any more leaves the file with its last chunk (#24: removed words are
    # gone); should it come back, it is counted again from FTS5 like any new term.
    emptied = sorted({term for term, _ in deletes})
    conn.execute("DELETE FROM chunks_bm25_terms WHERE term IN (SELECT value FROM json_each(?))"
                 " AND NOT EXISTS (SELECT 1 FROM chunks_bm25 WHERE chunks_bm25.term = chunks_bm25_terms.term)",
                 (json.dumps(emptied),))


def vocab(conn: Any, kind: str) -> str:
    """The name of a temp ``fts5vocab`` table of kind ``row`` or ``instance`` over chunks_fts."""
    name = f"polaris_fts_{kind}"
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING fts5vocab(main, chunks_fts, {kind})")
    return f"temp.{name}"


def _add_terms(conn: Any, terms: Iterable[str]) -> None:
    """Posting lists for ``terms``, built from FTS5's own vocabulary (all chunks at once)."""
    instance = vocab(conn, "instance")
    for term in terms:
        rows = conn.execute(f"SELECT doc, count(*) FROM {instance} WHERE term = ? GROUP BY doc", (term,)).fetchall()
        if not rows:
            continue
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        tf = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        blocks = ids // BLOCK
        cuts = np.flatnonzero(np.diff(blocks)) + 1
        for part_ids, part_tf in zip(np.split(ids, cuts), np.split(tf, cuts)):
            conn.execute("INSERT INTO chunks_bm25 (term, block, rows, tf) VALUES (?, ?, ?, ?)",
                         (term, int(part_ids[0] // BLOCK), *_encode(part_ids % BLOCK, part_tf)))
        conn.execute("INSERT OR IGNORE INTO chunks_bm25_terms (term) VALUES (?)", (term,))


def rebuild(conn: Any) -> None:
    """Every posting list and length again from chunks_fts (inside the caller's transaction)."""
    for table in ("chunks_bm25", "chunks_bm25_terms", "chunks_bm25_lengths", DIRTY):
        conn.execute(f"DELETE FROM {table}")
    lengths: dict[int, np.ndarray] = {}
    for chunk_id, size in conn.execute("SELECT id, sz FROM chunks_fts_docsize"):
        block = lengths.get(chunk_id // BLOCK)
        if block is None:
            block = lengths[chunk_id // BLOCK] = np.zeros(BLOCK, dtype=np.int64)
        block[chunk_id % BLOCK] = sum(varints(size))
    conn.executemany("INSERT INTO chunks_bm25_lengths (block, lengths) VALUES (?, ?)",
                     [(b, _encode_lengths(v)) for b, v in lengths.items()])
    stop = Tokenizer(fts_tokenizer(conn)).stop_terms
    row = vocab(conn, "row")
    common = [t for (t,) in conn.execute(f"SELECT term FROM {row} WHERE doc >= ?", (COMMON_DF,)) if t not in stop]
    _add_terms(conn, common)


def flush(conn: Any, tokenizer: Tokenizer) -> None:
    """Bring the posting lists and lengths up to date with the dirty chunks (before COMMIT)."""
    dirty = conn.execute(f"SELECT id, text, heading_path, counted FROM {DIRTY}").fetchall()
    if not dirty:
        return
    n_rows, _ = averages(conn)
    if len(dirty) > max(BLOCK, n_rows // REBUILD_SHARE):
        rebuild(conn)
        return
    ids = json.dumps([r[0] for r in dirty])
    now = conn.execute("SELECT id, text, heading_path FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
                       (ids,)).fetchall()
    old_counts, _ = tokenizer.counts([(r[0], r[1], r[2]) for r in dirty if r[3]])
    new_counts, new_lengths = tokenizer.counts(now)
    touched = {t for c in (*old_counts.values(), *new_counts.values()) for t in c}
    tracked = {r[0] for r in conn.execute(
        "SELECT term FROM chunks_bm25_terms WHERE term IN (SELECT value FROM json_each(?))", (json.dumps(sorted(touched)),))}
    # Edits of each (term, block): ids whose counted postings go, (id, count) pairs that come.
    gone: dict[tuple[str, int], list[int]] = defaultdict(list)
    come: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for chunk_id, counts in old_counts.items():
        for term in counts.keys() & tracked:
            gone[term, chunk_id // BLOCK].append(chunk_id % BLOCK)
    for chunk_id, counts in new_counts.items():
        for term in counts.keys() & tracked:
            come[term, chunk_id // BLOCK].append((chunk_id % BLOCK, counts[term]))
    _edit_blocks(conn, gone, come)
    _set_lengths(conn, {r[0]: new_lengths.get(r[0], 0) for r in dirty})
    stop = tokenizer.stop_terms
    fresh = sorted(_due(tokenizer, {t for c in new_counts.values() for t in c} - tracked - stop))
    if fresh:
        row_vocab = vocab(conn, "row")
        common = [t for (t,) in conn.execute(
            f"SELECT term FROM {row_vocab} WHERE term IN (SELECT value FROM json_each(?)) AND doc >= ?",
            (json.dumps(fresh), COMMON_DF))]
        _add_terms(conn, common)
    conn.execute(f"DELETE FROM {DIRTY}")


def _due(tokenizer: Tokenizer, terms: set[str]) -> list[str]:
    """The terms whose document frequency to check now: each is checked the 1st, 2nd, 4th, 8th
    ... time this process writes it (FTS5 counts a term's documents by reading its whole
    list, ~30 us a term). A term that reaches COMMON_DF between checks gets its list a
    little later; until then FTS5 scores it, exactly."""
    seen = tokenizer.sightings
    if len(seen) > MAX_SIGHTINGS:
        seen.clear()
    due = []
    for term in terms:
        seen[term] += 1
        if seen[term] & (seen[term] - 1) == 0:  # a power of two
            due.append(term)
    return due


def _set_lengths(conn: Any, lengths: dict[int, int]) -> None:
    by_block: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for chunk_id, n in lengths.items():
        by_block[chunk_id // BLOCK].append((chunk_id % BLOCK, n))
    for block, values in by_block.items():
        row = conn.execute("SELECT lengths FROM chunks_bm25_lengths WHERE block = ?", (block,)).fetchone()
        current = _decode_lengths(row[0]).astype(np.int64) if row else np.zeros(BLOCK, dtype=np.int64)
        for offset, n in values:
            current[offset] = n
        if current.any():
            conn.execute("INSERT OR REPLACE INTO chunks_bm25_lengths (block, lengths) VALUES (?, ?)",
                         (block, _encode_lengths(current)))
        else:
            conn.execute("DELETE FROM chunks_bm25_lengths WHERE block = ?", (block,))


