"""Tests for orchestrator.base.actionlog."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.base.actionlog import ActionLog, Event, now_iso


@pytest.fixture
def log(tmp_path: Path) -> ActionLog:
    return ActionLog(tmp_path / "claude.logs", tmp_path / "runs" / "r1")


def test_now_iso_is_utc_to_the_second() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now_iso())


def test_record_writes_all_three_files(log: ActionLog, tmp_path: Path) -> None:
    event = Event(
        "r1", "generate_helpers", "llm_generate", "helpers missing", "3 files", tokens=1234, cost_usd=0.0123,
        time="2026-11-23T09:40:01Z",
    )
    log.record(event)
    expected = (
        "2026-11-23T09:40:01Z run=r1 node=generate_helpers action=llm_generate tokens=1234 cost=$0.0123\n"
        "  reason: helpers missing\n"
        "  result: 3 files\n"
    )
    assert (tmp_path / "claude.logs").read_text() == expected
    assert (tmp_path / "runs" / "r1" / "claude.logs").read_text() == expected
    lines = (tmp_path / "runs" / "r1" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in lines] == ["llm_generate"]


def test_multiline_reason_and_extra_are_readable(log: ActionLog) -> None:
    log.record(Event("r1", "check", "pytest", "first\nsecond", "1 failed", extra={"files": ["a.py"]}))
    entry = log.project_log.read_text().splitlines()
    assert entry[1:] == ["  reason: first", "    second", "  result: 1 failed", '  extra: {"files": ["a.py"]}']


def test_record_appends_and_never_truncates(tmp_path: Path) -> None:
    project_log = tmp_path / "claude.logs"
    project_log.write_text("earlier run\n")
    ActionLog(project_log, tmp_path / "runs" / "r1").record(Event("r1", "n", "a", "why", "ok"))
    ActionLog(project_log, tmp_path / "runs" / "r2").record(Event("r2", "n", "a", "why", "ok"))
    again = ActionLog(project_log, tmp_path / "runs" / "r1")
    again.record(Event("r1", "n", "b", "why", "ok"))
    text = project_log.read_text()
    assert text.startswith("earlier run\n")
    assert [m.group(1) for m in re.finditer(r" run=(\S+) ", text)] == ["r1", "r2", "r1"]
    assert [e.action for e in again.events()] == ["a", "b"]
    assert (tmp_path / "runs" / "r1" / "claude.logs").read_text().count("run=r1") == 2


def test_events_round_trip(log: ActionLog) -> None:
    events = [
        Event("r1", "plan", "decide", "start", "ok", time="2026-01-01T00:00:00Z"),
        Event("r1", "gen", "llm_generate", "why", "résumé\nline 2", tokens=7, cost_usd=0.5, extra={"k": [1, 2]}),
    ]
    for event in events:
        log.record(event)
    assert log.events() == events


def test_events_skips_a_line_cut_short_by_a_crash(log: ActionLog) -> None:
    log.record(Event("r1", "n", "a", "why", "ok"))
    with log.events_path.open("a") as handle:
        handle.write('{"run_id": "r1", "no')
    assert [e.action for e in log.events()] == ["a"]


def test_events_of_a_new_run_is_empty(log: ActionLog) -> None:
    assert log.events() == []


def test_action_records_what_the_block_sets(log: ActionLog) -> None:
    with log.action("r1", "gen", "llm_generate", "helpers missing") as outcome:
        outcome.update(result="wrote 2 files", tokens=10, cost_usd=0.01, extra={"files": ["a.py", "b.py"]})
    (event,) = log.events()
    assert (event.node, event.action, event.reason) == ("gen", "llm_generate", "helpers missing")
    assert event.result == "wrote 2 files"
    assert (event.tokens, event.cost_usd, event.extra) == (10, 0.01, {"files": ["a.py", "b.py"]})


def test_action_records_an_error_and_reraises(log: ActionLog) -> None:
    with pytest.raises(ValueError, match="bad config"):
        with log.action("r1", "check", "validate", "config changed") as outcome:
            outcome["tokens"] = 3
            raise ValueError("bad config")
    (event,) = log.events()
    assert event.result == "error: ValueError: bad config"
    assert event.tokens == 3
    assert "result: error: ValueError: bad config" in log.project_log.read_text()
