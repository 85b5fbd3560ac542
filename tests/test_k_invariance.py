"""Same question, same answer at every k: the first n hits of a query are the same, in the
same order with the same scores, for every k >= n, in every mode and unit and through every
door (the engine, the CLI, PolarisVectorStore in each query mode, PolarisRetriever,
as_retriever, the Datasette page, its JSON and polaris_search(), the MCP server).

The example handbook (59 chunks) on the bundled model, indexed once per module and backend into a
real polaris.db and a PostgreSQL database (#26: every door on both backends; the Datasette
explorer reads SQLite files only, docs/datasette.md, so its test runs on the file). Its polaris.toml sets a small candidate pool (8 chunks per list), so that
larger k read the deeper pools (8, 32, 128) in every door; one test runs the default pool.
Every test runs twice: with the fixed fusion, and with learned fusion weights in
polaris.toml (``[fusion_weights]``, #27), which every door must rank with.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import pytest
from datasette.app import Datasette
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search import pipeline
from conftest import Targets
from polaris_testing import REPO, copy_index

MODEL = "all-minilm-l6-v2"
POOL = 8
QUERIES = ("how do we handle expired sessions", "rrf_k", "retry with backoff after a 429", "on-call rotation")
WORDS = ("token", "refresh", "sessions", "retry", "incident", "deploy", "backup", "key", "rotation", "rate", "limit",
         "error", "onboarding", "week", "search", "configuration", "how", "the", "RRF_K", "--verbose", "429")


# learned fusion weights that move the head away from the fixed fusion's on these queries
LEARNED = ("\n[fusion_weights]\nfixed = 0.5\nbm25_rr = 1.0\nvector_rr = 0.3\ndepth = -0.5\nsame_chunk = 0.2\n"
           "page_share = -0.3\nparent_in_pool = 0.2\nchangelog = -0.5\nown_heading = 0.3\n")


class Project(NamedTuple):
    root: Path  # the folder: handbook/ and polaris.toml
    db: str  # where its index is: a polaris.db file or a PostgreSQL URI
    backend: str
    twin: str | None = None  # on Postgres: the handbook's polaris.db, which must answer the same


@pytest.fixture(scope="module")
def handbook_indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """``handbook_indexes(backend, server)``: the handbook indexed once per module and backend (the fusion is a
    query-time setting, both projects read the same index)."""
    built: dict[str, str] = {}
    targets: list[Targets] = []

    def build(backend: str, server: str | None) -> str:
        if backend not in built:
            root = tmp_path_factory.mktemp(f"handbook-{backend}")
            shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
            (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
            targets.append(Targets(backend, root, server))
            db = targets[-1].new()
            with PolarisIndex(db, config=cfg(root)) as index:
                report = index.index_paths([root / "handbook"])
                assert report.failed == [] and index.store.counts()["chunks"] > 4 * POOL  # deeper pools are read
            built[backend] = db
        return built[backend]

    yield build
    for t in targets:
        t.close()


@pytest.fixture(scope="module", params=[(f, b) for f in ("fixed", "learned") for b in ("sqlite", "postgres")],
                ids=lambda p: "-".join(p))
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, handbook_indexes) -> Project:
    fusion, backend = request.param
    root = tmp_path_factory.mktemp("kinvariance")
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\ncandidate_pool = {POOL}\n'
                                       f'{LEARNED if fusion == "learned" else ""}')
    db = handbook_indexes(backend, request.getfixturevalue("pg_server") if backend == "postgres" else None)
    if backend == "sqlite":  # next to its polaris.toml, where Datasette reads the config from
        return Project(root, str(copy_index(Path(db), root)), backend)
    return Project(root, db, backend, twin=handbook_indexes("sqlite", None))


def cfg(root: Path, **kw):
    return load_config(root, use_user_config=False, **kw)


def key(hit) -> tuple:
    """Everything a hit says, to compare across k: which chunk, where, its score and why."""
    d = hit.to_dict()
    return d["node_id"], d["document"], d["heading_path"], round(d["score"], 9), json.dumps(d["explain"], sort_keys=True)


def assert_same_hits(pg: list, file: list) -> None:
    """Postgres's hits are the file's: the same chunks, documents, headings, order and explanations,
    figures to 1e-4 (sqlite-vec and numpy sum float32 products in different orders, ~1e-7 apart; a list's
    rescaled scores divide such differences by its spread, and a pool of 3 can have a spread of 0.01: page_share
    once differed by 1.3e-5); chunk ids are each backend's own."""
    def same(a, b, where: str) -> None:
        if isinstance(a, float) or isinstance(b, float):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-4), where
        elif isinstance(a, dict) and isinstance(b, dict):
            assert a.keys() == b.keys(), where
            for name in a:
                if name != "chunk_id":
                    same(a[name], b[name], f"{where}.{name}")
        elif isinstance(a, list) and isinstance(b, list):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, f"{where}[{i}]")
        else:
            assert a == b, where

    same([h.to_dict() for h in pg], [h.to_dict() for h in file], "hits")


def assert_prefixes(lists: dict[int, list]) -> None:
    """Each shorter list is the head of every longer one (and as long as it can be)."""
    ks = sorted(lists)
    for i, a in enumerate(ks):
        for b in ks[i + 1:]:
            assert lists[a] == lists[b][:a], (a, b, lists[a], lists[b][:a])
            assert len(lists[a]) == min(a, len(lists[b])), (a, b)


def test_the_engine_answers_the_same_head_at_every_k(project: Project) -> None:
    # 60 examples on the file, 30 on Postgres: each Postgres example also asks the file and compares
    # (twice the searches, each slower there); 400 examples per fusion passed once, in 4 minutes
    @settings(max_examples=60 if project.backend == "sqlite" else 30, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
        ks=st.lists(st.integers(1, 100), min_size=2, max_size=4, unique=True),
        mode=st.sampled_from(pipeline.MODES),
        unit=st.sampled_from(("section", "chunk")),
        mmr=st.sampled_from((None, 0.6)),
        pool=st.sampled_from((POOL, 60, 3)),
    )
    def check(words, ks, mode, unit, mmr, pool) -> None:
        query = " ".join(words)
        with PolarisIndex(project.db, config=cfg(project.root, candidate_pool=pool), readonly=True) as index:
            hits = {k: index.search(query, top_k=k, mode=mode, unit=unit, mmr_lambda=mmr) for k in ks}
        lists = {k: [key(h) for h in v] for k, v in hits.items()}
        if project.twin:  # and the same answer as the file's, to the last float32 digits
            with PolarisIndex(project.twin, config=cfg(project.root, candidate_pool=pool), readonly=True) as file:
                for k in ks:
                    assert_same_hits(hits[k], file.search(query, top_k=k, mode=mode, unit=unit, mmr_lambda=mmr))
        assert_prefixes(lists)
        for hits in lists.values():  # still best first: a deeper pool's hits never outscore the ones above
            scores = [h[3] for h in hits]
            assert scores == sorted(scores, reverse=True)

    check()


def test_the_learned_weights_change_the_head(project: Project) -> None:
    """With [fusion_weights] the engine's head differs from the fixed fusion's (so the door
    tests below would see a door that ignored them), and each hit's contributions add up."""
    with PolarisIndex(project.db, config=cfg(project.root), readonly=True) as index:
        if index.config.fusion_weights is None:
            pytest.skip("the fixed-fusion project")
        learned = [[h.node_id for h in index.search(q, top_k=5)] for q in QUERIES]
        for h in index.search(QUERIES[0], top_k=5):
            assert sum(h.explain.contributions.values()) == pytest.approx(h.score)
    with PolarisIndex(project.db, config=cfg(project.root, fusion_weights={"fixed": 1.0}),
                      readonly=True) as index:
        fixed = [[h.node_id for h in index.search(q, top_k=5)] for q in QUERIES]
    assert learned != fixed


def test_the_head_is_ranked_in_the_first_pool_and_the_tail_in_deeper_ones(project: Project) -> None:
    with PolarisIndex(project.db, config=cfg(project.root), readonly=True) as index:
        hits = index.search(QUERIES[0], top_k=40)
        pools = [h.explain.pool for h in hits]
        assert pools[0] == POOL and pools == sorted(pools) and max(pools) > POOL
        shallow = index.search(QUERIES[0], top_k=3)
        assert [key(h) for h in shallow] == [key(h) for h in hits[:3]]


def test_the_default_pool_gives_the_same_head_at_every_k(tmp_path: Path, project: Project) -> None:
    fusion = LEARNED if "[fusion_weights]" in (project.root / "polaris.toml").read_text() else ""
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n{fusion}')
    with PolarisIndex(project.db, config=cfg(tmp_path), readonly=True) as index:
        assert index.config.candidate_pool == 60
        for q in QUERIES:
            assert_prefixes({k: [key(h) for h in index.search(q, top_k=k)] for k in (1, 3, 5, 10, 100)})


def assert_same(door: dict[int, list], engine: dict[int, list], digits: int = 6) -> None:
    """The same hits in the same order at each k, scores equal to ``digits`` decimals (JSON rounds)."""
    assert {k: [n for n, _ in v] for k, v in door.items()} == {k: [n for n, _ in v] for k, v in engine.items()}
    for k in door:
        assert [s for _, s in door[k]] == pytest.approx([s for _, s in engine[k]], abs=10 ** -digits), k


def engine_lists(project: Project, query: str, ks, **kw) -> dict[int, list]:
    with PolarisIndex(project.db, config=cfg(project.root), readonly=True) as index:
        return {k: [(h.node_id, h.score) for h in index.search(query, top_k=k, **kw)] for k in ks}


def test_the_cli_answers_the_engine_at_every_k(project: Project) -> None:
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(project.root / "xdg")}
    ks = (1, 4, 30)
    for query in QUERIES[:2]:
        cli = {}
        for k in ks:
            run = subprocess.run([exe, "search", query, "-k", str(k), "--json", "--db", project.db], cwd=project.root,
                                 capture_output=True, text=True, env=env, timeout=120)
            assert run.returncode == 0, run.stderr
            cli[k] = [(h["node_id"], round(h["score"], 6)) for h in json.loads(run.stdout)]
        assert_prefixes(cli)
        assert_same(cli, engine_lists(project, query, ks))


def test_the_mcp_server_answers_the_engine_at_every_k(project: Project) -> None:
    from mcp_testing import McpSession, stdio

    ks = (1, 4, 20)  # 20: the server's largest k
    session = McpSession(stdio(project.root, "--db", project.db))
    try:
        for query in QUERIES:
            door = session.hits_at(query, ks)
            assert_prefixes(door)
            assert_same(door, engine_lists(project, query, ks))
    finally:
        session.close()


def test_every_llamaindex_door_answers_the_same_head_at_every_k(project: Project) -> None:
    config = cfg(project.root)
    store = PolarisVectorStore(project.db, config=config)
    embed = PolarisEmbedding(model_id=MODEL, config=config)
    ks = (1, 2, 7, 40)
    for query in QUERIES:
        vector = embed.get_query_embedding(query)
        for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID,
                     VectorStoreQueryMode.MMR):
            lists = {}
            for k in ks:
                result = store.query(VectorStoreQuery(query_embedding=vector, query_str=query, similarity_top_k=k,
                                                      mode=mode))
                lists[k] = list(zip(result.ids, [round(s, 6) for s in result.similarities]))
            assert_prefixes(lists)
        # node.score is the match strength; the engine's relative score rides in the metadata
        retriever = {k: [(n.node.node_id, round(n.node.metadata["relative_score"], 6)) for n in
                         PolarisRetriever(vector_store=store, similarity_top_k=k).retrieve(query)] for k in ks}
        assert_prefixes(retriever)
        assert_same(retriever, engine_lists(project, query, ks))
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        for mode in ("default", "hybrid", "text_search", "mmr"):
            assert_prefixes({k: [(n.node.node_id, round(n.score, 6)) for n in index.as_retriever(
                similarity_top_k=k, vector_store_query_mode=mode).retrieve(query)] for k in ks})
    store.close()


async def test_every_datasette_door_answers_the_engine_at_every_k(project: Project) -> None:
    if project.backend != "sqlite":
        pytest.skip("the Datasette explorer reads SQLite files only (docs/datasette.md); the other doors "
                    "answer at every k on Postgres in the tests above")
    ds = Datasette([project.db])
    ks = (1, 3, 25)
    for query in QUERIES[:3]:
        expected = engine_lists(project, query, ks)
        by_chunk = {}
        with PolarisIndex(project.db, config=cfg(project.root), readonly=True) as index:
            by_chunk = {h.chunk_id: h.node_id for h in index.search(query, top_k=max(ks))}
        page, data, sql = {}, {}, {}
        for k in ks:
            html = (await ds.client.get("/polaris/-/polaris", params={"q": query, "k": str(k)})).text
            rows = re.findall(r'class="polaris-row-link"[^>]*>chunk (\d+)</a>.*?<div class="polaris-score"[^>]*>\s*'
                              r'<span>([\d.]+)</span>', html, re.S)
            page[k] = [(by_chunk[int(c)], round(float(s), 3)) for c, s in rows]
            got = (await ds.client.get("/polaris/-/polaris.json", params={"q": query, "k": str(k)})).json()
            data[k] = [(h["node_id"], round(h["score"], 6)) for h in got["hits"]]
            row = (await ds.client.get("/polaris.json", params={"sql": "select polaris_search(:q, :k) as v", "q": query,
                                                                "k": str(k), "_shape": "array"})).json()
            sql[k] = [(h["node_id"], round(h["score"], 6)) for h in json.loads(row[0]["v"])]
        assert_prefixes(data)
        assert_same(data, expected)
        assert_same(sql, expected)
        assert_same(page, expected, digits=3)
