"""`polaris copy SRC DST` (#26): an index moves between a file and a Postgres database with its
vectors; nothing is re-embedded, the copy counts the same, and SQLite -> Postgres -> SQLite
gives the same hits, scores, explanations and node JSON as the original."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode

from conftest import database_uri
from llama_index_polaris import PolarisEmbedding, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.ingest.copy import copy_index
from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import REPO

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
QUERIES = ("how do we handle expired sessions", "rrf_k", "on-call rotation", "RRF_K --verbose")


def cfg(root: Path):
    return load_config(root, use_user_config=False)


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(root / ".xdg"), "PATH": str(Path(sys.executable).parent)})


def answers(target: str, root: Path) -> list:
    out = []
    with PolarisIndex(target, config=cfg(root), readonly=True) as ix:
        for q in QUERIES:
            for mode in ("hybrid", "vector", "bm25"):
                out.append([h.to_dict() for h in ix.search(q, top_k=10, mode=mode)])
    return out


def test_sqlite_to_postgres_to_sqlite_round_trips(tmp_path: Path, pg_uri: str) -> None:
    shutil.copytree(REPO / "examples" / "handbook", tmp_path / "handbook")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    original = str(tmp_path / "polaris.db")
    assert polaris(tmp_path, "index", "handbook", "--db", original).returncode == 0
    embed = PolarisEmbedding(model_id=MODEL)
    store = PolarisVectorStore(db_path=original, embed_model=embed, collection="notes", config=cfg(tmp_path))
    node = TextNode(text="Sessions last eight hours.", id_="note-1", metadata={"b": 1, "a": [1, 2]},
                    excluded_embed_metadata_keys=["a"])
    node.embedding = embed.get_text_embedding(node.get_content(metadata_mode="embed"))
    store.add([node])
    store.close()

    run = polaris(tmp_path, "copy", original, pg_uri)
    assert run.returncode == 0, run.stderr
    back = str(tmp_path / "back.db")
    run = polaris(tmp_path, "copy", pg_uri, back)
    assert run.returncode == 0, run.stderr

    status = {t: json.loads(polaris(tmp_path, "status", "--json", "--db", t).stdout) for t in (original, pg_uri, back)}
    for key in ("documents", "chunks", "collections", "model_id", "embedding_dim", "model_fingerprint", "roots"):
        assert status[pg_uri][key] == status[original][key] == status[back][key], key

    first, there, again = answers(original, tmp_path), answers(pg_uri, tmp_path), answers(back, tmp_path)
    assert again == first  # the same file again: every hit, score and explanation, bit for bit
    assert [[(h["node_id"], h["heading_path"]) for h in hits] for hits in there] == \
        [[(h["node_id"], h["heading_path"]) for h in hits] for hits in first]
    assert [h["score"] for hits in there for h in hits] == pytest.approx(
        [h["score"] for hits in first for h in hits], abs=1e-5)

    nodes = {}
    for t in (original, pg_uri, back):
        s = PolarisVectorStore(db_path=t, embed_model=embed, collection=None, config=cfg(tmp_path))
        nodes[t] = [n.to_json() for n in s.get_nodes()]
        s.close()
    assert nodes[pg_uri] == nodes[original] == nodes[back]
    assert any('"excluded_embed_metadata_keys": ["a"]' in n for n in nodes[back])


def schema_objects(uri: str) -> tuple[list, list]:
    """Every index and every key, check and foreign key of a database's tables, by definition."""
    import psycopg

    with psycopg.connect(uri) as conn:
        indexes = conn.execute("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
                               " ORDER BY 1, 2").fetchall()
        keys = conn.execute("SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)"
                            " FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2").fetchall()
    return indexes, keys


def test_postgres_to_postgres_and_what_is_refused(tmp_path: Path, pg_uri: str, pg_server: str) -> None:
    import psycopg

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSessions last eight hours.\n")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    assert polaris(tmp_path, "index", "docs", "--db", pg_uri).returncode == 0
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS polaris_copy_dst WITH (FORCE)")
        conn.execute("CREATE DATABASE polaris_copy_dst")
    other = database_uri(pg_server, "polaris_copy_dst")
    try:
        assert copy_index(pg_uri, other)["chunks"] == 1
        # the bulk load set the posting table's keys and indexes aside: the copy has them all again
        assert schema_objects(other) == schema_objects(pg_uri)
        with psycopg.connect(other, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM chunks_bm25").fetchone()[0] > 0
            conn.execute("DELETE FROM documents")  # the foreign keys cascade again
            assert conn.execute("SELECT count(*) FROM chunks_bm25").fetchone()[0] == 0
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute("DROP DATABASE polaris_copy_dst WITH (FORCE)")
            conn.execute("CREATE DATABASE polaris_copy_dst")
        assert copy_index(pg_uri, other)["chunks"] == 1
        with pytest.raises(InputError, match="already holds documents"):
            copy_index(pg_uri, other)  # never into an index that holds something
        (tmp_path / "taken.db").write_bytes(b"")
        with pytest.raises(InputError, match="already exists"):
            copy_index(pg_uri, tmp_path / "taken.db")
        assert (tmp_path / "taken.db").read_bytes() == b""
    finally:
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS polaris_copy_dst WITH (FORCE)")
