"""`status` from state.json, and from the checkpoint when a run has none; the latest formal run's latest
metrics in it; the read-only commands never import the training stack."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.run.runs import STATE_FILE, RunSettings, read_state, run_summary, write_state

LOG = """2026-11-23T09:41:00 start updates=4
2026-11-23T09:41:01 train update=1 loss=0.5 kl=0.01 gradNorm=1.5 reward_mean=-0.3
2026-11-23T09:41:03 train update=2 loss=0.25 kl=0.02 gradNorm=1.25 reward_mean=-0.15
"""
VALUES = {"attempts": [{"node": "setup", "attempt": 1, "outcome": "passed", "sha": "abc", "tokens": 0, "cost_usd": 0.0},
                       {"node": "formal_train", "attempt": 1, "outcome": "finished", "sha": "def", "tokens": 1100,
                        "cost_usd": 0.01}],
          "ledger": {"formal_train": {"calls": 1, "tokens": 1100, "cost_usd": 0.01}},
          "evidence": {"summary": "loss is nan at update 2"}, "formal_log_dir": "./runs/r1/formal-1"}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    settings = RunSettings(run_id="r1", llm="replay:x.json", project_root=str(root), source_of_truth=str(root / "s"),
                           status="blocked", exit_reason="formal_train still failing")
    settings.save()
    log_dir = settings.run_dir / "formal-1"  # the attempt's own folder, as state.json names it: relative to the root
    log_dir.mkdir(parents=True)
    (log_dir / "train.logs").write_text(LOG)
    return settings.run_dir


def status(root: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "orchestrator", "status", "r1", "--project-root", str(root)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_status_reads_state_json(run_dir: Path):
    write_state(run_dir, "blocked", "formal_train still failing", VALUES, ["fix"])
    state = read_state(run_dir)
    assert state["next"] == ["fix"] and state["last_error"] == "loss is nan at update 2"
    assert state["latest_metrics"] == {"run": "formal-1", "update": 2.0, "reward": -0.15, "loss": 0.25, "kl": 0.02,
                                       "grad_norm": 1.25}
    assert not (run_dir / "checkpoints.sqlite").exists()  # nothing but state.json to read from
    out = status(run_dir.parents[1])
    assert "formal run formal-1, update 2: reward -0.15, loss 0.25, kl 0.02, grad_norm 1.25" in out
    assert "next node: fix; attempts 2" in out and "1100 tokens" in out and "last error: loss is nan" in out


def test_a_running_formal_job_s_log_wins(run_dir: Path):
    """While a formal attempt trains, its job record names the live log (relative to the project root, where
    the template writes it): status shows it, not the last one, in the project and in a copy of it."""
    live = run_dir / "formal-2" / "outputs" / "run-a" / "train.logs"
    live.parent.mkdir(parents=True)
    live.write_text(LOG + "2026-11-23T09:41:05 train update=3 loss=0.2 reward_mean=0.5\n")
    (run_dir / "jobs").mkdir()
    record = {"log_path": "./runs/r1/formal-2/outputs/run-a/train.logs", "status": "running"}
    (run_dir / "jobs" / "formal-2.json").write_text(json.dumps(record))
    write_state(run_dir, "running", "", VALUES, ["formal_train"])
    copy = run_dir.parents[2] / "copy"
    shutil.copytree(run_dir.parents[1], copy)
    live.write_text(LOG)  # the copy alone holds update 3
    metrics = run_summary(copy, "r1")["metrics"]
    assert metrics["run"] == "formal-2" and metrics["update"] == 3 and metrics["reward"] == 0.5


def test_status_without_state_json_reads_the_checkpoint(run_dir: Path):
    from orchestrator.runner import open_graph, thread

    with open_graph(run_dir) as graph:
        graph.update_state(thread("r1"), VALUES, as_node="review")
    assert not (run_dir / STATE_FILE).exists()
    info = run_summary(run_dir.parents[1], "r1")
    assert info["next"] == ["finish"] and info["attempts"] == 2 and info["tokens"] == 1100
    assert info["metrics"]["update"] == 2 and info["last_error"] == "loss is nan at update 2"
    assert "formal run formal-1, update 2: reward -0.15" in status(run_dir.parents[1])


def test_read_only_commands_import_no_training_stack(run_dir: Path):
    write_state(run_dir, "blocked", "", VALUES, [])
    probe = ("import sys\nfrom orchestrator.cli import app\n"
             "for command in (['status', 'r1'], ['list']):\n"
             "    try:\n"
             "        app(command + ['--project-root', sys.argv[1]])\n"
             "    except SystemExit:\n"
             "        pass\n"
             "heavy = [m for m in ('langgraph', 'torch', 'anthropic', 'git', 'transformers') if m in sys.modules]\n"
             "print('HEAVY', heavy)\n")
    result = subprocess.run([sys.executable, "-c", probe, str(run_dir.parents[1])], capture_output=True, text=True,
                            timeout=120)
    assert "HEAVY []" in result.stdout and "run r1: blocked" in result.stdout, result.stdout + result.stderr


def test_a_stopped_run_s_report_links_its_curves(run_dir: Path):
    from orchestrator.run.journal import Journal
    from orchestrator.training.plots import write_curves
    from orchestrator.runner import _write_report

    log = run_dir / "formal-1" / "train.logs"
    write_curves(log, run_dir / "plots" / "formal-1", "formal-1")
    ctx = SimpleNamespace(run_id="r1", run_dir=run_dir, journal=Journal(run_dir / "journal.jsonl"))
    _write_report(ctx, VALUES, "interrupted", "interrupted by the user")
    report = (run_dir / "report.md").read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", report)
    assert "## Curves" in report and len(links) == 4 and all((run_dir / link).is_file() for link in links)
