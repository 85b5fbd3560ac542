"""A section reads as the file's own text, byte for byte (#34 item 8), on both backends.

Polaris stores each document's indexed text (``document_texts``: the file decoded, its BOM
dropped, line ends as written, in NFC) and reads a section as the slice of it that the
section's chunks cover. The property: for generated Markdown (headings, repeated headings,
fences longer than a chunk, lists, front matter, CRLF, a BOM, NFD letters, astral characters)
cut into small overlapping chunks, every section's text, read through the engine, the MCP
``read_section`` tool and a search hit, is the file's slice at the offsets the section reports.
Chunks stitched back together (what was read before) repeat prose and re-fence code.

Also: an index made before texts were stored answers from its chunks, says so, and the next
`polaris index` stores the texts without re-embedding; ``polaris copy`` carries the texts.
"""

from __future__ import annotations

import json
import subprocess
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.ingest.copy import copy_index
from llama_index_polaris.engine.storage.documents import NOT_EXACT
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search.context import runs, section_text, stitch
from llama_index_polaris.engine.ingest.sources import decode_source
from llama_index_polaris.engine.text import nfc
from mcp_testing import POLARIS, McpSession, environment, stdio
from polaris_testing import BACKENDS, module_target, project_toml

MODEL = "all-minilm-l6-v2"
SMALL = "max_chunk_tokens = 48\nchunk_overlap_chars = 60\nmin_chunk_chars = 10\n"  # many overlapping chunks
BIG = 100_000  # a budget no generated section reaches: the whole text is compared

WORDS = ["alpha", "beta", "gamma", "delta", "key", "rotation", "tokens", "café", "naïve", "日本語", "🙂", "x"]
word = st.sampled_from(WORDS)
sentence = st.lists(word, min_size=3, max_size=14).map(lambda ws: " ".join(ws).capitalize() + ".")
paragraph = st.lists(sentence, min_size=1, max_size=6).map(" ".join)
code_line = st.lists(st.sampled_from(["let", "x", "=", "1;", "fn()", "{", "}", "// note", "ünï"]),
                     min_size=1, max_size=8).map(" ".join)
fence = st.tuples(st.sampled_from(["```", "~~~", "````"]), st.sampled_from(["", "rust", "py"]),
                  st.lists(code_line, min_size=1, max_size=30)).map(
    lambda t: f"{t[0]}{t[1]}\n" + "\n".join(t[2]) + f"\n{t[0]}")
bullets = st.lists(sentence, min_size=1, max_size=6).map(lambda xs: "\n".join(f"- {x}" for x in xs))
block = st.one_of(paragraph, paragraph, fence, bullets)
title = st.sampled_from(["Examples", "Usage", "Go style guide", "Notes", "Rules", "Überblick"])
heading = st.tuples(st.integers(1, 3), title).map(lambda t: "#" * t[0] + " " + t[1])
part = st.one_of(heading, block, block)


@st.composite
def markdown_files(draw: st.DrawFn) -> bytes:
    """The bytes of a Markdown file: parts, maybe front matter, CRLF, a BOM, NFD spelling."""
    parts = draw(st.lists(part, min_size=1, max_size=14))
    text = "\n\n".join(parts) + draw(st.sampled_from(["\n", "", "\n\n\n"]))
    if draw(st.booleans()):
        text = "---\ntitle: Generated page\ntags: [a, b]\n---\n" + text
    if draw(st.booleans()):
        text = unicodedata.normalize("NFD", text)
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    data = text.encode("utf-8")
    return (b"\xef\xbb\xbf" + data) if draw(st.booleans()) else data


def indexed_text(data: bytes) -> str:
    """What a section's text is a slice of: the file decoded (BOM dropped, line ends kept), in NFC."""
    return nfc(decode_source(data))


# -- the pure rules ---------------------------------------------------------------------------
def test_runs_join_consecutive_chunks_and_keep_apart_the_others() -> None:
    assert runs([(0, 0, 10), (1, 8, 20), (2, 20, 30), (5, 50, 60)]) == [(0, 30), (50, 60)]
    assert runs([(0, 0, 10), (1, None, None)]) is None
    assert section_text(["ab", "cd"], []) == ("ab\n\ncd", True)
    assert section_text([None], [("xy", 0, 2)]) == ("xy", False)


def test_stitching_chunks_is_not_the_file() -> None:
    """Why the text is stored: a code block cut in two is re-fenced in each chunk, so stitched
    chunks hold fence lines the file does not have there."""
    source = "```\na\nb\n```"
    chunks = [("```\na\n```", 0, 6), ("```\nb\n```", 6, 11)]
    assert stitch(chunks) != source


# -- the property, on both backends --------------------------------------------------------------
@pytest.fixture(scope="module", params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("section-text")
    (root / "docs").mkdir()
    target = str(root / "polaris.db") if request.param == "sqlite" else module_target(request, tmp_path_factory)
    (root / "polaris.toml").write_text(project_toml(target, MODEL) + SMALL)
    with PolarisIndex(target, config=load_config(root, use_user_config=False)) as index:
        yield root, index


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=markdown_files())
def test_every_section_reads_as_the_files_own_slice(project, data: bytes) -> None:
    root, index = project
    (root / "docs" / "page.md").write_bytes(data)
    report = index.index_paths([root / "docs"])
    assert report.failed == []
    source = indexed_text(data)
    outline = index.outline("page.md")
    read = {}
    for entry in outline.entries:
        s = read[entry.heading_path] = index.read_section("page.md", entry.heading_path, max_tokens=BIG)
        assert s.exact and not s.truncated
        pieces = [source[a:b] for a, b in _runs_of(index, s.node_ids)]
        assert s.text == "\n\n".join(pieces)
        if len(pieces) == 1:
            assert s.text == source[s.start_char:s.end_char]
        assert s.tokens == index.count_tokens(s.text)
        assert entry.tokens == (s.tokens if entry.chunks else 0)  # the outline counts the same text
    for hit in index.search("key rotation alpha", top_k=20, unit="section", context_tokens=BIG):
        if hit.document == "page.md":  # a hit's section is the section read, the same bytes
            assert (hit.section_text, hit.section_exact) == (read[hit.heading_path].text, True)
    _, whole, _, _ = index.document_text("page.md", max_tokens=BIG)
    chunks = index.store.get_chunks(document_id="default:page.md")
    assert whole == source[min(c.start_char for c in chunks):max(c.end_char for c in chunks)]


def _chunks(index: PolarisIndex, node_ids: list[str], doc: str = "default:page.md"):
    by_id = {c.node_id: c for c in index.store.get_chunks(document_id=doc)}
    return sorted((by_id[n] for n in node_ids), key=lambda c: c.ordinal)


def _runs_of(index: PolarisIndex, node_ids: list[str]) -> list[tuple[int, int]]:
    return runs([(c.ordinal, c.start_char, c.end_char) for c in _chunks(index, node_ids)])


def _stitched(index: PolarisIndex, node_ids: list[str], doc: str = "default:page.md") -> str:
    """What a section read before texts were stored: its chunks stitched back together."""
    return stitch([(c.text, c.start_char, c.end_char) for c in _chunks(index, node_ids, doc)])


RULES = (  # the shape of the public page whose "Examples" read a sentence twice
    "# Rules\n\n## Examples\n\n"
    + " ".join(f"Rule {i} says that a key is rotated before it expires, and the old key stays valid for a while."
               for i in range(12))
    + "\n\n```toml\n" + "\n".join(f'key_{i} = "value number {i} of the example"' for i in range(40)) + "\n```\n"
    + "\n## Notes\n\nNothing else.\n"
)


def test_the_doors_give_the_same_bytes(project) -> None:
    """The engine, a search hit's section (Python and `polaris search --json --context section`)
    and the MCP ``read_section`` tool of a real `polaris mcp` give the same text, the file's
    slice, where stitching the chunks would not."""
    root, index = project
    (root / "docs" / "page.md").write_text(RULES)
    index.index_paths([root / "docs"])
    s = index.read_section("page.md", "Rules > Examples", max_tokens=BIG)
    assert s.exact and s.text == RULES[s.start_char:s.end_char]
    assert s.text != _stitched(index, s.node_ids)  # what was read before: not the file
    query = "which key is rotated before it expires"
    hits = index.search(query, top_k=5, unit="section", context_tokens=BIG)
    hit = next(h for h in hits if h.heading_path == "Rules > Examples")
    assert (hit.section_text, hit.section_exact) == (s.text, True)
    out = subprocess.run([POLARIS, "search", query, "--json", "--context", "section", "--context-tokens",
                          str(BIG)], cwd=root, env=environment(root), capture_output=True, text=True, check=True)
    cli = next(h for h in json.loads(out.stdout) if h["heading_path"] == "Rules > Examples")
    assert (cli["section_text"], cli["section_exact"]) == (s.text, True)
    session = McpSession(stdio(root))
    try:
        answer = session.call("read_section", {"document": "page.md", "heading_path": "Rules > Examples",
                                               "max_tokens": 8000}).structured_content
    finally:
        session.close()
    assert (answer["text"], answer["exact"]) == (s.text, True)


# -- an index made before texts were stored, nodes, copies ----------------------------------------
PAGES = {"rules.md": RULES, "guide.md": "# Guide\n\n## Go style guide\n\n" + RULES.split("## Examples\n\n")[1]}


def _build(root: Path, target: str) -> PolarisIndex:
    (root / "docs").mkdir(exist_ok=True)
    for name, text in PAGES.items():
        (root / "docs" / name).write_text(text)
    (root / "polaris.toml").write_text(project_toml(target, MODEL) + SMALL)
    index = PolarisIndex(target, config=load_config(root, use_user_config=False))
    index.index_paths([root / "docs"])
    return index


def _forget_texts(target: str) -> None:
    """Make ``target`` what Polaris before schema 10 (SQLite) or 8 (PostgreSQL) wrote: no stored texts."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("DROP TABLE document_texts")
            conn.execute("UPDATE polaris_meta SET value = '7' WHERE key = 'schema_version'")
        return
    import sqlite3

    conn = sqlite3.connect(target)
    conn.execute("DROP TABLE document_texts")
    conn.execute("PRAGMA user_version = 9")
    conn.commit()
    conn.close()


def test_an_index_from_before_says_its_sections_are_rebuilt_until_the_next_run(tmp_path: Path, backend_target: str) -> None:
    """Opening migrates it (an empty ``document_texts``); its sections come from the chunks, marked
    not exact, in every door; the next run stores each unchanged file's text, embedding nothing."""
    target = str(tmp_path / "polaris.db") if not backend_target.startswith("postgresql://") else backend_target
    _build(tmp_path, target).close()
    _forget_texts(target)
    with PolarisIndex(target, config=load_config(tmp_path, use_user_config=False)) as index:
        old = index.read_section("rules.md", "Rules > Examples", max_tokens=BIG)
        assert not old.exact and old.text == _stitched(index, old.node_ids, "default:rules.md")
        hit = index.search("which key is rotated", top_k=3, unit="section", context_tokens=BIG)[0]
        assert hit.section_exact is False
        assert index.status()["documents_without_text"] == 2
        said = subprocess.run([POLARIS, "status"], cwd=tmp_path, env=environment(tmp_path), capture_output=True,
                              text=True, check=True).stdout
        assert "2 documents have no stored text, so their sections are rebuilt from chunks" in said
        report = index.index_paths([tmp_path / "docs"])
        assert (report.texts_stored, report.updated, report.chunks_embedded) == (2, 0, 0)
        assert "the text of 2 unchanged documents stored" in report.summary()
        new = index.read_section("rules.md", "Rules > Examples", max_tokens=BIG)
        assert new.exact and new.text == RULES[new.start_char:new.end_char] != old.text
        assert index.index_paths([tmp_path / "docs"]).texts_stored == 0
        assert index.status()["documents_without_text"] == 0
    from llama_index_polaris.mcp_server import _warnings

    assert _warnings("completed", None, None, False) == [f"   ! {NOT_EXACT}"]


def test_nodes_written_by_another_door_drop_the_stored_text(tmp_path: Path, backend_target: str) -> None:
    """Chunks given as LlamaIndex nodes point into a text Polaris was not given: the document's
    stored text goes, and its sections say they are rebuilt (never a slice of the wrong text)."""
    target = str(tmp_path / "polaris.db") if not backend_target.startswith("postgresql://") else backend_target
    with _build(tmp_path, target) as index:
        doc = index.store.get_document("default:rules.md")
        assert doc.text_stored
        chunks = index.store.get_chunks(document_id=doc.id, with_embedding=True)
        index.store.upsert_chunks(doc, chunks[:1], [chunks[0].embedding])
        assert not index.store.get_document(doc.id).text_stored
        assert not index.read_section("rules.md", "Rules > Examples", max_tokens=BIG).exact


def test_polaris_copy_carries_the_texts_both_ways(tmp_path: Path, pg_uri: str) -> None:
    with _build(tmp_path, str(tmp_path / "polaris.db")) as index:
        want = index.read_section("guide.md", "Guide > Go style guide", max_tokens=BIG)
    assert want.exact
    copy_index(tmp_path / "polaris.db", pg_uri)
    copy_index(pg_uri, tmp_path / "back.db")
    for target in (pg_uri, str(tmp_path / "back.db")):
        with PolarisIndex(target, config=load_config(tmp_path, use_user_config=False), readonly=True) as copied:
            got = copied.read_section("guide.md", "Guide > Go style guide", max_tokens=BIG)
            assert (got.text, got.exact) == (want.text, True)


def test_the_benchmark_counts_sections_that_were_not_the_file(tmp_path: Path) -> None:
    """benchmarks/section_text.py, tiny: an index without texts reads re-fenced or repeated text
    (before), the same index after `polaris index` stored the texts reads the file (after)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("section_text", Path(__file__).resolve().parents[1]
                                                  / "benchmarks" / "section_text.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _build(tmp_path, str(tmp_path / "polaris.db")).close()
    (tmp_path / "scratch").mkdir()
    r = bench.measure(tmp_path / "polaris.db", tmp_path / "docs", tmp_path / "scratch",
                      load_config(tmp_path, use_user_config=False))
    assert r["before"]["sections"] == r["after"]["sections"] >= 4
    assert r["before"]["mismatch"] >= 2 and r["before"]["exact"] == 0
    assert (r["after"]["mismatch"], r["after"]["exact"], r["texts_stored"], r["chunks_embedded"]) == (
        0, r["after"]["sections"], 2, 0)
    assert r["size_after"] > r["size_before"]
    assert "| 0 |" in bench.render({"tiny": r})
    stitched = bench.stitched_counts(tmp_path / "docs")  # no index: the chunker alone (default settings)
    assert stitched["sections"] >= 2 and stitched["mismatch"] == stitched["fences"] >= 1
    assert bench.render_stitched({"tiny": stitched}).splitlines()[-1].startswith("| all |")
