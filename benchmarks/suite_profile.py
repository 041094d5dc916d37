"""Where the test suite's time goes: the README's test command run once, every Python interpreter it starts
accounted for, and the machine's busy CPU around it.

    python benchmarks/suite_profile.py                                # the whole suite (about 20 minutes here)
    python benchmarks/suite_profile.py -- tests/test_crash.py -n 1    # any pytest arguments after --
    python benchmarks/suite_profile.py --keep /tmp/profile            # keep the records, then
    python benchmarks/suite_profile.py --from /tmp/profile            # report them again without running

Prints:
- the wall-clock seconds and the machine's busy CPU seconds over the run (/proc/stat: every process, SLURM's
  jobs, git and Chromium included; anything else running on the machine too), hence the shortest wall-clock time
  the same work could take on this machine's cores;
- the CPU of the Python interpreters by kind (training processes, the probe, accelerate's launcher, the
  orchestrator's commands, pytest's own processes: the tests run in them), with counts; an interpreter killed
  by SIGKILL is not seen (SIGTERM, `os._exit` and a normal exit are);
- what one fresh interpreter pays to import what each kind imports (torch, transformers' model code,
  accelerate; median of 3 here), and so the share of the suite's CPU that is these imports;
- the tests that cost the most, their subprocesses included.
The accounting rides on a `sitecustomize` module and a pytest plugin put first on PYTHONPATH for the run (a
`sitecustomize` of the environment is shadowed meanwhile).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = '''
import atexit, json, os, resource, signal, sys, time

_started, _written = time.time(), []


def _write(how):
    if _written:
        return
    _written.append(how)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = {"pid": os.getpid(), "argv": sys.argv[:8], "cpu": usage.ru_utime + usage.ru_stime,
              "wall": time.time() - _started, "how": how, "test": os.environ.get("PYTEST_CURRENT_TEST", "")}
    try:
        with open(os.environ["SUITE_PROFILE_OUT"], "a") as fh:
            fh.write(json.dumps(record) + "\\n")
    except (KeyError, OSError):
        pass


atexit.register(_write, "exit")
_exit = os._exit


def _fast_exit(code):
    _write("_exit")
    _exit(code)


os._exit = _fast_exit


def _on_term(signum, frame):
    _write("sigterm")
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _on_term)
'''

PLUGIN = '''
import json, os, resource, time
import pytest


def _cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config):
    with open(os.environ["SUITE_PROFILE_TESTS"], "a") as fh:
        fh.write(json.dumps({"worker_pid": os.getpid()}) + "\\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, started = _cpu(), time.time()
    yield
    with open(os.environ["SUITE_PROFILE_TESTS"], "a") as fh:
        fh.write(json.dumps({"test": item.nodeid, "cpu": _cpu() - cpu, "wall": time.time() - started}) + "\\n")
'''

KINDS = ("training", "probe", "launcher", "orchestrator command", "pytest (controller, workers)", "other")


def busy_cpu_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (user, nice, system, irq, softirq)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def kind_of(record: dict, workers: set[int]) -> str:
    if record["pid"] in workers:
        return "pytest (controller, workers)"
    argv = record["argv"] or [""]
    program = argv[0]
    if Path(program).name in ("train.py", "harness.py"):
        return "training"
    if program.endswith("rules/probe/__main__.py"):
        return "probe"
    if "accelerate/commands/launch" in program:
        return "launcher"
    if program.endswith("orchestrator/__main__.py"):
        return "orchestrator command"
    return "other"


def child_cpu(code: str, cwd: Path | None = None, repeats: int = 3) -> float:
    """Median CPU seconds of a fresh interpreter running `code`."""
    spent = []
    for _ in range(repeats):
        before = os.times()
        subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True, capture_output=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        after = os.times()
        spent.append(after.children_user - before.children_user + after.children_system - before.children_system)
    return statistics.median(spent)


def import_costs() -> dict[str, float]:
    """CPU seconds a fresh interpreter of each kind spends importing, measured on the Cleanup reference set."""
    from learning_bench import generated_folder

    with tempfile.TemporaryDirectory() as tmp:
        folder = generated_folder("cleanup", Path(tmp) / "generated")
        return {
            "training": child_cpu("import torch, accelerate; from transformers.models.qwen3 import modeling_qwen3"),
            "probe": child_cpu("import train", cwd=folder),
            "launcher": child_cpu("import accelerate.commands.launch"),
            "bare interpreter": child_cpu("pass"),
        }


def profiled_run(pytest_args: list[str], folder: Path) -> None:
    """Run pytest with the accounting; the records and the run's own figures (run.json) land in `folder`."""
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (folder / "_suite_profile_plugin.py").write_text(PLUGIN)
    env = {**os.environ, "SUITE_PROFILE_OUT": str(folder / "interpreters.jsonl"),
           "SUITE_PROFILE_TESTS": str(folder / "tests.jsonl"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)}
    busy, started = busy_cpu_s(), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_suite_profile_plugin", *pytest_args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    run = {"wall": time.monotonic() - started, "busy": busy_cpu_s() - busy, "cores": os.cpu_count() or 1,
           "pytest": f"{summary[-1] if summary else done.stdout[-500:]} (exit {done.returncode})"}
    (folder / "run.json").write_text(json.dumps(run))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def report(folder: Path, top: int) -> None:
    run = json.loads((folder / "run.json").read_text())
    wall, busy, cores = run["wall"], run["busy"], run["cores"]
    print(f"pytest: {run['pytest']}")
    print(f"wall {wall:,.0f} s; machine busy {busy:,.0f} CPU-s ({busy / wall / cores:.0%} of {cores} cores); "
          f"the same work takes at least {busy / cores:,.0f} s on {cores} cores")

    records, rows = read_jsonl(folder / "interpreters.jsonl"), read_jsonl(folder / "tests.jsonl")
    workers = {row["worker_pid"] for row in rows if "worker_pid" in row}
    per_kind: dict[str, list] = {kind: [0, 0.0] for kind in KINDS}
    for record in records:
        tally = per_kind[kind_of(record, workers)]
        tally[0] += 1
        tally[1] += record["cpu"]
    costs = import_costs()
    print(f"\nPython interpreters seen: {len(records)}, {sum(r['cpu'] for r in records):,.0f} CPU-s")
    print(f"{'kind':<30} {'count':>6} {'CPU-s':>8} {'each':>6} {'import each':>12} {'imports CPU-s':>14}")
    imports = 0.0
    for kind, (count, cpu) in per_kind.items():
        cost = costs.get(kind)
        spent = min(count * cost, cpu) if cost is not None else None  # a busy moment can make one import dearer
        imports += spent or 0.0
        print(f"{kind:<30} {count:>6} {cpu:>8,.0f} {cpu / max(count, 1):>6.1f} "
              f"{'' if cost is None else f'{cost:.1f}':>12} {'' if spent is None else f'{spent:,.0f}':>14}")
    print(f"importing torch, transformers and accelerate in fresh interpreters: about {imports:,.0f} CPU-s, "
          f"{imports / busy:.0%} of the machine's busy CPU (a bare interpreter: {costs['bare interpreter']:.2f} s)")

    spawned: dict[str, float] = collections.Counter()
    for record in records:
        if record["pid"] not in workers and record["test"]:
            spawned[record["test"].rsplit(" (", 1)[0]] += record["cpu"]
    print(f"\nthe {top} costliest tests (CPU-s: the worker's and its children's, then what the interpreters it "
          f"started reported; SLURM jobs are counted in the second only)")
    tests = [row for row in rows if "test" in row]
    for row in sorted(tests, key=lambda row: -max(row["cpu"], spawned.get(row["test"], 0.0)))[:top]:
        print(f"  {row['cpu']:7.1f} {spawned.get(row['test'], 0.0):7.1f} wall {row['wall']:6.1f}  {row['test']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="how many of the costliest tests to list")
    parser.add_argument("--keep", type=Path, help="keep the run's records in this folder (for --from)")
    parser.add_argument("--from", dest="kept", type=Path, help="report a kept run again instead of running")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest (default: the whole suite)")
    args = parser.parse_args()
    if args.kept:
        report(args.kept, args.top)
        return
    folder = args.keep or Path(tempfile.mkdtemp(prefix="suite-profile-"))
    folder.mkdir(parents=True, exist_ok=True)
    profiled_run(args.pytest_args, folder)
    report(folder, args.top)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
