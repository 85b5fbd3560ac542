"""Cold `polaris search` against the bare imports it cannot avoid, paired in one run (#38).

    python benchmarks/cold_search.py [--runs 41] [--query "how do we rotate an api key"]
        [--repo DIR]        # time another checkout's code (e.g. the commit before a change)

Indexes examples/handbook with examples/polaris.toml (the bundled all-minilm-l6-v2) into a
temporary folder, byte-compiles the package, then runs, ``--runs`` times each, interleaved
(the order alternates every pair, so drift in the machine's load falls on both):

- A: ``polaris search QUERY`` in a new process (the console script next to this Python);
- B: ``python -c "import numpy, onnxruntime, tokenizers"``.

Prints the medians (wall and CPU), the ratio of the medians and the median of the pairs'
ratios, the load average before and after, and checks that the cold search returns the same
hits (ids and order) as a long-lived in-process search with the default session. One warm-up
pair is not counted (the page cache; the first cold search also writes the model's cached
optimised graph). ``--runs 1`` is the smoke test's size.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, publish  # noqa: E402

BARE = "import numpy, onnxruntime, tokenizers"
QUERY = "how do we rotate an api key"


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one process, which must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, proc.stdout


def polaris_command() -> list[str]:
    exe = Path(sys.executable).with_name("polaris")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from llama_index_polaris.cli import main; sys.exit(main())"]


def index_handbook(work: Path, env: dict[str, str]) -> None:
    shutil.copy(REPO / "examples" / "polaris.toml", work / "polaris.toml")
    proc = subprocess.run([*polaris_command(), "index", str(REPO / "examples" / "handbook"), "--quiet"],
                          cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])


def long_lived_ids(work: Path, query: str, env: dict[str, str]) -> list[str]:
    """The hits of the same query in a long-lived process (default session, caches loaded)."""
    code = ("import json, sys; from llama_index_polaris.engine.index import PolarisIndex;"
            "from llama_index_polaris.engine.config import load_config\n"
            "cfg = load_config(config_file='polaris.toml')\n"
            "with PolarisIndex(cfg.db_path, config=cfg, readonly=True) as ix:\n"
            "    print(json.dumps([h.node_id for h in ix.search(sys.argv[1])]))")
    return json.loads(subprocess.run([sys.executable, "-c", code, query], cwd=work, env=env, check=True,
                                     capture_output=True, text=True).stdout)


def measure(runs: int, query: str, repo: Path | None) -> dict:
    env = dict(os.environ)
    if repo is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")])
    package = (repo or REPO) / "llama_index_polaris"
    compileall.compile_dir(str(package), quiet=1)
    search = [*polaris_command(), "search", query, "--json"]
    bare = [sys.executable, "-c", BARE]
    with tempfile.TemporaryDirectory(prefix="polaris-cold-") as tmp:
        work = Path(tmp)
        index_handbook(work, env)
        run_timed(search, work, env), run_timed(bare, work, env)  # warm-up pair, not counted
        load_before = os.getloadavg()
        a_wall, a_cpu, b_wall, b_cpu = [], [], [], []
        out = ""
        for i in range(runs):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            for which in order:
                if which == "a":
                    wall, cpu, out = run_timed(search, work, env)
                    a_wall.append(wall), a_cpu.append(cpu)
                else:
                    wall, cpu, _ = run_timed(bare, work, env)
                    b_wall.append(wall), b_cpu.append(cpu)
        load_after = os.getloadavg()
        cold_ids = [h["node_id"] for h in json.loads(out)]
        same = cold_ids == long_lived_ids(work, query, env)
    med = statistics.median
    return {
        "runs": runs, "query": query, "repo": str(repo or REPO),
        "search_wall_s": med(a_wall), "bare_wall_s": med(b_wall),
        "search_cpu_s": med(a_cpu), "bare_cpu_s": med(b_cpu),
        "ratio": med(a_wall) / med(b_wall), "ratio_of_pairs": med(a / b for a, b in zip(a_wall, b_wall)),
        "cpu_ratio": med(a_cpu) / med(b_cpu) if med(b_cpu) else float("nan"),
        "search_wall_range_s": [min(a_wall), max(a_wall)], "bare_wall_range_s": [min(b_wall), max(b_wall)],
        "load_before": load_before, "load_after": load_after, "hits": len(cold_ids), "same_hits": same,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def render(r: dict) -> str:
    load = f"{r['load_before'][0]:.1f} before, {r['load_after'][0]:.1f} after (1-min load average)"
    return "\n".join([
        f"cold `polaris search` vs `python -c \"{BARE}\"`, {r['runs']} interleaved pairs, {r['when']}, load {load}",
        "",
        "| | wall p50 | CPU p50 | wall min to max |",
        "|---|---|---|---|",
        f"| `polaris search` (handbook, 59 chunks) | {r['search_wall_s']:.3f} s | {r['search_cpu_s']:.3f} s"
        f" | {r['search_wall_range_s'][0]:.3f} to {r['search_wall_range_s'][1]:.3f} |",
        f"| bare imports | {r['bare_wall_s']:.3f} s | {r['bare_cpu_s']:.3f} s"
        f" | {r['bare_wall_range_s'][0]:.3f} to {r['bare_wall_range_s'][1]:.3f} |",
        f"| **ratio** | **{r['ratio']:.2f}x** (median of the pairs' ratios {r['ratio_of_pairs']:.2f}x)"
        f" | {r['cpu_ratio']:.2f}x | |",
        "",
        f"same hits as a long-lived search: {r['same_hits']} ({r['hits']} hits)",
        "",
    ])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=41, help="pairs to time (1 for a smoke run)")
    ap.add_argument("--query", default=QUERY)
    ap.add_argument("--repo", type=Path, default=None, help="run another checkout's llama_index_polaris")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be 1 or more")
    result = measure(args.runs, args.query, args.repo.resolve() if args.repo else None)
    publish("cold_search", result, render)
    return 0 if result["same_hits"] else 1


if __name__ == "__main__":
    sys.exit(main())
