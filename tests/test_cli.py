"""Bad input to `run`, `demo` and `resume` is refused in one line with exit code 2, before anything is written:
never a traceback, whatever is wrong (the command line itself, a value that cannot work, an example's files)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import write_transcript

from orchestrator import cli, demo


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """`python -m orchestrator ARGV`, in this process: its one line of output, after checking it exited 2."""
    monkeypatch.setattr(sys, "argv", ["python -m orchestrator", *argv])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    shown = (out.out + out.err).strip()
    assert ended.value.code == 2, shown
    assert len(shown.splitlines()) == 1 and shown.startswith("error: ") and "Traceback" not in shown, shown
    return shown


@pytest.mark.parametrize("args, message", [
    (["--run-id", "../escaped"], "--run-id '../escaped' cannot name a run"),
    (["--run-id", "a..b"], "--run-id 'a..b' cannot name a run"),
    (["--run-id", "x.lock"], "cannot name a run"),
    (["--check-episodes", "0"], "--check-episodes must be 1 or more"),
    (["--hang-seconds", "-1"], "--hang-seconds must be more than 0"),
    (["--formal-timeout", "0"], "--formal-timeout must be more than 0"),
    (["--max-cost", "nan"], "--max-cost must be 0 or more"),
    (["--formal-set", "=3"], "--formal-set takes KEY=VALUE"),
    (["--sbatch-option", "Partition=long"], "--sbatch-option takes KEY=VALUE with KEY an sbatch long option"),
    (["--sbatch-option", "time="], "--sbatch-option 'time=': give a value after '='"),
    (["--max-jobs", "0"], "--max-jobs must be 1 or more"),
    (["--poll-seconds", "0"], "--poll-seconds must be more than 0"),
    (["--formal-set", "no_such_field=3"], "--formal-set 'no_such_field': not a field of GRPOConfig"),
    (["--check-model", "./no-such-model"], "--check-model ./no-such-model: no such model folder"),
    (["--formal-model", "/no/such/model"], "--formal-model /no/such/model: no such model folder"),
    (["--until", "nowhere"], "--until 'nowhere' is not a node"),
    (["--max-cost", "abc"], "Invalid value for '--max-cost'"),
    (["--no-such-option"], "No such option: --no-such-option"),
])
def test_run_refuses_bad_input_in_one_line_before_writing_anything(project: Path, tmp_path: Path, args: list[str],
                                                                   message: str, capsys, monkeypatch):
    llm = write_transcript(tmp_path / "t.json", [])
    shown = refusal(["run", "--llm", llm, *args, "--project-root", str(project)], capsys, monkeypatch)
    assert message in shown
    assert sorted(p.name for p in project.iterdir()) == ["source_of_truth"]
    assert not (project.parent / "escaped").exists()


@pytest.mark.parametrize("command", ["run", "demo"])
def test_a_project_root_that_is_a_file_is_refused(tmp_path: Path, command: str, capsys, monkeypatch):
    (tmp_path / "a-file").write_text("")
    for root in (tmp_path / "a-file", tmp_path / "a-file" / "below"):
        shown = refusal([command, "--project-root", str(root)], capsys, monkeypatch)
        assert f"{tmp_path / 'a-file'} is a file" in shown


@pytest.mark.parametrize("args, message", [
    (["resume"], "Missing argument"),
    (["resume", "nope"], "no run 'nope'"),
    (["resume", "../nope"], "no run '../nope'"),
    (["demo", "--example", "nope"], "no example 'nope'"),
    (["demo", "--example", "cleanup/../staghunt"], "no example 'cleanup/../staghunt'"),
])
def test_resume_and_demo_refuse_what_does_not_exist(project: Path, args: list[str], message: str, capsys,
                                                     monkeypatch):
    assert message in refusal([*args, "--project-root", str(project)], capsys, monkeypatch)
    assert sorted(p.name for p in project.iterdir()) == ["source_of_truth"]


@pytest.mark.parametrize("roles_json, message", [
    (lambda answer: json.dumps({**answer, "roles": {**answer["roles"], "model": None}}), "roles.json: model: no field"),
    (lambda answer: "{not json", "roles.json: Expecting property name"),
])
def test_an_example_whose_roles_cannot_be_replayed_is_refused_in_one_line(tmp_path: Path, roles_json, message: str,
                                                                          capsys, monkeypatch):
    examples = tmp_path / "examples"
    shutil.copytree(demo.EXAMPLES / "staghunt", examples / "mine", ignore=shutil.ignore_patterns("__pycache__"))
    answer = demo.recorded_roles(demo.example("staghunt"))
    (examples / "mine" / "roles.json").write_text(roles_json(answer))
    monkeypatch.setattr(demo, "EXAMPLES", examples)
    project = tmp_path / "project"
    shown = refusal(["demo", "--example", "mine", "--project-root", str(project)], capsys, monkeypatch)
    assert "example 'mine' cannot be replayed" in shown and message in shown, shown
    assert not project.exists()
