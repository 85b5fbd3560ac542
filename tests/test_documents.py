"""Documents and sections as a reader asks for them (``engine/documents.py``): the outline,
one section with its place among its siblings, the whole indexed text, lists of documents;
and whether the files on disk still match the index (``engine/freshness.py``).

A real polaris.db on the bundled model; sizes are counted with its tokenizer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from llama_index_polaris.engine.storage import documents
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, ScopeError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search.context import ELLIPSIS, bounded, excerpt, first_match, window
from polaris_testing import BACKENDS, module_target, project_toml

MODEL = "all-minilm-l6-v2"
ROTATION = "\n\n".join(
    f"Step {i}. The rotation job {i} writes a new signing key, keeps the old one for verification and records"
    f" the change in the audit log before anything else happens." for i in range(20)
) + "\n\nLast of all the zebra escrow account is closed, which only the final step does."
SESSIONS = (
    "# Sessions\n\nA session is the time between signing in and signing out of the dashboard.\n\n"
    "## Lifetime\n\nA session lasts eight hours. After that the user signs in again, whatever they were doing.\n\n"
    "## Expiry\n\nWhen a session expires, the next request answers 401 and the client must sign in again.\n\n"
    "## Storage\n\nSessions are kept in Redis under a random key; nothing about them is written to disk.\n"
)
TOKENS = (
    "# Tokens\n\n## Kinds\n\n### Access tokens\n\nAn access token is valid for fifteen minutes after it is issued."
    "\n\n### Refresh tokens\n\nA refresh token lasts thirty days on a sliding window and is exchanged for a new"
    f" pair.\n\n## Rotation\n\n{ROTATION}\n"
)
FILES = {
    "docs": {"guide/sessions.md": SESSIONS, "guide/tokens.md": TOKENS},
    "blog": {"guide/sessions.md": "# Launch notes\n\nWe launched sessions that last a whole working day, and more.\n"},
}


def write(root: Path, target: str | None = None) -> None:
    """The files, and a polaris.toml naming the index: root's polaris.db (default) or ``target``."""
    for folder, files in FILES.items():
        for name, text in files.items():
            (root / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (root / folder / name).write_text(text)
    (root / "polaris.toml").write_text(project_toml(target or str(root / "polaris.db"), MODEL))


def cfg(root: Path):
    return load_config(root, use_user_config=False)


def target_of(root: Path) -> str:
    """The index of the project in ``root``: its polaris.toml's db_path (a file under root, or a URI)."""
    db = str(cfg(root).db_path)
    return db if "://" in db else str(root / db)


def build(root: Path) -> None:
    with PolarisIndex(target_of(root), config=cfg(root)) as index:
        assert index.index_paths([root / "docs"]).failed == []
        assert index.index_paths([root / "blog"], collection="blog").failed == []


@pytest.fixture(scope="module", params=BACKENDS)
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files indexed once per module and backend (the folder's polaris.db, or a database)."""
    root = tmp_path_factory.mktemp("documents")
    write(root, module_target(request, tmp_path_factory))
    build(root)
    return root


@pytest.fixture(scope="module")
def index(project: Path):
    with PolarisIndex(target_of(project), config=cfg(project), readonly=True) as opened:
        yield opened


# -- the outline ---------------------------------------------------------------------------------
def test_build_outline_adds_headings_without_text_and_sums_up_the_tree() -> None:
    entries = documents.build_outline([
        ("A > B > C", 10, 0, 50, 1), ("A > B > D", 5, 52, 80, 2), ("A > E", 7, 82, 99, 1)])
    assert [(e.heading_path, e.depth, e.parent) for e in entries] == [
        ("A", 1, None), ("A > B", 2, "A"), ("A > B > C", 3, "A > B"), ("A > B > D", 3, "A > B"), ("A > E", 2, "A")]
    a, b = entries[0], entries[1]
    assert (a.tokens, a.total_tokens, a.chunks, a.children) == (0, 22, 0, ["A > B", "A > E"])
    assert (b.total_tokens, b.start_char, b.end_char) == (15, 0, 80)


def test_the_outline_is_the_heading_tree_with_each_sections_size(index: PolarisIndex) -> None:
    o = index.outline("guide/tokens.md")
    assert o.document.collection == "default" and o.document.name == "guide/tokens.md"
    assert [(e.title, e.depth, e.chunks > 0) for e in o.entries] == [
        ("Tokens", 1, False), ("Kinds", 2, False), ("Access tokens", 3, True), ("Refresh tokens", 3, True),
        ("Rotation", 2, True)]
    by = {e.title: e for e in o.entries}
    assert by["Tokens"].tokens == 0 and by["Tokens"].total_tokens == o.tokens > 0
    assert by["Kinds"].total_tokens == by["Access tokens"].tokens + by["Refresh tokens"].tokens
    for e in o.entries:
        if e.chunks:  # its own text, counted by the model's tokenizer
            text = index.read_section("guide/tokens.md", e.heading_path, max_tokens=100_000).text
            assert e.tokens == index.count_tokens(text) > 0
    assert by["Rotation"].tokens > 300  # several chunks, one section


# -- reading a section ---------------------------------------------------------------------------
def test_a_section_says_where_it_sits_among_its_siblings(index: PolarisIndex) -> None:
    s = index.read_section("guide/sessions.md", "Sessions > Expiry", collection="default")
    assert (s.position, s.siblings, s.parent) == (2, 3, "Sessions")
    assert (s.previous, s.next, s.children) == ("Sessions > Lifetime", "Sessions > Storage", [])
    assert s.text.startswith("## Expiry\n\nWhen a session expires") and not s.truncated
    assert s.tokens == index.count_tokens(s.text) and s.start_char == SESSIONS.index("## Expiry")
    top = index.read_section("guide/sessions.md", "Sessions", collection="default")
    assert (top.position, top.siblings, top.previous, top.next) == (1, 1, None, None)
    assert top.children == ["Sessions > Lifetime", "Sessions > Expiry", "Sessions > Storage"]
    assert "Expiry" not in top.text and not top.with_subsections  # its own text only
    whole = index.read_section("guide/sessions.md", "Sessions", collection="default", subsections=True)
    assert whole.with_subsections and whole.text.strip() == SESSIONS.strip()


def test_a_section_is_named_by_its_path_its_title_or_a_node_id(index: PolarisIndex) -> None:
    by_path = index.read_section("guide/tokens.md", "Tokens > Kinds > Refresh tokens")
    assert index.read_section("guide/tokens.md", "refresh tokens").heading_path == by_path.heading_path
    assert index.read_section("guide/tokens.md", "Kinds > Refresh tokens").heading_path == by_path.heading_path
    node = by_path.node_ids[0]
    assert index.read_section(node_id=node).text == by_path.text
    assert index.read_section("guide/tokens.md", node_id=node).heading_path == by_path.heading_path
    kinds = index.read_section("guide/tokens.md", "Kinds")  # no text of its own: read through its subsections
    assert kinds.with_subsections and "fifteen minutes" in kinds.text and "thirty days" in kinds.text


def test_the_text_read_is_the_text_a_hit_shows_at_the_same_budget(index: PolarisIndex) -> None:
    """The same stitched, bounded text; a hit's keeps its matched chunk in view where the budget
    would cut it away (``excerpt``), reading is from the start."""
    for budget, query in ((300, "how is the signing key rotated"), (60, "when is the zebra escrow account closed")):
        hits = index.search(query, top_k=3, context_tokens=budget)
        assert hits and hits[0].heading_path == "Tokens > Rotation"
        for h in hits:
            read = index.read_section(h.document, h.heading_path, collection=h.collection, max_tokens=budget).text
            assert h.section_text == excerpt(read, h.text, index.count_tokens, budget, query)
        first = index.read_section("guide/tokens.md", "Rotation", max_tokens=budget).text
        assert (hits[0].section_text == first) == (budget == 300)
        assert budget == 300 or "zebra escrow account is closed" in hits[0].section_text


def test_a_budget_cuts_the_text_and_says_so(index: PolarisIndex) -> None:
    s = index.read_section("guide/tokens.md", "Rotation", max_tokens=50)
    assert s.truncated and s.text.endswith(ELLIPSIS) and s.tokens > 300
    assert index.count_tokens(s.text[: -len(ELLIPSIS)]) <= 50
    with pytest.raises(InputError, match="max_tokens must be a positive whole number of tokens, got 0"):
        index.read_section("guide/tokens.md", "Rotation", max_tokens=0)


def test_names_that_do_not_fit_are_errors_that_help(index: PolarisIndex) -> None:
    with pytest.raises(InputError, match=r"no section 'Expiri' in 'guide/sessions.md', which has 4 headings\."
                                         r" Did you mean 'Sessions > Expiry'\?"):
        index.read_section("guide/sessions.md", "Expiri", collection="default")
    with pytest.raises(ScopeError, match=r"no document 'sessions.md' .* Did you mean 'guide/sessions.md'\?"):
        index.read_section("sessions.md", "Expiry")
    with pytest.raises(InputError, match=r"document 'guide/sessions.md' is in 2 collections \('blog', 'default'\)"):
        index.outline("guide/sessions.md")
    assert index.outline("guide/sessions.md", collection="blog").entries[0].title == "Launch notes"
    with pytest.raises(ScopeError, match="no collection 'Blog'"):
        index.outline("guide/sessions.md", collection="Blog")
    with pytest.raises(InputError, match="no chunk has node id 'nope'"):
        index.read_section(node_id="nope")
    node = index.read_section("guide/tokens.md", "Rotation").node_ids[0]
    with pytest.raises(InputError, match="is a chunk of 'guide/tokens.md', not of 'guide/sessions.md'"):
        index.read_section("guide/sessions.md", node_id=node, collection="default")
    with pytest.raises(InputError, match="name the section to read"):
        index.read_section("guide/tokens.md")


def test_the_whole_text_is_the_file_stitched_back(index: PolarisIndex, project: Path) -> None:
    ref, text, tokens, cut = index.document_text("guide/sessions.md", "default")
    assert (ref.id, text.strip(), cut) == ("default:guide/sessions.md", SESSIONS.strip(), False)
    assert tokens == index.count_tokens(text)
    _, short, _, cut = index.document_text("guide/tokens.md", max_tokens=30)
    assert cut and index.count_tokens(short[: -len(ELLIPSIS)]) <= 30


def test_documents_are_listed_by_collection_and_path(index: PolarisIndex) -> None:
    page = index.documents()
    assert page.total == 3 and [(r.collection, r.path) for r in page.rows] == [
        ("blog", "guide/sessions.md"), ("default", "guide/sessions.md"), ("default", "guide/tokens.md")]
    tokens = next(r for r in page.rows if r.path == "guide/tokens.md")
    assert (tokens.status, tokens.sections) == ("completed", 3) and tokens.chunks >= 4
    assert [r.path for r in index.documents("default", prefix="guide/t").rows] == ["guide/tokens.md"]
    second = index.documents(limit=1, offset=1)
    assert (second.total, [r.id for r in second.rows]) == (3, ["default:guide/sessions.md"])
    with pytest.raises(ScopeError, match="no collection 'nope'"):
        index.documents("nope")
    with pytest.raises(InputError, match="offset must be a whole number from 0 to 9223372036854775807, got -1"):
        index.documents(offset=-1)


def test_names_no_stored_document_can_have_are_refused_alike_on_both_backends(index: PolarisIndex) -> None:
    """A NUL (no stored name holds one: a Postgres text cannot) and an offset past what either
    backend's integers hold: the same answer from both, never the database's own error."""
    with pytest.raises(InputError, match="offset must be a whole number from 0 to 9223372036854775807"):
        index.documents(offset=10**20)
    assert index.documents(offset=2**63 - 1).rows == []
    assert (index.documents(prefix="\x00").total, index.documents(prefix="guide\x00").rows) == (0, [])
    assert index.documents(contains="tok\x00").total == 0
    for call in (lambda: index.search("tokens", documents=["guide/tokens.md\x00"]),
                 lambda: index.outline("guide/tokens.md\x00")):
        with pytest.raises(ScopeError, match="no document 'guide/tokens.md"):
            call()


def test_an_excerpt_keeps_the_matched_passage_in_view() -> None:
    count = lambda t: len(t.split())  # noqa: E731  one token a word, to see the arithmetic
    section = " ".join(f"w{i}" for i in range(100))
    passage = " ".join(f"w{i}" for i in range(80, 90))
    shown = bounded(section, count, 40)
    assert excerpt(shown, passage, count, 40).endswith("\n\n" + passage)
    head = excerpt(shown, passage, count, 40).split(ELLIPSIS)[0]
    assert count(head) <= 30 and head.startswith("w0 w1")
    assert excerpt(shown, "w3 w4", count, 40) == shown  # already in view
    assert excerpt(section, passage, count, 1000) == section  # not cut
    assert excerpt(shown, passage, count, 20, "w85") == "[…]\n" + passage  # no room for a head: the passage


def test_a_window_opens_where_the_text_first_answers_the_query() -> None:
    count = lambda t: len(t.split())  # noqa: E731
    text = "\n".join(f"line {i} says nothing" for i in range(30)) + "\nthe zebra escrow closes here\nend"
    at = first_match(text, "when does the escrow close")
    assert text[at:].startswith("escrow closes")
    shown = window(text, at, count, 8)
    assert shown.startswith("[…]\n") and "zebra escrow closes here" in shown and count(shown.replace("[…]", "")) <= 8
    assert first_match("use OUT_DIR, not out dir", "OUT_DIR") == 4  # an identifier as written
    assert window(text, 0, count, 8).startswith("line 0 says")


# -- freshness -----------------------------------------------------------------------------------
@pytest.fixture
def fresh_project(tmp_path: Path, backend_target: str) -> Path:
    write(tmp_path, backend_target)
    build(tmp_path)
    return tmp_path


def changes(root: Path) -> dict:
    with PolarisIndex(target_of(root), config=cfg(root), readonly=True) as index:
        return index.status(changes=True)


def test_an_index_just_built_matches_its_files(fresh_project: Path) -> None:
    status = changes(fresh_project)
    assert status["stale"] is False
    assert status["changes"]["default"] == {
        "root": str(fresh_project / "docs"), "root_exists": True, "stale": False, "files": 2, "checked": True,
        "changed": {"count": 0, "paths": []}, "missing": {"count": 0, "paths": []},
        "unreadable": {"count": 0, "paths": [], "reasons": {}}, "failed": {"count": 0, "paths": [], "reasons": {}},
        "new": {"count": 0, "paths": []}}


def test_changed_missing_new_and_unreadable_files_are_reported(fresh_project: Path) -> None:
    docs = fresh_project / "docs"
    os.utime(docs / "guide/tokens.md", (1, 1))  # touched, not changed
    (docs / "guide/sessions.md").write_text(SESSIONS + "\n## Sharing\n\nSessions are never shared between devices.\n")
    (fresh_project / "blog/guide/sessions.md").unlink()
    (docs / "guide/new.md").write_text("# New\n\nA page written after the index was built.\n")
    (docs / ".drafts").mkdir()
    (docs / ".drafts/hidden.md").write_text("# Hidden\n\nNot indexed: hidden folders are skipped.\n")
    status = changes(fresh_project)
    default, blog = status["changes"]["default"], status["changes"]["blog"]
    assert status["stale"] is True and default["stale"] and blog["stale"]
    assert (default["changed"]["paths"], default["new"]["paths"], default["missing"]["count"]) == (
        ["guide/sessions.md"], ["guide/new.md"], 0)
    assert (blog["missing"]["paths"], blog["changed"]["count"]) == (["guide/sessions.md"], 0)
    (docs / "guide/tokens.md").unlink()
    os.mkfifo(docs / "guide/tokens.md")  # there, but not a file that can be read
    unreadable = changes(fresh_project)["changes"]["default"]["unreadable"]
    assert unreadable["paths"] == ["guide/tokens.md"]
    assert "not a regular file (a named pipe)" in unreadable["reasons"]["guide/tokens.md"]


def test_a_file_that_never_indexed_is_failed_not_stale_until_it_can_be_read(fresh_project: Path) -> None:
    """A file that failed from the start serves nothing: the index is as current as it can be,
    and `polaris index` again would change nothing. Once it reads, it is a change; a file that
    was indexed and turns unreadable keeps its old version, which is stale."""
    docs = fresh_project / "docs"
    (docs / "guide/latin1.md").write_bytes(b"# Caf\xe9\n\nOpen at eight.\n")
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        failed = dict(index.index_paths([docs]).failed)
    assert failed["guide/latin1.md"].startswith("not valid UTF-8"), failed  # its path is said once, by whoever shows it
    status = changes(fresh_project)
    default = status["changes"]["default"]
    assert (status["stale"], default["stale"], default["unreadable"]["count"]) == (False, False, 0)
    assert default["failed"]["paths"] == ["guide/latin1.md"]
    assert default["failed"]["reasons"]["guide/latin1.md"].startswith("not valid UTF-8")
    assert status["documents_without_text"] == 0  # nothing to rebuild for it
    from mcp_testing import McpSession, stdio, text_of

    session = McpSession(stdio(fresh_project, "--db", target_of(fresh_project)))
    try:  # the MCP server's status tool: the same verdict, so an agent does not re-index in a loop
        answer = session.call("status")
    finally:
        session.close()
    assert answer.structured_content["stale"] is False and "as indexed" in text_of(answer)
    assert answer.structured_content["changes"]["default"]["failed"]["paths"] == ["guide/latin1.md"]
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(fresh_project / ".xdg")}
    text = subprocess.run([exe, "status"], cwd=fresh_project, capture_output=True, text=True, env=env, timeout=120).stdout
    assert "on disk   every file as indexed" in text and "failed (not indexed): guide/latin1.md: not valid UTF-8" in text
    (docs / "guide/latin1.md").write_text("# Café\n\nOpen at eight.\n")
    assert changes(fresh_project)["changes"]["default"]["changed"]["paths"] == ["guide/latin1.md"]
    (docs / "guide/tokens.md").write_bytes(b"# Tokens\n\n\xff\n")
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        index.index_paths([docs])
    default = changes(fresh_project)["changes"]["default"]
    assert default["stale"] and default["unreadable"]["paths"] == ["guide/tokens.md"] and default["failed"]["count"] == 0


def test_a_file_whose_text_is_the_same_in_another_spelling_is_fresh(fresh_project: Path) -> None:
    """The hash is of the NFC text, as the indexer stores it: an NFD rewrite changes nothing."""
    path = fresh_project / "docs/guide/accents.md"
    path.write_text("# Caf\u00e9\n\nThe caf\u00e9 opens at eight for the \u00e5ngstr\u00f6m team.\n")
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        index.index_paths([path])
    path.write_text(unicodedata.normalize("NFD", path.read_text()))
    assert changes(fresh_project)["changes"]["default"]["stale"] is False
    path.write_text(path.read_text() + "\nClosed on Sundays.\n")
    assert changes(fresh_project)["changes"]["default"]["changed"]["paths"] == ["guide/accents.md"]


def test_a_file_whose_name_is_stored_in_another_spelling_is_found_on_disk(fresh_project: Path) -> None:
    """A name that is not UTF-8 is stored with its bytes written out (``bad\\xffname.md``) and one in
    NFD in NFC: freshness finds the file the walk indexed, in a folder spelled so too, and a change to
    it is a change (they were "missing on disk" for ever, and `polaris index` could not clear it)."""
    docs = fresh_project / "docs"
    odd = os.fsencode(docs) + b"/caf" + "\u0065\u0301".encode() + b"/bad\xffname.md"  # an NFD folder, a non-UTF-8 name
    os.makedirs(os.path.dirname(odd))
    with open(odd, "wb") as fh:
        fh.write(b"# Odd names\n\nThe kiosk opens at nine.\n")
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        assert index.index_paths([docs]).added == 1
    stored = "caf\u00e9/bad\\xffname.md"
    default = changes(fresh_project)["changes"]["default"]
    assert (default["stale"], default["missing"]["count"], default["files"]) == (False, 0, 3), default
    from mcp_testing import McpSession, stdio, text_of

    session = McpSession(stdio(fresh_project, "--db", target_of(fresh_project)))
    try:
        status, listed = session.call("status"), session.call("list_documents")
    finally:
        session.close()
    assert status.structured_content["stale"] is False and "missing" not in text_of(listed), text_of(listed)
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(fresh_project / ".xdg")}
    text = subprocess.run([exe, "status"], cwd=fresh_project, capture_output=True, text=True, env=env, timeout=120).stdout
    assert "on disk   every file as indexed" in text, text
    with open(odd, "ab") as fh:
        fh.write(b"\nClosed on Sundays.\n")
    assert changes(fresh_project)["changes"]["default"]["changed"]["paths"] == [stored]
    os.unlink(odd)
    assert changes(fresh_project)["changes"]["default"]["missing"]["paths"] == [stored]


def test_a_new_document_cut_off_mid_run_is_not_said_to_lack_its_text(fresh_project: Path) -> None:
    """A run killed while writing a new file leaves it ``processing`` with no chunks (the indexer marks
    it first). Status counted it among the documents "indexed before Polaris kept their text", the
    wrong reason: it has nothing to rebuild, and the next `polaris index` writes it."""
    from llama_index_polaris.engine.storage.records import DocumentRecord

    (fresh_project / "docs" / "guide" / "late.md").write_text("# Late\n\nWritten as the run was killed.\n")
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        index.store.put_document(DocumentRecord(id="default:guide/late.md", path="guide/late.md", status="processing"))
        status = index.status(changes=True)
    assert status["documents_without_text"] == 0, status
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        report = index.index_paths([fresh_project / "docs"])
        assert (report.added, report.updated) in ((1, 0), (0, 1)), report.summary()
        assert index.status(changes=True)["changes"]["default"]["stale"] is False


def test_a_root_that_became_a_symlink_is_read_where_it_points(fresh_project: Path) -> None:
    """``mv docs docs2; ln -s docs2 docs``: status crashed (a file under docs2 is not under docs) and
    `polaris index docs` refused docs2 as outside the root. The root is now walked where it points,
    and indexing it moves the recorded root there, re-embedding nothing."""
    shutil.move(fresh_project / "docs", fresh_project / "docs2")
    (fresh_project / "docs").symlink_to(fresh_project / "docs2")
    default = changes(fresh_project)["changes"]["default"]
    assert (default["stale"], default["files"], default["new"]["count"]) == (False, 2, 0), default
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project)) as index:
        report = index.index_paths([fresh_project / "docs"])
    assert (report.added, report.updated, report.removed, report.chunks_embedded) == (0, 0, 0, 0), report.summary()
    status = changes(fresh_project)
    assert status["roots"]["default"] == str(fresh_project / "docs2") and status["stale"] is False, status


def test_a_root_that_is_gone_makes_every_file_missing(fresh_project: Path) -> None:
    shutil.move(fresh_project / "docs", fresh_project / "moved")
    default = changes(fresh_project)["changes"]["default"]
    assert (default["root_exists"], default["missing"]["count"], default["stale"]) == (False, 2, True)


def test_one_process_reads_a_file_again_only_when_it_changed(fresh_project: Path) -> None:
    with PolarisIndex(target_of(fresh_project), config=cfg(fresh_project), readonly=True) as index:
        doc = index.store.get_document("default:guide/tokens.md")
        assert index.freshness.document(doc) == "fresh"
        path = fresh_project / "docs/guide/tokens.md"
        before = os.stat(path)
        path.write_text(TOKENS.replace("fifteen", "twenty"))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
        assert index.freshness.document(doc) == "changed"
        path.write_text(TOKENS)
        assert index.freshness.document(doc) == "fresh"


def test_polaris_status_says_what_changed_on_disk(fresh_project: Path) -> None:
    (fresh_project / "docs/guide/new.md").write_text("# New\n\nA page written after the index was built.\n")
    exe = str(Path(sys.executable).with_name("polaris"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(fresh_project / ".xdg")}
    run = subprocess.run([exe, "status", "--json"], cwd=fresh_project, capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    status = json.loads(run.stdout)
    assert status["stale"] is True and status["changes"]["default"]["new"]["paths"] == ["guide/new.md"]
    text = subprocess.run([exe, "status"], cwd=fresh_project, capture_output=True, text=True, env=env, timeout=120)
    assert "on disk   default: 1 new since indexed" in text.stdout
    assert f"polaris index {fresh_project / 'docs'} --collection default" in text.stdout
