"""Match strength and "no good match" (#37 item 3): decided in the engine, shown by every door.

The example handbook indexed once into a polaris.db and once into PostgreSQL by the CLI
(``test_backend_doors.project``). A question
the handbook does not answer is flagged by the engine, the CLI (text and --json), the Datasette
page and its JSON, the MCP server and both LlamaIndex retrievers, on both backends; an answered
one is not. LlamaIndex's own ``SimilarityPostprocessor`` at the engine's threshold drops every
hit of the first and keeps the right sections of the second. The strength itself is checked as
maths: monotone in its figures, between 0 and 1, and the same figures give the same strength
whatever the query (comparable across queries).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search.strength import GOOD_MATCH, strength, term_share, terms_beside
from test_backend_doors import polaris, project  # noqa: F401  (the handbook on both backends, and the CLI)

MODEL = "all-minilm-l6-v2"
BACKENDS = ("sqlite", "postgres")
UNANSWERED = "bake sourdough bread at home"
ANSWERED = "how do I rotate an API key"
ANSWER = "auth/authentication.md"  # Authentication > API keys > Rotating an API key


def opened(project: dict, backend: str) -> PolarisIndex:
    return PolarisIndex(project[backend], config=load_config(project["root"], use_user_config=False), readonly=True)


# -- the maths -----------------------------------------------------------------------------------
FIGURE = st.floats(0.0, 1.0)


@given(FIGURE, FIGURE, st.floats(0.0, 0.5))
def test_strength_grows_with_each_figure_and_stays_between_0_and_1(cosine: float, share: float, more: float) -> None:
    base = strength(cosine, share).value
    assert 0.0 <= base <= 1.0
    assert strength(min(1.0, cosine + more), share).value >= base
    assert strength(cosine, min(1.0, share + more)).value >= base
    assert strength(cosine, None).value is not None and strength(None, share).value is not None
    assert strength(None, None).value is None and not strength(None, None).good


def test_term_share_reads_stems_of_the_heading_and_the_text_without_blobs() -> None:
    assert term_share(["session", "expir"], "Guide > Sessions", "A session expires after an hour.") == 1.0
    assert term_share(["token"], "Guide", "no such word here") == 0.0
    assert term_share([], "Guide", "text") is None


def test_an_identifier_is_one_term_found_only_as_written() -> None:
    """A made-up ``LUM-9999`` shares the word ``lum`` with every code of an error table; counted
    whole, it is found only where it is written as itself."""
    table = "| LUM-4011 | 401 | The API key is missing. |"
    assert term_share(terms_beside(["lum", "9999"], ["LUM-9999"]), "Error codes", table, ["LUM-9999"]) == 0.0
    assert term_share(terms_beside(["lum", "4011"], ["LUM-4011"]), "Error codes", table, ["LUM-4011"]) == 1.0
    assert terms_beside(["error", "lum", "7777", "mean"], ["LUM-7777"]) == ["error", "mean"]
    assert term_share(["error"], "Error codes", table, ["LUM-7777"]) == 0.5
    assert term_share([], "Guide", "text", ["--locked"]) == 0.0


ERRORS = ("# Error codes\n\nEvery error response carries a code. Look it up here before you contact support.\n\n"
          "| Code | HTTP | Meaning |\n|------|------|---------|\n"
          "| LUM-4011 | 401 | The API key is missing or was revoked. |\n"
          "| LUM-4012 | 401 | The API key has expired; rotate it in the dashboard. |\n"
          "| LUM-4290 | 429 | Too many requests; wait for the time in `Retry-After`. |\n"
          "| LUM-5030 | 503 | The service is briefly unavailable; retry with backoff. |\n")
AUTH = ("# Authentication\n\nSend the API key in the `Authorization` header as `Bearer <key>`. Keys are created in"
        " the dashboard and can be rotated at any time; the old key keeps working for 24 hours.\n")


def test_a_made_up_code_is_no_good_match_where_the_real_one_is(tmp_path, backend_target: str) -> None:
    """Before, ``LUM-9999`` read 0.10 against an error table of ``LUM-4011`` and its kin (the word
    ``lum`` and the table's topic), a good match. Every door now says nothing matched: the engine,
    the CLI, both LlamaIndex retrievers (whose cutoff at ``GOOD_MATCH`` keeps no node), the MCP
    server and the Datasette JSON."""
    import subprocess

    from polaris_testing import project_toml
    from test_cli import POLARIS

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "errors.md").write_text(ERRORS)
    (tmp_path / "docs" / "auth.md").write_text(AUTH)
    (tmp_path / "polaris.toml").write_text(project_toml(backend_target, MODEL))
    cfg = load_config(tmp_path, use_user_config=False)
    with PolarisIndex(backend_target, config=cfg) as index:
        index.index_paths([tmp_path / "docs"])
        assert not index.search("LUM-4011", top_k=3).no_good_match
        assert index.search("LUM-9999", top_k=3).no_good_match
    for query, expected in (("LUM-4011", False), ("LUM-9999", True)):
        out = subprocess.run([POLARIS, "search", query, "--json", "-k", "3"], cwd=tmp_path, capture_output=True,
                             text=True, check=True, env={**__import__("os").environ,
                                                         "XDG_CONFIG_HOME": str(tmp_path / ".xdg")})
        hits = json.loads(out.stdout)
        assert (not any(h["good_match"] for h in hits)) is expected, (query, hits[0]["strength"])
    from llama_index.core import VectorStoreIndex
    from llama_index.core.postprocessor import SimilarityPostprocessor

    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
    from mcp_testing import McpSession, stdio

    embed = PolarisEmbedding(model_id=MODEL)
    store = PolarisVectorStore(db_path=backend_target, embed_model=embed)
    cutoff = SimilarityPostprocessor(similarity_cutoff=GOOD_MATCH)
    for retriever in (PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=3),
                      VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=3)):
        assert cutoff.postprocess_nodes(retriever.retrieve("LUM-4011"))
        assert cutoff.postprocess_nodes(retriever.retrieve("LUM-9999")) == []  # no error table handed to an LLM
    session = McpSession(stdio(tmp_path))
    try:
        for query, expected in (("LUM-4011", False), ("LUM-9999", True)):
            assert session.call("search", {"query": query, "k": 3}).structured_content["no_good_match"] is expected
    finally:
        session.close()
    if "://" not in backend_target:  # the Datasette explorer reads SQLite files
        import asyncio

        from datasette.app import Datasette

        async def flags() -> list[bool]:
            ds = Datasette([backend_target])
            name = Path(backend_target).stem
            return [(await ds.client.get(f"/{name}/-/polaris.json", params={"q": q, "k": "3"})).json()["no_good_match"]
                    for q in ("LUM-4011", "LUM-9999")]

        assert asyncio.run(flags()) == [False, True]


# -- every door, both backends ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_engine_flags_a_question_the_docs_do_not_answer(project: dict, backend: str) -> None:
    with opened(project, backend) as index:
        weak, good = index.search(UNANSWERED), index.search(ANSWERED)
    assert weak and weak.no_good_match and not any(h.good_match for h in weak)
    assert all(h.strength is not None and h.strength < GOOD_MATCH for h in weak)
    assert weak.no_match_note and "No hit matches well" in weak.no_match_note
    assert not good.no_good_match and good.no_match_note is None
    assert good[0].good_match and good[0].document == ANSWER and good[0].score == 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_cli_says_so_in_text_and_json(project: dict, backend: str) -> None:
    root, target = project["root"], project[backend]
    text = polaris(root, "search", UNANSWERED, "--db", target)
    assert text.returncode == 0 and text.stdout.startswith("No hit matches well"), text.stdout
    assert "No hit matches well" not in polaris(root, "search", ANSWERED, "--db", target).stdout
    as_json = polaris(root, "search", UNANSWERED, "--db", target, "--json")
    hits = json.loads(as_json.stdout)
    assert hits and not any(h["good_match"] for h in hits) and all(h["strength"] < GOOD_MATCH for h in hits)
    assert "No hit matches well" in as_json.stderr
    answered = json.loads(polaris(root, "search", ANSWERED, "--db", target, "--json").stdout)
    assert answered[0]["good_match"] and answered[0]["strength"] >= GOOD_MATCH


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_mcp_server_says_so(project: dict, backend: str) -> None:
    from mcp_testing import McpSession, stdio, text_of

    session = McpSession(stdio(project["root"], "--db", project[backend]))
    try:
        weak = session.call("search", {"query": UNANSWERED})
        good = session.call("search", {"query": ANSWERED})
    finally:
        session.close()
    assert weak.structured_content["no_good_match"] is True and "No hit matches well" in text_of(weak)
    assert not any(h["good_match"] for h in weak.structured_content["hits"])
    assert good.structured_content["no_good_match"] is False and "No hit matches well" not in text_of(good)
    assert good.structured_content["hits"][0]["good_match"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_llamaindex_retrievers_say_so_and_similarity_postprocessor_cuts(project: dict, backend: str) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.postprocessor import SimilarityPostprocessor

    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore

    embed = PolarisEmbedding(model_id=MODEL)
    store = PolarisVectorStore(db_path=project[backend], embed_model=embed)
    cutoff = SimilarityPostprocessor(similarity_cutoff=GOOD_MATCH)
    for retriever in (PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=5),
                      VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(similarity_top_k=5)):
        weak, good = retriever.retrieve(UNANSWERED), retriever.retrieve(ANSWERED)
        assert weak and all(n.node.metadata["no_good_match"] is True for n in weak)
        assert all(n.score == n.node.metadata["match_strength"] for n in weak)
        assert weak[0].node.metadata["relative_score"] == 1.0 and weak[0].score < GOOD_MATCH
        assert cutoff.postprocess_nodes(weak) == []  # every unrelated hit dropped
        kept = cutoff.postprocess_nodes(good)
        assert kept and all(n.node.metadata["good_match"] for n in kept) and len(kept) < len(good)
        assert kept[0].node.metadata["file_path"] == ANSWER  # the right section kept, first
        assert "operations/incidents.md" not in {n.node.metadata["file_path"] for n in kept}  # "On-call rotation": not it
        assert all(n.node.metadata["no_good_match"] is False for n in good)
        for key in ("relative_score", "match_strength", "good_match", "no_good_match"):
            assert key in kept[0].node.excluded_llm_metadata_keys


async def test_the_datasette_page_and_its_json_say_so(project: dict) -> None:
    from datasette.app import Datasette

    ds = Datasette([project["sqlite"]])
    page = await ds.client.get("/-/polaris", params={"q": UNANSWERED})
    assert page.status_code == 200 and 'class="polaris-weak"' in page.text and "No hit matches well" in page.text
    data = (await ds.client.get("/-/polaris.json", params={"q": UNANSWERED})).json()
    assert data["no_good_match"] is True and data["hits"] and not any(h["good_match"] for h in data["hits"])
    good = (await ds.client.get("/-/polaris.json", params={"q": ANSWERED})).json()
    assert good["no_good_match"] is False and good["hits"][0]["good_match"]
    assert 'class="polaris-weak"' not in (await ds.client.get("/-/polaris", params={"q": ANSWERED})).text
