"""Launch a training job, watch it, stop it.

``TrainingJob`` runs a command (``bash launch_training.sh --field value ...``) as a local child in
its own process group, stdout and stderr to ``job.stdout`` / ``job.stderr``. ``SlurmJob`` submits
the same script with ``sbatch``. Both poll every ``poll_s`` seconds: read the new ``train.logs``
lines (``logformat.LogTail``, in the run's log format), report ``monitor.progress`` on each new train line, and run
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

A SLURM job's ending is classified by its end state (``failure_class``): a time limit, a preemption, a
node failure, host memory, or a cancel from outside (``scancel`` by the researcher: "cancelled"); what the
cluster did is for orchestrator.training.chain to follow up, never for a fix. A job the cluster requeues (``scontrol
requeue``, a preemption that requeues) goes back to the queue and runs again under the same id: it is followed
through, and each time it went back (squeue's restart count) is a ``Restart`` of the result, with where in its
log the rerun began (its start line, or its first update that is not after the ones before).

Only this job's lines count: what an earlier run left in an appended ``train.logs`` is skipped. A job
given ``locate_log`` has its log searched for again at every poll until it exists, so a template that writes
it into a folder named from config values (``OUTPUT/RUN_NAME/train.logs``) is watched live too.
Time comes from the injectable ``clock`` and ``sleep``, so a test can watch an hour pass in a
moment; every stop also happens when ``run`` leaves by an exception, so no job outlives its watch.

A job given a ``record`` (``make_job`` gives one inside a run: ``runs/RUN/jobs/FOLDER.json``) belongs
to its run: the record holds its pid, process group, start time, command and, once it ended, its
outcome; the job's exit code lands in ``FOLDER.exit`` even when nobody waits for it. When the
orchestrator was killed and the run resumes, ``run`` finds the record and does not start a second
job: it watches the live one again (adoption), or takes the outcome of the one that ended meanwhile.
A record whose job died unwatched (no exit code) is moved aside with that job's logs, so a folder
never holds two runs' logs. The paths a record holds are relative to the project root (``./REL``), as
run.json's are: the record lies in that project's ``runs/RUN/jobs/``. Only a process started for this run folder
(its environment names it: orchestrator.base.runlock) is adopted, so a copy of a project whose job still runs in
the original starts its own job, never watching or stopping the original's.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import json

from orchestrator.base.execution import (KILL_WAIT_S, launcher_failures, run_command, stop_process_group,
                                    strip_progress_bars)
from orchestrator.base.execution import group_gone as _group_gone
from orchestrator.base.halt import halt_point
from orchestrator.base.runlock import works_for
from orchestrator.base.files import write_atomic
from orchestrator.training.logformat import LogFormat, LogRecord, LogTail
from orchestrator.training.monitor import Anomaly, MonitorConfig, Progress, detect_all, detect_stderr, progress
from orchestrator.training.machine import Runner, SlurmCluster, slurm_cluster
from orchestrator.base.files import project_root_of, to_disk
from orchestrator.training.sizing import node_request, over_limits, unmet
from orchestrator.training.slurm_site import env_options

STDERR_TAIL_BYTES = 8 * 1024  # what the detectors see at each poll
SAMPLES_TAIL_BYTES = 64 * 1024  # the end of Sample_EP.logs: the latest sampled episodes, read when a detector asks
FINAL_TAIL_BYTES = 64 * 1024  # what classifies a job that ended: the traceback may sit above later noise
RUN_DIR_ENV = "ORCHESTRATOR_RUN_DIR"  # set by the runner (orchestrator.base.runlock): where job records go
_ENDED = frozenset({"finished", "failed", "stopped", "hung", "timeout"})
_STDERR_KINDS = frozenset({"cuda_oom", "nccl_error", "crash"})

_RECORD_PATHS = ("log_path", "cwd", "stdout", "stderr")  # a job record's fields that hold paths
Clock = Callable[[], datetime]
Sleep = Callable[[float], None]
ProgressCallback = Callable[[Progress], None]
LogLocator = Callable[[], Path]


@dataclass(frozen=True)
class Restart:
    """The job went back to the queue after it had run (requeued) and started again from its script."""

    cause: str  # "requeued"
    first_record: int  # the log's record count when it went back: what it logs from there on is the rerun's


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
    failure_class: str | None = None  # SLURM: oom | nccl | time_limit | preempted | node_fail | cancelled | failed
    nodes: str = ""  # SLURM: the nodes the job ran on, as scontrol writes them (node[1-2])
    restarts: tuple[Restart, ...] = ()  # the times the cluster requeued it, in order
    first_record: int = 0  # this job's first record in its train.logs (the records before are an earlier job's)


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

    ``tail`` was polled before the job started: the records it holds are an earlier run's. While its log
    does not exist, ``locate`` (when given) is asked again where it is, and a log found elsewhere is
    followed from its first line (``on_found`` is told).
    """

    def __init__(self, tail: LogTail, stdout_path: Path, stderr_path: Path, config: MonitorConfig,
                 on_progress: ProgressCallback | None, since: datetime, locate: LogLocator | None = None,
                 on_found: Callable[[Path], None] = lambda path: None,
                 locate_samples: LogLocator | None = None) -> None:
        self._tail, self._first = tail, len(tail.records)
        self._locate_samples = locate_samples
        self.stdout_path, self.stderr_path = stdout_path, stderr_path
        self._paths = (tail.path, stdout_path, stderr_path)
        self._sizes = [_size(p) for p in self._paths]
        self.config, self.on_progress = config, on_progress
        self.last_output_at = since
        self._locate, self._on_found = locate, on_found

    def adopt(self, first: int) -> None:
        """Watching a job that an earlier process started: its lines begin at record `first`."""
        self._first = min(first, len(self._tail.records))
        if self.on_progress is not None and any(r.kind == "train" for r in self.records):
            self.on_progress(progress(self.records))

    @property
    def records(self) -> list[LogRecord]:
        return self._tail.records[self._first:]

    @property
    def first(self) -> int:
        """The index of this job's first record among every record of its log."""
        return self._first

    @property
    def all_records(self) -> list[LogRecord]:
        """Every record of the log read so far, this job's and earlier ones'."""
        return self._tail.records

    def _follow_log(self) -> None:
        if self._locate is None or self._tail.path.exists():
            return
        found = self._locate()
        if found != self._tail.path and found.exists():
            self._tail, self._first = LogTail(found, self._tail.format), 0
            self._paths = (found, *self._paths[1:])
            self._on_found(found)

    def read(self) -> None:
        self._follow_log()
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
                          last_output_at=self.last_output_at, config=self.config, samples=self.samples)

    def final(self) -> list[Anomaly]:
        """Anomalies of a job that ended: no hang, and a longer stderr tail."""
        self.read()
        return detect_all(self.records, stderr_tail=read_tail(self.stderr_path, FINAL_TAIL_BYTES), config=self.config,
                          samples=self.samples)

    def samples(self) -> str:
        """The end of the run's Sample_EP.logs ('' when it has none or none is located)."""
        return read_tail(self._locate_samples(), SAMPLES_TAIL_BYTES) if self._locate_samples is not None else ""

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
    nodes: str = ""  # where a SLURM job ran

    def __init__(self, log_path: Path, *, monitor: MonitorConfig, poll_s: float, timeout_s: float | None,
                 clock: Clock, sleep: Sleep, on_progress: ProgressCallback | None, exit_grace_s: float) -> None:
        self.restarts: list[Restart] = []
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

    def _restart_count(self) -> int:
        """How many times the job went back to the queue after it had run (as of the last `_state`)."""
        return 0

    record: Path | None = None
    log_format: LogFormat | None = None  # how train.logs is read (None: the first guess)
    locate_log: LogLocator | None = None  # where train.logs is now: asked at each poll until it exists
    locate_samples: LogLocator | None = None  # where Sample_EP.logs is: asked when a detector needs its failed outputs
    _recorded: dict | None = None  # an earlier process's record of this job, when adopted

    def _load_record(self) -> dict | None:
        if self.record is None:
            return None
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None

    def _save_record(self, **fields) -> None:
        if self.record is not None:
            root = project_root_of(self.record.parent.parent)
            fields = {k: to_disk(v, root) if k in _RECORD_PATHS and isinstance(v, str)
                      else [to_disk(str(a), root) for a in v] if k == "command" and isinstance(v, list) else v
                      for k, v in fields.items()}
            self._recorded = {**(self._recorded or {}), **fields}
            write_atomic(self.record, json.dumps(self._recorded, indent=1))

    def _found_log(self, path: Path) -> None:
        self.log_path = path
        self._save_record(log_path=str(path))

    def _adopt(self, found: dict) -> str | None:
        """Take over the job of `found` (an earlier process's record): "running" or "ended"; None: start anew."""
        return None

    def _set_aside(self, found: dict) -> None:
        """Move a dead, unwatched job's record and logs out of the way before a fresh start."""
        assert self.record is not None
        aside = self.record.parent / f"{self.record.stem}.stale-{int(time.time())}"
        aside.mkdir(parents=True, exist_ok=True)
        for path in [self.record, *self.log_path.parent.glob("*.logs")]:
            with contextlib.suppress(OSError):
                path.rename(aside / path.name)

    def run(self) -> JobResult:
        started = self._clock()
        if self.locate_log is not None:
            self.log_path = self.locate_log()
        tail = LogTail(self.log_path, self.log_format)
        tail.poll()
        found = self._load_record()
        adopted = self._adopt(found) if found else None
        if found and adopted is None:
            self._set_aside(found)
            tail = LogTail(self.log_path, self.log_format)
            tail.poll()
        try:  # from here on, however run() is left (a signal included), the job is stopped
            if adopted is None:
                first = len(tail.records)
                refused = self._start()
                if refused is not None:
                    message = "\n".join(a.message for a in refused.anomalies)
                    return JobResult(refused.status, refused.returncode, list(refused.anomalies), [], "", message,
                                     (self._clock() - started).total_seconds(), self.slurm_job_id,
                                     refused.failure_class)
                self._save_record(**self._describe(), first_record=first, log_path=str(self.log_path),
                                  status="running", started=datetime.now().isoformat(timespec="seconds"))
                if self.record is not None:
                    halt_point("job_start", self.record.stem)
            watch = _Watch(tail, *self._outputs(), self.monitor, self.on_progress, started, self.locate_log,
                           self._found_log, self.locate_samples)
            if adopted is not None:
                self._recorded = {**found, **(self._recorded or {})}
                self.restarts = [Restart(**r) for r in found.get("restarts", [])]
                watch.adopt(int(found.get("first_record", 0)))
            earlier = found.get("status") if adopted == "ended" else None
            status, trigger, found_anomalies = self._follow(watch, started)
        finally:
            self._stop()
        result = self._result(watch, started, status, trigger, found_anomalies, earlier)
        self._save_record(status=result.status, returncode=result.returncode, failure_class=result.failure_class,
                          nodes=result.nodes, restarts=[vars(r) for r in result.restarts])
        if self.record is not None:
            halt_point("job_end", self.record.stem)
        return result

    def _describe(self) -> dict:
        """What the record says about a freshly started job (pid, command, ...)."""
        return {}

    def _result(self, watch: "_Watch", started: datetime, status: str, trigger: Anomaly | None,
                found: list[Anomaly], earlier: str | None) -> JobResult:
        if status == "ended" and earlier in _ENDED - {"finished", "failed"}:
            watch.read()  # the earlier process stopped it: same outcome, serious anomaly first
            found = watch.final()
            trigger = next((a for a in found if a.serious), None)
            status = earlier
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
                         (self._clock() - started).total_seconds(), self.slurm_job_id, failure_class, self.nodes,
                         tuple(self.restarts), watch.first)

    def _follow(self, watch: _Watch, started: datetime) -> tuple[str, Anomaly | None, list[Anomaly]]:
        """Poll until the job ends ("ended") or we stop it: (status, the anomaly that stopped it, all anomalies)."""
        crash_seen_at: datetime | None = None
        while True:
            state = self._state()
            if len(self.restarts) < self._restart_count():  # the cluster put it back in the queue: it ran again
                watch.read()
                while len(self.restarts) < self._restart_count():
                    since = self.restarts[-1].first_record if self.restarts else watch.first
                    self.restarts.append(Restart("requeued", rerun_start(watch.all_records, since)))
                self._save_record(restarts=[vars(r) for r in self.restarts])
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


def rerun_start(records: Sequence[LogRecord], since: int) -> int:
    """Where in a log the rerun of a requeued job began, the run before it having begun at record `since`: its start
    line, or its first update that is not after the updates before it; the log's end while it has logged neither."""
    latest: float | None = None
    for i in range(since, len(records)):
        record, update = records[i], records[i].values.get("update")
        if i > since and record.kind == "start":
            return i
        if record.kind == "train" and isinstance(update, float):
            if latest is not None and update <= latest:
                return i
            latest = update
    return len(records)


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, an identity."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[19]) if fields[0] not in ("Z", "X") else None


def _exit_code_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


# runs the job and leaves its exit code in $ORCHESTRATOR_EXIT_FILE, for whoever watches it later
_WRAPPER = '"$@"; code=$?; echo "$code" > "$ORCHESTRATOR_EXIT_FILE.tmp" && mv "$ORCHESTRATOR_EXIT_FILE.tmp" ' \
           '"$ORCHESTRATOR_EXIT_FILE"; exit "$code"'


class TrainingJob(_WatchedJob):
    """A local training command in its own process group; ``job.stdout`` / ``job.stderr`` are kept."""

    def __init__(self, command: list[str], cwd: Path, log_path: Path, *, env: dict[str, str] | None = None,
                 monitor: MonitorConfig = MonitorConfig(), poll_s: float = 2.0, timeout_s: float | None = None,
                 clock: Clock = datetime.now, sleep: Sleep = time.sleep,
                 on_progress: ProgressCallback | None = None, output_dir: Path | None = None,
                 stop_grace_s: float = 10.0, exit_grace_s: float = 5.0, record: Path | None = None) -> None:
        super().__init__(log_path, monitor=monitor, poll_s=poll_s, timeout_s=timeout_s, clock=clock, sleep=sleep,
                         on_progress=on_progress, exit_grace_s=exit_grace_s)
        self.command, self.cwd, self.env = list(command), Path(cwd), env
        self.record = Path(record) if record is not None else None
        if self.record is not None:  # the outputs and the exit code live beside the record, in the run folder
            self.stdout_path, self.stderr_path = self.record.with_suffix(".stdout"), self.record.with_suffix(".stderr")
            self.exit_path: Path | None = self.record.with_suffix(".exit")
        else:
            out = Path(output_dir) if output_dir is not None else self.cwd
            self.stdout_path, self.stderr_path = out / "job.stdout", out / "job.stderr"
            self.exit_path = None
        self.stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen | None = None
        self._pgid: int | None = None  # the job's process group (= its leader's pid), ours or adopted
        self._ticks: int | None = None

    @property
    def pid(self) -> int | None:
        return self._pgid

    def _start(self) -> _Ending | None:
        self.stdout_path.parent.mkdir(parents=True, exist_ok=True)
        command, env = self.command, {**os.environ, **(self.env or {})}
        if self.record is not None:  # the job works for its record's run, wherever it is started from
            env[RUN_DIR_ENV] = str(self.record.parent.parent.resolve())
        if self.exit_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.exit_path.unlink()
            command, env = ["bash", "-c", _WRAPPER, "job", *command], {**env, "ORCHESTRATOR_EXIT_FILE": str(self.exit_path)}
        try:
            with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
                self._proc = subprocess.Popen(command, cwd=self.cwd, env=env,
                                              stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            message = f"cannot start {self.command[0]}: {exc}"
            return _Ending("failed", 127, None, (Anomaly("crash", True, None, message, message),))
        self._pgid, self._ticks = self._proc.pid, _start_ticks(self._proc.pid)
        return None

    def _describe(self) -> dict:
        return {"pid": self._pgid, "pgid": self._pgid, "start_ticks": self._ticks, "command": self.command,
                "cwd": str(self.cwd), "stdout": str(self.stdout_path), "stderr": str(self.stderr_path)}

    def _adopt(self, found: dict) -> str | None:
        if found.get("status") in _ENDED:
            self._adopted_code = found.get("returncode")
            return "ended"
        pid = found.get("pgid")
        if pid and self._ours(pid, found.get("start_ticks")):
            self._pgid, self._ticks, self._adopted_code = pid, found["start_ticks"], None
            self._recorded = dict(found)
            return "running"
        code = _exit_code_in(self.exit_path) if self.exit_path is not None else None
        if code is not None:  # it ended by itself while nobody watched
            self._adopted_code, self._recorded = code, dict(found)
            return "ended"
        return None

    def _outputs(self) -> tuple[Path, Path]:
        return self.stdout_path, self.stderr_path

    def _ours(self, pid: int, ticks: int | None) -> bool:
        """The recorded process still runs and was started for this record's run (not a copy's original)."""
        return (ticks is not None and _start_ticks(pid) == ticks
                and (self.record is None or works_for(pid, self.record.parent.parent)))

    def _alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pgid is not None and _start_ticks(self._pgid) == self._ticks

    def _state(self) -> str:
        return "running" if self._alive() else "ended"

    def _stop(self) -> None:
        if self._pgid is None:
            return
        started = time.monotonic()
        if self._proc is not None:
            stop_process_group(self._proc, self.stop_grace_s)
        elif self._alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pgid, signal.SIGTERM)
        # the leader can exit before its workers (accelerate launch); they got the same SIGTERM and the
        # rest of the grace, then SIGKILL: nothing of the group may outlive the job
        if not _group_gone(self._pgid, self.stop_grace_s - (time.monotonic() - started)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pgid, signal.SIGKILL)
            _group_gone(self._pgid, KILL_WAIT_S)

    def _returncode(self) -> int | None:
        if self._proc is not None:
            return self._proc.returncode
        if getattr(self, "_adopted_code", None) is not None:
            return self._adopted_code
        return _exit_code_in(self.exit_path) if self.exit_path is not None else None

    def _ended(self, watch: _Watch) -> _Ending:
        returncode = self._returncode()
        return _Ending("finished" if returncode == 0 else "failed", returncode)

    def _stopped_returncode(self) -> int | None:
        return self._returncode()


# ---------------------------------------------------------------- SLURM

_QUEUED = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})
_ACTIVE = _QUEUED | {"RUNNING", "COMPLETING", "STAGE_OUT", "RESIZING", "SIGNALING"}
_FAILURE_CLASSES = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "time_limit", "PREEMPTED": "preempted",
                    "NODE_FAIL": "node_fail", "BOOT_FAIL": "node_fail", "CANCELLED": "cancelled"}
_HINTS = {
    "killed": "a training process was killed by a signal and its peers failed after it; SIGKILL is often the "
              "kernel's OOM killer: check that node's memory (raise #SBATCH --mem, lower the micro-batch)",
    "oom": "host memory ran out: raise #SBATCH --mem, or lower the micro-batch or group size",
    "nccl": "an NCCL error: a peer may have died first (see its traceback); try NCCL_DEBUG=INFO",
    "time_limit": "the time limit ran out: raise #SBATCH --time or train for fewer updates",
    "preempted": "a higher-priority job took the nodes: resubmit",
    "node_fail": "a node failed: resubmit, excluding it (#SBATCH --exclude)",
    "cancelled": "it was cancelled from outside the orchestrator (scancel): `resume RUN` continues it",
    "failed": "see the traceback in the job's output file",
}


def runner_in(cwd: Path, timeout_s: float = 60.0, env: Mapping[str, str] | None = None) -> Runner:
    """``run_command`` in ``cwd`` with ``env`` added: sbatch's directory is the job's, and sbatch passes its
    environment on to the job."""
    return functools.partial(run_command, cwd=cwd, timeout_s=timeout_s, env=env)


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
    fakes sbatch, scontrol, squeue, sacct and scancel with it. A request no set of the cluster's nodes
    can meet is refused before sbatch, with the nodes' sizes; ``cluster`` (the probe's answer) spares
    asking sinfo for them.
    """

    def __init__(self, script: Path, args: list[str], cwd: Path, log_path: Path, *, run: Runner | None = None,
                 monitor: MonitorConfig = MonitorConfig(), poll_s: float = 30.0, timeout_s: float | None = None,
                 clock: Clock = datetime.now, sleep: Sleep = time.sleep,
                 on_progress: ProgressCallback | None = None, exit_grace_s: float = 60.0,
                 sbatch_options: Sequence[str] = (), cluster: SlurmCluster | None = None) -> None:
        super().__init__(log_path, monitor=monitor, poll_s=poll_s, timeout_s=timeout_s, clock=clock, sleep=sleep,
                         on_progress=on_progress, exit_grace_s=exit_grace_s)
        self.script, self.args, self.cwd = Path(script), list(args), Path(cwd)
        self.sbatch_options = list(sbatch_options)  # before the script: they win over its #SBATCH lines
        self._cluster: SlurmCluster | str | None = cluster
        self._run = run or runner_in(self.cwd)
        self._active = False
        self._accounting: tuple[str, str, str] | None = None  # sacct's State, ExitCode, Reason of the job
        self._requeued = 0  # squeue's restart count of the job

    def _start(self) -> _Ending | None:
        problem = self._unmet_request()
        if problem is not None:
            return self._refused(f"not submitted: {problem}", None)
        for flag in ("--test-only", "--parsable"):
            code, out, err = self._run(["sbatch", flag, *self.sbatch_options, str(self.script), *self.args])
            if code != 0:
                message = f"sbatch {flag} failed (exit code {code}): {(err or out).strip()}"
                if "node configuration is not available" in message:
                    message += "; " + self._node_sizes()
                return self._refused(message, code)
        job_id = out.strip().split(";")[0]  # --parsable prints "ID" or "ID;CLUSTER"
        if not job_id:
            return self._refused(f"sbatch printed no job id: {(out + err).strip()}", None)
        self.slurm_job_id, self._active = job_id, True
        return None

    def _nodes(self) -> SlurmCluster | str:
        """The cluster's nodes (asked once), or why sinfo could not say."""
        if self._cluster is None:
            self._cluster = slurm_cluster(self._run)
        return self._cluster

    def _unmet_request(self) -> str | None:
        """Why no set of the cluster's nodes can run this job; None when some can, or when that is unknown."""
        cluster = self._nodes()
        try:
            script = self.script.read_text()
        except OSError:  # sbatch says what is wrong with the script
            return None
        if isinstance(cluster, str) or not cluster.nodes:
            return None
        request = node_request(script, [*env_options(os.environ), *self.sbatch_options])
        return unmet(request, cluster) or over_limits(request, cluster)

    def _node_sizes(self) -> str:
        """What the cluster's nodes offer, for a request sbatch found no node for."""
        cluster = self._nodes()
        nodes = cluster if isinstance(cluster, str) else cluster.describe()
        return (f"the cluster's nodes: {nodes}. Lower the script's #SBATCH --cpus-per-task, --mem or --gres "
                "to what a node has")

    def _describe(self) -> dict:
        return {"slurm_job_id": self.slurm_job_id,
                "command": ["sbatch", *self.sbatch_options, str(self.script), *self.args],
                "cwd": str(self.cwd)}

    def _adopt(self, found: dict) -> str | None:
        if not found.get("slurm_job_id") or not self._works_here(found["slurm_job_id"]):
            return None
        self.slurm_job_id, self._recorded = found["slurm_job_id"], dict(found)
        if found.get("status") in _ENDED:
            return "ended"
        self._active = True  # squeue/sacct say where it stands at the first poll
        return "running"

    def _works_here(self, job_id: str) -> bool:
        """Whether the recorded job runs in this job's folder, as far as the cluster still knows it: a copy of a
        project never watches (nor cancels) the job of the original, which runs in the original's folder."""
        code, out, _ = self._run(["scontrol", "show", "job", "-o", str(job_id)])
        found = re.search(r"\bWorkDir=(\S+)", out) if code == 0 else None
        return found is None or Path(found.group(1)).resolve() == self.cwd.resolve()

    def _refused(self, message: str, returncode: int | None) -> _Ending:
        return _Ending("failed", returncode, "failed", (Anomaly("sbatch_refused", True, None, message, message),))

    def _outputs(self) -> tuple[Path, Path]:
        code, out, _ = self._run(["scontrol", "show", "job", "-o", str(self.slurm_job_id)])
        files = dict(re.findall(r"\b(StdOut|StdErr)=(\S+)", out)) if code == 0 else {}
        stdout = Path(files.get("StdOut", self.cwd / f"slurm-{self.slurm_job_id}.out"))
        return stdout, Path(files.get("StdErr", stdout))

    def _state(self) -> str:
        code, out, err = self._run(["squeue", "-h", "-j", str(self.slurm_job_id), "-O", "State:32,RestartCnt:12"])
        queued = out.split()
        if code == 0 and queued:
            if len(queued) > 1 and queued[1].isdigit():
                self._requeued = int(queued[1])
            return "pending" if queued[0] in _QUEUED else "running"
        if code != 0 and "Invalid job id" not in err:
            return "running"  # the controller did not answer: ask again at the next poll
        # gone from the queue; accounting may lag a little behind; without accounting, scontrol still
        # remembers a finished job for MinJobAge (300 s by default)
        self._accounting = self._sacct() or self._scontrol_end()
        if self._accounting is not None and self._accounting[0] in _ACTIVE:
            return "pending" if self._accounting[0] in _QUEUED else "running"
        self._active = False
        return "ended"

    def _sacct(self) -> tuple[str, str, str] | None:
        code, out, _ = self._run(["sacct", "-j", str(self.slurm_job_id), "-n", "-P", "-o",
                                  "State,ExitCode,Reason,NodeList"])
        rows = [line.split("|") for line in out.splitlines() if line.strip()] if code == 0 else []
        if not rows or len(rows[0]) < 3:
            return None
        state, exit_code, reason = rows[0][:3]
        if len(rows[0]) > 3 and rows[0][3] not in ("", "None assigned"):
            self.nodes = rows[0][3]
        steps = {row[0].split()[0] for row in rows[1:] if row[0].strip()}
        # the job line says FAILED when a step was OOM-killed in some SLURM versions
        if "OUT_OF_MEMORY" in steps:
            state = "OUT_OF_MEMORY"
        return state.split()[0], exit_code, reason  # "CANCELLED by 1234" -> CANCELLED

    def _scontrol_end(self) -> tuple[str, str, str] | None:
        """(JobState, ExitCode, Reason) from `scontrol show job`, for clusters without slurmdbd; the nodes it ran on
        and how often it was requeued are noted."""
        code, out, _ = self._run(["scontrol", "show", "job", "-o", str(self.slurm_job_id)])
        fields = dict(re.findall(r"\b(JobState|ExitCode|Reason|NodeList|Restarts)=(\S+)", out)) if code == 0 else {}
        if "JobState" not in fields:
            return None
        if fields.get("NodeList", "(null)") != "(null)":
            self.nodes = fields["NodeList"]
        if fields.get("Restarts", "").isdigit():  # a rerun that ended between two looks at the queue
            self._requeued = max(self._requeued, int(fields["Restarts"]))
        return fields["JobState"], fields.get("ExitCode", "0:0"), fields.get("Reason", "None")

    def _stop(self) -> None:
        if self._active:
            self._run(["scancel", str(self.slurm_job_id)])
            self._active = False

    def _ended(self, watch: _Watch) -> _Ending:
        recorded = self._recorded or {}
        if self._accounting is None and recorded.get("status") in _ENDED and recorded.get("failure_class"):
            # the cluster has forgotten a job an earlier watch saw end: its record says how
            self.nodes = recorded.get("nodes") or ""
            return _Ending(recorded["status"], recorded.get("returncode"), recorded["failure_class"])
        if self._accounting is None:  # no accounting on this cluster: judge by train.logs
            done = any(r.kind == "done" for r in watch.records)
            return _Ending("finished", None) if done else _Ending("failed", None, "failed")
        state, exit_code, reason = self._accounting
        returncode = _exit_code(exit_code)
        if state == "COMPLETED":
            return _Ending("finished", returncode)
        output = read_tail(watch.stderr_path, FINAL_TAIL_BYTES)
        first = next(iter(launcher_failures(output)), None)
        failure_class = (_FAILURE_CLASSES.get(state) or ("killed" if first is not None and first.signal else None)
                         or self._failure_from_output(output))
        message = (f"SLURM job {self.slurm_job_id} ended {state} (exit code {exit_code}, reason {reason})"
                   + (f"; failed first: {first}" if first is not None else "") + "; " + _HINTS[failure_class])
        evidence = "|".join(self._accounting) + (f"\n{first.entry}" if first is not None else "")
        return _Ending("failed", returncode, failure_class,
                       (Anomaly(f"slurm_{state.lower()}", True, None, message, evidence),))

    def _failure_from_output(self, text: str) -> str:
        if "NCCL" in text:
            return "nccl"
        found = detect_stderr(text)
        return "oom" if found is not None and found.kind == "cuda_oom" else "failed"

    def _stopped_returncode(self) -> int | None:
        return None

    def _restart_count(self) -> int:
        return self._requeued


# ---------------------------------------------------------------- choosing


def default_record(log_path: Path) -> Path | None:
    """Inside a run (``ORCHESTRATOR_RUN_DIR`` set by the runner): ``runs/RUN/jobs/<log folder>.json``."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    return Path(run_dir) / "jobs" / f"{Path(log_path).parent.name}.json" if run_dir else None


def make_job(launch_script: Path, args: list[str], *, use_slurm: bool, log_path: Path,
             env: dict[str, str] | None = None, monitor: MonitorConfig = MonitorConfig(),
             poll_s: float | None = None, timeout_s: float | None = None,
             on_progress: ProgressCallback | None = None, run: Runner | None = None,
             record: Path | None = None, sbatch_options: Sequence[str] = (),
             cluster: SlurmCluster | None = None, log_format: LogFormat | None = None,
             locate_log: LogLocator | None = None, locate_samples: LogLocator | None = None) -> TrainingJob | SlurmJob:
    """The job for ``launch_script args``: ``sbatch`` it, or ``bash`` it here; either way with ``env`` and
    PYTHON = this interpreter in its environment.

    Both run in the script's folder (the script cds there); ``log_path`` is the train.logs to watch, read
    in ``log_format``; ``locate_log``, when given, says where it is instead, asked again until it exists;
    ``locate_samples`` where the run's Sample_EP.logs is, asked when a detector shows its failed outputs.
    ``run`` is SlurmJob's command runner. ``record`` (default: ``default_record``) makes the job its
    run's: adopted, not duplicated, after a crash. Without a record, job.stdout / job.stderr go beside
    train.logs. ``sbatch_options`` go to sbatch before the script and win over its ``#SBATCH`` lines;
    ``cluster`` is the probe's view of the SLURM nodes (asked of sinfo when not given).
    """
    workdir = Path(launch_script).resolve().parent
    record = record or default_record(log_path)
    env = {"PYTHON": os.environ.get("PYTHON", sys.executable), **(env or {})}
    job: TrainingJob | SlurmJob
    if use_slurm:
        job = SlurmJob(workdir / Path(launch_script).name, args, workdir, log_path,
                       run=run or runner_in(workdir, env=env), monitor=monitor,
                       poll_s=poll_s or 30.0, timeout_s=timeout_s, on_progress=on_progress,
                       sbatch_options=sbatch_options, cluster=cluster)
        job.record = record
    else:
        job = TrainingJob(["bash", str(Path(launch_script).resolve()), *args], workdir, log_path, env=env,
                          monitor=monitor, poll_s=poll_s or 2.0, timeout_s=timeout_s, on_progress=on_progress,
                          output_dir=Path(log_path).parent, record=record)
    job.log_format, job.locate_log, job.locate_samples = log_format, locate_log, locate_samples
    return job


def live_jobs(jobs_dir: Path) -> dict[str, int]:
    """Local jobs recorded in `jobs_dir` whose process still runs: record name -> process group."""
    live = {}
    for path in sorted(Path(jobs_dir).glob("*.json")):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pgid = found.get("pgid")
        if (pgid and found.get("status") == "running" and _start_ticks(pgid) == found.get("start_ticks")
                and works_for(pgid, Path(jobs_dir).parent)):
            live[path.stem] = pgid
    return live
