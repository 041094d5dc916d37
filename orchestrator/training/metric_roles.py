"""Which keys of a run's `train.logs` hold the metrics the monitor judges: the log's metric roles.

Learned like the config's roles (orchestrator/sources/roles.py): a free first guess, the LLM asked only for the
roles the guess could not fill (orchestrator/nodes/metric_roles.py), the answer validated on the runtime check's
real log, committed as the workspace's `metric_roles.json` and reused while train.py's logging code is unchanged.

The roles: `reward` (the mean return of an update's episodes), `invalid_rate` (the fraction of actions that did
not parse or were refused), `loss` and `kl`. A key the log vocabulary already knows (`reward_mean`, `invalid_rate`,
...: `logformat.METRIC_ALIASES`) fills its role by itself; the first guess reads the researcher's other names by
their words (`ret_mean`, `avg_return`, `invalid_frac`, `bad_action_rate`, `illegal_share`), and a key is only
taken where its values fit the role (a rate between 0 and 1, finite numbers). The mapping reaches the monitor, the
curves, `status` and the page as a log format's `keys` (`LogFormat.keys`): every reader maps the researcher's names
to the vocabulary the detectors use. Without a reward or an invalid-action rate, the detectors that need them are
off, and `off()` says which and why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.training.logformat import ANSWER_KEYS, INDEX_KEYS, METRIC_ALIASES, LogRecord

METRIC_ROLES_FILE = "metric_roles.json"
# role -> (the vocabulary's name, what it holds: the LLM prompt's and the page's words)
ROLES: dict[str, tuple[str, str]] = {
    "reward": ("reward_mean", "the mean reward (return) of an update's episodes"),
    "invalid_rate": ("invalid_action_rate", "the fraction of actions that did not parse or that the game refused"),
    "loss": ("loss", "the training loss"),
    "kl": ("kl", "the KL divergence to the reference policy"),
}
# role -> the detectors that are off without it, and what each would have caught
NEEDED_BY = {
    "reward": "reward_collapse (a reward whose moving average falls far below its best)",
    "invalid_rate": "invalid_action_rise (an invalid-action rate climbing above its early level)",
}
# the words that name a role in a key, as researchers write them
ROLE_WORDS = {
    "reward": {"reward", "rewards", "return", "returns", "ret", "score", "payoff"},
    "invalid_rate": {"invalid", "illegal", "malformed", "unparsed", "unparseable", "unparsable", "bad", "fallback",
                     "noop", "rejected"},
    "loss": {"loss"},
    "kl": {"kl"},
}
OTHER_STATISTICS = {"std", "var", "min", "max", "median", "best", "first", "last", "count", "num", "total", "sum"}
NOT_TRAINING = {"eval", "val", "valid", "validation", "test"}
MEAN_WORDS = {"mean", "avg", "average"}
RATE_WORDS = {"rate", "frac", "fraction", "ratio", "share", "pct", "prop"}


def words(key: str) -> list[str]:
    """A key's words: split at `_ / . -`, spaces and camelCase (`avgReturn` -> avg, return)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key)
    return [w for w in re.split(r"[\s_/.\-]+", spaced.lower()) if w]


@dataclass(frozen=True)
class MetricRoles:
    keys: dict[str, str] = field(default_factory=dict)  # role -> the log's own key (a vocabulary name included)
    sources: dict[str, str] = field(default_factory=dict)  # role -> "vocabulary" | "first guess" | "LLM"
    code_hash: str = ""  # train.py's logging code it was learned on (logformat.logging_code_hash)
    notes: list[str] = field(default_factory=list)  # what was asked and why a role stayed empty

    def missing(self) -> list[str]:
        return [role for role in ROLES if role not in self.keys]

    def off(self) -> list[str]:
        """The anomaly detectors that are off, each with why."""
        return [f"{NEEDED_BY[role]} is off: no key of train.logs holds {ROLES[role][1]}" for role in NEEDED_BY
                if role not in self.keys]

    def format_keys(self) -> dict[str, str]:
        """The mapping as a log format's `keys` (ANSWER_KEYS names), for the researcher's own names only."""
        return {role: key for role, key in self.keys.items() if key != ROLES[role][0] and role in ANSWER_KEYS}

    def describe(self) -> str:
        mapped = ", ".join(f"{role} <- {key} ({self.sources.get(role, '?')})" for role, key in self.keys.items())
        return mapped or "no metric role mapped"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"off": self.off()}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> MetricRoles:
        if not data:
            return cls()
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def logged_values(records: Sequence[LogRecord]) -> dict[str, list[float]]:
    """Each key of the training updates with its numeric values, in the log's order."""
    found: dict[str, list[float]] = {}
    for record in records:
        if record.kind == "train":
            for key, value in record.values.items():
                if isinstance(value, float):
                    found.setdefault(key, []).append(value)
    return found


def unfit(role: str, key: str, values: dict[str, list[float]]) -> str:
    """Why `key` cannot hold `role` on this log ('' when it can)."""
    if key not in values:
        return f"{key!r} is not a metric of the log's training updates (they hold: {', '.join(sorted(values))})"
    finite = [v for v in values[key] if math.isfinite(v)]
    if not finite:
        return f"{key!r} holds no finite value"
    if role == "invalid_rate" and not all(0.0 <= v <= 1.0 for v in finite):
        return f"{key!r} is not a rate between 0 and 1 (it holds {min(finite):g} to {max(finite):g})"
    return ""


def _score(role: str, key: str) -> tuple | None:
    """How well `key`'s words name `role` (lower is better); None when they do not."""
    found = words(key)
    if not set(found) & ROLE_WORDS[role] or set(found) & (OTHER_STATISTICS | NOT_TRAINING):
        return None
    if role == "invalid_rate" and "bad" in found and not set(found) & {"action", "actions", "move", "call", "output"}:
        return None
    preferred = MEAN_WORDS if role == "reward" else RATE_WORDS if role == "invalid_rate" else set()
    return (not set(found) & preferred, len(found), key)


def first_guess(records: Sequence[LogRecord]) -> MetricRoles:
    """Each role from the vocabulary's name where the log holds it, else from the words of the log's other keys."""
    values = logged_values(records)
    known = {name for name in METRIC_ALIASES}
    keys, sources = {}, {}
    for role, (name, _) in ROLES.items():
        if name in values and not unfit(role, name, values):
            keys[role], sources[role] = name, "vocabulary"
            continue
        scored = sorted((s, k) for k in values if k not in known and (s := _score(role, k)) is not None
                        and not unfit(role, k, values))
        taken = set(keys.values())
        choice = next((k for _, k in scored if k not in taken), None)
        if choice is not None:
            keys[role], sources[role] = choice, "first guess"
    return MetricRoles(keys, sources)


def candidates(records: Sequence[LogRecord], roles: MetricRoles) -> dict[str, list[float]]:
    """The log's keys no role holds and the vocabulary does not name (nor says where a line stands: an epoch, a
    time): what an answer could map."""
    taken = set(roles.keys.values())
    return {k: v for k, v in logged_values(records).items()
            if k not in taken and k not in METRIC_ALIASES and k not in INDEX_KEYS}


def validate_answer(answer: Any, records: Sequence[LogRecord], guessed: MetricRoles) -> MetricRoles:
    """The guess completed by the answer {role: key or null} for the roles it lacked; ValueError listing every
    problem (an unknown role, a key the log does not hold, values that do not fit the role, a key twice)."""
    if not isinstance(answer, dict):
        raise ValueError('the answer must be one JSON object {"ROLE": "KEY" or null, ...}')
    values = logged_values(records)
    problems, keys, sources = [], dict(guessed.keys), dict(guessed.sources)
    for role, key in answer.items():
        if role not in ROLES:
            problems.append(f"{role!r} is not one of the roles: {', '.join(ROLES)}")
        elif role in guessed.keys or key is None:
            continue
        elif not isinstance(key, str):
            problems.append(f"{role} must be the log's key as a string, or null")
        elif (why := unfit(role, key, values)):
            problems.append(f"{role}: {why}")
        elif key in keys.values():
            problems.append(f"{role}: {key!r} already holds another role")
        else:
            keys[role], sources[role] = key, "LLM"
    if problems:
        raise ValueError("; ".join(problems))
    return MetricRoles(keys, sources, guessed.code_hash, guessed.notes)


def still_valid(roles: MetricRoles, records: Sequence[LogRecord]) -> bool:
    """A stored mapping fits this log: every key it maps is there with values that fit its role."""
    values = logged_values(records)
    return bool(roles.keys) and not any(unfit(role, key, values) for role, key in roles.keys.items())
