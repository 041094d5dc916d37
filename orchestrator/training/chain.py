"""A formal run across its SLURM jobs: what a shared cluster does to a long job is taken up again, never paid to fix.

A formal attempt is one run of training, however many jobs it takes. When a job ends in a way that is the
cluster's doing, `follow_up` says what comes next, and no LLM is asked:

============  ====================================================================================================
ending        what follows
============  ====================================================================================================
time_limit    the next job of the chain goes on from the last checkpoint with what is left (resume_from latest);
              a second job in a row that saved no newer checkpoint than the one before it stops the run
              `environment` (the next would only repeat it; one is let pass: a first job may pay for caches), and
              so does a template without resume support (it would start again at update 0 for ever)
preempted     the next job goes on from the checkpoint (a job the cluster requeues instead is followed through its
              rerun by training_job: a `requeued` restart of the same job id)
node_fail     the next job goes on from the checkpoint with the failed node excluded (--exclude): the nodes of the
              job that sinfo calls down or not responding, else its only node
oom           (host memory, OUT_OF_MEMORY) the next job asks for twice the memory within what the partition's nodes
              have, or, at a node's whole memory, trains with half the micro-batch (and twice the accumulation)
cancelled     (scancel from outside) the run stops `cancelled` in one line; `resume RUN` starts the next job, which
              goes on from the checkpoint, without asking anything
============  ====================================================================================================

Every other ending (finished, a code error, a serious anomaly, a hang) ends the chain: the formal run's own
judgement follows as before. A process of the orchestrator follows at most `max_jobs` jobs of one chain; the
cluster ending more stops the run `environment` (`resume` goes on).

The chain's record is `runs/RUN/formal-N/jobs.json`: each run of a job (a requeued job runs again under its id)
with why it started (`cause`: start, fix, the ending before it, requeued), its SLURM id, its ending, the nodes it
ran on, the options and changes the orchestrator gave it, and its first record in train.logs, so `status`, the
page and the curves mark every restart with its cause and job id, and `restarts` says at which update each went
on. The job being watched has its own record, `runs/RUN/jobs/formal-N.json` (training_job): once the chain goes
on, that record is removed, so after a crash the next process adopts the job that runs, or starts the next one,
never a second copy of either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from orchestrator.training.checkpoints import latest_update
from orchestrator.base.files import write_atomic
from orchestrator.training.logformat import LogRecord
from orchestrator.training.monitor import progress
from orchestrator.training.machine import Runner, SlurmCluster
from orchestrator.sources.roles import ConfigRoles
from orchestrator.training.sizing import NodeRequest
from orchestrator.training.job import JobResult

CHAIN_FILE = "jobs.json"  # in the formal attempt's folder
CHAINED = ("time_limit", "preempted", "node_fail", "oom")  # endings the next job of the chain takes up
CANCELLED = "cancelled"
ENVIRONMENT = "environment"
STALLED_JOBS = 2  # jobs in a row ended by their time limit without a newer checkpoint: the chain stops
_DOWN = ("down", "drain", "drained", "draining", "fail", "failing", "not_responding", "unknown", "future")


@dataclass(frozen=True)
class Plan:
    """What the orchestrator gives the next job on top of the formal plan."""

    options: tuple[str, ...] = ()  # sbatch options (--exclude=..., --mem=...): they win over every other source
    changes: dict[str, Any] = field(default_factory=dict)  # config values changed from the plan, by field


@dataclass(frozen=True)
class Segment:
    """One run of a job: a job the cluster requeued runs again under the same id, as a segment of its own."""

    cause: str  # why it started: start, fix, the ending of the job before it (time_limit, ...), requeued
    job_id: str | None = None
    first_record: int = 0  # its first record in the attempt's train.logs
    status: str = ""  # how it ended ("" while it runs; "requeued" when the cluster put it back in the queue)
    failure_class: str | None = None
    nodes: str = ""
    note: str = ""  # what the orchestrator did for it, in words

    @property
    def ended(self) -> bool:
        return bool(self.status)

    def label(self) -> str:
        return f"{self.cause} (job {self.job_id})" if self.job_id else self.cause


class Chain:
    """The chain's record: its segments and the plan of the next job, rewritten atomically at every change."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.segments = [Segment(**s) for s in data.get("segments", [])]
        self.plan = Plan(tuple(data.get("plan", {}).get("options", ())), dict(data.get("plan", {}).get("changes", {})))

    def save(self) -> None:
        write_atomic(self.path, json.dumps({"segments": [asdict(s) for s in self.segments],
                                            "plan": {"options": list(self.plan.options),
                                                     "changes": self.plan.changes}}, indent=1))

    @property
    def running(self) -> Segment | None:
        return self.segments[-1] if self.segments and not self.segments[-1].ended else None

    def begin(self, cause: str, note: str = "") -> None:
        """A job about to start, for `cause`."""
        self.segments.append(Segment(cause, note=note))
        self.save()

    def archived(self, job_id: str | None) -> bool:
        return job_id is not None and any(s.job_id == job_id and s.ended for s in self.segments)

    def ended(self, result: JobResult) -> None:
        """The job of the running segment ended: its runs (one more for each time the cluster requeued it). A job
        already taken up (a resume adopted the ending of the job it had recorded last) changes nothing."""
        if self.running is None and self.segments and self.segments[-1].job_id == result.slurm_job_id:
            return
        first = self.running or Segment("start")
        if self.running is not None:
            self.segments.pop()
        runs = [(first.cause, result.first_record), *((r.cause, r.first_record) for r in result.restarts)]
        for i, (cause, first_record) in enumerate(runs):
            last = i == len(runs) - 1
            self.segments.append(Segment(cause, result.slurm_job_id, first_record,
                                         result.status if last else "requeued",
                                         result.failure_class if last else None, result.nodes,
                                         first.note if i == 0 else ""))
        self.save()


def restarts(segments: Sequence[Segment], records: Sequence[LogRecord]) -> list[tuple[int, str]]:
    """(update it went on from, label) of every segment after the first: the update before the first train record it
    logged (0 for one that began afresh); a segment that logged no update is left out."""
    marks = []
    for segment in segments[1:]:
        first = next((r for r in records[segment.first_record:] if r.kind == "train"), None)
        update = first.values.get("update") if first is not None else None
        if isinstance(update, float):
            marks.append((int(update) - 1, segment.label()))
    return marks


# ---------------------------------------------------------------- what follows an ending


@dataclass(frozen=True)
class Resubmit:
    plan: Plan
    note: str  # one line: what the next job does


@dataclass(frozen=True)
class Stop:
    status: str  # CANCELLED or ENVIRONMENT
    reason: str  # one line: what happened and what to do


@dataclass(frozen=True)
class Situation:
    """What `follow_up` weighs besides the ending."""

    resumable: bool  # the config has a resume field: a next job goes on from the checkpoint
    jobs: int  # jobs of the chain this process followed, the one that ended included
    max_jobs: int
    checkpoint: int | None  # the update of the newest checkpoint now
    earlier_checkpoint: int | None  # and before the job that ended started
    request: NodeRequest  # what the jobs ask of each node
    cluster: SlurmCluster | None  # the probe's view of the nodes
    values: dict[str, Any]  # the config the job ran with, by field
    roles: ConfigRoles
    plan: Plan  # what the job that ended was given
    resume: str  # the command that goes on after a stop
    stalled: int = 0  # jobs in a row, this one included, that their time limit ended without a newer checkpoint

    @property
    def progressed(self) -> bool:
        """The job saved a newer checkpoint than the newest before it."""
        return self.checkpoint is not None and (self.earlier_checkpoint is None
                                                or self.checkpoint > self.earlier_checkpoint)


def follow_up(result: JobResult, situation: Situation, run: Runner) -> Resubmit | Stop | None:
    """What comes after a job's ending: the next job of the chain, a stop, or None when the ending is not the
    cluster's (the formal run's own judgement follows)."""
    s, job = situation, f"SLURM job {result.slurm_job_id}"
    reached = progress(result.records).update
    at = f" at update {reached}" if reached is not None else ""
    goes_on = (f"goes on from the checkpoint at update {s.checkpoint}" if s.resumable and s.checkpoint is not None
               else "starts again at update 0" + ("" if s.resumable else " (the config has no resume field)"))
    if result.failure_class == CANCELLED:
        return Stop(CANCELLED, f"{job} was cancelled from outside the orchestrator (scancel){at}; "
                               f"`{s.resume}` starts the next job, which {goes_on}")
    if result.failure_class not in CHAINED:
        return None
    if s.jobs >= s.max_jobs:
        return Stop(ENVIRONMENT, f"{job} ended {result.failure_class}{at}, the {s.jobs}th job of this formal run the "
                                 f"cluster ended (--max-jobs {s.max_jobs}); `{s.resume}` goes on")
    if result.failure_class == "time_limit":
        if not s.resumable:
            return Stop(ENVIRONMENT, f"{job} reached its time limit{at} and the template cannot resume (the config "
                                     "has no resume field): every next job would start again at update 0. Choose a "
                                     "partition with a longer MaxTime (--sbatch-option partition=...), train for "
                                     f"fewer updates (--formal-set), or give the config a resume field; then "
                                     f"`{s.resume}`")
        if s.stalled >= STALLED_JOBS:
            newest = f"update {s.checkpoint}" if s.checkpoint is not None else "none"
            return Stop(ENVIRONMENT, f"{job} reached its time limit{at}, and like the job before it saved no newer "
                                     f"checkpoint (the newest: {newest}), so a next job would only repeat it: save "
                                     "checkpoints more often (the config's save interval) or give each job more time "
                                     f"(--sbatch-option time=...); then `{s.resume}`")
        return Resubmit(s.plan, f"{job} reached its time limit{at}; the next job {goes_on}")
    if result.failure_class == "preempted":
        return Resubmit(s.plan, f"{job} was preempted{at}; the next job {goes_on}")
    if result.failure_class == "node_fail":
        return _without_failed_nodes(result, s, run, f"{job} lost a node{at}", goes_on)
    return _more_memory(result, s, f"{job} ran out of host memory{at}", goes_on)


def _hostnames(nodes: str, run: Runner) -> list[str]:
    """`node[1-2],gpu7` as node names (scontrol show hostnames)."""
    code, out, _ = run(["scontrol", "show", "hostnames", nodes])
    names = out.split() if code == 0 else []
    return names or [name for name in re.split(r",(?![^\[]*\])", nodes) if name and "[" not in name]


def _down(names: list[str], run: Runner) -> list[str]:
    """The nodes among `names` that sinfo calls down, drained, failing or not responding (a trailing *)."""
    code, out, _ = run(["sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N %T"])
    found = set()
    for line in out.splitlines() if code == 0 else []:
        cells = line.split()
        if len(cells) >= 2 and (cells[1].endswith("*") or cells[1].rstrip("*~#!%$@^-+").lower() in _DOWN):
            found.add(cells[0])
    return sorted(found)


def _excluded(options: Sequence[str]) -> list[str]:
    return [name for o in options if o.startswith("--exclude=") for name in o.split("=", 1)[1].split(",") if name]


def _without_failed_nodes(result: JobResult, s: Situation, run: Runner, what: str, goes_on: str) -> Resubmit:
    names = _hostnames(result.nodes, run) if result.nodes else []
    down = _down(names, run) if names else []
    failed = down or (names if len(names) == 1 else [])
    excluded = sorted({*_excluded(s.plan.options), *failed})
    if s.cluster is not None and failed:
        wanted = s.request.partitions or ((s.cluster.default_partition,) if s.cluster.default_partition else ())
        left = [n for n in s.cluster.nodes
                if (not wanted or set(wanted) & set(n.partitions)) and n.name not in excluded]
        if len(left) < s.request.nodes:  # excluding them would leave too few nodes: the cluster chooses
            return Resubmit(s.plan, f"{what} ({', '.join(failed)}); excluding it would leave {len(left)} of the "
                                    f"{s.request.nodes} node(s) the job needs, so the next job {goes_on} on any node")
    if not failed:
        return Resubmit(s.plan, f"{what} (which one, sinfo no longer says); the next job {goes_on}")
    options = tuple(o for o in s.plan.options if not o.startswith("--exclude=")) + (f"--exclude={','.join(excluded)}",)
    return Resubmit(replace(s.plan, options=options), f"{what} ({', '.join(failed)}); the next job {goes_on}, "
                                                      f"excluding {', '.join(excluded)}")


def _more_memory(result: JobResult, s: Situation, what: str, goes_on: str) -> Resubmit | Stop:
    """Twice the memory within the partition's largest node, else half the micro-batch (twice the accumulation)."""
    if s.cluster is not None and s.request.memory_mb is not None:
        wanted = s.request.partitions or ((s.cluster.default_partition,) if s.cluster.default_partition else ())
        sizes = [n.memory_mb for n in s.cluster.nodes if not wanted or set(wanted) & set(n.partitions)]
        largest = max(sizes, default=0)
        if s.request.memory_mb < largest:
            memory = min(2 * s.request.memory_mb, largest)
            options = tuple(o for o in s.plan.options if not o.startswith(("--mem=", "--mem-per-cpu="))) + (
                f"--mem={memory}M",)
            return Resubmit(replace(s.plan, options=options),
                            f"{what}; the next job asks for {memory} MB instead of {s.request.memory_mb} MB and "
                            f"{goes_on}")
    micro, accumulation = s.roles.field_of("micro_batch"), s.roles.field_of("accumulation_steps")
    size = s.values.get(micro) if micro else None
    if micro is None or not isinstance(size, int) or isinstance(size, bool) or size < 2:
        return Stop(ENVIRONMENT, f"{what} with the whole memory of a node and a micro-batch that cannot shrink "
                                 "further: lower the group size or the token caps (--formal-set), or choose nodes "
                                 f"with more memory (--sbatch-option partition=...); then `{s.resume}`")
    changes: dict[str, Any] = {**s.plan.changes, micro: size // 2}
    steps = s.values.get(accumulation) if accumulation else None
    kept = ""
    if accumulation is not None and isinstance(steps, int) and not isinstance(steps, bool):
        changes[accumulation] = steps * 2
        kept = f" and {accumulation} {steps} -> {steps * 2}"
    return Resubmit(replace(s.plan, changes=changes),
                    f"{what}; the next job trains with {micro} {size} -> {size // 2}{kept} and {goes_on}")


# ---------------------------------------------------------------- the chain, followed


class Job(Protocol):
    def run(self) -> JobResult: ...


@dataclass(frozen=True)
class ChainEnd:
    result: JobResult  # the last job's
    stop: Stop | None  # a stop the orchestrator must make (cancelled, environment); None: judge the result


def run_chain(chain: Chain, start: Callable[[Plan], Job], record: Path, *, first_cause: str, first_note: str,
              outputs: Path, situation: Callable[[JobResult, Plan, int, int | None], Situation], run: Runner,
              on_step: Callable[[str], None]) -> ChainEnd:
    """Follow the chain's jobs until one ends in a way that is not the cluster's, or must stop the run. `start`
    makes the job for a plan; `record` is the watched job's record (runs/RUN/jobs/formal-N.json); `situation` is
    asked, after each job, (result, its plan, the jobs followed so far, the newest checkpoint before it)."""
    recorded = _read(record)
    if recorded and chain.archived(recorded.get("slurm_job_id")):
        record.unlink()  # a job the chain already took up: the next one had not started yet
        recorded = None
    if not recorded and chain.running is None:
        last = chain.segments[-1] if chain.segments else None
        chain.begin(last.failure_class or last.status if last else first_cause, "" if last else first_note)
    jobs = stalled = 0
    while True:
        before = latest_update(outputs)
        plan = chain.plan
        result = start(plan).run()
        jobs += 1
        chain.ended(result)
        now = situation(result, plan, jobs, before)
        stalled = stalled + 1 if result.failure_class == "time_limit" and not now.progressed else 0
        step = follow_up(result, replace(now, stalled=stalled), run)
        if step is None:
            return ChainEnd(result, None)
        record.unlink(missing_ok=True)  # taken up: a resume starts the next job, it never adopts this one again
        if isinstance(step, Stop):
            on_step(step.reason)
            return ChainEnd(result, step)
        chain.plan = step.plan
        chain.begin(result.failure_class or result.status, step.note)
        on_step(step.note)


def _read(record: Path) -> dict | None:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return None
