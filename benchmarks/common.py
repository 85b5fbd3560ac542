"""Shared helpers for the benchmark scripts: paths, timing, memory, machine, Markdown tables.

Nothing here reads or stores evaluation data; the scripts take the eval folder as an argument.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
# $POLARIS_BENCH_OUT and $POLARIS_EVAL move the outputs and the default eval folder (the smoke
# test, tests/test_benchmarks_smoke.py, points both at a tiny generated world in tmp_path).
OUT = Path(os.environ.get("POLARIS_BENCH_OUT") or REPO / "benchmarks" / "out").resolve()
DEFAULT_EVAL = Path(os.environ.get("POLARIS_EVAL") or REPO / ".." / "shared" / "eval").resolve()


def docsets_home() -> Path:
    """Where prepared doc sets live: $POLARIS_DOCSETS, else ../shared/eval/docsets when it can be
    written, else benchmarks/out/docsets-src (../shared is read-only on some machines)."""
    if os.environ.get("POLARIS_DOCSETS"):
        return Path(os.environ["POLARIS_DOCSETS"]).resolve()
    shared = DEFAULT_EVAL / "docsets"
    if shared.is_dir() or os.access(DEFAULT_EVAL, os.W_OK):
        return shared
    return OUT / "docsets-src"


DOCSETS = docsets_home()


def out_dir() -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    return OUT


def pcts(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean in milliseconds."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000
    if ms.size == 0:
        return {"p50": float("nan"), "p95": float("nan"), "mean": float("nan"), "n": 0}
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "mean": float(ms.mean()), "n": int(ms.size)}


def peak_rss_mb() -> float:
    """Peak resident set of this process so far: VmHWM (ru_maxrss survives fork + exec on Linux,
    so a child would report its parent's peak)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def machine() -> dict[str, Any]:
    """nproc, CPU model, RAM, Python and library versions."""
    info: dict[str, Any] = {"nproc": os.cpu_count(), "python": platform.python_version()}
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
        info["nproc"] = int(subprocess.run(["nproc"], capture_output=True, text=True, env=env).stdout.strip())
    except Exception:
        pass
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
    except Exception:
        pass
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
        info["ram_gb"] = round(kb / 1024 / 1024, 1)
    except Exception:
        pass
    try:
        import sqlite_vec

        from llama_index_polaris.engine.sqlite.connect import sqlite_module

        mod = sqlite_module()
        conn = mod.connect(":memory:")
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        info["sqlite"] = conn.execute("select sqlite_version()").fetchone()[0]
        info["sqlite_vec"] = conn.execute("select vec_version()").fetchone()[0]
        conn.close()
    except Exception:
        pass
    info["numpy"] = np.__version__
    return info


def machine_line(info: dict[str, Any]) -> str:
    return (f"{info.get('cpu', '?')}, {info.get('nproc', '?')} cores (nproc), {info.get('ram_gb', '?')} GB RAM;"
            f" Python {info.get('python')}, SQLite {info.get('sqlite', '?')}, sqlite-vec {info.get('sqlite_vec', '?')},"
            f" numpy {info.get('numpy')}")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], floatfmt: str = ".4f") -> str:
    """A Markdown table; floats formatted with ``floatfmt``."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if v != v:
                return "n/a"
            return format(v, floatfmt)
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def save_json(name: str, data: Any) -> Path:
    path = out_dir() / name
    path.write_text(json.dumps(data, indent=2, default=float))
    return path


def publish(stem: str, results: Any, render: Any) -> str:
    """Write ``<stem>.json`` and ``<stem>.md`` (``render(results)``) to benchmarks/out and print the Markdown."""
    save_json(f"{stem}.json", results)
    md = render(results)
    (out_dir() / f"{stem}.md").write_text(md)
    print(md)
    return md
