"""The two arms of a comparison, read from disk: each seed run's metric series as the monitor reads its train.logs.

A child run (orchestrator.ideas.lineage) trains both arms on the same seeds. Its parent arm is the parent's own
formal run (the first seed) and the parent's code trained again on the other seeds, in `runs/CHILD/arms/parent/
seed-S/`; its child arm is its own formal run and `runs/CHILD/arms/child/seed-S/`. Each seed run's folder holds its
train.logs at the top and `result.json` (how it ended). A run that tried no idea is an arm of one seed, its last
formal run, and of the seeds a child of it trained its code on.

The series are the curves' (orchestrator.training.plots.log_series): train.logs read in the run's own log format
(what the runtime check learned, and the metric roles the monitor maps), the latest run's train lines, one value
per update under the monitor's names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from orchestrator.base.files import from_disk, read_json, write_atomic
from orchestrator.ideas.lineage import Lineage, family
from orchestrator.ideas.verdict import Arm, SeedRun
from orchestrator.run.runs import read_state
from orchestrator.training.logformat import LogFormat
from orchestrator.training.plots import log_series

ARMS_DIR = "arms"
PARENT, CHILD = "parent", "child"
RESULT_FILE = "result.json"
LOG_NAME = "train.logs"  # orchestrator.checks.LOG_NAME, not imported: status and history stay light
FINISHED = "finished"


def seed_folder(run_dir: Path, arm: str, seed: int) -> Path:
    return run_dir / ARMS_DIR / arm / f"seed-{seed}"


def write_result(folder: Path, seed: int, status: str, **details: Any) -> None:
    write_atomic(folder / RESULT_FILE, json.dumps({"seed": seed, "status": status, **details}, indent=1))


def read_result(folder: Path) -> dict[str, Any] | None:
    return read_json(folder / RESULT_FILE)


def seed_run(seed: int, folder: Path, log_format: Mapping[str, Any] | None, status: str = FINISHED) -> SeedRun:
    series = log_series(folder / LOG_NAME, LogFormat.from_dict(dict(log_format or {})))
    return SeedRun(seed, series, str(folder), status)


def _state(project_root: Path, run_id: str) -> dict[str, Any]:
    return read_state(Path(project_root) / "runs" / run_id) or {}


def formal_folder(project_root: Path, run_id: str) -> Path | None:
    """The run's last formal attempt's folder (its logs at the top) when that attempt finished; else None."""
    state = _state(project_root, run_id)
    formal = [a for a in state.get("attempts") or [] if a.get("node") == "formal_train"]
    folder = state.get("formal_log_dir") or ""
    if not folder or not formal or not str(formal[-1].get("outcome", "")).startswith(FINISHED):
        return None
    path = Path(from_disk(folder, Path(project_root).resolve()))
    return path if (path / LOG_NAME).is_file() else None


def planned_seed(folder: Path) -> int | None:
    """The seed a formal attempt trained with, from its manifest (None when the config has no seed role)."""
    seed = ((read_json(folder / "manifest.json") or {}).get("seeds") or {}).get("random_seed")
    return int(seed) if isinstance(seed, (int, float)) and not isinstance(seed, bool) else None


def _recorded(run_dir: Path, arm: str, seeds: tuple[int, ...], log_format: Mapping[str, Any] | None) -> list[SeedRun]:
    runs = []
    for seed in seeds:
        folder = seed_folder(run_dir, arm, seed)
        result = read_result(folder)
        if result is not None:
            runs.append(seed_run(seed, folder, log_format, str(result.get("status") or "?")))
    return runs


def child_arms(project_root: Path, child: str) -> tuple[Arm, Arm]:
    """(the parent arm, the child arm) a child run trained: their seed runs so far."""
    root = Path(project_root).resolve()
    run_dir = root / "runs" / child
    lineage = Lineage.load(run_dir)
    if lineage is None:
        raise ValueError(f"run {child} tried no idea: it has no {run_dir / 'idea.json'}")
    first, rest = lineage.seeds[0], lineage.seeds[1:]
    parent_format = _state(root, lineage.parent).get("log_format")
    parent_runs = [seed_run(first, Path(lineage.parent_formal), parent_format)]
    parent_runs += _recorded(run_dir, PARENT, rest, parent_format)
    child_format = _state(root, child).get("log_format")
    own = formal_folder(root, child)
    child_runs = [seed_run(first, own, child_format)] if own is not None else []
    child_runs += _recorded(run_dir, CHILD, rest, child_format)
    return Arm(lineage.parent, tuple(parent_runs)), Arm(child, tuple(child_runs))


def run_arm(project_root: Path, run_id: str) -> Arm:
    """A run's own arm: a child's, or a run's last formal run with the seeds a child of it trained its code on
    (the child that trained the most)."""
    root = Path(project_root).resolve()
    if Lineage.load(root / "runs" / run_id) is not None:
        return child_arms(root, run_id)[1]
    own = formal_folder(root, run_id)
    if own is None:
        return Arm(run_id, ())
    recorded = [child_arms(root, child)[0] for child, lineage in family(root).items() if lineage.parent == run_id]
    if recorded:
        return max(recorded, key=lambda arm: len(arm.finished))
    return Arm(run_id, (seed_run(planned_seed(own) or 0, own, _state(root, run_id).get("log_format")),))


def arms_for(project_root: Path, base: str, other: str) -> tuple[Arm, Arm]:
    """The arms a comparison of `other` against `base` reads: a child against its parent compares the arms the
    child trained; any other pair, each run's own arm."""
    lineage = Lineage.load(Path(project_root).resolve() / "runs" / other)
    if lineage is not None and lineage.parent == base:
        return child_arms(project_root, other)
    return run_arm(project_root, base), run_arm(project_root, other)
