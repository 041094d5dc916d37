"""Where a failure comes from: the machine (`environment`, with a one-line remedy) or the code (the fix's).

Real faults wherever they are cheap: processes that really write to a full device, open what they may not,
import what is not installed, commit with git under an empty config, and a short run whose launch meets them;
the launchers' own outputs captured from real launches (tests/fixtures: an empty OMP_NUM_THREADS, a leftover
torch plugin, a port another process holds). The GPU driver's messages are the only texts not produced here
(no GPU): torch's and nvidia-smi's own words.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.checks import RuntimeCheckSpec, run_runtime_check
from orchestrator.faults import CODE, ENVIRONMENT, cause_of, failure_lines

FIXTURES = Path(__file__).parent / "fixtures"


def stderr_of(code: str, folder: Path, env: dict[str, str] | None = None, script: str = "") -> str:
    """What a real Python process prints when it runs `code` in `folder` (as `script` when given, so its frames
    name that file)."""
    if script:
        (folder / script).write_text(code)
    command = [sys.executable, script] if script else [sys.executable, "-c", code]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_an_empty_omp_num_threads_read_by_the_launcher_is_the_machines():
    cause = cause_of((FIXTURES / "launcher_empty_omp_stderr.txt").read_text(), environ={"OMP_NUM_THREADS": ""})
    assert cause.origin == ENVIRONMENT and cause.fault == "bad_variable"
    assert "OMP_NUM_THREADS is set but empty" in cause.remedy and "`export OMP_NUM_THREADS=1`" in cause.remedy
    assert "accelerate" in cause.remedy and "\n" not in cause.remedy


def test_a_variable_the_code_itself_cannot_read_stays_the_codes_with_the_fact(tmp_path: Path):
    stderr = stderr_of("import os\nworkers = int(os.environ['GRPO_WORKERS'])\n", tmp_path, {"GRPO_WORKERS": "two"},
                       script="train.py")
    cause = cause_of(stderr, tmp_path, environ={"GRPO_WORKERS": "two"})
    assert cause.origin == CODE and "GRPO_WORKERS is set but 'two'" in cause.fact


def test_a_missing_module_a_leftover_plugin_imports_is_the_machines(generated_dir: Path):
    cause = cause_of((FIXTURES / "launcher_missing_plugin_stderr.txt").read_text(), generated_dir)
    assert cause.origin == ENVIRONMENT and cause.fault == "missing_module"
    assert "`torch_npu_missing` is missing" in cause.remedy and "-m pip install torch_npu_missing" in cause.remedy


def test_a_missing_module_only_generated_code_imports_is_the_codes_with_the_fact(generated_dir: Path):
    with (generated_dir / "helpers.py").open("a") as helpers:
        helpers.write("\nimport yaml_not_installed\n")
    cause = cause_of(stderr_of("import helpers", generated_dir), generated_dir)
    assert cause.origin == CODE and "`yaml_not_installed` is not installed" in cause.fact


def test_a_missing_module_the_researchers_game_imports_is_the_machines(generated_dir: Path):
    with (generated_dir / "env_move.py").open("a") as game:
        game.write("\nimport yaml_not_installed\n")
    cause = cause_of(stderr_of("import helpers", generated_dir), generated_dir)  # a frame in helpers.py, too
    assert cause.origin == ENVIRONMENT and "env_move.py import(s) it" in cause.remedy


def test_a_missing_local_module_is_the_codes(generated_dir: Path):
    (generated_dir / "prompt_template.py").unlink()
    assert cause_of(stderr_of("import prompt_template", generated_dir), generated_dir).origin == CODE


def test_a_submodule_an_installed_package_lacks_asks_for_an_upgrade(tmp_path: Path):
    cause = cause_of(stderr_of("import rich.no_such_part", tmp_path), tmp_path)
    assert cause.origin == ENVIRONMENT and "the installed `rich` has no `rich.no_such_part`" in cause.remedy
    assert "-m pip install -U rich" in cause.remedy


@pytest.mark.parametrize("script", ["", "train.py"])
def test_no_space_left_is_the_machines_wherever_it_is_raised(tmp_path: Path, script: str):
    stderr = stderr_of("with open('/dev/full', 'w') as f:\n    f.write('x' * 100)\n", tmp_path, script=script)
    cause = cause_of(stderr, tmp_path)
    assert cause.origin == ENVIRONMENT and cause.fault == "no_space" and "is full" in cause.remedy


def test_a_path_this_user_may_not_open_is_the_machines_only_outside_the_code(tmp_path: Path):
    write = "open('/sys/kernel/orchestrator-test', 'w')\n"  # sysfs refuses a new file, even to root
    outside = cause_of(stderr_of(write, tmp_path), tmp_path)
    assert outside.origin == ENVIRONMENT and "may not write or open /sys/kernel/orchestrator-test" in outside.remedy
    inside = cause_of(stderr_of(write, tmp_path, script="train.py"), tmp_path)
    assert inside.origin == CODE and "/sys/kernel/orchestrator-test" in inside.fact  # the code may pick another path


def test_a_read_only_file_system_is_the_machines_wherever_it_is_raised(tmp_path: Path, read_only_mount):
    read_only_folder = read_only_mount(tmp_path / "ro")
    stderr = stderr_of(f"open({str(read_only_folder / 'train.logs')!r}, 'w')\n", tmp_path, script="train.py")
    cause = cause_of(stderr, tmp_path)
    assert cause.origin == ENVIRONMENT and cause.fault == "read_only"
    assert f"{read_only_folder / 'train.logs'} is on a read-only file system" in cause.remedy


def test_a_port_another_process_holds_is_the_machines_before_the_script_runs():
    cause = cause_of((FIXTURES / "launcher_port_in_use_stderr.txt").read_text())
    assert cause.origin == ENVIRONMENT and cause.fault == "port_in_use"
    assert "port 59065 is held by another process" in cause.remedy and "ss -ltnp" in cause.remedy


def test_a_warning_about_a_port_is_not_the_failure():
    """accelerate warns that the port is taken and picks another; what failed is the code's (a model id)."""
    text = (FIXTURES / "launcher_port_fallback_stderr.txt").read_text()
    assert "already in use" in text
    assert cause_of(text).origin == CODE
    assert not any("already in use" in line for line in failure_lines(text))


@pytest.mark.parametrize("message, says", [
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
     "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
     "older than torch's CUDA build needs"),
    ("RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version", "older than"),
    ("Failed to initialize NVML: Driver/library version mismatch", "reboot"),
])
def test_a_driver_mismatch_is_the_machines_wherever_it_is_raised(message: str, says: str):
    text = ('Traceback (most recent call last):\n  File "/w/generated/train.py", line 40, in main\n'
            f"    accelerator = Accelerator()\n{message}\n")
    cause = cause_of(text)
    assert cause.origin == ENVIRONMENT and cause.fault == "driver_mismatch" and says in cause.remedy


@pytest.fixture
def no_git_identity(tmp_path: Path, monkeypatch) -> None:
    """git with an empty config: no identity anywhere (HOME, GIT_CONFIG_GLOBAL, no system config)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("EMAIL", "")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)


# a launch script that meets the machine before it trains (a full device, a path it may not open, a git commit
# of the launch); the short run's real launch, judged as the runtime check judges it
LAUNCH = """#!/usr/bin/env bash
set -euo pipefail
{step}
"""


def cleanup_roles():
    from conftest import ROOT

    from orchestrator.sources.config_file import read_config
    from orchestrator.demo import example, recorded_roles
    from orchestrator.sources.roles import validate_roles

    kinds = read_config(ROOT / "source_of_truth" / "grpo_config.py").kinds
    return validate_roles(recorded_roles(example("cleanup")), kinds, cli_possible=True)


@pytest.mark.parametrize("step, fault, says", [
    ('echo "launch $(date)" >> /dev/full', "no_space", "is full"),
    ("touch /sys/kernel/orchestrator-test", "no_permission", "may not write or open /sys/kernel/orchestrator-test"),
    ('git init -q repo && git -C repo commit -q --allow-empty -m "launch"', "git_identity",
     "git config --global user.email"),
])
def test_a_short_run_that_meets_the_machine_ends_environment_with_its_remedy(generated_dir: Path, tmp_path: Path,
                                                                             no_git_identity: None, step: str,
                                                                             fault: str, says: str):
    (generated_dir / "launch_training.sh").write_text(LAUNCH.format(step=step))
    result = run_runtime_check(generated_dir, RuntimeCheckSpec(model="tiny", real_model=False), cleanup_roles(),
                               tmp_path / "check")
    assert not result.passed and result.kind == ENVIRONMENT, result
    assert says in result.summary and "\n" not in result.summary and result.files == []
    assert result.summary.startswith("the short training run failed because of the machine, not the code: ")


def test_a_package_only_the_generated_code_imports_goes_to_the_fix_with_that_fact(generated_dir: Path, tmp_path: Path):
    with (generated_dir / "helpers.py").open("a") as helpers:
        helpers.write("\nimport yaml_not_installed\n")
    (generated_dir / "launch_training.sh").write_text(LAUNCH.format(step='"$PYTHON" -c "import helpers"'))
    result = run_runtime_check(generated_dir, RuntimeCheckSpec(model="tiny", real_model=False), cleanup_roles(),
                               tmp_path / "check")
    assert result.kind == "import" and result.files == ["helpers.py"], result
    assert "On this machine: `yaml_not_installed` is not installed (for " in result.evidence
