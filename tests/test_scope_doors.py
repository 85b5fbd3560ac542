"""A scope the index does not have is named, through every door (#23); an existing but empty
one answers no hits. The bundled model, a real polaris.db with two collections and an empty one,
and the same index in a PostgreSQL database (#26): every door but Datasette runs on both; the
Datasette explorer reads SQLite files only (docs/datasette.md).

CLI: exit 1, the message on stderr. Datasette page and JSON: 400, the parameter named in
``errors``. ``polaris_search()``: an error object. LlamaIndex reads: ``InputError``. The MCP
server: a tool result with ``isError`` and the message.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from datasette.app import Datasette
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from llama_index_polaris import PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ScopeError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.storage import names

MODEL = "all-minilm-l6-v2"
QUERY = "how long do sessions last"
COLLECTIONS = "'blog', 'default', 'drafts'"  # as every message lists them


class Project(NamedTuple):
    root: Path  # the folder: docs/, blog/, drafts/ and polaris.toml
    db: str  # where its index is: a polaris.db file or a PostgreSQL URI
    backend: str
    where: str  # how messages name the index


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, module_targets) -> Project:
    root = tmp_path_factory.mktemp("scopes")
    for folder, files in {
        "docs": {"guide/sessions.md": "# Sessions\n\nA session lasts eight hours, then the user signs in again.\n",
                 "guide/tokens.md": "# Tokens\n\nTokens are signed and rotate every day.\n"},
        "blog": {"launch.md": "# Launch\n\nWe launched sessions that last a whole working day.\n"},
        "drafts": {},
    }.items():
        (root / folder).mkdir()
        for name, text in files.items():
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / name).write_text(text)
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    db = str(root / "polaris.db") if module_targets.backend == "sqlite" else module_targets.new()
    with PolarisIndex(db, config=load_config(root, use_user_config=False)) as index:
        index.index_paths([root / "docs"])
        index.index_paths([root / "blog"], collection="blog")
        index.index_paths([root / "drafts"], collection="drafts")  # exists, holds nothing
    return Project(root, db, module_targets.backend, module_targets.shown(db))


def cfg(project: Project):
    return load_config(project.root, use_user_config=False)


def polaris(project: Project, *args: str) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(project.root / ".xdg")}
    return subprocess.run([exe, *args, "--db", project.db], cwd=project.root, capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_engine_names_what_is_missing_and_what_exists(project: Project) -> None:
    with PolarisIndex(project.db, config=cfg(project), readonly=True) as index:
        with pytest.raises(ScopeError) as caught:
            index.search(QUERY, collections=["Default"])
        assert caught.value.reasons == {"collection": (
            f"no collection 'Default' in {project.where}, which has 3: {COLLECTIONS}. Did you mean 'default'?")}
        with pytest.raises(ScopeError) as caught:
            index.search(QUERY, documents=["sessions.md"])
        assert caught.value.reasons["document"].startswith("no document 'sessions.md' in ")
        assert "which holds 3 documents" in str(caught.value) and "Did you mean 'guide/sessions.md'?" in str(caught.value)
        assert index.search(QUERY, collections=["drafts"]) == []  # exists, empty: no hits, no error
        assert {h.collection for h in index.search(QUERY, collections=["blog", "drafts"])} == {"blog"}


def test_the_cli_exits_1_with_the_message(project: Project) -> None:
    bad = polaris(project, "search", QUERY, "--collection", "Default")
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.startswith(f"polaris: error: no collection 'Default' in {project.where}, ")
    assert f"which has 3: {COLLECTIONS}. Did you mean 'default'?" in bad.stderr
    as_json = polaris(project, "search", QUERY, "--collection", "Default", "--json")  # the same message, as JSON
    assert (as_json.returncode, as_json.stdout) == (1, "")
    assert json.loads(as_json.stderr) == {"error": {"type": "ScopeError",
                                                    "message": bad.stderr.removeprefix("polaris: error: ").strip()}}
    doc = polaris(project, "search", QUERY, "--document", "guide/sesions.md")
    assert doc.returncode == 1 and "no document 'guide/sesions.md'" in doc.stderr
    assert "Did you mean 'guide/sessions.md'?" in doc.stderr
    empty = polaris(project, "search", QUERY, "--collection", "drafts", "--json")
    assert (empty.returncode, json.loads(empty.stdout)) == (0, [])


async def test_datasette_answers_400_naming_the_parameter(project: Project) -> None:
    if project.backend != "sqlite":
        pytest.skip("the Datasette explorer reads SQLite files only (docs/datasette.md); the other doors name a "
                    "missing scope on Postgres in the other tests of this module")
    ds = Datasette([project.db])
    page = await ds.client.get("/polaris/-/polaris.json", params={"q": QUERY, "collection": "nosuch"})
    body = page.json()
    assert page.status_code == 400 and body["ok"] is False and body["hits"] == []
    assert body["errors"]["collection"].startswith("no collection 'nosuch' in ") and COLLECTIONS in body["error"]
    both = (await ds.client.get("/polaris/-/polaris.json",
                                params={"q": QUERY, "collection": "nosuch", "document": "nope.md"})).json()
    assert set(both["errors"]) == {"collection", "document"}
    html = await ds.client.get("/polaris/-/polaris", params={"q": QUERY, "document": "sessions.md"})
    assert html.status_code == 400 and "no document &#39;sessions.md&#39;" in html.text
    assert "Did you mean &#39;guide/sessions.md&#39;?" in html.text
    empty = await ds.client.get("/polaris/-/polaris.json", params={"q": QUERY, "collection": "drafts"})
    assert empty.status_code == 200 and empty.json()["hits"] == []

    async def sql(options: str) -> object:
        r = await ds.client.get("/polaris.json", params={"sql": "select polaris_search(:q, 3, :o) as v", "q": QUERY,
                                                         "o": options, "_shape": "array"})
        return json.loads(r.json()[0]["v"])

    error = await sql('{"collections": ["nosuch"]}')
    assert error["error"].startswith("polaris_search: no collection 'nosuch' in ") and COLLECTIONS in error["error"]
    assert (await sql('{"documents": ["nope.md"]}'))["error"].startswith("polaris_search: no document 'nope.md'")
    assert await sql('{"collections": ["drafts"]}') == []


def test_the_mcp_server_answers_a_tool_error_with_the_message(project: Project) -> None:
    from mcp_testing import McpSession, stdio

    session = McpSession(stdio(project.root, "--db", project.db))
    try:
        bad = session.call("search", {"query": QUERY, "collection": "Default"})
        assert bad.is_error and bad.content[0].text == polaris(
            project, "search", QUERY, "--collection", "Default").stderr.removeprefix("polaris: error: ").strip()
        doc = session.call("search", {"query": QUERY, "documents": ["guide/sesions.md"]})
        assert doc.is_error and "Did you mean 'guide/sessions.md'?" in doc.content[0].text
        empty = session.call("search", {"query": QUERY, "collection": "drafts"})
        assert not empty.is_error and empty.structured_content["hits"] == []
        listed = session.call("list_documents", {"collection": "Blog"})
        assert listed.is_error and "Did you mean 'blog'?" in listed.content[0].text
    finally:
        session.close()


@pytest.mark.parametrize("mode", [VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH,
                                  VectorStoreQueryMode.HYBRID])
def test_llamaindex_reads_raise_input_error(project: Project, mode: VectorStoreQueryMode) -> None:
    typo = PolarisVectorStore(project.db, collection="typo", config=cfg(project))
    drafts = PolarisVectorStore(project.db, collection="drafts", config=cfg(project))
    try:
        vector = list(map(float, typo.index.embedder.embed_query(QUERY)))
        query = VectorStoreQuery(query_str=QUERY, query_embedding=vector, mode=mode, similarity_top_k=3)
        with pytest.raises(InputError, match=re.escape(f"no collection 'typo' in {project.where}, which has 3: {COLLECTIONS}")):
            typo.query(query)
        with pytest.raises(InputError, match="no collection 'typo'"):
            typo.get_nodes()
        with pytest.raises(InputError, match="no collection 'typo'"):
            PolarisRetriever(vector_store=typo, mode="bm25").retrieve(QUERY)
        assert drafts.query(query).ids == [] and drafts.get_nodes() == []
        everything = PolarisVectorStore(project.db, collection=None, config=cfg(project))
        with pytest.raises(InputError, match="no collection 'Blog'.*Did you mean 'blog'"):
            PolarisRetriever(vector_store=everything, collections=["Blog"]).retrieve(QUERY)
        with pytest.raises(InputError, match="no document 'launch'.*Did you mean 'launch.md'"):
            PolarisRetriever(vector_store=everything, documents=["launch"]).retrieve(QUERY)
        assert PolarisRetriever(vector_store=everything, collections=["drafts"]).retrieve(QUERY) == []
        everything.close()
    finally:
        typo.close()
        drafts.close()


def test_default_reads_as_empty_in_a_new_file_and_as_a_name_once_others_exist(targets) -> None:
    config = load_config(use_user_config=False)
    new = targets.new("new.db")
    fresh = PolarisVectorStore(new, config=config)  # collection "default", nothing written
    text = VectorStoreQuery(query_str="anything", mode=VectorStoreQueryMode.TEXT_SEARCH)
    try:
        assert fresh.query(text).ids == [] and fresh.get_nodes() == []
        with pytest.raises(InputError, match="no collection 'notes' in .*: nothing has been indexed into it yet"):
            PolarisVectorStore(new, collection="notes", config=config).query(text)
        from llama_index.core.schema import TextNode

        notes = PolarisVectorStore(new, collection="notes", model_id="fake-2", config=config)
        notes.add([TextNode(id_="n1", text="a note about anything", embedding=[1.0, 0.0])])
        assert notes.query(text).ids == ["n1"]
        notes.clear()  # the collection stays, empty
        assert notes.query(text).ids == [] and notes.get_nodes() == []
        with pytest.raises(InputError, match="no collection 'default' in .*, which has 1: 'notes'"):
            fresh.query(text)  # now "default" would hide the file's collection
        notes.close()
    finally:
        fresh.close()


def test_a_message_stays_short_whatever_the_file_holds(targets) -> None:
    from llama_index_polaris.engine.backends import open_store
    from llama_index_polaris.engine.sqlite.store import DocumentRecord

    with open_store(targets.new("big.db")) as store:
        for i in range(30):
            store.put_document(DocumentRecord(f"doc-{i}", path=f"notes/n{i:05d}.md", collection=f"c{i:02d}"))
        with store.read() as conn:
            with pytest.raises(ScopeError) as caught:
                names.collections_named(conn, ["c99"])
            message = str(caught.value)
            assert "which has 30: 'c00'" in message and "'c19' and 10 more." in message and "'c20'" not in message
            with pytest.raises(ScopeError) as caught:
                names.known_documents(conn, ["notes/n00007.mdx"])
            assert "holds 30 documents" in str(caught.value) and "Did you mean 'notes/n00007.md'" in str(caught.value)
            assert str(caught.value).count("'notes/") <= 1 + names.SUGGESTED
