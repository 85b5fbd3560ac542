"""A hit is a section in every door: no two hits share (document, heading path), and every
door gives the same answer (CLI, Python, LlamaIndex retriever, store and as_retriever,
Datasette page, JSON and SQL function, the MCP server). The bundled model, a real polaris.db, and
the same files indexed into a PostgreSQL database (#26): every door but Datasette runs on both;
the Datasette explorer reads SQLite files only (docs/datasette.md), so its checks run on the file."""

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
from llama_index.core import VectorStoreIndex

from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.sqlite import postings as lists
from llama_index_polaris.engine.search import pipeline
from llama_index_polaris.engine.sqlite import bm25_postings as postings
from llama_index_polaris.engine.sqlite.bm25 import bm25

MODEL = "all-minilm-l6-v2"
QUERY = "how are signing keys rotated"
LONG = "\n\n".join(
    f"Step {i}. Signing keys are rotated on a schedule; the rotation job {i} writes the new key, keeps the old"
    f" one for verification and records rotation {i} in the audit log before anything else happens."
    for i in range(24)
)
FILES = {
    "keys.md": f"# Keys\n\n## Rotation\n\n{LONG}\n\n## Storage\n\nKeys are stored in the vault, never on disk.\n",
    "tokens.md": "# Tokens\n\n## Refresh\n\nA refresh token is exchanged for a new access token and a new refresh token.\n",
    "ops.md": "# Operations\n\n## Key ceremonies\n\nA rotation of the root key needs two operators.\n",
    # FTS5 reads OUT_DIR as the words "out dir", which the first section has more of
    "build.md": "# Build\n\n## Output folder\n\nPass `--out-dir` to copy the final artifacts out to a dir of your"
                " choice: the out dir is created if missing.\n\n## Script environment\n\nA build script reads the"
                " variables that Cargo sets before it runs: the target triple, the profile, the number of jobs, the"
                " features that are enabled and `OUT_DIR`, the folder where generated files belong. Write nothing"
                " anywhere else.\n",
}
LOOKUP = "OUT_DIR"  # a query of identifiers only: the section naming it as written answers
NAMING = ("build.md", "Build > Script environment")


class Project(NamedTuple):
    root: Path  # the folder: docs/ and polaris.toml
    db: str  # where its index is: a polaris.db file or a PostgreSQL URI
    backend: str

    @property
    def sqlite(self) -> bool:
        """Whether the Datasette doors can open it (they read SQLite files only, docs/datasette.md)."""
        return self.backend == "sqlite"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, module_targets) -> Project:
    root = tmp_path_factory.mktemp("sections")
    (root / "docs").mkdir()
    for name, text in FILES.items():
        (root / "docs" / name).write_text(text)
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    # Words in two chunks or more get BM25 posting lists (1,000 in the engine): the file keeps
    # them, so every door below, the CLI's process and Datasette's included, scores from them.
    # (Postgres keeps a posting row per term and chunk whatever COMMON_DF says.)
    db = str(root / "polaris.db") if module_targets.backend == "sqlite" else module_targets.new()
    with pytest.MonkeyPatch.context() as mp, \
            PolarisIndex(db, config=load_config(root, use_user_config=False)) as index:
        mp.setattr(lists, "COMMON_DF", 2)
        index.index_paths([root / "docs"])
        rotation = [c for c in index.store.get_chunks() if c.heading_path == "Keys > Rotation"]
        assert len(rotation) >= 4  # one section, many chunks: the case that repeated
    return Project(root, db, module_targets.backend)


def polaris(project: Project, *args: str) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(project.root / "xdg")}
    return subprocess.run([exe, *args, "--db", project.db], cwd=project.root, capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_posting_lists_answer_and_rank_as_fts5(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    if not project.sqlite:
        pytest.skip("the SQLite file's own posting lists against its FTS5 table (not a door); Postgres has neither, "
                    "its BM25 is checked against FTS5's scores in test_postgres.py")
    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        conn = index.store.conn
        assert {"kei", "rotat", "sign"} <= {r[0] for r in conn.execute("SELECT term FROM chunks_bm25_terms")}
        from_lists = postings.bm25(conn, index.store.tokenizer(), QUERY, 20)
        assert from_lists is not None
        assert [i for i, _ in from_lists] == [i for i, _ in bm25(conn, QUERY, 20)]
        with_lists = [(h.chunk_id, h.score) for h in index.search(QUERY, top_k=4)]
        monkeypatch.setattr(postings, "bm25", lambda *a, **kw: None)  # FTS5 alone
        fts5_alone = [(h.chunk_id, h.score) for h in index.search(QUERY, top_k=4)]
        assert [c for c, _ in fts5_alone] == [c for c, _ in with_lists]
        assert [s for _, s in fts5_alone] == pytest.approx([s for _, s in with_lists])


def sections(keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    assert len(keys) == len(set(keys)), keys
    return keys


def test_every_door_answers_the_same_sections(project: Project) -> None:
    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg) as index:
        python = sections([(h.document, h.heading_path) for h in index.search(QUERY, top_k=4)])
        chunks = [(h.document, h.heading_path) for h in index.search(QUERY, top_k=4, unit="chunk")]
    assert python[0] == ("keys.md", "Keys > Rotation")
    assert chunks.count(("keys.md", "Keys > Rotation")) > 1  # the chunk unit still repeats, as asked

    cli = polaris(project, "search", QUERY, "-k", "4", "--json")
    assert cli.returncode == 0, cli.stderr
    assert sections([(h["document"], h["heading_path"]) for h in json.loads(cli.stdout)]) == python

    store = PolarisVectorStore(project.db, config=cfg)
    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    retriever = PolarisRetriever(vector_store=store, similarity_top_k=4)
    via_retriever = [(n.node.metadata["file_path"], n.node.metadata["heading_path"]) for n in retriever.retrieve(QUERY)]
    hybrid = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=4)
    via_index = [(n.node.metadata["file_path"], n.node.metadata["heading_path"]) for n in hybrid.retrieve(QUERY)]
    assert sections(via_retriever) == python and sections(via_index) == python
    store.close()


async def test_datasette_answers_the_same_sections(project: Project) -> None:
    if not project.sqlite:
        pytest.skip("the Datasette explorer reads SQLite files only (docs/datasette.md); the other doors answer "
                    "the same sections on Postgres in test_every_door_answers_the_same_sections")
    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        python = [(h.document, h.heading_path) for h in index.search(QUERY, top_k=4)]
    ds = Datasette([project.db])
    page = (await ds.client.get("/polaris/-/polaris.json", params={"q": QUERY, "k": "4"})).json()
    assert sections([(h["document"], h["heading_path"]) for h in page["hits"]]) == python
    sql = await ds.client.get("/polaris.json", params={"sql": f"select polaris_search('{QUERY}', 4) as v",
                                                       "_shape": "array"})
    assert sections([(h["document"], h["heading_path"]) for h in json.loads(sql.json()[0]["v"])]) == python


async def test_a_query_engine_can_give_the_llm_the_section(project: Project) -> None:
    """The section's bounded text reaches LlamaIndex as node metadata and Datasette's
    polaris_search as section_text, the same text as the CLI's --context section;
    MetadataReplacementPostProcessor swaps it in for the LLM."""
    from llama_index.core.postprocessor import MetadataReplacementPostProcessor
    from llama_index.core.schema import MetadataMode, QueryBundle

    cfg = load_config(project.root, use_user_config=False)
    cli = polaris(project, "search", QUERY, "-k", "2", "--json", "--context", "section", "--context-tokens", "600")
    assert cli.returncode == 0, cli.stderr
    expected = [h["section_text"] for h in json.loads(cli.stdout)]
    assert len(expected[0]) > len(json.loads(cli.stdout)[0]["text"])  # the long section: more than one chunk

    store = PolarisVectorStore(project.db, config=cfg)
    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    nodes = PolarisRetriever(vector_store=store, similarity_top_k=2, context_tokens=600).retrieve(QUERY)
    assert [n.node.metadata["section_text"] for n in nodes] == expected
    assert "section_text" not in nodes[0].node.get_content(metadata_mode=MetadataMode.LLM).split(":")[0]
    assert expected[0] not in nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
    swapped = MetadataReplacementPostProcessor(target_metadata_key="section_text").postprocess_nodes(
        nodes, QueryBundle(QUERY))
    assert swapped[0].node.get_content() == expected[0]

    hybrid = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=2, vector_store_kwargs={"context_tokens": 600})
    assert [n.node.metadata["section_text"] for n in hybrid.retrieve(QUERY)] == expected
    from llama_index.core.llms import MockLLM

    engine = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_query_engine(
        llm=MockLLM(), vector_store_query_mode="hybrid", similarity_top_k=2,
        vector_store_kwargs={"context_tokens": 600},
        node_postprocessors=[MetadataReplacementPostProcessor(target_metadata_key="section_text")])
    assert [n.node.get_content() for n in engine.query(QUERY).source_nodes] == expected
    without = PolarisRetriever(vector_store=store, similarity_top_k=2).retrieve(QUERY)
    assert "section_text" not in without[0].node.metadata
    store.close()
    if project.sqlite:  # Datasette reads SQLite files only (docs/datasette.md)
        ds = Datasette([project.db])
        sql = await ds.client.get("/polaris.json", params={
            "sql": f"select polaris_search('{QUERY}', 2, '{{\"context_tokens\": 600}}') as v", "_shape": "array"})
        assert [h["section_text"] for h in json.loads(sql.json()[0]["v"])] == expected


async def test_every_store_query_mode_and_the_page_answer_what_the_engine_answers(project: Project) -> None:
    """PolarisVectorStore.query in each mode gives the engine's hits for the same query
    (HYBRID and DEFAULT in sections, the others in chunks, as LlamaIndex's modes mean;
    DEFAULT in chunks with default_mode="vector"), and the Datasette page lists the
    engine's sections in its order."""
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode as Mode

    cfg = load_config(project.root, use_user_config=False)
    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    qvec = embed.get_query_embedding(QUERY)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        engine = {
            Mode.HYBRID: index.search(QUERY, top_k=4, query_vector=qvec),
            Mode.DEFAULT: index.search(QUERY, top_k=4, query_vector=qvec),
            "vector": index.search(QUERY, top_k=4, mode="vector", unit="chunk", query_vector=qvec),
            Mode.TEXT_SEARCH: index.search(QUERY, top_k=4, mode="bm25", unit="chunk"),
            Mode.MMR: index.search(QUERY, top_k=4, mode="vector", unit="chunk", query_vector=qvec,
                                   mmr_lambda=cfg.mmr_lambda),
        }
    store = PolarisVectorStore(project.db, config=cfg)
    plain = PolarisVectorStore(project.db, config=cfg, default_mode="vector")
    for mode, hits in engine.items():
        on, asked = (plain, Mode.DEFAULT) if mode == "vector" else (store, mode)
        result = on.query(VectorStoreQuery(query_str=QUERY, query_embedding=qvec, similarity_top_k=4, mode=asked))
        assert result.ids == [h.node_id for h in hits], mode
    store.close()
    plain.close()
    assert len({h.node_id for h in engine["vector"]}) == 4  # chunks: the long section may fill the list
    assert [h.node_id for h in engine["vector"]] != [h.node_id for h in engine[Mode.DEFAULT]]

    if not project.sqlite:
        return  # the page below: Datasette reads SQLite files only (docs/datasette.md)
    page = await Datasette([project.db]).client.get("/polaris/-/polaris", params={"q": QUERY, "k": "4"})
    headings = re.findall(r'<h3 class="polaris-heading">(.*?)</h3>', page.text, re.S)
    shown = [" > ".join(re.sub(r"<[^>]+>", "", part) for part in re.findall(r"<span>(.*?)</span>", h)) for h in headings]
    assert shown == [h.heading_path for h in engine[Mode.HYBRID]]


async def test_an_identifier_lookup_is_answered_by_the_section_naming_it_in_every_door(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """BM25 alone ranks "out dir" prose first; every door puts the section that names
    `OUT_DIR` as written first, in hybrid and in BM25 mode, the same as the engine."""
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode as Mode

    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        hybrid = [(h.document, h.heading_path) for h in index.search(LOOKUP, top_k=3)]
        text = [h.node_id for h in index.search(LOOKUP, top_k=3, mode="bm25", unit="chunk")]
        assert hybrid[0] == NAMING and index.search(LOOKUP, top_k=1, mode="bm25")[0].heading_path == NAMING[1]
        with monkeypatch.context() as m:
            m.setattr(pipeline, "IDENTIFIER_LOOKUP", False)  # without it the words win: the test can fail
            assert index.search(LOOKUP, top_k=1, mode="bm25")[0].heading_path == "Build > Output folder"
            assert index.search(LOOKUP, top_k=1)[0].heading_path == "Build > Output folder"

    cli = polaris(project, "search", LOOKUP, "-k", "3", "--json")
    assert cli.returncode == 0, cli.stderr
    assert [(h["document"], h["heading_path"]) for h in json.loads(cli.stdout)] == hybrid

    store = PolarisVectorStore(project.db, config=cfg)
    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    retriever = PolarisRetriever(vector_store=store, similarity_top_k=3)
    assert [(n.node.metadata["file_path"], n.node.metadata["heading_path"]) for n in retriever.retrieve(LOOKUP)] == hybrid
    as_hybrid = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=3)
    assert [(n.node.metadata["file_path"], n.node.metadata["heading_path"]) for n in as_hybrid.retrieve(LOOKUP)] == hybrid
    assert store.query(VectorStoreQuery(query_str=LOOKUP, similarity_top_k=3, mode=Mode.TEXT_SEARCH)).ids == text
    qvec = embed.get_query_embedding(LOOKUP)
    direct = store.query(VectorStoreQuery(query_str=LOOKUP, query_embedding=qvec, similarity_top_k=3, mode=Mode.HYBRID))
    assert [(n.metadata["file_path"], n.metadata["heading_path"]) for n in direct.nodes] == hybrid
    store.close()

    if not project.sqlite:
        return  # the Datasette doors below: the explorer reads SQLite files only (docs/datasette.md)
    ds = Datasette([project.db])
    page = (await ds.client.get("/polaris/-/polaris.json", params={"q": LOOKUP, "k": "3"})).json()
    assert [(h["document"], h["heading_path"]) for h in page["hits"]] == hybrid
    html = (await ds.client.get("/polaris/-/polaris", params={"q": LOOKUP, "k": "3"})).text
    headings = re.findall(r'<h3 class="polaris-heading">(.*?)</h3>', html, re.S)
    shown = [" > ".join(re.sub(r"<[^>]+>", "", part) for part in re.findall(r"<span>(.*?)</span>", h)) for h in headings]
    assert shown == [h for _, h in hybrid]
    sql = await ds.client.get("/polaris.json", params={"sql": f"select polaris_search('{LOOKUP}', 3) as v",
                                                       "_shape": "array"})
    assert [(h["document"], h["heading_path"]) for h in json.loads(sql.json()[0]["v"])] == hybrid


def test_the_mcp_server_answers_the_same_sections_and_section_text(project: Project) -> None:
    from mcp_testing import McpSession, stdio

    cfg = load_config(project.root, use_user_config=False)
    with PolarisIndex(project.db, config=cfg, readonly=True) as index:
        python = [(h.document, h.heading_path) for h in index.search(QUERY, top_k=4)]
        lookup = [(h.document, h.heading_path) for h in index.search(LOOKUP, top_k=3)]
        texts = [h.section_text for h in index.search(QUERY, top_k=2, context_tokens=600)]
    session = McpSession(stdio(project.root, "--db", project.db))
    try:
        def hits(args: dict) -> list[dict]:
            result = session.call("search", args)
            assert not result.is_error, result.content
            return result.structured_content["hits"]

        assert sections([(h["document"], h["heading_path"]) for h in hits({"query": QUERY, "k": 4})]) == python
        assert [(h["document"], h["heading_path"]) for h in hits({"query": LOOKUP, "k": 3})] == lookup
        assert lookup[0] == NAMING
        assert [h["section_text"] for h in hits({"query": QUERY, "k": 2, "section_tokens": 600})] == texts
    finally:
        session.close()
