"""How long a formal run will take, from the runtime check's real pace.

The runtime check trains a few updates through the launch script; its train.logs says how many seconds an update
took (`step_time` where the template logs it, else the time between update lines). `Pace` keeps that, with the
check's values by role, in the run state. `estimate_seconds` scales it to a formal plan: by the tokens one update
generates (group size x agents x turns x the two token caps), by the parameters when both models' shapes are known,
and by the updates planned. It is an estimate (the formal run's machine is another), used for one decision: a
template that cannot resume, on a partition whose time limit is shorter than the estimate, is refused before launch,
with both numbers.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.training.logformat import LogRecord
from orchestrator.training.monitor import current_run
from orchestrator.training.sizing import ASSUMED, ModelShape

WORK_ROLES = ("group_generations", "agent_count", "episode_turns", "thinking_cap", "action_cap")


@dataclass(frozen=True)
class Pace:
    seconds_per_update: float
    values: dict[str, Any]  # the check's values by role (those that size an update's work)
    model: str  # the check's model

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Pace | None":
        return cls(**data) if data else None


def seconds_per_update(records: list[LogRecord]) -> float | None:
    """The median seconds of an update in a train.logs: its step_time values, else the time between update lines."""
    trains = [r for r in current_run(records) if r.kind == "train"]
    steps = [v for r in trains if isinstance(v := r.values.get("step_time"), float) and math.isfinite(v) and v > 0]
    if steps:
        return statistics.median(steps)
    times = [r.time for r in trains if r.time is not None]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:]) if b > a]
    return statistics.median(gaps) if gaps else None


def tokens_per_update(values: dict[str, Any]) -> float:
    """What one update generates, by role (an unmapped role taken as the memory arithmetic assumes it)."""
    v: dict[str, int] = {role: values[role] if values.get(role) is not None else ASSUMED.get(role, 1)
                         for role in WORK_ROLES}
    caps = v["thinking_cap"] + v["action_cap"]  # both stages generate, whether they share one cap field or not
    return float(v["group_generations"] * v["agent_count"] * v["episode_turns"] * max(caps, 1))


def planned_updates(values: dict[str, Any]) -> int | None:
    """The plan's updates, by role: updates_total, else episodes_total over the group size."""
    if isinstance(values.get("updates_total"), int):
        return values["updates_total"]
    if isinstance(values.get("episodes_total"), int):
        return math.ceil(values["episodes_total"] / max(int(values.get("group_generations") or 1), 1))
    return None


def estimate_seconds(pace: Pace, formal: dict[str, Any], check_shape: ModelShape | None,
                     formal_shape: ModelShape | None) -> tuple[float, str] | None:
    """(seconds, how they were reckoned) for the formal plan's values by role; None without a planned length."""
    updates = planned_updates(formal)
    if updates is None:
        return None
    work = tokens_per_update(formal) / tokens_per_update(pace.values)
    size = formal_shape.num_params / check_shape.num_params if check_shape and formal_shape else 1.0
    seconds = pace.seconds_per_update * work * size * updates
    how = (f"the runtime check's {pace.seconds_per_update:.2f} s per update x {work:.3g} (tokens per update)"
           + (f" x {size:.3g} (parameters)" if size != 1.0 else "") + f" x {updates} updates")
    return seconds, how
