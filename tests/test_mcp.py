"""`polaris mcp`: a real server process driven by the MCP SDK's own client, over stdio and
over streamable HTTP, on a real polaris.db (the bundled model). Each answer is compared
with what another door answers: `polaris search --json` for search, the engine for the
rest. One stdio session and one HTTP server per module serve most tests.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import PolarisError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search.pipeline import MAX_QUERY_CHARS
from llama_index_polaris.mcp_binding import parse_address
from llama_index_polaris.mcp_server import BRIEF, LIMITS, document_uri
from mcp_testing import POLARIS, McpSession, environment, http_server, stdio, text_of
from polaris_testing import BACKENDS, module_target, project_toml
from test_documents import FILES, MODEL, ROTATION, SESSIONS, target_of

TOOLS = {"search", "read_section", "outline", "list_documents", "status"}
QUERIES = ("how long does a session last", "refresh token lifetime")
NOTES = {"a.md": "# Notes A\n\nThe first note says that deploys happen on Tuesdays only.\n",
         "b.md": "# Notes B\n\nThe second note says that backups are tested every month.\n"}


@pytest.fixture(scope="module", params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files indexed once per backend; polaris.toml names the index (the folder's polaris.db, or a
    database), so the server, the CLI and the engine started in the folder all read that one."""
    root = tmp_path_factory.mktemp("mcp")
    for folder, files in {**FILES, "notes": NOTES}.items():
        for name, text in files.items():
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / name).write_text(text)
    (root / "polaris.toml").write_text(project_toml(module_target(request, tmp_path_factory), MODEL))
    with PolarisIndex(target_of(root), config=cfg(root)) as index:
        for folder in ("docs", "blog", "notes"):
            report = index.index_paths([root / folder], collection="default" if folder == "docs" else folder)
            assert report.failed == []
    return root


def cfg(root: Path):
    return load_config(root, use_user_config=False)


@pytest.fixture(scope="module")
def engine(project: Path) -> Iterator[PolarisIndex]:
    with PolarisIndex(target_of(project), config=cfg(project), readonly=True) as index:
        yield index


@pytest.fixture(scope="module")
def session(project: Path) -> Iterator[McpSession]:
    """One stdio session with `polaris mcp` started in the project, as an agent starts it."""
    opened = McpSession(stdio(project))
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def http_url(project: Path) -> Iterator[str]:
    yield from (url for url, _ in http_server(project))


served = contextmanager(http_server)  # a server stopped however the test ends


def cli_search(project: Path, *args: str) -> list[dict]:
    run = subprocess.run([POLARIS, "search", *args, "--json"], cwd=project, capture_output=True, text=True,
                         env=environment(project), timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def cli_error(project: Path, *args: str) -> str:
    run = subprocess.run([POLARIS, *args], cwd=project, capture_output=True, text=True, env=environment(project),
                         timeout=120)
    assert run.returncode == 1 and run.stderr.startswith("polaris: error: "), (run.returncode, run.stderr)
    return run.stderr.removeprefix("polaris: error: ").strip()


def as_cli(hits: list[dict]) -> list[dict]:
    """MCP hits without the two keys this door adds: what `polaris search --json` prints."""
    for h in hits:
        assert set(h) - set(FIRST_HIT_KEYS) == {"explanation", "on_disk"}
    return [{k: v for k, v in h.items() if k not in ("explanation", "on_disk")} for h in hits]


def assert_same_hits(mcp: list[dict], cli: list[dict]) -> None:
    """Every field equal, scores to 6 decimals: the server's long-lived process embeds the query with
    ONNX Runtime's graph optimisations and scores from RAM, the CLI's one-shot process without them."""
    assert cli, "the CLI found nothing: nothing to compare"
    mcp = as_cli(mcp)
    floats = ("score", "strength", "cosine")  # the query vector differs in the last digits
    assert [{**h, **dict.fromkeys(floats)} for h in mcp] == [{**h, **dict.fromkeys(floats)} for h in cli]
    for key in floats:
        pairs = [(a.get(key), b.get(key)) for a, b in zip(mcp, cli)]
        assert all(x == y if None in (x, y) else abs(x - y) <= 1e-5 for x, y in pairs), (key, pairs)


FIRST_HIT_KEYS = ("rank", "score", "chunk_id", "node_id", "document_id", "document", "collection", "heading_path",
                  "text", "start_char", "end_char", "metadata", "document_status", "document_error", "unit",
                  "section_start", "section_end", "section_chunks", "section_text", "section_exact", "strength",
                  "good_match", "cosine", "term_share")


# -- tools and their schemas ---------------------------------------------------------------------
def test_the_tools_are_listed_with_descriptions_and_bounded_schemas(session: McpSession) -> None:
    tools = {t.name: t for t in session.run(lambda c: c.list_tools()).tools}
    assert set(tools) == TOOLS  # no reindex: the server was not started with --allow-writes
    for tool in tools.values():
        assert len(tool.description) > 80 and tool.output_schema["type"] == "object"
        assert tool.annotations.read_only_hint is True
    search = tools["search"].input_schema["properties"]
    assert search["query"]["maxLength"] == MAX_QUERY_CHARS and tools["search"].input_schema["required"] == ["query"]
    assert (search["k"]["minimum"], search["k"]["maximum"], search["k"]["default"]) == (1, LIMITS["k_max"], 5)
    assert search["mode"]["enum"] == ["hybrid", "vector", "bm25"]
    assert search["section_tokens"]["maximum"] == LIMITS["section_tokens_max"]
    read = tools["read_section"].input_schema["properties"]
    assert read["max_tokens"]["maximum"] == LIMITS["read_tokens_max"]
    assert tools["list_documents"].input_schema["properties"]["limit"]["maximum"] == LIMITS["list_max"]
    depth = tools["outline"].input_schema["properties"]["max_depth"]  # the bound the call checks, in the schema
    assert (depth["minimum"], depth["maximum"]) == (1, LIMITS["outline_depth_max"])
    assert "hits" in tools["search"].output_schema["properties"]


# -- search: the same sections, order and scores as `polaris search --json` ----------------------
@pytest.mark.parametrize("args", [
    {"query": QUERIES[0]},
    {"query": QUERIES[1], "k": 3, "mode": "bm25"},
    {"query": "how is the signing key rotated", "k": 2, "mode": "vector", "collection": "default"},
    {"query": "sessions", "documents": ["guide/sessions.md"], "section_tokens": 40},
])
def test_search_answers_what_the_cli_answers(session: McpSession, project: Path, args: dict) -> None:
    full = session.call("search", {**args, "full": True})
    assert not full.is_error, text_of(full)
    answer = full.structured_content
    k, budget = args.get("k", 5), args.get("section_tokens", 300)
    flags = ["-k", str(k), "--mode", args.get("mode", "hybrid"), "--context", "section", "--context-tokens", str(budget)]
    flags += [f for c in ([args["collection"]] if "collection" in args else []) for f in ("--collection", c)]
    flags += [f for d in args.get("documents", []) for f in ("--document", d)]
    cli = cli_search(project, args["query"], *flags)
    assert_same_hits(answer["hits"], cli)  # sections, order, scores, spans, section text: all of it
    assert (answer["k"], answer["section_tokens"], answer["mode"]) == (k, budget, args.get("mode", "hybrid"))
    assert all(h["on_disk"] == "fresh" for h in answer["hits"])
    brief = session.call("search", args).structured_content["hits"]  # the default: what a reader needs
    assert [set(h) for h in brief] == [{*BRIEF, "explanation", "on_disk"}] * len(cli)
    assert_same_hits([{**h, **{key: c[key] for key in c if key not in BRIEF}} for h, c in zip(brief, cli)], cli)


def test_the_text_names_each_hit_with_its_explanation(session: McpSession) -> None:
    result = session.call("search", {"query": QUERIES[0], "k": 2})
    first = result.structured_content["hits"][0]
    text = text_of(result)
    assert text.startswith(f"2 sections for {QUERIES[0]!r} (hybrid; each section's text up to 300 tokens):")
    match = f" match {first['strength']:.2f}" + ("" if first["good_match"] else " (weak)")
    assert f"1. [1.000{match}] {first['document']} › {first['heading_path']}" in text
    assert first["explanation"].startswith("vector #") and first["explanation"] in text
    assert first["section_text"] in text


def test_a_long_section_still_shows_the_passage_that_matched(session: McpSession, engine: PolarisIndex) -> None:
    result = session.call("search", {"query": "when is the zebra escrow account closed", "k": 1,
                                     "section_tokens": 80, "full": True})
    hit = result.structured_content["hits"][0]
    assert hit["heading_path"] == "Tokens > Rotation" and "zebra" in hit["text"] and ROTATION.endswith("does.")
    start = engine.read_section("guide/tokens.md", "Rotation", max_tokens=80).text
    assert "zebra" not in start  # the section's start, cut to 80 tokens, does not reach it
    assert "zebra escrow account is closed" in hit["section_text"]  # the part of the matched chunk that answers
    assert engine.count_tokens(hit["section_text"].replace("[…]", "")) <= 80 + 4
    assert hit["section_text"] in text_of(result)


def test_the_answer_is_bounded(session: McpSession) -> None:
    result = session.call("search", {"query": "session token key", "k": LIMITS["k_max"],
                                     "section_tokens": LIMITS["section_tokens_max"]})
    answer = result.structured_content
    assert answer["section_tokens"] == LIMITS["answer_tokens"] // LIMITS["k_max"]  # k x budget cut to fit


# -- reading, outline, documents, status ----------------------------------------------------------
def test_read_section_gives_the_text_and_its_place(session: McpSession, engine: PolarisIndex) -> None:
    result = session.call("read_section", {"document": "guide/sessions.md", "heading_path": "Expiry",
                                           "collection": "default"})
    s = result.structured_content
    expected = engine.read_section("guide/sessions.md", "Sessions > Expiry", collection="default")
    assert (s["heading_path"], s["text"], s["tokens"]) == ("Sessions > Expiry", expected.text, expected.tokens)
    assert (s["position"], s["siblings"], s["previous"], s["next"]) == (2, 3, "Sessions > Lifetime", "Sessions > Storage")
    assert (s["document"], s["collection"], s["on_disk"], s["truncated"]) == ("guide/sessions.md", "default", "fresh", False)
    text = text_of(result)
    assert text.startswith("guide/sessions.md › Sessions > Expiry\nsection 2 of 3 under 'Sessions'")
    assert text.endswith("---\n" + expected.text)


def test_a_hit_is_read_whole_by_its_node_id(session: McpSession, engine: PolarisIndex) -> None:
    hit = session.call("search", {"query": "how is the signing key rotated", "k": 1}).structured_content["hits"][0]
    s = session.call("read_section", {"node_id": hit["node_id"], "max_tokens": 100}).structured_content
    assert (s["heading_path"], s["truncated"]) == (hit["heading_path"], True) and s["tokens"] > 300
    assert engine.count_tokens(s["text"].removesuffix("\n[…]")) <= 100
    assert s["text"] == engine.read_section(node_id=hit["node_id"], max_tokens=100).text


def test_the_outline_lists_headings_with_their_sizes(session: McpSession, engine: PolarisIndex) -> None:
    result = session.call("outline", {"document": "guide/tokens.md"})
    o = result.structured_content
    expected = engine.outline("guide/tokens.md")
    assert [(e["title"], e["depth"], e["tokens"], e["total_tokens"]) for e in o["entries"]] == [
        (e.title, e.depth, e.tokens, e.total_tokens) for e in expected.entries]
    assert (o["tokens"], o["headings"], o["shown"]) == (expected.tokens, 5, 5)
    assert text_of(result).splitlines()[1:3] == [f"- Tokens (0; {expected.tokens} with subsections)",
                                                 f"  - Kinds (0; {expected.entries[1].total_tokens} with subsections)"]
    shallow = session.call("outline", {"document": "guide/tokens.md", "max_depth": 2}).structured_content
    assert [e["title"] for e in shallow["entries"]] == ["Tokens", "Kinds", "Rotation"]


def test_list_documents_and_status_say_what_is_indexed(session: McpSession, engine: PolarisIndex, project: Path) -> None:
    page = session.call("list_documents", {"collection": "default"}).structured_content
    assert [d["document"] for d in page["documents"]] == ["guide/sessions.md", "guide/tokens.md"]
    assert page["total"] == 2 and {d["on_disk"] for d in page["documents"]} == {"fresh"}
    assert page["documents"][0]["uri"] == "polaris://default/guide/sessions.md"
    session.call("search", {"query": QUERIES[1]})
    status = session.call("status").structured_content
    expected = engine.status()
    assert {k: status[k] for k in ("model_id", "documents", "chunks", "collections", "roots")} == {
        k: expected[k] for k in ("model_id", "documents", "chunks", "collections", "roots")}
    assert status["changes"]["default"]["stale"] is False and status["changes"]["default"]["files"] == 2
    server = status["server"]
    assert (server["read_only"], server["transport"], server["embedder_loaded"]) == (True, "stdio", True)
    assert server["model_sessions"] == 1  # one model session in the process, however many calls


def test_status_says_when_files_changed_on_disk(session: McpSession, project: Path) -> None:
    notes = project / "notes"
    (notes / "a.md").write_text(NOTES["a.md"] + "\nDeploys moved to Wednesdays.\n")
    (notes / "b.md").unlink()
    (notes / "c.md").write_text("# Notes C\n\nA third note, written after indexing.\n")
    try:
        result = session.call("status")
        changed = result.structured_content["changes"]["notes"]
        assert result.structured_content["stale"] is True and changed["stale"] is True
        assert (changed["changed"]["paths"], changed["missing"]["paths"], changed["new"]["paths"]) == (
            ["a.md"], ["b.md"], ["c.md"])
        assert result.structured_content["changes"]["default"]["stale"] is False
        assert f"update: polaris index {notes} --collection notes" in text_of(result)
        listed = session.call("list_documents", {"collection": "notes"}).structured_content["documents"]
        assert [(d["document"], d["on_disk"], d["stale"]) for d in listed] == [("a.md", "changed", True),
                                                                              ("b.md", "missing", True)]
        hit = session.call("search", {"query": "when do deploys happen", "collection": "notes", "k": 1})
        assert hit.structured_content["hits"][0]["on_disk"] == "changed"
        assert "its file is changed on disk since it was indexed" in text_of(hit)
    finally:
        (notes / "a.md").write_text(NOTES["a.md"])
        (notes / "b.md").write_text(NOTES["b.md"])
        (notes / "c.md").unlink()


# -- bad input: a tool error with the engine's message, and the session goes on --------------------
def test_bad_arguments_are_tool_errors_with_the_engines_message(session: McpSession, project: Path) -> None:
    def error(tool: str, args: dict) -> str:
        result = session.call(tool, args)
        assert result.is_error and result.structured_content is None
        return text_of(result)

    assert error("search", {"query": "x", "k": 0}) == f"k must be a whole number from 1 to {LIMITS['k_max']}, got 0."
    assert error("search", {"query": "x", "k": 21}) == f"k must be a whole number from 1 to {LIMITS['k_max']}, got 21."
    assert error("outline", {"document": "guide/tokens.md", "max_depth": LIMITS["outline_depth_max"] + 1}) == (
        f"max_depth must be a whole number from 1 to {LIMITS['outline_depth_max']}, got {LIMITS['outline_depth_max'] + 1}.")
    assert error("search", {"query": "x", "collection": "Default"}) == cli_error(
        project, "search", "x", "--collection", "Default")
    assert error("search", {"query": "x", "documents": ["sessions.md"]}) == cli_error(
        project, "search", "x", "--document", "sessions.md")
    assert error("search", {"query": "x" * (MAX_QUERY_CHARS + 1)}).startswith(
        f"the query is {MAX_QUERY_CHARS + 1:,} characters; at most {MAX_QUERY_CHARS:,} are accepted.")
    assert error("search", {"query": "x", "mode": "fuzzy"}) == "mode must be one of hybrid, vector, bm25, got 'fuzzy'."
    assert "Input should be a valid integer" in error("search", {"query": "x", "k": "many"})
    assert error("read_section", {"document": "guide/tokens.md", "heading_path": "Rotatoin"}).endswith(
        "Did you mean 'Tokens > Rotation'?")
    assert error("outline", {"document": "guide/sessions.md"}).startswith(
        "document 'guide/sessions.md' is in 2 collections ('blog', 'default')")
    good = session.call("search", {"query": QUERIES[0], "k": 1})
    assert not good.is_error and good.structured_content["hits"][0]["rank"] == 1


ARGUMENTS = {"search": "query, k, mode, collection, documents, section_tokens, explain, full",
             "read_section": "document, heading_path, node_id, collection, max_tokens, subsections",
             "outline": "document, collection, max_depth", "list_documents": "collection, prefix, limit, offset",
             "status": ""}


def test_unknown_arguments_are_refused_naming_the_known_ones(session: McpSession) -> None:
    """A misspelled argument is an error, not a search of the whole index (#34: `document` for `documents`,
    markdown-memory's `limit` for `k`); the schema says so too, for clients that check before sending."""
    tools = {t.name: t for t in session.run(lambda c: c.list_tools()).tools}
    assert {name: tool.input_schema.get("additionalProperties") for name, tool in tools.items()} == dict.fromkeys(
        TOOLS, False)

    def error(tool: str, args: dict) -> str:
        result = session.call(tool, args)
        assert result.is_error and result.structured_content is None, result
        return text_of(result)

    known = ARGUMENTS["search"]
    assert error("search", {"query": "x", "document": "nope.md"}) == (
        f"search has no argument 'document'. Did you mean 'documents'? Its arguments: {known}.")
    assert error("search", {"query": "x", "limit": 1}) == (
        f"search has no argument 'limit'. Did you mean 'k'? Its arguments: {known}.")
    assert error("search", {"query": "x", "k": 2, "colection": "default", "zzz": 1}) == (
        f"search has no arguments 'colection', 'zzz'. Did you mean 'collection'? Its arguments: {known}.")
    for tool, names in ARGUMENTS.items():
        assert error(tool, {"bogus": 1}) == (f"{tool} has no argument 'bogus'. "
                                             + (f"Its arguments: {names}." if names else "It takes no arguments."))
    assert not session.call("search", {"query": QUERIES[0], "k": 1}).is_error
    listed = session.call("search", {"query": QUERIES[0], "documents": '["guide/sessions.md"]'})  # as some clients send it
    assert {h["document"] for h in listed.structured_content["hits"]} == {"guide/sessions.md"}


@pytest.mark.parametrize("tool, args, wrong", [
    ("search", {"query": "x", "k": True}, "k: Input should be a valid integer, got true"),
    ("search", {"query": "x", "k": "3"}, "k: Input should be a valid integer, got \"3\""),
    ("search", {"query": "x", "k": 2.0}, "k: Input should be a valid integer, got 2.0"),
    ("search", {"query": "x", "explain": 1}, "explain: Input should be a valid boolean, got 1"),
    ("search", {"query": 7}, "query: Input should be a valid string, got 7"),
    ("search", {"query": "x", "documents": "guide/sessions.md"},
     "documents: Input should be a valid list, got \"guide/sessions.md\""),
    ("list_documents", {"offset": False}, "offset: Input should be a valid integer, got false"),
    ("outline", {"document": "guide/tokens.md", "max_depth": True}, "max_depth: Input should be a valid integer, got true"),
])
def test_argument_types_are_strict(session: McpSession, tool: str, args: dict, wrong: str) -> None:
    """`k: true` is not 1, nor "3" 3: each argument has its schema's type or the call is refused."""
    result = session.call(tool, args)
    assert result.is_error and text_of(result) == f"{tool}: {wrong}.", result


class RawStdio:
    """`polaris mcp` over stdio, written to and read from line by line, bytes as given."""

    def __init__(self, project: Path) -> None:
        self.proc = subprocess.Popen([POLARIS, "mcp"], cwd=project, env=environment(project), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stderr: list[bytes] = []
        self.readers = [threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True),  # type: ignore[union-attr]
                        threading.Thread(target=lambda: [self.stderr.append(x) for x in self.proc.stderr], daemon=True)]  # type: ignore[union-attr]
        for reader in self.readers:
            reader.start()

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60) -> dict:
        """The next message the server writes (a test waits at most ``timeout`` seconds, never forever)."""
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout}s; stderr: {b''.join(self.stderr)!r}") from None

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        for reader in self.readers:
            reader.join(30)


def request(id_: int, method: str, params: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()


def test_a_request_that_cannot_be_decoded_is_answered_over_stdio(project: Path) -> None:
    """A line the SDK cannot decode gets a JSON-RPC error (and a line on stderr), never silence (#34):
    a lone surrogate escape (what JavaScript's JSON.stringify writes for a string cut mid-emoji; the
    id is read back), a truncated line (no id to read: null), JSON that is no JSON-RPC message, bytes
    that are not UTF-8. The server goes on serving."""
    server = RawStdio(project)
    try:
        server.send(request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "raw", "version": "0"}}))
        assert server.answer(120)["id"] == 1
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        cut = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search",' \
              b' "arguments": {"query": "session \\ud83d"}}}'
        bad = [(cut, 2, -32700, "lone surrogate escape (\\ud83d)"),
               (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/li', None, -32700, "not valid JSON"),
               (b'\xff\xfe', None, -32700, "not valid JSON"),
               (b'{"id": 4, "method": "tools/list"}', 4, -32600, "not a JSON-RPC 2.0 message"),
               (b'[1, 2]', None, -32600, "not a JSON-RPC 2.0 message")]
        for line, id_, code, words in bad:
            server.send(line)
            answer = server.answer(30)
            assert answer == {"jsonrpc": "2.0", "id": id_, "error": answer["error"]}, (line, answer)
            assert answer["error"]["code"] == code and words in answer["error"]["message"], (line, answer)
        server.send(request(6, "tools/call", {"name": "search", "arguments": {"query": QUERIES[0], "k": 1}}))
        good = server.answer(120)
        assert good["id"] == 6 and good["result"]["structuredContent"]["hits"][0]["rank"] == 1, good
    finally:
        server.close()
    told = [x.decode() for x in server.stderr if b"could not decode" in x]
    assert len(told) == len(bad), server.stderr
    assert told[0].startswith("polaris: could not decode a request (id 2):")


# -- resources -----------------------------------------------------------------------------------
def test_each_document_is_a_resource(session: McpSession, engine: PolarisIndex) -> None:
    listed = session.run(lambda c: c.list_resources()).resources
    uris = {str(r.uri) for r in listed}
    assert {"polaris://default/guide/sessions.md", "polaris://blog/guide/sessions.md",
            "polaris://notes/a.md"} <= uris
    read = session.run(lambda c: c.read_resource("polaris://default/guide/sessions.md"))
    assert read.contents[0].text.strip() == SESSIONS.strip()
    assert read.contents[0].mime_type == "text/markdown"
    with pytest.raises(MCPError, match="no document 'guide/nope.md'"):
        session.run(lambda c: c.read_resource("polaris://default/guide/nope.md"))
    assert document_uri("my docs", "a b/c.md") == "polaris://my%20docs/a%20b/c.md"


# -- streamable HTTP -----------------------------------------------------------------------------
def test_two_clients_at_once_over_http_get_the_cli_answer(http_url: str, project: Path) -> None:
    assert http_url.startswith("http://127.0.0.1:")
    modern, legacy = McpSession(http_url), McpSession(http_url, mode="legacy")  # both protocol eras
    try:
        assert {t.name for t in legacy.run(lambda c: c.list_tools()).tools} == TOOLS
        jobs = [(s, q) for q in QUERIES for s in (modern, legacy)] * 2
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(lambda job: job[0].call("search", {"query": job[1], "k": 3, "full": True}), jobs))
        cli = {q: cli_search(project, q, "-k", "3", "--context", "section", "--context-tokens", "300") for q in QUERIES}
        for (_, query), result in zip(jobs, answers):  # every answer, each compared with the CLI's for its query
            assert_same_hits(result.structured_content["hits"], cli[query])
        bad = legacy.call("search", {"query": "x", "k": 0})
        assert bad.is_error and not modern.call("read_section", {"document": "guide/tokens.md",
                                                                 "heading_path": "Rotation"}).is_error
        server = modern.call("status").structured_content["server"]
        assert (server["transport"], server["model_sessions"]) == ("streamable-http", 1)
    finally:
        modern.close()
        legacy.close()


def test_http_refuses_a_request_for_another_host(http_url: str) -> None:
    """DNS-rebinding protection on loopback: a page elsewhere cannot reach the server by name."""
    response = httpx.post(http_url, headers={"Host": "evil.example", "Content-Type": "application/json",
                                             "Accept": "application/json, text/event-stream"},
                          content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    assert response.status_code in (400, 403, 421)


def initialize(url: str, **headers: str) -> httpx.Response:
    """An initialize request posted to ``url`` with these headers (Host and Origin among them)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}
    return httpx.post(url, content=json.dumps(body), timeout=60, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})


@pytest.mark.parametrize("bind, allowed", [("127.0.0.2", ()), ("127.0.0.3", ("docs.example", "10.0.0.7"))])
def test_every_bind_checks_host_and_origin(project: Path, bind: str, allowed: tuple[str, ...]) -> None:
    """DNS-rebinding protection on every address, not only 127.0.0.1 (#34): a request naming another
    Host (a rebound name) or sent from a page of another Origin is refused; loopback names, the bound
    address and the hosts named with --allow-host are served."""
    with served(project, *(f for h in allowed for f in ("--allow-host", h)), address=f"{bind}:0") as (url, lines):
        port = urlsplit(url).port
        assert url == f"http://{bind}:{port}/mcp"
        for host in ("evil.example", f"evil.example:{port}", f"{bind}.evil.example:{port}"):
            assert initialize(url, Host=host).status_code == 421, host
        for origin in ("http://evil.example", f"http://evil.example:{port}", "null"):
            assert initialize(url, Host=f"{bind}:{port}", Origin=origin).status_code == 403, origin
        for host in (f"{bind}:{port}", f"127.0.0.1:{port}", f"localhost:{port}", *(f"{h}:{port}" for h in allowed)):
            name = host.rpartition(":")[0]
            for origin in (None, f"http://{host}", f"https://{name}"):
                answer = initialize(url, Host=host, **({"Origin": origin} if origin else {}))
                assert answer.status_code == 200 and answer.headers["mcp-session-id"], (host, origin, answer.text)
        text = "".join(lines)
        assert "reachable from other machines" not in text  # 127.0.0.0/8 is this machine's loopback
        assert "cannot" not in text and "Traceback" not in text


def test_binding_beyond_loopback_needs_the_hosts_named(project: Path) -> None:
    """Without --allow-host, a non-loopback bind is refused before anything listens. (192.0.2.1 is a
    documentation address no interface here has: the old code failed to bind it, and the test never
    opens a port beyond loopback.)"""
    for args in (["--http", "192.0.2.1:8765"], ["--http", "192.0.2.1:8765", "--collection", "default"]):
        assert cli_error(project, "mcp", *args) == (
            "--http 192.0.2.1:8765 is reachable from other machines: name the hosts its clients will use"
            " with --allow-host HOST (e.g. --allow-host docs.example --allow-host 192.0.2.1); requests naming"
            " any other Host or Origin are refused (DNS-rebinding protection). To keep it on this machine,"
            " bind 127.0.0.1.")
    assert cli_error(project, "mcp", "--allow-host", "docs.example") == (
        "--allow-host names the hosts an HTTP server answers for: use it with --http HOST:PORT.")
    assert cli_error(project, "mcp", "--http", "8765", "--allow-host", "http://docs.example/") == (
        "--allow-host takes a host name or address as clients write it in the URL (docs.example,"
        " 192.0.2.1, [::1], docs.example:8443), got 'http://docs.example/'.")


def test_the_hosts_each_bind_allows_and_what_it_says() -> None:
    """The settings handed to the SDK, and the notice on stderr, for binds a test does not open
    (0.0.0.0 and :: listen beyond this machine)."""
    from llama_index_polaris.mcp_server import http_security

    loop_hosts = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
    settings, notice = http_security("0.0.0.0", ["docs.example", "192.168.1.5", "fe80::1", "docs.example:8443"])
    assert settings.enable_dns_rebinding_protection is True
    assert settings.allowed_hosts == [*loop_hosts, "docs.example", "docs.example:*", "192.168.1.5", "192.168.1.5:*",
                                      "[fe80::1]", "[fe80::1]:*", "docs.example:8443"]
    assert {"http://docs.example", "https://docs.example:*", "http://[fe80::1]:*", "https://docs.example:8443",
            "http://localhost:*"} <= set(settings.allowed_origins)
    assert notice == ("listening on 0.0.0.0, reachable from other machines, without authentication; only requests"
                      " for 127.0.0.1, localhost, [::1], docs.example, 192.168.1.5, [fe80::1], docs.example:8443"
                      " (Host, and Origin when sent) are served. Use 127.0.0.1 to keep it on this machine.")
    settings, notice = http_security("::", ["docs.example"])
    assert notice.startswith("listening on [::], reachable from other machines")
    assert settings.allowed_hosts == [*loop_hosts, "docs.example", "docs.example:*"]
    for loopback in ("127.0.0.1", "localhost", "::1", "127.0.0.2", "127.255.0.9"):
        settings, notice = http_security(loopback, [])
        assert notice is None and settings.enable_dns_rebinding_protection is True
        shown = f"[{loopback}]" if ":" in loopback else loopback
        assert settings.allowed_hosts[:6] == loop_hosts and f"{shown}:*" in settings.allowed_hosts
    for beyond in ("0.0.0.0", "::", "192.168.1.5", "myhost.local"):
        with pytest.raises(PolarisError, match="--allow-host HOST"):
            http_security(beyond, [])


def test_an_address_is_loopback_unless_one_is_named() -> None:
    assert parse_address("8765") == ("127.0.0.1", 8765)
    assert parse_address("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    with pytest.raises(Exception, match="--http takes PORT or HOST:PORT"):
        parse_address("localhost:http")


# -- writes, only when allowed -------------------------------------------------------------------
def test_reindex_is_offered_only_with_allow_writes(tmp_path: Path, backend_target: str) -> None:
    for name, text in FILES["docs"].items():
        (tmp_path / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / name).write_text(text)
    (tmp_path / "polaris.toml").write_text(project_toml(backend_target, MODEL))
    with PolarisIndex(backend_target, config=cfg(tmp_path)) as index:
        index.index_paths([tmp_path / "docs"])
    (tmp_path / "docs/guide/sessions.md").write_text(SESSIONS + "\n## Sharing\n\nSessions are never shared between"
                                                     " two devices, not even a phone and a laptop.\n")
    writer = McpSession(stdio(tmp_path, "--allow-writes"))
    try:
        assert {t.name for t in writer.run(lambda c: c.list_tools()).tools} == TOOLS | {"reindex"}
        assert writer.call("status").structured_content["changes"]["default"]["changed"]["paths"] == [
            "guide/sessions.md"]
        done = writer.call("reindex", {})
        assert not done.is_error, text_of(done)
        assert (done.structured_content["report"]["updated"], done.structured_content["report"]["unchanged"]) == (1, 1)
        assert writer.call("status").structured_content["stale"] is False
        hit = writer.call("search", {"query": "shared between two devices", "k": 1}).structured_content["hits"][0]
        assert hit["heading_path"] == "Sessions > Sharing"
        unknown = writer.call("reindex", {"collection": "Default"})  # named as every door names a collection
        assert unknown.is_error and text_of(unknown) == writer.call("search", {"query": "x", "collection": "Default"}
                                                                    ).content[0].text
        assert "Did you mean 'default'?" in text_of(unknown)
    finally:
        writer.close()


def set_root(target: str, root: str) -> None:
    """The default collection's recorded root, written as a file from elsewhere could hold it."""
    if "://" in target:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("UPDATE collections SET root = %s WHERE name = 'default'", (root,))
        return
    from llama_index_polaris.engine.sqlite_module import sqlite_module

    conn = sqlite_module().connect(target)
    conn.execute("UPDATE collections SET root = ? WHERE name = 'default'", (root,))
    conn.commit()
    conn.close()


def test_reindex_walks_only_a_folder_this_machine_named(tmp_path: Path, backend_target: str) -> None:
    """An index file records its collections' roots, and a file from elsewhere could name any folder
    (``/``, a home folder): a client's ``reindex`` walks a root only under the server's working folder
    or the index file's folder (resolved: a symlink inside cannot lead out). Elsewhere it is refused,
    saying what a person runs instead, and nothing is read or written."""
    server, elsewhere = tmp_path / "server", tmp_path / "elsewhere"
    for name, text in FILES["docs"].items():
        (elsewhere / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (elsewhere / "docs" / name).write_text(text)
    server.mkdir()
    target = backend_target if "://" in backend_target else str(server / "polaris.db")
    (server / "polaris.toml").write_text(project_toml(target, MODEL))
    with PolarisIndex(target, config=cfg(server)) as index:
        index.index_paths([elsewhere / "docs"])
    (elsewhere / "docs/guide/sessions.md").write_text(SESSIONS + "\n## Sharing\n\nNever shared between devices.\n")
    writer = McpSession(stdio(server, "--allow-writes"))
    try:
        refused = writer.call("reindex", {})
        assert refused.is_error and "outside this server's working folder" in text_of(refused), text_of(refused)
        assert f"polaris index {elsewhere / 'docs'} --collection default" in text_of(refused)
        (elsewhere / "docs/secret-plans.md").write_text("# Plans\n")
        status = writer.call("status")  # nor does status read or list the files of a folder it may not walk
        changes = status.structured_content["changes"]["default"]
        assert changes["checked"] is False and changes["files"] == 2 and changes["root_exists"] is None, changes
        assert changes["changed"]["count"] == changes["new"]["count"] == 0
        assert "not compared with the disk" in text_of(status) and "secret-plans" not in text_of(status)
        hit = writer.call("search", {"query": "how long does a session last", "k": 1}).structured_content["hits"][0]
        assert hit["document"] == "guide/sessions.md" and hit["on_disk"] is None  # its file is not read either
    finally:
        writer.close()
    (server / "link").symlink_to(elsewhere)  # a root recorded through a symlink in the working folder
    set_root(target, str(server / "link" / "docs"))
    writer = McpSession(stdio(server, "--allow-writes"))
    try:
        refused = writer.call("reindex", {})
        assert refused.is_error and "outside this server's working folder" in text_of(refused), text_of(refused)
    finally:
        writer.close()
    set_root(target, str(elsewhere / "docs"))
    from mcp.client.stdio import StdioServerParameters

    at_root = StdioServerParameters(command=POLARIS, args=["mcp", "--allow-writes", "--db", target], cwd="/",
                                    env={**environment(server), "XDG_CONFIG_HOME": str(server / ".xdg")})
    started_at_root = McpSession(at_root)  # a client may start the server in /: that is no folder anybody named
    try:
        refused = started_at_root.call("reindex", {})
        assert refused.is_error and "outside this server's working folder" in text_of(refused), text_of(refused)
    finally:
        started_at_root.close()
    moved = McpSession(stdio(elsewhere, "--allow-writes", "--db", target))  # a server started where the files are
    try:
        changes = moved.call("status").structured_content["changes"]["default"]
        assert changes["checked"] is True and changes["changed"]["paths"] == ["guide/sessions.md"]  # nothing was indexed
        assert changes["new"]["paths"] == ["secret-plans.md"]
        hit = moved.call("search", {"query": "how long does a session last", "k": 1}).structured_content["hits"][0]
        assert hit["document"] == "guide/sessions.md" and hit["on_disk"] == "changed"
        done = moved.call("reindex", {})
        assert not done.is_error and done.structured_content["report"]["updated"] == 1, text_of(done)
    finally:
        moved.close()


def test_a_document_path_that_leaves_its_root_is_not_read(tmp_path: Path, backend_target: str) -> None:
    """A file from elsewhere can record a document's path as ``../../secret.md``: freshness (status,
    hits, list_documents) reads no file for it, in the engine and the MCP server alike, rather than
    telling a client whether a file outside the root exists and holds a given text."""
    server = tmp_path / "server"
    for name, text in FILES["docs"].items():
        (server / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (server / "docs" / name).write_text(text)
    target = backend_target if "://" in backend_target else str(server / "polaris.db")
    (server / "polaris.toml").write_text(project_toml(target, MODEL))
    with PolarisIndex(target, config=cfg(server)) as index:
        index.index_paths([server / "docs"])
    (tmp_path / "secret.md").write_text(SESSIONS)  # outside the root, the text the index holds
    escaped = "../../secret.md"
    if "://" in target:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("UPDATE documents SET path = %s WHERE path = 'guide/sessions.md'", (escaped,))
    else:
        from llama_index_polaris.engine.sqlite_module import sqlite_module

        conn = sqlite_module().connect(target)
        conn.execute("UPDATE documents SET path = ? WHERE path = 'guide/sessions.md'", (escaped,))
        conn.commit()
        conn.close()
    with PolarisIndex(target, config=cfg(server), readonly=True) as index:
        record = next(d for d in index.store.documents() if d.path == escaped)
        assert index.freshness.document(record) is None
    reader = McpSession(stdio(server))
    try:
        listed = reader.call("list_documents", {}).structured_content["documents"]
        assert [d["on_disk"] for d in listed if d["document"] == escaped] == [None]
        hit = reader.call("search", {"query": "how long does a session last", "k": 1}).structured_content["hits"][0]
        assert hit["document"] == escaped and hit["on_disk"] is None
    finally:
        reader.close()


def test_an_index_that_is_not_there_yet_is_an_error_of_each_call_until_it_is(tmp_path: Path,
                                                                            backend_target: str) -> None:
    from llama_index_polaris.engine.postgres.connect import shown

    later = str(tmp_path / "later.db") if "://" not in backend_target else backend_target  # a file, an empty database
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/a.md").write_text(NOTES["a.md"])
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    early = McpSession(stdio(tmp_path, "--db", later))
    try:
        first = early.call("status")
        if "://" in later:  # a database is there, empty: what an empty file answers, naming the URI to build into
            expected = (f"{shown(later)} is not a Polaris index: nothing is indexed there (no Polaris tables in schema"
                        f" public). Build one with `polaris index PATH --db {shown(later)}` first.")
        else:
            expected = f"{later}: no such index. Build one with `polaris index PATH`."
        assert first.is_error and text_of(first) == expected
        with PolarisIndex(later, config=cfg(tmp_path)) as index:
            index.index_paths([tmp_path / "docs"])
        again = early.call("search", {"query": "when do deploys happen", "k": 1})
        assert not again.is_error and again.structured_content["hits"][0]["document"] == "a.md"
    finally:
        early.close()


# -- the optional extra ---------------------------------------------------------------------------
NO_SDK = """
import sys
class NotInstalled:  # the SDK as absent as if it had never been installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mcp", "mcp_types"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
from llama_index_polaris.cli import main
sys.exit(main(["mcp"]))
"""


def test_without_the_extra_it_says_what_to_install(project: Path) -> None:
    run = subprocess.run([sys.executable, "-c", NO_SDK], cwd=project, capture_output=True, text=True,
                         env=environment(project), timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip() == ("polaris: error: `polaris mcp` needs the MCP Python SDK, an optional extra:"
                                  " in the clone of Polaris, pip install -e '.[mcp]'.")


def test_the_sdk_is_an_extra_the_tests_install_and_the_base_install_does_not() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, as the project's own config reader uses
        import tomli as tomllib

    from polaris_testing import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    named = lambda reqs: [r for r in reqs if r.split(">")[0].split("=")[0].split("<")[0].strip() == "mcp"]  # noqa: E731
    assert named(project["dependencies"]) == []
    assert named(project["optional-dependencies"]["mcp"]) == named(project["optional-dependencies"]["test"]) != []


def test_the_cli_imports_the_sdk_only_for_polaris_mcp(run_python) -> None:
    code = ("import sys; import llama_index_polaris.cli, llama_index_polaris.engine.index;"
            " print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


IMPORT_CHECK = r'''
import ast, importlib, pathlib, sys, threading
import llama_index_polaris.engine as engine
from llama_index_polaris.engine.config import PolarisConfig
from llama_index_polaris.mcp_server import Door
package = pathlib.Path(engine.__file__).parent

def lazy(path, base):
    """Modules a file imports inside its functions (relative to ``base``, a package name)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.level and inner.module:
                    parts = base.split(".")[: len(base.split(".")) - inner.level + 1]
                    found.add(".".join(parts + [inner.module]))
    return found

eager_packages = {"llama_index_polaris.engine." + ".".join(p.parent.relative_to(package).parts)
                  for p in package.rglob("__init__.py")
                  if p.parent != package and any(l.startswith("from .") for l in p.read_text().splitlines())}
eager_packages -= {"llama_index_polaris.engine.postgres"}  # a database URI's; this Door names a file
needed = (lazy(package.parent / "mcp_server.py", "llama_index_polaris")
          | lazy(package / "index.py", "llama_index_polaris.engine") | eager_packages)
needed = {m for m in needed if m.startswith("llama_index_polaris.engine") and ".postgres" not in m}
Door(PolarisConfig(db_path=sys.argv[1]))
assert threading.active_count() == 1, "the Door started a thread before importing the engine"
missing = sorted(m for m in needed if m not in sys.modules)
half = sorted(m for m in needed if m in sys.modules and getattr(sys.modules[m].__spec__, "_initializing", False))
print(missing, half, len(needed))
assert not missing and not half and len(needed) > 10
'''


def test_the_server_imports_the_engine_before_its_threads_do(tmp_path: Path) -> None:
    """The warm-up thread and the tools' worker threads import nothing a first call needs: a
    package imported by two threads at once made `status` fail once ("partially initialized
    module 'engine.embed.embedder'"). Every module the server, or an index it opens, imports
    on first use is loaded, whole, by the Door's own thread, before any other thread starts."""
    run = subprocess.run([sys.executable, "-c", IMPORT_CHECK, str(tmp_path / "polaris.db")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
