"""Which training processes a launch really started, whatever launcher the script uses, and the check inside each.

A `sitecustomize` module put first on the launched processes' PYTHONPATH runs at the start of every
Python interpreter of the launch (the launcher's, accelerate's or torchrun's workers', a plain
`python train.py`): each one whose main script is the training script appends its pid, host, rank
and world size to a file. The runtime check compares the count with what it asked for, so a launch
script that ignores `CPU_PROCESSES` (or the GPU count) is caught instead of silently running one
process. An environment's own `sitecustomize` still runs after ours.

The launch keeps the hook whatever its script does to the environment: `python`, `python3`, `accelerate` and
`torchrun` are found first on PATH (and `$PYTHON` names the first) as shims that put the hook's folder and its
variables back before they run the real program, so a script that resets PYTHONPATH, or puts a `sitecustomize`
of its own ahead of ours, still launches processes that note themselves.

With a plan (`census_env(..., training_plan=...)`), the same hook also judges the training from inside, in
every training process: orchestrator/rules/probe/training.py takes the template's reference before train.py's
code runs and compares after every optimizer step and at shutdown; its findings (violations of the GENERIC
rules that happened during training, or a note) are read back with `read_training_check`. Each process must
report: one that noted itself and never reported a comparison, or a launch where no process noted itself at all,
is a violation (`unreported`), never a silent skip.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

CENSUS_ENV = "ORCHESTRATOR_CENSUS"
SCRIPT_ENV = "ORCHESTRATOR_CENSUS_SCRIPT"
CHECK_ENV = "ORCHESTRATOR_TRAINING_CHECK"  # the plan of the check during training
PLAN_NAME = "training_plan.json"
FINDINGS_NAME = "training_check.jsonl"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the orchestrator package
SHIMMED = ("python", "python3", "accelerate", "torchrun")

_SITECUSTOMIZE = '''"""Written by the orchestrator's runtime check (orchestrator/training/census.py): note this training process."""
import importlib.machinery
import importlib.util
import json
import os
import sys

if os.environ.get("{census}") and sys.argv and os.path.basename(sys.argv[0]) == os.environ.get("{script}"):
    with open(os.environ["{census}"], "a") as _fh:
        _fh.write(json.dumps({{"pid": os.getpid(), "host": os.uname().nodename, "rank": os.environ.get("RANK"),
                              "world_size": os.environ.get("WORLD_SIZE")}}) + "\\n")
    if os.environ.get("{check}"):
        _findings = os.path.join(os.path.dirname(os.environ["{check}"]), "{findings}")
        sys.path.insert(0, {root!r})
        try:
            from orchestrator.rules.probe.training import start as _start
            _start(os.environ["{check}"], _findings)
        except BaseException as _exc:  # the training goes on unjudged, and says why
            with open(_findings, "a") as _fh:
                _fh.write(json.dumps({{"pid": os.getpid(), "host": os.uname().nodename, "rank": os.environ.get("RANK"),
                                      "violations": [], "note": "the check during training did not load: %r" % _exc}})
                          + "\\n")
        finally:
            sys.path.remove({root!r})

_here = os.path.dirname(os.path.abspath(__file__))
_next = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
'''.format(census=CENSUS_ENV, script=SCRIPT_ENV, check=CHECK_ENV, findings=FINDINGS_NAME,
           root=str(PACKAGE_ROOT))

_SHIM = """#!/bin/sh
# Written by the orchestrator's runtime check (orchestrator/training/census.py): {name} with the check's hook kept
PYTHONPATH="{hook}${{PYTHONPATH:+:$PYTHONPATH}}"
export PYTHONPATH {exports}
exec {real} "$@"
"""


@dataclass(frozen=True)
class Census:
    processes: int  # training processes that started
    world_sizes: list[int]  # the WORLD_SIZE each reported (empty when none did)
    records: list[dict]

    def describe(self) -> str:
        ranks = sorted(str(r.get("rank")) for r in self.records)
        world = f", WORLD_SIZE {max(self.world_sizes)}" if self.world_sizes else ", no WORLD_SIZE set"
        return f"{self.processes} training process(es) started (ranks {', '.join(ranks)}{world})"


def census_env(folder: Path, script: str = "train.py", training_plan: dict | None = None,
               path: str | None = None) -> dict[str, str]:
    """The environment that makes a launch note its training processes in `folder` (created here), and, given
    the probe's plan (rules/dynamic.py), judge the training from inside; with the shims that keep both, first on
    `path` (default: this process's PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    paths = [str(folder)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {"PYTHONPATH": os.pathsep.join(paths), CENSUS_ENV: str(folder / "processes.jsonl"), SCRIPT_ENV: script}
    if training_plan is not None:
        (folder / PLAN_NAME).write_text(json.dumps(training_plan))
        env[CHECK_ENV] = str(folder / PLAN_NAME)
    shims = write_shims(folder / "bin", str(folder), {k: v for k, v in env.items() if k != "PYTHONPATH"})
    path = os.environ.get("PATH", "") if path is None else path
    return {**env, "PATH": os.pathsep.join([str(shims), path]), "PYTHON": str(shims / "python")}


def write_shims(bin_dir: Path, hook: str, variables: dict[str, str]) -> Path:
    """`bin_dir` with a shim for each program of SHIMMED found on PATH (python: this interpreter)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exports = " ".join(f"{k}={shell_quote(v)}" for k, v in variables.items())
    for name in SHIMMED:
        real = sys.executable if name.startswith("python") else shutil.which(name)
        if real:
            shim = bin_dir / name
            shim.write_text(_SHIM.format(name=name, hook=hook, exports=exports, real=shell_quote(real)))
            shim.chmod(0o755)
    return bin_dir


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def read_census(folder: Path) -> Census | None:
    """What the launch noted; None when no training process noted itself (an interpreter started with -I or
    -S skips sitecustomize: the count is then unknown, not zero)."""
    path = folder / "processes.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not records:
        return None
    worlds = [int(r["world_size"]) for r in records if str(r.get("world_size") or "").isdigit()]
    return Census(len({(r.get("host"), r.get("pid")) for r in records}), worlds, records)


@dataclass(frozen=True)
class TrainingFindings:
    """What the check during training found: violations of the GENERIC rules, notes on what it could not do, and
    which processes reported at all."""

    violations: list[dict]
    notes: list[str]
    checked: dict  # what was compared (GENERIC functions on fixed inputs, classes and instances watched), and its CPU s
    reporters: set[tuple[str, int]] = field(default_factory=set)  # (host, pid) of each process that wrote a record


def read_training_check(folder: Path) -> TrainingFindings | None:
    """The findings of the check during training; None when no training process wrote any (none started,
    or none with the check)."""
    path = folder / FINDINGS_NAME
    lines = [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not lines:
        return None
    violations, notes, checked, reporters = [], [], {}, set()
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            notes.append(f"an unreadable line of {FINDINGS_NAME}: {line[:120]}")
            continue
        violations += [v for v in record.get("violations", []) if v not in violations]
        notes += [record["note"]] if record.get("note") and record["note"] not in notes else []
        checked = record.get("checked") or checked
        reporters.add((record.get("host"), record.get("pid")))
    return TrainingFindings(violations, notes, checked, reporters)


HOW_IT_IS_KEPT = ("the launch must keep the orchestrator's hook: extend PYTHONPATH (PYTHONPATH=dir:$PYTHONPATH) "
                  "instead of resetting it, put no sitecustomize of its own ahead of it, start Python without -I, -S "
                  "or -E, and leave the ORCHESTRATOR_* variables as they are")


def unreported(census: Census | None, findings: TrainingFindings | None, expected: int) -> list[str]:
    """One line for each training process that the check during training did not run in: every process a launch
    started without any noting itself, or a process that noted itself and never reported a comparison."""
    if census is None:
        return [f"the training check did not run in process {k}: no training process of the launch noted itself, "
                f"so the orchestrator's hook never loaded; {HOW_IT_IS_KEPT}" for k in range(expected)]
    reporters = findings.reporters if findings is not None else set()
    missing = [r for r in census.records if (r.get("host"), r.get("pid")) not in reporters]
    return [f"the training check did not run in process {r.get('rank') or 0} (pid {r.get('pid')} on "
            f"{r.get('host')}): the process started with the orchestrator's hook but its check never reported (it was "
            f"switched off, or the process ended before its first optimizer step without exiting normally); "
            f"{HOW_IT_IS_KEPT}" for r in sorted(missing, key=lambda r: str(r.get("rank")))]
