"""Every example runs, and shows what the README says it shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
POLARIS = str(Path(sys.executable).with_name("polaris"))


def test_quickstart_handbook_covers_both_failure_modes(tmp_path: Path) -> None:
    """The README quickstart: index examples/handbook on the bundled model, ask two questions."""
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work, ignore=shutil.ignore_patterns("*.db*", "__pycache__"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    def polaris(*args: str) -> str:
        proc = subprocess.run([POLARIS, *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "0 failed" in polaris("index", "handbook")
    # worded unlike its answer: the vector side finds the token-lifetime section, hybrid keeps it in the top 3
    hits = json.loads(polaris("search", "how do we handle expired sessions", "-k", "3", "--json", "--explain"))
    tokens = [h for h in hits if h["heading_path"].endswith("Token lifetime and refresh")]
    assert tokens and tokens[0]["document"] == "auth/tokens.md" and tokens[0]["explain"]["vector_rank"] == 1
    bm25 = json.loads(polaris("search", "how do we handle expired sessions", "-k", "3", "--json", "--mode", "bm25"))
    assert all(h["document"] != "auth/tokens.md" for h in bm25)  # keywords alone are led astray
    # an exact identifier: the BM25 side finds the config key
    hits = json.loads(polaris("search", "rrf_k", "-k", "3", "--json", "--explain"))
    assert hits[0]["document"] == "search/configuration.md"
    assert hits[0]["explain"]["bm25_rank"] == 1
    assert "unchanged" in polaris("index", "handbook")


def test_llamaindex_query_engine_example(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "llamaindex_query_engine.py"), str(tmp_path / "li.db")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
    )
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("Q: ")[1:]
    assert any(line.split()[1:3] == ["auth/tokens.md", "Access"] and "Token lifetime and refresh" in line
               for line in blocks[0].splitlines()[1:7:2])  # among the three hits
    assert blocks[1].splitlines()[1].split()[1] == "search/configuration.md"
    # `polaris index` on the file LlamaIndex built: the same documents (by path), nothing to embed
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("polaris")), "index", str(EXAMPLES / "handbook"), "--db",
         str(tmp_path / "li.db"), "--model", "all-minilm-l6-v2", "--json", "-q"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
    )
    assert cli.returncode == 0, cli.stderr
    report = json.loads(cli.stdout)
    assert (report["added"], report["updated"], report["removed"], report["chunks_embedded"]) == (0, 11, 0, 0)
    assert report["chunks_reused"] == report["chunks"] == 59


def test_llamaindex_query_engine_example_leaves_nothing_behind(tmp_path: Path) -> None:
    """Run as a newcomer runs it (no DB_PATH, from the folder it is in): its index goes to a temporary
    folder, not into the clone, and a stage that did not see a hit reads `-`, as in `polaris search --explain`."""
    before = sorted(p.name for p in EXAMPLES.iterdir())
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "llamaindex_query_engine.py")], capture_output=True, text=True, timeout=600,
        cwd=tmp_path, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
    )
    assert proc.returncode == 0, proc.stderr
    assert "None" not in proc.stdout and "bm25 #-" in proc.stdout  # the rrf_k question has hits BM25 did not find
    assert [p.name for p in tmp_path.iterdir() if p.name != "xdg"] == []
    assert sorted(p.name for p in EXAMPLES.iterdir()) == before
