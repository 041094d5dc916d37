"""Crash consistency with real processes and real signals: `python -m orchestrator` is SIGKILLed (its whole
process group, as a terminal or a scheduler would) at exact moments, then plainly resumed.

The moment is exact, not timed: with ORCHESTRATOR_HALT_AT=KIND:KEY the process stops at that point (a
journal record written, a checkpoint on disk, a training job started or ended), writes
ORCHESTRATOR_HALT_FILE and waits; the test polls for that file (bounded) and sends the signal.
A chain kills one run at many moments in turn, resuming after each, then checks the end state against
what an uninterrupted run leaves: every reply answered once, the same files, no attempt twice."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
from conftest import REFERENCE, SOURCE_OF_TRUTH, reference_replies, write_transcript

from orchestrator.run.journal import Journal
from orchestrator.llm import Usage
from orchestrator.training.logformat import parse_log
from orchestrator.base.runlock import RUN_DIR_ENV

HALT_WAIT_S = 900.0  # generous: a halt normally comes within seconds, but one may follow a tiny-agent build (minutes under load)
IMPORT_FAULT = ("import prompt_template\n", "import prompt_templates\n")


def same_files(generated: Path, reference: Path, source: Path) -> None:
    """The generated set equals the reference set (faults fixed) and the source of truth, file by file."""
    expected = {p.name: p for folder in (source, reference) for p in folder.glob("*") if p.is_file()}
    for name, path in expected.items():
        assert (generated / name).read_text() == path.read_text(), name


def orchestrator(project: Path, *args: str, halt: str | None = None,
                 env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    marker = project.parent / f"halted-{time.monotonic_ns()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    env.pop("ORCHESTRATOR_HALT_AT", None)
    if halt:
        env |= {"ORCHESTRATOR_HALT_AT": halt, "ORCHESTRATOR_HALT_FILE": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args, "--project-root", str(project)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    return proc, marker


def halt_and_signal(proc: subprocess.Popen, marker: Path, sig: int = signal.SIGKILL) -> str:
    """Wait for the halt point, then signal the orchestrator's whole process group; its output."""
    deadline = time.monotonic() + HALT_WAIT_S
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"ended (rc {proc.returncode}) before its halt point:\n{proc.stdout.read()[-3000:]}")
        assert time.monotonic() < deadline, "no halt point within the wait"
        time.sleep(0.02)
    os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=120)
    return out


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def run_processes_of(run_dir: Path) -> list[int]:
    """Every live process (any owner) working for this run, found by the environment the runner gives them."""
    wanted, found = str(run_dir.resolve()), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if f"{RUN_DIR_ENV}={wanted}".encode() in environ and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def final_state(project: Path, run_id: str) -> dict:
    """The run's latest checkpointed values, read straight from SQLite through LangGraph."""
    from orchestrator.runner import open_graph, thread

    with open_graph(project / "runs" / run_id) as graph:
        return graph.get_state(thread(run_id)).values


def check_end_state(project: Path, run_id: str, replies: list[dict], expected_commits: list[str]) -> dict:
    run_dir = project / "runs" / run_id
    assert json.loads((run_dir / "run.json").read_text())["status"] == "done"
    state = final_state(project, run_id)
    # nothing doubled: each attempt once, each commit once, in the order of an uninterrupted run
    pairs = [(a["node"], a["attempt"]) for a in state["attempts"]]
    assert len(pairs) == len(set(pairs)), pairs
    subjects = git.Repo(project / "workspace").git.log(f"run/{run_id}", "--format=%s").splitlines()[::-1]
    assert [s.split(" attempt")[0] for s in subjects[1:]] == expected_commits
    assert [s.split(":")[0] for s in subjects[1:]] == [f"{n} attempt {a}" for n, a in pairs if n in expected_commits]
    # nothing lost: the server answered each scripted reply once, and the ledger holds exactly those answers
    answered = Journal(run_dir / "journal.jsonl").records("llm_answer")
    assert [r["tag"] for r in answered] == [r["tag"] for r in replies]
    paid = sum(Usage(**r["usage"]).total_tokens for r in answered)
    assert paid == sum(Usage(**r["usage"]).total_tokens for r in replies)
    ledger_tokens = sum(row["tokens"] for row in state["ledger"].values())
    assert ledger_tokens == paid
    assert sorted(seq for row in state["ledger"].values() for seq in row.get("answers", [])) == \
        sorted(r["seq"] for r in answered)
    assert f"Tokens: {paid}," in (run_dir / "report.md").read_text()
    # no stray process, nothing half-written left behind
    assert run_processes_of(run_dir) == []
    assert git.Repo(project / "workspace").git.status("--porcelain") == ""
    return state


# ---------------------------------------------------------------- Steps 0-4 and the import-fix loop

def loop_replies() -> list[dict]:
    replies = reference_replies()
    train = next(i for i, r in enumerate(replies) if r["tag"] == "generate_train")
    replies[train] = {**replies[train], "text": replies[train]["text"].replace(*IMPORT_FAULT)}
    assert IMPORT_FAULT[1] in replies[train]["text"]
    fix = ("FILE: train.py\n<<<<<<< SEARCH\n" + IMPORT_FAULT[1] + "=======\n" + IMPORT_FAULT[0]
           + ">>>>>>> REPLACE\n")
    return [*replies, {"tag": "fix", "text": fix, "usage": {"input_tokens": 3000, "output_tokens": 100}}]


# (moment, what was done there); in the order an uninterrupted run reaches them
LOOP_MOMENTS = [
    ("checkpoint:setup", "boundary: before setup (only the input is checkpointed)"),
    ("commit:setup", "inside setup: committed, not checkpointed"),
    ("checkpoint:generate_helpers", "boundary: setup -> generate_helpers"),
    ("llm_answer:generate_helpers", "inside generate_helpers: answer paid, nothing written"),
    ("commit:generate_prompts", "inside generate_prompts: committed, not checkpointed"),
    ("checkpoint:generate_train", "boundary: generate_prompts -> generate_train"),
    ("llm_answer:generate_train", "inside generate_train: answer paid, nothing written"),
    ("checkpoint:generate_launch", "boundary: generate_train -> generate_launch"),
    ("commit:generate_launch", "inside generate_launch: committed, not checkpointed"),
    ("checkpoint:rules", "boundary: generate_launch -> rules"),
    ("checkpoint:import_check", "boundary: rules -> import_check"),
    ("checkpoint:fix", "boundary: import_check (failed, evidence saved) -> fix"),
    ("llm_answer:fix", "inside fix: answer paid, edit not applied"),
    ("commit:fix", "inside fix: edit committed, not checkpointed"),
    ("checkpoint:import_check", "boundary: rules -> import_check, second pass"),
    ("checkpoint:finish", "boundary: import_check (passed) -> finish"),
]


@pytest.mark.slow
def test_kill_9_at_every_step_boundary_and_inside_each_step_then_resume(project: Path, tmp_path: Path):
    replies = loop_replies()
    llm = write_transcript(tmp_path / "t.json", replies)
    proc, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "import_check",
                                halt=LOOP_MOMENTS[0][0])
    halt_and_signal(proc, marker)
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", "r1", "--project-root", str(project)],
                            capture_output=True, text=True).stdout
    assert "crashed" in status  # run.json still says running, but no process holds the workspace
    for moment, _ in LOOP_MOMENTS[1:]:
        proc, marker = orchestrator(project, "resume", "r1", halt=moment)
        halt_and_signal(proc, marker)
        assert json.loads((project / "runs/r1/run.json").read_text())["status"] == "running"
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0, out[-3000:]

    check_end_state(project, "r1", replies, ["setup", *[r["tag"] for r in replies]])  # one commit per answer
    same_files(project / "workspace/generated", REFERENCE, SOURCE_OF_TRUTH)
    rollbacks = Journal(project / "runs/r1/journal.jsonl").records("rollback")
    assert len([r for r in rollbacks if r["commits"]]) == 4  # the four kills between a commit and its checkpoint


# ---------------------------------------------------------------- the whole demo, formal training included

def demo_script() -> tuple[list[dict], Path, Path]:
    """The demo's recorded replies, and the reference set and source of truth it is built from."""
    import orchestrator.demo as demo

    if hasattr(demo, "example"):  # demos of several examples
        ex = demo.example(demo.DEFAULT_EXAMPLE)
        return demo.transcript(ex)["replies"], ex.reference, ex.source_of_truth
    return demo.transcript()["replies"], REFERENCE, SOURCE_OF_TRUTH


DEMO_MOMENTS = [
    ("checkpoint:runtime_check", signal.SIGKILL, "boundary: import_check -> runtime_check"),
    ("execute:bash", signal.SIGKILL, "inside runtime_check: its training run survives the kill; resume stops it"),
    ("writes:runtime_check", signal.SIGKILL, "runtime_check failed, its evidence saved, not checkpointed"),
    ("job_start:formal-1", signal.SIGTERM, "formal job running: SIGTERM stops the job, run interrupted"),
    ("job_start:formal-1", signal.SIGKILL, "formal job running: the job survives the kill, resume adopts it"),
    ("job_end:formal-1", signal.SIGKILL, "formal job ended, before its commit: resume takes its outcome"),
    ("commit:formal_train", signal.SIGKILL, "formal run committed, not checkpointed"),
    ("writes:formal_train", signal.SIGKILL, "formal run's writes saved, not checkpointed"),
    ("llm_answer:review", signal.SIGKILL, "inside review: answer paid, nothing written"),
    ("commit:review", signal.SIGKILL, "inside review: committed, not checkpointed"),
    ("writes:review", signal.SIGKILL, "review's writes saved, not checkpointed"),
    ("checkpoint:finish", signal.SIGKILL, "boundary: review -> finish"),
]


def check_demo_end(project: Path, run_id: str, replies: list[dict], reference: Path, source: Path) -> None:
    """The demo's end state, as an uninterrupted demo leaves it: one finished formal attempt, one training run."""
    run_dir = project / "runs" / run_id
    state = check_end_state(project, run_id, replies, ["setup", *[r["tag"] for r in replies]])
    same_files(project / "workspace/generated", reference, source)
    formal = [a for a in state["attempts"] if a["node"] == "formal_train"]
    assert [a["outcome"] for a in formal] == ["finished"]
    # one training run in the formal folder: in the original, the one started after the SIGTERM, adopted after the
    # SIGKILL; in a copy made while it ran, the copy's own
    records = parse_log((run_dir / "formal-1/train.logs").read_text())
    assert [r.kind for r in records].count("start") == 1 and records[-1].kind == "done"
    job = json.loads((run_dir / "jobs/formal-1.json").read_text())
    assert job["status"] == "finished" and job["returncode"] == 0
    assert not list((project / "workspace/generated").glob("job.*"))


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_the_demo_killed_at_each_moment_of_formal_training_and_review_resumes_to_the_same_end(
        project: Path, tiny_model_dir: Path, tmp_path: Path):
    """Killed at every moment of the checks, the formal run and the review, the demo resumes to an uninterrupted
    demo's end. Copied while its formal job runs (the original's job still running) and while the job had ended
    before its commit, each copy resumes to the same end in its own folder, never adopting the original's job nor
    taking the original's paths for other values; a copy whose source of truth changed is refused in one line."""
    replies, reference, source = demo_script()
    (project / "models").mkdir()
    shutil.copytree(tiny_model_dir, project / "models" / "tiny-qwen3")
    proc, marker = orchestrator(project, "demo", halt=DEMO_MOMENTS[0][0])
    halt_and_signal(proc, marker, DEMO_MOMENTS[0][1])
    [run_id] = [p.name for p in (project / "runs").iterdir() if p.is_dir()]
    run_dir = project / "runs" / run_id
    copies = {}
    for moment, sig, _ in DEMO_MOMENTS[1:]:
        proc, marker = orchestrator(project, "resume", run_id, halt=moment)
        out = halt_and_signal(proc, marker, sig)
        status = json.loads((run_dir / "run.json").read_text())["status"]
        if sig == signal.SIGTERM:
            assert proc.returncode == 130 and status == "interrupted", out[-2000:]
            assert run_processes_of(run_dir) == []  # the job's process group was stopped with the run
        else:
            assert status == "running"
        if sig == signal.SIGKILL and moment in ("job_start:formal-1", "execute:bash"):
            assert run_processes_of(run_dir), "its own process group outlives a SIGKILL of the orchestrator"
        if sig == signal.SIGKILL and moment == "job_start:formal-1":  # copied while the job runs in the original
            copies["running"] = tmp_path / "copy-running"
            shutil.copytree(project, copies["running"], symlinks=True)
            original_job = json.loads((run_dir / "jobs/formal-1.json").read_text())["pgid"]
            code, out = finish(orchestrator(copies["running"], "resume", run_id)[0])
            assert code == 0, out[-3000:]
            assert json.loads((copies["running"] / f"runs/{run_id}/jobs/formal-1.json").read_text())["pgid"] != \
                original_job
            check_demo_end(copies["running"], run_id, replies, reference, source)
        if moment == "job_end:formal-1":  # copied after its job ended, before the orchestrator recorded it
            for name in ("ended", "changed"):
                copies[name] = tmp_path / f"copy-{name}"
                shutil.copytree(project, copies[name], symlinks=True)
            code, out = finish(orchestrator(copies["ended"], "resume", run_id)[0])
            assert code == 0 and "SERIOUS" not in out and "fix:" not in out.split("formal_train")[-1], out[-3000:]
            check_demo_end(copies["ended"], run_id, replies, reference, source)
            own = copies["changed"] / "own_source"  # the demo's source lies outside the project: a copy inside it
            shutil.copytree(source, own, ignore=shutil.ignore_patterns("__pycache__"))
            (own / "env_move.py").write_text((own / "env_move.py").read_text() + "\n# changed while stopped\n")
            settings = copies["changed"] / f"runs/{run_id}/run.json"
            settings.write_text(json.dumps({**json.loads(settings.read_text()), "source_of_truth": "./own_source"}))
            code, out = finish(orchestrator(copies["changed"], "resume", run_id)[0])
            assert code == 2 and len(out.strip().splitlines()) == 1 and "env_move.py (" in out, out
    code, out = finish(orchestrator(project, "resume", run_id)[0])
    assert code == 0, out[-3000:]
    check_demo_end(project, run_id, replies, reference, source)


# ---------------------------------------------------------------- one run per workspace, damaged state

def test_a_second_run_in_the_same_workspace_refuses_with_one_line(project: Path, tmp_path: Path):
    llm = write_transcript(tmp_path / "t.json", loop_replies())
    first, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "a", "--until", "generate_launch",
                                 halt="checkpoint:generate_helpers")
    try:
        deadline = time.monotonic() + HALT_WAIT_S
        while not marker.exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        for run_id in ("b", "a"):
            code, out = finish(orchestrator(project, "run", "--llm", llm, "--run-id", run_id)[0])
            assert code == 2, out
            assert "in use by run a (pid" in out and len(out.strip().splitlines()) == 1, out
        code, out = finish(orchestrator(project, "resume", "a")[0])
        assert code == 2 and "in use by run a" in out
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    assert not (project / "runs/b").exists()
    code, out = finish(orchestrator(project, "run", "--llm", llm, "--run-id", "a")[0])
    assert code == 2 and "run a already exists" in out


def killed_early_run(project: Path, tmp_path: Path) -> None:
    llm = write_transcript(tmp_path / "t.json", loop_replies())
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_launch",
                                  halt="checkpoint:generate_prompts"))


@pytest.mark.parametrize("damage, message", [
    ("truncate", "checkpoints.sqlite is damaged"),
    ("empty", "has no checkpoint"),
    ("workspace", "the workspace"),
])
def test_damaged_state_ends_in_one_line_that_says_what_to_do(project: Path, tmp_path: Path, damage: str,
                                                             message: str):
    """A run whose checkpoint or workspace is gone is refused in one line, and `status` says the same (a damaged
    run.json is rebuilt instead: tests/test_recovery.py)."""
    killed_early_run(project, tmp_path)
    checkpoint = project / "runs/r1/checkpoints.sqlite"
    if damage == "truncate":
        data = checkpoint.read_bytes()
        checkpoint.write_bytes(data[:100])  # the header cut short: "file is not a database"
        for extra in ("-wal", "-shm"):
            Path(f"{checkpoint}{extra}").unlink(missing_ok=True)
    elif damage == "empty":
        checkpoint.write_bytes(b"")
        for extra in ("-wal", "-shm"):
            Path(f"{checkpoint}{extra}").unlink(missing_ok=True)
    else:
        shutil.rmtree(project / "workspace")
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 2, out
    assert message in out and "Traceback" not in out and len(out.strip().splitlines()) <= 2, out
    if damage == "workspace":
        assert not (project / "workspace").exists()  # not silently recreated empty
    else:  # status advises what can work: not `resume`
        shown = subprocess.run([sys.executable, "-m", "orchestrator", "status", "r1", "--project-root", str(project)],
                               capture_output=True, text=True).stdout
        assert "run r1: damaged" in shown and "start a new run" in " ".join(shown.split()), shown
        assert "resume with" not in shown, shown


def test_a_copied_project_resumes_into_itself(project: Path, tmp_path: Path):
    killed_early_run(project, tmp_path)
    saved = json.loads((project / "runs/r1/run.json").read_text())
    assert saved["project_root"] == "." and not Path(saved["source_of_truth"]).is_absolute()
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    code, out = finish(orchestrator(copy, "resume", "r1")[0])
    assert code == 0, out[-3000:]
    assert (copy / "workspace/generated/launch_training.sh").exists()
    assert not (project / "workspace/generated/train.py").exists()  # the original was left alone
    assert json.loads((project / "runs/r1/run.json").read_text())["status"] == "running"


@pytest.mark.parametrize("name, text, message", [
    ("env_move.py", "", "env_move.py defines no class or function"),
    ("env_move.py", "def broken(:\n", "env_move.py does not parse"),
    ("env_move.py", "import not_a_module_xyz\nclass Env: pass\n", "env_move.py does not import"),
    ("grpo_config.py", "class NotTheConfig: pass\n", "GRPOConfig"),
])
def test_a_broken_source_of_truth_is_refused_before_any_token(project: Path, tmp_path: Path, name, text, message):
    (project / "source_of_truth" / name).write_text(text)
    llm = write_transcript(tmp_path / "t.json", loop_replies())
    code, out = finish(orchestrator(project, "run", "--llm", llm, "--run-id", "r1")[0])
    assert code == 2 and message in out, out
    assert not (project / "runs").exists()


@pytest.mark.parametrize("flag, value", [("--max-cost", "-1"), ("--max-tokens", "-5"), ("--max-attempts", "0")])
def test_negative_caps_and_no_attempts_are_refused(project: Path, tmp_path: Path, flag: str, value: str):
    llm = write_transcript(tmp_path / "t.json", loop_replies())
    code, out = finish(orchestrator(project, "run", "--llm", llm, flag, value)[0])
    assert code == 2 and flag in out, out


def test_an_api_outage_after_a_paid_answer_keeps_its_tokens_in_the_report_and_resume_reuses_it(
        project: Path, tmp_path: Path):
    """generate_helpers gets a malformed answer, then the LLM fails for good before the re-ask is answered:
    the paid answer is in the report; a resume with a working LLM reuses it instead of asking again."""
    replies = loop_replies()
    before = replies[:next(i for i, r in enumerate(replies) if r["tag"] == "generate_helpers")]  # map_roles, if any
    paid_before = sum(Usage(**r["usage"]).total_tokens for r in before)
    bad = {"tag": "generate_helpers", "text": "Sure! Here are the files.", "usage": {"input_tokens": 700, "output_tokens": 7}}
    outage = write_transcript(tmp_path / "outage.json", [*before, bad])
    code, out = finish(orchestrator(project, "run", "--llm", outage, "--run-id", "r1", "--until", "generate_prompts")[0])
    assert code == 1 and "LLM error" in out, out
    report = (project / "runs/r1/report.md").read_text()
    assert "failed" in report and f"Tokens: {paid_before + 707}," in report and "of which 707 tokens" in report
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", "r1", "--project-root", str(project)],
                            capture_output=True, text=True).stdout
    assert f"spent {paid_before + 707} tokens" in status

    working = write_transcript(tmp_path / "working.json", replies)
    code, out = finish(orchestrator(project, "resume", "r1", "--llm", working)[0])
    assert code == 0, out[-3000:]
    state = final_state(project, "r1")
    assert state["ledger"]["generate_helpers"]["calls"] == 2  # the reused bad answer, then the re-ask
    assert state["ledger"]["generate_helpers"]["tokens"] == 707 + Usage(**replies[len(before)]["usage"]).total_tokens
    journal = Journal(project / "runs/r1/journal.jsonl")
    assert [r["tag"] for r in journal.records("llm_answer")] == [*(r["tag"] for r in before), "generate_helpers",
                                                                 "generate_helpers", "generate_prompts"]
    assert len(journal.records("llm_reused")) == 1


def test_sqlite_checkpoint_is_on_disk_before_the_next_node_starts(project: Path, tmp_path: Path):
    """`durability="sync"`: halted right at the boundary, a fresh reader sees the checkpoint."""
    llm = write_transcript(tmp_path / "t.json", loop_replies())
    proc, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_launch",
                                halt="checkpoint:generate_train")
    try:
        deadline = time.monotonic() + HALT_WAIT_S
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        with sqlite3.connect(project / "runs/r1/checkpoints.sqlite") as db:
            assert db.execute("select count(*) from checkpoints").fetchone()[0] >= 4
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def test_api_retries_reach_the_run_log_and_events(project: Path, httpserver, monkeypatch):
    """A 529 then answers: the retry is an `llm_retry` event in events.jsonl and claude.logs, not stderr only."""
    from messages_api import error_json, message_json, sse, stream_events
    from werkzeug import Response

    from orchestrator.runner import start_run

    first = reference_replies()[0]  # the run's first LLM call
    calls = []

    def handler(request):
        calls.append(request)
        if len(calls) == 1:
            return Response(json.dumps(error_json("overloaded_error", "Overloaded")), status=529,
                            headers={"retry-after-ms": "10"}, content_type="application/json")
        if json.loads(request.data).get("stream"):
            return Response(sse(*stream_events([first["text"]])), content_type="text/event-stream")
        return Response(json.dumps(message_json(first["text"])), content_type="application/json")

    httpserver.expect_request("/v1/messages", method="POST").respond_with_handler(handler)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", httpserver.url_for(""))
    outcome = start_run(project, llm="anthropic", run_id="r1", until=first["tag"])
    assert outcome.status == "done", outcome.reason
    events = [json.loads(line) for line in (project / "runs/r1/events.jsonl").read_text().splitlines()]
    [retry] = [e for e in events if e["action"] == "llm_retry"]
    assert retry["node"] == first["tag"] and "HTTP 529 overloaded_error" in retry["result"]
    assert "action=llm_retry" in (project / "claude.logs").read_text()


# ---------------------------------------------------------------- the run's two edges, and git's own lock

def test_killed_just_after_finish_the_resume_records_the_ending(project: Path, tmp_path: Path):
    """The graph has ended (`finish: done` printed, the last checkpoint written) but run.json still says
    running: `list` says crashed, and a resume records the ending instead of saying there is nothing to do."""
    replies = loop_replies()[:2]  # map_roles, generate_helpers
    llm = write_transcript(tmp_path / "t.json", replies)
    proc, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_helpers",
                                halt="graph_end:done")
    out = halt_and_signal(proc, marker)
    assert "finish: done" in out
    assert json.loads((project / "runs/r1/run.json").read_text())["status"] == "running"
    listed = subprocess.run([sys.executable, "-m", "orchestrator", "list", "--project-root", str(project)],
                            capture_output=True, text=True).stdout
    assert "crashed" in listed
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0 and "the run had ended (done)" in out, out[-3000:]
    assert json.loads((project / "runs/r1/run.json").read_text())["status"] == "done"
    assert 'id="status">done<' in (project / "runs/r1/report.html").read_text()
    check_end_state(project, "r1", replies, ["setup", *[r["tag"] for r in replies]])
    code, out = finish(orchestrator(project, "resume", "r1")[0])  # a second resume: truly nothing left
    assert code == 2 and "nothing left to do (status done)" in out


def test_killed_before_the_first_checkpoint_the_resume_starts_over(project: Path, tmp_path: Path):
    """run.json written, no checkpoint yet, nothing paid or committed: the resume says nothing was lost and runs
    the whole run, keeping its --until."""
    replies = loop_replies()[:2]
    llm = write_transcript(tmp_path / "t.json", replies)
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_helpers",
                                  halt="run_json:running"))
    checkpoints = project / "runs/r1/checkpoints.sqlite"
    if checkpoints.exists():  # the saver may have made its tables already; no checkpoint is in them
        with sqlite3.connect(checkpoints) as db:
            tables = {row[0] for row in db.execute("select name from sqlite_master")}
            assert "checkpoints" not in tables or db.execute("select count(*) from checkpoints").fetchone()[0] == 0
    assert not (project / "runs/r1/journal.jsonl").exists()
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0 and "nothing was lost; the run starts from the beginning" in out, out[-3000:]
    check_end_state(project, "r1", replies, ["setup", *[r["tag"] for r in replies]])
    assert final_state(project, "r1")["until"] == "generate_helpers"


def test_a_stale_git_index_lock_is_removed_by_the_resume_and_said(project: Path, tmp_path: Path):
    llm = write_transcript(tmp_path / "t.json", loop_replies()[:2])
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_helpers",
                                  halt="checkpoint:generate_helpers"))
    (project / "workspace/.git/index.lock").write_text("")  # a kill during `git add` leaves it
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0, out[-3000:]
    assert "removed the stale .git/index.lock" in " ".join(out.split())
    assert "stale .git/index.lock" in (project / "runs/r1/claude.logs").read_text()
    assert not (project / "workspace/.git/index.lock").exists()
