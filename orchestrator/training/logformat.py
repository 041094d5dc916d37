"""How a run's ``train.logs`` is read, whatever the researcher's logging writes.

The first guess (``LogFormat()``, syntax ``guess``) reads, line by line and with nothing to configure,
the formats researchers write: JSON lines and printed Python dicts (``nan`` and ``inf`` as values);
``key=value`` pairs (tqdm-style postfixes ``loss=0.1, reward=0.3`` and ``3/10`` progress included);
``key: value`` and whitespace ``name value`` pairs (where at least one name is a known metric); CSV and
TSV with a header line, and whitespace-aligned tables; each behind an optional timestamp and a
logging module's prefix (``INFO:grpo:``, ``2026-11-25 10:00:00,123 - grpo - INFO - ``, ``| INFO |``,
``[grpo][INFO]``, glog's ``I1125 10:00:00.123 42 train.py:7]``, Accelerate's
``11/25/2026 10:00:00 - INFO - __main__ - ``, torchrun's ``[rank0]:``).

Every line is read as a terminal shows it: a progress bar that redraws its line with carriage returns
is its last redraw, and ANSI escape codes (colours, cursor moves, line clearing) are taken out; the file
is read as bytes, so a carriage return is never mistaken for a line break.

A log the guess cannot read is described once by the LLM: a ``LogFormat`` names one syntax (or a
regular expression with named groups), which lines are evaluations, and which of the log's keys hold
the update index, the total, the loss, the reward and the other metrics the monitor judges. It is
learned like the config's roles (orchestrator/nodes/logformat.py) and checked here on a real sample
(``sample_problems``). TensorBoard event files are a source of their own (read with TensorBoard's
own ``EventAccumulator``), used when the log has no update of its own or the format says so.

Every record has a kind: ``start`` (a run begins: its settings, or a CSV header), ``train`` (one
update), ``eval``, ``done``, or another word the log uses (which the monitor ignores). Metric names are
mapped to one vocabulary (``METRIC_ALIASES``: ``gradNorm`` and ``grad_norm`` are both ``grad_norm``,
``reward`` is ``reward_mean``, ``step`` is ``update``, TRL's ``completions/mean_length`` is
``completion_mean_length``, ...); unknown names are kept as written.

How a line's kind is told: a JSON key such as ``event``, ``split`` or ``mode``, or a bare word of the
line (``train``, ``eval``/``evaluation``/``validation``, ``start``, ``done``, ...), or a learned
``eval_lines`` pattern; a line whose metrics all carry an evaluation prefix (``eval_``, ``eval/``,
``val_``, ``test_``) is an evaluation too; where the words say several kinds, the one that is no update
wins (``Training finished`` is the end). A trainer's closing summary (two or more totals of the whole
run, like HF Trainer's ``train_runtime`` and ``train_samples_per_second``, or only ``final_``/``best_``
metrics) is ``done``. Anything else that holds metrics is a training update.

Within a run (from its start line): an update without a number of its own (HF Trainer's printed dicts)
is the one after the latest, and an evaluation without one is at the latest update; a tqdm position
``k/N`` (or a labelled ``step 3/100`` among others) is the update number and the total, counted on
across epochs where the bar restarts every epoch (Lightning's ``Epoch 1: ... 10/10``, Keras' ``Epoch 2/3``
over ``10/10`` lines). A line that shows the latest update
again with the same values under every name both hold (a bar refreshed after validation) is no new
update; the same number with other values is kept, so that ``sample_problems`` sees it. An evaluation's
metrics carried on an update's line (``val_loss=`` in a bar's postfix) are an evaluation at that update,
once: a bar that keeps showing the last one does not repeat it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

KINDS = ("start", "train", "eval", "done")
GUESS = "guess"
_PATTERNS = ("pattern", "metric_lines", "record_start", "eval_lines")  # a LogFormat's regular expressions
SYNTAXES = ("json", "key=value", "key: value", "whitespace", "csv", "tsv", "regex", "tensorboard")
LOG_FORMAT_FILE = "log_format.json"
EVENTS_GLOB = "events.out.tfevents.*"


@dataclass(frozen=True)
class LogRecord:
    kind: str
    time: datetime | None
    values: dict[str, float | str]
    line_no: int
    raw: str


# canonical metric name -> the spellings seen in the wild, compared without case, "_", "/" or "-"
METRIC_ALIASES: dict[str, tuple[str, ...]] = {
    "update": ("update", "step", "global_step", "iteration", "iter", "train_step", "update_step"),
    "updates": ("updates", "max_steps", "total_steps", "total_updates", "num_updates", "num_iterations_total"),
    "episode": ("episode", "episodes_done", "episodes"),  # episodes played so far, on a train line
    "loss": ("loss", "train_loss", "total_loss"),
    "policy_loss": ("policy_loss", "pg_loss"),
    "kl": ("kl", "kl_mean", "kl_divergence"),
    "grad_norm": ("grad_norm", "gradNorm", "gradient_norm", "gnorm", "total_norm"),
    "lr": ("lr", "learning_rate"),
    "reward_mean": ("reward_mean", "reward", "mean_reward", "rewards/mean", "episode_return", "avg_reward"),
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
# keys that say where a line stands, not what the update measured (a line of only these is no evaluation)
INDEX_KEYS = frozenset({"update", "updates", "episode", "epoch", "step_time", "time", "timestamp"})

# the names a learned format's `keys` may use -> the vocabulary above
ANSWER_KEYS = {"update": "update", "total_updates": "updates", "episode": "episode", "loss": "loss",
               "reward": "reward_mean", "kl": "kl", "grad_norm": "grad_norm", "clip_fraction": "clip_ratio",
               "invalid_rate": "invalid_action_rate", "completion_length": "completion_mean_length"}

_KIND_WORDS = {word: kind for kind, words in {
    "start": ("start", "starting", "started", "begin", "launch", "config"),
    "train": ("train", "training"),
    "eval": ("eval", "evaluation", "evaluate", "evaluating", "validation", "validate", "val", "valid", "test",
             "testing"),
    "done": ("done", "finished", "finish", "end", "complete", "completed", "final"),
}.items() for word in words}
_KIND_PRIORITY = ("eval", "done", "start", "train")  # "Training finished" is the end; "train eval" an evaluation
_KIND_KEYS = ("event", "kind", "type", "phase", "split", "mode", "stage", "tag")
_TIME_KEYS = ("time", "timestamp")
_EVAL_PREFIX = re.compile(r"^(eval|evaluation|val|valid|validation|test)[_/.\-]", re.I)
# an evaluation's metrics carried on an update's line (a bar's `val_loss=`); not `valid_`/`test_`, which name
# update metrics too (valid_action_rate)
_CARRIED_EVAL = re.compile(r"^(eval|evaluation|val|validation)[_/.\-]", re.I)
# a trainer's closing summary: totals of the whole run (HF Trainer's train_runtime, train_samples_per_second, ...)
_RUN_RESULT = re.compile(r"^(final|best)[_/.\-]", re.I)
_RUN_TOTAL = re.compile(r"(?:^|[_/])(?:runtime|total_flos|samples_per_second|steps_per_second|tokens_per_second)$",
                        re.I)

# exactly what `{:.6g}`, str(int) and json print; float() alone would also take "1_000" or "infinity"
_NUMBER = re.compile(r"^[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf)$", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][\w/.\-]*")
_STAMP = re.compile(r"^\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\]?[\s|:\-]*")
# Accelerate's and the HF examples' `11/25/2026 10:00:00`, rich's `[11/25/26 10:00:00]`
_US_STAMP = re.compile(r"^\[?(\d{1,2}/\d{1,2}/(\d{2}|\d{4}) \d{2}:\d{2}:\d{2})(?:[.,]\d+)?\]?[\s|:\-]*")
_RANK = re.compile(r"^\[(?:rank|default)\d+\]:\s?")  # torchrun's per-rank prefix
_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_PREFIXES = (
    re.compile(rf"^{_LEVEL}:[\w.\-]*:"),  # logging.basicConfig's default: INFO:grpo:
    # transformers' explicit format: [INFO|trainer.py:2345] 2026-11-25 10:00:00,123 >>
    re.compile(rf"^\[{_LEVEL}\|[\w.\-]+:\d+\]\s*(?:\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)?\s*>>\s*"),
    re.compile(rf"^{_LEVEL}\s+-\s+[\w.<>\-]+\s+-\s+"),  # Accelerate's INFO - __main__ -
    re.compile(rf"^(?:[\w.\-]+\s+-\s+)?{_LEVEL}\s+-\s+"),  # grpo - INFO -
    re.compile(rf"^\|?\s*{_LEVEL}\s*\|\s*(?:[\w.\-]+:[\w.<>\-]+:\d+\s+-\s+)?"),  # loguru: | INFO | mod:fn:12 -
    re.compile(rf"^(?:\[[\w.\-]+\])*\[{_LEVEL}\](?:\[[\w.\-]+\])*\s*"),  # [grpo][INFO]
    re.compile(rf"^{_LEVEL}\s+[\w.\-]+:\s(?!\s*[+-]?\.?\d)"),  # INFO grpo: ... (not rich's INFO  step: 3)
    re.compile(rf"^{_LEVEL}\s*[:|\-]?\s+"),  # INFO: ...
    re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+[\w.\-]+:\d+\]\s"),  # glog
)
_KV_PAIR = re.compile(r"(?<![\w/.\-])([A-Za-z_][\w/.\-]*)(?:=|\s+=\s+)(\"[^\"]*\"|'[^']*'|tensor\([^)]*\)|"
                      r"[^\s,;|)\]}]*)")
_TOKEN = re.compile(r"[+-]?(?:nan|inf)(?!\w)|[A-Za-z_][\w/.\-]*|[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?",
                    re.IGNORECASE)
_TENSOR = re.compile(r"^tensor\(\[?([^,)\]]+)")
_FRACTION = re.compile(r"(?<![\w./])(\d+)/(\d+)(?![\w./])")  # tqdm's `3/10`: update 3 of 10
# a position that says it is the update's, where a line holds others too (`Update 3/10 | Episodes: 8/8`), or
# an update's number leading a bar that counts something else (`update 3 ━━━━ 4/4 loss=...`)
_UPDATE_FRACTION = re.compile(r"\b(?:update|step|iteration|iter)s?\s*[:#]?\s*(\d+)\s*/\s*(\d+)(?![\w./])", re.I)
_UPDATE_NUMBER = re.compile(r"^\W*(?:update|step|iteration|iter)\s*[:#]?\s*(\d+)\b(?!\s*/|[.\d])", re.I)
_BAR = re.compile(r"\d+%\|[^|]*\|")  # tqdm's `30%|███       |`
_EPOCH = re.compile(r"\bepoch\s+(\d+)(?:\s*/\s*(\d+))?", re.I)  # Lightning's `Epoch 0:`, Keras' `Epoch 1/3`
_SOURCE = re.compile(r"\s{2,}[\w.\-]+\.py:\d+\s*$")  # rich's logging handler ends a line with `train.py:42`
# ANSI escape codes (CSI colours, cursor moves, line clearing; OSC titles; two-character escapes), other controls
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])|[\x00-\x08\x0b-\x1f\x7f]")


def canonical_metric(key: str) -> str:
    """The vocabulary's name for a logged key; `train/grad_norm` style prefixes are tried without the prefix,
    and Lightning's per-step `train_loss_step` without its suffix."""
    last = key.rsplit("/", 1)[-1]
    for candidate in (key, last, key.removesuffix("_step"), last.removesuffix("_step")):
        name = _ALIAS.get(re.sub(r"[^a-z0-9]", "", candidate.lower()))
        if name is not None:
            return name
    return key


def _known(key: str) -> bool:
    return canonical_metric(key) in METRIC_ALIASES


def _number(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


# ---------------------------------------------------------------- the format


@dataclass(frozen=True)
class LogFormat:
    """How to read one template's train.logs: the first guess, or what the LLM described."""

    syntax: str = GUESS  # GUESS, or one of SYNTAXES
    pattern: str = ""  # regex: a metric line matches it; its named groups are the keys
    metric_lines: str = ""  # a regex only metric lines match (empty: every line may hold metrics)
    record_start: str = ""  # a regex matching the first line of each record, when a record spans lines
    eval_lines: str = ""  # a regex that marks a metric line as an evaluation, not an update
    keys: dict[str, str] = field(default_factory=dict)  # ANSWER_KEYS name -> the log's own key
    code_hash: str = ""  # the logging code it was learned from (logging_code_hash)
    notes: str = ""

    @property
    def learned(self) -> bool:
        return self.syntax != GUESS

    def describe(self) -> str:
        if not self.learned:
            return "the first guess (JSON lines, key=value, key: value, name value, CSV/TSV, TensorBoard)"
        parts = [self.syntax] + [f"{name}={self.__dict__[name]!r}" for name in _PATTERNS if self.__dict__[name]]
        return ", ".join(parts + [f"keys {self.keys}"] if self.keys else parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> LogFormat:
        """A stored format (run state, log_format.json); None or {} is the first guess."""
        if not data:
            return cls()
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def format_from_answer(answer: Any) -> LogFormat:
    """The LLM's description {"syntax", "pattern", "metric_lines", "record_start", "eval_lines", "keys", "notes"}, checked
    for shape; ValueError listing every problem."""
    if not isinstance(answer, dict):
        raise ValueError('the answer must be one JSON object {"syntax": ..., "keys": {...}, ...}')
    problems = []
    syntax = answer.get("syntax")
    if syntax not in SYNTAXES:
        problems.append(f"syntax must be one of {', '.join(SYNTAXES)}; got {syntax!r}")
    for name in _PATTERNS:
        value = answer.get(name) or ""
        if not isinstance(value, str):
            problems.append(f"{name} must be a string (a Python regular expression) or empty")
            continue
        try:
            compiled = re.compile(value)
        except re.error as exc:
            problems.append(f"{name} {value!r} is not a valid Python regular expression: {exc}")
            continue
        if name == "pattern" and syntax == "regex" and not compiled.groupindex:
            problems.append("syntax regex needs a pattern with named groups, e.g. (?P<update>\\d+)")
    keys = answer.get("keys") or {}
    if not isinstance(keys, dict):
        problems.append(f"keys must map these names to the log's own keys: {', '.join(ANSWER_KEYS)}")
        keys = {}
    for name, key in keys.items():
        if name not in ANSWER_KEYS:
            problems.append(f"{name!r} is not one of the keys' names: {', '.join(ANSWER_KEYS)}")
        elif key is not None and not isinstance(key, str):
            problems.append(f"keys.{name} must be the log's key as a string, or null")
    if problems:
        raise ValueError("; ".join(problems))
    notes = answer.get("notes", "")
    return LogFormat(syntax=syntax, **{name: answer.get(name) or "" for name in _PATTERNS},
                     keys={k: v for k, v in keys.items() if v}, notes=notes if isinstance(notes, str) else "")


# ---------------------------------------------------------------- one line at a time


def _terminal(line: str) -> str:
    """One written line as a terminal shows it: its last carriage-return redraw that shows anything (a progress
    bar redrawn in place, a clearing redraw of spaces erases nothing worth reading), without ANSI escape codes."""
    segments = (_ESCAPE.sub("", segment) for segment in reversed(line.rstrip("\r\n").split("\r")))
    return next((segment for segment in segments if segment.strip()), "")


def terminal_lines(text: str) -> list[str]:
    """A log's lines as a terminal shows them (`_terminal`), one per written line; how every line is read."""
    return [_terminal(line) for line in text.split("\n")]


def _stamp_time(line: str) -> tuple[datetime | None, int] | None:
    """(the time a leading timestamp says, where the rest begins); (None, 0) without one; None for a
    timestamp that is no date (2026-13-40)."""
    iso, us = _STAMP.match(line), _US_STAMP.match(line)
    try:
        if iso:
            stamp = iso.group(1).replace(",", ".").replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).replace(tzinfo=None), iso.end()
        if us:
            year = "%Y" if len(us.group(2)) == 4 else "%y"
            return datetime.strptime(us.group(1), f"%m/%d/{year} %H:%M:%S"), us.end()
    except ValueError:
        return None
    return None, 0


def _split_prefix(line: str) -> tuple[datetime | None, str] | None:
    """(its time, the line's body) with a rank, a timestamp and a logging prefix taken off the front and a
    source location off the end; None when the line starts with a timestamp that is no date."""
    line = _RANK.sub("", line, count=1)
    stamped = _stamp_time(line)
    if stamped is None:
        return None
    moment, start = stamped
    body = line[start:]
    for prefix in _PREFIXES:
        match = prefix.match(body)
        if match:
            body = body[match.end():]
    return moment, _SOURCE.sub("", body).strip()


def _literal(node: ast.AST) -> Any:
    """A printed Python value, evaluated without eval: dicts, lists, numbers, strings, nan/inf, tensor(x)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id.lower() in ("nan", "inf", "infinity"):
        return float(node.id.lower().replace("infinity", "inf"))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(v) for v in node.elts]
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        return float(_literal(node.args[0]))  # tensor(0.5), float('nan'), np.float64(2.0)
    raise ValueError("not a literal")


def _dict(body: str) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        try:
            data = _literal(ast.parse(body, mode="eval").body)
        except (ValueError, SyntaxError, TypeError, RecursionError):
            return None
    return data if isinstance(data, dict) else None


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


def _kind_of_word(word: str) -> str | None:
    return _KIND_WORDS.get(word.lower().strip(".:,;"))


def _said(words: Iterable[str]) -> str | None:
    """The kind the line's leading words say; where they say several, the one that is not an update."""
    said = {kind for word in words if (kind := _kind_of_word(word))}
    return next((kind for kind in _KIND_PRIORITY if kind in said), None)


def _run_summary(keys: Iterable[str]) -> bool:
    """A trainer's closing summary: two or more totals of the whole run (runtime, throughput), or metrics
    that are all the run's final or best ones."""
    metrics = [key for key in keys if canonical_metric(key) not in INDEX_KEYS]
    return (sum(1 for key in metrics if _RUN_TOTAL.search(key)) >= 2
            or bool(metrics) and all(_RUN_RESULT.match(key) for key in metrics))


def _eval_name(key: str) -> str:
    """An evaluation's name for a metric: `val_loss` and `loss` are both `eval_loss`."""
    carried = _CARRIED_EVAL.match(key)
    return canonical_metric(f"eval_{key[carried.end():]}") if carried else f"eval_{key}"


def _carried_evaluation(record: LogRecord) -> tuple[LogRecord, dict[str, float | str]]:
    """An update's line without the evaluation it carries (`val_loss=` in a bar), and that evaluation's values
    at the same update ({} when it carries none with a number)."""
    carried = {key: value for key, value in record.values.items() if _CARRIED_EVAL.match(key)}
    if not any(_finite(value) for value in carried.values()):
        return record, {}
    where = {key: value for key, value in record.values.items() if key in INDEX_KEYS and key != "updates"}
    update = replace(record, values={k: v for k, v in record.values.items() if k not in carried})
    return update, {**where, **{_eval_name(key): value for key, value in carried.items()}}


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def _same(a: float | str, b: float | str) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _evaluation_by_keys(keys: Iterable[str]) -> bool:
    metrics = [k for k in keys if canonical_metric(k) not in INDEX_KEYS]
    return bool(metrics) and all(_EVAL_PREFIX.match(k) for k in metrics)


def _value(raw: Any) -> float | str | None:
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, (int, float)):
        return float(raw)
    if raw is None:
        return math.nan
    if isinstance(raw, str):
        text = raw.strip()
        tensor = _TENSOR.match(text)  # a tensor logged as is: tensor(0.5000, grad_fn=<...>)
        number = _number(tensor.group(1) if tensor else text.removesuffix("%"))
        return number if number is not None else raw
    return None


@dataclass
class _Table:
    columns: list[str]
    delimiter: str | None  # None: whitespace-aligned columns


class LineReader:
    """Reads one log's lines in order, each as a terminal shows it (a CSV header is remembered for the rows
    below it; the latest update of the run for numbering and redraws)."""

    def __init__(self, log_format: LogFormat | None = None) -> None:
        self.format = log_format or LogFormat()
        self._table: _Table | None = None
        self._pattern = re.compile(self.format.pattern) if self.format.pattern else None
        self._metric_lines = re.compile(self.format.metric_lines) if self.format.metric_lines else None
        self._record_start = re.compile(self.format.record_start) if self.format.record_start else None
        self._block: list[str] = []  # the lines of a record that spans several, until the next one starts
        self._eval_lines = re.compile(self.format.eval_lines) if self.format.eval_lines else None
        self._renames = {key: ANSWER_KEYS[name] for name, key in self.format.keys.items()}
        self._begin_run()

    def _begin_run(self) -> None:
        self._latest: LogRecord | None = None  # the run's latest update
        self._shown: dict[float, dict[str, float | str]] = {}  # each update number of the run -> its values
        self._carried: dict[str, float | str] = {}  # the evaluation an update's line carried last
        self._first_epoch: int | None = None  # epochs count from the first one the log names
        self._epoch: int | None = None
        self._epochs: int | None = None  # the `M` of `Epoch E/M`

    def read(self, line: str, line_no: int = 0) -> list[LogRecord]:
        """The records of one line, read as a terminal shows it (its last redraw, no escape codes): none for
        prose, tracebacks, warnings and a redraw of the latest update with its values unchanged; an update and
        an evaluation when an update's line carries an evaluation's metrics. A record that spans lines comes
        when the next one starts."""
        shown = _terminal(line)
        if self._record_start is not None:
            if self._record_start.search(shown):
                records = self.flush(line_no - 1)
                self._block = [shown.strip()]
                return records
            if self._block:
                self._block.append(shown.strip())
            return []
        return self._settled(self._record(shown, line_no))

    def flush(self, line_no: int = 0) -> list[LogRecord]:
        """The record of the lines gathered since the last record start (the log's end closes the last one)."""
        block, self._block = " ".join(line for line in self._block if line), []
        return self._settled(self._record(block, line_no) if block else None)

    def _settled(self, record: LogRecord | None) -> list[LogRecord]:
        """The record in its run: a start line begins a new run; an update without a number of its own is the
        one after the latest; an evaluation without one is at the latest update; an evaluation carried on an
        update's line is an evaluation of its own, once; a redraw of the latest update is no new update."""
        if record is None:
            return []
        if record.kind == "start":
            self._begin_run()
        if record.kind == "eval":
            return [self._at_latest_update(record)]
        if record.kind != "train":
            return [record]
        update, carried = _carried_evaluation(self._numbered(record))
        records = []
        if not self._redraws(update):
            records.append(update)
            self._latest = update
            self._shown[update.values["update"]] = update.values
        if carried:
            metrics = {k: v for k, v in carried.items() if k not in INDEX_KEYS}
            if metrics != self._carried:  # a bar keeps showing the last evaluation until the next one
                records.append(replace(update, kind="eval", values=carried))
                self._carried = metrics
        return records

    def _numbered(self, record: LogRecord) -> LogRecord:
        if _finite(record.values.get("update")):
            return record
        latest = self._latest.values["update"] if self._latest is not None else 0.0
        return replace(record, values={**record.values, "update": float(latest) + 1})

    def _at_latest_update(self, record: LogRecord) -> LogRecord:
        if _finite(record.values.get("update")) or self._latest is None:
            return record
        return replace(record, values={**record.values, "update": self._latest.values["update"]})

    def _redraws(self, record: LogRecord) -> bool:
        """The record shows an update of the run again (a bar refreshed after validation, a live display
        redrawing its rows): same update number, and the same values under every name both hold. Other values
        under the same number are no redraw."""
        shown = self._shown.get(record.values["update"])
        return shown is not None and all(_same(shown[key], record.values[key]) for key in shown.keys() & record.values.keys())

    def _note_epoch(self, match: re.Match[str]) -> None:
        self._epoch = int(match.group(1))
        self._first_epoch = self._epoch if self._first_epoch is None else self._first_epoch
        self._epochs = int(match.group(2)) if match.group(2) else self._epochs

    def _position(self, body: str, kind: str) -> tuple[float, float | None] | None:
        """(update, total or None) from a leading `update 3`, else from one `k/N` on the line (tqdm's position;
        a labelled `step 3/10` wins over others). An update's bar that restarts every epoch (`Epoch E: ... k/N`,
        or `k/N` lines below an `Epoch E/M` line) counts on from the epochs before it; an evaluation's position
        there is its own, not an update's."""
        number = _UPDATE_NUMBER.match(body)
        if number is not None:
            return float(number.group(1)), None
        epoch = _EPOCH.search(body)
        fractions = _UPDATE_FRACTION.findall(body) or _FRACTION.findall(_EPOCH.sub(" ", body) if epoch else body)
        if len(fractions) != 1:
            return None
        done, total = (float(n) for n in fractions[0])
        if epoch is not None:
            self._note_epoch(epoch)
        if self._epoch is None or self._first_epoch is None:
            return done, total
        if kind != "train":
            return None
        return (self._epoch - self._first_epoch) * total + done, total * self._epochs if self._epochs else None

    def _record(self, raw: str, line_no: int) -> LogRecord | None:
        if not raw.strip() or (self._metric_lines is not None and not self._metric_lines.search(raw)):
            return None
        split = _split_prefix(raw.strip())
        if split is None:
            return None
        moment, body = split
        header = _EPOCH.fullmatch(body.rstrip(":. "))
        if header is not None:  # Keras' `Epoch 1/3`: the epoch of the `k/N` lines below it
            self._note_epoch(header)
            return None
        parsed = self._parse(body)
        if parsed is None:
            return None
        kind, pairs, words = parsed
        values: dict[str, float | str] = {}
        for key, value in pairs.items():
            converted = _value(value)
            if converted is not None:
                values[self._renames.get(key) or canonical_metric(key)] = converted
        for key in _TIME_KEYS:
            if moment is None and isinstance(values.get(key), str):
                moment = _iso_time(str(values.pop(key)))
        kind = kind or _said(words)
        if self._eval_lines is not None and self._eval_lines.search(raw):
            kind = "eval"
        if kind is None:
            kind = "eval" if _evaluation_by_keys(pairs) else "done" if _run_summary(pairs) else "train"
        if kind == "train" and values.keys() <= INDEX_KEYS:  # "Running training, updates = 3" measured nothing
            return None
        position = self._position(body, kind) if kind in ("train", "eval") else None
        if position is not None:
            update, total = position
            values.setdefault("update", update)
            if total and values["update"] == update:  # `step: 3/100` names its total too
                values.setdefault("updates", total)
        if kind == "start" and "update" in values and "updates" not in values:
            values["updates"] = values.pop("update")
        if kind == "eval":
            for key in [k for k in values if not k.startswith("eval") and k not in INDEX_KEYS]:
                values.setdefault(_eval_name(key), values[key])
        return LogRecord(kind=kind, time=moment, values=values, line_no=line_no, raw=raw.rstrip())

    def _parse(self, body: str) -> tuple[str | None, dict[str, Any], list[str]] | None:
        """(kind if the line says it, raw key -> value, the bare words before the first pair), or None for
        a line with no metrics."""
        syntax = self.format.syntax
        if syntax == "tensorboard":
            return None
        if syntax == "regex":
            match = self._pattern.search(body) if self._pattern is not None else None
            return (None, {k: v for k, v in match.groupdict().items() if v is not None}, []) if match else None
        if syntax in (GUESS, "json") and body.startswith("{"):
            data = _dict(body)
            if data is not None:
                return self._from_dict(_flatten(data))
            if syntax == "json":
                return None
        if syntax in (GUESS, "csv", "tsv"):
            row = self._table_line(body)
            if row is not None or syntax != GUESS:
                return row
        if syntax in (GUESS, "key=value"):
            pairs = _KV_PAIR.findall(body)
            if pairs or syntax != GUESS:
                return self._from_pairs(body, pairs, "=", learned=syntax != GUESS)
        if syntax in (GUESS, "key: value", "whitespace"):
            return self._from_tokens(body, learned=syntax != GUESS)
        return None

    def _from_dict(self, data: dict[str, Any]) -> tuple[str | None, dict[str, Any], list[str]] | None:
        kinds = [str(data.pop(k)) for k in _KIND_KEYS if isinstance(data.get(k), str)]
        kind = next((k for word in kinds if (k := _kind_of_word(word))), kinds[0].lower() if kinds else None)
        return kind, data, []

    def _from_pairs(self, body: str, pairs: list[tuple[str, str]], sep: str,
                    learned: bool) -> tuple[str | None, dict[str, Any], list[str]] | None:
        values = {key: value.strip("\"'") for key, value in pairs}
        kind = next((k for key, value in values.items() if key.lower() in _KIND_KEYS and (k := _kind_of_word(value))),
                    None)
        first = _KV_PAIR.search(body)
        words = _NAME.findall(body[:first.start()] if first else body)  # a kind word leads the line
        numeric = sum(1 for v in values.values() if isinstance(_value(v), float))
        said = kind or _said(words)
        if learned and values or numeric >= 2 or (said and values):
            return kind, values, words
        return None

    def _from_tokens(self, body: str, learned: bool) -> tuple[str | None, dict[str, Any], list[str]] | None:
        bar = _BAR.search(body)  # a bar's description leads (its words), its postfix follows: `Eval: 50%|█ | ...`
        words: list[str] = _NAME.findall(body[:bar.start()]) if bar else []
        tokens = _TOKEN.findall(body[bar.end():] if bar else body)
        pairs: dict[str, str] = {}
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if _number(token) is None and i + 1 < len(tokens) and _number(tokens[i + 1]) is not None:
                pairs[token.rstrip("./-")] = tokens[i + 1]
                i += 2
                continue
            if _number(token) is None and not pairs:  # a kind word leads the line
                words.append(token)
            i += 1
        said = _said(words)
        known = any(_known(k) for k in pairs)
        if learned and pairs or known and (len(pairs) >= 2 or said):
            return None, pairs, words
        return None

    def _table_line(self, body: str) -> tuple[str | None, dict[str, Any], list[str]] | None:
        header = self._header(body)
        if header is not None:
            table, fresh = header
            self._table = table
            # a comma or tab header starts a run (a relaunch appends a new one); an aligned header is prose-like
            return ("start", {}, []) if fresh and table.delimiter is not None else None
        if self._table is None:
            return None
        table = self._table
        cells = _cells(body, table.delimiter)
        if len(cells) != len(table.columns):
            return None
        values = {name: cell.strip() for name, cell in zip(table.columns, cells) if cell.strip()}
        numbers = [v for v in values.values() if _number(v) is not None]
        if not numbers or (table.delimiter is None and len(numbers) != len(cells)):
            return None
        kind = next((k for key, value in values.items() if key.lower() in _KIND_KEYS and (k := _kind_of_word(value))),
                    None)
        return kind, values, []

    def _header(self, body: str) -> tuple[_Table, bool] | None:
        syntax = self.format.syntax
        delimiters = {"csv": (",", ";", "|"), "tsv": ("\t",)}.get(syntax, ("\t", ",", ";", "|", None))
        for delimiter in delimiters:
            if delimiter is not None and delimiter not in body:
                continue
            if delimiter is None and self._table is not None:
                continue  # an aligned header never replaces a CSV one: a stray prose line would
            fields = [f.strip() for f in _cells(body, delimiter)]
            if len(fields) < 2 or not all(_NAME.fullmatch(f) for f in fields):
                continue
            if syntax == GUESS and not any(_known(f) for f in fields):
                continue
            return _Table(fields, delimiter), True
        return None


def _cells(body: str, delimiter: str | None) -> list[str]:
    """A table line's cells; a Markdown row's outer pipes (`| a | b |`) make no cells."""
    if delimiter is None:
        return body.split()
    cells = body.split(delimiter)
    if delimiter == "|" and len(cells) > 2 and not cells[0].strip() and not cells[-1].strip():
        cells = cells[1:-1]
    return cells


def _iso_time(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        return None


def parse_line(line: str, line_no: int = 0, log_format: LogFormat | None = None) -> LogRecord | None:
    """One line on its own -> its (last) record; None for anything else."""
    records = LineReader(log_format).read(line, line_no)
    return records[-1] if records else None


def parse_log(text: str, log_format: LogFormat | None = None) -> list[LogRecord]:
    """All records of a log's text; line numbers are 1-based."""
    reader = LineReader(log_format)
    lines = text.split("\n")
    return [r for n, line in enumerate(lines, start=1) for r in reader.read(line, n)] + reader.flush(len(lines))


# ---------------------------------------------------------------- TensorBoard event files


def event_files(folder: Path) -> list[Path]:
    """TensorBoard event files at or below `folder`, oldest first."""
    if not folder.is_dir():
        return []
    return sorted(folder.rglob(EVENTS_GLOB), key=lambda p: (p.stat().st_mtime, p.name))


def _events_kind(tag: str) -> tuple[str, str]:
    head, _, rest = tag.partition("/")
    kind = _kind_of_word(head) if rest else None
    if kind == "eval":
        return "eval", f"eval_{rest}"
    return ("train", rest) if kind == "train" else ("train", tag)


class EventsReader:
    """Scalars of the TensorBoard event files below a folder, one record per (kind, step); reloads new events."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._accumulators: dict[Path, Any] = {}

    def records(self) -> list[LogRecord]:
        files = event_files(self.folder)
        if not files:
            return []
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        by_step: dict[tuple[str, int], dict[str, float]] = {}
        times: dict[tuple[str, int], float] = {}
        for path in files:
            accumulator = self._accumulators.get(path)
            if accumulator is None:
                accumulator = self._accumulators[path] = EventAccumulator(str(path), size_guidance={"scalars": 0})
            accumulator.Reload()
            for tag in accumulator.Tags().get("scalars", []):
                kind, key = _events_kind(tag)
                for event in accumulator.Scalars(tag):
                    slot = (kind, int(event.step))
                    by_step.setdefault(slot, {})[canonical_metric(key)] = float(event.value)
                    times[slot] = max(times.get(slot, 0.0), event.wall_time)
        records = []
        for n, ((kind, step), values) in enumerate(sorted(by_step.items(), key=lambda kv: (kv[0][1], kv[0][0] == "eval")),
                                                   start=1):
            raw = f"{kind} step={step} " + " ".join(f"{k}={v:.6g}" for k, v in values.items())
            records.append(LogRecord(kind, datetime.fromtimestamp(times[(kind, step)]), {"update": float(step), **values},
                                     n, raw))
        return records


# ---------------------------------------------------------------- a log file, whole or growing


def _has_update(records: Iterable[LogRecord]) -> bool:
    return any(r.kind == "train" for r in records)


def log_text(path: Path) -> str:
    """A log file's text as written: its carriage returns kept (a text-mode read turns each into a line
    break, and every redraw of a progress bar into a line of its own); '' when it is missing."""
    return path.read_bytes().decode("utf-8", errors="replace") if path.is_file() else ""


def read_log(path: Path, log_format: LogFormat | None = None) -> list[LogRecord]:
    """The records of the train.logs at `path`; from the TensorBoard event files beside it (or below its
    folder) when the format says so or the text holds no update."""
    log_format = log_format or LogFormat()
    records = parse_log(log_text(path), log_format)
    if log_format.syntax == "tensorboard" or (not log_format.learned and not _has_update(records)):
        events = EventsReader(path.parent).records()
        if events:
            return events
    return records


class LogTail:
    """Incremental reader of a growing log file; ``poll`` returns the records added since the last poll.

    A log with no update of its own is followed through the TensorBoard event files below its folder,
    once they appear (or from the start when the format says so)."""

    def __init__(self, path: Path, log_format: LogFormat | None = None) -> None:
        self.path = Path(path)
        self.format = log_format or LogFormat()
        self.records: list[LogRecord] = []
        self._reader = LineReader(self.format)
        self._offset = 0
        self._partial = b""
        self._line_no = 0
        self._events: EventsReader | None = None

    def poll(self) -> list[LogRecord]:
        if self._events is None and self._follow_events():
            self._events = EventsReader(self.path.parent)
            self.records = []
        if self._events is not None:
            events = self._events.records()
            new = events[len(self.records):]
            self.records = events
            return new
        return self._poll_text()

    def _follow_events(self) -> bool:
        if self.format.syntax == "tensorboard":
            return True
        return not self.format.learned and not _has_update(self.records) and bool(event_files(self.path.parent))

    def _poll_text(self) -> list[LogRecord]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(0, 2)
                if fh.tell() < self._offset:  # truncated or replaced: a new log, read it from the start
                    self.records, self._offset, self._partial, self._line_no = [], 0, b"", 0
                    self._reader = LineReader(self.format)
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        new: list[LogRecord] = []
        for line in complete:
            self._line_no += 1
            new += self._reader.read(line.decode("utf-8", errors="replace"), self._line_no)
        self.records.extend(new)
        return new


# ---------------------------------------------------------------- checks on a real sample


def sample_problems(records: list[LogRecord]) -> list[str]:
    """What says a log was read wrongly: no update, no loss, update numbers counted twice (evaluation
    lines read as updates), updates without the loss the others have."""
    trains = [r for r in records if r.kind == "train"]
    if not trains:
        return ["no line was read as a training update"]
    problems = []
    with_loss = [r for r in trains if isinstance(r.values.get("loss"), float)]
    if not with_loss:
        problems.append(f"{len(trains)} lines were read as updates but none holds a loss")
    seen: dict[float, int] = {}
    for record in trains:
        update = record.values.get("update")
        if isinstance(update, float) and math.isfinite(update):
            if update in seen:
                problems.append(f"lines {seen[update]} and {record.line_no} were both read as update {update:g}: "
                                "evaluation lines are being counted as updates")
                break
            seen[update] = record.line_no
    lacking = [r.line_no for r in trains if r not in with_loss]
    if with_loss and lacking:
        problems.append(f"lines {', '.join(map(str, lacking[:5]))} were read as updates without the loss the other "
                        "updates hold: if they are evaluations, say how they differ")
    return problems


_LOGGING_CODE = re.compile(r"train\.logs|SummaryWriter|add_scalar|writerow|\bcsv\.|\blogging\.|getLogger|"
                           r"\blogger\.|\.log\(|log_with|json\.dumps?\(|\.write\(")
LOGGING_CODE_CHARS = 8000


def logging_code(train_text: str) -> str:
    """The top-level definitions of a train.py that write its logs (a file, a logger, a tracker), in order;
    the whole text when it does not parse."""
    try:
        tree = ast.parse(train_text)
    except SyntaxError:
        return train_text
    blocks = [ast.get_source_segment(train_text, node) or "" for node in tree.body
              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return "\n\n".join(block for block in blocks if _LOGGING_CODE.search(block))


def logging_code_hash(train_text: str) -> str:
    return hashlib.sha256(logging_code(train_text).encode()).hexdigest()[:16]
