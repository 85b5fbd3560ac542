"""One spelling of text (#23): NFD and NFC spellings of the same words find the same chunks.

"ångström" typed on a keyboard is NFC (precomposed letters); copied from a macOS file name
it is often NFD (base letters and combining marks). The engine stores and compares text in
NFC (``engine/text.nfc``). Checked here: the BM25 scorers (FTS5, the posting lists in the
file, the in-RAM cache, Postgres's postings) on generated text in both spellings; the chunker's
offsets; and, with the bundled model on a real polaris.db and on a Postgres database, every door
(engine, CLI, LlamaIndex store, retriever and node parser; the Datasette page, JSON and SQL
function on the file), a file stored in NFD by an earlier Polaris, and two files whose names
differ only in spelling.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from datasette.app import Datasette
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.schema import Document, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from llama_index_polaris import PolarisNodeParser, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine import sqlite as db
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.sqlite.schema import transaction
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.ingest.recipe import make_recipe
from llama_index_polaris.engine.sqlite import bm25_postings as postings
from llama_index_polaris.engine.sqlite import postings as lists
from llama_index_polaris.engine.sqlite.bm25 import bm25
from llama_index_polaris.engine.sqlite.bm25_cache import Bm25Cache
from llama_index_polaris.engine.search.pipeline import Searcher
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store
from llama_index_polaris.engine.text import nfc, spellings
from llama_index_polaris.engine.backends import open_store
from polaris_testing import BACKENDS, module_target, new_database
from test_chunk_invariants import budgets, check, document

MODEL = "all-minilm-l6-v2"


def NFC(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def NFD(text: str) -> str:
    return unicodedata.normalize("NFD", text)


# Words whose NFD spelling differs: Latin with one or two marks, Vietnamese, Hangul (whose
# NFD jamo FTS5 does not fold back), and plain words around them.
ACCENTED = ["ångström", "café", "naïve", "zürich", "résumé", "crème", "brûlée", "việt", "ñandú", "한국어", "Ærø"]
PLAIN = ["session", "token", "cache", "index", "the"]


def test_nfc_is_idempotent_and_spellings_cover_both_forms() -> None:
    for word in ACCENTED:
        assert NFD(word) != word or word == "Ærø"  # Æ and ø have no decomposition
        assert nfc(NFD(word)) == NFC(word) == nfc(nfc(word))
        assert set(spellings(NFD(word))) == {NFC(word), NFD(word)}
    plain = "session"
    assert nfc(plain) is plain and spellings(plain) == [plain]


def _bm25_store(path: Path, docs: list[list[str]], forms: list[bool], store: Any = None) -> Store:
    """A store holding each document's words in NFD (``forms[i]``) or NFC, written by the store door
    (into ``store``, emptied first, when given: the module's Postgres database)."""
    if store is None:
        store = Store(path)
        store.bind_model(ModelBinding("fake", 4))
    else:
        store.clear()
    for i, (words, decomposed) in enumerate(zip(docs, forms)):
        text = " ".join(words)
        text = NFD(text) if decomposed else NFC(text)
        chunk = ChunkRecord(f"n{i}", text, 0, heading_path=f"Doc {i}")
        store.upsert_document(DocumentRecord(f"d{i}"), [chunk], np.eye(4, dtype=np.float32)[:1])
    return store


@pytest.fixture(scope="module")
def pg_store(pg_server: str) -> Iterator[Any]:
    """A Postgres database the BM25 examples below write their documents into, one example at a time."""
    store = open_store(new_database(pg_server, "polaris_spelling"))
    store.bind_model(ModelBinding("fake", 4))
    yield store
    store.close()


def _pg_answer(pg: Any, docs: list[list[str]], forms: list[bool], queries: tuple[str, ...]) -> list[list[str]]:
    """Postgres's BM25 candidates for each query, as document ids in rank order (its chunk ids are its own)."""
    from llama_index_polaris.engine.storage.scope import Scope

    _bm25_store(Path(), docs, forms, pg)
    with pg.read() as conn:
        doc_of = dict(conn.execute("SELECT id, document_id FROM chunks").fetchall())
        return [[doc_of[cid] for cid, _ in pg.bm25(q, 50, Scope())] for q in queries]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(st.lists(st.sampled_from(ACCENTED + PLAIN), min_size=1, max_size=8), min_size=1, max_size=6),
    forms=st.lists(st.booleans(), min_size=6, max_size=6),
    query=st.lists(st.sampled_from(ACCENTED), min_size=1, max_size=3),
)
def test_nfd_and_nfc_spellings_find_the_same_chunks_with_every_bm25_scorer(pg_store, docs, forms, query) -> None:
    """Whatever spelling each document was written in, a query in either spelling finds the
    documents holding its words, the same list from FTS5, the posting lists, the cache and Postgres."""
    holding = {f"d{i}" for i, words in enumerate(docs) if set(words) & set(query)}
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(lists, "COMMON_DF", 1)  # every term gets a posting list in the file
        store = _bm25_store(Path(tmp) / "p.db", docs, forms)
        try:
            conn, tokenizer = store.conn, store.tokenizer()
            cache = Bm25Cache(store, min_chunks=1, common_df=1)
            assert cache.refresh()
            doc_of = dict(conn.execute("SELECT id, document_id FROM chunks"))
            answers = []
            for q in (NFC(" ".join(query)), NFD(" ".join(query))):
                from_lists = postings.bm25(conn, tokenizer, q, 50)
                assert from_lists is not None or not holding  # the lists answered, not FTS5 behind them
                for hits in (bm25(conn, q, 50), from_lists or [], cache.bm25(q, 50)):
                    answers.append([cid for cid, _ in hits])
                    assert {doc_of[cid] for cid, _ in hits} == holding, q
            assert all(a == answers[0] for a in answers)
            assert _pg_answer(pg_store, docs, forms, (NFC(" ".join(query)), NFD(" ".join(query)))) == \
                [[doc_of[cid] for cid in answers[0]]] * 2
            stored = [r[0] for r in conn.execute("SELECT text FROM chunks")]
            assert all(t == NFC(t) for t in stored)
        finally:
            store.close()


# Random words that have two spellings: base letters with random combining marks (some
# compose, some stay apart even in NFC), and Hangul syllables (NFD: two or three jamo each).
BASES = "aeiouycnszAEIOUCNSZ"
MARKS = [chr(c) for c in (0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x30C, 0x327, 0x323)]
unit = st.one_of(
    st.tuples(st.sampled_from(BASES), st.lists(st.sampled_from(MARKS), max_size=2)).map(lambda t: t[0] + "".join(t[1])),
    st.integers(0xAC00, 0xD7A3).map(chr),
)
random_word = st.lists(unit, min_size=2, max_size=6).map("".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(st.lists(random_word, min_size=1, max_size=6), min_size=1, max_size=5),
       forms=st.lists(st.booleans(), min_size=5, max_size=5), pick=st.data())
def test_random_words_in_either_spelling_find_the_same_chunks(pg_store, docs, forms, pick) -> None:
    """A word of a document, asked in NFC or in NFD, gives the same list from every scorer, and
    that list holds the document it came from."""
    source = pick.draw(st.integers(0, len(docs) - 1))
    word = pick.draw(st.sampled_from(docs[source]))
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(lists, "COMMON_DF", 1)
        store = _bm25_store(Path(tmp) / "p.db", docs, forms)
        try:
            conn, tokenizer = store.conn, store.tokenizer()
            cache = Bm25Cache(store, min_chunks=1, common_df=1)
            assert cache.refresh()
            # the lists answer None where FTS5 must (a query of stop words only): the pipeline then asks FTS5
            answers = [[cid for cid, _ in hits] for q in (NFC(word), NFD(word))
                       for hits in (bm25(conn, q, 50), postings.bm25(conn, tokenizer, q, 50) or bm25(conn, q, 50),
                                    cache.bm25(q, 50))]
            assert all(a == answers[0] for a in answers), word
            doc_of = dict(conn.execute("SELECT id, document_id FROM chunks"))
            assert _pg_answer(pg_store, docs, forms, (NFC(word), NFD(word))) == [[doc_of[c] for c in answers[0]]] * 2
            source_chunk = conn.execute("SELECT id FROM chunks WHERE document_id = ?", (f"d{source}",)).fetchone()[0]
            assert source_chunk in answers[0]
        finally:
            store.close()


ACCENTED_MARKDOWN = document.map(
    lambda src: src.replace("alpha", "ångström").replace("beta", "résumé").replace("Guide", "Ærø Việt")
    .replace("delta", "한국어")
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=ACCENTED_MARKDOWN, cfg=budgets, decomposed=st.booleans())
def test_the_recipe_cuts_either_spelling_as_the_nfc_text_and_covers_it(source, cfg, decomposed) -> None:
    """Every door chunks through the recipe: the chunks of the NFD spelling are those of the
    NFC text (same cuts, offsets into the NFC text), which still cover it."""
    recipe = make_recipe(load_config(use_user_config=False).replace(
        max_chunk_tokens=cfg.max_tokens, chunk_overlap_chars=cfg.overlap_chars, min_chunk_chars=cfg.min_chars),
        window=512, count_tokens=None)
    given_text = NFD(source) if decomposed else NFC(source)
    got = recipe.chunk(given_text, title=NFD("Ångström notes"))
    expected = check(NFC(source), recipe.settings, title=NFC("Ångström notes"))  # the chunker's invariants
    assert [(c.text, c.start, c.end, c.heading_path) for c in got.chunks] == \
           [(c.text, c.start, c.end, c.heading_path) for c in expected]


# -- every door, the bundled model, a real polaris.db and a Postgres database ----------------
ANGSTROM = "ångström.md"  # stored in NFD on disk, as a macOS file system hands it over
FILES = {
    NFD(ANGSTROM): NFD("# Ångström units\n\nAn ångström is 0.1 nanometres; crystallographers write lattice"
                       " spacings in ångström.\n"),
    "cafe.md": "# Café menu\n\nThe café serves crème brûlée and a naïve espresso after noon.\n",
    "tokens.md": "# Tokens\n\nAccess tokens expire after fifteen minutes; refresh tokens last a day.\n",
}
WORD = "ångström"


class Project:
    """The folder indexed (``root``, with its polaris.toml) and where its index is (``db``)."""

    def __init__(self, root: Path, db: str) -> None:
        self.root, self.db, self.backend = root, db, "postgres" if db.startswith("postgres") else "sqlite"

    def __truediv__(self, name: str) -> Path:
        return self.root / name


@pytest.fixture(scope="module", params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("spelling")
    (root / "docs").mkdir()
    for name, text in FILES.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    db = str(root / "polaris.db") if request.param == "sqlite" else module_target(request, tmp_path_factory)
    with PolarisIndex(db, config=load_config(root, use_user_config=False)) as index:
        index.index_paths([root / "docs"])
    return Project(root, db)


def config(project: Project):
    return load_config(project.root, use_user_config=False)


def keys(hits) -> list[tuple[str, str]]:
    return [(h.document, h.heading_path) for h in hits]


def test_stored_text_paths_and_offsets_are_nfc(project: Project) -> None:
    with PolarisIndex(project.db, config=config(project), readonly=True) as index:
        (doc,) = [d for d in index.store.documents() if d.path != "cafe.md" and d.path != "tokens.md"]
        assert (doc.path, doc.name, doc.id) == (NFC(ANGSTROM), NFC(ANGSTROM), f"default:{NFC(ANGSTROM)}")
        source = NFC(FILES[NFD(ANGSTROM)])
        for c in index.store.get_chunks(document_id=doc.id):
            assert c.text == NFC(c.text) and c.heading_path == NFC(c.heading_path)
            assert source[c.start_char:c.end_char] == c.text  # offsets into the text stored
        assert doc.content_hash == hashlib.sha256(source.encode()).hexdigest()


@pytest.mark.parametrize("mode", ["bm25", "hybrid", "vector"])
def test_the_engine_answers_both_spellings_alike(project: Project, mode: str) -> None:
    with PolarisIndex(project.db, config=config(project), readonly=True) as index:
        nfc_hits = index.search(f"{WORD} lattice", top_k=3, mode=mode)
        nfd_hits = index.search(NFD(f"{WORD} lattice"), top_k=3, mode=mode)
        by_name = index.search(f"{WORD} café", top_k=3, mode=mode, documents=[NFD(ANGSTROM), "cafe.md"])
        by_nfd_name = index.search(f"{WORD} café", top_k=3, mode=mode, documents=[NFC(ANGSTROM), NFD("cafe.md")])
    assert nfc_hits and nfc_hits[0].document == NFC(ANGSTROM)
    assert [(h.chunk_id, h.score) for h in nfd_hits] == [(h.chunk_id, h.score) for h in nfc_hits]
    assert {h.document for h in by_name} == {h.document for h in by_nfd_name} == {NFC(ANGSTROM), "cafe.md"}


def test_the_cli_answers_both_spellings_alike(project: Project) -> None:
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(project / ".xdg")}

    def search(*args: str) -> list[dict]:
        done = subprocess.run([exe, "search", *args, "--json", "--db", project.db], cwd=project.root,
                              capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    nfd = search(NFD(WORD), "--mode", "bm25", "--document", NFD(ANGSTROM))
    nfc_hits = search(NFC(WORD), "--mode", "bm25", "--document", NFC(ANGSTROM))
    assert nfd and [h["node_id"] for h in nfd] == [h["node_id"] for h in nfc_hits]
    assert nfd[0]["document"] == NFC(ANGSTROM)


async def test_datasette_answers_both_spellings_alike(project: Project) -> None:
    if project.backend != "sqlite":
        pytest.skip("the Datasette explorer reads SQLite files (a Postgres index is browsed after `polaris copy`)")
    with PolarisIndex(project.db, config=config(project), readonly=True) as index:
        expected = [h.node_id for h in index.search(WORD, top_k=3)]
    ds = Datasette([project.db])
    for q in (NFC(WORD), NFD(WORD)):
        page = (await ds.client.get("/polaris/-/polaris.json", params={"q": q, "k": "3", "document": NFD(ANGSTROM)}))
        assert page.status_code == 200, page.text
        assert [h["node_id"] for h in page.json()["hits"]][:1] == expected[:1]
        sql = await ds.client.get("/polaris.json", params={"sql": "select polaris_search(:q, 3) as v", "q": q,
                                                           "_shape": "array"})
        assert [h["node_id"] for h in json.loads(sql.json()[0]["v"])] == expected
        html = (await ds.client.get("/polaris/-/polaris", params={"q": q, "mode": "bm25"})).text
        assert f"<mark>{NFC(WORD)}</mark>" in html  # the word is marked in the NFC text shown


def test_llamaindex_answers_both_spellings_alike(project: Project) -> None:
    store = PolarisVectorStore(project.db, config=config(project))
    try:
        with PolarisIndex(project.db, config=config(project), readonly=True) as index:
            vector = index.embedder.embed_query(WORD)
            expected = [h.node_id for h in index.search(WORD, top_k=3, mode="bm25", unit="chunk")]
        for q in (NFC(WORD), NFD(WORD)):
            text = store.query(VectorStoreQuery(query_str=q, mode=VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=3))
            assert text.ids == expected
            hybrid = store.query(VectorStoreQuery(query_str=q, query_embedding=list(map(float, vector)),
                                                  mode=VectorStoreQueryMode.HYBRID, similarity_top_k=3, doc_ids=[q + ".md"]))
            assert hybrid.ids and hybrid.nodes[0].metadata["file_path"] == NFC(ANGSTROM)
            retrieved = PolarisRetriever(vector_store=store, similarity_top_k=3, mode="bm25").retrieve(q)
            assert [n.node.node_id for n in retrieved][:1] == expected[:1]
    finally:
        store.close()


def test_the_node_parser_cuts_what_polaris_index_stores(project: Project) -> None:
    raw = FILES[NFD(ANGSTROM)]
    doc = Document(text=raw, metadata={"file_path": str(project / "docs" / NFD(ANGSTROM))})
    with PolarisIndex(project.db, config=config(project), readonly=True) as index:
        stored = index.store.get_chunks(document_id=f"default:{NFC(ANGSTROM)}")
        parser = PolarisNodeParser(config=config(project), root_dir=str(project / "docs"))
        nodes = parser.get_nodes_from_documents([doc])
    assert [(n.text, n.start_char_idx, n.end_char_idx) for n in nodes] == \
           [(c.text, c.start_char, c.end_char) for c in stored]
    assert nodes[0].metadata["file_path"] == NFC(ANGSTROM) and nodes[0].metadata["heading_path"] == NFC("Ångström units")


def test_a_node_added_in_nfd_is_stored_and_found_in_nfc(backend_target: str) -> None:
    store = PolarisVectorStore(backend_target, model_id="fake-4", config=load_config(use_user_config=False))
    try:
        node = TextNode(id_="n1", text=NFD("Ångström spacing of the lattice"), embedding=[1.0, 0.0, 0.0, 0.0],
                        metadata={"heading_path": NFD("Ærø > Ångström"), "file_path": NFD("notes/ångström.md")})
        store.add([node])
        (chunk,) = store.client.get_chunks()
        assert (chunk.text, chunk.heading_path) == (NFC(node.text), NFC("Ærø > Ångström"))
        assert store.client.get_document("n1").path == NFC("notes/ångström.md")
        found = store.query(VectorStoreQuery(query_str=NFC("ångström"), mode=VectorStoreQueryMode.TEXT_SEARCH))
        assert found.ids == ["n1"] and found.nodes[0].text == NFC(node.text)
    finally:
        store.close()


# -- files stored in NFD before #23 are stored again in NFC by the next run ------------------
# (SQLite only: the NFD rows are written into the file as that Polaris left them; the Postgres
# backend came after #23 and never stored NFD)
def store_as_before_23(path: Path, doc_id: str, text: str) -> str:
    """Rewrite ``doc_id`` as an earlier Polaris kept an NFD file: NFD path, key, chunk text and
    heading paths, the content hash of the NFD text. Returns the old key."""
    conn = db.connect(path)
    try:
        with transaction(conn):
            _, rel = doc_id.split(":", 1)
            old_id = f"default:{NFD(rel)}"
            conn.execute("INSERT INTO documents (id, path, name, collection, status, content_hash, metadata)"
                         " SELECT ?, ?, ?, collection, status, ?, metadata FROM documents WHERE id = ?",
                         (old_id, NFD(rel), NFD(rel), hashlib.sha256(NFD(text).encode()).hexdigest(), doc_id))
            for cid, chunk_text, heading in conn.execute(
                    "SELECT id, text, heading_path FROM chunks WHERE document_id = ?", (doc_id,)).fetchall():
                conn.execute("UPDATE chunks SET document_id = ?, text = ?, heading_path = ? WHERE id = ?",
                             (old_id, NFD(chunk_text), NFD(heading), cid))
            conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
    finally:
        conn.close()
    return old_id


def test_a_file_stored_in_nfd_is_found_then_stored_again_in_nfc(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    text = FILES[NFD(ANGSTROM)]
    (docs / NFD(ANGSTROM)).write_text(text, encoding="utf-8")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    cfg = load_config(tmp_path, use_user_config=False)
    with PolarisIndex(tmp_path / "polaris.db", config=cfg) as index:
        index.index_paths([docs])
    old_id = store_as_before_23(tmp_path / "polaris.db", f"default:{NFC(ANGSTROM)}", text)
    with PolarisIndex(tmp_path / "polaris.db", config=cfg) as index:
        # until the next run: found by either spelling of its name and of its words
        hits = index.search(NFC(WORD), mode="bm25", documents=[NFC(ANGSTROM)])
        assert hits and {h.document_id for h in hits} == {old_id}
        report = index.index_paths([docs])
        assert (report.added, report.removed, report.unchanged) == (1, 1, 0)
        (doc,) = index.store.documents()
        assert (doc.id, doc.path) == (f"default:{NFC(ANGSTROM)}", NFC(ANGSTROM))
        chunks = index.store.get_chunks()
        assert chunks and all(c.text == NFC(c.text) and NFC(text)[c.start_char:c.end_char] == c.text for c in chunks)
        assert index.index_paths([docs]).unchanged == 1  # and stays so


def test_two_files_whose_names_differ_only_in_spelling_are_one_document(tmp_path: Path, backend_target: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / NFC("café.md")).write_text("# Precomposed\n\nThe first file.\n")
    (docs / NFD("café.md")).write_text("# Decomposed\n\nThe second file.\n")
    if len(list(docs.iterdir())) < 2:
        pytest.skip("this file system folds the two spellings into one name (macOS)")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    with PolarisIndex(backend_target, config=load_config(tmp_path, use_user_config=False)) as index:
        report = index.index_paths([docs])
        assert report.added == 1 and [d.path for d in index.store.documents()] == [NFC("café.md")]
        ((path, reason),) = report.skipped
        assert path in (NFC("café.md"), NFD("café.md")) and "another Unicode spelling" in reason
        assert index.remove("default", [docs / NFD("café.md")]) == 1  # a path in either spelling covers it
