"""`polaris index PATH --watch`: a real subprocess following real edits on disk."""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llama_index_polaris.engine.backends import open_store
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex

POLARIS = str(Path(sys.executable).with_name("polaris"))
LINE = re.compile(r"^\d\d:\d\d:\d\d (\w+) +(.*)$")


class Watching:
    """The `polaris index --watch` process, its output read line by line as it comes."""

    def __init__(self, cwd: Path, *args: str, quiet: bool = True, tty: bool = False) -> None:
        env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg"), "PYTHONUNBUFFERED": "1"}
        flags = ["--watch", "--quiet"] if quiet else ["--watch"]
        if tty:  # stderr on a terminal (a pseudo-terminal), as when a person runs it
            import pty
            import struct
            import termios

            primary, secondary = pty.openpty()
            fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a size: a bar to draw
        self.proc = subprocess.Popen([POLARIS, "index", *args, *flags], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=secondary if tty else subprocess.PIPE)  # bytes: a "\r" is kept
        if tty:
            os.close(secondary)
        err = os.fdopen(primary, "rb", buffering=0) if tty else self.proc.stderr
        self.lines: queue.Queue[tuple[str, str, float]] = queue.Queue()
        self.changes: list[str] = []
        self.times: list[float] = []  # when each change line was read (time.monotonic())
        self.stderr: list[str] = []
        self.raw = {"out": "", "err": ""}  # everything each stream wrote, as written
        self.readers = [threading.Thread(target=self._read, args=(name, stream), daemon=True)
                        for name, stream in (("out", self.proc.stdout), ("err", err))]
        for reader in self.readers:
            reader.start()

    def _read(self, name: str, stream) -> None:
        with contextlib.suppress(OSError):  # a pseudo-terminal whose process has ended (EIO)
            for data in stream:
                line = data.decode()
                self.raw[name] += line
                self.lines.put((name, line.rstrip("\r\n"), time.monotonic()))

    def _keep(self, name: str, line: str, at: float) -> None:
        if name == "err":
            self.stderr.append(line)
        elif LINE.match(line):
            self.changes.append(" ".join(LINE.match(line).groups()))
            self.times.append(at)

    def expect(self, pattern: str, timeout: float = 30, stream: str = "out") -> str:
        """The next line of ``stream`` matching ``pattern``; every change line seen is kept."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                name, line, at = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {timeout}s; changes {self.changes},"
                                     f" stderr {self.stderr}") from None
            self._keep(name, line, at)
            if name == stream and re.search(pattern, line):
                return line

    def wait(self, timeout: float = 120) -> int:
        """The exit code, once the process has ended and every line it wrote has been kept."""
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=10)
        while not self.lines.empty():
            self._keep(*self.lines.get())
        return code

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.wait()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def atomic_save(path: Path, text: str) -> None:
    """What most editors do: write a temporary file beside the target, rename it over the target."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def vim_save(path: Path, text: str) -> None:
    """What vim does by default: a probe file, the original moved aside as a backup, a new file
    written under the name, the backup and a swap file deleted."""
    swap = path.with_name(f".{path.name}.swp")
    swap.write_text("vim swap")
    probe = path.with_name("4913")
    probe.write_text("")
    probe.unlink()
    backup = path.with_name(path.name + "~")
    os.rename(path, backup)
    path.write_text(text)
    backup.unlink()
    swap.unlink()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "polaris.toml", 'model_id = "all-minilm-l6-v2"\n')
    write(tmp_path / "docs" / "tokens.md", "# Tokens\n\nAccess tokens last fifteen minutes.\n")
    write(tmp_path / "docs" / "deploys.md", "# Deploys\n\nDeploys go out from the main branch.\n")
    write(tmp_path / "docs" / "ops" / "backups.md", "# Backups\n\nBackups run nightly at two.\n")
    write(tmp_path / "docs" / ".gitignore", "drafts/\n")
    return tmp_path


def test_watch_follows_edits_saves_renames_and_deletes_then_stops_cleanly(project: Path) -> None:
    docs = project / "docs"
    w = Watching(project, "docs")
    try:
        w.expect(r"^3 added", timeout=240)
        w.expect(r"watching docs for changes", timeout=60, stream="err")

        write(docs / "tokens.md", "# Tokens\n\nAccess tokens last fifteen minutes.\n\n## Refresh\n\nA refresh"
                                  " token is exchanged for a new pair when the marmalade expires.\n")
        w.expect(r"updated +tokens\.md \(\d+ chunks?\)")

        atomic_save(docs / "deploys.md", "# Deploys\n\nDeploys go out from the release branch.\n")
        w.expect(r"updated +deploys\.md")
        vim_save(docs / "deploys.md", "# Deploys\n\nDeploys go out from the release branch on Tuesdays.\n")
        w.expect(r"updated +deploys\.md")

        write(docs / "drafts" / "idea.md", "# Idea\n\nNot for the index.\n")  # .gitignore'd
        write(docs / "notes.txt~", "an editor's backup")
        write(docs / "new.md", "# New page\n\nThe quokka handbook.\n")
        w.expect(r"added +new\.md \(1 chunk\)")
        os.rename(docs / "new.md", docs / "quokka.md")
        w.expect(r"renamed +new\.md -> quokka\.md")

        (docs / "ops" / "backups.md").unlink()
        w.expect(r"removed +ops/backups\.md")
        write(docs / "ops" / "restore.md", "# Restore\n\nRestores start from the newest snapshot.\n")
        w.expect(r"added +ops/restore\.md")
        os.rename(docs / "ops", docs / "operations")
        w.expect(r"renamed +ops/restore\.md -> operations/restore\.md")
    finally:
        code = w.stop()

    assert code == 0, w.stderr
    assert w.stderr[-1].startswith("polaris: stopped watching"), w.stderr
    assert [re.sub(r" \(\d+ chunks?\)$", "", c) for c in w.changes] == [
        "updated tokens.md",
        "updated deploys.md",
        "updated deploys.md",
        "added new.md",
        "renamed new.md -> quokka.md",
        "removed ops/backups.md",
        "added ops/restore.md",
        "renamed ops/restore.md -> operations/restore.md",
    ]
    with open(project / "polaris.db.lock", "a+") as fh:  # released: no run holds it
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    config = load_config(config_file=project / "polaris.toml", use_user_config=False)
    with PolarisIndex(project / "polaris.db", config=config, readonly=True) as index:
        files = index.store.files("default")
        assert sorted(files) == ["deploys.md", "operations/restore.md", "quokka.md", "tokens.md"]
        assert {d.status for d in files.values()} == {"completed"}
        assert index.store.quick_check() == ["ok"]
        shown = int(re.search(r"\((\d+) chunks?\)", w.changes[0]).group(1))
        assert shown == len(index.store.get_chunks(document_id=files["tokens.md"].id))
        top = index.search("marmalade refresh", mode="bm25", top_k=1)[0]
        assert (top.document, "Tuesdays" in index.search("release branch", mode="bm25")[0].text) == ("tokens.md", True)


def test_ctrl_c_while_a_change_is_indexed_lets_it_finish_then_stops(project: Path) -> None:
    from llama_index_polaris.engine.sqlite.store import Store

    w = Watching(project, "docs")
    try:
        w.expect(r"watching docs for changes", timeout=240, stream="err")
        big = "".join(f"## Part {i}\n\nSection {i} of the long page talks about topic number {i} at length, with"
                      f" enough words in it to be a chunk of its own, item {i} of many.\n\n" for i in range(120))
        write(project / "docs" / "long.md", "# Long page\n\n" + big)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the batch is under way: the document shows as processing
            with Store(project / "polaris.db", readonly=True) as store:
                doc = store.get_document("default:long.md")
            if doc is not None and doc.status == "processing":
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"long.md never showed as processing; changes {w.changes}")
        code = w.stop()
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
    assert code == 0, w.stderr
    assert [c.split(" (")[0] for c in w.changes] == ["added long.md"]
    with Store(project / "polaris.db", readonly=True) as store:
        doc = store.get_document("default:long.md")
        assert doc.status == "completed" and len(store.get_chunks(document_id=doc.id)) > 10


# -- a bulk change: shown document by document, stopped after the current one ------------------
def page(title: str, sections: int) -> str:
    """A Markdown page of ``sections`` sections, each a chunk of its own; no text shared with another page."""
    body = "".join(f"## {title} part {i}\n\nPart {i} of {title} says something of its own about {title} {i}, in"
                   f" enough words to make a chunk, the {i}th of {sections} in {title}.\n\n" for i in range(sections))
    return f"# {title}\n\n{body}"


@pytest.fixture
def bulk(project: Path) -> Path:
    """Pages to copy into docs/bulk at once (``incoming/``): 15 small ones before a long one (250
    chunks, an update of docs/bulk/m.md, indexed before the watch starts) and 10 after it."""
    write(project / "docs" / "bulk" / "m.md", "# M\n\nThe first version of the long page.\n")
    incoming = project / "incoming"
    for name in [f"a{i:02}" for i in range(15)] + ["m"] + [f"z{i:02}" for i in range(10)]:
        write(incoming / f"{name}.md", page(f"page {name}", 250 if name == "m" else 4))
    return incoming


def copy_in(incoming: Path, folder: Path) -> None:
    for f in sorted(incoming.iterdir()):
        shutil.copy(f, folder / f.name)


def stored(target: str) -> dict[str, tuple[str, str | None]]:
    """Each file of the collection: (status, content hash), as the index holds it now."""
    with open_store(target, readonly=True) as store:
        return {rel: (d.status, d.content_hash) for rel, d in store.files("default").items()}


def wait_processing(target: str, rel: str, w: Watching, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stored(target).get(rel, ("",))[0] == "processing":
            return
        time.sleep(0.05)
    raise AssertionError(f"{rel} never showed as processing; changes {w.changes}, stderr {w.stderr}")


def shown(w: Watching, kind: str = "added|updated") -> list[str]:
    return [m.group(2) for c in w.changes if (m := re.match(rf"^({kind}) (\S+)", c))]


def test_a_bulk_copy_is_shown_as_it_is_stored_and_ctrl_c_stops_after_the_current_document(
        project: Path, bulk: Path, backend_target: str) -> None:
    w = Watching(project, "docs", "--db", backend_target, quiet=False)  # no --quiet: no bar off a terminal
    try:
        w.expect(r"watching docs for changes", timeout=240, stream="err")
        old = stored(backend_target)["bulk/m.md"]
        copy_in(bulk, project / "docs" / "bulk")
        wait_processing(backend_target, "bulk/m.md", w)
        first = w.expect(r"^\d\d:\d\d:\d\d added +bulk/a00\.md \(\d+ chunks\)$", timeout=5)  # shown already
        w.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        w.expect(r"^polaris: stopping after the current document", timeout=5, stream="err")
        assert time.monotonic() - sent < 5
        code = w.wait(timeout=60)
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
    assert code == 0, w.stderr
    saved = shown(w)
    assert first and "bulk/m.md" in saved and not [p for p in saved if p.startswith("bulk/z")], saved
    assert re.match(rf"^polaris: stopped after the current document: {len(saved)} documents of the batch saved"
                    r" \(shown above\), 10 files left for the next run", w.stderr[-1]), w.stderr
    for name, raw in w.raw.items():
        assert "\r" not in raw and "it/s" not in raw, (name, raw[-400:])  # one line per document, no bar
    files = stored(backend_target)
    assert not [rel for rel, (status, _) in files.items() if status == "processing"], files
    assert sorted(rel for rel in files if rel.startswith("bulk/")) == sorted(saved)
    assert files["bulk/m.md"][1] != old[1]  # its new version, whole
    run = subprocess.run([POLARIS, "index", "docs", "--db", backend_target, "--quiet"], cwd=project,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    assert len([rel for rel, (status, _) in stored(backend_target).items() if rel.startswith("bulk/")
                and status == "completed"]) == 26


def test_a_second_ctrl_c_stops_at_once_and_rolls_back_the_document_being_written(project: Path, bulk: Path,
                                                                                 backend_target: str) -> None:
    w = Watching(project, "docs", "--db", backend_target)
    try:
        w.expect(r"watching docs for changes", timeout=240, stream="err")
        old = stored(backend_target)["bulk/m.md"]
        copy_in(bulk, project / "docs" / "bulk")
        wait_processing(backend_target, "bulk/m.md", w)
        w.proc.send_signal(signal.SIGINT)
        w.expect(r"^polaris: stopping after the current document", timeout=5, stream="err")
        w.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        code = w.wait(timeout=30)
        assert time.monotonic() - sent < 10
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
    assert code == 130, w.stderr
    saved = shown(w)
    assert saved and all(p.startswith("bulk/a") for p in saved), saved  # what was saved was shown
    assert w.stderr[-1].startswith(f"polaris: stopped at once: {len(saved)} documents of the batch saved"
                                   " (shown above)"), w.stderr
    files = stored(backend_target)
    assert not [rel for rel, (status, _) in files.items() if status == "processing"], files
    assert files["bulk/m.md"] == old  # rolled back: its last version answers, as it was
    assert sorted(rel for rel in files if rel.startswith("bulk/")) == sorted([*saved, "bulk/m.md"])


def test_on_a_terminal_a_batch_draws_a_bar_and_its_lines_stay_whole(project: Path, bulk: Path) -> None:
    w = Watching(project, "docs", quiet=False, tty=True)
    try:
        w.expect(r"watching docs for changes", timeout=240, stream="err")
        copy_in(bulk, project / "docs" / "bulk")
        w.expect(r"added +bulk/z09\.md", timeout=240)
    finally:
        code = w.stop()
    assert code == 0, w.stderr
    assert re.search(r"indexing: +\d+%\|.*\| \d+/26 ", w.raw["err"]), w.raw["err"][-600:]  # the batch's bar
    assert sorted(shown(w)) == sorted(f"bulk/{f.name}" for f in bulk.iterdir())
    lines = w.raw["out"].splitlines()
    assert "\r" not in w.raw["out"] and all(LINE.match(line) for line in lines[1:]), lines  # after the first run's


def test_a_followed_folder_moved_away_keeps_its_documents_and_comes_back_unembedded(
        project: Path, backend_target: str) -> None:
    """As `polaris index` does for a root that is gone: the watch says so and removes nothing;
    moved back, every file is as indexed and nothing is embedded again. A file deleted inside a
    folder that is there is still removed."""
    from llama_index_polaris.engine.ingest.watch import Follower

    docs = project / "docs"
    config = load_config(project, use_user_config=False)
    with PolarisIndex(backend_target, config=config) as index:
        index.index_paths([docs])
        follower = Follower(index, [docs])
        held = sorted(index.store.files("default"))
        shutil.move(docs, project / "away")
        changes = follower.sync([docs])
        assert [c.kind for c in changes] == ["error"] and "gone; its documents are kept" in changes[0].reason
        assert sorted(index.store.files("default")) == held
        shutil.move(project / "away", docs)
        changes = follower.sync([docs])
        assert changes == [] and sorted(index.store.files("default")) == held
        report = index.index_paths([docs])
        assert (report.chunks_embedded, report.added, report.removed) == (0, 0, 0)
        (docs / "tokens.md").unlink()
        assert [(c.kind, c.path) for c in follower.sync([docs / "tokens.md"])] == [("removed", "tokens.md")]
