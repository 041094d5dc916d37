"""Run generated code in a fresh subprocess, never in the orchestrator's own process.

`execute()` starts the command in its own process group, captures stdout and stderr to files (so a
chatty child cannot fill a pipe and stall), and on timeout kills the whole group: `accelerate
launch` and its workers die with it. It returns an `ExecutionResult` instead of raising.

What this is not: a security sandbox. The child runs as the same user, with the same file system
and network; the generated code is trusted as much as code a researcher would run by hand.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from orchestrator.base.halt import halt_point

TRACEBACK_HEAD = "Traceback (most recent call last):"


@dataclass(frozen=True)
class ExecutionResult:
    returncode: int | None  # None when killed for the timeout
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def execute(command: Sequence[str], cwd: Path, *, timeout_s: float, env: Mapping[str, str] | None = None,
            grace_s: float = 5.0) -> ExecutionResult:
    merged_env = {**os.environ, **(env or {})}
    # short checks on small, shared machines: one torch thread, measured faster than two under load
    # (benchmarks/README.md, "Threads"); a caller's or the environment's own setting wins
    merged_env.setdefault("OMP_NUM_THREADS", "1")
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(list(command), cwd=cwd, env=merged_env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return ExecutionResult(127, "", f"cannot start {command[0]}: {exc}", False, 0.0)
        halt_point("execute", Path(command[0]).name)  # a test hook, inert outside tests (orchestrator.base.halt)
        timed_out = False
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_process_group(proc, grace_s)
            returncode = None
        return ExecutionResult(returncode, _read(out), _read(err), timed_out, time.monotonic() - started)


def run_command(cmd: list[str], *, cwd: Path | None = None, timeout_s: float = 10.0,
                env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """A short command (nvidia-smi, sinfo, sbatch, ...): (returncode, stdout, stderr), never raises.
    ``env`` is added to this process's environment. A missing program is 127, a timeout 124."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env={**os.environ, **env} if env else None)
    except FileNotFoundError:
        return 127, "", f"{cmd[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{cmd[0]}: timed out"
    except OSError as exc:
        return 126, "", f"{cmd[0]}: {exc}"
    return proc.returncode, proc.stdout, proc.stderr


def stop_process_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the child's whole group, then SIGKILL what is left after `grace_s`; returns once no
    member of the group is alive (a grandchild may outlive the leader's exit, or ignore SIGTERM)."""
    deadline = time.monotonic() + grace_s
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.0) if sig == signal.SIGTERM else None)
        except subprocess.TimeoutExpired:
            continue
        if group_gone(proc.pid, deadline - time.monotonic() if sig == signal.SIGTERM else KILL_WAIT_S):
            return
    group_gone(proc.pid, KILL_WAIT_S)


KILL_WAIT_S = 5.0  # how long a SIGKILLed process group may take to be gone


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that have not exited (zombies aside), from /proc ([] where there is none)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):  # gone meanwhile
            continue
        if group == str(pgid) and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` (signals take a moment to end a process) for the group to exit."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    while live_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _read(fh) -> str:
    fh.seek(0)
    return fh.read().decode("utf-8", errors="replace")


def tracebacks(text: str) -> list[str]:
    """Every Python traceback in `text`, each through its exception line, in order."""
    found = []
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.strip() != TRACEBACK_HEAD.strip():
            continue
        end = start + 1
        while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
            end += 1
        found.append("\n".join(lines[start: end + 1]))
    return found


# a launcher's own traceback after its child failed: the child's traceback, printed before it, is the evidence
_LAUNCHER_FAILURE = re.compile(r"CalledProcessError|ChildFailedError|accelerate/commands/launch\.py|"
                               r"torch/distributed/(run|launch)\.py")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?", re.M)


def unprefixed(text: str) -> str:
    """`text` without the `[rankN]:` prefix torchrun puts on each line of a child's output."""
    return _RANK_PREFIX.sub("", text)


def last_traceback(text: str) -> str:
    """The last Python traceback in `text` that is not a launcher's report of a failed child ('' when none).

    Under `accelerate launch` or torchrun the child's traceback comes first and the launcher's own
    (`CalledProcessError`) last; torchrun prefixes each child line with `[rankN]:`, which is removed.
    """
    found = tracebacks(unprefixed(text))
    own = [tb for tb in found if not _LAUNCHER_FAILURE.search(tb)]
    return (own or found or [""])[-1]


@dataclass(frozen=True)
class ChildFailure:
    """One failed child as a launcher (torch elastic, under `accelerate launch` or torchrun) reports it."""

    rank: str  # "1 (local_rank: 1)"
    exitcode: int
    detail: str  # "Signal 11 (SIGSEGV) received by PID 14389", or "" when the launcher only points at its docs
    host: str = ""  # the node whose launcher reported it
    time: str = ""  # when it failed, as the launcher prints it ("2026-11-25_18:18:56")
    entry: str = ""  # the launcher's lines about it

    @property
    def signal(self) -> bool:
        return self.exitcode < 0

    def __str__(self) -> str:
        where = f" on {self.host}" if self.host else ""
        return f"rank {self.rank}{where}: exit code {self.exitcode}" + (f" ({self.detail})" if self.detail else "")


# torch elastic's ChildFailedError report, printed after the launcher's own traceback: "[0]:" then "  key : value"
_FAILURE_ENTRY = re.compile(r"^\[\d+\]:\s*\n((?:[ \t]+\w[\w ]*?\s*:.*\n?)+)", re.M)


def _child(entry: str) -> ChildFailure:
    fields = {k: v.strip() for k, v in re.findall(r"^[ \t]+(\w[\w ]*?)\s*:\s?(.*)$", entry, re.M)}
    code = re.match(r"-?\d+", fields.get("exitcode", ""))
    detail = fields.get("traceback", "")
    return ChildFailure(fields.get("rank", "?"), int(code.group()) if code else 1,
                        "" if detail.startswith("To enable traceback") else detail, fields.get("host", ""),
                        fields.get("time", ""), entry.rstrip())


def launcher_failures(text: str) -> list[ChildFailure]:
    """Every failed child the launchers' reports name (one report per launcher, so one per node of a job), the
    first observed failure first: the reports' root causes, the earliest first (at the same second a signal
    death first: its peers then lose their connection to it), then the other failures; [] without a report."""
    roots: list[ChildFailure] = []
    others: list[ChildFailure] = []
    for report in text.split("ChildFailedError")[1:]:
        root = report.find("Root Cause")
        for match in _FAILURE_ENTRY.finditer(report):
            (roots if 0 <= root < match.start() else others).append(_child(match.group(1)))
    roots.sort(key=lambda failure: (failure.time, not failure.signal))
    return list(dict.fromkeys(roots + others))


def own_tracebacks(text: str) -> list[str]:
    """Every traceback in `text` that is not a launcher's report of a failed child, `[rankN]:` prefixes
    removed, each once (ranks that fail alike print the same one)."""
    return list(dict.fromkeys(tb for tb in tracebacks(unprefixed(text)) if not _LAUNCHER_FAILURE.search(tb)))


def rank_errors(text: str) -> str:
    """What each process of a launched job said when it failed: its own traceback(s), then the launcher's
    list of failed ranks with their exit codes or signals ('' when the text holds neither)."""
    parts = own_tracebacks(text)
    failures = launcher_failures(text)
    if failures:
        parts.append("The launcher reports (root cause first):\n" + "\n".join(f"  {f}" for f in failures))
    return "\n\n".join(parts)


def exit_after_done(text: str, logged_done: bool) -> str:
    """One line when a run whose train.logs says done then lost processes to signals (the launcher reports
    only signal deaths, and no process printed a traceback): a crash at exit, not an error of the code.
    '' otherwise: an exit code or a traceback after done is the code's own failure."""
    failures = launcher_failures(text)
    if not logged_done or not failures or not all(f.signal for f in failures) or own_tracebacks(text):
        return ""
    return (f"train.logs says done, then the launcher reported {failures[0]}: a process died at exit, after "
            f"training had finished, with no traceback of its own; not an error of the generated code")


def tail(text: str, max_chars: int) -> str:
    """The end of `text`, cut at a line boundary, within `max_chars`."""
    if len(text) <= max_chars:
        return text
    cut = text[-max_chars:]
    newline = cut.find("\n")
    return cut[newline + 1:] if newline != -1 else cut


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_progress_bars(text: str) -> str:
    """Drop ANSI codes and carriage-return redraws (tqdm bars) so evidence stays readable."""
    lines = []
    for line in _ANSI.sub("", text).split("\n"):
        segments = [s for s in line.split("\r") if s.strip()]
        lines.append(segments[-1] if segments else "")
    return "\n".join(lines)
