"""Every kill window, damaged book, copied project and changed source of truth ends right on a plain `resume`: the
uninterrupted run's files, tokens and attempts with nothing paid twice, or one line and an exit code that says what
to do. Real processes and real signals, stopped at exact moments (orchestrator.base.halt; tests/test_crash.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
from conftest import REFERENCE, SOURCE_OF_TRUTH, write_transcript
from test_crash import (HALT_WAIT_S, check_end_state, finish, halt_and_signal, loop_replies, orchestrator,
                        run_processes_of, same_files)

from orchestrator.run.journal import Journal

STEPS = ["setup", "map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch"]


def commits_of(replies: list[dict]) -> list[str]:
    """The commits an uninterrupted loop run makes: setup, then one per answer."""
    return ["setup", *[r["tag"] for r in replies]]


def status_of(project: Path, run_id: str = "r1") -> str:
    done = subprocess.run([sys.executable, "-m", "orchestrator", "status", run_id, "--project-root", str(project)],
                          capture_output=True, text=True, timeout=120)
    return " ".join(done.stdout.split())


def wait_for(marker: Path, proc: subprocess.Popen, text: str) -> None:
    """Until the halt file says the process stopped at `text` (a point of ORCHESTRATOR_HALT_AT)."""
    deadline = time.monotonic() + HALT_WAIT_S
    while not (marker.exists() and marker.read_text().startswith(text)):
        assert proc.poll() is None, f"ended (rc {proc.returncode}) before {text}:\n{proc.stdout.read()[-3000:]}"
        assert time.monotonic() < deadline, f"no halt at {text} within the wait"
        time.sleep(0.02)


def one_ending(out: str) -> str:
    """The run's closing line (its status and reason), asserting no traceback came before it."""
    assert "Traceback" not in out, out[-3000:]
    return next(line for line in reversed(out.strip().splitlines()) if not line.startswith("  history:"))


# ---------------------------------------------------------------- a node's writes saved, its checkpoint not yet

WRITES_MOMENTS = ["writes:setup", "writes:map_roles", "writes:generate_helpers", "writes:generate_prompts",
                  "writes:generate_train", "writes:generate_launch", "writes:rules", "writes:import_check",
                  "writes:fix", "writes:import_check", "writes:finish"]  # every node kind the loop reaches, in order


@pytest.mark.slow
def test_killed_between_a_node_s_writes_and_its_checkpoint_a_plain_resume_goes_on(project: Path, tmp_path: Path):
    """SIGKILL after each node's writes are saved but before the checkpoint that follows them: the checkpoint has no
    next task of its own, and each plain resume goes on to the node those writes route to, re-running nothing."""
    replies = loop_replies()
    llm = write_transcript(tmp_path / "t.json", replies)
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "import_check",
                                  halt=WRITES_MOMENTS[0]))
    for before, moment in zip(WRITES_MOMENTS, WRITES_MOMENTS[1:]):
        shown = status_of(project)
        assert "run r1: crashed" in shown and "resume with `python -m orchestrator resume r1`" in shown, shown
        if before == "writes:map_roles":  # where its writes route, not the node that finished
            assert "next node: generate_helpers;" in shown, shown
        proc, marker = orchestrator(project, "resume", "r1", halt=moment)
        out = halt_and_signal(proc, marker)
        assert "the run had ended" not in out, out[-2000:]  # the graph had not ended: nothing recorded as if it had
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0, out[-3000:]
    check_end_state(project, "r1", replies, commits_of(replies))
    same_files(project / "workspace/generated", REFERENCE, SOURCE_OF_TRUTH)
    journal = Journal(project / "runs/r1/journal.jsonl")
    assert [r for r in journal.records("rollback") if r["commits"]] == []  # every commit was its node's, kept
    assert journal.records("llm_reused") == [] and journal.records("llm_orphaned") == []  # no node asked again


# ---------------------------------------------------------------- the source of truth changed between stop and resume

@pytest.mark.slow
def test_a_changed_source_of_truth_is_refused_in_one_line_then_taken_up_from_step_0(project: Path, tmp_path: Path):
    replies = loop_replies()
    llm = write_transcript(tmp_path / "t.json", replies)
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "import_check",
                                  halt="checkpoint:import_check"))  # stopped in the checks
    game = project / "source_of_truth/env_move.py"
    game.write_text(game.read_text() + "\n# the researcher's edit between stop and resume\n")
    journal = project / "runs/r1/journal.jsonl"
    books = {name: (project / "runs/r1" / name).read_bytes() for name in ("journal.jsonl", "run.json", "events.jsonl")}
    assert "resume r1 --accept-source-change` takes it up" in status_of(project)  # status advises what works

    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert "env_move.py (" in out and "--accept-source-change" in out and "nothing was spent" in out, out
    assert "grpo_config.py" not in out and "grpo_template.py" not in out  # only the file that changed is named
    assert {name: (project / "runs/r1" / name).read_bytes() for name in books} == books  # nothing written, nothing paid

    code, out = finish(orchestrator(project, "resume", "r1", "--accept-source-change")[0])
    assert code == 0, out[-3000:]
    assert "the source of truth changed (env_move.py (" in " ".join(out.split())
    expected = ["setup", "map_roles", *STEPS[2:], "setup", "fix"]  # Step 0 copies again; the checks, then the fix
    state = check_end_state(project, "r1", replies, expected)
    assert [a["attempt"] for a in state["attempts"] if a["node"] == "setup"] == [1, 2]
    assert (project / "workspace/generated/env_move.py").read_text() == game.read_text()
    [change] = Journal(journal).records("source_change")
    assert change["before"]["env_move.py"] != change["after"]["env_move.py"]  # both hashes recorded
    assert change["before"]["grpo_config.py"] == change["after"]["grpo_config.py"]
    code, out = finish(orchestrator(project, "resume", "r1")[0])  # the new files are the run's now
    assert code == 2 and "nothing left to do (status done)" in out, out


# ---------------------------------------------------------------- the checkpoint's write-ahead log torn, in a copy

@pytest.mark.slow
def test_a_torn_write_ahead_log_in_a_copied_project_pays_nothing_twice(project: Path, tmp_path: Path):
    """The checkpoint database loses its last transactions (the write-ahead log cut inside a frame) in a copy of the
    project: the copy rolls back to the older checkpoint, runs the import check again in its own folder (its evidence
    names other paths than the original's did) and gets the fix it paid for from the journal."""
    replies = loop_replies()
    llm = write_transcript(tmp_path / "t.json", replies)
    proc, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "import_check",
                                halt="checkpoint:import_check,checkpoint:finish")
    wait_for(marker, proc, "checkpoint:import_check")
    wal = project / "runs/r1/checkpoints.sqlite-wal"
    before_fix = wal.stat().st_size  # every frame up to the checkpoint before the failing import check
    marker.unlink()  # go on
    wait_for(marker, proc, "checkpoint:finish")
    halt_and_signal(proc, marker)
    assert wal.stat().st_size > before_fix + 4096
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    os.truncate(copy / "runs/r1/checkpoints.sqlite-wal", before_fix + 100)  # the next frame cut short

    code, out = finish(orchestrator(copy, "resume", "r1")[0])
    assert code == 0, out[-3000:]
    assert "import_check: failed" in out  # the checkpoint had rolled back: the check ran again, in the copy
    check_end_state(copy, "r1", replies, commits_of(replies))
    journal = Journal(copy / "runs/r1/journal.jsonl")
    assert [r["tag"] for r in journal.records("llm_reused")] == ["fix"] and journal.records("llm_orphaned") == []
    assert not list((project / "runs/r1").glob("report.md"))  # the original was left alone


# ---------------------------------------------------------------- damaged books

def test_a_damaged_or_missing_run_json_is_rebuilt_from_the_journal_and_the_run_goes_on(project: Path,
                                                                                      tmp_path: Path):
    replies = loop_replies()[:5]  # map_roles and the four generation steps
    llm = write_transcript(tmp_path / "t.json", replies)
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_launch",
                                  halt="checkpoint:generate_prompts"))
    settings = project / "runs/r1/run.json"
    settings.write_text('{"run_id": "r1", "llm":')
    shown = status_of(project)
    assert "run r1: damaged" in shown and "resume r1` rebuilds it" in shown, shown
    proc, marker = orchestrator(project, "resume", "r1", halt="checkpoint:generate_launch")
    out = halt_and_signal(proc, marker)
    assert "run.json is damaged: rebuilt from the run's journal and checkpoint" in " ".join(out.split()), out
    settings.unlink()
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0 and "run.json is missing: rebuilt" in " ".join(out.split()), out[-3000:]
    check_end_state(project, "r1", replies, commits_of(replies))
    assert json.loads(settings.read_text())["until"] == "generate_launch"
    assert "rebuilt from the run's journal" in (project / "runs/r1/claude.logs").read_text()


def test_a_damaged_workspace_is_named_on_resume(project: Path, tmp_path: Path):
    """A missing object of the run's history is said by `resume` before anything runs (not found later by
    `history`); HEAD naming a branch that does not exist is said, and the run's intact branch goes on."""
    replies = loop_replies()[:5]
    llm = write_transcript(tmp_path / "t.json", replies)
    halt_and_signal(*orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_launch",
                                  halt="checkpoint:generate_train"))
    workspace = project / "workspace"
    repo = git.Repo(workspace)
    blob = repo.git.rev_parse("run/r1:generated/helpers.py")
    loose = workspace / ".git/objects" / blob[:2] / blob[2:]
    kept = loose.read_bytes()
    loose.unlink()
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert f"the history of run/r1 is incomplete (missing blob {blob})" in out and "restore it" in out, out

    loose.write_bytes(kept)
    repo.git.symbolic_ref("HEAD", "refs/heads/gone")
    roots = repo.git.rev_list("--max-parents=0", "--all").split()
    code, out = finish(orchestrator(project, "run", "--llm", llm, "--run-id", "r2")[0])  # a new run cannot start
    assert code == 2 and "HEAD names refs/heads/gone, which does not exist" in out, out
    assert len(out.strip().splitlines()) == 1 and not (project / "runs/r2/run.json").exists(), out
    code, out = finish(orchestrator(project, "resume", "r1")[0])  # the run's own branch is intact: it goes on
    assert code == 0, out[-3000:]
    assert "HEAD names refs/heads/gone, which does not exist" in " ".join(out.split())
    assert git.Repo(workspace).git.rev_list("--max-parents=0", "--all").split() == roots  # no stray root commit
    check_end_state(project, "r1", replies, commits_of(replies))


# ---------------------------------------------------------------- signals

def test_any_number_of_stop_signals_end_the_run_interrupted_with_130(project: Path, tmp_path: Path):
    """A second SIGTERM (and a SIGINT, a SIGHUP) while the run stops after the first changes nothing: exit code 130,
    run.json `interrupted`, and a plain resume ends the run as an uninterrupted one would."""
    replies = loop_replies()[:5]
    llm = write_transcript(tmp_path / "t.json", replies)
    proc, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_launch",
                                halt="llm_answer:generate_prompts,stop:interrupted")
    wait_for(marker, proc, "llm_answer:generate_prompts")
    os.kill(proc.pid, signal.SIGTERM)
    wait_for(marker, proc, "stop:interrupted")  # stopping: its job and books not yet done
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        os.kill(proc.pid, sig)
    marker.unlink()
    code, out = finish(proc)
    assert code == 130, out[-3000:]
    assert one_ending(out).startswith("interrupted run r1: stopped by SIGTERM")
    assert json.loads((project / "runs/r1/run.json").read_text())["status"] == "interrupted"
    assert run_processes_of(project / "runs/r1") == []
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0, out[-3000:]
    check_end_state(project, "r1", replies, commits_of(replies))
