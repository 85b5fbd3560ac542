"""The sign bits on Postgres (#26): kept by triggers for every write, and a long-lived reader
that holds them chooses the same candidates as the file's, so both backends answer alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llama_index_polaris.engine.storage import signbits
from llama_index_polaris.engine.storage.signbits import pack_signs
from llama_index_polaris.engine.storage.scope import Scope, resolve_scope
from llama_index_polaris.engine.sqlite.bits import VectorCache
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord
from test_ann import MODEL, PER_DOC, real, store_of  # noqa: F401  (the module fixture of real vectors)

psycopg = pytest.importorskip("psycopg")
from llama_index_polaris.engine.postgres.bits import PgVectorCache, file_order  # noqa: E402
from llama_index_polaris.engine.postgres.store import PgStore  # noqa: E402
from llama_index_polaris.engine.storage.records import ModelBinding  # noqa: E402


def server_bits(uri: str) -> tuple[list[int], np.ndarray, list[str], np.ndarray]:
    """(ids, bits as the file packs them, documents, float32 vectors) of every chunk with a vector."""
    with psycopg.connect(uri) as conn:
        rows = conn.execute("SELECT b.id, substr(varbit_send(b.bits), 5), b.document_id, c.embedding::real[]"
                            " FROM chunks_bits b JOIN chunks c ON c.id = b.id ORDER BY b.id").fetchall()
        with_vectors = conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()[0]
    assert len(rows) == with_vectors  # one row per chunk with a vector, none for the others
    bits = file_order(b"".join(r[1] for r in rows), len(rows))
    return [r[0] for r in rows], bits, [r[2] for r in rows], np.array([r[3] for r in rows], dtype=np.float32)


@pytest.fixture
def targets(pg_server: str, tmp_path: Path):
    """New databases on the session's server (``conftest.Targets``), dropped afterwards."""
    from conftest import Targets

    made = Targets("postgres", tmp_path, pg_server)
    yield made
    made.close()


def version(uri: str) -> int:
    """The version of the vectors; checks on the way that ``vectors`` counts the chunks with one."""
    with psycopg.connect(uri) as conn:
        version, vectors = conn.execute("SELECT version, vectors FROM chunks_version").fetchone()
        assert vectors == conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()[0]
        return version


def test_every_write_keeps_the_bits_and_counts_a_version(pg_uri: str) -> None:
    rng = np.random.default_rng(3)
    store = PgStore(pg_uri)
    store.bind_model(ModelBinding(MODEL, 16))
    v0 = version(pg_uri)
    store.upsert_document(DocumentRecord("a", path="a.md"), [ChunkRecord(f"a{i}", f"text {i}", ordinal=i) for i in range(5)],
                          rng.standard_normal((5, 16)).astype(np.float32))
    store.upsert_document(DocumentRecord("b", path="b.md"), [ChunkRecord("b0", "other", ordinal=0)],
                          rng.standard_normal((1, 16)).astype(np.float32))
    ids, bits, docs, vectors = server_bits(pg_uri)
    np.testing.assert_array_equal(bits, pack_signs(vectors))
    assert docs == ["a"] * 5 + ["b"]
    v1 = version(pg_uri)
    assert v1 > v0
    store.set_status("a", "stale", "gone")  # no vector, no chunk's document changed: the bits stand
    store.put_document(DocumentRecord("c", path="c.md"))
    assert version(pg_uri) == v1
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # writes around the Store are kept too
        conn.execute("DELETE FROM chunks WHERE node_id = 'nothing'")  # a statement that changes no chunk
        assert conn.execute("SELECT version FROM chunks_version").fetchone()[0] == v1
        conn.execute("UPDATE chunks SET bm25_length = bm25_length + 1")  # neither vector nor document: version stands
        assert conn.execute("SELECT version FROM chunks_version").fetchone()[0] == v1
        conn.execute("UPDATE chunks SET embedding = %s::vector WHERE node_id = 'a1'", (str([-1.0, 2.0] * 8),))
        conn.execute("UPDATE chunks SET embedding = NULL WHERE node_id = 'a2'")
        conn.execute("UPDATE chunks SET document_id = 'c' WHERE node_id = 'a3'")
        conn.execute("DELETE FROM chunks WHERE node_id = 'a4'")
    ids, bits, docs, vectors = server_bits(pg_uri)
    np.testing.assert_array_equal(bits, pack_signs(vectors))
    assert docs == ["a", "a", "c", "b"]
    found, floats = store.stored_vectors(ids, 16)  # the re-scoring reads chunks_vectors, kept alike
    assert found.tolist() == ids and np.array_equal(floats, vectors)
    assert np.array_equal(vectors[1], np.array([-1.0, 2.0] * 8, dtype=np.float32))
    assert version(pg_uri) == v1 + 4
    assert not [p for p in store.quick_check() if "chunks_bits" in p]  # (the BM25 counts were bypassed above)
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # bits changed behind the triggers' back are reported
        conn.execute("ALTER TABLE chunks DISABLE TRIGGER USER")
        conn.execute("UPDATE chunks SET embedding = %s::vector WHERE node_id = 'a0'", (str([1.0, -2.0] * 8),))
        conn.execute("ALTER TABLE chunks ENABLE TRIGGER USER")
    assert [p for p in store.quick_check() if "chunks_bits" in p] == [
        "chunks_bits holds 4 rows (1 not the signs or document of their chunk), chunks_vectors 4 (1 not their chunk's"
        " vector) and chunks_version counts 4 vectors, for 4 chunks with a vector"]
    v2 = version(pg_uri)
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # a document's chunks go by its foreign key's cascade
        conn.execute("DELETE FROM documents WHERE id = 'b'")
    assert version(pg_uri) == v2 + 1 and len(server_bits(pg_uri)[0]) == 3
    store.clear()
    assert server_bits(pg_uri)[0] == []
    store.close()


def test_the_long_lived_reader_chooses_the_files_candidates(tmp_path: Path, real, targets) -> None:  # noqa: F811
    """The same sentences in a file and in its copy on the server: the file's cache and the
    server's give the same ids and distances for every query and scope, with a small over-fetch
    (so the candidates chosen decide), and both stay near exact search."""
    sentences, vectors, queries = real
    store = store_of(tmp_path / "p.db", sentences, vectors)
    store.delete_nodes(["d3:4", "d5:0", "d8:19"])  # deleted slots in the file's blocks: its rows are not in id order
    uri = targets.copy_of(tmp_path / "p.db")
    server = PgStore(uri, readonly=True)
    theirs, mine = VectorCache(store, min_chunks=0), PgVectorCache(server, min_chunks=0)
    assert theirs.refresh()
    with server.read():
        assert mine.refresh()
    assert mine.nbytes / len(sentences) <= 100
    scopes = {"all": (Scope(), Scope()),
              "collection": (resolve_scope(store.conn, collections=["a"]), server.resolve_scope(collections=["a"])),
              "documents": (resolve_scope(store.conn, documents=["doc4", "doc9", "doc30"]),
                            server.resolve_scope(documents=["doc4", "doc9", "doc30"]))}
    for name, (file_scope, server_scope) in scopes.items():
        for fetch in (20, 100):
            for q in queries:
                with store.read():
                    expected = theirs.knn(q, 10, file_scope, fetch=fetch)
                with server.read():
                    got = mine.knn(q, 10, server_scope, fetch=fetch)
                assert got == expected, (name, fetch)
    store.close()
    server.close()


def test_a_one_shot_reader_on_the_server_chooses_the_same_candidates(tmp_path: Path, real, targets, monkeypatch) -> None:  # noqa: F811
    """Without HNSW, the server's own KNN (a one-shot process) counts the sign bits itself and
    answers what the file's one-shot search answers, in every scope; below the threshold both are exact."""
    from llama_index_polaris.engine.sqlite.ann import ann_knn
    from llama_index_polaris.engine.sqlite.vector import exact_knn

    sentences, vectors, queries = real
    store = store_of(tmp_path / "p.db", sentences, vectors)
    store.delete_nodes(["d3:4", "d5:0", "d8:19"])
    uri = targets.copy_of(tmp_path / "p.db")
    server = PgStore(uri, readonly=True)
    scopes = {"all": (Scope(), Scope()),
              "collection": (resolve_scope(store.conn, collections=["a"]), server.resolve_scope(collections=["a"])),
              "small": (resolve_scope(store.conn, documents=["doc4", "doc9"]), server.resolve_scope(documents=["doc4", "doc9"]))}
    for exact_below, fetch_k in ((1_000, 10), (1_000, 1), (1_000_000, 10)):
        monkeypatch.setattr(signbits, "EXACT_BELOW", exact_below)
        monkeypatch.setattr(signbits, "MIN_FETCH", 40)  # candidates decide, at this size
        for name, (file_scope, server_scope) in scopes.items():
            for q in queries[:20]:
                with store.read():
                    expected = ann_knn(store.conn, q, 10, file_scope, fetch_k=fetch_k) or exact_knn(store.conn, q, 10, file_scope)
                with server.read():
                    got = server.knn(q, 10, server_scope, fetch_k=fetch_k)
                assert [i for i, _ in got] == [i for i, _ in expected], (name, exact_below, fetch_k)
                assert [d for _, d in got] == pytest.approx([d for _, d in expected], abs=1e-6)
    store.close()
    server.close()


def test_the_knn_beside_the_bm25_list_gives_the_one_connection_answer(tmp_path: Path, real, targets,  # noqa: F811
                                                                      monkeypatch) -> None:
    """From ``PARALLEL_FROM`` vectors a one-shot search counts the sign bits on a second
    connection while the BM25 list is read on the first: every query, every scope, the same
    hits and scores as on one connection; a KNN that would be exact runs on the first."""
    from llama_index_polaris.engine.postgres import reads
    from test_ann import _searcher

    sentences, vectors, queries = real
    store_of(tmp_path / "p.db", sentences, vectors).close()
    uri = targets.copy_of(tmp_path / "p.db")
    server = PgStore(uri, readonly=True)
    searcher = _searcher(server)
    texts = [s[: len(s) // 2] for s in sentences[7::50][:12]]
    scopes = ({}, {"collections": ["a"]}, {"documents": ["doc4", "doc9"]})
    for exact_below in (0, 10**9):
        monkeypatch.setattr(signbits, "EXACT_BELOW", exact_below)
        answers = {}
        for parallel in (False, True):
            monkeypatch.setattr(reads, "PARALLEL_FROM", 0 if parallel else 10**12)
            answers[parallel] = [[(h.chunk_id, h.score) for h in searcher.search(t, top_k=10, query_vector=q, **scope)]
                                 for scope in scopes for t, q in zip(texts, queries)]
        assert answers[True] == answers[False], exact_below
        assert all(answers[True])
    assert server._twin is not None and not server._twin.closed  # the second connection was used
    assert server._twin.info.transaction_status.name == "IDLE"  # each query's snapshot on it ended
    server.close()
    assert server._twin is None and server._beside is None


def test_the_knn_beside_sees_the_readers_snapshot_not_a_later_commit(tmp_path: Path, real, targets,  # noqa: F811
                                                                     monkeypatch) -> None:
    """The second connection imports the reader's snapshot: a chunk committed after the reader's
    snapshot began is not among its neighbours (it would be the first: its vector is the query),
    and the next snapshot finds it, on the second connection again."""
    from llama_index_polaris.engine.postgres import reads

    sentences, vectors, queries = real
    monkeypatch.setattr(signbits, "EXACT_BELOW", 0)
    monkeypatch.setattr(reads, "PARALLEL_FROM", 0)
    store_of(tmp_path / "p.db", sentences, vectors).close()
    uri = targets.copy_of(tmp_path / "p.db")
    reader, writer = PgStore(uri, readonly=True), PgStore(uri)
    q = queries[0]
    used = []
    real_beside = reader._knn_beside
    monkeypatch.setattr(reader, "_knn_beside", lambda *a: used.append(1) or real_beside(*a))
    with reader.read():
        before = reader.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]  # the snapshot begins
        writer.upsert_document(DocumentRecord("late"), [ChunkRecord("late:0", "late", ordinal=0)], q.reshape(1, -1))
        hits = reader.start_knn(q, 10, Scope(), fetch_k=10)()
        assert reader.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == before
    late_id = writer.conn.execute("SELECT id FROM chunks WHERE node_id = 'late:0'").fetchone()[0]
    assert used == [1] and hits and late_id not in {cid for cid, _ in hits}
    with reader.read():
        assert reader.start_knn(q, 10, Scope(), fetch_k=10)()[0][0] == late_id
    assert used == [1, 1]
    reader.close()
    writer.close()


def test_a_second_connection_that_fails_leaves_the_knn_to_the_first(tmp_path: Path, real, targets,  # noqa: F811
                                                                    monkeypatch) -> None:
    """A second connection that cannot be made (or is refused) costs nothing but the overlap: the
    KNN runs on the reader's own connection and answers the same."""
    from llama_index_polaris.engine.postgres import reads

    sentences, vectors, queries = real
    monkeypatch.setattr(signbits, "EXACT_BELOW", 0)
    store_of(tmp_path / "p.db", sentences, vectors).close()
    uri = targets.copy_of(tmp_path / "p.db")
    server = PgStore(uri, readonly=True)
    with server.read():
        expected = server.knn(queries[1], 10, Scope(), fetch_k=10)
    monkeypatch.setattr(reads, "PARALLEL_FROM", 0)
    monkeypatch.setattr(reads, "connect", lambda uri: (_ for _ in ()).throw(OSError("no more connections")))
    with server.read():
        assert server.start_knn(queries[1], 10, Scope(), fetch_k=10)() == expected
    assert server._twin is None
    server.close()


def test_a_write_is_seen_by_the_next_query_and_the_bits_reload(tmp_path: Path, real, targets) -> None:  # noqa: F811
    """Another process adds the nearest chunk: the reader's next snapshot sees a new version and
    catches up with that one chunk in the query's own snapshot (no load, the cache answers). A
    TRUNCATE logs nothing: the server's own KNN answers until the bits have loaded again."""
    sentences, vectors, queries = real
    store_of(tmp_path / "p.db", sentences[:400], vectors[:400]).close()
    uri = targets.copy_of(tmp_path / "p.db")
    reader = PgStore(uri, readonly=True)
    cache = PgVectorCache(reader, min_chunks=0, background=True)
    with reader.read():
        assert not cache.refresh()  # loading: the server answers meanwhile
    assert cache.wait()
    with reader.read():
        assert cache.refresh()
        before = cache.knn(queries[0], 5, Scope())
    writer = PgStore(uri)
    writer.upsert_document(DocumentRecord("new", path="new.md"), [ChunkRecord("new0", "the nearest", ordinal=0)],
                           queries[0][None, :])
    with reader.read():
        assert cache.refresh() and cache.caught_up == 1 and cache._loader.is_alive() is False
        got = cache.knn(queries[0], 5, Scope())
        server = reader.knn(queries[0], 5, Scope())
    assert got == server and got[0][1] == pytest.approx(0.0, abs=1e-6) and got[1:] == before[:4]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("TRUNCATE chunks CASCADE")
    with reader.read():
        assert not cache.refresh()  # nothing logged to catch up from: a load, the server meanwhile
        assert reader.knn(queries[0], 5, Scope()) == []
    assert cache.wait()
    with reader.read():
        assert cache.refresh() and cache.knn(queries[0], 5, Scope()) == []
    writer.close()
    reader.close()


def held_rows(cache: PgVectorCache) -> dict[int, tuple[bytes, str]]:
    """What a cache holds, row by row: chunk id -> (its bits, its document)."""
    held = cache._held
    names = {code: name for name, code in held.codes.items()}
    live = np.ones(len(held.bits.ids), dtype=bool) if held.bits.live is None else held.bits.live
    return {int(i): (b.tobytes(), names[int(d)]) for i, b, d, alive
            in zip(held.bits.ids, held.bits.bits, held.docs, live) if alive}


def test_a_reader_catches_up_with_every_kind_of_write_as_a_fresh_load(tmp_path: Path, real, targets) -> None:  # noqa: F811
    """Inserts, deletes, a vector replaced in place, a chunk moved to another document, a vector
    set to NULL, a document deleted by its cascade, from the Store and from raw SQL, several
    versions at once: after each, the caught-up cache holds what a fresh load holds, and answers
    every scope as the server does; the views of an older state never change."""
    sentences, vectors, queries = real
    store_of(tmp_path / "p.db", sentences[:300], vectors[:300]).close()
    uri = targets.copy_of(tmp_path / "p.db")
    reader, writer = PgStore(uri, readonly=True), PgStore(uri)
    cache = PgVectorCache(reader, min_chunks=0)
    with reader.read():
        assert cache.refresh()
    rng = np.random.default_rng(5)

    def add(name: str, n: int) -> None:
        writer.upsert_document(DocumentRecord(name, path=f"{name}.md", collection="a"),
                               [ChunkRecord(f"{name}:{i}", f"text {i}", ordinal=i) for i in range(n)],
                               vectors[rng.integers(0, 300, n)] + rng.normal(0, 0.01, (n, vectors.shape[1])))

    def raw(statement: str, *args: object) -> None:
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(statement, args)

    some = lambda: str(rng.standard_normal(vectors.shape[1]).tolist())  # noqa: E731
    writes = [
        lambda: add("n1", 7),
        lambda: add("n1", 3),  # the document written again: its old chunks go, new ones come
        lambda: raw("UPDATE chunks SET embedding = %s::vector WHERE node_id = 'd2:3'", some()),  # an id held, in place
        lambda: raw("UPDATE chunks SET document_id = 'doc1' WHERE node_id = 'd4:0'"),
        lambda: raw("UPDATE chunks SET embedding = NULL WHERE node_id = 'd5:1'"),
        lambda: raw("DELETE FROM documents WHERE id = 'doc6'"),
        lambda: (add("n2", 4), add("n3", 2), writer.delete_document("n2")),  # three versions and more at once
        lambda: raw("UPDATE chunks SET embedding = %s::vector WHERE node_id = 'd5:1'", some()),  # back, same id
    ]
    caught = 0
    for step, write in enumerate(writes):
        old = cache._held
        old_rows = held_rows(cache)
        write()
        fresh = PgVectorCache(reader, min_chunks=0)
        with reader.read():
            assert cache.refresh(), step
            caught += 1
            assert cache.caught_up == caught and fresh.refresh()
            for scope in (Scope(), reader.resolve_scope(collections=["a"]),
                          reader.resolve_scope(documents=["doc1", "doc2", "n1"])):
                for q in queries[:5]:
                    assert cache.knn(q, 10, scope, fetch=40) == fresh.knn(q, 10, scope, fetch=40), step
        assert held_rows(cache) == held_rows(fresh), step
        cache._held, now = old, cache._held
        assert held_rows(cache) == old_rows, step  # an older state's views saw nothing of the new rows
        cache._held = now
    writer.close()
    reader.close()


def test_catching_up_equals_making_the_arrays_again() -> None:
    """``catch_up`` (the pure part): any mix of new ids, gone ids and ids written again, applied
    in turn, holds the rows a load of the result would, and packs itself when a quarter is dead."""
    from hypothesis import given, settings, strategies as st

    from llama_index_polaris.engine.postgres.bits import catch_up, held_arrays

    def arrays(rows: dict[int, tuple[int, str]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
        ids = np.array(sorted(rows), dtype=np.int64)
        return ids, np.array([[rows[i][0]] for i in ids], dtype=np.uint64).reshape(-1, 1), [rows[i][1] for i in ids]

    def as_rows(held) -> dict[int, tuple[int, str]]:
        names = {c: n for n, c in held.codes.items()}
        live = np.ones(len(held.bits.ids), bool) if held.bits.live is None else held.bits.live
        return {int(i): (int(b[0]), names[int(d)]) for i, b, d, a in zip(held.bits.ids, held.bits.bits, held.docs, live) if a}

    step = st.tuples(st.lists(st.integers(0, 60), max_size=12), st.lists(st.integers(0, 90), max_size=12),
                     st.integers(0, 2**63 - 1), st.sampled_from(["a", "b", "c"]))

    @settings(max_examples=150, deadline=None)
    @given(st.dictionaries(st.integers(0, 60), st.tuples(st.integers(0, 2**63 - 1), st.sampled_from(["a", "b"])),
                           max_size=40), st.lists(step, max_size=6))
    def check(start: dict, steps: list) -> None:
        ids, bits, docs = arrays(start)
        codes: dict[str, int] = {}
        held = held_arrays((0, 0), ids, bits, np.array([codes.setdefault(d, len(codes)) for d in docs], np.int32), codes)
        rows = dict(start)
        for version, (gone, written, word, doc) in enumerate(steps, 1):
            top = max(rows, default=0)
            for i in gone:
                rows.pop(i, None)
            for i in written:
                rows[i if i <= 60 else top + i] = (word, doc)  # a new id above all, or one written again
            changed = np.array(sorted(set(gone) | {i if i <= 60 else top + i for i in written}), dtype=np.int64)
            now = {i: rows[i] for i in changed.tolist() if i in rows}
            before = as_rows(held)
            new = catch_up(held, (0, version), changed, *arrays(now))
            assert as_rows(held) == before  # the older state is untouched
            held = new
            assert as_rows(held) == rows
            assert np.all(np.diff(held.bits.ids) > 0) or held.bits.live is not None
            live = len(rows)
            assert (len(held.bits.ids) - live) * 4 <= len(held.bits.ids) + 12  # never much more than a quarter dead

    check()


def test_the_index_uses_the_bits_only_for_long_lived_processes(tmp_path: Path, real, targets, monkeypatch) -> None:  # noqa: F811
    """A PolarisIndex on a server holds the bits once the index passes the threshold, as the file's
    does; its hybrid hits are the file's, and a one-shot process holds nothing."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex
    from llama_index_polaris.engine.sqlite import bits as vector_cache

    monkeypatch.setattr(signbits, "EXACT_BELOW", 1_000)
    monkeypatch.setattr(vector_cache, "MIN_CHUNKS", 1_000)
    sentences, vectors, queries = real
    store_of(tmp_path / "p.db", sentences, vectors).close()
    uri = targets.copy_of(tmp_path / "p.db")
    cfg = load_config(tmp_path, use_user_config=False)
    file_ix, server_ix = PolarisIndex(tmp_path / "p.db", config=cfg, readonly=True), PolarisIndex(uri, config=cfg, readonly=True)
    assert PolarisIndex(uri, config=cfg, readonly=True, fast_start=True).vector_cache is None
    assert isinstance(server_ix.vector_cache, PgVectorCache)
    for ix in (file_ix, server_ix):
        with ix.store.read():
            ix.vector_cache.refresh()
        assert ix.vector_cache.wait()
    for i, q in enumerate(queries[:15]):
        text = sentences[7 + 50 * i][:40]
        hits = [ix.searcher().search(text, top_k=10, query_vector=q) for ix in (file_ix, server_ix)]
        assert [(h.node_id, round(h.score, 9)) for h in hits[0]] == [(h.node_id, round(h.score, 9)) for h in hits[1]]
        assert [h.explain.vector_rank for h in hits[0]] == [h.explain.vector_rank for h in hits[1]]
    file_ix.close()
    server_ix.close()


def test_candidates_at_a_tie_are_the_smallest_ids_in_any_order() -> None:
    rng = np.random.default_rng(0)
    distances = rng.integers(0, 6, 500).astype(np.uint16)
    ids = rng.permutation(10_000)[:500].astype(np.int64)
    for fetch in (1, 37, 100, 499):
        chosen = set(ids[signbits.nearest_rows(distances, fetch, ids)].tolist())
        expected = set(ids[np.lexsort((ids, distances))][:fetch].tolist())
        assert chosen == expected
        order = rng.permutation(500)  # the same rows held in another order choose the same
        assert set(ids[order][signbits.nearest_rows(distances[order], fetch, ids[order])].tolist()) == expected


def test_a_long_lived_reader_reads_the_longest_lists_ahead(pg_uri: str, tmp_path: Path) -> None:
    """The lists of common terms (stop words aside) are read ahead on a connection of their own,
    longest first, to half the budget, and score as a list read afresh; a one-shot index reads none."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex
    from llama_index_polaris.engine.postgres import bm25 as pg_bm25

    store = PgStore(pg_uri)
    store.bind_model(ModelBinding(MODEL, 8))
    chunks = [ChunkRecord(f"a-{i}", "the session token " + ("refresh " if i % 2 else "") + f"word{i}", ordinal=i)
              for i in range(40)]
    store.upsert_document(DocumentRecord("a", path="a.md"), chunks, np.random.default_rng(0).standard_normal((40, 8)))
    store._postings = pg_bm25.Postings(budget=180)
    store.warm_postings(min_df=10).join(30)
    assert set(store._postings._kept) == {"session", "token"}  # 40 postings each; "refresh" (20) would pass half the budget
    assert store.warm_postings() is None  # once per store
    with store.read():
        assert store.bm25("session refresh", 10, Scope()) == pg_bm25.bm25(
            store.conn, store.tokenizer(), "session refresh", 10, Scope(), pg_bm25.Postings(0))
    store.close()
    cfg = load_config(tmp_path, use_user_config=False)
    one_shot, long_lived = PolarisIndex(pg_uri, config=cfg, fast_start=True), PolarisIndex(pg_uri, config=cfg)
    assert one_shot.vector_cache is None and one_shot.store._warming is None
    assert long_lived.vector_cache is not None and long_lived.store._warming is not None
    one_shot.close()
    long_lived.close()
