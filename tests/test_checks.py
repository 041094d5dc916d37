"""The check functions: failure classes, fingerprints, evidence, and what counts as a passing run."""

from pathlib import Path

import pytest

from orchestrator.base.execution import last_traceback
from orchestrator.checks import (RuntimeCheckSpec, classify_failure, code_excerpts, fingerprint, implicated_files,
                                 judge_training_log, run_guards, run_import_check, run_runtime_check)

TRACEBACK = '''Traceback (most recent call last):
  File "/tmp/run1/generated/train.py", line 612, in <module>
    main()
  File "/tmp/run1/generated/helpers.py", line 40, in move_to
    return _step_towards(here, target)
TypeError: _step_towards() missing 1 required positional argument: 'occupied'
'''


@pytest.mark.parametrize("text,kind", [
    ("ModuleNotFoundError: No module named 'helperz'", "import"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("AttributeError: 'GRPOConfig' object has no attribute 'num_episodes'", "missing_config_field"),
    (TRACEBACK, "wrong_signature"),
    ("RuntimeError: The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1",
     "shape_mismatch"),
    ("ZeroDivisionError: division by zero", "runtime_error"),
])
def test_failures_are_classified_for_the_prompt(text, kind):
    assert classify_failure(text) == kind


def test_fingerprint_ignores_paths_line_numbers_and_values():
    moved = TRACEBACK.replace("/tmp/run1", "/home/x/run2").replace("line 612", "line 700").replace("'occupied'", "'o'")
    assert fingerprint(TRACEBACK) == fingerprint(moved)
    assert fingerprint(TRACEBACK) != fingerprint(TRACEBACK.replace("TypeError", "ValueError"))


def test_implicated_files_are_the_generated_ones_in_the_traceback():
    text = TRACEBACK.replace('File "/tmp/run1/generated/train.py"', 'File "/usr/lib/torch/nn/module.py"', 0)
    assert implicated_files(text) == ["train.py", "helpers.py"]


def test_code_excerpts_mark_the_failing_line(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("\n".join(f"line {i}" for i in range(1, 60)))
    excerpt = code_excerpts(TRACEBACK, tmp_path)
    assert ">   40  line 40" in excerpt and "    37  line 37" in excerpt


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "train.logs"
    path.write_text("".join(f"2026-11-23T10:00:0{i} {line}\n" for i, line in enumerate(lines)))
    return path


TINY = RuntimeCheckSpec(model="tiny", real_model=False)
REAL = RuntimeCheckSpec(model="Qwen/Qwen3-4B-Instruct-2507", real_model=True)


def test_a_clean_exit_without_updates_fails(tmp_path: Path):
    result = judge_training_log(_log(tmp_path, "start model=m updates=2"), TINY, 1.0)
    assert not result.passed and result.kind == "no_updates"


def test_a_non_finite_loss_fails(tmp_path: Path):
    result = judge_training_log(_log(tmp_path, "train update=1 loss=nan grad_norm=1"), TINY, 1.0)
    assert not result.passed and result.kind == "non_finite"


def test_the_tiny_model_passes_with_finite_updates_even_with_flat_rewards(tmp_path: Path):
    path = _log(tmp_path, "train update=1 loss=0 grad_norm=0 reward_std=0 invalid_action_rate=1")
    assert judge_training_log(path, TINY, 1.0).passed


def test_a_real_model_must_show_varying_rewards(tmp_path: Path):
    path = _log(tmp_path, "train update=1 loss=0 grad_norm=0 reward_std=0 invalid_action_rate=0.2")
    result = judge_training_log(path, REAL, 1.0)
    assert not result.passed and result.kind == "flat_rewards"


def test_a_real_model_must_parse_some_actions(tmp_path: Path):
    path = _log(tmp_path, "train update=1 loss=0.1 grad_norm=2 reward_std=0.5 invalid_action_rate=1")
    result = judge_training_log(path, REAL, 1.0)
    assert not result.passed and result.kind == "no_parsed_actions"


def test_json_lines_logs_are_judged_too(tmp_path: Path):
    path = tmp_path / "train.logs"
    path.write_text('{"event": "start", "max_steps": 2}\n{"event": "train", "step": 1, "loss": 0.5, "gradNorm": 1.2}\n')
    assert judge_training_log(path, TINY, 1.0).passed
    path.write_text('{"event": "train", "step": 1, "loss": null, "gradNorm": 1.2}\n')
    assert judge_training_log(path, TINY, 1.0).kind == "non_finite"


def test_a_log_without_loss_or_grad_norm_is_unreadable_for_the_monitor(tmp_path: Path):
    path = tmp_path / "train.logs"
    path.write_text('{"event": "train", "step": 1, "objective": 0.5}\n')
    result = judge_training_log(path, TINY, 1.0)
    assert result.kind == "unreadable_log"
    assert "none holds a loss" in result.summary and "holds a grad norm" in result.summary


def test_the_childs_traceback_is_the_evidence_under_a_launcher(tmp_path: Path):
    child = ('Traceback (most recent call last):\n  File "/w/train.py", line 7, in <module>\n    main()\n'
             "NameError: name 'main' is not defined\n")
    launcher = ('Traceback (most recent call last):\n  File "/v/accelerate/commands/launch.py", line 9, in launch\n'
                "    raise subprocess.CalledProcessError(1, cmd)\nsubprocess.CalledProcessError: Command returned 1\n")
    for prefix in ("", "[rank0]: "):
        text = "".join(prefix + line + "\n" for line in child.splitlines()) + launcher
        assert last_traceback(text).endswith("NameError: name 'main' is not defined")


def test_guards_pass_on_the_reference_set(generated_dir: Path):
    from conftest import SOURCE_OF_TRUTH

    assert run_guards(generated_dir, SOURCE_OF_TRUTH).passed


def test_import_check_reports_the_module_and_its_traceback(generated_dir: Path):
    (generated_dir / "prompt_template.py").write_text("import helpers\nraise RuntimeError('boom at import')\n")
    result = run_import_check(generated_dir)
    assert not result.passed and result.files == ["prompt_template.py"]
    assert "RuntimeError: boom at import" in result.evidence and "`import prompt_template` failed" in result.summary


# a launch script that trains (two updates, maybe a done line), then fails as a launcher does: the launchers' real
# stderr, captured (tests/fixtures), and exit code 1
FAILING_LAUNCH = """#!/usr/bin/env bash
while [ $# -gt 0 ]; do [ "$1" = "--log_dir" ] && LOG="$2"; shift; done
mkdir -p "$LOG"
printf 'start updates=2\\ntrain update=1 loss=0.5 grad_norm=0.3\\ntrain update=2 loss=0.4 grad_norm=0.2\\n' > "$LOG/train.logs"
{done}
# two training processes noted themselves and reported the check during training, as the hook makes them
for rank in 0 1; do
    printf '{{"pid": %s, "host": "h", "rank": "%s"}}\\n' "$rank" "$rank" >> "$ORCHESTRATOR_CENSUS"
    printf '{{"pid": %s, "host": "h", "rank": "%s", "violations": [], "note": ""}}\\n' "$rank" "$rank" \\
        >> "$(dirname "$ORCHESTRATOR_TRAINING_CHECK")/training_check.jsonl"
done
cat {stderr} >&2
exit 1
"""


@pytest.mark.parametrize("fixture, done, passed, shown", [
    ("launcher_segv_stderr.txt", True, True, "died at exit"),
    ("launcher_segv_stderr.txt", False, False, "rank 1 (local_rank: 1) on localhost: exit code -11 (Signal 11 (SIGSEGV)"),
    ("launcher_rank_error_stderr.txt", True, False, "RuntimeError: rank one broke on exit"),
])
def test_a_failure_after_done_is_told_apart_from_a_code_error(generated_dir: Path, tmp_path: Path, fixture: str,
                                                               done: bool, passed: bool, shown: str):
    from conftest import ROOT

    from orchestrator.sources.config_file import read_config
    from orchestrator.demo import example, recorded_roles
    from orchestrator.sources.roles import validate_roles

    stderr = Path(__file__).parent / "fixtures" / fixture
    (generated_dir / "launch_training.sh").write_text(FAILING_LAUNCH.format(
        done="echo 'done updates=2' >> \"$LOG/train.logs\"" if done else "", stderr=stderr))
    kinds = read_config(ROOT / "source_of_truth" / "grpo_config.py").kinds
    roles = validate_roles(recorded_roles(example("cleanup")), kinds, cli_possible=True)
    result = run_runtime_check(generated_dir, RuntimeCheckSpec(model="tiny", real_model=False), roles,
                               tmp_path / "check")
    assert result.passed is passed, result
    if passed:  # trained to the end: no fix is paid for a process that died at exit
        assert shown in result.summary and "2 updates" in result.summary
    else:  # each rank's own error, or the launcher's word on it, is the evidence; never only ChildFailedError
        assert shown in result.summary and shown in result.evidence
        assert ("after train.logs said done" in result.summary) is done


PATCHING_CONFIG = '''
import sys as _sys
with open({marker!r}, "a") as _mark:
    _mark.write("ran\\n")
for _name in ("orchestrator.checks", "orchestrator.training.census"):
    _module = _sys.modules.get(_name)
    if _module is not None:
        _module.read_training_check = lambda folder: None
        _module.read_census = lambda folder: None
'''


def test_a_generated_config_never_runs_in_the_orchestrator_s_process(tmp_path: Path):
    """A generated grpo_config.py that, once run, makes the orchestrator ignore what the check during training
    found: the orchestrator reads its values and runs its validation in fresh interpreters (the code ran there, each
    time), its own functions stay its own, and the rules refuse the file (config-code-changed)."""
    from conftest import example_generated

    from orchestrator import checks
    from orchestrator.rules import check_folder
    from orchestrator.sources.config_file import accepted_values, read_config
    from orchestrator.training import census

    folder, source = example_generated(tmp_path, "cleanup")
    marker = tmp_path / "ran"
    path = folder / "grpo_config.py"
    path.write_text(path.read_text() + PATCHING_CONFIG.format(marker=str(marker)))
    readers = (checks.read_training_check, checks.read_census, census.read_training_check, census.read_census)
    config = read_config(path)
    values, refused = checks.short_run_values({"seed": 3}, path)
    assert values == {"seed": 3} and refused == [] and accepted_values(config, {"seed": 4}) == ({"seed": 4}, [])
    config(**config.defaults)
    assert marker.read_text() == "ran\n" * 5  # each reading and validation: a fresh interpreter that ran it
    assert (checks.read_training_check, checks.read_census, census.read_training_check, census.read_census) == readers
    assert [v.rule for v in check_folder(folder, source)] == ["config-code-changed"]
