"""Every door on the sign-bit path (#26): above the threshold both backends choose vector
candidates by sign bits, and every door answers what the engine answers, on the file and on its
copy on a server, with the same first hits at every k.

The index is 1,534 real sentences on the bundled model (``test_ann.real``); the thresholds are
lowered (approximate search from 1,000 vectors, 40 candidates at the least) so that the
candidates decide and the doors take the paths an index over 20k chunks takes: the file's
sign-bit blocks and cache, the server's scan of ``chunks_bits`` (one-shot: the CLI) and its
cache in RAM (long-lived: the engine, LlamaIndex, the MCP server). Subprocess doors get the
same thresholds from the interpreter they run in.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest
from datasette.app import Datasette
from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.storage import signbits
from llama_index_polaris.engine.sqlite import bits as vector_cache
from conftest import Targets
from test_ann import MODEL, real, store_of  # noqa: F401  (the module fixture of real vectors)

EXACT_BELOW, MIN_FETCH = 1_000, 40
LOWERED = ("from llama_index_polaris.engine.storage import signbits;"
           " from llama_index_polaris.engine.sqlite import bits as vector_cache;"
           f" signbits.EXACT_BELOW = {EXACT_BELOW};"
           f" signbits.MIN_FETCH = {MIN_FETCH}; vector_cache.MIN_CHUNKS = {EXACT_BELOW}; import sys;"
           " from llama_index_polaris.cli import main; sys.exit(main(sys.argv[1:]))")
KS = (1, 5, 20)


class Project(NamedTuple):
    root: Path
    db: str
    backend: str


@pytest.fixture(scope="module")
def indexes(real, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, Path]]:  # noqa: F811
    """The sentences in a polaris.db; its copy in a database is made by the first Postgres test."""
    sentences, vectors, _ = real
    root = tmp_path_factory.mktemp("signbits-doors")
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    store_of(root / "polaris.db", sentences, vectors).close()
    out: dict = {"sqlite": Project(root, str(root / "polaris.db"), "sqlite")}
    yield out, root
    if "targets" in out:
        out["targets"].close()


@pytest.fixture(params=["sqlite", "postgres"])
def project(request: pytest.FixtureRequest, indexes, monkeypatch: pytest.MonkeyPatch) -> Project:
    out, root = indexes
    monkeypatch.setattr(signbits, "EXACT_BELOW", EXACT_BELOW)
    monkeypatch.setattr(signbits, "MIN_FETCH", MIN_FETCH)
    monkeypatch.setattr(vector_cache, "MIN_CHUNKS", EXACT_BELOW)  # the file's caches: from the same size
    if request.param == "postgres" and "postgres" not in out:
        out["targets"] = Targets("postgres", root, request.getfixturevalue("pg_server"))
        out["postgres"] = Project(root, out["targets"].copy_of(Path(out["sqlite"].db)), "postgres")
    return out[request.param]


def queries(real) -> list[str]:  # noqa: F811
    sentences = real[0]
    return [s[: len(s) // 2] for s in sentences[7::50][:6]]


def cfg(root: Path):
    return load_config(root, use_user_config=False)


def engine(project: Project, query: str, mode: str = "hybrid", fast_start: bool = False) -> dict[int, list]:
    """The engine's hits at each k: (node id, score), a long-lived index (the cache waited for) or a one-shot one."""
    with PolarisIndex(project.db, config=cfg(project.root), readonly=True, fast_start=fast_start) as index:
        if not fast_start:  # the bits loaded: the cache answers, not the one-shot path
            with index.store.read():
                index.vector_cache.refresh()
            assert index.vector_cache.wait()
        return {k: [(h.node_id, round(h.score, 6)) for h in index.search(query, top_k=k, mode=mode)] for k in KS}


def assert_prefixes(lists: dict[int, list]) -> None:
    for a in sorted(lists):
        for b in sorted(lists):
            if a < b:
                assert lists[a] == lists[b][:a], (a, b)


def assert_same(door: dict[int, list], expected: dict[int, list], digits: int = 5) -> None:
    """The same hits in the same order at each k; scores to ``digits`` decimals (a one-shot and a
    long-lived ONNX session differ near the 7th, docs/search.md "Fusion")."""
    assert {k: [n for n, _ in v] for k, v in door.items()} == {k: [n for n, _ in v] for k, v in expected.items()}
    for k in door:
        assert [s for _, s in door[k]] == pytest.approx([s for _, s in expected[k]], abs=10 ** -digits), k


def test_the_candidates_decide_and_both_backends_answer_alike(project: Project, indexes, real) -> None:  # noqa: F811
    """The lowered thresholds put the vector list on the approximate path (it differs from exact
    search for some query, so this file's door tests are on that path), and the server answers
    what the file answers, long-lived and one-shot, at every k."""
    out = indexes[0]
    differs = False
    for query in queries(real):
        for fast_start in (False, True):
            mine = engine(project, query, "vector", fast_start)
            assert_prefixes(mine)
            assert_same(mine, engine(out["sqlite"], query, "vector", fast_start), digits=5)
        with pytest.MonkeyPatch.context() as exact:
            exact.setattr(signbits, "EXACT_BELOW", 10**9)
            differs |= engine(project, query, "vector", True)[20] != mine[20]
        assert_same(engine(project, query), engine(out["sqlite"], query), digits=5)
    assert differs


def test_the_cli_answers_the_engine(project: Project, real) -> None:  # noqa: F811
    for query in queries(real)[:3]:
        cli = {}
        for k in KS:
            run = subprocess.run([sys.executable, "-c", LOWERED, "search", query, "-k", str(k), "--json", "--db", project.db],
                                 cwd=project.root, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            cli[k] = [(h["node_id"], round(h["score"], 6)) for h in json.loads(run.stdout)]
        assert_prefixes(cli)
        assert_same(cli, engine(project, query, fast_start=True))


def test_the_mcp_server_answers_the_engine(project: Project, real) -> None:  # noqa: F811
    from mcp.client.stdio import StdioServerParameters
    from mcp_testing import McpSession, environment

    server = StdioServerParameters(command=sys.executable, args=["-c", LOWERED, "mcp", "--db", project.db],
                                   cwd=str(project.root), env=environment(project.root))
    session = McpSession(server)
    try:
        for query in queries(real)[:3]:
            door = session.hits_at(query, KS)
            assert_prefixes(door)
            assert_same(door, engine(project, query))
    finally:
        session.close()


def test_every_llamaindex_door_answers_the_engine(project: Project, real) -> None:  # noqa: F811
    config = cfg(project.root)
    store = PolarisVectorStore(project.db, collection=None, config=config)  # the sentences are in collections a and b
    embed = PolarisEmbedding(model_id=MODEL, config=config)
    for query in queries(real)[:3]:
        expected = engine(project, query)
        vector = embed.get_query_embedding(query)
        for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH,
                     VectorStoreQueryMode.MMR):
            lists = {}
            for k in KS:
                result = store.query(VectorStoreQuery(query_embedding=vector, query_str=query, similarity_top_k=k, mode=mode))
                lists[k] = list(zip(result.ids, [round(s, 6) for s in result.similarities]))
            assert_prefixes(lists)
            if mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID):
                assert {k: [i for i, _ in v] for k, v in lists.items()} == {k: [n for n, _ in v] for k, v in expected.items()}
        # node.score is the match strength (docs/llamaindex.md); the engine's relative score is in the metadata
        retriever = {k: [(n.node.node_id, round(n.node.metadata["relative_score"], 6)) for n in
                         PolarisRetriever(vector_store=store, similarity_top_k=k).retrieve(query)] for k in KS}
        assert_same(retriever, expected)
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        as_retriever = {k: [(n.node.node_id, round(n.node.metadata["relative_score"], 6)) for n in
                            index.as_retriever(similarity_top_k=k).retrieve(query)] for k in KS}
        assert_same(as_retriever, expected)
    store.close()


async def test_every_datasette_door_answers_the_engine(project: Project, real) -> None:  # noqa: F811
    if project.backend != "sqlite":
        pytest.skip("the Datasette explorer reads SQLite files only (docs/datasette.md)")
    ds = Datasette([project.db])
    for query in queries(real)[:3]:
        expected = engine(project, query)
        with PolarisIndex(project.db, config=cfg(project.root), readonly=True) as index:
            by_chunk = {h.chunk_id: h.node_id for h in index.search(query, top_k=max(KS))}
        data, sql, page = {}, {}, {}
        for k in KS:
            got = (await ds.client.get("/polaris/-/polaris.json", params={"q": query, "k": str(k)})).json()
            data[k] = [(h["node_id"], round(h["score"], 6)) for h in got["hits"]]
            row = (await ds.client.get("/polaris.json", params={"sql": "select polaris_search(:q, :k) as v", "q": query,
                                                                "k": str(k), "_shape": "array"})).json()
            sql[k] = [(h["node_id"], round(h["score"], 6)) for h in json.loads(row[0]["v"])]
            html = (await ds.client.get("/polaris/-/polaris", params={"q": query, "k": str(k)})).text
            rows = re.findall(r'class="polaris-row-link"[^>]*>chunk (\d+)</a>.*?<div class="polaris-score"[^>]*>\s*'
                              r'<span>([\d.]+)</span>', html, re.S)
            page[k] = [(by_chunk[int(c)], round(float(s), 3)) for c, s in rows]
        assert_same(data, expected)
        assert_same(sql, expected)
        assert_same(page, expected, digits=3)
