"""Nothing a user or a file sends as a vector breaks, leaks or silently loses the index (#24).

One rule (``engine.vectors``): a vector is stored and searched with only when it is finite,
has a length (not all zeros) and the index's size. Every write door refuses the rest and
writes nothing; every query door refuses them with the same message; a bad row written
around Polaris (raw SQL) is skipped by every search path and named by ``polaris status
--check``. All on the example handbook indexed with the bundled model, in real files.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from datasette.app import Datasette
from fixtures.embed_tiny import PLAIN, TinyModels, build_model_dir
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode as Mode

from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine import sqlite as engine_db
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.embed import clear_embedders
from llama_index_polaris.engine.errors import ModelMismatchError, VectorError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.plugins import plugin_manager
from llama_index_polaris.engine.storage import signbits
from llama_index_polaris.engine.sqlite import bits as vector_cache
from llama_index_polaris.engine.search.pipeline import Searcher
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord
from polaris_testing import copy_index

MODEL = "all-minilm-l6-v2"
DIM = 384
QUERY = "how long is an access token valid"
POLARIS = str(Path(sys.executable).with_name("polaris"))
BAD = {
    "nan": [float("nan")] * DIM,
    "inf": [float("inf")] * DIM,
    "zeros": [0.0] * DIM,
    "tiny": [1e-20] * DIM,
    "half-nan": [0.05] * (DIM - 1) + [float("nan")],
}


def config(**kw: Any):
    return load_config(use_user_config=False, model_id=MODEL, **kw)


@pytest.fixture(scope="module")
def embed() -> PolarisEmbedding:
    return PolarisEmbedding(model_id=MODEL, config=config())


@pytest.fixture
def db(built_handbook: Path, tmp_path: Path) -> Path:
    return copy_index(built_handbook, tmp_path)


@pytest.fixture
def open_store(db: Path):
    opened: list[PolarisVectorStore] = []

    def _open(**kw: Any) -> PolarisVectorStore:
        store = PolarisVectorStore(db, config=config(), **kw)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


def state(path: Path) -> dict[str, Any]:
    """What the file holds: documents with status and chunk count, every chunk's node id, and
    the vector and FTS rows (so that "nothing else was lost" is checked, not assumed)."""
    conn = engine_db.connect(path, readonly=True)
    try:
        docs = conn.execute(
            "SELECT d.id, d.status, count(c.id) FROM documents d LEFT JOIN chunks c ON c.document_id = d.id"
            " GROUP BY d.id ORDER BY d.id").fetchall()
        return {
            "documents": {d: (status, n) for d, status, n in docs},
            "nodes": sorted(r[0] for r in conn.execute("SELECT node_id FROM chunks")),
            "vec": conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0],
            "fts": conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0],
        }
    finally:
        conn.close()


def vector_ids(index: PolarisIndex, k: int = 5) -> list[str]:
    return [h.node_id for h in index.search(QUERY, mode="vector", unit="chunk", top_k=k)]


def assert_searchable(path: Path, before: dict[str, Any], top: list[str]) -> None:
    """The file is as it was (11 documents, 59 chunks, all completed) and answers as it did."""
    assert state(path) == before
    assert len(before["documents"]) == 11 and len(before["nodes"]) == 59
    assert {s for s, _ in before["documents"].values()} == {"completed"}
    with PolarisIndex(path, config=config(), fast_start=True) as index:
        assert vector_ids(index) == top
        assert index.search(QUERY, mode="hybrid", top_k=3)
        assert index.search("access token", mode="bm25", top_k=3)


# -- item 1: one bad vector at a write door --------------------------------------------------
class BrokenEmbedding(BaseEmbedding):
    """A user's embedding model that returns a vector without a direction (a real LlamaIndex class)."""

    vector: list = []

    def _get_text_embedding(self, text: str) -> list[float]:
        return list(self.vector)

    def _get_query_embedding(self, query: str) -> list[float]:
        return list(self.vector)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return list(self.vector)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_vector_is_refused_at_every_write_door_and_search_still_answers(db, open_store, embed, kind) -> None:
    before = state(db)
    with PolarisIndex(db, config=config(), fast_start=True) as index:
        top = vector_ids(index)
    vector = BAD[kind]
    good = embed.get_text_embedding("a good node")
    doors = {
        "add": lambda: open_store().add([TextNode(id_="x", text="t", embedding=vector)]),
        "add, embed_model": lambda: open_store(embed_model=embed).add([TextNode(id_="x", text="t", embedding=vector)]),
        "add, one of two": lambda: open_store(embed_model=embed).add(
            [TextNode(id_="ok", text="a good node", embedding=good), TextNode(id_="x", text="t", embedding=vector)]),
        "async_add": lambda: asyncio.run(open_store().async_add([TextNode(id_="x", text="t", embedding=vector)])),
        "VectorStoreIndex": lambda: VectorStoreIndex(
            [TextNode(id_="x", text="t")], embed_model=BrokenEmbedding(vector=vector),
            storage_context=StorageContext.from_defaults(vector_store=open_store())),
        "engine store": lambda: open_store().client.upsert_document(
            DocumentRecord("x"), [ChunkRecord("x", "t")], np.array([vector])),
    }
    for door, write in doors.items():
        with pytest.raises(VectorError, match=r"node 'x'.* (has NaN|has infinite|is all zeros|too close to zero)"):
            write()
        assert state(db) == before, door  # nothing written, not even the good node of the same add
    assert_searchable(db, before, top)


def test_a_vector_of_another_size_is_refused_before_anything_is_written(db, open_store) -> None:
    before = state(db)
    with pytest.raises(ModelMismatchError, match="384-dim vectors.*128-dim"):
        open_store().add([TextNode(id_="x", text="t", embedding=[0.1] * 128)])
    with pytest.raises(VectorError, match="has 128 dims, but this index holds 384-dim"):
        open_store().client.upsert_document(DocumentRecord("x"), [ChunkRecord("x", "t")], np.ones((1, 128)))
    with pytest.raises(VectorError, match="lists of numbers"):
        open_store().client.upsert_document(DocumentRecord("x"), [ChunkRecord("x", "t")], [["a"] * DIM])
    assert state(db) == before


@pytest.fixture
def nan_model(tmp_path: Path, monkeypatch):
    """A real (tiny) ONNX model that returns NaN for any text with the word 'expired' in it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    clear_embedders()
    plugin_manager().register(TinyModels(PLAIN), name="tiny-nan")
    yield build_model_dir(tmp_path / "tiny", nan_words=("expired",))
    plugin_manager().unregister(name="tiny-nan")
    clear_embedders()


def test_a_model_that_returns_nan_fails_that_file_only_and_keeps_its_last_version(tmp_path, nan_model) -> None:
    """The indexer door (`polaris index`): the embedder's own output is checked too."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hello.md").write_text("# hello\n\nhello world\n")
    (docs / "tokens.md").write_text("# tokens\n\ntokens have a lifetime of one hour\n")
    cfg = load_config(use_user_config=False, model_id="tiny-plain", model_dir=str(nan_model))
    with PolarisIndex(tmp_path / "p.db", config=cfg) as index:
        first = index.index_paths([docs])
        assert (first.added, first.failed) == (2, [])
        (docs / "tokens.md").write_text("# tokens\n\nexpired tokens have a lifetime of one hour\n")
        (docs / "new.md").write_text("# sessions\n\nhow do we handle expired sessions\n")
        second = index.index_paths([docs])
        assert sorted(path for path, _ in second.failed) == ["new.md", "tokens.md"]
        assert all("tiny-plain returned an embedding that has NaN values for chunk 1" in why for _, why in second.failed)
        by_path = {d.path: d for d in index.store.documents()}
        assert by_path["new.md"].status == "failed"
        assert by_path["tokens.md"].status == "stale"  # its last good version still answers
        assert len(index.store.get_chunks(document_id=by_path["tokens.md"].id)) == 1
        assert index.store.get_chunks(document_id=by_path["new.md"].id) == []
        hits = index.search("tokens lifetime", mode="vector", unit="chunk", top_k=5)
        assert {h.document for h in hits} == {"hello.md", "tokens.md"}
        assert "one hour" in hits[0].text if hits[0].document == "tokens.md" else True
        assert index.search("hello world", top_k=1)[0].document == "hello.md"


# -- item 10: a query vector of the wrong size, or without a direction -------------------------
QUERY_VECTORS = {
    "128 dims": ([0.1] * 128, "has 128 dims but .* holds 384-dim vectors of all-minilm-l6-v2"),
    "zeros": ([0.0] * DIM, "is all zeros"),
    "nan": ([float("nan")] * DIM, "has NaN values"),
    "inf": ([float("inf")] + [0.1] * (DIM - 1), "has infinite values"),
}


@pytest.mark.parametrize("kind", sorted(QUERY_VECTORS))
def test_a_bad_query_vector_is_the_same_clear_error_at_every_query_door(db, open_store, embed, kind) -> None:
    vector, message = QUERY_VECTORS[kind]
    hybrid, plain = open_store(), open_store(default_mode="vector")
    doors = {
        f"store.query {mode.name}{' +query_str' if text else ''}": (
            lambda mode=mode, text=text: hybrid.query(VectorStoreQuery(
                query_embedding=vector, query_str=QUERY if text else None, mode=mode, similarity_top_k=3)))
        for mode in (Mode.DEFAULT, Mode.HYBRID, Mode.MMR) for text in (True, False)
        if text or mode != Mode.HYBRID
    }
    doors["store.query DEFAULT, default_mode vector"] = lambda: plain.query(
        VectorStoreQuery(query_embedding=vector, query_str=QUERY, similarity_top_k=3))
    doors["aquery"] = lambda: asyncio.run(hybrid.aquery(VectorStoreQuery(query_embedding=vector, query_str=QUERY)))
    doors["PolarisRetriever, QueryBundle"] = lambda: PolarisRetriever(vector_store=hybrid).retrieve(
        QueryBundle(QUERY, embedding=vector))
    doors["PolarisRetriever, embed_model"] = lambda: PolarisRetriever(
        vector_store=hybrid, embed_model=BrokenEmbedding(vector=vector)).retrieve(QUERY)
    doors["as_retriever"] = lambda: VectorStoreIndex.from_vector_store(
        hybrid, embed_model=BrokenEmbedding(vector=vector)).as_retriever(similarity_top_k=3).retrieve(QUERY)
    doors["Searcher"] = lambda: hybrid.search(QUERY, query_vector=vector)
    for door, ask in doors.items():
        with pytest.raises(VectorError, match=message):
            ask()
    good = embed.get_query_embedding(QUERY)  # the same doors answer a good vector
    assert hybrid.query(VectorStoreQuery(query_embedding=good, query_str=QUERY, similarity_top_k=3)).ids
    assert PolarisRetriever(vector_store=hybrid).retrieve(QueryBundle(QUERY, embedding=good))


# -- bad rows written around Polaris (raw SQL) ---------------------------------------------------
# kind -> (chunks_vec unusable for the chunk, chunks.embedding unusable for the chunk)
ROWS = {
    "nan": (True, True),
    "zeros": (True, True),
    "null": (True, True),
    "json text": (False, True),
    "wrong length": (False, True),
    "chunks_vec nan": (True, False),
    "chunks_vec orphan": (False, False),
}


def corrupt(path: Path, kind: str, chunk_id: int) -> None:
    """Write one bad row with plain SQL (sqlite-vec loaded, no Polaris code), as another tool could."""
    conn = engine_db.connect(path)
    nan = np.full(DIM, np.nan, dtype="<f4").tobytes()
    good = conn.execute("SELECT embedding FROM chunks WHERE id = ?", (chunk_id,)).fetchone()[0]
    try:
        if kind in ("nan", "zeros", "null"):
            value = {"nan": nan, "zeros": np.zeros(DIM, dtype="<f4").tobytes(), "null": None}[kind]
            conn.execute("UPDATE chunks SET embedding = ? WHERE id = ?", (value, chunk_id))
        elif kind == "json text":
            as_json = json.dumps(np.frombuffer(good, dtype="<f4").tolist())
            conn.execute("UPDATE chunks SET embedding = ? WHERE id = ?", (as_json, chunk_id))
        elif kind == "wrong length":  # vec0 refuses it, so the triggers are bypassed, as an older tool might
            triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
                                    " AND name IN ('chunks_vec_au', 'chunks_bits_au')").fetchall()
            for name, _ in triggers:
                conn.execute(f"DROP TRIGGER {name}")
            conn.execute("UPDATE chunks SET embedding = ? WHERE id = ?", (np.ones(100, dtype="<f4").tobytes(), chunk_id))
            for _, sql in triggers:
                conn.execute(sql)
        elif kind == "chunks_vec nan":
            conn.execute("UPDATE chunks_vec SET embedding = ? WHERE rowid = ?", (nan, chunk_id))
        elif kind == "chunks_vec orphan":
            conn.execute("INSERT INTO chunks_vec (rowid, embedding, document_id) VALUES (?, ?, 'gone.md')",
                         (10**6, good))
    finally:
        conn.close()


def clean_top(path: Path, k: int = 6) -> list[tuple[int, str]]:
    with PolarisIndex(path, config=config(), fast_start=True) as index:
        return [(h.chunk_id, h.node_id) for h in index.search(QUERY, mode="vector", unit="chunk", top_k=k)]


def expected(top: list[tuple[int, str]], skipped: bool, k: int = 5) -> list[str]:
    """The clean vector list with the bad chunk left out where that path cannot compare it."""
    return [n for _, n in (top[1:] if skipped else top)][:k]


@pytest.mark.parametrize("kind", sorted(ROWS))
def test_a_bad_stored_row_is_skipped_by_every_search_path(db, kind, monkeypatch) -> None:
    top = clean_top(db)
    target = top[0][0]
    corrupt(db, kind, target)
    in_vec0, in_embedding = ROWS[kind]
    cfg = config()
    with PolarisIndex(db, config=cfg, fast_start=True) as index:
        assert vector_ids(index) == expected(top, in_vec0)  # exact vec0 KNN
        for lam in (None, 0.5):  # hybrid, and MMR over the stored vectors
            assert len(index.search(QUERY, mode="hybrid", unit="chunk", top_k=5, mmr_lambda=lam)) == 5
            assert len(index.search(QUERY, mode="vector", unit="chunk", top_k=5, mmr_lambda=lam or 0.5)) == 5
        cache = vector_cache.VectorCache(index.store, min_chunks=0)  # the long-lived processes' path
        searcher = Searcher(index.store, index.embedder.embed_query, cfg, vector_cache=cache)
        assert [h.node_id for h in searcher.search(QUERY, mode="vector", unit="chunk", top_k=5)] == expected(
            top, in_embedding)
        monkeypatch.setattr(signbits, "EXACT_BELOW", 0)  # the sign-bit path of files above 20k chunks
        assert vector_ids(index) == expected(top, in_embedding)
        assert len(index.search(QUERY, mode="hybrid", unit="chunk", top_k=5, mmr_lambda=0.5)) == 5
        assert (index.status()["documents"], index.status()["chunks"]) == (11, 59)


@pytest.mark.parametrize("kind", ["nan", "zeros", "json text"])
def test_the_llamaindex_doors_answer_over_a_bad_stored_row(db, open_store, embed, kind) -> None:
    top = clean_top(db)
    corrupt(db, kind, top[0][0])
    store = open_store(embed_model=embed)
    q = embed.get_query_embedding(QUERY)
    for mode in (Mode.DEFAULT, Mode.HYBRID, Mode.MMR):
        assert store.query(VectorStoreQuery(query_embedding=q, query_str=QUERY, mode=mode, similarity_top_k=5)).ids
    plain = open_store(embed_model=embed, default_mode="vector")
    ids = plain.query(VectorStoreQuery(query_embedding=q, query_str=QUERY, similarity_top_k=5)).ids
    assert ids == expected(top, ROWS[kind][0])
    assert PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=5).retrieve(QUERY)
    index = VectorStoreIndex.from_vector_store(plain, embed_model=embed)
    assert [n.node.node_id for n in index.as_retriever(similarity_top_k=5).retrieve(QUERY)] == ids
    (node,) = store.get_nodes(node_ids=[top[0][1]])  # the row itself still reads
    assert node.node_id == top[0][1]


@pytest.mark.parametrize("kind", ["nan", "zeros", "chunks_vec nan"])
async def test_the_datasette_doors_answer_over_a_bad_stored_row(db, kind) -> None:
    top = clean_top(db)
    corrupt(db, kind, top[0][0])
    ds = Datasette([str(db)])
    page = await ds.client.get("/polaris/-/polaris", params={"q": QUERY, "mode": "vector", "k": "5"})
    assert page.status_code == 200 and "5 results" in page.text, page.text
    data = await ds.client.get("/polaris/-/polaris.json", params={"q": QUERY, "mode": "vector", "k": "5"})
    assert data.status_code == 200, data.text
    hits = data.json()["hits"]
    assert len(hits) == 5 and top[0][1] not in [h["node_id"] for h in hits]
    assert data.json()["index"]["chunks"] == 59
    sql = "select json_extract(value, '$.node_id') as node from json_each(polaris_search(:q, 5, :opts))"
    rows = await ds.client.get("/polaris.json", params={
        "sql": sql, "q": QUERY, "opts": '{"mode": "vector", "unit": "chunk"}', "_shape": "array"})
    assert rows.status_code == 200, rows.text
    assert [r["node"] for r in rows.json()] == expected(top, True)
    embedded = await ds.client.get("/polaris.json", params={
        "sql": "select length(polaris_embed(:q)) as n", "q": QUERY, "_shape": "array"})
    assert embedded.json() == [{"n": 4 * DIM}]


def test_a_proof_skips_a_bad_stored_row(tmp_path, embed) -> None:
    """A file naming no model is proven by re-embedding a few chunks; a bad row among them is skipped."""
    store = PolarisVectorStore(tmp_path / "p.db", config=config())
    texts = [f"Note {i}: sessions expire after {i} hours." for i in range(8)]
    VectorStoreIndex([TextNode(id_=f"n{i}", text=t) for i, t in enumerate(texts)], embed_model=embed,
                     storage_context=StorageContext.from_defaults(vector_store=store))
    assert store.client.model.model_id == "unknown"
    store.close()
    conn = engine_db.connect(tmp_path / "p.db")
    conn.execute("UPDATE chunks SET embedding = ? WHERE node_id = 'n0'", (np.full(DIM, np.nan, "<f4").tobytes(),))
    conn.execute("UPDATE chunks SET embedding = ? WHERE node_id = 'n7'", (np.zeros(DIM, "<f4").tobytes(),))
    conn.close()
    with PolarisIndex(tmp_path / "p.db", config=config()) as index:
        hits = index.search("when do sessions expire", mode="vector", unit="chunk", top_k=10)
        assert index.store.model.model_id == MODEL  # proven on the good rows
        assert sorted(h.node_id for h in hits) == [f"n{i}" for i in range(1, 7)]


# -- polaris status --check, and the command line over a file with bad rows ----------------------
def polaris(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg")})


def test_status_check_names_every_bad_row_and_the_command_line_still_searches(db) -> None:
    cwd = db.parent
    (cwd / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    clean = polaris("status", "--check", "--json", cwd=cwd)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["vectors"] == {"skipped": 0, "rows": []}
    top = clean_top(db, k=8)
    kinds = ["nan", "zeros", "null", "json text", "chunks_vec nan"]
    for kind, (chunk_id, _) in zip(kinds, top):
        corrupt(db, kind, chunk_id)
    corrupt(db, "chunks_vec orphan", top[-1][0])
    report = polaris("status", "--check", "--json", cwd=cwd)
    assert report.returncode == 1 and "6 rows that vector search skips" in report.stderr
    assert "Search still answers" in report.stderr and "polaris remove PATH" in report.stderr
    rows = json.loads(report.stdout)["vectors"]["rows"]
    assert [(r["chunk_id"], r["node_id"], r["table"]) for r in rows] == [
        *sorted([(c, n, "chunks.embedding") for c, n in top[:4]] + [(top[4][0], top[4][1], "chunks_vec")]),
        (10**6, None, "chunks_vec")]
    assert all(r["document"] for r in rows[:5])
    problems = {r["chunk_id"]: r["problem"] for r in rows}
    assert "NaN" in problems[top[0][0]] and "all zeros" in problems[top[1][0]]
    assert "NULL" in problems[top[2][0]] and "text" in problems[top[3][0]]
    text = polaris("status", "--check", cwd=cwd)
    assert f"chunk {top[0][0]} (node {top[0][1]}, " in text.stdout and "6 rows skipped by vector search" in text.stdout
    for mode in ("vector", "hybrid", "bm25"):
        found = polaris("search", QUERY, "--mode", mode, "--json", "-k", "5", cwd=cwd)
        assert found.returncode == 0, found.stderr
        assert len(json.loads(found.stdout)) == 5
    found = polaris("search", QUERY, "--mode", "vector", "--json", "-k", "3", cwd=cwd)
    assert top[0][1] not in [h["node_id"] for h in json.loads(found.stdout)]
    assert (state(db)["documents"].__len__(), len(state(db)["nodes"])) == (11, 59)
