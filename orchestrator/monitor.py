"""Watch a GRPO run: parse ``train.logs``, detect anomalies, report progress.

A researcher's logging is theirs (or the LLM's, when the template leaves logging to a CUSTOMIZE
hole), so several line formats are read, and metric names are mapped to one vocabulary
(``METRIC_ALIASES``: ``gradNorm`` and ``grad_norm`` are both ``grad_norm``, ``reward`` is
``reward_mean``, ``step`` is ``update``, ``learning_rate`` is ``lr``, TRL's ``completions/mean_length``
is ``completion_mean_length``, ...); unknown names are kept as written.

JSON lines: one object per line; its kind is its ``event``, ``kind``, ``type`` or ``phase`` value
(``train`` when absent), its time an ISO ``time`` or ``timestamp`` value.

Lines in no declared format that hold two or more numeric `key=value` or `key: value` pairs are
updates too, and a printed Python dict is read like JSON.

Key=value lines, as the Cleanup template's ``RunLogs`` writes them::

    2026-11-23T09:40:15 train update=1 episode=2 lr=3e-07 ... reward_mean=-0.3 step_time=14.5557

``TIMESTAMP KIND key=value ...`` with KIND in start/train/eval/done, local time to the second,
floats as ``{:.6g}`` (so ``nan``, ``inf`` and ``-inf`` appear) and spaces in strings as ``_``.
The same line without its timestamp goes to stdout; ``parse_line`` accepts both.

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
detect_reward_collapse        yes      the moving average of reward_mean over
                                       ``reward_collapse_window`` (5) updates sits more than
                                       ``reward_collapse_drop`` (0.5) below its best so far,
                                       once ``min_updates_for_trends`` (10) updates are logged
detect_hang                   yes      no new train or eval line for ``hang_seconds`` (1800 s)
detect_flat_reward            no*      reward_std == 0 and frac_reward_zero_std == 1 for
                                       ``flat_reward_updates`` (20) consecutive updates
============================  =======  ======================================================

* serious only with ``flat_reward_serious=True``: a tiny random model always has flat rewards.

The collapse drop is absolute, in reward units: the Cleanup game pays +1 per apple and
-0.1 per invalid action, so 0.5 is half an apple per agent-episode, well above the noise of a
5-update average of group means.

Each detector reports the first update where its condition holds, so repeated polls of a
growing log give the same answer. ``detect_all``, ``progress`` and ``summarize_trends`` look at
the latest run only (records from the last start line on), because the template appends to
``train.logs`` and a relaunch into the same log folder continues the old file.
"""

from __future__ import annotations

import ast
import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.execution import exit_after_done, launcher_failures, rank_errors

KINDS = ("start", "train", "eval", "done")
EVIDENCE_LIMIT = 2000

_TIMESTAMP = "%Y-%m-%dT%H:%M:%S"
_LINE = re.compile(r"^(?:(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}) )?(?P<kind>" + "|".join(KINDS) + ")"
                   r"(?P<fields>(?: [A-Za-z_]\w*=\S*)+)$")
# exactly what `{:.6g}` and str(int) print; float() alone would also take "1_000" or "infinity"
_NUMBER = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf)$", re.IGNORECASE)
_LOSS_KEYS = ("loss", "policy_loss", "kl")


@dataclass(frozen=True)
class LogRecord:
    kind: str
    time: datetime | None
    values: dict[str, float | str]
    line_no: int
    raw: str


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


# ---------------------------------------------------------------- parsing


# canonical metric name -> the spellings seen in the wild, compared without case, "_", "/" or "-"
METRIC_ALIASES: dict[str, tuple[str, ...]] = {
    "update": ("update", "step", "global_step", "iteration", "train_step"),
    "updates": ("updates", "max_steps", "total_steps", "total_updates", "num_updates"),
    "episode": ("episode", "episodes_done", "episodes"),  # episodes played so far, on a train line
    "loss": ("loss", "train_loss", "total_loss"),
    "policy_loss": ("policy_loss", "pg_loss"),
    "kl": ("kl", "kl_mean", "kl_divergence"),
    "grad_norm": ("grad_norm", "gradNorm", "gradient_norm", "gnorm", "total_norm"),
    "lr": ("lr", "learning_rate"),
    "reward_mean": ("reward_mean", "reward", "mean_reward", "rewards/mean", "episode_return"),
    "reward_std": ("reward_std", "rewards/std", "std_reward"),
    "frac_reward_zero_std": ("frac_reward_zero_std", "zero_std_fraction"),
    "invalid_action_rate": ("invalid_action_rate", "invalid_rate", "invalid_move_rate", "invalid_actions_rate"),
    "completion_clipped_ratio": ("completion_clipped_ratio", "completions/clipped_ratio", "truncated_ratio"),
    "completion_mean_length": ("completion_mean_length", "completions/mean_length", "mean_completion_length"),
    "clip_ratio": ("clip_ratio", "clip_fraction", "clipfrac"),
    "step_time": ("step_time", "seconds", "update_time"),
    "eval_reward_mean": ("eval_reward_mean", "eval_reward", "eval/reward"),
}
_ALIAS = {re.sub(r"[^a-z0-9]", "", alias.lower()): name for name, aliases in METRIC_ALIASES.items() for alias in aliases}
_JSON_KIND_KEYS = ("event", "kind", "type", "phase")
_JSON_TIME_KEYS = ("time", "timestamp")


def canonical_metric(key: str) -> str:
    """The vocabulary's name for a logged key; `train/grad_norm` style prefixes are tried without the prefix."""
    for candidate in (key, key.rsplit("/", 1)[-1]):
        name = _ALIAS.get(re.sub(r"[^a-z0-9]", "", candidate.lower()))
        if name is not None:
            return name
    return key


def parse_line(line: str, line_no: int = 0) -> LogRecord | None:
    """One log line -> a record; None for anything else (tracebacks, warnings, blank lines)."""
    raw = line.rstrip("\r\n")
    if raw.lstrip().startswith("{"):
        return _parse_json_line(raw, line_no)
    match = _LINE.match(raw.strip())
    if match is None:
        return _parse_loose_line(raw, line_no)
    values: dict[str, float | str] = {}
    for token in match["fields"].split():
        key, _, value = token.partition("=")
        values[canonical_metric(key)] = float(value) if _NUMBER.match(value) else value
    stamp = match["time"]
    try:
        time = datetime.strptime(stamp, _TIMESTAMP) if stamp else None
    except ValueError:
        return None
    return LogRecord(kind=match["kind"], time=time, values=values, line_no=line_no, raw=raw)


_PAIR = re.compile(r"([A-Za-z_][\w/.-]*)\s*[=:]\s*([^\s,;|]+)")
_STAMP = re.compile(r"^\s*\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})")


def _parse_loose_line(raw: str, line_no: int) -> LogRecord | None:
    """A line in no declared format that still holds two or more numeric `key=value` (or `key: value`)
    pairs, e.g. `[2026-11-23 10:00:00] step=3 | loss=0.52 | gradNorm=1.3`: an update (an evaluation
    when every key starts with eval)."""
    pairs = [(key, value) for key, value in _PAIR.findall(raw) if _NUMBER.match(value)]
    if len(pairs) < 2:
        return None
    values: dict[str, float | str] = {canonical_metric(key): float(value) for key, value in pairs}
    kind = "eval" if all(key.lower().startswith("eval") for key, _ in pairs) else "train"
    stamp = _STAMP.match(raw)
    return LogRecord(kind=kind, time=_iso_time(stamp.group(1).replace(" ", "T")) if stamp else None, values=values,
                     line_no=line_no, raw=raw)


def _parse_json_line(raw: str, line_no: int) -> LogRecord | None:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        try:  # a Python dict printed as is: {'loss': 0.5, 'grad_norm': nan}
            data = ast.literal_eval(raw.strip().replace("nan", "None").replace("inf", "None"))
        except (ValueError, SyntaxError):
            return None
    if not isinstance(data, dict):
        return None
    kind = next((str(data.pop(k)) for k in _JSON_KIND_KEYS if isinstance(data.get(k), str)), "train")
    stamp = next((data.pop(k) for k in _JSON_TIME_KEYS if isinstance(data.get(k), str)), None)
    values: dict[str, float | str] = {}
    for key, value in data.items():
        if isinstance(value, bool):
            value = float(value)
        elif isinstance(value, (int, float)):
            value = float(value)
        elif value is None:
            value = math.nan
        elif not isinstance(value, str):
            continue
        values[canonical_metric(key)] = value
    if kind == "start" and "update" in values and "updates" not in values:
        values["updates"] = values.pop("update")
    return LogRecord(kind=kind.lower(), time=_iso_time(stamp), values=values, line_no=line_no, raw=raw)


def _iso_time(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        return None


def parse_log(text: str) -> list[LogRecord]:
    """All records of a log's text; line numbers are 1-based."""
    records = (parse_line(line, n) for n, line in enumerate(text.splitlines(), start=1))
    return [r for r in records if r is not None]


def current_run(records: Sequence[LogRecord]) -> list[LogRecord]:
    """The records from the last start line on (all of them when there is none)."""
    starts = [i for i, r in enumerate(records) if r.kind == "start"]
    return list(records[starts[-1]:] if starts else records)


class LogTail:
    """Incremental reader of a growing log file; ``poll`` returns the records added since the last poll."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.records: list[LogRecord] = []
        self._offset = 0
        self._partial = b""
        self._line_no = 0

    def poll(self) -> list[LogRecord]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(0, 2)
                if fh.tell() < self._offset:  # truncated or replaced: a new log, read it from the start
                    self.records, self._offset, self._partial, self._line_no = [], 0, b"", 0
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        new: list[LogRecord] = []
        for line in complete:
            self._line_no += 1
            record = parse_line(line.decode("utf-8", errors="replace"), self._line_no)
            if record is not None:
                new.append(record)
        self.records.extend(new)
        return new


# ---------------------------------------------------------------- helpers


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
    run = current_run(records)
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
               last_output_at: datetime | None = None, config: MonitorConfig = MonitorConfig()) -> list[Anomaly]:
    """Every anomaly in the latest run, serious ones first (otherwise in detector order)."""
    run = current_run(records)
    found = [
        detect_stderr(stderr_tail, logged_done=any(r.kind == "done" for r in run)),
        detect_nan(run, config),
        detect_grad_norm_explosion(run, config),
        detect_kl_blowup(run, config),
        detect_reward_collapse(run, config),
        detect_hang(run, now, last_output_at, config) if now is not None else None,
        detect_flat_reward(run, config),
    ]
    return sorted((a for a in found if a is not None), key=lambda a: not a.serious)


# ---------------------------------------------------------------- progress and trends


def progress(records: Sequence[LogRecord]) -> Progress:
    """Where the latest run stands; ETA = mean step_time of the last 5 updates x updates remaining."""
    run = current_run(records)
    starts = [r for r in run if r.kind == "start"]
    total = _num(starts[-1], "updates") if starts else None
    total_updates = int(total) if total is not None else None
    trains = _trains(run)
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
