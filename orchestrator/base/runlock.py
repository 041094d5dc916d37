"""One run at a time per workspace, and no process of a run outliving it.

`WorkspaceLock` is an exclusive `fcntl.flock` on `runs/workspace.lock`; the kernel drops it when the
holder dies (even by SIGKILL), so a crashed run never leaves a stale lock. The file names the holder
(run, pid, command, since when) for the one-line refusal a second run gets.

Every process a run starts inherits `ORCHESTRATOR_RUN_DIR` (the run's folder) and
`ORCHESTRATOR_OWNER` (the orchestrator's pid) from its environment: `run_processes` finds what an
earlier, killed process of the run left behind (a runtime check's children, a training job), or
what this one failed to stop, by reading `/proc/PID/environ`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from pathlib import Path
from typing import Iterator

from orchestrator.base.execution import live_members

RUN_DIR_ENV = "ORCHESTRATOR_RUN_DIR"
OWNER_ENV = "ORCHESTRATOR_OWNER"
LOCK_NAME = "workspace.lock"


class WorkspaceBusy(RuntimeError):
    """Another run holds the workspace; the message names it."""


class WorkspaceLock:
    def __init__(self, project_root: Path) -> None:
        self.path = Path(project_root) / "runs" / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, run_id: str, command: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WorkspaceBusy(self._busy_message()) from None
        holder = {"run_id": run_id, "pid": os.getpid(), "command": command,
                  "since": time.strftime("%Y-%m-%dT%H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def held_by_someone(self) -> bool:
        """True while a live process holds the lock (this one excluded)."""
        if self._fd is not None or not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def holder(self) -> dict:
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def _busy_message(self) -> str:
        h = self.holder()
        who = (f"run {h.get('run_id')} (pid {h.get('pid')}, `{h.get('command')}`, since {h.get('since')})"
               if h else "another run")
        return (f"the workspace {self.path.parent.parent / 'workspace'} is in use by {who}: wait for it to end, "
                f"or stop it (kill {h.get('pid', 'PID')}) and resume it; one run at a time per project root")

    def __enter__(self) -> "WorkspaceLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def marked_process(run_dir: Path) -> Iterator[None]:
    """Tag this process (and so every child it starts) as working for the run in `run_dir`, meanwhile."""
    saved = {name: os.environ.get(name) for name in (RUN_DIR_ENV, OWNER_ENV)}
    os.environ[RUN_DIR_ENV] = str(Path(run_dir).resolve())
    os.environ[OWNER_ENV] = str(os.getpid())
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def works_for(pid: int, run_dir: Path) -> bool:
    """Whether process `pid` was started for the run in `run_dir` (its environment names that folder): a copy of a
    project never takes the original's processes for its own."""
    return _environ(pid).get(RUN_DIR_ENV) == str(Path(run_dir).resolve())


def _state_and_group(pid: int) -> tuple[str, int] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[2])


def run_processes(run_dir: Path) -> dict[int, list[int]]:
    """Live processes working for the run in `run_dir`, this one aside: process group -> pids."""
    groups: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == os.getpid() or not works_for(pid, run_dir):
            continue
        found = _state_and_group(pid)
        if found is None or found[0] in ("Z", "X"):
            continue
        groups.setdefault(found[1], []).append(pid)
    return groups


def stop_processes(groups: dict[int, list[int]], grace_s: float = 5.0) -> None:
    """`stop_groups` for whole groups; in this process's own group, only the listed processes."""
    own = groups.pop(os.getpgrp(), [])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in own:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if sig == signal.SIGTERM:
            stop_groups(list(groups), grace_s)


def stop_groups(pgids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM each process group, then SIGKILL what is left after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not any(live_members(p) for p in pgids):
                return
            time.sleep(0.05)

