"""Every script in benchmarks/ runs: each at a tiny size, on a generated world (tests/bench_world.py),
so a refactor that breaks one fails here rather than on the next person who runs it.

Scripts run in this process (``runpy``, their ``__main__``, their own argument parser), with the
environment pointing them at the world: the imports and the bundled model's session are paid
once. The model is the real bundled all-MiniLM-L6-v2 (the chunks are few, so it costs little and
every script runs the code it measures). PostgreSQL scripts run against the session's server.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
import runpy
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from bench_world import SET, WORDS, build_world
from polaris_testing import new_database

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
N = 300  # chunks of speed.py's synthetic hybrid file (30 documents)

Args = Callable[["World"], list[str]]


class World:
    def __init__(self, root: Path, pg: Callable[[], str]) -> None:
        self.root, self.pg = root, pg
        self.eval, self.out = root / "eval", root / "out"
        self.docs = root / "docsets" / SET / "docs"

    @property
    def hybrid(self) -> str:
        return str(self.out / f"hybrid-{N}-384.db")


# script (and subcommand) -> its arguments at a tiny size
RUNS: dict[str, Args] = {
    "docsets.py check": lambda w: ["check", SET],
    "docsets.py sections": lambda w: ["sections", SET],
    "docsets.py prepare": lambda w: ["prepare", "anthropic_docs"],
    "sections.py index": lambda w: ["index", SET, "anthropic_docs"],
    "sections.py score": lambda w: ["score", SET, "anthropic_docs"],
    "sections.py report": lambda w: ["report"],
    "speed.py": lambda w: [str(w.eval), "--sizes", str(N), "--dims", "384", "--hybrid-sizes", str(N), "--queries", "3",
                           "--overfetch", "4", "--index-docs", "3", "--structures-sizes", str(N), "--cold-sizes", "", "--write-chunks", "60",
                           "--skip-real"],
    "partitions.py": lambda w: [str(w.eval), "--n", str(N), "--lists", "8", "--shares", "0.5", "--queries", "5",
                                "--by-floats", "--real", SET],
    "oneshot_parts.py": lambda w: [str(w.eval), "--n", str(N), "--queries", "3", "--rounds", "2", "--first", "1"],
    "speed_guard.py record": lambda w: [str(w.eval), "--n", str(N), "--queries", "3", "--rounds", "2", "--record",
                                        "--recorded", str(w.out / "speed_guard.json")],
    "speed_guard.py check": lambda w: [str(w.eval), "--n", str(N), "--queries", "3", "--rounds", "2",
                                       "--recorded", str(w.out / "speed_guard.json"), "--tolerance", "100"],
    "bm25_oneshot.py": lambda w: [str(w.eval), "--size", str(N), "--queries", "3"],
    "by_id_speed.py": lambda w: ["--size", str(N), "--reps", "2"],
    "explorer_speed.py": lambda w: [w.hybrid, "--queries", "2", "--reps", "1", "--query", WORDS[0], "--query",
                                    f"{WORDS[1]} {WORDS[2]}"],
    "fusion_speed.py": lambda w: [str(w.eval), "--n", str(N), "--queries", "3"],
    "pool_speed.py": lambda w: [str(w.eval), "--n", str(N), "--queries", "3", "--ks", "5,10"],
    "unit_speed.py": lambda w: [str(w.eval), "--sizes", str(N), "--queries", "3"],
    "bench_chunk.py": lambda w: ["--repeat", "1", "--docs", str(w.docs)],
    "index_speed.py": lambda w: [str(w.docs), "--rounds", "1"],
    "bench_embed.py": lambda w: [str(w.eval / "scifact"), "--n", "8", "--queries", "3"],
    "cold_search.py": lambda w: ["--runs", "1"],
    "embed_recipe.py": lambda w: [str(w.eval), "--sets", f"{SET},anthropic_docs", "--budgets", "254",
                                  "--contexts", "heading_path"],
    "fusion_features.py": lambda w: [SET, "--scifact", str(w.eval / "scifact"), "--depth", "10"],
    "fusion_fit.py collect": lambda w: ["collect", SET, "--scifact", str(w.eval / "scifact")],
    "fusion_fit.py fit": lambda w: ["fit"],
    "fusion_fit.py verify": lambda w: ["verify", str(w.out / "fusion" / "weights.toml"), SET, "--scifact",
                                       str(w.eval / "scifact")],
    "k_stability.py": lambda w: [SET, "--ks", "1,5,10", "--pools", "30,60", "--scifact", str(w.eval / "scifact")],
    "llamaindex_parity.py": lambda w: [str(w.eval), "--sets", "anthropic_docs"],
    "lookup_speed.py": lambda w: [SET, "--rounds", "1"],
    "mcp_latency.py": lambda w: [SET, "--fresh", "1", "--calls", "2"],
    "mcp_tokens.py": lambda w: [SET],
    "passage_vectors.py": lambda w: [SET, "--split", "train"],
    "postgres.py speed": lambda w: ["speed", "--n", str(N), "--queries", "3", "--writes", "1.5", "--uri", w.pg()],
    "postgres.py quality": lambda w: ["quality", "--docsets", SET, "--limit", "3", "--no-baseline", "--uri", w.pg()],
    "quality.py": lambda w: [str(w.eval), "--quick"],
    "readme_speed.py": lambda w: ["--docs", str(w.docs), "--queries", "2", "--repeat", "1", "--cold-runs", "1"],
    "real_vectors.py": lambda w: [str(w.eval), "--docs", "4"],
    "run_all.py": lambda w: [str(w.eval), "--quality-only", "--quick"],
    "section_ablation.py": lambda w: [SET, "--variants", "chunk,dedup,section,section-pool1,no-lookup,alpha0.5"],
    "section_bm25.py": lambda w: [SET],
    "section_text.py": lambda w: [SET, "--stitched"],
    "junk_chunks.py": lambda w: [SET],
    "bigram_bm25.py": lambda w: [SET],
    "bigram_bm25.py ablate": lambda w: ["--ablate", SET],
    "terms_unchanged.py run": lambda w: ["run", "smoke", SET],
    "fusion_kinds.py collect": lambda w: ["collect", SET],
    "fusion_kinds.py report": lambda w: ["report", SET],
    "known_share.py": lambda w: [SET],
    "match_strength.py collect": lambda w: ["collect", SET],
    "match_strength.py score": lambda w: ["score", SET, "--near-miss"],
}
# not run, and why (each must still exist: a renamed script fails test_every_benchmark_is_covered)
SKIPPED: dict[str, str] = {
    "common.py": "helpers imported by the others, run through them",
    "peer_markdown_memory.py": "runs markdown-memory, which is not a project dependency (its own venv, see its docstring)",
    "pgvector_native.sh": "compiles pgvector from a source checkout for this CPU (a C toolchain and the source)",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> World:
    root = tmp_path_factory.mktemp("bench-world")
    env = build_world(root)
    environ = dict(os.environ)  # restored at the end: some scripts setdefault thread variables
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    mp.chdir(REPO)
    mp.syspath_prepend(str(BENCH))
    before = set(sys.modules)
    import llama_index_polaris  # all of it, once, for run_script's check (and outside any capfd:
    # a module imported under capfd keeps its sys.stderr, closed after that test, e.g. mcp's errlog default)

    for info in pkgutil.walk_packages(llama_index_polaris.__path__, "llama_index_polaris."):
        importlib.import_module(info.name)

    def pg() -> str:
        return new_database(request.getfixturevalue("pg_server"), "bench")

    yield World(root, pg)
    for name in set(sys.modules) - before:  # the scripts' modules read the environment on import
        if getattr(sys.modules[name], "__file__", "") and str(BENCH) in str(sys.modules[name].__file__):
            del sys.modules[name]
    mp.undo()
    os.environ.clear()
    os.environ.update(environ)


def engine_state() -> dict[tuple[str, str], int]:
    """id() of every module- and class-level attribute of the engine's loaded modules (the world
    imports them all); an attribute still None is left out (a lazily filled cache)."""
    state = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("llama_index_polaris"):
            continue
        for attr, value in list(vars(module).items()):
            if value is None:
                continue
            state[(name, attr)] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for member, inner in list(vars(value).items()):
                    state[(f"{name}.{attr}", member)] = id(inner)
    return state


def run_script(name: str, argv: list[str]) -> None:
    """``python benchmarks/<name> argv...`` in this process; fails on a non-zero exit, or if the script
    leaves a function or constant of the engine replaced (every later test would run on it)."""
    script = BENCH / name
    old = sys.argv
    sys.argv = [str(script), *argv]
    levels = {n: lg.level for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    before = engine_state()
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (None, 0), f"{name} {' '.join(argv)} exited with {stop.code!r}"
    finally:
        sys.argv = old
        for n, lg in logging.root.manager.loggerDict.items():  # a script may quiet a logger (readme_speed.py)
            if isinstance(lg, logging.Logger):
                lg.setLevel(levels.get(n, logging.NOTSET))
    after = engine_state()
    changed = sorted(f"{owner}.{attr}" for owner_attr, ident in before.items()
                     if after.get(owner_attr, ident) != ident for owner, attr in [owner_attr])
    assert not changed, f"{name} left these replaced: {changed}"


@pytest.mark.parametrize("run", list(RUNS))
def test_benchmark_runs(run: str, world: World, capfd: pytest.CaptureFixture[str]) -> None:
    script = run.split()[0]
    t = time.perf_counter()
    run_script(script, RUNS[run](world))
    out = capfd.readouterr().out
    assert out.strip(), f"{run} printed nothing"
    print(f"{run}: {time.perf_counter() - t:.1f} s")


def test_every_benchmark_is_covered() -> None:
    """A new script in benchmarks/ gets a tiny run above (or a reason to be skipped)."""
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    covered = {r.split()[0] for r in RUNS} | set(SKIPPED)
    assert scripts - covered == set(), "benchmarks without a smoke run"
    assert covered - scripts == set(), "smoke runs of scripts that are gone"


def test_the_speed_guard_fails_a_run_slower_than_recorded(world: World, tmp_path: Path) -> None:
    """A recorded ratio far below what this run measures is a failure (exit 1), saying both; the
    same figure recorded by the run itself passes; a figure for another size is refused."""
    guard = importlib.import_module("speed_guard")
    args = [str(world.eval), "--n", str(N), "--queries", "3", "--rounds", "1"]
    recorded = tmp_path / "guard.json"
    other = {"n": N, "ratio": 1e-9, "cpu": "Another CPU", "machine": "Another CPU, 2 cores"}
    recorded.write_text(json.dumps({"figures": [other]}))
    assert guard.main([*args, "--recorded", str(recorded)]) == 2  # nothing recorded for this kind of CPU
    assert guard.main([*args, "--record", "--recorded", str(recorded)]) == 0
    kept = json.loads(recorded.read_text())["figures"]
    assert kept[0] == other and len(kept) == 2  # the other kind's figure is kept beside this one's
    figure = kept[1]
    assert figure["n"] == N and figure["ratio"] > 0 and len(figure["rounds"]) == 1
    assert guard.main([*args, "--recorded", str(recorded), "--tolerance", "100"]) == 0
    recorded.write_text(json.dumps({"figures": [other, {**figure, "ratio": figure["ratio"] / 1000}]}))
    assert guard.main([*args, "--recorded", str(recorded)]) == 1
    recorded.write_text(json.dumps({**figure, "ratio": figure["ratio"] / 1000}))  # the older one-figure file
    assert guard.main([*args, "--recorded", str(recorded)]) == 1
    recorded.write_text(json.dumps({"figures": [{**figure, "n": N * 10}]}))
    assert guard.main([*args, "--recorded", str(recorded)]) == 2
