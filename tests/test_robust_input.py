"""Nothing a user or a file can send breaks, leaks or silently loses the index (#24).

Each test puts a hostile input on disk next to ordinary files, indexes the folder through
the doors (`polaris index`, the engine, LlamaIndex with PolarisNodeParser), and checks
what was stored (documents, chunks), that it is searchable, that the run said what it
skipped or cut, and that the other files of the same run were indexed. Real files in
tmp_path, the bundled ONNX model, and every test on both backends: a real polaris.db (sqlite-vec)
and a real Postgres database (``backend_target``); the Datasette page reads the file alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llama_index.core import Document, SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.schema import MetadataMode

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import new_database

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
ORDINARY = "# Deploys\n\nDeploys go out from the main branch after the checks pass.\n"


def config():
    return load_config(use_user_config=False, model_id=MODEL)


@pytest.fixture(scope="module")
def embed() -> PolarisEmbedding:
    return PolarisEmbedding(model_id=MODEL, config=config())


def polaris(*args: str | bytes, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    (cwd / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    proc = subprocess.run([POLARIS, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg")})
    assert not check or proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def db(backend_target: str) -> str:
    """This test's index: a polaris.db in tmp_path, or a fresh Postgres database."""
    return backend_target


@pytest.fixture
def second_db(request: pytest.FixtureRequest, db: str, tmp_path: Path) -> str:
    """Another empty index on the same backend (the LlamaIndex door's, beside the CLI's)."""
    if db.startswith("postgres"):
        return new_database(request.getfixturevalue("pg_server"), "polaris_li")
    return str(tmp_path / "li.db")


def is_file(db: str) -> bool:
    return not db.startswith("postgres")


def paths_of(index: PolarisIndex) -> list[str]:
    return sorted(d.path for d in index.store.documents())


def top_document(index: PolarisIndex, query: str, **kw) -> str:
    return index.search(query, top_k=1, **kw)[0].document


def llamaindex_build(db: Path, folder: Path, embed: PolarisEmbedding, **parser_kw) -> PolarisVectorStore:
    """The docs/llamaindex.md recipe: SimpleDirectoryReader + PolarisNodeParser into a PolarisVectorStore."""
    store = PolarisVectorStore(db, embed_model=embed, config=config())
    VectorStoreIndex.from_documents(
        SimpleDirectoryReader(str(folder), recursive=True).load_data(),
        storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed,
        transformations=[PolarisNodeParser(config=config(), embed_model=embed, **parser_kw)],
    )
    return store


def handbook(root: Path) -> Path:
    folder = root / "handbook"
    (folder / "auth").mkdir(parents=True)
    (folder / "auth" / "tokens.md").write_text("# Tokens\n\nAccess tokens expire after fifteen minutes.\n")
    (folder / "deploy.md").write_text(ORDINARY)
    (root / "other").mkdir()
    (root / "other" / "notes.md").write_text("# Notes\n\nThe backup runs nightly at two.\n")
    return folder


# --- 2. a path run never removes documents it did not put there ---------------------------------


def test_a_path_run_refuses_a_sibling_of_the_root_the_llamaindex_door_recorded(tmp_path, db, embed) -> None:
    folder = handbook(tmp_path)
    llamaindex_build(db, folder, embed, root_dir=str(folder)).close()
    with PolarisIndex(db, config=config()) as index:
        assert index.store.collection_root("default") == str(folder)  # the parser's root_dir, recorded
        with pytest.raises(InputError, match="outside collection 'default'"):
            index.index_paths([tmp_path / "other"])
        assert paths_of(index) == ["auth/tokens.md", "deploy.md"] and index.store.counts()["chunks"] == 2
        assert top_document(index, "how long do access tokens last") == "auth/tokens.md"
        report = index.index_paths([folder])  # the same folder: found again by path, nothing removed
        assert (report.added, report.removed, report.chunks_embedded) == (0, 0, 0)
        assert paths_of(index) == ["auth/tokens.md", "deploy.md"]
        report = index.index_paths([tmp_path])  # a parent widens the root: re-keyed, nothing lost
        assert report.root_change == "widened" and report.removed == 0 and report.added == 1
        assert paths_of(index) == ["handbook/auth/tokens.md", "handbook/deploy.md", "other/notes.md"]
        assert top_document(index, "nightly backup") == "other/notes.md"


def test_a_path_run_refuses_a_folder_that_does_not_hold_documents_stored_without_a_root(tmp_path, db, embed) -> None:
    folder = handbook(tmp_path)
    docs = [Document(text=(folder / rel).read_text(), metadata={"file_path": rel}, id_=f"doc-{rel}")
            for rel in ("auth/tokens.md", "deploy.md")]  # relative paths, no root anywhere
    store = PolarisVectorStore(db, embed_model=embed, config=config())
    VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(vector_store=store),
                                    embed_model=embed, transformations=[PolarisNodeParser(config=config(), embed_model=embed)])
    store.close()
    with PolarisIndex(db, config=config()) as index:
        assert index.store.collection_root("default") is None
        with pytest.raises(InputError, match="does not hold 2 of them"):
            index.index_paths([tmp_path / "other"])
        with pytest.raises(InputError, match="records no folder"):
            index.remove("default", [folder / "deploy.md"])
        assert paths_of(index) == ["auth/tokens.md", "deploy.md"] and index.store.counts()["chunks"] == 2
        report = index.index_paths([folder])  # the folder that holds them all: it becomes their root
        assert (report.added, report.updated, report.removed) == (0, 2, 0) and report.chunks_embedded == 0
        assert {d.id for d in index.store.documents()} == {"doc-auth/tokens.md", "doc-deploy.md"}
        assert index.remove("default", [folder / "deploy.md"]) == 1
        assert top_document(index, "how long do access tokens last") == "auth/tokens.md"


def test_documents_stored_by_absolute_path_are_found_again_not_duplicated_nor_lost(tmp_path, db, embed) -> None:
    folder = handbook(tmp_path)
    llamaindex_build(db, folder, embed).close()  # no root_dir: file_path stays absolute
    with PolarisIndex(db, config=config()) as index:
        assert paths_of(index) == [str(folder / "auth" / "tokens.md"), str(folder / "deploy.md")]
        assert index.remove("default", [folder / "deploy.md"]) == 1  # a PATH names it
        report = index.index_paths([folder])
        assert (report.added, report.updated, report.removed) == (1, 1, 0) and report.chunks_embedded == 1
        assert paths_of(index) == ["auth/tokens.md", "deploy.md"] and index.store.counts()["chunks"] == 2


def test_a_parser_rooted_in_a_subfolder_keys_files_relative_to_the_collections_root(tmp_path, db, embed) -> None:
    folder = handbook(tmp_path)
    with PolarisIndex(db, config=config()) as index:
        index.index_paths([folder])
    llamaindex_build(db, folder / "auth", embed, root_dir=str(folder / "auth")).close()
    with PolarisIndex(db, config=config()) as index:
        assert paths_of(index) == ["auth/tokens.md", "deploy.md"]  # one document per file, whichever door
        nodes = index.store.get_chunks()
        assert sorted(c.metadata["file_path"] for c in nodes) == ["auth/tokens.md", "deploy.md"]
        report = index.index_paths([folder])
        assert (report.added, report.removed, report.chunks_embedded) == (0, 0, 0)
    with pytest.raises(InputError, match="outside collection 'default'"):
        llamaindex_build(db, tmp_path / "other", embed, root_dir=str(tmp_path / "other"))


# --- 5. a heading's contribution is bounded ---------------------------------------------


HEADING_CHARS = 200  # what the engine lets one heading put in a heading path (config.HEADING_CHARS)


def test_a_long_heading_adds_a_bounded_heading_path_to_each_chunk(tmp_path, db, embed) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "h.md").write_text("# " + " ".join(f"w{i}" for i in range(2000)) + "\n\nThe body under it.\n")
    (docs / "deploy.md").write_text(ORDINARY)
    proc = polaris("index", "docs", "--json", "-q", "--db", db, cwd=tmp_path)
    assert json.loads(proc.stdout)["added"] == 2
    if is_file(db):
        assert Path(db).stat().st_size < 2_500_000  # 3.1 MB before (2.0 MB now): 33 chunks each carried the 11 KB heading
    with PolarisIndex(db, config=config(), readonly=True) as index:
        chunks = index.store.get_chunks()
        assert len(chunks) > 20 and all(len(c.heading_path) <= HEADING_CHARS for c in chunks)
        with index.store.read() as conn:
            stored = conn.execute("SELECT sum(length(heading_path)) FROM chunks").fetchone()[0]
            assert stored <= len(chunks) * HEADING_CHARS  # 360 KB before
            if is_file(db):  # what the file's full-text index reads of the heading path
                fts = conn.execute("SELECT max(length(fts_heading_path)) FROM chunks_fts").fetchone()[0]
                assert fts <= HEADING_CHARS
        assert all(len(c.metadata["heading_path"]) <= HEADING_CHARS for c in chunks)
        assert top_document(index, "w1999", mode="bm25") == "h.md"  # the heading line itself is whole in the text
        assert top_document(index, "deploys main branch checks") == "deploy.md"
    hit = json.loads(polaris("search", "w17", "-k", "1", "--json", "--db", db, cwd=tmp_path).stdout)[0]
    assert hit["heading_path"].startswith("w0 w1 w2") and hit["heading_path"].endswith("…")
    assert len(polaris("search", "w17", "-k", "1", "--db", db, cwd=tmp_path).stdout) < 1_000  # 11 KB before
    nodes = PolarisNodeParser(config=config(), embed_model=embed, root_dir=str(docs)).get_nodes_from_documents(
        SimpleDirectoryReader(str(docs)).load_data())
    assert sorted((n.metadata["file_path"], n.metadata["heading_path"], n.text) for n in nodes) == sorted(
        (c.metadata["file_path"], c.heading_path, c.text) for c in chunks)  # the same chunks, both doors
    assert all(len(n.get_content(MetadataMode.EMBED)) <= len(n.text) + HEADING_CHARS + 20 for n in nodes)


async def test_the_datasette_page_shows_a_bounded_heading(tmp_path, db) -> None:
    from datasette.app import Datasette

    if not is_file(db):
        pytest.skip("the Datasette explorer reads SQLite files (a Postgres index is browsed after `polaris copy`)")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "h.md").write_text("# " + " ".join(f"w{i}" for i in range(1200)) + "\n\nBody text.\n")
    with PolarisIndex(tmp_path / "polaris.db", config=config()) as index:
        index.index_paths([docs])
    page = (await Datasette([str(tmp_path / "polaris.db")]).client.get("/polaris/-/polaris", params={"q": "w5"})).text
    assert "w0 w1 w2" in page and "…" in page
    assert "w1199" not in page and len(page) < 100_000  # the whole heading in every hit's path before


# --- 6. an unsplittable run is cut at the budget, counted and reported ------------------------


UNSPLITTABLE = {
    "url.md": "# Link\n\nSee https://example.com/" + "/".join(f"segment{i}" for i in range(1000)) + " for details.\n",
    "blob.md": "# Blob\n\n" + ("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0123456789+/" * 300) + "\n",
    "code.md": "# Code\n\n```python\nx = [" + ",".join(str(i) for i in range(2000)) + "]\n```\n",
    "table.md": "# Table\n\n| a | b |\n|---|---|\n| " + "r1;" * 1000 + " | end |\n",
    "cjk.md": "# 中文\n\n" + "数据库索引检索文档片段" * 150 + "\n",
    "word.md": "# Word\n\n" + "ab." * 30_000 + "\n",
}


def test_unsplittable_runs_are_cut_inside_at_the_budget_and_reported(tmp_path, db, embed) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in UNSPLITTABLE.items():
        (docs / name).write_text(text)
    (docs / "deploy.md").write_text(ORDINARY)
    with PolarisIndex(db, config=config()) as index:
        report = index.index_paths([docs])
        budget = index.embedder.max_chunk_tokens
        raw = index.embedder._tokenizers_loaded().counter
        assert report.added == 7 and not report.failed
        warned = {path for path, _ in report.warnings}
        assert warned == {"url.md", "blob.md", "code.md", "table.md", "word.md"}  # CJK is cut between characters
        chunks = index.store.get_chunks()
        for chunk in chunks:
            assert len(raw.encode(chunk.text, add_special_tokens=False)) <= budget, chunk.text[:60]
        by_doc = {}
        for c in chunks:
            by_doc.setdefault(c.metadata["file_path"], []).append(c)
        word = "".join(c.text for c in by_doc["word.md"][1:])
        assert word == "ab." * 30_000  # every character kept, in order, no overlap repeated
        assert len(by_doc["word.md"]) < 350 and len(by_doc["cjk.md"]) >= 6
        code = by_doc["code.md"]
        assert len(code) > 2 and all(c.text.endswith("\n```") for c in code)  # every piece a closed fence
        assert all(c.text.startswith("```python\n") for c in code[1:]) and code[0].text.startswith("# Code")
        assert top_document(index, "segment999", mode="bm25") == "url.md"
        assert top_document(index, "deploys main branch checks") == "deploy.md"
    nodes = PolarisNodeParser(config=config(), embed_model=embed, root_dir=str(docs)).get_nodes_from_documents(
        SimpleDirectoryReader(str(docs)).load_data())
    assert sorted((n.metadata["file_path"], n.start_char_idx, n.text) for n in nodes) == sorted(
        (c.metadata["file_path"], c.start_char, c.text) for c in chunks)  # the same chunks, both doors


# --- 8. file names that are not UTF-8 -------------------------------------------------------


def test_a_file_name_that_is_not_utf8_is_stored_escaped_through_every_door(tmp_path, db, second_db, embed) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    with open(os.path.join(os.fsencode(docs), b"bad\xffname.md"), "wb") as fh:
        fh.write(b"# Broken name\n\nThe quarterly report lives here.\n")
    (docs / "deploy.md").write_text(ORDINARY)
    summary = polaris("index", "docs", "-q", "--db", db, cwd=tmp_path).stdout
    assert summary.startswith("2 added") and "0 failed" in summary
    hit = json.loads(polaris("search", "quarterly report", "-k", "1", "--json", "--db", db, cwd=tmp_path).stdout)[0]
    assert hit["document"] == "bad\\xffname.md"
    scoped = polaris("search", "report", "--document", "bad\\xffname.md", "--json", "--db", db, cwd=tmp_path).stdout
    assert [h["document"] for h in json.loads(scoped)] == ["bad\\xffname.md"]
    raw_name = os.fsdecode(b"docs/bad\xffname.md")  # the name as a shell passes it
    assert json.loads(polaris("search", "report", "--document", os.fsdecode(b"bad\xffname.md"), "--json",
                              "--db", db, cwd=tmp_path).stdout)[0]["document"] == "bad\\xffname.md"
    assert polaris("remove", raw_name, "--db", db, cwd=tmp_path).stdout.strip() == "1 removed"
    with PolarisIndex(db, config=config()) as index:
        assert paths_of(index) == ["deploy.md"]
        report = index.index_paths([docs])
        assert report.added == 1 and paths_of(index) == ["bad\\xffname.md", "deploy.md"]
        cli_chunks = sorted((c.metadata["file_path"], c.text, c.node_id) for c in index.store.get_chunks())
    store = llamaindex_build(second_db, docs, embed, root_dir=str(docs))
    assert sorted((c.metadata["file_path"], c.text) for c in store.client.get_chunks()) == [x[:2] for x in cli_chunks]
    assert sorted(d.path for d in store.client.documents()) == ["bad\\xffname.md", "deploy.md"]
    store.close()


def test_a_name_spelled_like_another_files_escape_is_skipped_with_the_reason(tmp_path, db) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bad\\xffname.md").write_text("# Literal\n\nA backslash in the name.\n")  # sorts first
    with open(os.path.join(os.fsencode(docs), b"bad\xffname.md"), "wb") as fh:
        fh.write(b"# Byte\n\nAn undecodable byte in the name.\n")
    (docs / "deploy.md").write_text(ORDINARY)
    with PolarisIndex(db, config=config()) as index:
        report = index.index_paths([docs])
        assert report.added == 2 and paths_of(index) == ["bad\\xffname.md", "deploy.md"]
        ((name, why),) = report.skipped
        assert name == "bad\\xffname.md" and "is not valid UTF-8 and is stored as 'bad\\\\xffname.md'" in why
        assert top_document(index, "backslash in the name") == "bad\\xffname.md"


def test_ids_and_metadata_that_are_not_valid_unicode_are_stored_and_found(db, embed) -> None:
    bad = os.fsdecode(b"/srv/bad\xffname.md")
    doc = Document(text="# Broken\n\nThe quarterly report lives here.\n", id_=bad + "_part_0",
                   metadata={"file_path": bad, "file_name": os.path.basename(bad), "note": "x\ud800y"})
    store = PolarisVectorStore(db, embed_model=embed, config=config())
    VectorStoreIndex.from_documents([doc, Document(text=ORDINARY, id_="ok", metadata={"file_path": "/srv/deploy.md"})],
                                    storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed,
                                    transformations=[PolarisNodeParser(config=config(), embed_model=embed)])
    assert sorted(d.path for d in store.client.documents()) == ["/srv/bad\\xffname.md", "/srv/deploy.md"]
    nodes = store.get_nodes()
    assert all(json.dumps(n.metadata, ensure_ascii=False).encode("utf-8") for n in nodes)  # no lone surrogate left
    assert [n.metadata.get("note") for n in nodes if "note" in n.metadata] == ["x\\ud800y"]
    assert store.client.get_document(bad + "_part_0") is not None
    store.delete(bad + "_part_0")  # the id as LlamaIndex gave it
    assert [d.path for d in store.client.documents()] == ["/srv/deploy.md"]
    store.close()


# --- 9. folders deeper than the system allows -------------------------------------------------


def deep_chain(base: Path, depth: int = 24) -> None:
    """A chain of folders whose full path is longer than PATH_MAX, with a file at the bottom."""
    fd = os.open(base, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d" * 200, dir_fd=fd)
            child = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("deep.md", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
        os.write(out, b"# Deep\n\nVery deep text.\n")
        os.close(out)
    finally:
        os.close(fd)


def test_a_folder_chain_deeper_than_path_max_is_skipped_and_reported(tmp_path, db) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(ORDINARY)
    (docs / "zz.md").write_text("# Later\n\nA file walked after the deep folder.\n")
    deep_chain(docs)
    proc = polaris("index", "docs", "--json", "-q", "--db", db, cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["added"] == 2 and not report["failed"]
    ((where, why),) = report["skipped"]
    assert where.startswith("d" * 200 + "/") and "longer than this system allows" in why
    assert "skipped: " in proc.stderr
    with PolarisIndex(db, config=config()) as index:
        assert paths_of(index) == ["deploy.md", "zz.md"] and index.store.counts()["chunks"] == 2
        assert top_document(index, "walked after the deep folder") == "zz.md"
        with pytest.raises(InputError, match="cannot be used"):
            index.index_paths([str(docs) + "/x" * 3000])  # a typed path longer than the system allows


# --- 14. UTF-16 and UTF-32 with a byte order mark ----------------------------------------------


def test_utf16_and_utf32_with_a_bom_are_decoded_and_the_rest_is_named(tmp_path, db) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    text = "# Sixteen\n\nThe ångström report, in UTF-16.\n"
    (docs / "le.md").write_bytes(text.encode("utf-16"))  # BOM + little-endian
    (docs / "be.md").write_bytes(b"\xfe\xff" + text.replace("Sixteen", "Bigend").encode("utf-16-be"))
    (docs / "u32.md").write_bytes(text.replace("Sixteen", "Thirtytwo").encode("utf-32"))
    (docs / "nobom.md").write_bytes(text.encode("utf-16-le"))
    (docs / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10)
    (docs / "deploy.md").write_text(ORDINARY)
    with PolarisIndex(db, config=config()) as index:
        report = index.index_paths([docs])
        assert report.added == 4
        failed = dict(report.failed)
        assert "UTF-16 (LE) without a byte order mark" in failed["nobom.md"] and "iconv" in failed["nobom.md"]
        assert "binary file" in failed["binary.md"]
        assert {c.text for c in index.store.get_chunks()} >= {text.strip(), text.replace("Sixteen", "Bigend").strip()}
        assert top_document(index, "Thirtytwo") == "u32.md"
        assert top_document(index, "deploys main branch checks") == "deploy.md"


# --- queries full of FTS5 syntax and odd characters, on both backends ---------------------------
HOSTILE = ['"', '""', "*", "NEAR", "NEAR(a b)", "-", ":", "a:b", "-token", "^", "(", ")", "AND", "OR NOT",
           "'", "\\", "{text}: x", "text:rrf", "NEAR/2", "\x00", "🙂", "   ", "?!.,;", "tokens* AND NOT deploy^",
           'text:"access tokens" OR heading_path:deploys', "x\ud800y", "ångström " * 200, "-- ; DROP TABLE chunks"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> dict:
    """The handbook folder indexed once into a polaris.db and once into a Postgres database."""
    root = tmp_path_factory.mktemp("hostile")
    folder = handbook(root)
    (folder / "syntax.md").write_text("# NEAR and OR\n\nThe words NEAR, AND, OR and NOT; text:rrf and a:b.\n")
    targets = {"sqlite": str(root / "polaris.db"), "postgres": new_database(pg_server, "polaris_hostile")}
    for target in targets.values():
        with PolarisIndex(target, config=config()) as index:
            index.index_paths([folder])
    return {"root": root, **targets}


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_hostile_queries_answer_the_same_on_both_backends(hostile: dict, mode: str) -> None:
    opened = {b: PolarisIndex(hostile[b], config=config(), readonly=True) for b in ("sqlite", "postgres")}
    try:
        found = 0
        for query in HOSTILE:
            hits = {b: ix.search(query, top_k=5, mode=mode) for b, ix in opened.items()}
            assert [(h.document, h.heading_path, h.text) for h in hits["postgres"]] == \
                [(h.document, h.heading_path, h.text) for h in hits["sqlite"]], query
            assert [h.score for h in hits["postgres"]] == pytest.approx([h.score for h in hits["sqlite"]], abs=1e-5)
            found += bool(hits["sqlite"])
        assert found >= 8  # the words inside the syntax are still searched
    finally:
        for ix in opened.values():
            ix.close()


@pytest.mark.parametrize("query", ['NEAR(a b) AND "', "text:rrf -token ^"])
def test_hostile_queries_through_the_cli_and_llamaindex_on_both_backends(hostile: dict, query: str) -> None:
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    answers = {}
    for backend in ("sqlite", "postgres"):
        cli = json.loads(polaris("search", query, "--mode", "bm25", "--json", "--db", hostile[backend],
                                 cwd=hostile["root"]).stdout)
        store = PolarisVectorStore(hostile[backend], config=config())
        try:
            text = store.query(VectorStoreQuery(query_str=query, mode=VectorStoreQueryMode.TEXT_SEARCH,
                                                similarity_top_k=5))
        finally:
            store.close()
        answers[backend] = ([(h["document"], h["heading_path"]) for h in cli],
                            [n.metadata.get("file_path") for n in text.nodes])
    assert answers["sqlite"][0] and answers["postgres"] == answers["sqlite"]
