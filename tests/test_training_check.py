"""The check during training cannot be switched off or dodged (issue 45, group 3 and 6; issue 43's instruments): it
runs in every training process, compares after every optimizer step and once more at shutdown before train.py's own
exit handlers, compares library tables by content, sees nothing of its own making, and a process that never reports
is a violation. Each mutant here has a valid twin that passes.

The runs are plain `python train.py` (or a launch script that starts it) under the runtime check's census hook,
on small templates: no model, one interpreter each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.rules.dynamic import probe_plan
from orchestrator.training.census import (CENSUS_ENV, CHECK_ENV, Census, TrainingFindings, census_env, read_census,
                                          read_training_check, unreported)

STEPPED_TEMPLATE = '''# === GENERIC — DO NOT MODIFY ===
import math

import torch


def halves(n: int) -> int:
    return math.ceil(n / 2)


def lowered(x: float) -> int:
    return math.floor(x)


# === CUSTOMIZE ===
def on_step(step: int) -> None:
    raise NotImplementedError


def on_end() -> None:
    raise NotImplementedError


# === GENERIC — DO NOT MODIFY ===
def main() -> None:
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    for step in range(3):
        on_step(step)
        weight.grad = torch.ones(1)
        optimizer.step()
    on_end()
    print(halves(5), lowered(2.5))


if __name__ == "__main__":
    main()
'''
VALID_HOOKS = "    return None"


def hooks(on_step: str = VALID_HOOKS, on_end: str = VALID_HOOKS) -> str:
    """STEPPED_TEMPLATE as train.py, its two CUSTOMIZE functions with these bodies."""
    head, middle, tail = STEPPED_TEMPLATE.split("    raise NotImplementedError")
    return head + on_step + middle + on_end + tail


def launched(folder: Path, train: str, template: str = STEPPED_TEMPLATE, launch: str = 'exec python train.py "$@"',
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`bash launch_training.sh` in `folder` under the runtime check's census hook with the plan of `template`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "grpo_template.py").write_text(template)
    (folder / "train.py").write_text(train)
    (folder / "launch_training.sh").write_text(f"#!/usr/bin/env bash\nset -euo pipefail\n{launch}\n")
    merged = {**os.environ, **census_env(folder / "census", training_plan=probe_plan(folder)), **(env or {})}
    merged.pop("RANK", None)
    return subprocess.run(["bash", "launch_training.sh"], cwd=folder, env=merged, capture_output=True, text=True,
                          timeout=300)


def rules_found(findings: TrainingFindings | None) -> list[tuple[str, str]]:
    return [(v["rule"], v["message"]) for v in (findings.violations if findings else [])]


def flagged(findings: TrainingFindings | None, rule: str, *words: str) -> bool:
    return any(r == rule and all(w in m for w in words) for r, m in rules_found(findings))


def test_a_patch_undone_before_the_end_or_by_an_exit_handler_is_still_caught(tmp_path: Path):
    """math.ceil patched on the first step and restored before the last one (only a comparison after an optimizer
    step sees it), math.floor patched after the loop with an atexit handler that restores it (only the comparison
    at shutdown, which runs before train.py's exit handlers, sees it); the valid twin passes, in every record."""
    undone = hooks(on_step="    global _ceil\n    if step == 0:\n        _ceil, math.ceil = math.ceil, lambda v: 0\n"
                           "    if step == 2:\n        math.ceil = _ceil",
                   on_end="    import atexit\n    _floor = math.floor\n    math.floor = lambda v: 7\n"
                          "    atexit.register(lambda: setattr(math, 'floor', _floor))")
    run = launched(tmp_path / "undone", undone)
    assert run.returncode == 0 and run.stdout == "3 7\n" and run.stderr == "", run.stderr
    findings = read_training_check(tmp_path / "undone" / "census")
    assert flagged(findings, "generic-object-rebound", "math.ceil", "during training")
    assert flagged(findings, "generic-object-rebound", "math.floor", "during training")
    assert findings.checked["updates"] == 3 and not findings.notes
    valid = launched(tmp_path / "valid", hooks())
    assert valid.returncode == 0 and valid.stdout == "3 2\n" and valid.stderr == "", valid.stderr
    findings = read_training_check(tmp_path / "valid" / "census")
    assert findings.violations == [] and findings.notes == [] and len(findings.reporters) == 1


def test_a_launch_that_resets_pythonpath_or_shadows_the_hook_still_runs_the_check(tmp_path: Path):
    """The launch script unsets PYTHONPATH, then puts a sitecustomize of its own first on it, and starts python from
    PATH: the shims put the hook back first, so the process notes itself, the patch is found, and the launch's own
    sitecustomize still runs after ours."""
    shadow = ("unset PYTHONPATH\nmkdir -p own\nprintf 'import os\\nos.environ[\"OWN_SITE\"] = \"1\"\\n' > own/sitecustomize.py\n"
              'export PYTHONPATH="$PWD/own"\nexec python train.py')
    patched = hooks(on_step="    import os\n    assert os.environ.get('OWN_SITE') == '1'\n"
                            "    if step == 1:\n        math.ceil = lambda v: 0")
    run = launched(tmp_path / "shadow", patched, launch=shadow)
    assert run.returncode == 0, run.stderr
    census = read_census(tmp_path / "shadow" / "census")
    assert census is not None and census.processes == 1
    assert flagged(read_training_check(tmp_path / "shadow" / "census"), "generic-object-rebound", "math.ceil")


def test_a_process_the_check_did_not_run_in_is_a_violation_never_a_skip(tmp_path: Path):
    """`python -I` ignores PYTHONPATH, so the hook never loads: no process noted itself, and each process the launch
    was asked for is reported ("the training check did not run in process k"); a process that noted itself and
    never reported a comparison is reported by its rank; a launch whose processes all reported passes."""
    run = launched(tmp_path / "isolated", hooks(), launch='exec python -I train.py "$@"')
    assert run.returncode == 0, run.stderr
    census, findings = read_census(tmp_path / "isolated" / "census"), read_training_check(tmp_path / "isolated" / "census")
    assert census is None and findings is None
    lines = unreported(census, findings, 2)
    assert [line.split(":")[0] for line in lines] == ["the training check did not run in process 0",
                                                      "the training check did not run in process 1"]
    assert "PYTHONPATH=dir:$PYTHONPATH" in lines[0]
    noted = Census(2, [2, 2], [{"pid": 11, "host": "a", "rank": "0"}, {"pid": 12, "host": "a", "rank": "1"}])
    half = TrainingFindings([], [], {}, {("a", 11)})
    assert [line.split(" (")[0] for line in unreported(noted, half, 2)] == [
        "the training check did not run in process 1"]
    assert unreported(noted, TrainingFindings([], [], {}, {("a", 11), ("a", 12)}), 2) == []


def test_the_runtime_check_fails_a_run_whose_process_did_not_report(tmp_path: Path):
    """judge_short_run: a clean exit with a silent process is the rules' failure, naming the launch script."""
    from orchestrator.checks import RuntimeCheckSpec, ShortRun, judge_short_run
    from orchestrator.base.execution import ExecutionResult

    log = tmp_path / "train.logs"
    log.write_text("update=1 loss=0.5 grad_norm=1.0 reward=0.1\nupdate=2 loss=0.4 grad_norm=0.9 reward=0.2\n")
    spec = RuntimeCheckSpec(model="tiny", real_model=False, cpu_processes=2)
    run = ShortRun(ExecutionResult(0, "", "", False, 1.0), tmp_path, log, [], None, 2, None, judged=True)
    result = judge_short_run(run, spec)
    assert not result.passed and result.kind == "contract" and "launch_training.sh" in result.files
    assert "training-check-missing launch_training.sh: the training check did not run in process 0" in result.evidence
    assert judge_short_run(ShortRun(ExecutionResult(0, "", "", False, 1.0), tmp_path, log, [], None, 2, None),
                           spec).passed  # no check was asked for: nothing to report


INSTRUMENTS_TEMPLATE = '''# === GENERIC — DO NOT MODIFY ===
import logging
import sys

handler = logging.StreamHandler(sys.stderr)
log = logging.getLogger("grpo")
log.addHandler(handler)
log.setLevel(logging.INFO)


def report(step: int) -> str:
    print(f"step {step}", file=sys.stdout)
    return f"step {step}"


# === CUSTOMIZE ===
def on_step(step: int) -> None:
    raise NotImplementedError


# === GENERIC — DO NOT MODIFY ===
def main() -> None:
    for step in range(2):
        on_step(step)
        log.info(report(step))


if __name__ == "__main__":
    main()
'''


def test_the_check_sees_none_of_its_own_instruments_and_a_real_rebinding_still(tmp_path: Path):
    """GENERIC code that holds sys.stderr in a logging handler and prints to sys.stdout passes (the check's silence
    swaps file descriptors, never the stream objects), and prints only what the run prints; CUSTOMIZE code that
    rebinds sys.stderr is caught."""
    train = INSTRUMENTS_TEMPLATE.replace("    raise NotImplementedError", "    return None")
    run = launched(tmp_path / "valid", train, template=INSTRUMENTS_TEMPLATE)
    assert run.returncode == 0 and run.stdout == "step 0\nstep 1\n" and run.stderr == "step 0\nstep 1\n", run.stderr
    findings = read_training_check(tmp_path / "valid" / "census")
    assert findings.violations == [] and findings.reporters, findings
    rebinding = INSTRUMENTS_TEMPLATE.replace("    raise NotImplementedError",
                                             "    if step == 1:\n        import io\n        sys.stderr = io.StringIO()")
    run = launched(tmp_path / "rebound", rebinding, template=INSTRUMENTS_TEMPLATE)
    assert run.returncode == 0, run.stderr
    assert flagged(read_training_check(tmp_path / "rebound" / "census"), "generic-object-rebound", "sys.stderr")


TABLE_LIBRARY = '''def cosine(step):
    return 0.5


def linear(step):
    return 1.0


SCHEDULES = {"cosine": cosine, "linear": linear}


def get_schedule(name):
    return SCHEDULES[name]
'''
TABLE_TEMPLATE = '''# === GENERIC — DO NOT MODIFY ===
import tablelib


def rate(step: int) -> float:
    return tablelib.get_schedule("cosine")(step)


# === CUSTOMIZE ===
def on_step(step: int) -> None:
    raise NotImplementedError


# === GENERIC — DO NOT MODIFY ===
def main() -> None:
    for step in range(2):
        on_step(step)
        print(rate(step))


if __name__ == "__main__":
    main()
'''


def test_a_library_table_edited_in_place_is_caught_by_content(tmp_path: Path):
    """The GENERIC code calls tablelib.get_schedule, which reads the module's SCHEDULES: CUSTOMIZE code that makes
    "cosine" run linear in place (the dict is the same object) is caught; one that only reads the table passes."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "tablelib.py").write_text(TABLE_LIBRARY)
    library = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    edited = TABLE_TEMPLATE.replace("    raise NotImplementedError",
                                    "    if step == 0:\n        tablelib.SCHEDULES['cosine'] = tablelib.linear")
    run = launched(tmp_path / "edited", edited, template=TABLE_TEMPLATE, env=library)
    assert run.returncode == 0 and run.stdout == "1.0\n1.0\n", run.stderr
    assert flagged(read_training_check(tmp_path / "edited" / "census"), "generic-object-rebound",
                   "tablelib.SCHEDULES", "tablelib.get_schedule", "<function linear", "<function cosine")
    read = TABLE_TEMPLATE.replace("    raise NotImplementedError", "    assert 'cosine' in tablelib.SCHEDULES")
    run = launched(tmp_path / "read", read, template=TABLE_TEMPLATE, env=library)
    assert run.returncode == 0 and run.stdout == "0.5\n0.5\n", run.stderr
    assert read_training_check(tmp_path / "read" / "census").violations == []


def test_a_write_to_a_source_of_truth_file_during_training_is_refused_and_flagged(tmp_path: Path):
    """A path built at run time (no string the static rule could read names the file)."""
    written = hooks(on_step="    if step == 0:\n        import os\n        name = ''.join(['grpo_', 'template.py'])\n"
                            "        try:\n            open(os.path.join(os.path.dirname(__file__), name), 'a')\n"
                            "        except PermissionError:\n            pass")
    run = launched(tmp_path, written)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "grpo_template.py").read_text() == STEPPED_TEMPLATE
    assert flagged(read_training_check(tmp_path / "census"), "source-file-written", "grpo_template.py", "train.py")


@pytest.mark.slow
def test_the_runtime_check_judges_every_rank_under_the_planned_slurm_job(tmp_path: Path, tiny_model_dir: Path):
    """The Cleanup reference set's runtime check (two processes, as the batch script of a one-node SLURM job) with
    CUSTOMIZE code that acts only while training runs: on rank 1 and under SLURM only, transformers' scheduler
    table is edited in place (every schedule runs linear); on every rank torch.clamp is made a no-op and an atexit
    handler restores it. Both are found, by the processes where they acted."""
    from conftest import example_generated
    from test_rules_behaviour import at_top_of, example_roles, violations_of, found

    from orchestrator.checks import RuntimeCheckSpec, judge_short_run, short_run

    folder, source = example_generated(tmp_path, "cleanup")
    at_top_of("shape_reward", lambda f: """import atexit, os, torch, transformers.optimization as _optimization
if not globals().get('_patched_in_training'):
    globals()['_patched_in_training'] = True
    if os.environ.get('RANK') == '1' and os.environ.get('SLURM_JOB_ID'):
        for _kind in list(_optimization.TYPE_TO_SCHEDULER_FUNCTION):
            _optimization.TYPE_TO_SCHEDULER_FUNCTION[_kind] = _optimization.get_linear_schedule_with_warmup
    _clamp = torch.clamp
    torch.clamp = lambda value, *args, **kwargs: value
    atexit.register(lambda: setattr(torch, 'clamp', _clamp))""")(folder)
    spec = RuntimeCheckSpec(model=str(tiny_model_dir), real_model=False, episodes=4, group=2, turns=2, token_cap=8)
    run = short_run(folder, spec, example_roles("cleanup", source), tmp_path / "check", source_of_truth=source)
    result = judge_short_run(run, spec)
    violations = violations_of(run.training.violations)
    assert found(violations, "generic-object-rebound", "TYPE_TO_SCHEDULER_FUNCTION", "get_scheduler"), violations
    assert found(violations, "generic-object-rebound", "torch.clamp", "during training"), violations
    assert [r["rank"] for r in run.census.records if r["rank"] == "1"] and len(run.training.reporters) == 2
    assert not result.passed and "TYPE_TO_SCHEDULER_FUNCTION" in result.evidence
