"""The run's page (runs/RUN_ID/report.html): its size, and how long writing it takes, on a finished demo run.

    python benchmarks/page_bench.py [--project-root DIR] [--run-id RUN] [--repeats 20]

Without --project-root, a demo run (`python -m orchestrator demo`) is made in a temporary project root first
(minutes: it trains the tiny agent); nothing is written into the checkout. Prints:
- wall and CPU time (this process and its git and dot children; the CPU time moves less with others' load) of
  the first write in this process (git reads each commit's diff once, Graphviz draws the pipeline once, the
  template compiles): what `python -m orchestrator report` pays after its imports, and the runner at its first
  checkpoint;
- the median of the next writes (commits and drawing cached): what the runner pays at every later checkpoint;
- the page's size, and how much of it is curves (inlined PNGs), diffs and the pipeline's SVG;
- the `report` command end to end (interpreter, imports, write), median of 3.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (git, dot): less sensitive to others' load."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def demo_project() -> Path:
    root = Path(tempfile.mkdtemp(prefix="page-bench-")) / "project"
    shutil.copytree(ROOT / "source_of_truth", root / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "orchestrator", "demo", "--project-root", str(root)], check=True,
                   capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project-root", type=Path)
    parser.add_argument("--run-id", help="default: the latest run under the project root")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    from orchestrator.graph import build_graph
    from orchestrator.page import Pipeline, write_page
    from orchestrator.run.runs import list_runs

    root = (args.project_root or demo_project()).resolve()
    run_id = args.run_id or list_runs(root)[-1].run_id
    pipeline = Pipeline.of(build_graph().get_graph())

    started, cpu = time.perf_counter(), cpu_seconds()
    path = write_page(root, run_id, pipeline)
    first, first_cpu = time.perf_counter() - started, cpu_seconds() - cpu
    warm, warm_cpu = [], []
    for _ in range(args.repeats):
        started, cpu = time.perf_counter(), cpu_seconds()
        write_page(root, run_id, pipeline)
        warm.append(time.perf_counter() - started)
        warm_cpu.append(cpu_seconds() - cpu)

    html = path.read_text(encoding="utf-8")
    images = sum(len(m) for m in re.findall(r'src="data:image/png;base64,[^"]*"', html))
    diffs = sum(len(m) for m in re.findall(r'<pre class="diff">.*?</pre>', html, re.S))
    svg = sum(len(m) for m in re.findall(r"<svg.*?</svg>", html, re.S))
    curves = html.count('class="curve"')

    command = [sys.executable, "-m", "orchestrator", "report", run_id, "--project-root", str(root)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env=env)  # bytecode cached
    cli = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env=env)
        cli.append(time.perf_counter() - started)

    print(f"run {run_id} in {root}")
    print(f"page: {len(html.encode()) / 1024:.0f} KiB; curves {curves} PNGs {images / 1024:.0f} KiB, "
          f"diffs {diffs / 1024:.0f} KiB, pipeline SVG {svg / 1024:.0f} KiB")
    print(f"write, first in this process: {first * 1000:.0f} ms wall, {first_cpu * 1000:.0f} ms CPU (git and dot "
          f"included)")
    print(f"write, cached commits and drawing (median of {args.repeats}): {statistics.median(warm) * 1000:.0f} ms "
          f"wall, {statistics.median(warm_cpu) * 1000:.0f} ms CPU")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)")
    print(f"`python -m orchestrator report` end to end (median of 3): {statistics.median(cli):.2f} s")


if __name__ == "__main__":
    main()
