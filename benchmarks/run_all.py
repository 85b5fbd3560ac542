"""Run the benchmark suite and write ``benchmarks/out/report.md``.

    pip install -e '.[bench]'              # llama-index-retrievers-bm25 for the LlamaIndex baseline
    python benchmarks/run_all.py [EVAL_DIR] [--quality-only | --speed-only] [--sizes 10000,100000,1000000]

EVAL_DIR defaults to ``../shared/eval`` (relative to the repository). The first run builds
the cached SciFact index (``~/.cache/polaris/eval``, shared with ``polaris eval``; about
10 minutes of embedding on 2 cores), the anthropic_docs index and the synthetic vector
files (``benchmarks/out``, ~6 GB with the 1M sets); later runs reuse them. Not part of
the test run. Each part can also run alone: ``benchmarks/quality.py``, ``benchmarks/speed.py``.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, REPO, machine, machine_line, out_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", default=str(DEFAULT_EVAL))
    ap.add_argument("--quality-only", action="store_true")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--sizes", default="10000,100000,1000000", help="vector KNN sizes (speed)")
    ap.add_argument("--hybrid-sizes", default="10000,100000", help="full-pipeline sizes (speed)")
    ap.add_argument("--quick", action="store_true", help="quality.py --quick (60 SciFact queries per split)")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    parts = []
    if not args.speed_only:
        subprocess.run([sys.executable, str(here / "quality.py"), args.eval_dir, *(["--quick"] if args.quick else [])],
                       check=True, cwd=REPO)
        parts.append((out_dir() / "quality.md").read_text())
    if not args.quality_only:
        subprocess.run([sys.executable, str(here / "speed.py"), args.eval_dir, "--sizes", args.sizes,
                        "--hybrid-sizes", args.hybrid_sizes], check=True, cwd=REPO)
        parts.append((out_dir() / "speed.md").read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    head = ["# Polaris benchmark report", "",
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}.",
            f"Machine: {machine_line(machine())}.", "",
            f"Command: `python benchmarks/run_all.py {args.eval_dir}`", ""]
    report = out_dir() / "report.md"
    report.write_text("\n".join(head) + "\n" + "\n".join(parts))
    print(f"wrote {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
