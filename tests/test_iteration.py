"""The formal run and the review: a NaN in a real training child stops it, fix and restart follow;
the offline demo of each example runs the whole pipeline and leaves every attempt in git, both in one project
root, where the second run changes nothing of what `status`, `history` and `report` show of the first."""

import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import git
import pytest
from browser import render
from conftest import SOURCE_OF_TRUTH, reference_replies, write_transcript

from orchestrator.training.census import read_training_check
from orchestrator.checks import RuntimeCheckSpec, find_log
from orchestrator.demo import example, formal_proposal, recorded_roles
from orchestrator.training.formal import FormalSpec
from orchestrator.training.logformat import parse_log
from orchestrator.runner import start_run
from orchestrator.run.runs import metrics_line

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
    # no log folder mapped: the template writes its logs beside train.py (its log_dir "."), where the runtime
    # check and the formal monitor find them with one search, live, in the run's own folder
    roles = recorded_roles(cleanup)
    roles["roles"]["log_folder"] = None
    replies[0] = {**replies[0], "text": f"```json\n{json.dumps(roles)}\n```"}
    proposal = reply("formal_train", f"```json\n{json.dumps(formal_proposal(cleanup, recorded_roles(cleanup)))}\n```")
    fix = reply("fix", "FILE: train.py\n<<<<<<< SEARCH\n" + NAN_REWARD.splitlines()[1] + "\n=======\n"
                + REWARD.splitlines()[1] + "\n>>>>>>> REPLACE\n")
    ideas = cleanup.recorded("future_improvements.md")
    replies += [proposal, fix, proposal, reply("review", f"FILE: future_improvements.md\n````\n{ideas}````\n")]
    # the runtime check plays 2 turns (no NaN yet); the formal run plays 3 and reaches step 3
    spec = RuntimeCheckSpec(model=str(tiny_model_dir), real_model=False, episodes=2, turns=2, token_cap=4,
                            cpu_processes=1)
    lines: list[str] = []
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", replies), run_id="r1", runtime_check=spec,
                        formal=FormalSpec(model=str(tiny_model_dir), timeout_s=600,
                                          pinned={"max_thinking_tokens": 4, "max_action_tokens": 4}),
                        on_event=lines.append)
    assert outcome.status == "done", outcome.reason
    assert any(line.startswith("formal_train: update ") for line in lines), lines
    assert json.loads((project / "runs/r1/jobs/formal-2.json").read_text())["log_path"] == \
        "./runs/r1/formal-2/code/train.logs"
    assert git.Repo(project / "workspace").git.status("--porcelain", "--untracked-files=all") == ""
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
    first_log = project / "runs/r1/formal-1/train.logs"
    assert "nan" in first_log.read_text() and (project / "runs/r1/formal-1/manifest.json").exists()
    assert "nan" in git.Repo(project / "workspace").git.show(f"{formal[0]['sha']}:training/formal-1/train.logs")
    report = (project / "runs/r1/report.md").read_text()
    assert report.index("### formal-1") < report.index("### formal-2")
    assert (project / "runs/r1/plots/formal-1/loss.png").exists()


GAMES = ("cleanup", "staghunt")


def views_of_run(project: Path, run_id: str) -> dict[str, bytes]:
    """What `status`, `history` and `report` show of a run: their output, and the report's files."""
    shown = {}
    for command in ("status", "history", "report"):
        result = subprocess.run([sys.executable, "-m", "orchestrator", command, run_id, "--project-root", str(project)],
                                capture_output=True, timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        shown[command] = result.stdout
    for name in ("report.md", "report.html"):
        shown[name] = (project / "runs" / run_id / name).read_bytes()
    return shown


@dataclass
class Demos:
    """Both examples' demos in one project root, cleanup then staghunt, as a researcher trying both runs them."""

    project: Path
    results: dict[str, subprocess.CompletedProcess]
    run_ids: dict[str, str]
    first_before: dict[str, bytes]  # views_of_run of the first demo before the second ran
    first_after: dict[str, bytes]  # and after

    def run_dir(self, game: str) -> Path:
        return self.project / "runs" / self.run_ids[game]


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Demos:
    project = tmp_path_factory.mktemp("demos") / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    results, run_ids, first_before = {}, {}, {}
    for game in GAMES:
        results[game] = subprocess.run([sys.executable, "-m", "orchestrator", "demo", "--example", game,
                                        "--project-root", str(project)], capture_output=True, text=True, timeout=900)
        assert results[game].returncode == 0, results[game].stdout[-3000:] + results[game].stderr[-3000:]
        [run_ids[game]] = [p.name for p in (project / "runs").glob(f"demo-{game}-*")]
        if game == GAMES[0]:
            first_before = views_of_run(project, run_ids[game])
    return Demos(project, results, run_ids, first_before, views_of_run(project, run_ids[GAMES[0]]))


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
@pytest.mark.tiny_agent("staghunt")
@pytest.mark.parametrize("name", GAMES)
def test_the_offline_demo_runs_the_whole_pipeline(demos: Demos, name: str):
    project, result, run_dir = demos.project, demos.results[name], demos.run_dir(name)
    assert "demo summary" in result.stdout and "tokens (recorded)" in result.stdout
    subjects = git.Repo(project / "workspace").git.log(f"run/{run_dir.name}", "--format=%s").splitlines()[::-1]
    nodes = [s.split(" attempt")[0] for s in subjects[1:]]
    assert nodes == ["setup", "map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch",
                     "fix", "fix", "formal_train", "review"]
    assert "import_check edited train.py" in subjects[7] and "runtime_check edited train.py" in subjects[8]
    ideas = (run_dir / "future_improvements.md").read_text()
    assert ideas.count("\n## ") >= 3 and "Evidence:" in ideas
    assert ideas == example(name).recorded("future_improvements.md")  # the example's own review, no other game's
    log = run_dir / "formal-1/train.logs"
    records = parse_log(log.read_text())
    assert [r.kind for r in records if r.kind == "train"] and all(
        math.isfinite(r.values["loss"]) for r in records if r.kind == "train")
    # the tiny agent played the formal run and the runtime check: some actions parsed; and every update whose groups'
    # returns differed had a gradient. Whether a group's returns differ is the tokens this CPU samples (Stag Hunt's
    # sparse rewards leave 2 of 3 demo updates flat on some seeds: benchmarks/flat_groups.py), so it is not asserted
    checked = [r for r in parse_log(find_log(run_dir / "runtime_check").read_text()) if r.kind == "train"]
    for updates in ([r for r in records if r.kind == "train"], checked):
        assert updates and min(r.values["invalid_action_rate"] for r in updates) < 1.0, updates
        assert all(r.values["grad_norm"] > 0 for r in updates if r.values["frac_reward_zero_std"] < 1), updates
    # learning you can see: state.json, a valid PNG per metric, the report's links to them, status's metric line
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
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", run_dir.name, "--project-root",
                             str(project)], capture_output=True, text=True, timeout=120)
    assert metrics_line(metrics) in status.stdout, status.stdout + status.stderr
    # the job's outputs stayed in the run's folder: nothing untracked in the workspace, its logs committed there
    assert git.Repo(project / "workspace").git.status("--porcelain", "--untracked-files=all") == ""
    committed = git.Repo(project / "workspace").git.show(f"run/{run_dir.name}:training/formal-1/train.logs")
    assert committed == log.read_text().rstrip("\n")


STAG_HUNT_METRICS = ("loss", "gradNorm", "learning_rate", "kl", "reward", "reward_std", "frac_reward_zero_std",
                     "invalid_action_rate", "completion_mean_length", "step_time")
SAMPLED_FIELDS = ("prompt:", "thinking_output:", "action_output:", "parsed_call:", "helper_result:", "declared_move:")


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
@pytest.mark.tiny_agent("staghunt")
def test_stag_hunt_s_own_logs_hold_every_metric_and_every_sampled_turn(demos: Demos):
    """Stag Hunt's JSON-lines train.logs and its Sample_EP.logs, as its launch_training.sh ran the formal run."""
    formal = demos.run_dir("staghunt") / "formal-1"
    records = [json.loads(line) for line in (formal / "train.logs").read_text().splitlines()]
    updates = [r for r in records if r["event"] == "train"]
    assert records[0]["event"] == "start" and records[-1]["event"] == "done"
    assert [r["step"] for r in updates] == list(range(1, records[0]["total_steps"] + 1)) and len(updates) >= 2
    for record in updates:
        assert all(math.isfinite(record[key]) for key in STAG_HUNT_METRICS), record
        assert record["completion_mean_length"] > 0
    sample = (formal / "Sample_EP.logs").read_text()
    episodes = re.findall(r"^===== episode \d+ \(step \d+, seed \d+\)", sample, re.M)
    turns = sample.count("board after the turn:")
    assert episodes and turns >= len(episodes)
    for field in SAMPLED_FIELDS:
        assert sample.count(f"[hunter 0] {field}") == turns, field


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
@pytest.mark.tiny_agent("staghunt")
def test_a_second_run_in_the_same_root_leaves_what_the_first_shows_byte_for_byte(demos: Demos):
    first, second = (demos.run_dir(game) for game in GAMES)
    assert demos.first_after == demos.first_before
    # not equal by chance: the second run trained another game into its own formal-1, which the first never shows
    assert (first / "formal-1/train.logs").read_text() != (second / "formal-1/train.logs").read_text()
    state = json.loads((first / "state.json").read_text())
    assert metrics_line(state["latest_metrics"]).encode() in demos.first_after["status"]
    assert state["formal_log_dir"] == f"./runs/{first.name}/formal-1"
    record = json.loads((first / "jobs/formal-1.json").read_text())
    assert record["log_path"].startswith(f"./runs/{first.name}/formal-1/")
    assert b"formal-1" in demos.first_after["report.md"] and b"formal_train" in demos.first_after["report.html"]


@pytest.mark.tiny_agent("cleanup")
@pytest.mark.tiny_agent("staghunt")
@pytest.mark.parametrize("name", GAMES)
def test_the_demo_s_page_in_a_browser_shows_every_attempt_diff_and_curve(demos: Demos, name: str, tmp_path: Path):
    run_dir = demos.run_dir(name)
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
