"""One trustworthy index: a document's identity is (collection, path under the collection root).

Real files in tmp_path, a real polaris.db, the bundled model. Each scenario is one that
issue #12 reproduced on release 0.1; each asserts the document count, what a search
returns and that nothing else was lost.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import ConfigError, InputError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import REPO, project_toml

FILES = {
    "README.md": "# Handbook\n\nHow this handbook is organised: auth, operations and pets.\n",
    "auth/tokens.md": "# Tokens\n\n## Token lifetime\n\nAn access token is valid for fifteen minutes.\n",
    "auth/login.md": "# Login\n\nSign in with single sign-on; the session cookie is HttpOnly.\n",
    "ops/backups.md": "# Backups\n\nNightly backups are kept for thirty five days in cold storage.\n",
    "ops/deploys.md": "# Deploys\n\nDeploys go out from the main branch after every check passes.\n",
}


def write(root: Path, files: dict[str, str] = FILES) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def open_index(backend_target: str):
    """``open_index(**config)``: a PolarisIndex on this test's index, once per backend (a polaris.db
    file, a fresh PostgreSQL database)."""
    opened: list[PolarisIndex] = []

    def _open(**config) -> PolarisIndex:
        cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2", **config)
        index = PolarisIndex(backend_target, config=cfg)
        opened.append(index)
        return index

    yield _open
    for index in opened:
        index.close()


def docs_of(index: PolarisIndex, collection: str = "default") -> dict[str, str]:
    """path -> id of every document in ``collection``."""
    return {d.path: d.id for d in index.store.documents(collection)}


def searchable(index: PolarisIndex, query: str, **kw) -> list[tuple[str, str]]:
    return [(h.collection, h.document) for h in index.search(query, mode="bm25", top_k=20, **kw)]


def test_the_same_file_is_one_document_however_its_path_is_typed(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    index = open_index()
    first = index.index_paths([docs])
    assert (first.added, len(docs_of(index))) == (5, 5)
    ids = docs_of(index)
    for paths in ([docs / "auth"], [docs / "auth" / "tokens.md"], [docs / "README.md"], [docs / "auth", docs / "ops"]):
        report = index.index_paths(paths)
        assert (report.added, report.removed, report.chunks_embedded) == (0, 0, 0), paths
        assert docs_of(index) == ids  # nothing duplicated, nothing lost
    assert ids["auth/tokens.md"] == "default:auth/tokens.md"
    relative = os.path.relpath(docs / "auth", Path.cwd())  # typed relative to the working directory
    assert index.index_paths([relative]).added == 0
    assert searchable(index, "fifteen minutes") == [("default", "auth/tokens.md")]


def test_a_section_is_never_returned_twice_after_overlapping_runs(tmp_path: Path, open_index) -> None:
    handbook = tmp_path / "handbook"
    shutil.copytree(REPO / "examples" / "handbook", handbook)
    index = open_index()
    index.index_paths([handbook])
    index.index_paths([handbook / "auth"])
    index.index_paths([handbook / "auth" / "tokens.md"])
    assert len(index.store.documents()) == 11
    hits = index.search("how long is an access token valid", top_k=20)
    sections = Counter((h.document, h.node_id) for h in hits)
    assert sections.most_common(1)[0][1] == 1
    assert hits[0].document == "auth/tokens.md"


def test_the_same_relative_path_in_two_collections_is_two_documents(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    other = write(tmp_path / "other", {"auth/tokens.md": "# Pet tokens\n\nDogs earn treats as tokens.\n"})
    index = open_index()
    index.index_paths([docs])
    pets = index.index_paths([other], collection="pets")
    assert (pets.added, pets.updated) == (1, 0)
    assert docs_of(index)["auth/tokens.md"] == "default:auth/tokens.md"
    assert docs_of(index, "pets") == {"auth/tokens.md": "pets:auth/tokens.md"}
    for _ in range(2):  # re-indexing either folder steals nothing and re-embeds nothing
        for folder, collection in ((docs, "default"), (other, "pets")):
            report = index.index_paths([folder], collection=collection)
            assert (report.updated, report.removed, report.chunks_embedded) == (0, 0, 0)
    assert searchable(index, "fifteen minutes") == [("default", "auth/tokens.md")]
    assert searchable(index, "treats") == [("pets", "auth/tokens.md")]
    assert searchable(index, "treats", collections=["default"]) == []


def test_a_moved_root_re_embeds_nothing_and_removal_follows_the_files(tmp_path: Path, open_index) -> None:
    write(tmp_path / "docs")
    index = open_index()
    index.index_paths([tmp_path / "docs"])
    ids = docs_of(index)
    (tmp_path / "docs").rename(tmp_path / "d2")
    moved = index.index_paths([tmp_path / "d2"])
    assert (moved.root_change, moved.unchanged, moved.chunks_embedded, moved.removed) == ("moved", 5, 0, 0)
    assert docs_of(index) == ids
    (tmp_path / "d2" / "ops" / "backups.md").unlink()
    after = index.index_paths([tmp_path / "d2"])
    assert (after.removed, after.unchanged) == (1, 4)
    assert "ops/backups.md" not in docs_of(index)
    assert searchable(index, "backups cold storage") == []
    assert searchable(index, "main branch") == [("default", "ops/deploys.md")]


def test_a_run_over_a_parent_folder_widens_the_root_without_re_embedding(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    index = open_index()
    index.index_paths([docs / "auth"])
    assert docs_of(index) == {"login.md": "default:login.md", "tokens.md": "default:tokens.md"}
    before = {c.text_hash: c.node_id for c in index.store.get_chunks()}
    wide = index.index_paths([docs])
    assert (wide.root_change, wide.added, wide.unchanged, wide.chunks_embedded) == ("widened", 3, 2, 3)
    assert docs_of(index)["auth/tokens.md"] == "default:auth/tokens.md"
    assert "tokens.md" not in docs_of(index)
    after = {c.text_hash: c.node_id for c in index.store.get_chunks()}
    assert {h: after[h] for h in before} == before  # the same chunks, moved under the new key
    hit = index.search("fifteen minutes", mode="bm25", top_k=1)[0]
    assert (hit.document, hit.metadata["file_path"]) == ("auth/tokens.md", "auth/tokens.md")
    assert index.store.collection_root("default") == str(docs.resolve())


def test_a_folder_outside_an_existing_root_is_refused_with_what_to_do(tmp_path: Path, open_index) -> None:
    write(tmp_path / "docs")
    write(tmp_path / "more", {"extra.md": "# Extra\n\nMore text.\n"})
    index = open_index()
    index.index_paths([tmp_path / "docs"])
    with pytest.raises(InputError, match="outside collection 'default'.*--collection NAME.*polaris index"):
        index.index_paths([tmp_path / "more"])
    assert len(docs_of(index)) == 5
    assert index.index_paths([tmp_path / "more"], collection="more").added == 1


def test_a_file_deleted_during_the_run_leaves_the_index(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    index = open_index()
    index.index_paths([docs])
    (docs / "ops" / "deploys.md").write_text("# Deploys\n\nChanged.\n")

    def vanish(stage: str, done: int, total: int) -> None:
        if done == 1:
            (docs / "ops" / "deploys.md").unlink(missing_ok=True)

    report = index.indexer(progress=vanish).index_paths([docs])
    assert report.removed == 1 and "ops/deploys.md" not in docs_of(index)
    assert len(docs_of(index)) == 4


def test_special_files_and_outside_symlinks_are_skipped_not_read(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n\nthe launch code is swordfish\n")
    os.mkfifo(docs / "pipe.md")
    (docs / "zero.md").symlink_to("/dev/zero")
    (docs / "secret.md").symlink_to(secret)
    (docs / "link-to-backups.md").symlink_to(docs / "ops" / "backups.md")  # inside the root: read
    index = open_index()
    report = index.index_paths([docs])  # a FIFO would block a plain open(); /dev/zero would never end
    skipped = dict(report.skipped)
    assert set(skipped) == {"pipe.md", "zero.md", "secret.md"}
    assert "named pipe" in skipped["pipe.md"] and "follow_symlinks" in skipped["secret.md"]
    assert set(docs_of(index)) == set(FILES) | {"link-to-backups.md"}
    assert searchable(index, "swordfish") == []

    index.close()
    opted = open_index(follow_symlinks=True)
    report = opted.index_paths([docs])
    assert dict(report.skipped).keys() == {"pipe.md", "zero.md"}
    assert "character device" in dict(report.skipped)["zero.md"]
    assert searchable(opted, "swordfish") == [("default", "secret.md")]
    secret.unlink()  # the target is gone: the link is skipped and its document removed
    report = opted.index_paths([docs])
    assert report.removed == 1 and searchable(opted, "swordfish") == []


def test_a_symlinked_folder_is_said_skipped_and_a_loop_says_so(tmp_path: Path, open_index) -> None:
    """The walk follows no symlinked folder (no loops), and says so: it was filed as a file of
    another type, shown only when nothing at all was indexed. A link loop is named as one."""
    docs = write(tmp_path / "docs")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "beacon.md").write_text("# Beacon\n\nThe lighthouse beacon turns every ten seconds.\n")
    (docs / "shared").symlink_to(tmp_path / "shared")
    (docs / "loop1.md").symlink_to("loop2.md")
    (docs / "loop2.md").symlink_to("loop1.md")
    index = open_index()
    report = index.index_paths([docs])
    skipped = dict(report.skipped)
    assert set(skipped) == {"shared/", "loop1.md", "loop2.md"}, skipped
    assert "symlinked folder, which a walk does not enter" in skipped["shared/"]
    assert "symbolic links" in skipped["loop1.md"]
    assert not any(path.startswith("shared") for path, _ in report.ignored)
    assert set(docs_of(index)) == set(FILES) and searchable(index, "lighthouse beacon") == []


ALIAS_BOMB = (
    "---\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "---\n# Bomb\n\nA small file.\n"
)


def test_front_matter_is_bounded_and_stored_once_per_document(tmp_path: Path, open_index) -> None:
    long_section = "\n\n".join(f"Paragraph {i} about tags and owners of the guide." for i in range(60))
    docs = write(tmp_path / "docs", {
        "bomb.md": ALIAS_BOMB,
        "big.md": "---\nnotes: '" + "x" * 40_000 + "'\n---\n# Big\n\nBody.\n",
        "guide.md": f"---\ntitle: Guide\ntags: [ops, oncall]\nowner: sre\n---\n# Guide\n\n{long_section}\n",
    })
    index = open_index()
    report = index.index_paths([docs])
    warned = dict(report.warnings)
    assert "aliases" in warned["bomb.md"] and "32768 bytes" in warned["big.md"]
    assert index.store.size_bytes() < 5_000_000
    meta = {d.path: d.metadata for d in index.store.documents()}
    assert meta["bomb.md"] == {"file_path": "bomb.md"}
    assert meta["guide.md"] == {"title": "Guide", "tags": ["ops", "oncall"], "owner": "sre", "file_path": "guide.md"}
    stored = index.store.conn.execute(
        "SELECT metadata FROM chunks WHERE document_id = 'default:guide.md'").fetchall()
    assert len(stored) > 1 and all("tags" not in m for (m,) in stored)  # the chunks do not copy it
    hit = index.search("paragraph about owners", mode="bm25", top_k=1)[0]
    assert hit.metadata["tags"] == ["ops", "oncall"] and hit.metadata["heading_path"] == "Guide"
    from llama_index_polaris.engine.storage.filters import Condition

    tagged = index.search("paragraph", mode="bm25", top_k=5, filters=Condition("tags", "contains", "oncall"))
    assert tagged and {h.document for h in tagged} == {"guide.md"}
    assert searchable(index, "small file") == [("default", "bomb.md")]  # the text is still indexed


def test_a_failed_re_index_keeps_the_last_version_marked_stale(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    index = open_index()
    index.index_paths([docs])
    (docs / "ops" / "backups.md").write_bytes(b"# Backups\n\nCaf\xe9 backups\n")  # not UTF-8
    report = index.index_paths([docs])
    assert [p for p, _ in report.failed] == ["ops/backups.md"]
    doc = index.store.get_document("default:ops/backups.md")
    assert doc.status == "stale" and "not valid UTF-8" in doc.error and "serving the version of" in doc.error
    hit = index.search("thirty five days cold storage", mode="bm25", top_k=1)[0]
    assert (hit.document, hit.document_status) == ("ops/backups.md", "stale")
    assert "not valid UTF-8" in hit.document_error
    assert searchable(index, "cold storage", collections=["default"]) == [("default", "ops/backups.md")]
    (docs / "ops" / "backups.md").write_text(FILES["ops/backups.md"])
    index.index_paths([docs])
    hit = index.search("thirty five days cold storage", mode="bm25", top_k=1)[0]
    assert (hit.document_status, hit.document_error) == ("completed", None)


def test_remove_drops_paths_or_a_whole_collection(tmp_path: Path, open_index) -> None:
    docs = write(tmp_path / "docs")
    index = open_index()
    index.index_paths([docs])
    index.index_paths([write(tmp_path / "pets", {"dogs.md": "# Dogs\n\nDogs like walks.\n"})], collection="pets")
    shutil.rmtree(docs / "ops")
    assert index.remove("default", [docs / "ops"]) == 2  # paths that no longer exist
    assert set(docs_of(index)) == {"README.md", "auth/tokens.md", "auth/login.md"}
    assert index.remove("pets") == 1
    assert index.store.collections() == {"default": str(docs.resolve())}
    assert searchable(index, "walks") == []


def test_config_numbers_must_be_finite(tmp_path: Path) -> None:
    for key in ("rrf_k", "heading_boost", "max_file_mb"):
        (tmp_path / "polaris.toml").write_text(f"{key} = inf\n")
        with pytest.raises(ConfigError, match=f"'{key}' must be a finite number, got inf"):
            load_config(tmp_path, use_user_config=False)
    (tmp_path / "polaris.toml").write_text("mmr_lambda = nan\n")
    with pytest.raises(ConfigError, match="finite"):
        load_config(tmp_path, use_user_config=False)


# -- migration from release 0.1 (schema 2) -------------------------------------------------
def test_a_schema_2_database_migrates_to_one_document_per_file(tmp_path: Path) -> None:
    """SQLite only: release 0.1 wrote files; a Postgres index starts at its own first migration."""
    import numpy as np

    from llama_index_polaris.engine import sqlite as db
    from llama_index_polaris.engine.sqlite.store import Store
    from llama_index_polaris.engine.storage.scope import Scope
    from llama_index_polaris.engine.sqlite.vector import knn

    path = tmp_path / "polaris.db"
    shutil.copy(REPO / "tests" / "fixtures" / "schema2.db", path)
    with Store(path) as store:
        assert db.schema_version(store.conn) == db.SCHEMA_VERSION == 11
        docs = {d.id: d for d in store.documents()}
        assert not any(d.text_stored for d in docs.values())  # texts were not kept then: the next run stores them
        roots = store.collections()
        assert set(docs) == {
            "default:intro.md", "default:auth/tokens.md", "default:auth/login.md", "pets:dogs.md", "ref-doc-1",
        }  # the copies made by `polaris index handbook/auth` are gone
        assert roots["default"].endswith("/handbook") and roots["pets"].endswith("/other")
        intro = docs["default:intro.md"]
        assert intro.metadata == {"title": "Intro", "tags": ["start"], "file_path": "intro.md"}
        assert docs["ref-doc-1"].metadata == {} and docs["ref-doc-1"].path == "notes/llama.md"
        chunks = {c.document_id: c for c in store.get_chunks(with_embedding=True)}
        assert len(chunks) == 5 == store.conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0]
        raw = dict(store.conn.execute("SELECT document_id, metadata FROM chunks").fetchall())
        assert "tags" not in raw["default:intro.md"] and "file_path" not in raw["default:intro.md"]
        assert chunks["default:intro.md"].metadata["tags"] == ["start"]  # read back merged
        assert chunks["ref-doc-1"].metadata == {"file_path": "notes/llama.md", "k": 1}
        store.conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        vec = chunks["default:auth/tokens.md"].embedding
        scoped = knn(store.conn, np.asarray(vec), 5, Scope(document_ids=("default:auth/tokens.md",)))
        assert [cid for cid, _ in scoped] == [chunks["default:auth/tokens.md"].id]
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        status = store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'documents'").fetchone()[0]
        assert "'stale'" in status


# -- the command line ------------------------------------------------------------------------
def polaris(*args: str, cwd: Path, timeout: float = 120):
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg")}
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def project(tmp_path: Path, backend_target: str) -> Path:
    """A folder with docs/ and a polaris.toml naming the index: the folder's polaris.db, or a database."""
    write(tmp_path / "docs")
    (tmp_path / "polaris.toml").write_text(project_toml(backend_target))
    return tmp_path


@pytest.fixture
def file_project(tmp_path: Path) -> Path:
    """The same on the SQLite file only."""
    write(tmp_path / "docs")
    (tmp_path / "polaris.toml").write_text(project_toml(str(tmp_path / "polaris.db")))
    return tmp_path


def test_cli_skips_a_fifo_without_hanging_and_says_so(project: Path) -> None:
    os.mkfifo(project / "docs" / "pipe.md")
    done = polaris("index", "docs", cwd=project, timeout=60)  # release 0.1 blocked here forever
    assert done.returncode == 0, done.stderr
    assert "skipped: pipe.md: not a regular file (a named pipe)" in done.stderr
    assert done.stdout.startswith("5 added") and "1 skipped" in done.stdout


def test_cli_status_shows_the_real_chunk_budget_and_roots(project: Path) -> None:
    polaris("index", "docs", cwd=project)
    out = polaris("status", cwd=project).stdout
    assert "chunking   254 tokens per chunk at most: all-minilm-l6-v2 reads 256 tokens" in out
    assert "max_chunk_tokens 450 (default) is larger" in out
    assert f"default (root {(project / 'docs').resolve()}): 5 completed" in out
    shutil.rmtree(project / "docs")
    out = polaris("status", cwd=project).stdout
    assert "MISSING" in out and "polaris remove --collection default" in out
    removed = polaris("remove", "--collection", "default", cwd=project)
    assert (removed.returncode, removed.stdout) == (0, "5 removed\n")


def corrupt_full_text_pages(db: Path) -> None:
    """Overwrite the root page of the FTS index's data table (the chunks and documents stay readable)."""
    from llama_index_polaris.engine.sqlite import connect

    conn = connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks_fts_data'").fetchone()[0]
    conn.close()
    with open(db, "r+b") as fh:
        fh.seek((root - 1) * page_size + 8)
        fh.write(b"\xff" * (page_size - 8))


def test_cli_a_damaged_database_is_one_clear_error_in_every_command(file_project: Path) -> None:
    """SQLite only: it overwrites pages of the file's FTS5 table (a server's storage is its own)."""
    project = file_project
    polaris("index", "docs", cwd=project)
    corrupt_full_text_pages(project / "polaris.db")
    for args in (("search", "backups"), ("search", "backups", "--json"), ("status", "--check"), ("status", "--check", "--json")):
        done = polaris(*args, cwd=project)
        assert done.returncode == 1, args
        assert "Traceback" not in done.stderr
        assert "polaris.db is damaged (" in done.stderr and done.stderr.count("\npolaris: error") == 0
        assert "polaris status --check" in done.stderr or "Rebuild it" in done.stderr
        if args[0] == "search":
            assert "database disk image is malformed" in done.stderr
    plain = polaris("status", cwd=project)  # counts are still readable; it says it did not check
    assert plain.returncode == 0 and "integrity  not checked" in plain.stdout
    healthy = project / "healthy"
    healthy.mkdir()
    (healthy / "polaris.toml").write_text('model_id = "all-minilm-l6-v2"\n')
    write(healthy / "docs")
    polaris("index", "docs", cwd=healthy)
    ok = polaris("status", "--check", cwd=healthy)
    assert ok.returncode == 0 and "integrity  ok" in ok.stdout
