"""Launch a training job, watch it, stop it.

``TrainingJob`` runs a command (``bash launch_training.sh --field value ...``) as a local child in
its own process group, stdout and stderr to ``job.stdout`` / ``job.stderr``. ``SlurmJob`` submits
the same script with ``sbatch``. Both poll every ``poll_s`` seconds: read the new ``train.logs``
lines (``monitor.LogTail``), report ``monitor.progress`` on each new train line, and run
``monitor.detect_all`` on the records and the end of the job's stderr. The outcome is a ``JobResult``:

=========  ============================================================================
status     when
=========  ============================================================================
finished   the job ended by itself with exit code 0 (SLURM: COMPLETED)
failed     it ended by itself otherwise, or could not start (sbatch refused it)
stopped    we stopped it for the serious anomaly first in ``anomalies``
hung       we stopped it because no train/eval line came for ``MonitorConfig.hang_seconds``
timeout    we stopped it after ``timeout_s`` overall
=========  ============================================================================

A crash, CUDA OOM or NCCL error in stderr is serious, but a job that prints one usually ends by
itself: it gets ``exit_grace_s`` to do so (then "failed"), and is stopped after that ("stopped").

Only this job's lines count: what an earlier run left in an appended ``train.logs`` is skipped.
Time comes from the injectable ``clock`` and ``sleep``, so a test can watch an hour pass in a
moment; every stop also happens when ``run`` leaves by an exception, so no job outlives its watch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.execution import run_command, stop_process_group, strip_progress_bars
from orchestrator.monitor import (Anomaly, LogRecord, LogTail, MonitorConfig, Progress, detect_all, detect_stderr,
                                  progress)
from orchestrator.probe import Runner

STDERR_TAIL_BYTES = 8 * 1024  # what the detectors see at each poll
FINAL_TAIL_BYTES = 64 * 1024  # what classifies a job that ended: the traceback may sit above later noise
KILL_WAIT_S = 5.0  # how long a SIGKILLed process group may take to be gone
_STDERR_KINDS = frozenset({"cuda_oom", "nccl_error", "crash"})

Clock = Callable[[], datetime]
Sleep = Callable[[float], None]
ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class JobResult:
    status: str  # finished | failed | stopped | hung | timeout
    returncode: int | None
    anomalies: list[Anomaly]  # the serious anomaly that stopped it first, then the others
    records: list[LogRecord]  # this job's train.logs records
    stdout_tail: str
    stderr_tail: str
    seconds: float
    slurm_job_id: str | None = None  # None for a local job, and for a SLURM job sbatch refused
    failure_class: str | None = None  # SLURM only: oom | nccl | time_limit | preempted | node_fail | failed


def read_tail(path: Path, max_bytes: int) -> str:
    """The last ``max_bytes`` of a file from a line start, progress bars collapsed; '' when it is missing."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            text = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    if size > max_bytes:
        text = text.partition("\n")[2]
    return strip_progress_bars(text)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class _Watch:
    """This job's train.logs records and output files, read incrementally; anomalies as of each poll.

    ``tail`` was polled before the job started: the records it holds are an earlier run's.
    """

    def __init__(self, tail: LogTail, stdout_path: Path, stderr_path: Path, config: MonitorConfig,
                 on_progress: ProgressCallback | None, since: datetime) -> None:
        self._tail, self._first = tail, len(tail.records)
        self.stdout_path, self.stderr_path = stdout_path, stderr_path
        self._paths = (tail.path, stdout_path, stderr_path)
        self._sizes = [_size(p) for p in self._paths]
        self.config, self.on_progress = config, on_progress
        self.last_output_at = since

    @property
    def records(self) -> list[LogRecord]:
        return self._tail.records[self._first:]

    def read(self) -> None:
        new = self._tail.poll()
        if len(self._tail.records) < self._first:  # the log was replaced: LogTail reads it from the top
            self._first = 0
        if self.on_progress is not None and any(r.kind == "train" for r in new):
            self.on_progress(progress(self.records))

    def check(self, now: datetime) -> list[Anomaly]:
        self.read()
        sizes = [_size(p) for p in self._paths]
        if sizes != self._sizes:
            self._sizes, self.last_output_at = sizes, now
        return detect_all(self.records, stderr_tail=read_tail(self.stderr_path, STDERR_TAIL_BYTES), now=now,
                          last_output_at=self.last_output_at, config=self.config)

    def final(self) -> list[Anomaly]:
        """Anomalies of a job that ended: no hang, and a longer stderr tail."""
        self.read()
        return detect_all(self.records, stderr_tail=read_tail(self.stderr_path, FINAL_TAIL_BYTES), config=self.config)

    def tails(self) -> tuple[str, str]:
        return read_tail(self.stdout_path, STDERR_TAIL_BYTES), read_tail(self.stderr_path, STDERR_TAIL_BYTES)


@dataclass(frozen=True)
class _Ending:
    status: str
    returncode: int | None
    failure_class: str | None = None
    anomalies: tuple[Anomaly, ...] = ()


class _WatchedJob(ABC):
    """The watch loop both kinds of job share; subclasses start, poll, stop and judge the job itself."""

    slurm_job_id: str | None = None

    def __init__(self, log_path: Path, *, monitor: MonitorConfig, poll_s: float, timeout_s: float | None,
                 clock: Clock, sleep: Sleep, on_progress: ProgressCallback | None, exit_grace_s: float) -> None:
        self.log_path = Path(log_path)
        self.monitor, self.poll_s, self.timeout_s = monitor, poll_s, timeout_s
        self._clock, self._sleep, self.on_progress = clock, sleep, on_progress
        self.exit_grace_s = exit_grace_s

    @abstractmethod
    def _start(self) -> _Ending | None:
        """Start the job; an ending when it could not start."""

    @abstractmethod
    def _outputs(self) -> tuple[Path, Path]:
        """The job's stdout and stderr files (the same file twice when they are merged)."""

    @abstractmethod
    def _state(self) -> str:
        """pending | running | ended."""

    @abstractmethod
    def _stop(self) -> None:
        """Stop the job if it still runs; a no-op otherwise."""

    @abstractmethod
    def _ended(self, watch: _Watch) -> _Ending:
        """How a job that ended by itself ended."""

    @abstractmethod
    def _stopped_returncode(self) -> int | None:
        """The exit status of a job we stopped, where there is one."""

    def run(self) -> JobResult:
        started = self._clock()
        tail = LogTail(self.log_path)
        tail.poll()
        refused = self._start()
        if refused is not None:
            message = "\n".join(a.message for a in refused.anomalies)
            return JobResult(refused.status, refused.returncode, list(refused.anomalies), [], "", message,
                             (self._clock() - started).total_seconds(), self.slurm_job_id, refused.failure_class)
        watch = _Watch(tail, *self._outputs(), self.monitor, self.on_progress, started)
        try:
            status, trigger, found = self._follow(watch, started)
        finally:
            self._stop()
        if status == "ended":
            ending = self._ended(watch)
            status, returncode, failure_class = ending.status, ending.returncode, ending.failure_class
            anomalies = [*ending.anomalies, *watch.final()]
        else:
            watch.read()
            returncode, failure_class = self._stopped_returncode(), None
            anomalies = [trigger, *(a for a in found if a is not trigger)] if trigger else found
        stdout_tail, stderr_tail = watch.tails()
        return JobResult(status, returncode, anomalies, watch.records, stdout_tail, stderr_tail,
                         (self._clock() - started).total_seconds(), self.slurm_job_id, failure_class)

    def _follow(self, watch: _Watch, started: datetime) -> tuple[str, Anomaly | None, list[Anomaly]]:
        """Poll until the job ends ("ended") or we stop it: (status, the anomaly that stopped it, all anomalies)."""
        crash_seen_at: datetime | None = None
        while True:
            state = self._state()
            if state == "ended":
                return "ended", None, []
            now = self._clock()
            if state == "pending":  # time in a queue is not silence
                watch.last_output_at = now
            found = watch.check(now)
            trigger = next((a for a in found if a.serious), None)
            if trigger is not None and trigger.kind in _STDERR_KINDS:
                crash_seen_at = crash_seen_at or now
                if (now - crash_seen_at).total_seconds() < self.exit_grace_s:
                    trigger = None
            if trigger is not None:
                self._stop()
                return ("hung" if trigger.kind == "hung" else "stopped"), trigger, found
            if self.timeout_s is not None and (now - started).total_seconds() >= self.timeout_s:
                self._stop()
                return "timeout", None, found
            self._sleep(self.poll_s)


def _live_members(pgid: int) -> list[int]:
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


def _group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` (real time: signals take a moment to end a process) for the group to exit."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    while _live_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


class TrainingJob(_WatchedJob):
    """A local training command in its own process group; ``job.stdout`` / ``job.stderr`` are kept."""

    def __init__(self, command: list[str], cwd: Path, log_path: Path, *, env: dict[str, str] | None = None,
                 monitor: MonitorConfig = MonitorConfig(), poll_s: float = 2.0, timeout_s: float | None = None,
                 clock: Clock = datetime.now, sleep: Sleep = time.sleep,
                 on_progress: ProgressCallback | None = None, output_dir: Path | None = None,
                 stop_grace_s: float = 10.0, exit_grace_s: float = 5.0) -> None:
        super().__init__(log_path, monitor=monitor, poll_s=poll_s, timeout_s=timeout_s, clock=clock, sleep=sleep,
                         on_progress=on_progress, exit_grace_s=exit_grace_s)
        self.command, self.cwd, self.env = list(command), Path(cwd), env
        out = Path(output_dir) if output_dir is not None else self.cwd
        self.stdout_path, self.stderr_path = out / "job.stdout", out / "job.stderr"
        self.stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> _Ending | None:
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
                self._proc = subprocess.Popen(self.command, cwd=self.cwd, env={**os.environ, **(self.env or {})},
                                              stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            message = f"cannot start {self.command[0]}: {exc}"
            return _Ending("failed", 127, None, (Anomaly("crash", True, None, message, message),))
        return None

    def _outputs(self) -> tuple[Path, Path]:
        return self.stdout_path, self.stderr_path

    def _state(self) -> str:
        assert self._proc is not None
        return "running" if self._proc.poll() is None else "ended"

    def _stop(self) -> None:
        if self._proc is None:
            return
        started = time.monotonic()
        stop_process_group(self._proc, self.stop_grace_s)
        # the leader can exit before its workers (accelerate launch); they got the same SIGTERM and the
        # rest of the grace, then SIGKILL: nothing of the group may outlive the job
        if not _group_gone(self._proc.pid, self.stop_grace_s - (time.monotonic() - started)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            _group_gone(self._proc.pid, KILL_WAIT_S)

    def _ended(self, watch: _Watch) -> _Ending:
        assert self._proc is not None
        returncode = self._proc.returncode
        return _Ending("finished" if returncode == 0 else "failed", returncode)

    def _stopped_returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None


# ---------------------------------------------------------------- SLURM

_QUEUED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})
_ACTIVE = _QUEUED | {"RUNNING", "COMPLETING", "STAGE_OUT", "RESIZING", "SIGNALING"}
_FAILURE_CLASSES = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "time_limit", "PREEMPTED": "preempted",
                    "NODE_FAIL": "node_fail"}
_HINTS = {
    "oom": "host memory ran out: raise #SBATCH --mem, or lower the micro-batch or group size",
    "nccl": "an NCCL error: a peer may have died first (see its traceback); try NCCL_DEBUG=INFO",
    "time_limit": "the time limit ran out: raise #SBATCH --time or train for fewer updates",
    "preempted": "a higher-priority job took the nodes: resubmit",
    "node_fail": "a node failed: resubmit, excluding it (#SBATCH --exclude)",
    "failed": "see the traceback in the job's output file",
}


def runner_in(cwd: Path, timeout_s: float = 60.0) -> Runner:
    """``run_command`` in ``cwd``: sbatch's directory is the job's."""
    return functools.partial(run_command, cwd=cwd, timeout_s=timeout_s)


def _exit_code(text: str) -> int | None:
    """sacct's "code:signal" as Popen would say it: the code, or minus the signal."""
    code, _, sig = text.partition(":")
    try:
        return -int(sig) if sig and int(sig) else int(code)
    except ValueError:
        return None


class SlurmJob(_WatchedJob):
    """``sbatch script args`` (after a ``--test-only`` dry run), watched through squeue, sacct and train.logs.

    Every SLURM command goes through ``run`` (default: run in ``cwd``, the submit folder); a test
    fakes sbatch, scontrol, squeue, sacct and scancel with it.
    """

    def __init__(self, script: Path, args: list[str], cwd: Path, log_path: Path, *, run: Runner | None = None,
                 monitor: MonitorConfig = MonitorConfig(), poll_s: float = 30.0, timeout_s: float | None = None,
                 clock: Clock = datetime.now, sleep: Sleep = time.sleep,
                 on_progress: ProgressCallback | None = None, exit_grace_s: float = 60.0) -> None:
        super().__init__(log_path, monitor=monitor, poll_s=poll_s, timeout_s=timeout_s, clock=clock, sleep=sleep,
                         on_progress=on_progress, exit_grace_s=exit_grace_s)
        self.script, self.args, self.cwd = Path(script), list(args), Path(cwd)
        self._run = run or runner_in(self.cwd)
        self._active = False
        self._accounting: tuple[str, str, str] | None = None  # sacct's State, ExitCode, Reason of the job

    def _start(self) -> _Ending | None:
        for flag in ("--test-only", "--parsable"):
            code, out, err = self._run(["sbatch", flag, str(self.script), *self.args])
            if code != 0:
                return self._refused(f"sbatch {flag} failed (exit code {code}): {(err or out).strip()}", code)
        job_id = out.strip().split(";")[0]  # --parsable prints "ID" or "ID;CLUSTER"
        if not job_id:
            return self._refused(f"sbatch printed no job id: {(out + err).strip()}", None)
        self.slurm_job_id, self._active = job_id, True
        return None

    def _refused(self, message: str, returncode: int | None) -> _Ending:
        return _Ending("failed", returncode, "failed", (Anomaly("sbatch_refused", True, None, message, message),))

    def _outputs(self) -> tuple[Path, Path]:
        code, out, _ = self._run(["scontrol", "show", "job", "-o", str(self.slurm_job_id)])
        files = dict(re.findall(r"\b(StdOut|StdErr)=(\S+)", out)) if code == 0 else {}
        stdout = Path(files.get("StdOut", self.cwd / f"slurm-{self.slurm_job_id}.out"))
        return stdout, Path(files.get("StdErr", stdout))

    def _state(self) -> str:
        code, out, err = self._run(["squeue", "-h", "-j", str(self.slurm_job_id), "-o", "%T"])
        queued = out.split()
        if code == 0 and queued:
            return "pending" if queued[0] in _QUEUED else "running"
        if code != 0 and "Invalid job id" not in err:
            return "running"  # the controller did not answer: ask again at the next poll
        # gone from the queue; accounting may lag a little behind
        self._accounting = self._sacct()
        if self._accounting is not None and self._accounting[0] in _ACTIVE:
            return "pending" if self._accounting[0] in _QUEUED else "running"
        self._active = False
        return "ended"

    def _sacct(self) -> tuple[str, str, str] | None:
        code, out, _ = self._run(["sacct", "-j", str(self.slurm_job_id), "-n", "-P", "-o", "State,ExitCode,Reason"])
        rows = [line.split("|") for line in out.splitlines() if line.strip()] if code == 0 else []
        if not rows or len(rows[0]) < 3:
            return None
        state, exit_code, reason = rows[0][:3]
        steps = {row[0].split()[0] for row in rows[1:] if row[0].strip()}
        # the job line says FAILED when a step was OOM-killed in some SLURM versions
        if "OUT_OF_MEMORY" in steps:
            state = "OUT_OF_MEMORY"
        return state.split()[0], exit_code, reason  # "CANCELLED by 1234" -> CANCELLED

    def _stop(self) -> None:
        if self._active:
            self._run(["scancel", str(self.slurm_job_id)])
            self._active = False

    def _ended(self, watch: _Watch) -> _Ending:
        if self._accounting is None:  # no accounting on this cluster: judge by train.logs
            done = any(r.kind == "done" for r in watch.records)
            return _Ending("finished", None) if done else _Ending("failed", None, "failed")
        state, exit_code, reason = self._accounting
        returncode = _exit_code(exit_code)
        if state == "COMPLETED":
            return _Ending("finished", returncode)
        failure_class = _FAILURE_CLASSES.get(state) or self._failure_from_output(watch)
        message = (f"SLURM job {self.slurm_job_id} ended {state} (exit code {exit_code}, reason {reason}); "
                   + _HINTS[failure_class])
        evidence = "|".join(self._accounting)
        return _Ending("failed", returncode, failure_class,
                       (Anomaly(f"slurm_{state.lower()}", True, None, message, evidence),))

    def _failure_from_output(self, watch: _Watch) -> str:
        text = read_tail(watch.stderr_path, FINAL_TAIL_BYTES)
        if "NCCL" in text:
            return "nccl"
        found = detect_stderr(text)
        return "oom" if found is not None and found.kind == "cuda_oom" else "failed"

    def _stopped_returncode(self) -> int | None:
        return None


# ---------------------------------------------------------------- choosing


def make_job(launch_script: Path, args: list[str], *, use_slurm: bool, log_path: Path,
             env: dict[str, str] | None = None, monitor: MonitorConfig = MonitorConfig(),
             poll_s: float | None = None, timeout_s: float | None = None,
             on_progress: ProgressCallback | None = None, run: Runner | None = None) -> TrainingJob | SlurmJob:
    """The job for ``launch_script args``: ``sbatch`` it, or ``bash`` it here with PYTHON = this interpreter.

    Both run in the script's folder (the script cds there); ``log_path`` is the train.logs to watch.
    ``run`` is SlurmJob's command runner.
    """
    workdir = Path(launch_script).resolve().parent
    if use_slurm:
        return SlurmJob(workdir / Path(launch_script).name, args, workdir, log_path, run=run, monitor=monitor,
                        poll_s=poll_s or 30.0, timeout_s=timeout_s, on_progress=on_progress)
    env = {"PYTHON": os.environ.get("PYTHON", sys.executable), **(env or {})}
    return TrainingJob(["bash", str(Path(launch_script).resolve()), *args], workdir, log_path, env=env,
                       monitor=monitor, poll_s=poll_s or 2.0, timeout_s=timeout_s, on_progress=on_progress)
