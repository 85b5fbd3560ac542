"""A document being re-indexed keeps answering at its last committed version (#34, item 5).

While `polaris index` (or watch, or the MCP reindex tool) writes a document's new version,
and after a crash that left it ``processing``, every scope answers with the version last
committed: no scope, a collection, the document by name, a metadata filter, the scope a door
is confined to. The new version answers once it commits, never half of it before. Both
backends, real files, the bundled model; the doors are the engine, the CLI and the MCP server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llama_index_polaris.engine.backends import open_store
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.storage.filters import Condition
from llama_index_polaris.engine.sqlite.store import DocumentRecord
from polaris_testing import fake_binding, make_chunks, project_toml, unit_vectors

POLARIS = str(Path(sys.executable).with_name("polaris"))
OLD = "# Gate keys\n\n## North gate\n\nThe marmalade key opens the north gate of the orchard.\n"
NEW = "# Gate keys\n\n## South gate\n\nThe quokka key opens the south gate of the orchard.\n"
OTHER = "# Deploys\n\nDeploys go out from the main branch after every check passes.\n"


def cli(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "XDG_CONFIG_HOME": str(root / ".xdg")})
    assert proc.returncode == 0, f"polaris {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
    return proc


def cli_documents(root: Path, query: str, *args: str) -> set[str]:
    """The documents `polaris search QUERY --mode bm25 ARGS --json` returns."""
    return {h["document"] for h in json.loads(cli(root, "search", query, "--mode", "bm25", "--json", *args).stdout)}


def config() -> Any:
    return load_config(use_user_config=False, model_id="all-minilm-l6-v2")


def answers(index: PolarisIndex, query: str, **scope: Any) -> dict[str, str]:
    """document path -> text of each BM25 hit for ``query`` in ``scope``."""
    return {h.document: h.text for h in index.search(query, mode="bm25", top_k=100, **scope)}


SCOPES = {  # every way a query can be confined to the document gate.md (of collection default)
    "none": {},
    "collection": {"collections": ["default"]},
    "document": {"documents": ["gate.md"]},
    "filter": {"filters": Condition("file_path", "==", "gate.md")},
    "within": {"within_collection": "default"},
    "collection and within": {"collections": ["default"], "within_collection": "default"},
}


def test_a_document_being_rewritten_answers_at_its_last_version_in_every_scope(tmp_path: Path,
                                                                             backend_target: str) -> None:
    root = tmp_path
    (root / "docs").mkdir()
    (root / "docs" / "gate.md").write_text(OLD)
    (root / "docs" / "deploy.md").write_text(OTHER)
    (root / "polaris.toml").write_text(project_toml(backend_target))
    with PolarisIndex(backend_target, config=config()) as writer:
        writer.index_paths([root / "docs"])
    (root / "docs" / "gate.md").write_text(NEW)
    seen: list[str] = []

    def mid_document(stage: str, done: int, total: int) -> None:
        """Runs in the writer between marking gate.md processing and writing its new version."""
        with PolarisIndex(backend_target, config=config(), readonly=True) as reader:
            doc = reader.store.files("default")["gate.md"]
            if doc.status != "processing" or seen:
                return
            seen.append(doc.status)
            for name, scope in SCOPES.items():
                got = answers(reader, "marmalade", **scope)
                assert "gate.md" in got and "north gate" in got["gate.md"], (name, got)
                assert "gate.md" not in answers(reader, "quokka", **scope), name  # not a line of it yet
        # the other doors, each a process of its own: the CLI confined to the collection and naming it
        assert "gate.md" in cli_documents(root, "marmalade", "--collection", "default")
        assert "gate.md" in cli_documents(root, "marmalade", "--document", "gate.md")

    with PolarisIndex(backend_target, config=config()) as writer:
        report = writer.index_paths([root / "docs"], progress=mid_document)
    assert seen == ["processing"] and report.updated == 1
    with PolarisIndex(backend_target, config=config(), readonly=True) as reader:
        assert reader.store.files("default")["gate.md"].status == "completed"
        for name, scope in SCOPES.items():  # once committed, the new version and nothing of the old one
            assert "south gate" in answers(reader, "quokka", **scope).get("gate.md", ""), name
            assert "gate.md" not in answers(reader, "marmalade", **scope), name
    assert "gate.md" in cli_documents(root, "quokka", "--collection", "default")


def test_a_document_left_processing_that_then_fails_to_read_stays_at_its_last_version(
        tmp_path: Path, backend_target: str) -> None:
    (tmp_path / "gate.md").write_text(OLD)
    with PolarisIndex(backend_target, config=config()) as index:
        index.index_paths([tmp_path])
        doc = index.store.files("default")["gate.md"]
        index.store.set_status(doc.id, "processing")  # as a run killed mid-document leaves it
        (tmp_path / "gate.md").write_bytes(b"binary\x00junk")
        report = index.index_paths([tmp_path])
        assert [p for p, _ in report.failed] == ["gate.md"]
        doc = index.store.files("default")["gate.md"]
        assert doc.status == "stale" and "re-index failed, serving the version of" in doc.error
        hits = index.search("marmalade", mode="bm25", collections=["default"])
        assert [(h.document, h.document_status) for h in hits] == [("gate.md", "stale")]


def test_chunks_are_never_written_under_processing(backend_target: str) -> None:
    """'processing' means a new version is not written yet, so what a processing document holds is
    its last committed version: no door can store chunks under that status."""
    store = open_store(backend_target)
    try:
        store.bind_model(fake_binding(4))
        for write in (lambda d, c, v: store.upsert_document(d, c, v),
                      lambda d, c, v: store.upsert_nodes([(d, c, v)])):
            with pytest.raises(InputError, match="'processing'"):
                write(DocumentRecord("d", status="processing"), make_chunks("d", 2), unit_vectors(2, 4))
            assert store.get_document("d") is None and store.get_chunks(document_id="d") == []
        store.upsert_document(DocumentRecord("d", status="processing"), [], None)  # a new document, no chunks yet
        store.put_document(DocumentRecord("e", status="processing"))
        assert store.get_document("d").status == store.get_document("e").status == "processing"
    finally:
        store.close()


# -- a run killed with SIGKILL mid-way --------------------------------------------------------
N = 40  # one chunk each; the indexer embeds 32 chunks at a time, so a batch is under way for a while


def _note(i: int, version: str) -> str:
    word = "marmalade" if version == "old" else "quokka"
    return f"# Note {i}\n\nNote {i} of the archive records the {word} ledger, entry {version}{i:03d}.\n"


def _statuses(target: str) -> dict[str, str]:
    with open_store(target, readonly=True) as store:
        return {d.path: d.status for d in store.documents("default")}


def _kill_mid_run(root: Path, target: str) -> dict[str, str]:
    """Start `polaris index many`, SIGKILL it while documents are processing; the statuses it left."""
    proc = subprocess.Popen([POLARIS, "index", "many", "--quiet"], cwd=root, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XDG_CONFIG_HOME": str(root / ".xdg")})
    deadline = time.time() + 240
    try:
        while proc.poll() is None and time.time() < deadline:
            if "processing" in _statuses(target).values():
                proc.send_signal(signal.SIGSTOP)  # frozen where it was seen
                time.sleep(0.2)
                if "processing" in _statuses(target).values():
                    proc.send_signal(signal.SIGKILL)
                    proc.send_signal(signal.SIGCONT)
                    proc.wait(timeout=60)
                    break
                proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-document"
    return _statuses(target)


def test_a_run_killed_mid_document_leaves_it_answering_and_the_next_run_finishes_it(
        tmp_path: Path, backend_target: str) -> None:
    from mcp_testing import McpSession, stdio

    root = tmp_path
    (root / "many").mkdir()
    for i in range(N):
        (root / "many" / f"note{i:03d}.md").write_text(_note(i, "old"))
    (root / "polaris.toml").write_text(project_toml(backend_target))
    cli(root, "index", "many", "--quiet")
    for i in range(N):
        (root / "many" / f"note{i:03d}.md").write_text(_note(i, "new"))
    left = _kill_mid_run(root, backend_target)
    processing = sorted(p for p, s in left.items() if s == "processing")
    assert processing and set(left.values()) <= {"processing", "completed"}, left
    first = processing[0]
    number = int(first[4:7])

    with PolarisIndex(backend_target, config=config(), readonly=True) as index:
        for scope in ({}, {"collections": ["default"]}, {"within_collection": "default"}):
            got = answers(index, "marmalade", **scope)
            assert set(processing) <= set(got), (scope, processing, sorted(got))
            assert all(f"old{int(p[4:7]):03d}" in got[p] for p in processing)
            assert not set(processing) & set(answers(index, "quokka", **scope))
        assert first in answers(index, f"old{number:03d}", documents=[first], collections=["default"])
    assert set(processing) <= cli_documents(root, "marmalade", "--collection", "default", "-k", "100")
    mcp = McpSession(stdio(root, "--collection", "default"))  # a server confined to the collection
    try:
        result = mcp.call("search", {"query": f"old{number:03d}", "mode": "bm25", "k": 3})
        assert not result.is_error, result.content
        assert [h["document"] for h in result.structured_content["hits"]][:1] == [first]
    finally:
        mcp.close()

    cli(root, "index", "many", "--quiet")  # the next run finishes what the killed one left
    assert set(_statuses(backend_target).values()) == {"completed"}
    with PolarisIndex(backend_target, config=config(), readonly=True) as index:
        got = answers(index, "quokka", collections=["default"])
        assert len(got) == N and all(f"new{int(p[4:7]):03d}" in got[p] for p in processing)
        assert answers(index, "marmalade", collections=["default"]) == {}
