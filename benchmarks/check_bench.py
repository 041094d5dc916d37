"""How long `python -m orchestrator check` takes on each example's reference set (static rules, the launch
script run with recorders, then the import check and the behaviour probe on a real game, in a fresh
interpreter), and whether its verdict is the same run after run.

    python benchmarks/check_bench.py [--repeats 3]
    python benchmarks/check_bench.py --verdicts --repeats 20
    python benchmarks/check_bench.py --examples spread --repeats 10   # one example

Prints, per example, the median wall-clock seconds and the median CPU seconds of the whole command
(children included), so the figure holds on a busy machine too, and the load average while it ran.
With --verdicts the folder also holds a helper whose return depends on the game state it is called on
(an int on some states, a bool on others): its verdict is stable only if the states the probe plays are;
the script prints how many distinct outputs the runs gave (1: the same verdict every time).
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

STATE_DEPENDENT_HELPER = '''

def lucky(env, agent_id) -> bool:
    """Returns 1 (not a bool) on about half of the game states: a verdict that depends on the states met."""
    plain = [v for v in vars(env).values() if isinstance(v, (int, float, str, tuple, list))]
    weight = sum(map(ord, repr(plain)))
    return 1 if weight % 2 else True
'''


def timed_check(folder: Path, source: Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "orchestrator", "check", str(folder), "--source-of-truth",
                             str(source)], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--verdicts", action="store_true", help="add a helper whose return depends on the state")
    parser.add_argument("--examples", default="cleanup,staghunt,spread,crossing")
    args = parser.parse_args()
    print(f"{'example':<10} {'wall s (median)':>16} {'cpu s (median)':>15} {'load':>5} {'verdicts':>9}  runs (wall s)")
    for name in args.examples.split(","):
        ex = example(name)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "generated"
            folder.mkdir()
            for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
                shutil.copy2(src, folder / src.name)
            if args.verdicts:
                with (folder / "helpers.py").open("a") as fh:
                    fh.write(STATE_DEPENDENT_HELPER)
            runs = [timed_check(folder, ex.source_of_truth) for _ in range(args.repeats)]
        walls, cpus = [w for w, _, _ in runs], [c for _, c, _ in runs]
        verdicts = len({out for _, _, out in runs})
        print(f"{name:<10} {statistics.median(walls):>16.2f} {statistics.median(cpus):>15.2f} "
              f"{os.getloadavg()[0]:>5.1f} {verdicts:>9}  {', '.join(f'{w:.1f}' for w in walls)}")


if __name__ == "__main__":
    main()
