"""Two rules of the boost, decided on the doc sets' train splits (docs/search.md "Sections"), in
every door and at every k, on both backends:

- a lookup of one identifier puts the section whose own heading is that identifier first
  (``boost.heading_key``: case, spaces, ``_`` and the brackets around it aside);
- a changelog or release-notes entry has ``changelog_penalty`` (0.1) taken off its boost, so
  the section that documents a feature comes before the entry that announced it when the two
  are close."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
from datasette.app import Datasette
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import VectorStoreIndex

from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search import pipeline
from llama_index_polaris.engine.search.boost import exact_headings, heading_key
from llama_index_polaris.engine.search.rank import Candidate, RankParams, rank

MODEL = "all-minilm-l6-v2"
OPTIONS = """# Options

## Trailing Commas

Print trailing commas wherever possible in multi-line comma-separated structures. Note that
quoteProps and trailing commas interact: with quoteProps set to "consistent", a trailing comma
after a quoted property stays, and quoteProps "preserve" keeps the quotes the input had.
Valid options for quoteProps are listed with it; quoteProps applies to objects only.

## Quote Props

Change when properties in objects are quoted: "as-needed", "consistent" or "preserve".

## Semicolons

Print semicolons at the ends of statements.
"""
GUIDE = "# Guide\n\n## Getting started\n\nInstall the package, create a config file and run the formatter on your files.\n"
CHANGELOG = ("# Changelog\n\n## 1.2.0 (2024-01-02)\n\n### Added\n\n- The formatter now reads an offline cache of"
             " plugins: format files without network access\n  using the offline plugin cache, and warm the offline"
             " cache with the cache command.\n")
CACHE = ("# Cache\n\n## Offline use\n\nFormat files without network access: the formatter keeps downloaded plugins"
         " in a local cache\nand reads them from there when you are offline.\n")
WORDS = "plugin format files"  # the changelog entry leads by less than the penalty
ANNOUNCED = ("CHANGELOG.md", "Changelog > 1.2.0 (2024-01-02) > Added")
DOCUMENTED = ("cache.md", "Cache > Offline use")
LOOKUP = "quoteProps"
ENTRY = ("options.md", "Options > Quote Props")
SIBLING = ("options.md", "Options > Trailing Commas")  # names quoteProps four times: first without the rule


def test_a_heading_key_ignores_case_spaces_underscores_and_brackets() -> None:
    assert heading_key("quoteProps") == heading_key("Quote Props") == "quoteprops"
    assert heading_key("CARGO_HOME") == heading_key("Cargo Home")
    assert heading_key("[tool.uv.pip]") == heading_key("tool.uv.pip") and heading_key("@model_serializer") == "modelserializer"
    assert heading_key("--ignore-unknown") == "--ignore-unknown" != heading_key("--ignore-path")
    assert heading_key("build.rolldownOptions") != heading_key("build.rollupOptions")


def test_only_the_own_heading_counts() -> None:
    paths = ["Options > Quote Props", "Quote Props > Examples", "Options > Quote Props Later", "", "quoteProps"]
    assert exact_headings("quoteprops", paths) == {0, 4}
    assert exact_headings("", paths) == set()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 30), target=st.integers(0, 29))
def test_the_entry_comes_first_at_every_k_and_the_rest_keep_their_order(seed: int, n: int, target: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    target %= n
    cands = {i: Candidate(("a.md", f"Page > S{i}" if i != target else "Page > Quote Props"),
                          f"Page > S{i}" if i != target else "Page > Quote Props") for i in range(n)}
    vec = list(zip(rng.permutation(n).tolist(), np.sort(rng.uniform(0.2, 0.9, n)).tolist()))
    bm = list(zip(rng.permutation(n).tolist(), np.sort(rng.uniform(1, 30, n))[::-1].tolist()))
    base = RankParams(k=n, rrf_k=20, heading_boost=0.2, boost_terms=("quoteprop",), score_fusion=0.5)
    plain = [h.chunk_id for h in rank(vec, bm, cands, base)]
    for k in (1, 2, n):
        hits = rank(vec, bm, cands, replace(base, k=k, exact_heading="quoteprops"))
        assert hits[0].chunk_id == target and hits[0].explain.boost > 1.0
        assert [h.chunk_id for h in hits[1:]] == [c for c in plain if c != target][: k - 1]


class Project(NamedTuple):
    root: Path
    db: str
    sqlite: bool


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, module_targets) -> Project:
    root = tmp_path_factory.mktemp("exact")
    (root / "docs").mkdir()
    (root / "docs" / "options.md").write_text(OPTIONS)
    (root / "docs" / "guide.md").write_text(GUIDE)
    (root / "docs" / "CHANGELOG.md").write_text(CHANGELOG)
    (root / "docs" / "cache.md").write_text(CACHE)
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    db = str(root / "polaris.db") if module_targets.backend == "sqlite" else module_targets.new()
    with PolarisIndex(db, config=load_config(root, use_user_config=False)) as index:
        index.index_paths([root / "docs"])
    return Project(root, db, module_targets.backend == "sqlite")


def keys(hits) -> list[tuple[str, str]]:
    return [(h.document, h.heading_path) for h in hits]


def test_the_engine_puts_the_entry_first_and_without_the_rule_the_sibling_wins(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        assert [keys(index.search(LOOKUP, top_k=k))[0] for k in (1, 2, 4)] == [ENTRY] * 3
        assert keys(index.search(LOOKUP, top_k=4, unit="chunk"))[0] == ENTRY
        monkeypatch.setattr(pipeline, "IDENTIFIER_LOOKUP", False)  # the test can fail: without it the sibling is first
        assert keys(index.search(LOOKUP, top_k=1)) == [SIBLING]


def test_the_documenting_section_comes_before_the_changelog_entry_and_without_the_penalty_not(
        project: Project) -> None:
    cfg = load_config(project.root, use_user_config=False)
    assert cfg.changelog_penalty == 0.1
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        hits = index.search(WORDS, top_k=4)
        assert [keys(index.search(WORDS, top_k=k))[0] for k in (1, 2, 4)] == [DOCUMENTED] * 3
        entry = next(h for h in hits if (h.document, h.heading_path) == ANNOUNCED)
        assert entry.explain.boost == pytest.approx(-0.1)  # no query word in its headings: the penalty alone
    with PolarisIndex(project.db, config=cfg.replace(changelog_penalty=0.0), readonly=True) as index:
        assert keys(index.search(WORDS, top_k=1)) == [ANNOUNCED]  # the test can fail: without it the entry leads


def test_a_changelog_penalty_outside_0_to_1_is_refused(tmp_path: Path) -> None:
    from llama_index_polaris.engine.errors import ConfigError

    (tmp_path / "polaris.toml").write_text("changelog_penalty = 2\n")
    with pytest.raises(ConfigError, match="changelog_penalty"):
        load_config(tmp_path, use_user_config=False)


@pytest.mark.parametrize("query", [LOOKUP, WORDS])
async def test_every_door_answers_as_the_engine(project: Project, query: str) -> None:
    LOOKUP = query  # noqa: N806 (the body below asks each door the same query)
    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        engine = keys(index.search(LOOKUP, top_k=3))
        vector = keys(index.search(LOOKUP, top_k=3, mode="vector"))
    assert engine[0] == (ENTRY if query == "quoteProps" else DOCUMENTED)

    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(project.root / "xdg")}
    cli = subprocess.run([exe, "search", LOOKUP, "-k", "3", "--json", "--db", project.db], cwd=project.root,
                         capture_output=True, text=True, env=env, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert [(h["document"], h["heading_path"]) for h in json.loads(cli.stdout)] == engine
    one = subprocess.run([exe, "search", LOOKUP, "-k", "1", "--json", "--db", project.db], cwd=project.root,
                         capture_output=True, text=True, env=env, timeout=120)
    assert [(h["document"], h["heading_path"]) for h in json.loads(one.stdout)] == engine[:1]  # the head at k = 1

    store = PolarisVectorStore(project.db, config=cfg)
    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    meta = lambda nodes: [(n.node.metadata["file_path"], n.node.metadata["heading_path"]) for n in nodes]  # noqa: E731
    assert meta(PolarisRetriever(vector_store=store, similarity_top_k=3).retrieve(LOOKUP)) == engine
    hybrid = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=3)
    assert meta(hybrid.retrieve(LOOKUP)) == engine
    default = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=3)
    assert meta(default.retrieve(LOOKUP)) == engine  # LlamaIndex's DEFAULT mode is Polaris's hybrid search
    plain = PolarisVectorStore(project.db, config=cfg, default_mode="vector")
    as_vector = VectorStoreIndex.from_vector_store(plain, embed_model=embed).as_retriever(similarity_top_k=3)
    assert meta(as_vector.retrieve(LOOKUP)) == vector  # the vector mode: no boost, the engine's vector ranking
    plain.close()
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode as Mode

    direct = store.query(VectorStoreQuery(query_str=LOOKUP, query_embedding=embed.get_query_embedding(LOOKUP),
                                          similarity_top_k=3, mode=Mode.HYBRID))
    assert [(n.metadata["file_path"], n.metadata["heading_path"]) for n in direct.nodes] == engine
    store.close()

    if not project.sqlite:
        return  # the Datasette explorer reads SQLite files only (docs/datasette.md)
    ds = Datasette([project.db])
    page = (await ds.client.get("/polaris/-/polaris.json", params={"q": LOOKUP, "k": "3"})).json()
    assert [(h["document"], h["heading_path"]) for h in page["hits"]] == engine
    html = (await ds.client.get("/polaris/-/polaris", params={"q": LOOKUP, "k": "3"})).text
    headings = re.findall(r'<h3 class="polaris-heading">(.*?)</h3>', html, re.S)
    shown = [" > ".join(re.sub(r"<[^>]+>", "", part) for part in re.findall(r"<span>(.*?)</span>", h)) for h in headings]
    assert shown == [h for _, h in engine]
    sql = await ds.client.get("/polaris.json", params={"sql": f"select polaris_search('{LOOKUP}', 3) as v",
                                                       "_shape": "array"})
    assert [(h["document"], h["heading_path"]) for h in json.loads(sql.json()[0]["v"])] == engine


@pytest.mark.parametrize("query", [LOOKUP, WORDS])
def test_the_mcp_server_answers_as_the_engine(project: Project, query: str) -> None:
    LOOKUP = query  # noqa: N806
    from mcp_testing import McpSession, stdio

    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        engine = keys(index.search(LOOKUP, top_k=3))
    session = McpSession(stdio(project.root, "--db", project.db))
    try:
        result = session.call("search", {"query": LOOKUP, "k": 3})
        assert not result.is_error, result.content
        assert [(h["document"], h["heading_path"]) for h in result.structured_content["hits"]] == engine
        assert engine[0] == (ENTRY if query == "quoteProps" else DOCUMENTED)
    finally:
        session.close()
