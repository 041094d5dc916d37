"""Watch a GRPO run: detect anomalies in its ``train.logs`` records, report progress.

The records come from orchestrator.training.logformat, which reads whatever format the researcher's logging
writes (the first guess, a learned format, or TensorBoard event files) and maps metric names to one
vocabulary (``loss``, ``grad_norm``, ``reward_mean``, ``kl``, ``update``, ...).

Detectors, each a pure function of the records (thresholds live in ``MonitorConfig``):

============================  =======  ======================================================
detector                      serious  fires when
============================  =======  ======================================================
detect_stderr                 yes      stderr holds "CUDA out of memory" / "OutOfMemoryError"
                                       (cuda_oom), "NCCL error" / "NCCL WARN" /
                                       "ncclInternalError" (nccl_error), or a Python traceback
                                       or a launcher's failed ranks (crash); not serious: after
                                       a done line, ranks killed by a signal with no traceback
                                       (exit_after_done)
detect_nan                    yes      loss, policy_loss or kl (nan_loss) or grad_norm
                                       (nan_grad_norm) of a train line is nan or +-inf
detect_grad_norm_explosion    yes      grad_norm > ``grad_norm_abs_max`` (1e4), or
                                       > ``grad_norm_explosion_factor`` (10) x the median of the
                                       previous ``grad_norm_window`` (5) updates
detect_kl_blowup              yes      kl > ``kl_max`` (1.0)
detect_invalid_rise           yes      invalid_action_rate averaged over ``invalid_rise_window``
                                       (3) updates sits more than ``invalid_rise`` (0.3) above its
                                       early level (the mean of the first ``invalid_early_updates``
                                       (3) updates): the policy is losing its action format;
                                       the evidence names the outputs that failed (Sample_EP.logs)
detect_reward_collapse        yes      the moving average of reward_mean over
                                       ``reward_collapse_window`` (5) updates sits more than
                                       ``reward_collapse_drop`` (0.5) below its best so far,
                                       once ``min_updates_for_trends`` (10) updates are logged
detect_hang                   yes      no new train or eval line for ``hang_seconds`` (1800 s)
detect_flat_reward            no*      reward_std == 0 and frac_reward_zero_std == 1 for
                                       ``flat_reward_updates`` (20) consecutive updates
============================  =======  ======================================================

* serious only with ``flat_reward_serious=True``: a tiny random model always has flat rewards.

The invalid-action rate is found generically: ``invalid_action_rate`` is the log vocabulary's name
(``logformat.METRIC_ALIASES``: ``invalid_rate``, ``invalid_move_rate``, ... or the key a learned log
format maps to ``invalid_rate``), whatever the template calls it; the failed outputs are read from the
run's Sample_EP.logs by the words that say an action failed (``failed_outputs``), not by its layout. The
rise is absolute, in fractions of actions: 0.3 is far above the noise of a 3-update mean (a group of 8
episodes of 5 turns and 2 agents is 80 actions; at a rate of 0.1 one update's standard error is 0.03).

The collapse drop is absolute, in reward units: the Cleanup game pays +1 per apple and
-0.1 per invalid action, so 0.5 is half an apple per agent-episode, well above the noise of a
5-update average of group means.

Each detector reports the first update where its condition holds, so repeated polls of a
growing log give the same answer. ``detect_all``, ``progress`` and ``summarize_trends`` read one run
across its jobs (``current_run``): the template appends to ``train.logs``, a job resumed from a
checkpoint logs again the updates after it, and a relaunch from scratch starts again at update 1; each
update is read once, with the values of the job that went on, so an update seen again after a resume is
no anomaly. The hang detector looks at the process that logs now (from the last start line on).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from orchestrator.base.execution import exit_after_done, launcher_failures, rank_errors
from orchestrator.training.failed_outputs import failed_outputs
from orchestrator.training.logformat import LogRecord

EVIDENCE_LIMIT = 2000

_TIMESTAMP = "%Y-%m-%dT%H:%M:%S"
_LOSS_KEYS = ("loss", "policy_loss", "kl")
SampleReader = Callable[[], str]  # the end of the run's Sample_EP.logs, read when asked


@dataclass(frozen=True)
class MonitorConfig:
    grad_norm_explosion_factor: float = 10.0  # grad_norm > factor x median of the previous window -> explosion
    grad_norm_window: int = 5  # previous updates whose median grad_norm is the reference
    grad_norm_abs_max: float = 1e4  # grad_norm above this -> explosion, whatever came before
    kl_max: float = 1.0  # mean per-token KL above this -> blow-up
    flat_reward_updates: int = 20  # reward_std == 0 and frac_reward_zero_std == 1 for K consecutive updates -> flat
    flat_reward_serious: bool = False  # flat rewards stop the run only when set
    reward_collapse_drop: float = 0.5  # moving-average reward falling this far (absolute) below its best -> collapse
    reward_collapse_window: int = 5  # updates in the reward moving average
    invalid_rise: float = 0.3  # invalid-action rate (windowed) this far (absolute) above its early level -> serious
    invalid_early_updates: int = 3  # the first updates whose mean invalid-action rate is the early level
    invalid_rise_window: int = 3  # updates in the invalid-action rate's moving average
    hang_seconds: float = 1800.0  # no new train/eval line for T seconds while the process lives -> hung
    min_updates_for_trends: int = 10  # train lines needed before reward-collapse is judged (two windows)


@dataclass(frozen=True)
class Anomaly:
    kind: str
    serious: bool
    update: int | None
    message: str
    evidence: str


@dataclass
class Progress:
    update: int | None
    total_updates: int | None
    episode: int | None
    reward_mean: float | None
    loss: float | None
    eta_seconds: float | None


# ---------------------------------------------------------------- helpers


def current_run(records: Sequence[LogRecord]) -> list[LogRecord]:
    """The latest run across its jobs, each update once: a train record whose update is not after the latest one
    so far (a job resumed from its checkpoint at update k logs k + 1 again; a relaunch from scratch logs 1 again)
    replaces every earlier record from that update on (train, eval, done); start lines stay where they were."""
    kept: list[LogRecord] = []
    latest: int | None = None
    for record in records:
        update = _update(record)
        if record.kind == "train" and update is not None:
            if latest is not None and update <= latest:
                kept = [r for r in kept if r.kind == "start" or ((u := _update(r)) is not None and u < update)]
            latest = update
        kept.append(record)
    return kept


def since_last_start(records: Sequence[LogRecord]) -> list[LogRecord]:
    """The records of the process that logs now: from the last start line on (all of them when there is none)."""
    starts = [i for i, r in enumerate(records) if r.kind == "start"]
    return list(records[starts[-1]:] if starts else records)


def _num(record: LogRecord, key: str) -> float | None:
    value = record.values.get(key)
    return value if isinstance(value, float) else None


def _update(record: LogRecord) -> int | None:
    value = _num(record, "update")
    return int(value) if value is not None and math.isfinite(value) else None


def _trains(records: Sequence[LogRecord]) -> list[LogRecord]:
    return [r for r in records if r.kind == "train"]


def _series(records: Sequence[LogRecord], key: str) -> list[tuple[LogRecord, float]]:
    """(train record, value) for every train line with a finite value under ``key``."""
    pairs = ((r, _num(r, key)) for r in _trains(records))
    return [(r, v) for r, v in pairs if v is not None and math.isfinite(v)]


def _trim(text: str, limit: int = EVIDENCE_LIMIT) -> str:
    """Keep the end (where the trigger line and the exception are), dropping whole lines first."""
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    while len(lines) > 1 and len("\n".join(lines)) > limit - 4:
        lines.pop(0)
    return "...\n" + "\n".join(lines)[-(limit - 4):]


def _evidence(records: Sequence[LogRecord]) -> str:
    return _trim("\n".join(r.raw for r in records))


def _g(value: float) -> str:
    return f"{value:.4g}"


# ---------------------------------------------------------------- detectors


def detect_nan(records: Sequence[LogRecord], config: MonitorConfig) -> Anomaly | None:
    for record in _trains(records):
        bad_loss = [k for k in _LOSS_KEYS if (v := _num(record, k)) is not None and not math.isfinite(v)]
        grad_norm = _num(record, "grad_norm")
        bad_grad = grad_norm is not None and not math.isfinite(grad_norm)
        if not bad_loss and not bad_grad:
            continue
        update = _update(record)
        if bad_loss:
            seen = ", ".join(f"{k}={record.values[k]}" for k in bad_loss)
            return Anomaly("nan_loss", True, update,
                           f"non-finite {seen} at update {update}; lower the learning rate, check rewards/advantages "
                           "for nan/inf and the log-prob ratio for overflow (bf16), keep the gradient clipping norm small",
                           _evidence([record]))
        return Anomaly("nan_grad_norm", True, update,
                       f"non-finite grad_norm={record.values['grad_norm']} at update {update}; lower the learning rate, "
                       "check for bf16 overflow in the loss, look for nan/inf rewards",
                       _evidence([record]))
    return None


def detect_grad_norm_explosion(records: Sequence[LogRecord], config: MonitorConfig) -> Anomaly | None:
    series = _series(records, "grad_norm")
    window = config.grad_norm_window
    for i, (record, grad_norm) in enumerate(series):
        update = _update(record)
        hint = "lower the learning rate or the gradient clipping norm, add warm-up steps, check bf16 overflow"
        if grad_norm > config.grad_norm_abs_max:
            return Anomaly("grad_norm_explosion", True, update,
                           f"grad_norm {_g(grad_norm)} at update {update} exceeds {_g(config.grad_norm_abs_max)}; "
                           + hint, _evidence([record]))
        if i < window:
            continue
        previous = series[i - window:i]
        median = statistics.median(v for _, v in previous)
        # a window of zero norms (no learning signal yet) gives no scale to compare against
        if median > 0 and grad_norm > config.grad_norm_explosion_factor * median:
            return Anomaly("grad_norm_explosion", True, update,
                           f"grad_norm {_g(grad_norm)} at update {update} is {_g(grad_norm / median)}x the median "
                           f"{_g(median)} of the previous {window} updates; " + hint,
                           _evidence([r for r, _ in previous] + [record]))
    return None


def detect_kl_blowup(records: Sequence[LogRecord], config: MonitorConfig) -> Anomaly | None:
    for record, kl in _series(records, "kl"):
        if kl > config.kl_max:
            update = _update(record)
            return Anomaly("kl_blowup", True, update,
                           f"kl {_g(kl)} at update {update} exceeds {_g(config.kl_max)}; lower the learning rate, "
                           "raise the KL coefficient, use fewer passes per rollout or a tighter clip",
                           _evidence([record]))
    return None


def detect_reward_collapse(records: Sequence[LogRecord], config: MonitorConfig) -> Anomaly | None:
    series = _series(records, "reward_mean")
    window = config.reward_collapse_window
    best: float | None = None
    for i in range(window - 1, len(series)):
        current = statistics.fmean(v for _, v in series[i - window + 1:i + 1])
        best = current if best is None else max(best, current)
        if i + 1 < config.min_updates_for_trends:
            continue
        if best - current > config.reward_collapse_drop:
            record = series[i][0]
            update = _update(record)
            return Anomaly("reward_collapse", True, update,
                           f"reward_mean averaged over {window} updates fell to {_g(current)} at update {update}, "
                           f"{_g(best - current)} below its best {_g(best)}; lower the learning rate, raise the KL coefficient, "
                           "check the reward function and sample transcripts for degenerate outputs",
                           _evidence([r for r, _ in series[i - window + 1:i + 1]]))
    return None


def detect_invalid_rise(records: Sequence[LogRecord], config: MonitorConfig,
                        samples: SampleReader = lambda: "") -> Anomaly | None:
    """The invalid-action rate climbing well above its early level; `samples` reads the end of the run's
    Sample_EP.logs (only when it climbed), whose failed outputs become the evidence."""
    series = _series(records, "invalid_action_rate")
    early_updates, window = config.invalid_early_updates, config.invalid_rise_window
    early = statistics.fmean(v for _, v in series[:early_updates]) if len(series) >= early_updates else None
    for i in range(early_updates + window - 1, len(series)):
        recent = series[i - window + 1:i + 1]
        level = statistics.fmean(v for _, v in recent)
        if early is None or level - early <= config.invalid_rise:
            continue
        update = _update(series[i][0])
        first, last = _update(series[0][0]), _update(series[early_updates - 1][0])
        climb = series[early_updates:i + 1][-10:]
        rose = [f"update {_update(r)}: {_g(v)}" for r, v in climb if v - early > config.invalid_rise / 2]
        failed = failed_outputs(samples())
        return Anomaly("invalid_action_rise", True, update,
                       f"invalid_action_rate rose from {_g(early)} (updates {first}-{last}) to {_g(level)} "
                       f"(mean of the {window} updates to update {update}; it rose at {', '.join(rose)}): the policy "
                       f"is losing its action format; {failed.summary}; lower the learning rate or its value after "
                       "warm-up, raise the KL coefficient to the reference model, tighten the clip range, and check "
                       "the failed outputs against the action parser",
                       _trim(_evidence([r for r, _ in recent]) + "\n\n" + failed.text))
    return None


def detect_flat_reward(records: Sequence[LogRecord], config: MonitorConfig) -> Anomaly | None:
    streak: list[LogRecord] = []
    for record in _trains(records):
        if _num(record, "reward_std") == 0 and _num(record, "frac_reward_zero_std") == 1:
            streak.append(record)
        else:
            streak = []
        if len(streak) == config.flat_reward_updates:
            update = _update(record)
            return Anomaly("flat_reward", config.flat_reward_serious, update,
                           f"reward_std == 0 and frac_reward_zero_std == 1 for {len(streak)} consecutive updates "
                           f"up to update {update}: no learning signal; raise the temperature or the group size, shape the "
                           "reward, or check that actions parse (invalid_action_rate)",
                           _evidence(streak[:2] + streak[-2:]))
    return None


def _naive_local(moment: datetime) -> datetime:
    # log times are naive local time; an aware `now` is brought into that frame before comparing
    return moment.astimezone().replace(tzinfo=None) if moment.tzinfo is not None else moment


def detect_hang(records: Sequence[LogRecord], now: datetime, last_output_at: datetime | None,
                config: MonitorConfig) -> Anomaly | None:
    run = since_last_start(current_run(records))
    if any(r.kind == "done" for r in run):
        return None
    # an eval line is progress too: it comes after its update's train line
    timed = [(r.time, r) for r in run if r.kind in ("train", "eval") and r.time is not None]
    last: LogRecord | None
    if timed:
        since, last = timed[-1]
        update = _update(last)
        what = f"the last {last.kind} line (update {update})"
    else:
        # before the first update, any output (model loading, the start line) counts as alive
        starts = [(r.time, r) for r in run if r.kind == "start" and r.time is not None]
        last = starts[-1][1] if starts else None
        candidates = [t for t, _ in starts[-1:]] + ([_naive_local(last_output_at)] if last_output_at else [])
        if not candidates:
            return None
        since, update, what = max(candidates), None, "the run started, before any update"
    silent = (_naive_local(now) - since).total_seconds()
    if silent <= config.hang_seconds:
        return None
    stamp = _naive_local(now).strftime(_TIMESTAMP)
    evidence = (last.raw + "\n" if last is not None else "") + f"(no new train/eval line for {silent:.0f} s at {stamp})"
    return Anomaly("hung", True, update,
                   f"no new train/eval line for {silent:.0f} s (limit {config.hang_seconds:.0f} s) since {what}; "
                   "check for a stuck collective (NCCL_DEBUG=INFO, py-spy dump), a generation loop without a token "
                   "cap, or a process that died while the others wait", _trim(evidence))


_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
_NCCL = re.compile(r"NCCL error|NCCL WARN|ncclInternalError")
_TRACEBACK = "Traceback (most recent call last)"
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
# launchers (accelerate, torchrun) end with their own traceback about the failed child; the child's is the cause
_LAUNCHER_ERRORS = ("CalledProcessError", "ChildFailedError")


def _tracebacks(lines: list[str]) -> list[list[str]]:
    """Each traceback block: from its header through the first unindented line (the exception)."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines:
        body = _RANK_PREFIX.sub("", line)
        if _TRACEBACK in body:
            current = [line]
            blocks.append(current)
        elif current is not None:
            current.append(line)
            if body.strip() and not body[0].isspace():
                current = None
    return blocks


def _matching(lines: list[str], pattern: re.Pattern[str]) -> list[str]:
    return [line for line in lines if pattern.search(line)]


def detect_stderr(stderr_tail: str, logged_done: bool = False) -> Anomaly | None:
    """A crash, OOM or NCCL error in the job's stderr. Under a launcher the evidence is each rank's own error
    and the launcher's list of failed ranks; a run whose log said done and then lost a process to a signal,
    with no traceback of its own, is `exit_after_done`, not serious: a crash at exit, not of the code."""
    lines = stderr_tail.splitlines()
    for kind, pattern, hint in (
        ("cuda_oom", _OOM, "lower the micro-batch size or the token caps, enable gradient checkpointing and bf16, "
                           "or use more GPUs"),
        ("nccl_error", _NCCL, "a peer process may have died first (check its traceback); try NCCL_DEBUG=INFO, "
                              "NCCL_P2P_DISABLE=1 or NCCL_IB_DISABLE=1"),
    ):
        hits = _matching(lines, pattern)
        if hits:
            return Anomaly(kind, True, None, f"{hits[-1].strip()[:300]}; {hint}", _trim("\n".join(hits[-10:])))
    blocks, failures = _tracebacks(lines), launcher_failures(stderr_tail)
    if not blocks and not failures:
        return None
    after_done = exit_after_done(stderr_tail, logged_done)
    if after_done:
        return Anomaly("exit_after_done", False, None, after_done, _trim(rank_errors(stderr_tail)))
    causes = [b for b in blocks if not any(name in b[-1] for name in _LAUNCHER_ERRORS)]
    block = (causes or blocks)[-1] if blocks else [""]
    cause = str(failures[0]) if failures and not causes else _RANK_PREFIX.sub("", block[-1]).strip()[:300]
    when = " after train.logs said done" if logged_done else ""
    return Anomaly("crash", True, None,
                   f"the training process crashed{when}: {cause}; fix the code or config the traceback points at",
                   _trim(rank_errors(stderr_tail) if failures else "\n".join(block)))


def detect_all(records: Sequence[LogRecord], *, stderr_tail: str = "", now: datetime | None = None,
               last_output_at: datetime | None = None, config: MonitorConfig = MonitorConfig(),
               samples: SampleReader = lambda: "") -> list[Anomaly]:
    """Every anomaly in the latest run, serious ones first (otherwise in detector order); `samples` reads the end
    of the run's Sample_EP.logs when a detector needs it."""
    run = current_run(records)
    found = [
        detect_stderr(stderr_tail, logged_done=any(r.kind == "done" for r in run)),
        detect_nan(run, config),
        detect_grad_norm_explosion(run, config),
        detect_kl_blowup(run, config),
        detect_invalid_rise(run, config, samples),
        detect_reward_collapse(run, config),
        detect_hang(run, now, last_output_at, config) if now is not None else None,
        detect_flat_reward(run, config),
    ]
    return sorted((a for a in found if a is not None), key=lambda a: not a.serious)


# ---------------------------------------------------------------- progress and trends


def progress(records: Sequence[LogRecord]) -> Progress:
    """Where the latest run stands; ETA = mean step_time of the last 5 updates x updates remaining. The total
    is the start line's, else the latest update's own (a `3/10` progress line)."""
    run = current_run(records)
    starts = [r for r in run if r.kind == "start"]
    trains = _trains(run)
    totals = [t for r in starts[-1:] + trains[-1:] if (t := _num(r, "updates")) is not None and math.isfinite(t)]
    total_updates = int(totals[0]) if totals else None
    if not trains:
        return Progress(None, total_updates, None, None, None, None)
    latest = trains[-1]
    update = _update(latest)
    episode = _num(latest, "episode")
    eta: float | None = None
    step_times = [t for r in trains[-5:] if (t := _num(r, "step_time")) is not None and math.isfinite(t)]
    if any(r.kind == "done" for r in run):
        eta = 0.0
    elif total_updates is not None and update is not None and step_times:
        eta = statistics.fmean(step_times) * max(total_updates - update, 0)
    return Progress(update=update, total_updates=total_updates,
                    episode=int(episode) if episode is not None and math.isfinite(episode) else None,
                    reward_mean=_num(latest, "reward_mean"), loss=_num(latest, "loss"), eta_seconds=eta)


def summarize_trends(records: Sequence[LogRecord]) -> dict[str, float]:
    """Headline numbers of the latest run for a review; keys whose data is missing are left out.

    Keys: updates, reward_mean_first/_last/_best, invalid_action_rate_first_quarter/_last_quarter,
    completion_clipped_ratio_mean, eval_reward_mean_last.
    """
    run = current_run(records)
    summary: dict[str, float] = {"updates": float(len(_trains(run)))}
    rewards = [v for _, v in _series(run, "reward_mean")]
    if rewards:
        summary.update(reward_mean_first=rewards[0], reward_mean_last=rewards[-1], reward_mean_best=max(rewards))
    invalid = [v for _, v in _series(run, "invalid_action_rate")]
    if invalid:
        quarter = max(1, len(invalid) // 4)
        summary["invalid_action_rate_first_quarter"] = statistics.fmean(invalid[:quarter])
        summary["invalid_action_rate_last_quarter"] = statistics.fmean(invalid[-quarter:])
    clipped = [v for _, v in _series(run, "completion_clipped_ratio")]
    if clipped:
        summary["completion_clipped_ratio_mean"] = statistics.fmean(clipped)
    evals = [v for r in run if r.kind == "eval" and (v := _num(r, "eval_reward_mean")) is not None]
    if evals:
        summary["eval_reward_mean_last"] = evals[-1]
    return summary
