"""The formal run and the review: a NaN in a real training child stops it, fix and restart follow;
the offline demo runs the whole pipeline and leaves every attempt in git."""

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest
from browser import render
from conftest import SOURCE_OF_TRUTH, reference_replies, write_transcript

from orchestrator.census import read_training_check
from orchestrator.checks import RuntimeCheckSpec
from orchestrator.demo import example, formal_proposal, recorded_roles
from orchestrator.formal import FormalSpec
from orchestrator.logformat import parse_log
from orchestrator.plots import log_series
from orchestrator.runner import start_run
from orchestrator.runs import metrics_line

REWARD = "def shape_reward(reward: float, info: dict, agent_id: int) -> float:\n    return reward\n"
NAN_REWARD = ("def shape_reward(reward: float, info: dict, agent_id: int) -> float:\n"
              "    return float(\"nan\") if info[\"step\"] >= 3 else reward\n")


def reply(tag: str, text: str) -> dict:
    return {"tag": tag, "text": text, "usage": {"input_tokens": 1000, "output_tokens": 100}}


@pytest.mark.slow
def test_nan_in_the_formal_run_stops_it_then_fix_and_restart(project: Path, tmp_path: Path, tiny_model_dir: Path):
    replies = reference_replies()
    assert replies[3]["tag"] == "generate_train"
    replies[3]["text"] = replies[3]["text"].replace(REWARD, NAN_REWARD)
    assert NAN_REWARD in replies[3]["text"]
    cleanup = example("cleanup")
    proposal = reply("formal_train", f"```json\n{json.dumps(formal_proposal(cleanup, recorded_roles(cleanup)))}\n```")
    fix = reply("fix", "FILE: train.py\n<<<<<<< SEARCH\n" + NAN_REWARD.splitlines()[1] + "\n=======\n"
                + REWARD.splitlines()[1] + "\n>>>>>>> REPLACE\n")
    ideas = cleanup.recorded("future_improvements.md")
    replies += [proposal, fix, proposal, reply("review", f"FILE: future_improvements.md\n````\n{ideas}````\n")]
    # the runtime check plays 2 turns (no NaN yet); the formal run plays 3 and reaches step 3
    spec = RuntimeCheckSpec(model=str(tiny_model_dir), real_model=False, episodes=2, turns=2, token_cap=4,
                            cpu_processes=1)
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", replies), run_id="r1", runtime_check=spec,
                        formal=FormalSpec(model=str(tiny_model_dir), timeout_s=600,
                                          pinned={"max_thinking_tokens": 4, "max_action_tokens": 4}))
    assert outcome.status == "done", outcome.reason
    formal = [a for a in outcome.state["attempts"] if a["node"] == "formal_train"]
    assert formal[0]["outcome"] in ("stopped (nan_loss)", "failed (crash)"), formal[0]
    assert formal[1]["outcome"] == "finished"
    # the anomaly is in the attempt record and on its page, beside the curves that show it
    assert formal[0]["anomaly"]["kind"] in ("nan_loss", "crash")
    assert f'class="anomaly">{formal[0]["anomaly"]["kind"]}' in (project / "runs/r1/report.html").read_text()
    fixes = [a for a in outcome.state["attempts"] if a["node"] == "fix"]
    assert [f["check"] for f in fixes] == ["formal_train"]
    subjects = git.Repo(project / "workspace").git.log("run/r1", "--format=%s").splitlines()[::-1]
    assert [s.split(":")[0] for s in subjects[-4:]] == ["formal_train attempt 1", "fix attempt 1",
                                                        "formal_train attempt 2", "review attempt 1"]
    first_log = project / "workspace/training/formal-1/train.logs"
    assert "nan" in first_log.read_text() and (project / "workspace/training/formal-1/manifest.json").exists()
    report = (project / "runs/r1/report.md").read_text()
    assert report.index("### formal-1") < report.index("### formal-2")
    assert (project / "runs/r1/plots/formal-1/loss.png").exists()


@pytest.fixture(scope="module", params=[pytest.param(game, marks=pytest.mark.tiny_agent(game))
                                         for game in ("cleanup", "staghunt")])
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One demo run per example, shared by the tests that read it: (project root, the command's result, example)."""
    project = tmp_path_factory.mktemp(f"demo-{request.param}") / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "orchestrator", "demo", "--example", request.param,
                             "--project-root", str(project)], capture_output=True, text=True, timeout=900)
    return project, result, request.param


@pytest.mark.slow
def test_the_offline_demo_runs_the_whole_pipeline(demo):
    project, result, name = demo
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "demo summary" in result.stdout and "tokens (recorded)" in result.stdout
    subjects = git.Repo(project / "workspace").git.log("--format=%s").splitlines()[::-1]
    nodes = [s.split(" attempt")[0] for s in subjects[1:]]
    assert nodes == ["setup", "map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch",
                     "fix", "fix", "formal_train", "review"]
    assert "import_check edited train.py" in subjects[7] and "runtime_check edited train.py" in subjects[8]
    ideas = (project / "workspace/future_improvements.md").read_text()
    assert ideas.count("\n## ") >= 3 and "Evidence:" in ideas
    assert ideas == example(name).recorded("future_improvements.md")  # the example's own review, no other game's
    records = parse_log((project / "workspace/training/formal-1/train.logs").read_text())
    assert [r.kind for r in records if r.kind == "train"] and all(
        math.isfinite(r.values["loss"]) for r in records if r.kind == "train")
    # the tiny agent plays: its groups' returns differ, so updates have a gradient and the reward moves
    series = log_series(project / "workspace/training/formal-1/train.logs")
    grad_norms = [value for _, value in series["grad_norm"]]
    assert sum(value > 1e-4 for value in grad_norms) >= len(grad_norms) - 1, grad_norms
    assert len({value for _, value in series["reward"]}) > 1, series["reward"]
    # learning you can see: state.json, a valid PNG per metric, the report's links to them, status's metric line
    run_dir = next((project / "runs").glob("demo-*"))
    state = json.loads((run_dir / "state.json").read_text())
    assert state["status"] == "done" and state["next"] == []
    # the runtime check's training (two processes) was judged from inside: compared at its end, nothing found
    judged = read_training_check(run_dir / "runtime_check" / "census")
    assert judged is not None and judged.violations == [] and judged.notes == [], judged
    assert judged.checked["functions"] >= 3 and judged.checked["instances"] >= 1, judged
    assert [a["node"] for a in state["attempts"] if a.get("sha")][-2:] == ["formal_train", "review"]
    assert sum(row["tokens"] for row in state["ledger"].values()) > 0
    metrics = state["latest_metrics"]
    assert metrics["run"] == "formal-1" and metrics["update"] == max(r.values["update"] for r in records
                                                                     if r.kind == "train")
    pngs = sorted((run_dir / "plots" / "formal-1").glob("*.png"))
    assert {"reward", "loss", "grad_norm"} <= {p.stem for p in pngs}
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", (run_dir / "report.md").read_text())
    assert sorted(run_dir / link for link in links) == pngs
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", "--project-root", str(project)],
                            capture_output=True, text=True, timeout=120)
    assert metrics_line(metrics) in status.stdout, status.stdout + status.stderr


def test_the_demo_s_page_in_a_browser_shows_every_attempt_diff_and_curve(demo, tmp_path: Path):
    project, result, name = demo
    assert result.returncode == 0, result.stdout[-3000:]
    run_dir = next((project / "runs").glob("demo-*"))
    state = json.loads((run_dir / "state.json").read_text())
    shown = render(run_dir / "report.html", tmp_path / "demo.png")
    assert 'id="status">done<' in shown.dom and 'http-equiv="refresh"' not in shown.dom
    assert shown.count(r'<article class="attempt ') == len(state["attempts"]) == 10
    # both fixes' edits as diffs: the faulty line out, the right one in
    fixes = shown.dom.split('data-node="fix"')[1:3]
    assert all('<span class="del">-' in f and '<span class="add">+' in f for f in fixes)
    assert all("Evidence shown to the model" in f for f in fixes)
    # every curve of the formal run, decoded by the browser
    sizes = shown.image_sizes("curve")
    assert len(sizes) == len(list((run_dir / "plots/formal-1").glob("*.png"))) >= 3
    assert all(w > 100 and h > 100 for w, h in sizes), sizes
    assert "#node-review > path" in shown.dom and "#edge-formal_train-review > path" in shown.dom
