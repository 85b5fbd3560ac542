"""An index run that finds nothing to index says what it ignored and why, and records no root."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import run, write_docs

from llama_index_polaris.engine.ingest.sources import walk


def notes_without_markdown(project: Path) -> Path:
    notes = project / "notes"
    (notes / "build").mkdir(parents=True)
    for name in ("a.py", "b.py", "c.py", "guide.rst", "logo.png", "Makefile"):
        (notes / name).write_text("x")
    (notes / ".draft.md").write_text("# hidden\n")
    (notes / ".gitignore").write_text("build/\n")
    (notes / "build" / "out.md").write_text("# generated\n")
    return notes


def test_walk_lists_what_it_passed_over_and_by_which_rule(tmp_path):
    notes = notes_without_markdown(tmp_path)
    found = walk([notes], notes)
    assert found.files == []
    assert sorted(found.ignored) == [
        (".draft.md", "hidden"), ("Makefile", "extension"), ("a.py", "extension"), ("b.py", "extension"),
        ("build/", "gitignore"), ("c.py", "extension"), ("guide.rst", "extension"), ("logo.png", "extension"),
    ]


def test_an_empty_run_says_what_it_ignored_and_sets_no_root(tmp_path, backend_target):
    write_docs(tmp_path, backend_target)
    notes_without_markdown(tmp_path)
    proc = run("index", "notes", "--json", "--quiet", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["nothing_found"] is True and report["root"] is None and report["added"] == 0
    assert ["a.py", "extension"] in report["ignored"] and ["build/", "gitignore"] in report["ignored"]
    assert len(report["ignored"]) == 8
    line = proc.stderr
    assert "nothing to index: 3 .py, 1 .png, 1 .rst, 1 no extension (not a file type Polaris indexes" in line
    assert "; 1 folder (matched by a .gitignore); 1 .md (hidden: the name starts with a dot)." in line
    assert "No root was recorded" in line
    # the next run over a sibling folder is not refused as outside a root "notes"
    second = json.loads(run("index", "docs", "--json", "--quiet", cwd=tmp_path).stdout)
    assert second["added"] == 3 and second["root"] == str((tmp_path / "docs").resolve())
    assert second["nothing_found"] is False and "nothing to index" not in run("status", cwd=tmp_path).stderr


def test_a_run_that_finds_files_reports_no_empty_line(tmp_path, backend_target):
    write_docs(tmp_path, backend_target)
    (tmp_path / "docs" / "diagram.png").write_text("x")
    proc = run("index", "docs", "--json", "--quiet", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["added"] == 3 and report["ignored"] == [["diagram.png", "extension"]]
    assert "nothing to index" not in proc.stderr
