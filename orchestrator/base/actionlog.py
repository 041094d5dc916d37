"""The action log: every action the orchestrator takes, with its reason and result.

Each event is appended to three files:

* ``<project>/claude.logs`` -- the project-wide, human-readable log (all runs);
* ``<run_dir>/claude.logs`` -- the same lines, for this run only;
* ``<run_dir>/events.jsonl`` -- one JSON object per event, read back by ``ActionLog.events``.

Human-readable format, one entry per action::

    2026-11-23T09:40:01Z run=RUN node=generate_helpers action=llm_generate tokens=1234 cost=$0.0123
      reason: why the action was taken
      result: what came of it
        continuation lines of a multi-line reason/result are indented by four spaces
      extra: {"key": "value"}

The header line is always first and unindented; ``extra`` appears only when non-empty,
as one line of JSON. Times are UTC, ISO-8601, to the second.

Files are opened in append mode for every event, so a crash leaves everything written so far; an entry
is whole or absent (orchestrator.base.files.append_whole: a write a full disk refused is cut off again).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.base.files import append_whole


def now_iso() -> str:
    """The current UTC time as ISO-8601 to the second, e.g. ``2026-11-23T09:40:01Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Event:
    run_id: str
    node: str
    action: str
    reason: str
    result: str
    tokens: int = 0
    cost_usd: float = 0.0
    time: str = field(default_factory=now_iso)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_text(self) -> str:
        """The human-readable entry (see the module docstring), ending in a newline."""
        lines = [
            f"{self.time} run={self.run_id} node={self.node} action={self.action} "
            f"tokens={self.tokens} cost=${self.cost_usd:.4f}",
            _field("reason", self.reason),
            _field("result", self.result),
        ]
        if self.extra:
            lines.append(f"  extra: {json.dumps(self.extra, ensure_ascii=False, default=str)}")
        return "\n".join(lines) + "\n"


def _field(name: str, value: str) -> str:
    first, *rest = str(value).splitlines() or [""]
    return "\n".join([f"  {name}: {first}", *(f"    {line}" for line in rest)])


class ActionLog:
    """Appends events to the project log, the run's log and the run's events.jsonl."""

    def __init__(self, project_log: Path, run_dir: Path) -> None:
        self.project_log = Path(project_log)
        self.run_log = Path(run_dir) / "claude.logs"
        self.events_path = Path(run_dir) / "events.jsonl"

    def record(self, event: Event) -> None:
        text = event.to_text()
        append_whole(self.project_log, text)
        append_whole(self.run_log, text)
        append_whole(self.events_path, event.to_json() + "\n")

    def events(self) -> list[Event]:
        """The run's events, in order; lines cut short by a crash are skipped."""
        if not self.events_path.exists():
            return []
        events = []
        for line in self.events_path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(Event.from_dict(json.loads(line)))
            except json.JSONDecodeError:
                continue
        return events

    @contextmanager
    def action(self, run_id: str, node: str, action: str, reason: str) -> Iterator[dict[str, Any]]:
        """Record one action when the block ends, even when it raises.

        The block sets ``result``, ``tokens``, ``cost_usd`` and ``extra`` on the yielded dict.
        On an exception the result becomes ``error: <Type>: <message>`` and the exception propagates.
        """
        outcome: dict[str, Any] = {"result": "ok", "tokens": 0, "cost_usd": 0.0, "extra": {}}
        try:
            yield outcome
        except BaseException as exc:
            outcome["result"] = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            self.record(
                Event(
                    run_id=run_id,
                    node=node,
                    action=action,
                    reason=reason,
                    result=str(outcome.get("result", "")),
                    tokens=int(outcome.get("tokens") or 0),
                    cost_usd=float(outcome.get("cost_usd") or 0.0),
                    extra=dict(outcome.get("extra") or {}),
                )
            )
