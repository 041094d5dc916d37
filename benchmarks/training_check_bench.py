"""What the check inside the training (orchestrator/rules/probe/training.py) adds to the runtime check: the
same short run on an example's reference set, with and without it, alternated, and the check's own CPU
seconds as the training process of rank 0 measured them.

    python benchmarks/training_check_bench.py [--example cleanup] [--repeats 3]

The short run is the runtime check's (`orchestrator.checks.short_run`: launch_training.sh, two gloo processes,
4 episodes of 2 turns) on a tiny random model. Prints the median wall-clock and CPU seconds of the whole run
(children included, so the figure holds on a busy machine too) of each arm, the load average, and the parts of
the check: importing the template apart (which imports torch, transformers and accelerate before train.py
does: moved, not added), taking the reference, the instance watch over all garbage collections, the comparison
at exit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator import checks  # noqa: E402
from orchestrator.training.census import FINDINGS_NAME  # noqa: E402
from orchestrator.sources.config_file import read_config# noqa: E402
from orchestrator.demo import example, recorded_roles  # noqa: E402
from orchestrator.sources.roles import validate_roles  # noqa: E402
from orchestrator.tiny.model import build_tiny_model  # noqa: E402


def reference_set(name: str, dest: Path) -> tuple[Path, Path]:
    ex = example(name)
    dest.mkdir(parents=True)
    for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
        shutil.copy2(src, dest / src.name)
    return dest, ex.source_of_truth


def timed_run(folder: Path, source: Path, spec: checks.RuntimeCheckSpec, roles, work: Path,
              judged: bool) -> tuple[float, float, dict]:
    plan = checks.probe_plan
    if not judged:
        checks.probe_plan = lambda *args, **kwargs: None  # census_env without a plan: no check inside
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    try:
        run = checks.short_run(folder, spec, roles, work, source_of_truth=source)
    finally:
        checks.probe_plan = plan
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if not run.result.ok:
        raise SystemExit(f"the short run failed:\n{run.result.stderr[-3000:]}")
    findings = work / "census" / FINDINGS_NAME
    record = json.loads(findings.read_text().splitlines()[-1]) if findings.exists() else {}
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="cleanup")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    scratch = Path(tempfile.mkdtemp(prefix="training-check-bench-"))
    folder, source = reference_set(args.example, scratch / args.example)
    kinds = read_config(source / "grpo_config.py").kinds
    roles = validate_roles(recorded_roles(example(args.example)), kinds, cli_possible=True)
    spec = checks.RuntimeCheckSpec(model=str(build_tiny_model(scratch / "model")), real_model=False, episodes=4,
                                   turns=2)
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    records = []
    for repeat in range(args.repeats):
        for judged in (False, True):
            wall, cpu, record = timed_run(folder, source, spec, roles, scratch / f"run-{repeat}-{judged}", judged)
            times[judged].append((wall, cpu))
            records += [record] if judged else []
            print(f"  {'with' if judged else 'without'} the check: wall {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
    load = os.getloadavg()[0]
    print(f"{args.example}: short run of the runtime check, median of {args.repeats} (load average {load:.1f})")
    for judged in (False, True):
        walls, cpus = zip(*times[judged])
        print(f"  {'with' if judged else 'without'} the check inside: wall {statistics.median(walls):.1f} s, "
              f"CPU {statistics.median(cpus):.1f} s")
    for key in records[-1].get("checked", {}).get("seconds", {}):
        values = [r["checked"]["seconds"][key] for r in records]
        print(f"  the check's {key}: {statistics.median(values):.3f} CPU s (median)")
    checked = records[-1].get("checked", {})
    print(f"  compared: {checked.get('functions')} GENERIC functions on fixed inputs, {checked.get('instances')} "
          f"instances of {checked.get('classes')} classes watched over {checked.get('collections')} collections; "
          f"violations {sum(len(r['violations']) for r in records)}, notes {[r['note'] for r in records if r['note']]}")
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
