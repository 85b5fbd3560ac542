"""`polaris index PATH --watch`: a real subprocess following real edits on disk."""

from __future__ import annotations

import fcntl
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex

POLARIS = str(Path(sys.executable).with_name("polaris"))
LINE = re.compile(r"^\d\d:\d\d:\d\d (\w+) +(.*)$")


class Watching:
    """The `polaris index --watch` process, its output read line by line as it comes."""

    def __init__(self, cwd: Path, *args: str) -> None:
        env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / ".xdg"), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([POLARIS, "index", *args, "--watch", "--quiet"], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[tuple[str, str]] = queue.Queue()
        self.changes: list[str] = []
        self.stderr: list[str] = []
        for name, stream in (("out", self.proc.stdout), ("err", self.proc.stderr)):
            threading.Thread(target=self._read, args=(name, stream), daemon=True).start()

    def _read(self, name: str, stream) -> None:
        for line in stream:
            self.lines.put((name, line.rstrip("\n")))

    def expect(self, pattern: str, timeout: float = 30, stream: str = "out") -> str:
        """The next line of ``stream`` matching ``pattern``; every change line seen is kept."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                name, line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {timeout}s; changes {self.changes},"
                                     f" stderr {self.stderr}") from None
            if name == "err":
                self.stderr.append(line)
            elif LINE.match(line):
                self.changes.append(" ".join(LINE.match(line).groups()))
            if name == stream and re.search(pattern, line):
                return line

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=120)
        time.sleep(0.2)  # the reader threads drain what is left
        while not self.lines.empty():
            name, line = self.lines.get()
            (self.stderr if name == "err" else self.changes).append(
                line if name == "err" or not LINE.match(line) else " ".join(LINE.match(line).groups()))
        return code


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
    from llama_index_polaris.engine.store import Store

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
