"""Which training processes a launch really started, whatever launcher the script uses.

A `sitecustomize` module put first on the launched processes' PYTHONPATH runs at the start of every
Python interpreter of the launch (the launcher's, accelerate's or torchrun's workers', a plain
`python train.py`): each one whose main script is the training script appends its pid, host, rank
and world size to a file. The runtime check compares the count with what it asked for, so a launch
script that ignores `CPU_PROCESSES` (or the GPU count) is caught instead of silently running one
process. An environment's own `sitecustomize` still runs after ours.

With a plan (`census_env(..., training_plan=...)`), the same hook also judges the training from inside, in
the process of rank 0: orchestrator/rules/probe/training.py takes the template's reference before train.py's
code runs and compares at exit; its findings (violations of the GENERIC rules that happened during training,
or a note) are read back with `read_training_check`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

CENSUS_ENV = "ORCHESTRATOR_CENSUS"
SCRIPT_ENV = "ORCHESTRATOR_CENSUS_SCRIPT"
CHECK_ENV = "ORCHESTRATOR_TRAINING_CHECK"  # the plan of the check during training
PLAN_NAME = "training_plan.json"
FINDINGS_NAME = "training_check.jsonl"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the orchestrator package

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
    if os.environ.get("{check}") and os.environ.get("RANK", "0") == "0":
        _findings = os.path.join(os.path.dirname(os.environ["{check}"]), "{findings}")
        sys.path.insert(0, {root!r})
        try:
            from orchestrator.rules.probe.training import start as _start
            _start(os.environ["{check}"], _findings)
        except BaseException as _exc:  # the training goes on unjudged, and says why
            with open(_findings, "a") as _fh:
                _fh.write(json.dumps({{"pid": os.getpid(), "rank": os.environ.get("RANK"), "violations": [],
                                      "note": "the check during training did not load: %r" % _exc}}) + "\\n")
        finally:
            sys.path.remove({root!r})

_here = os.path.dirname(os.path.abspath(__file__))
_next = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
'''.format(census=CENSUS_ENV, script=SCRIPT_ENV, check=CHECK_ENV, findings=FINDINGS_NAME,
           root=str(PACKAGE_ROOT))


@dataclass(frozen=True)
class Census:
    processes: int  # training processes that started
    world_sizes: list[int]  # the WORLD_SIZE each reported (empty when none did)
    records: list[dict]

    def describe(self) -> str:
        ranks = sorted(str(r.get("rank")) for r in self.records)
        world = f", WORLD_SIZE {max(self.world_sizes)}" if self.world_sizes else ", no WORLD_SIZE set"
        return f"{self.processes} training process(es) started (ranks {', '.join(ranks)}{world})"


def census_env(folder: Path, script: str = "train.py", training_plan: dict | None = None) -> dict[str, str]:
    """The environment that makes a launch note its training processes in `folder` (created here), and, given
    the probe's plan (rules/dynamic.py), judge the training from inside."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    paths = [str(folder)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {"PYTHONPATH": os.pathsep.join(paths), CENSUS_ENV: str(folder / "processes.jsonl"), SCRIPT_ENV: script}
    if training_plan is not None:
        (folder / PLAN_NAME).write_text(json.dumps(training_plan))
        env[CHECK_ENV] = str(folder / PLAN_NAME)
    return env


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
    """What the check during training found: violations of the GENERIC rules, and notes on what it could not do."""

    violations: list[dict]
    notes: list[str]
    checked: dict  # what was compared (GENERIC functions on fixed inputs, classes and instances watched), and its CPU s


def read_training_check(folder: Path) -> TrainingFindings | None:
    """The findings of the check during training; None when no training process wrote any (none started,
    or none with the check)."""
    path = folder / FINDINGS_NAME
    lines = [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not lines:
        return None
    violations, notes, checked = [], [], {}
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            notes.append(f"an unreadable line of {FINDINGS_NAME}: {line[:120]}")
            continue
        violations += [v for v in record.get("violations", []) if v not in violations]
        notes += [record["note"]] if record.get("note") else []
        checked = record.get("checked") or checked
    return TrainingFindings(violations, notes, checked)
