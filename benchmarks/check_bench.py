"""How long `python -m orchestrator check` takes on each example's reference set (static rules, then
the import check and the contract probe on a real game, each in a fresh interpreter).

    python benchmarks/check_bench.py [--repeats 3]

Prints, per example, the median wall-clock seconds and the median CPU seconds of the whole command
(children included), so the figure holds on a busy machine too.
"""

from __future__ import annotations

import argparse
import os
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

from orchestrator.demo import example  # noqa: E402


def timed_check(folder: Path, source: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "orchestrator", "check", str(folder), "--source-of-truth", str(source)],
                   check=True, capture_output=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'example':<10} {'wall s (median)':>16} {'cpu s (median)':>15}  runs")
    for name in ("cleanup", "staghunt"):
        ex = example(name)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "generated"
            folder.mkdir()
            for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
                shutil.copy2(src, folder / src.name)
            runs = [timed_check(folder, ex.source_of_truth) for _ in range(args.repeats)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{name:<10} {statistics.median(walls):>16.2f} {statistics.median(cpus):>15.2f}  "
              f"{', '.join(f'{w:.2f}' for w in walls)}")


if __name__ == "__main__":
    main()
