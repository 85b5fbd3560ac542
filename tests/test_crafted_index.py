"""An index file edited by hand (or damaged) cannot run SQL of its choosing in the process that
opens it, and a bad model record is a clear error in every door, not a traceback.

A file records its FTS5 tokenizer in ``polaris_meta``, and an upgrade makes SQL of it
(``sqlite.schema.fts_sql``). A file crafted with an old schema version and a tokenizer that
closes the quote ran its own statements when it was upgraded, ATTACH and writes to other
files included (`polaris status`, `polaris index`, ``PolarisVectorStore(db_path=...)``). Now
the recorded value must pass the config's own rule where the SQL is made, and nothing is
changed. ``embedding_dim`` not a whole number (or missing beside a model) raised ValueError or
KeyError from every door; it is now a DatabaseError naming the row and what to do, on both
backends.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import ConfigError, DatabaseError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.sqlite import schema
from llama_index_polaris.engine.sqlite_module import sqlite_module
from polaris_testing import copy_index, new_database

REPO = Path(__file__).resolve().parents[1]
POLARIS = str(Path(sys.executable).parent / "polaris")
MODEL = "all-minilm-l6-v2"


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(root / ".xdg"), "PATH": str(Path(sys.executable).parent)})


def meta_and_version(path: Path) -> tuple[dict, int]:
    conn = sqlite_module().connect(str(path))
    try:
        return dict(conn.execute("SELECT key, value FROM polaris_meta")), conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def crafted(built_handbook: Path, tmp_path: Path) -> dict:
    """A copy of the handbook index set back to schema 8 with a tokenizer that closes its quote,
    another index it attacks, and the path of a file it would create."""
    root = tmp_path
    (root / "handbook").mkdir()
    shutil.copytree(REPO / "examples" / "handbook", root / "handbook", dirs_exist_ok=True)
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    victim = copy_index(built_handbook, root)
    (root / "victim.db").write_bytes(victim.read_bytes())
    victim.unlink()
    (root / "crafted").mkdir()
    path = copy_index(built_handbook, root / "crafted")
    made = root / "made.db"
    payload = ("porter unicode61');\n"
               f"ATTACH DATABASE '{root / 'victim.db'}' AS v;\nDELETE FROM v.polaris_meta;\n"
               f"ATTACH DATABASE '{made}' AS m;\nCREATE TABLE m.owned (x);\nSELECT ('")
    conn = sqlite_module().connect(str(path))
    conn.execute("UPDATE polaris_meta SET value = ? WHERE key = 'fts_tokenizer'", (payload,))
    conn.execute("PRAGMA user_version = 8")
    conn.commit()
    conn.close()
    return {"root": root, "path": path, "victim": root / "victim.db", "made": made,
            "before": meta_and_version(path), "victim_before": meta_and_version(root / "victim.db")}


def assert_untouched(crafted: dict) -> None:
    assert meta_and_version(crafted["victim"]) == crafted["victim_before"]  # the other file: not written
    assert not crafted["made"].exists()  # nor a new one made
    assert meta_and_version(crafted["path"]) == crafted["before"]  # the crafted file itself: still schema 8


def test_a_recorded_tokenizer_that_closes_its_quote_runs_nothing_through_any_door(crafted: dict) -> None:
    from llama_index_polaris import PolarisVectorStore

    root, path = crafted["root"], str(crafted["path"])
    for args in (("status", "--db", path), ("index", "handbook", "--db", path), ("status", "--db", path, "--json")):
        run = polaris(root, *args)
        assert run.returncode != 0, args
        assert "records the FTS5 tokenizer" in run.stderr and "Traceback" not in run.stderr, (args, run.stderr)
        assert_untouched(crafted)
    with pytest.raises(DatabaseError, match="records the FTS5 tokenizer"):
        PolarisIndex(path, config=load_config(root, use_user_config=False))
    assert_untouched(crafted)
    with pytest.raises(DatabaseError, match="edited or damaged"):
        PolarisVectorStore(db_path=path)
    assert_untouched(crafted)
    # the same file with an honest tokenizer upgrades (so the refusal above is the tokenizer's)
    conn = sqlite_module().connect(path)
    conn.execute("UPDATE polaris_meta SET value = 'porter unicode61 remove_diacritics 2' WHERE key = 'fts_tokenizer'")
    conn.commit()
    conn.close()
    assert polaris(root, "status", "--db", path).returncode == 0
    assert meta_and_version(crafted["path"])[1] == schema.SCHEMA_VERSION
    assert json.loads(polaris(root, "search", "rotate an api key", "--json", "--db", path).stdout)


@pytest.mark.parametrize("tokenizer", ["porter'", "porter unicode61;", "porter\nunicode61", "porter (x)", 'porter "x"',
                                       "porter `x`", "porter unicode61 remove_diacritics 2 -- x\u2028"])
def test_the_config_and_the_sql_refuse_a_tokenizer_outside_the_rule(tokenizer: str) -> None:
    with pytest.raises(ConfigError, match="fts_tokenizer"):
        load_config(use_user_config=False, fts_tokenizer=tokenizer)
    with pytest.raises(DatabaseError, match="records the FTS5 tokenizer"):
        schema.fts_sql(tokenizer)


@pytest.mark.parametrize("tokenizer", ["porter unicode61 remove_diacritics 2", "unicode61", "trigram case_sensitive 0",
                                       "porter ascii"])
def test_a_tokenizer_inside_the_rule_is_taken(tokenizer: str) -> None:
    assert load_config(use_user_config=False, fts_tokenizer=tokenizer).fts_tokenizer == tokenizer
    assert f"tokenize='{tokenizer}'" in schema.fts_sql(tokenizer)


# -- a bad embedding_dim, every door, both backends ------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def damaged(request: pytest.FixtureRequest, built_handbook: Path, tmp_path: Path) -> dict:
    root = tmp_path
    shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    if request.param == "sqlite":
        target = str(copy_index(built_handbook, root))
    else:
        target = new_database(request.getfixturevalue("pg_server"))
        assert polaris(root, "index", "handbook", "--db", target).returncode == 0
    return {"root": root, "target": target, "backend": request.param}


def set_dim(target: str, value: str | None) -> None:
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            if value is None:
                conn.execute("DELETE FROM polaris_meta WHERE key = 'embedding_dim'")
            else:
                conn.execute("UPDATE polaris_meta SET value = %s WHERE key = 'embedding_dim'", (value,))
        return
    conn = sqlite_module().connect(target)
    if value is None:
        conn.execute("DELETE FROM polaris_meta WHERE key = 'embedding_dim'")
    else:
        conn.execute("UPDATE polaris_meta SET value = ? WHERE key = 'embedding_dim'", (value,))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("value", ["abc", "0", "-384", "3.5", "99999999999999999999", None])
def test_a_bad_embedding_dim_is_a_clear_error_in_every_door(damaged: dict, value: str | None) -> None:
    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
    from mcp_testing import McpSession, stdio, text_of

    root, target = damaged["root"], damaged["target"]
    question = "how do I rotate an API key"
    assert json.loads(polaris(root, "search", question, "--json", "--db", target).stdout)  # answers before
    set_dim(target, value)
    said = "no embedding_dim" if value is None else "not a vector size"

    run = polaris(root, "search", question, "--json", "--db", target)
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
    error = json.loads(run.stdout or run.stderr)["error"]
    assert error["type"] == "DatabaseError" and said in error["message"], error
    run = polaris(root, "status", "--db", target)
    assert run.returncode != 0 and said in run.stderr and "Traceback" not in run.stderr, run.stderr

    with pytest.raises(DatabaseError, match=said):
        with PolarisIndex(target, config=load_config(root, use_user_config=False), readonly=True) as index:
            index.search(question, top_k=3)
    with pytest.raises(DatabaseError, match=said):
        store = PolarisVectorStore(db_path=target, embed_model=PolarisEmbedding(model_id=MODEL))
        try:
            PolarisRetriever(vector_store=store, similarity_top_k=3).retrieve(question)
        finally:
            store.close()

    session = McpSession(stdio(root, "--db", target))
    try:
        result = session.call("search", {"query": question})
        assert result.is_error and said in text_of(result), text_of(result)
    finally:
        session.close()


async def test_datasette_says_what_a_bad_embedding_dim_is(built_handbook: Path, tmp_path: Path) -> None:
    from datasette.app import Datasette

    path = copy_index(built_handbook, tmp_path)
    set_dim(str(path), "abc")
    ds = Datasette([str(path)])
    response = await ds.client.get("/-/polaris.json", params={"q": "rotate an api key"})
    assert response.status_code >= 400 and "not a vector size" in response.json()["error"], response.text
    page = await ds.client.get("/-/polaris", params={"q": "rotate an api key"})
    assert "not a vector size" in page.text and "Traceback" not in page.text


def test_full_text_columns_that_are_not_polaris_s_run_nothing(built_handbook: Path, tmp_path: Path) -> None:
    """The upgrade that merges the full-text index (migration 8) made SQL of chunks_fts's column
    names as the file declares them: a quoted name can hold a statement's tail (a recursive query
    hung `polaris status` at full CPU). The names must be Polaris's own pair; nothing is changed."""
    path = copy_index(built_handbook, tmp_path)
    conn = sqlite_module().connect(str(path))
    for trigger in ("chunks_fts_ai", "chunks_fts_ad", "chunks_fts_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE chunks_fts")
    conn.execute("""CREATE VIRTUAL TABLE chunks_fts USING fts5("fts_heading_path) SELECT 1, 'injected' --",
                    fts_heading_path, content="chunks", content_rowid='id',
                    tokenize='porter unicode61 remove_diacritics 2')""")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    before = meta_and_version(path)
    run = polaris(tmp_path, "status", "--db", str(path))
    assert run.returncode != 0 and "full-text table chunks_fts has the columns" in run.stderr, run.stderr
    with pytest.raises(DatabaseError, match="edited or damaged"):
        PolarisIndex(str(path), config=load_config(use_user_config=False, model_id=MODEL))
    assert meta_and_version(path) == before  # still schema 7: the migration rolled back


def test_a_view_in_place_of_a_polaris_table_is_refused_by_every_door(built_handbook: Path, tmp_path: Path) -> None:
    """A file whose ``collections`` table was renamed and replaced by a view runs the view's query in
    whatever reads it (a recursive one hung `polaris status` at full CPU, no upgrade needed). A view
    that takes the name of one of Polaris's tables is refused on open, in every door; a view of
    another name (a Datasette user's own) is left alone."""
    from llama_index_polaris import PolarisVectorStore
    from llama_index_polaris.engine.sqlite.connect import connect

    shutil.copytree(REPO / "examples" / "handbook", tmp_path / "handbook")
    path = copy_index(built_handbook, tmp_path)
    conn = connect(path)
    conn.execute("CREATE VIEW my_documents AS SELECT path FROM documents")  # a user's own view: fine
    conn.commit()
    conn.close()
    assert json.loads(polaris(tmp_path, "search", "rotate an api key", "--json", "--db", str(path)).stdout)
    conn = connect(path)
    conn.execute("ALTER TABLE collections RENAME TO collections_kept")
    conn.execute("CREATE VIEW collections AS SELECT 'default' AS name, '/' AS root")
    conn.commit()
    conn.close()
    for args in (("status",), ("search", "rotate an api key", "--json"), ("index", "handbook")):
        run = polaris(tmp_path, *args, "--db", str(path))
        assert run.returncode != 0 and "collections is a view, not Polaris's table" in run.stdout + run.stderr, (args, run)
    for readonly in (True, False):
        with pytest.raises(DatabaseError, match="is a view"):
            PolarisIndex(str(path), config=load_config(use_user_config=False, model_id=MODEL), readonly=readonly)
    with pytest.raises(DatabaseError, match="is a view"):
        PolarisVectorStore(db_path=str(path))
    import asyncio

    from datasette.app import Datasette

    async def page() -> tuple[int, str]:
        response = await Datasette([str(path)]).client.get("/-/polaris.json", params={"q": "rotate an api key"})
        return response.status_code, response.json()["error"]

    status, error = asyncio.run(page())
    assert status >= 400 and "collections is a view" in error, (status, error)
