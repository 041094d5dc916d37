"""A full disk or a read-only file system, met anywhere (the run's books, claude.logs, the workspace's git, the tiny
agent's build), ends the run `environment` with exit code 4 in one line and no traceback, every record appended to
claude.logs and the journal whole or absent; once the machine is right, a plain `resume` ends the run as an
uninterrupted one would, nothing paid twice.

The disks are real: small tmpfs mounts filled to their last byte while the orchestrator waits at an exact moment
(orchestrator.base.halt), then let go. Mounting needs root: elsewhere these tests are skipped."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REFERENCE, SOURCE_OF_TRUTH, reference_replies, write_transcript
from test_crash import check_end_state, finish, loop_replies, orchestrator, same_files
from test_recovery import commits_of, one_ending, status_of, wait_for

from orchestrator.run.journal import Journal

HEADER = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ run=\S+ node=\S+ action=\S+ tokens=\d+ cost=\$")


@pytest.fixture
def tmpfs() -> Iterator:
    """Mounts a tmpfs of a given size on a folder (needs root: skipped elsewhere); all are unmounted at the end."""
    mounted: list[Path] = []

    def mount(folder: Path, size: str, *options: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs",
                               str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"a tmpfs mount needs root: {done.stderr.strip()}")
        mounted.append(folder)
        return folder
    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path) -> Path:
    """The file system holding `folder` filled to its last byte; the filler, to remove to free it again."""
    filler = folder / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    assert os.statvfs(folder).f_bavail == 0
    return filler


def pad_to_page(log: Path, page: int = 4096) -> None:
    """A whole entry appended to `log` that ends it at a page boundary: a file system filled after it has no room
    left in the file's last page either, so the next entry is refused (tmpfs gives a file room page by page)."""
    head = ("2026-01-01T00:00:00Z run=r1 node=test action=pad tokens=0 cost=$0.0000\n"
            "  reason: the test's own\n  result: ")
    size = len(log.read_bytes())
    room = (-(size + len(head) + 1)) % page
    log.open("a").write(f"{head}{'x' * room}\n")
    assert log.stat().st_size % page == 0


def assert_whole_records(project: Path, run_id: str = "r1") -> None:
    """claude.logs holds whole entries only (a header, its reason and result), the JSON lines files whole records."""
    for log in (project / "claude.logs", project / "runs" / run_id / "claude.logs"):
        lines = log.read_text().splitlines()
        heads = [i for i, line in enumerate(lines) if HEADER.match(line)]
        assert heads and heads[0] == 0 and all(not line.startswith("20") for i, line in enumerate(lines)
                                               if i not in heads), log
        for i in heads:
            assert lines[i + 1].startswith("  reason: ") and lines[i + 2].startswith("  result: "), lines[i:i + 3]
    for name in ("journal.jsonl", "events.jsonl"):
        for line in (project / "runs" / run_id / name).read_text().splitlines():
            json.loads(line)


@pytest.mark.slow
def test_a_full_disk_at_git_the_log_and_the_books_ends_environment_then_a_plain_resume_goes_on(
        project: Path, tmp_path: Path, tmpfs):
    replies = loop_replies()
    llm = write_transcript(tmp_path / "t.json", replies)
    workspace = tmpfs(project / "workspace", "16m")
    books = tmpfs(project / "runs", "32m")
    logs = tmpfs(tmp_path / "logs", "1m")
    (logs / "claude.logs").touch()
    (project / "claude.logs").touch()
    subprocess.run(["mount", "--bind", str(logs / "claude.logs"), str(project / "claude.logs")], check=True)
    try:
        moments = [("run", "llm_answer:generate_helpers", workspace, "workspace"),  # next: helpers.py written
                   ("resume", "checkpoint:generate_train", logs, "claude.logs"),  # next: the answer's log entry
                   ("resume", "checkpoint:generate_launch", books, "runs/r1")]  # next: state.json, the checkpoint
        for command, moment, folder, named in moments:
            args = ("run", "--llm", llm, "--run-id", "r1", "--until", "import_check") if command == "run" else (
                "resume", "r1")
            proc, marker = orchestrator(project, *args, halt=moment)
            wait_for(marker, proc, moment)
            if folder == logs:
                pad_to_page(project / "claude.logs")
            filler = fill(folder)
            marker.unlink()  # go on, onto the full disk
            code, out = finish(proc)
            ending = one_ending(out)
            assert code == 4, out[-3000:]
            assert ending.startswith("environment run r1: the machine, not the code: the disk holding "), ending
            assert f"{project}/{named}" in ending and "is full" in ending, ending
            assert "resume r1" in ending, ending
            filler.unlink()
            assert_whole_records(project)
            assert "resume with `python -m orchestrator resume r1`" in status_of(project)
        code, out = finish(orchestrator(project, "resume", "r1")[0])
        assert code == 0, out[-3000:]
        check_end_state(project, "r1", replies, commits_of(replies))
        same_files(project / "workspace/generated", REFERENCE, SOURCE_OF_TRUTH)
        assert_whole_records(project)
        assert len(Journal(project / "runs/r1/journal.jsonl").records("llm_reused")) == 2  # helpers, train: paid once
    finally:
        subprocess.run(["umount", str(project / "claude.logs")], capture_output=True)


def test_a_read_only_runs_folder_ends_every_command_in_one_line(project: Path, tmp_path: Path, tmpfs):
    replies = loop_replies()[:2]  # map_roles, generate_helpers
    llm = write_transcript(tmp_path / "t.json", replies)
    runs = tmpfs(project / "runs", "16m")
    proc, marker = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "generate_helpers",
                                halt="checkpoint:generate_helpers")
    wait_for(marker, proc, "checkpoint:generate_helpers")
    proc.kill()
    proc.communicate()
    subprocess.run(["mount", "-o", "remount,ro", str(runs)], check=True)
    for args in (("resume", "r1"), ("run", "--llm", llm, "--run-id", "r2"), ("report", "r1"), ("demo",)):
        code, out = finish(orchestrator(project, *args)[0])
        assert code == 4 and len(out.strip().splitlines()) == 1, (args, out)
        assert "environment: the machine, not the code:" in out and "read-only file system" in out, (args, out)
    assert "run r1: crashed" in status_of(project)  # the readers read
    subprocess.run(["mount", "-o", "remount,rw", str(runs)], check=True)
    code, out = finish(orchestrator(project, "resume", "r1")[0])
    assert code == 0, out[-3000:]
    check_end_state(project, "r1", replies, commits_of(replies))


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_a_full_disk_for_the_tiny_agent_s_build_ends_environment_not_a_random_model(
        project: Path, tmp_path: Path, tmpfs, tiny_model_dir: Path):
    replies = reference_replies()  # no fault to fix: the run goes straight to the runtime check
    llm = write_transcript(tmp_path / "t.json", replies)
    models = tmpfs(tmp_path / "models", "1m")
    fill(models)
    proc, _ = orchestrator(project, "run", "--llm", llm, "--run-id", "r1", "--until", "runtime_check",
                           env={"ORCHESTRATOR_MODELS_DIR": str(models)})
    code, out = finish(proc)
    ending = one_ending(out)
    assert code == 4 and ending.startswith("environment run r1: the machine, not the code:"), out[-3000:]
    assert str(models) in ending and "full" in ending, ending
    assert "random tiny model" not in (project / "claude.logs").read_text()  # no silent fallback
    assert not [p for p in models.iterdir() if p.name != ".filler"]  # no build was started on the full disk
    code, out = finish(orchestrator(project, "resume", "r1")[0])  # the session's models folder has room
    assert code == 0 and "runtime_check: passed" in out, out[-3000:]
    check_end_state(project, "r1", replies, commits_of(replies))
