"""BM25 posting lists in the file (#17): FTS5's own scores, kept current by every write path,
consistent after a crash, and never used when they are behind the chunks."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.sqlite import bm25_postings as postings
from llama_index_polaris.engine.sqlite import postings as lists
from llama_index_polaris.engine.sqlite.bm25 import bm25
from llama_index_polaris.engine.storage.scope import Scope
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store
from polaris_testing import REPO, kill_mid_transaction
from test_bm25_cache import VOCAB, assert_same, corpus_text

COMMON = 15  # a term in this many chunks gets a posting list (1,000 in the engine)
SMALL_BLOCK = 16  # chunk ids per row (4,096 in the engine): many blocks on a small file


@pytest.fixture(autouse=True)
def small_lists(monkeypatch):
    monkeypatch.setattr(lists, "COMMON_DF", COMMON)
    monkeypatch.setattr(lists, "BLOCK", SMALL_BLOCK)


def chunks_for(rng: random.Random, d: int, n: int, tag: str = "") -> list[ChunkRecord]:
    return [ChunkRecord(f"d{d}c{i}", corpus_text(rng, rng.randint(0, 40)) + tag, i,
                        heading_path=f"Guide > {rng.choice(VOCAB)}") for i in range(n)]


def build(path: Path, n_docs: int = 30, per_doc: int = 10, seed: int = 0) -> Store:
    rng = random.Random(seed)
    store = Store(path)
    store.bind_model(ModelBinding("fake", 4))
    for d in range(n_docs):
        store.upsert_document(DocumentRecord(f"doc{d}", collection="a" if d % 2 else "b"), chunks_for(rng, d, per_doc),
                              np.random.default_rng(d).normal(size=(per_doc, 4)).astype(np.float32))
    return store


def assert_current(conn, every_common_term: bool = False) -> None:
    """Every kept list is FTS5's own for its term (and, when asked, every common term has
    one: true after a rebuild; writes give a term its list on a schedule), every length is
    FTS5's docsize, and nothing is dirty."""
    assert conn.execute("SELECT count(*) FROM chunks_bm25_dirty").fetchone()[0] == 0
    assert postings.usable(conn)
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.t_row USING fts5vocab(main, chunks_fts, row)")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.t_inst USING fts5vocab(main, chunks_fts, instance)")
    stop = lists.Tokenizer(lists.fts_tokenizer(conn)).stop_terms
    kept = {r[0] for r in conn.execute("SELECT term FROM chunks_bm25_terms")}
    common = {t for t, df in conn.execute("SELECT term, doc FROM temp.t_row") if df >= COMMON and t not in stop}
    assert not kept & stop
    if every_common_term:
        assert common <= kept
    assert {r[0] for r in conn.execute("SELECT DISTINCT term FROM chunks_bm25")} <= kept
    for term in kept:
        expected = conn.execute("SELECT doc, count(*) FROM temp.t_inst WHERE term = ? GROUP BY doc ORDER BY doc",
                                (term,)).fetchall()
        ids, tf = postings.posting(conn, term)
        assert list(zip(ids.tolist(), tf.tolist())) == expected, term
    lengths = {}
    for block, blob in conn.execute("SELECT block, lengths FROM chunks_bm25_lengths"):
        for offset, n in enumerate(lists._decode_lengths(blob).tolist()):
            if n:
                lengths[block * SMALL_BLOCK + offset] = n
    docsize = {i: sum(lists.varints(sz)) for i, sz in conn.execute("SELECT id, sz FROM chunks_fts_docsize")}
    assert lengths == {i: n for i, n in docsize.items() if n}


QUERIES = ["session token index", "zebra quartz session", "cache chunks headings", "sessions session token",
           "the what", "rrf_k top-k cosine", 'NEAR "stemmer" -porter', "guide", "zzzunknown", "café CAFE cafe"]


@pytest.fixture
def store(tmp_path):
    s = build(tmp_path / "p.db")
    yield s
    s.close()


def test_the_file_keeps_lists_for_common_terms_only(store):
    assert_current(store.conn)
    with store._write():
        lists.rebuild(store.conn)
    assert_current(store.conn, every_common_term=True)
    kept = {r[0] for r in store.conn.execute("SELECT term FROM chunks_bm25_terms")}
    assert {"session", "token", "index"} <= kept  # stemmed, as FTS5 stores them
    rare = {t for t, df in store.conn.execute("SELECT term, doc FROM temp.t_row") if df < COMMON}
    assert rare and not rare & kept and "guid" in kept  # "Guide" in every heading path
    assert store.conn.execute("SELECT count(DISTINCT block) FROM chunks_bm25 WHERE term = 'session'").fetchone()[0] > 5


def test_stop_terms_are_whole_stop_words_only():
    stop = lists.Tokenizer("porter unicode61 remove_diacritics 2").stop_terms
    assert {"the", "what", "doe"} <= stop  # "does", stemmed
    assert "t" not in stop  # from "don't": but "T cell" searches "t"


words = st.sampled_from(VOCAB + ["the", "and", "what", "NEAR", "-", '"', "*", ":", "(", "zzzunknown", "Sessions", "CAFE"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(words, min_size=0, max_size=12).map(" ".join), st.sampled_from([1, 5, 30, 500]))
def test_same_answer_as_fts5_for_any_query(store, query, limit):
    found = postings.bm25(store.conn, store.tokenizer(), query, limit)
    assert_same(bm25(store.conn, query, limit) if found is None else found, bm25(store.conn, query, limit))


def test_same_answer_in_every_scope(store):
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")]
    scopes = [Scope(), Scope(document_ids=("doc1", "doc7", "nope")), Scope(chunk_ids=tuple(ids[::7])),
              Scope(document_ids=("doc2",), chunk_ids=tuple(ids[15:40])), Scope(document_ids=())]
    answered = 0
    for query in QUERIES:
        for scope in scopes:
            found = postings.bm25(store.conn, store.tokenizer(), query, 10, scope)
            answered += found is not None
            assert_same(bm25(store.conn, query, 10, scope) if found is None else found, bm25(store.conn, query, 10, scope))
    assert answered >= 30  # the lists really answered most of these


def test_a_word_twice_through_one_term_counts_twice_as_in_fts5(store):
    found = postings.bm25(store.conn, store.tokenizer(), "sessions session tokens token", 20)
    assert found is not None
    assert_same(found, bm25(store.conn, "sessions session tokens token", 20))


ops = st.lists(st.tuples(st.sampled_from(["upsert", "delete", "nodes", "rename", "sql-flushed"]),
                         st.integers(0, 40), st.integers(0, 14)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_every_write_path_keeps_the_lists_current(tmp_path_factory, steps):
    store = build(tmp_path_factory.mktemp("w") / "p.db", n_docs=12)
    rng = random.Random(len(steps))
    try:
        for op, d, n in steps:
            if op == "upsert":  # add a document, or replace one's chunks (deletes and inserts)
                store.upsert_document(DocumentRecord(f"doc{d}"), chunks_for(rng, d, n, " session"),
                                      np.ones((n, 4), dtype=np.float32))
            elif op == "delete":
                store.delete_document(f"doc{d}")
            elif op == "nodes":
                store.delete_nodes([f"d{d}c{i}" for i in range(n)])
            elif op == "rename":
                store.set_collection_root("a", f"/tmp/root{d}")
            else:  # text changed in SQL, then any Store write brings the lists up to date
                store.conn.execute("UPDATE chunks SET text = text || ' quartz session' WHERE id % 3 = ?", (d % 3,))
                assert not postings.usable(store.conn)
                assert postings.bm25(store.conn, store.tokenizer(), "session quartz", 5) is None
                store.put_document(DocumentRecord("touch"))
            assert_current(store.conn)
        for query in QUERIES[:4]:
            found = postings.bm25(store.conn, store.tokenizer(), query, 30)
            assert_same(bm25(store.conn, query, 30) if found is None else found, bm25(store.conn, query, 30))
    finally:
        store.close()


def test_a_write_past_the_store_is_never_read_as_current(store):
    """Text changed by another program: search answers FTS5's scores until a Store write."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.search.pipeline import Searcher

    store.conn.execute("UPDATE chunks SET text = 'session session session' WHERE id % 2 = 0")
    assert not postings.usable(store.conn)
    searcher = Searcher(store, None, load_config(use_user_config=False))
    hits = searcher.search("session token", top_k=10, mode="bm25", unit="chunk")
    assert [h.chunk_id for h in hits] == [i for i, _ in bm25(store.conn, "session token", 10)]
    store.delete_document("doc3")
    assert_current(store.conn)


def test_a_big_write_rebuilds_and_clear_empties(store):
    store.delete_documents([f"doc{d}" for d in range(20)])  # two thirds of the chunks: rebuilt
    assert_current(store.conn)
    store.clear()
    assert_current(store.conn)
    assert store.conn.execute("SELECT count(*) FROM chunks_bm25").fetchone()[0] == 0
    assert store.conn.execute("SELECT count(*) FROM chunks_bm25_lengths").fetchone()[0] == 0


def test_a_new_tokenizer_rebuilds_the_lists(tmp_path):
    build(tmp_path / "p.db").close()
    with Store(tmp_path / "p.db", fts_tokenizer="unicode61") as store:  # no stemming now
        assert_current(store.conn)
        kept = {r[0] for r in store.conn.execute("SELECT term FROM chunks_bm25_terms")}
        assert "sessions" in kept or "tokens" in kept
        for query in QUERIES:
            found = postings.bm25(store.conn, store.tokenizer(), query, 10)
            assert_same(bm25(store.conn, query, 10) if found is None else found, bm25(store.conn, query, 10))


def test_an_older_file_gets_its_lists_built(tmp_path):
    path = tmp_path / "polaris.db"
    shutil.copy(REPO / "tests" / "fixtures" / "schema2.db", path)
    with Store(path) as store:
        assert_current(store.conn, every_common_term=True)


def test_a_term_that_becomes_common_gets_its_list(tmp_path):
    """Checked the 1st, 2nd, 4th ... time a process writes it: in a new process, at once."""
    store = build(tmp_path / "p.db")
    store.close()
    for n in range(3):  # "zymurgy" in 7, then 14, then 21 chunks: common (15) on the third write
        with Store(tmp_path / "p.db") as store:
            chunks = [ChunkRecord(f"z{n}:{i}", f"zymurgy brewing note {i}", i) for i in range(7)]
            store.upsert_document(DocumentRecord(f"z{n}"), chunks, np.ones((7, 4), dtype=np.float32))
            assert_current(store.conn)
            kept = {r[0] for r in store.conn.execute("SELECT term FROM chunks_bm25_terms")}
            assert ("zymurgi" in kept) == (n == 2)


CRASH_WRITER = r"""
import sys
import numpy as np
from llama_index_polaris.engine.sqlite import bm25_postings as postings
from llama_index_polaris.engine.sqlite import postings as lists
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, Store
lists.COMMON_DF, lists.BLOCK = 15, 16
store = Store(sys.argv[1])
real_flush = lists.flush
def flush(conn, tokenizer):
    real_flush(conn, tokenizer)  # the lists are written: die before COMMIT
    print("in-transaction", flush=True)
    import time
    time.sleep(60)
lists.flush = flush
chunks = [ChunkRecord(f"new:{i}", f"session token quartz {i}", ordinal=i) for i in range(40)]
store.upsert_document(DocumentRecord("doc0"), chunks, np.ones((40, 4), dtype="<f4"))
print("committed", flush=True)
"""


def test_sigkill_during_a_write_leaves_the_lists_as_they_were(tmp_path):
    path = tmp_path / "p.db"
    build(path).close()
    with Store(path) as store:
        before = [bm25(store.conn, q, 10) for q in QUERIES]
    kill_mid_transaction(tmp_path, CRASH_WRITER, path)
    with Store(path) as store:
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert_current(store.conn)
        for query, expected in zip(QUERIES, before):
            found = postings.bm25(store.conn, store.tokenizer(), query, 10)
            assert_same(expected if found is None else found, expected)


def test_the_llamaindex_door_keeps_the_lists(tmp_path):
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    from llama_index_polaris import PolarisVectorStore
    from llama_index_polaris.engine.config import load_config

    rng = random.Random(3)
    nodes = []
    for i in range(300):
        node = TextNode(id_=f"n{i}", text=corpus_text(rng, rng.randint(3, 30)), embedding=[1.0, 0.0, 0.0, 0.0])
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"ref{i // 20}")
        nodes.append(node)
    vs = PolarisVectorStore(tmp_path / "p.db", config=load_config(use_user_config=False))
    try:
        vs.add(nodes)
        assert_current(vs.client.conn)
        vs.delete("ref3")
        vs.delete_nodes(["n100", "n101"])
        assert_current(vs.client.conn)
        vs.clear()
        assert_current(vs.client.conn)
    finally:
        vs.close()


def test_a_batch_updates_the_lists_once_at_its_end(store):
    rng = random.Random(5)
    with store.batch():
        for d in range(3):
            store.upsert_document(DocumentRecord(f"doc{d}"), chunks_for(rng, d, 6, " session"), np.ones((6, 4), np.float32))
            assert not postings.usable(store.conn)  # committed, lists not yet: readers use FTS5
            assert postings.bm25(store.conn, store.tokenizer(), "session", 5) is None
    assert_current(store.conn)
    with pytest.raises(RuntimeError), store.batch():
        store.delete_document("doc5")
        raise RuntimeError("the caller failed half way")
    assert_current(store.conn)  # what was committed is counted all the same


def test_polaris_index_keeps_the_lists(tmp_path):
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(24):
        (docs / f"page{i}.md").write_text(f"# Page {i}\n\nSession tokens expire after {i} hours.\n", "utf-8")
    cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    with PolarisIndex(tmp_path / "p.db", config=cfg) as index:
        index.index_paths([docs])
        assert_current(index.store.conn)
        assert {"session", "token"} <= {r[0] for r in index.store.conn.execute("SELECT term FROM chunks_bm25_terms")}
        (docs / "page3.md").unlink()
        (docs / "page4.md").write_text("# Page 4\n\nRotated keys.\n", "utf-8")
        index.index_paths([docs])
        assert_current(index.store.conn)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(words, min_size=1, max_size=12).map(" ".join), st.sampled_from([1, 3, 10, 30, 500]),
       st.sampled_from([None, ("doc1", "doc7", "doc12", "doc20"), "every third chunk"]))
def test_skipping_the_terms_that_cannot_decide_the_top_gives_the_dense_answer_to_the_bit(store, monkeypatch, query,
                                                                                            limit, where):
    """MaxScore (``_top_pruned``) against scoring every posting: the same hits, the same floats."""
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")]
    scope = Scope() if where is None else (Scope(chunk_ids=tuple(ids[::3])) if where == "every third chunk"
                                           else Scope(document_ids=where))
    answers = []
    for prune_from in (10**12, 0):
        monkeypatch.setattr(postings, "PRUNE_FROM", prune_from)
        answers.append(postings.bm25(store.conn, store.tokenizer(), query, limit, scope))
    assert answers[1] == answers[0]
    if answers[0] is not None:
        assert_same(answers[0], bm25(store.conn, query, limit, scope))


def test_skipping_terms_really_skips_on_a_query_of_common_words(store, monkeypatch):
    """The test above would pass with a pruning that never prunes: here it must leave a term's
    postings partly unread for a query of one rare-ish and several very common words."""
    monkeypatch.setattr(postings, "PRUNE_FROM", 0)
    read = []
    real = postings._read
    monkeypatch.setattr(postings, "_read", lambda conn, term, blocks=None: read.append((term, blocks)) or real(conn, term, blocks))
    df = dict(store.conn.execute("SELECT term, count(*) FROM chunks_bm25 GROUP BY term"))
    found = postings.bm25(store.conn, store.tokenizer(), "zebra guide session token", 3)
    assert found is not None
    assert any(blocks is not None for _, blocks in read), read
    monkeypatch.setattr(postings, "PRUNE_FROM", 10**12)
    assert found == postings.bm25(store.conn, store.tokenizer(), "zebra guide session token", 3)
    assert df
