"""`try` on the demo, offline: one of the demo's ideas tried as a child run, its two arms on 3 seeds each, the
comparison page in Chromium, the tree of runs, status and history; bad input refused before anything is spent.

One demo run and one `try` (a module-scoped fixture: about 2 CPU-minutes of training besides the demo's), asserted
many ways. The recorded answer for the idea's edit is the example's (examples/cleanup/idea_edits.md), replayed like
the demo's fixes. What the verdict says on these 3-update runs of the tiny agent is not asserted (it is whatever
this CPU samples); that it is computed from both arms' 3 seeds, written and shown is.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import render

from orchestrator import cli
from orchestrator.demo import run_demo
from orchestrator.graph import after_formal_train, after_generation
from orchestrator.ideas.arms import child_arms, read_result, seed_folder
from orchestrator.ideas.lineage import COMPARISON_FILE, Lineage
from orchestrator.page.compare import page_name, verdicts
from orchestrator.run.runs import RunSettings, read_state, write_state
from orchestrator.run.state import Limits
from orchestrator.trying import SEED_STEP, try_idea

IDEA = "2"  # "Split the agents into roles through the prompt": a recorded edit of prompt_template.py
ROOT = Path(__file__).resolve().parents[1]


def command(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """`python -m orchestrator ARGV` in this process: (exit code, what it printed)."""
    monkeypatch.setattr(sys, "argv", ["python -m orchestrator", *argv])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    return ended.value.code, out.out + out.err


@pytest.fixture(scope="module")
def tried(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("try")
    parent = run_demo(root, "cleanup")
    assert parent.status == "done", parent.reason
    child = try_idea(root, parent.run_id, IDEA)
    return root, parent, child


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_the_child_ends_done_with_both_arms_on_three_seeds(tried):
    root, parent, child = tried
    assert child.status == "done", child.reason
    lineage = Lineage.load(root / "runs" / child.run_id)
    first = json.loads((root / "runs" / parent.run_id / "formal-1" / "manifest.json").read_text())["seeds"]
    assert lineage.parent == parent.run_id and lineage.idea.number == 2
    assert lineage.seeds == tuple(first["random_seed"] + k * SEED_STEP for k in range(3))
    for arm in ("parent", "child"):
        for seed in lineage.seeds[1:]:
            assert read_result(seed_folder(root / "runs" / child.run_id, arm, seed))["status"] == "finished"
    parent_arm, child_arm = child_arms(root, child.run_id)
    assert [r.seed for r in parent_arm.runs] == [r.seed for r in child_arm.runs] == list(lineage.seeds)
    assert all(r.series["reward"] and len(r.series["reward"]) == 3 for r in (*parent_arm.runs, *child_arm.runs))
    comparison = json.loads((root / "runs" / child.run_id / COMPARISON_FILE).read_text())
    reward = next(m for m in comparison["metrics"] if m["metric"] == "reward")
    assert reward["seeds"] == [3, 3] and reward["paired"] and reward["window"] == [3, 3]
    assert reward["verdict"] in ("better", "worse", "within noise")


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_the_child_trained_with_its_parent_s_plan_and_only_the_idea_changed(tried):
    root, parent, child = tried
    planned = json.loads((root / "runs" / parent.run_id / "formal-1" / "manifest.json").read_text())["config"]
    ran = json.loads((root / "runs" / child.run_id / "formal-1" / "manifest.json").read_text())["config"]
    folders = {k for k, v in planned.items() if isinstance(v, str) and parent.run_id in v}
    assert {k: v for k, v in ran.items() if k not in folders} == {k: v for k, v in planned.items() if k not in folders}
    state = read_state(root / "runs" / child.run_id)
    nodes = [a["node"] for a in state["attempts"]]
    assert nodes[0] == "apply_idea" and "generate_train" not in nodes and "fix" not in nodes
    assert nodes[-2:] == ["seed_runs", "review"]
    # the plan was given: formal_train asked nothing
    assert {node for node, row in state["ledger"].items() if row["calls"]} == {"apply_idea", "review"}
    assert "edited prompt_template.py" == state["attempts"][0]["outcome"]
    diff = subprocess.run(["git", "diff", "--stat", f"run/{parent.run_id}", f"run/{child.run_id}", "--", "generated"],
                          cwd=root / "workspace", capture_output=True, text=True, check=True).stdout
    assert "generated/prompt_template.py" in diff and diff.count("|") == 1


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_the_comparison_page_shows_both_arms_the_file_diff_and_the_verdict(tried, tmp_path: Path):
    root, parent, child = tried
    page = root / "runs" / page_name([parent.run_id, child.run_id])
    rendered = render(page, tmp_path / "compare.png")
    for run in (parent.run_id, child.run_id):
        # reward, invalid-action rate, completion length, KL: 3 thin seed lines and one thick mean per arm each
        assert rendered.count(rf'<polyline class="seed arm-\d" data-run="{run}"') == 4 * 3
        assert rendered.count(rf'<polyline class="mean arm-\d" data-run="{run}"') == 4
    table = re.search(r'<table class="verdict-table">(.*?)</table>', rendered.dom, re.S).group(1)
    assert len(re.findall(r'<tr data-metric="', table)) == 4
    assert re.search(r'data-metric="reward">.*?class="verdict (better|worse|within-noise)"', table, re.S)
    assert "3 paired" in table and "The statistic: per seed, the mean over the final window" in rendered.dom
    files = re.search(r'<section class="box files"(.*?)</section>', rendered.dom, re.S).group(1)
    assert "generated/prompt_template.py" in files and "Your standing role" in files
    assert "idea 2: Split the agents into roles through the prompt" in rendered.dom


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_status_history_and_the_run_page_show_the_tree_of_runs(tried, capsys, monkeypatch):
    root, parent, child = tried
    code, out = command(["status", child.run_id, "--project-root", str(root)], capsys, monkeypatch)
    assert code == 0 and f"child of {parent.run_id}" in out and "idea 2: Split the agents into roles" in out
    assert "verdict: reward " in out
    code, out = command(["history", parent.run_id, "--project-root", str(root)], capsys, monkeypatch)
    assert f"└─ {child.run_id} (done): idea 2: Split the agents into roles through the prompt -> reward " in out
    code, out = command(["history", child.run_id, "--project-root", str(root)], capsys, monkeypatch)
    assert f"are run {parent.run_id}'s" in out and "apply_idea" in out and "generate_train" not in out
    code, out = command(["compare", parent.run_id, child.run_id, "--project-root", str(root)], capsys, monkeypatch)
    assert code == 0 and f"{child.run_id} against {parent.run_id}:" in out and "reward: " in out
    # the other way round: the parent's arm is the one its child trained, so the same seeds pair up
    forward = {m.metric: m for m in verdicts(root, parent.run_id, child.run_id).metrics}
    backward = {m.metric: m for m in verdicts(root, child.run_id, parent.run_id).metrics}
    assert all(backward[k].paired and backward[k].difference == pytest.approx(-forward[k].difference)
               for k in forward)
    page = (root / "runs" / child.run_id / "report.html").read_text()
    assert 'id="tree"' in page and page_name([parent.run_id, child.run_id]) in page


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_a_child_s_caps_stop_it_before_it_spends(tried):
    root, parent, _ = tried
    capped = try_idea(root, parent.run_id, IDEA, limits=Limits(max_tokens=0), run_id="capped")
    assert capped.status == "budget" and capped.exit_code == 3
    assert not (read_state(root / "runs" / "capped") or {}).get("ledger")


def fake_run(root: Path, run_id: str, attempts: list[dict], status: str = "done") -> Path:
    """A run folder with run.json and state.json only: enough for `try` to judge it."""
    settings = RunSettings(run_id, "replay:none.json", str(root), str(ROOT / "source_of_truth"), status=status)
    settings.save()
    write_state(settings.run_dir, status, "", {"attempts": attempts}, ())
    return settings.run_dir


@pytest.mark.parametrize("argv, attempts, ideas, message", [
    (["early", "1"], [{"node": "rules", "attempt": 1, "outcome": "failed"}], True,
     "run early cannot be a parent (it never reached formal_train"),
    (["early", "1"], [{"node": "formal_train", "attempt": 1, "outcome": "stopped (nan_loss)"}], True,
     "run early cannot be a parent (its last formal run ended stopped (nan_loss)"),
    (["early", "7"], [], True, "idea 7: "),
    (["early", "1"], [], False, "future_improvements.md does not exist"),
    (["early", "Nothing like it"], [], True, "idea 'Nothing like it': no heading is or holds these words"),
    (["early", "1", "--idea", "both"], [], True, "not both"),
    (["early", "1", "--seeds", "0"], [], True, "--seeds must be 1 or more"),
    (["missing", "1"], [], True, "no run 'missing'"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_is_written(tmp_path: Path, capsys, monkeypatch, argv, attempts,
                                                             ideas, message):
    run_dir = fake_run(tmp_path, "early", attempts)
    if ideas:
        (run_dir / "future_improvements.md").write_text((ROOT / "examples/cleanup/future_improvements.md").read_text())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, out = command(["try", *argv, "--project-root", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and len(out.strip().splitlines()) == 1 and message in out, out
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_child_run_applies_its_idea_after_the_generation_and_trains_its_seeds_after_the_formal_run():
    idea = {"number": 2, "title": "t", "text": "x"}
    assert after_generation({}) == "rules" and after_generation({"idea": idea}) == "apply_idea"
    assert after_generation({"idea": idea, "attempts": [{"node": "apply_idea", "attempt": 1}]}) == "rules"
    assert after_generation({"idea": idea, "status": "budget"}) == "finish"
    assert after_formal_train({}) == "review" and after_formal_train({"idea": idea}) == "seed_runs"
    assert after_formal_train({"idea": idea, "evidence": {"check": "formal_train"}}) == "fix"


@pytest.mark.parametrize("argv, message", [
    (["early"], "compare needs two runs or more"),
    (["early", "missing"], "no run 'missing'"),
])
def test_compare_refuses_what_it_cannot_compare_in_one_line(tmp_path: Path, capsys, monkeypatch, argv, message):
    fake_run(tmp_path, "early", [])
    code, out = command(["compare", *argv, "--project-root", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and len(out.strip().splitlines()) == 1 and message in out, out
    assert not list((tmp_path / "runs").glob("compare-*"))
