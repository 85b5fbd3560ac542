"""An index of text alone (LlamaIndex nodes added with no embedding: no model is recorded) is read
by keywords in every door, on both backends, as the LlamaIndex store's TEXT_SEARCH reads it: mode
bm25, and hybrid, which then ranks the keyword list alone (the engine's rule, ``Searcher.search``).
The CLI said it "holds no index yet", the MCP server that it had "no model recorded", and Datasette
answered: three doors, three answers. Vector mode says why it cannot run, in every door."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import DatabaseError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import new_database

POLARIS = str(Path(sys.executable).parent / "polaris")
TEXTS = {"ferry": "The harbour ferry leaves at noon and returns at six.",
         "kiosk": "The ticket kiosk by the pier opens at nine.",
         "gull": "Gulls nest on the breakwater every spring."}


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(root / ".xdg"), "PATH": str(Path(sys.executable).parent)})


@pytest.fixture(params=["sqlite", "postgres"])
def text_only(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from llama_index.core.schema import TextNode

    from llama_index_polaris import PolarisVectorStore

    target = str(tmp_path / "polaris.db") if request.param == "sqlite" else new_database(request.getfixturevalue("pg_server"))
    store = PolarisVectorStore(db_path=target)
    try:
        store.add([TextNode(text=text, id_=name) for name, text in TEXTS.items()])
    finally:
        store.close()
    return target


def test_a_text_only_index_is_read_by_keywords_in_every_door(text_only: str, tmp_path: Path) -> None:
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
    from mcp_testing import McpSession, stdio, text_of

    from llama_index_polaris import PolarisVectorStore

    store = PolarisVectorStore(db_path=text_only)
    try:
        expected = store.query(VectorStoreQuery(query_str="harbour ferry", mode=VectorStoreQueryMode.TEXT_SEARCH,
                                                similarity_top_k=3)).ids
    finally:
        store.close()
    assert expected and expected[0] == "ferry"
    from llama_index.core import VectorStoreIndex

    from llama_index_polaris import PolarisEmbedding, PolarisRetriever

    embed = PolarisEmbedding(model_id="all-minilm-l6-v2")  # a retriever embeds the question whatever the store holds
    store = PolarisVectorStore(db_path=text_only)
    try:
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        retrievers = {"PolarisRetriever": PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=3),
                      "as_retriever()": index.as_retriever(similarity_top_k=3),
                      **{m: index.as_retriever(similarity_top_k=3, vector_store_query_mode=m) for m in ("hybrid", "text_search")}}
        for name, retriever in retrievers.items():  # as_retriever() raised SQLite's "no such table: chunks_vec"
            assert [n.node.node_id for n in retriever.retrieve("harbour ferry")] == expected, name
        with pytest.raises(DatabaseError, match="no vectors to search by meaning"):
            index.as_retriever(similarity_top_k=3, vector_store_query_mode="mmr").retrieve("harbour ferry")
    finally:
        store.close()
    with PolarisIndex(text_only, config=load_config(use_user_config=False), readonly=True) as index:
        for mode in ("bm25", "hybrid"):
            assert [h.node_id for h in index.search("harbour ferry", mode=mode, top_k=3)] == expected, mode
        with pytest.raises(DatabaseError, match="no vectors to search by meaning"):
            index.search("harbour ferry", mode="vector", top_k=3)
    for mode in ("bm25", "hybrid"):
        run = polaris(tmp_path, "search", "harbour ferry", "--mode", mode, "--json", "--db", text_only)
        assert run.returncode == 0, run.stderr
        assert [h["node_id"] for h in json.loads(run.stdout)] == expected, mode
    run = polaris(tmp_path, "search", "harbour ferry", "--mode", "vector", "--json", "--db", text_only)
    assert run.returncode != 0 and "no vectors to search by meaning" in run.stdout + run.stderr, run.stderr
    session = McpSession(stdio(tmp_path, "--db", text_only))
    try:
        for mode in ("bm25", "hybrid"):
            found = session.call("search", {"query": "harbour ferry", "mode": mode, "k": 3})
            assert not found.is_error, text_of(found)
            assert [h["document"] for h in found.structured_content["hits"]] == expected, mode
        refused = session.call("search", {"query": "harbour ferry", "mode": "vector"})
        assert refused.is_error and "no vectors to search by meaning" in text_of(refused), text_of(refused)
    finally:
        session.close()


async def test_datasette_reads_a_text_only_file_by_keywords(tmp_path: Path) -> None:
    from datasette.app import Datasette
    from llama_index.core.schema import TextNode

    from llama_index_polaris import PolarisVectorStore

    path = str(tmp_path / "polaris.db")
    store = PolarisVectorStore(db_path=path)
    store.add([TextNode(text=text, id_=name) for name, text in TEXTS.items()])
    store.close()
    ds = Datasette([path])
    for mode in ("bm25", "hybrid"):
        found = await ds.client.get("/-/polaris.json", params={"q": "harbour ferry", "mode": mode})
        assert found.status_code == 200 and found.json()["hits"][0]["document"] == "ferry", found.text
    page = await ds.client.get("/-/polaris", params={"q": "harbour ferry", "mode": "hybrid"})
    assert page.status_code == 200 and 'class="polaris-hit"' in page.text and "leaves at noon" in page.text, page.text
    name = ds.get_database().name
    sql = "select json_extract(polaris_search(:q, 3, '{\"mode\": \"hybrid\"}'), '$[0].node_id') as first"
    first = await ds.client.get(f"/{name}.json", params={"sql": sql, "q": "harbour ferry", "_shape": "array"})
    assert first.json()[0]["first"] == "ferry", first.text
    refused = await ds.client.get("/-/polaris.json", params={"q": "harbour ferry", "mode": "vector"})
    assert refused.status_code >= 400 and "no vectors to search by meaning" in refused.json()["error"], refused.text
