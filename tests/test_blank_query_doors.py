"""A query that holds nothing to read (empty, spaces, control characters) finds nothing, in every
door, on both backends: the engine decides it (``pipeline.is_blank``), even when a LlamaIndex
retriever embedded the blank text and hands the store a vector. A real question finds its hits
through the same doors, so each check below can fail."""

from __future__ import annotations

import json

import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from test_backend_doors import polaris, project  # noqa: F401  (the handbook on both backends, and the CLI)

MODEL = "all-minilm-l6-v2"
BACKENDS = ("sqlite", "postgres")
BLANK = ("", "   ", "\t\n ", "\x00", "\x01\x00 \x7f")
ASKED = "how do I rotate an API key"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ("hybrid", "vector", "bm25"))
def test_the_engine_finds_nothing_for_nothing_asked(project: dict, backend: str, mode: str) -> None:
    with PolarisIndex(project[backend], config=load_config(project["root"], use_user_config=False), readonly=True) as ix:
        assert ix.search(ASKED, top_k=3, mode=mode)
        vector = ix.searcher()._embed("   ")
        for query in BLANK:
            assert list(ix.search(query, top_k=3, mode=mode)) == [], repr(query)
            if mode != "bm25" and query:  # a vector embedded from the blank text changes nothing
                assert list(ix.search(query, top_k=3, mode=mode, query_vector=vector)) == [], repr(query)


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_llamaindex_retrievers_find_nothing_for_nothing_asked(project: dict, backend: str) -> None:
    from llama_index.core import VectorStoreIndex

    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore

    embed = PolarisEmbedding(model_id=MODEL)
    store = PolarisVectorStore(db_path=project[backend], embed_model=embed)
    try:
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        retrievers = [PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=3),
                      index.as_retriever(similarity_top_k=3),
                      *(index.as_retriever(similarity_top_k=3, vector_store_query_mode=m)
                        for m in ("hybrid", "mmr", "text_search"))]
        for retriever in retrievers:
            assert retriever.retrieve(ASKED)
            for query in BLANK:
                assert retriever.retrieve(query) == [], (retriever, repr(query))
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_cli_and_the_mcp_server_find_nothing_for_nothing_asked(project: dict, backend: str) -> None:
    from mcp_testing import McpSession, stdio

    for query in (q for q in BLANK if "\x00" not in q):  # a NUL cannot be an argument of a process
        assert json.loads(polaris(project["root"], "search", query, "--json", "--db", project[backend]).stdout) == []
    assert json.loads(polaris(project["root"], "search", ASKED, "--json", "--db", project[backend]).stdout)
    session = McpSession(stdio(project["root"], "--db", project[backend]))
    try:
        assert session.call("search", {"query": ASKED}).structured_content["hits"]
        for query in BLANK[1:]:  # the tool refuses an empty query outright
            assert session.call("search", {"query": query}).structured_content["hits"] == [], repr(query)
    finally:
        session.close()


async def test_the_datasette_page_json_and_sql_function_find_nothing_for_nothing_asked(project: dict) -> None:
    from datasette.app import Datasette

    ds = Datasette([project["sqlite"]])
    name = ds.get_database().name
    sql = "select json_array_length(polaris_search(:q, 3)) as n"
    assert (await ds.client.get("/-/polaris.json", params={"q": ASKED})).json()["hits"]
    assert 'class="polaris-hit"' in (await ds.client.get("/-/polaris", params={"q": ASKED})).text
    assert (await ds.client.get(f"/{name}.json", params={"sql": sql, "q": ASKED, "_shape": "array"})).json()[0]["n"] > 0
    for query in BLANK[1:]:
        data = (await ds.client.get("/-/polaris.json", params={"q": query})).json()
        assert data["hits"] == [], repr(query)
        assert 'class="polaris-hit"' not in (await ds.client.get("/-/polaris", params={"q": query})).text, repr(query)
        rows = (await ds.client.get(f"/{name}.json", params={"sql": sql, "q": query, "_shape": "array"})).json()
        assert rows == [{"n": 0}], (repr(query), rows)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_name_is_refused_by_the_engine_and_no_name_to_every_mcp_tool(project: dict, backend: str) -> None:
    """An empty collection or document name named nothing: the engine (and so the CLI) says so
    instead of searching an empty scope; the MCP server, whose callers fill optional arguments
    with "", reads it as no name in every tool alike."""
    from llama_index_polaris.engine.errors import InputError
    from mcp_testing import McpSession, stdio

    with PolarisIndex(project[backend], config=load_config(project["root"], use_user_config=False), readonly=True) as ix:
        for scope in ({"collections": [""]}, {"documents": [""]}, {"documents": ["auth/authentication.md", ""]}):
            with pytest.raises(InputError, match="empty name"):
                ix.search(ASKED, **scope)
    cli = polaris(project["root"], "search", ASKED, "--collection", "", "--db", project[backend])
    assert cli.returncode == 1 and "empty name" in cli.stderr
    session = McpSession(stdio(project["root"], "--db", project[backend]))
    try:
        plain = session.call("search", {"query": ASKED}).structured_content
        for extra in ({"collection": ""}, {"documents": [""]}, {"collection": "", "documents": []}):
            assert session.call("search", {"query": ASKED, **extra}).structured_content == plain, extra
        listed = session.call("list_documents", {}).structured_content
        assert session.call("list_documents", {"collection": ""}).structured_content == listed
        outline = session.call("outline", {"document": "auth/authentication.md"}).structured_content
        assert session.call("outline", {"document": "auth/authentication.md", "collection": ""}).structured_content == outline
    finally:
        session.close()
