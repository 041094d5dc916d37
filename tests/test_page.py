"""runs/RUN_ID/report.html of a blocked run, loaded in headless Chromium: every attempt, the diffs of their
commits, the evidence and the refused answer, whose <script> shows as text and never runs; the page of a
running run reloads itself and draws a live formal job's curves. (The demo's page, with its curves, is tested
with the demo run in test_iteration.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import render
from conftest import SOURCE_OF_TRUTH, reference_replies, write_transcript

from orchestrator.graph import build_graph
from orchestrator.page import Pipeline, render_page
from orchestrator.base.runlock import WorkspaceLock
from orchestrator.runner import start_run
from orchestrator.run.runs import RunSettings
from orchestrator.run.state import Limits

IMPORT_FAULT = ("import prompt_template\n", "import prompt_templates\n")
INJECTED = '<script>document.body.insertAdjacentHTML("beforeend", "<div id=pwned>ran</div>")</script>'
BAD_FIX = (f"{INJECTED}\nFILE: env_move.py\n<<<<<<< SEARCH\nimport random\n=======\n"
           "<img src=x onerror=\"document.title='pwned'\">\n>>>>>>> REPLACE\n")
TRAIN_LINES = "".join(f"train update={u} loss={0.5 / u:.4f} reward_mean={0.1 * u:.2f} grad_norm=0.3\n"
                      for u in range(1, 4))


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run blocked at the import check: the fix's two answers (the first and its re-ask) edit env_move.py,
    carry a script tag, and are refused."""
    project = tmp_path_factory.mktemp("page") / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    replies = reference_replies()
    train = next(i for i, r in enumerate(replies) if r["tag"] == "generate_train")
    replies[train] = {**replies[train], "text": replies[train]["text"].replace(*IMPORT_FAULT)}
    replies += [{"tag": "fix", "text": BAD_FIX, "usage": {"input_tokens": 2000, "output_tokens": 80}}] * 2
    outcome = start_run(project, llm=write_transcript(project.parent / "t.json", replies), run_id="b1",
                        until="import_check", limits=Limits(max_attempts_per_check=1))
    assert outcome.status == "blocked", outcome.reason
    return project


def test_the_blocked_run_s_page_shows_every_attempt_its_diffs_and_why_it_stopped(blocked: Path, tmp_path: Path):
    page = blocked / "runs/b1/report.html"
    state = json.loads((blocked / "runs/b1/state.json").read_text())
    shown = render(page, tmp_path / "blocked.png")
    assert shown.count(r'<article class="attempt ') == len(state["attempts"]) == 7
    assert [a["node"] for a in state["attempts"]][-1] == "fix"
    assert 'id="status">blocked<' in shown.dom and "http-equiv=\"refresh\"" not in shown.dom
    # the generated files' diffs, line by line; the refused fix committed nothing
    assert shown.count(r'<span class="add">\+') > 2000 and shown.count(r'<span class="file">diff --git') >= 6
    assert "import prompt_templates" in shown.dom and "The commit changed no file." in shown.dom
    # what the model was shown, what it answered, why the answer was refused, why the run stopped
    assert "No module named 'prompt_templates'" in shown.dom.split('id="attempt-7"')[1]
    assert "refused: env_move.py must never be edited" in shown.dom
    assert 'id="last-evidence"' in shown.dom and "import_check" in shown.dom
    # the pipeline, drawn from the graph: every node, the fix on the path the run took
    if shutil.which("dot"):
        for node in Pipeline.of(build_graph().get_graph()).nodes:
            assert f'id="node-{node}"' in shown.dom
        assert "#node-fix > path" in shown.dom
    else:
        assert "the pipeline drawing needs Graphviz" in shown.dom


def test_an_answer_s_script_tag_is_shown_as_text_and_never_runs(blocked: Path, tmp_path: Path):
    shown = render(blocked / "runs/b1/report.html", tmp_path / "script.png")
    assert 'id="pwned"' not in shown.dom and "<div id=pwned" not in shown.dom  # the script did not run
    assert "&lt;script&gt;document.body.insertAdjacentHTML" in shown.dom  # it is there, as text
    assert "&lt;img src=x onerror=" in shown.dom and "<img src=\"x\"" not in shown.dom
    assert "pwned" not in shown.dom.split("<title>")[1].split("</title>")[0]


def test_a_running_run_s_page_reloads_and_draws_its_live_formal_curves(blocked: Path):
    """While run.json says running and a process holds the workspace, the page reloads itself and draws the
    curves of the formal job that is training; once no process holds it, it says crashed and stops reloading."""
    run_dir = blocked / "runs/b1"
    settings = RunSettings.load(blocked, "b1")
    log = run_dir / "live" / "train.logs"
    log.parent.mkdir()
    log.write_text(TRAIN_LINES)
    (run_dir / "jobs").mkdir()
    (run_dir / "jobs/formal-1.json").write_text(json.dumps({"status": "running", "log_path": str(log)}))
    pipeline = Pipeline.of(build_graph().get_graph())
    lock = WorkspaceLock(blocked)
    saved = (run_dir / "run.json").read_text()
    try:
        settings.status = "running"
        settings.save()
        lock.acquire("b1", "a test holding the workspace")
        live = render_page(blocked, "b1", pipeline)
        lock.release()
        crashed = render_page(blocked, "b1", pipeline)
    finally:
        lock.release()
        (run_dir / "run.json").write_text(saved)
        shutil.rmtree(run_dir / "jobs")
    assert '<meta http-equiv="refresh"' in live and 'id="status">running<' in live
    assert 'class="attempt live"' in live and live.count('class="curve" alt="') >= 3  # reward, loss, grad_norm
    assert (run_dir / "plots/formal-1/reward.png").exists()
    assert '<meta http-equiv="refresh"' not in crashed and 'id="status">crashed<' in crashed


def test_report_command_writes_the_page_from_the_run_s_own_graph_without_langgraph(blocked: Path):
    page = blocked / "runs/b1/report.html"
    page.unlink()
    probe = ("import sys\nfrom orchestrator.cli import app\n"
             "try:\n    app(['report', 'b1', '--project-root', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
             "print('HEAVY', [m for m in ('langgraph', 'torch', 'anthropic') if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", probe, str(blocked)], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == [str(page), "HEAVY []"], done.stdout + done.stderr
    assert 'id="status">blocked<' in page.read_text() and json.loads((blocked / "runs/b1/pipeline.json").read_text())
    unknown = subprocess.run([sys.executable, "-m", "orchestrator", "report", "nope", "--project-root", str(blocked)],
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stdout
