"""Cold `polaris search` against the bare imports it cannot avoid, paired in one run (#38).

    python benchmarks/cold_search.py [--runs 41] [--query "how do we rotate an api key"]
        [--before DIR]      # also time another checkout's llama_index_polaris, in the same pairs
        [--repo DIR]        # time another checkout's code instead of this one

Indexes examples/handbook with examples/polaris.toml (the bundled all-minilm-l6-v2) into a
temporary folder, byte-compiles the package, then runs, ``--runs`` times each, interleaved
(the order alternates every pair, so drift in the machine's load falls on both):

- A: ``polaris search QUERY`` in a new process (the console script next to this Python);
- B: ``python -c "import numpy, onnxruntime, tokenizers"``;
- with ``--before DIR``, C: the same search with ``PYTHONPATH=DIR`` (e.g. ``git archive`` of
  the commit before a change, unpacked), its index built by that code.

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


def code_env(repo: Path | None) -> dict[str, str]:
    """The environment that runs ``repo``'s llama_index_polaris (this checkout's when None), compiled."""
    env = dict(os.environ)
    if repo is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")])
    compileall.compile_dir(str((repo or REPO) / "llama_index_polaris"), quiet=1)
    return env


def summary(wall: list[float], cpu: list[float], bare_wall: list[float], bare_cpu: list[float]) -> dict:
    med = statistics.median
    return {"wall_s": med(wall), "cpu_s": med(cpu), "wall_range_s": [min(wall), max(wall)],
            "ratio": med(wall) / med(bare_wall), "ratio_of_pairs": med(a / b for a, b in zip(wall, bare_wall)),
            "cpu_ratio": med(cpu) / med(bare_cpu) if med(bare_cpu) else float("nan")}


def measure(runs: int, query: str, repo: Path | None, before: Path | None = None) -> dict:
    envs = {"search": code_env(repo), "bare": dict(os.environ)}
    if before is not None:
        envs["before"] = code_env(before)
    search = [*polaris_command(), "search", query, "--json"]
    commands = {"search": search, "bare": [sys.executable, "-c", BARE], "before": search}
    names = list(envs)
    with tempfile.TemporaryDirectory(prefix="polaris-cold-") as tmp:
        work = {name: Path(tmp) / name for name in names}
        for name in names:
            work[name].mkdir()
            if name != "bare":
                index_handbook(work[name], envs[name])
        for name in names:  # warm-up round, not counted (page cache; the first writes the cached graph)
            run_timed(commands[name], work[name], envs[name])
        load_before = os.getloadavg()
        wall: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        outs: dict[str, str] = {}
        for i in range(runs):
            for name in names if i % 2 == 0 else names[::-1]:  # the order alternates every round
                w, c, outs[name] = run_timed(commands[name], work[name], envs[name])
                wall[name].append(w), cpu[name].append(c)
        load_after = os.getloadavg()
        cold_ids = [h["node_id"] for h in json.loads(outs["search"])]
        same = cold_ids == long_lived_ids(work["search"], query, envs["search"])
    med = statistics.median
    result = {
        "runs": runs, "query": query, "repo": str(repo or REPO), "before_repo": str(before) if before else None,
        "bare_wall_s": med(wall["bare"]), "bare_cpu_s": med(cpu["bare"]),
        "bare_wall_range_s": [min(wall["bare"]), max(wall["bare"])],
        "search": summary(wall["search"], cpu["search"], wall["bare"], cpu["bare"]),
        "before": summary(wall["before"], cpu["before"], wall["bare"], cpu["bare"]) if before else None,
        "load_before": load_before, "load_after": load_after, "hits": len(cold_ids), "same_hits": same,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if before is not None:
        result["same_hits_as_before"] = cold_ids == [h["node_id"] for h in json.loads(outs["before"])]
    return result


def render(r: dict) -> str:
    load = f"{r['load_before'][0]:.1f} before, {r['load_after'][0]:.1f} after (1-min load average)"
    rows = [("`polaris search`, this code", r["search"])]
    if r["before"]:
        rows.append((f"`polaris search`, {r['before_repo']}", r["before"]))

    def row(label: str, s: dict) -> str:
        return (f"| {label} | {s['wall_s']:.3f} s | {s['cpu_s']:.3f} s | {s['wall_range_s'][0]:.3f} to"
                f" {s['wall_range_s'][1]:.3f} | **{s['ratio']:.2f}x** ({s['ratio_of_pairs']:.2f}x) | {s['cpu_ratio']:.2f}x |")

    lines = [
        f"cold `polaris search` on examples/handbook (59 chunks) vs `python -c \"{BARE}\"`, {r['runs']}"
        f" interleaved rounds, {r['when']}, load {load}",
        "",
        "| command | wall p50 | CPU p50 | wall min to max | wall ratio to the bare imports (median of the rounds' ratios) | CPU ratio |",
        "|---|---|---|---|---|---|",
        *(row(label, s) for label, s in rows),
        f"| bare imports | {r['bare_wall_s']:.3f} s | {r['bare_cpu_s']:.3f} s | {r['bare_wall_range_s'][0]:.3f} to"
        f" {r['bare_wall_range_s'][1]:.3f} | 1 | 1 |",
        "",
        f"same hits as a long-lived search: {r['same_hits']} ({r['hits']} hits)"
        + (f"; same hits as before: {r['same_hits_as_before']}" if r["before"] else ""),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=41, help="pairs to time (1 for a smoke run)")
    ap.add_argument("--query", default=QUERY)
    ap.add_argument("--repo", type=Path, default=None, help="run another checkout's llama_index_polaris")
    ap.add_argument("--before", type=Path, default=None, help="also time this checkout's llama_index_polaris")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be 1 or more")
    resolved = [p.resolve() if p else None for p in (args.repo, args.before)]
    result = measure(args.runs, args.query, *resolved)
    publish("cold_search", result, render)
    return 0 if result["same_hits"] and result.get("same_hits_as_before", True) else 1


if __name__ == "__main__":
    sys.exit(main())
