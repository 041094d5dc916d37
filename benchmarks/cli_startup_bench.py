"""How long the read-only commands take: `status`, `list` and `history` on a finished demo run, against
a bare `python -c pass` (the interpreter's own start-up).

    python benchmarks/cli_startup_bench.py [--project-root DIR] [--repeats 9]

Without --project-root, a demo run (`python -m orchestrator demo`) is made in a temporary project root
first (minutes: it trains the tiny agent). The commands run with this checkout's code (in it, with
PYTHONPATH set to it), so the same demo project measures two checkouts: pass `--code DIR` for another one.
Prints the median wall-clock seconds of each command, after one untimed run that caches the bytecode
(under a temporary PYTHONPYCACHEPREFIX, never in the checkout).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], env: dict[str, str], code: Path, repeats: int) -> float:
    subprocess.run(command, check=True, capture_output=True, env=env, cwd=code)  # warm-up: writes the bytecode
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=env, cwd=code)  # `-m` looks in cwd first
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def demo_project(env: dict[str, str], code: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="cli-bench-")) / "project"
    shutil.copytree(ROOT / "source_of_truth", root / "source_of_truth",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "orchestrator", "demo", "--project-root", str(root)], check=True,
                   capture_output=True, env=env, cwd=code)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project-root", type=Path, help="a project root holding a finished demo run")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose orchestrator is measured")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    code = args.code.resolve()
    # as a user runs it, with cached bytecode, kept out of the checkout
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(code),
           "OMP_NUM_THREADS": "1", "PYTHONPYCACHEPREFIX": tempfile.mkdtemp(prefix="cli-bench-pycache-")}
    root = (args.project_root or demo_project(env, code)).resolve()
    runs = sorted(p.parent.name for p in (root / "runs").glob("*/run.json"))
    if not runs:
        sys.exit(f"no run under {root / 'runs'}")
    orchestrator = [sys.executable, "-m", "orchestrator"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "status": [*orchestrator, "status", runs[-1], "--project-root", str(root)],
        "list": [*orchestrator, "list", "--project-root", str(root)],
        "history": [*orchestrator, "history", runs[-1], "--project-root", str(root)],
    }
    print(f"code {code}, project {root}, run {runs[-1]}, median of {args.repeats}")
    for name, command in commands.items():
        print(f"  {name:<15} {timed(command, env, code, args.repeats):.3f} s")


if __name__ == "__main__":
    main()
