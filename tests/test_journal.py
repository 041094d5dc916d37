"""The journal's reconciliation: a paid answer no checkpoint claims is served again for the same request,
dropped (its spend carried) for a different one, and a resumed replay continues where it stopped."""

from __future__ import annotations

from pathlib import Path

from orchestrator.llm.asking import ask
from orchestrator.run.journal import Journal, JournaledLLM, journaled
from orchestrator.llm import ReplayLLM, Usage

USER = [{"role": "user", "content": "write helpers.py"}]
SPEC = "replay:t.json"


def first_process(tmp_path: Path) -> Journal:
    """A process that got one answer for `gen`, then died before its node returned (no ledger row)."""
    journal = Journal(tmp_path / "journal.jsonl")
    llm = JournaledLLM(ReplayLLM(["first answer"]), journal, SPEC)
    llm.complete(USER, system="s", tag="gen", max_tokens=16000)  # what ask() sends
    return journal


def test_a_pending_answer_is_served_again_for_the_same_request(tmp_path: Path):
    journal = first_process(tmp_path)
    assert set(journal.pending({})) == {"gen"}
    server = ReplayLLM([])  # would fail if asked
    answer = ask(journaled(server, Journal(journal.path), SPEC, ledger={}), USER, str, system="s", tag="gen")

    assert answer.parsed == "first answer" and server.calls == []
    row = answer.ledger_row()
    assert row["answers"] == [1] and Journal(journal.path).pending({"gen": row}) == {}


def test_a_pending_answer_to_a_changed_request_is_dropped_but_its_spend_is_kept(tmp_path: Path):
    journal = first_process(tmp_path)
    replay = ReplayLLM(["second answer"])
    llm = journaled(replay, Journal(journal.path), SPEC, ledger={})
    reply = llm.complete([{"role": "user", "content": "something else"}], system="s", tag="gen")

    assert reply.text == "second answer" and len(replay.calls) == 1
    assert reply.answers == (1, 3)  # the dropped answer (1), its llm_orphaned record (2), the new answer (3)
    assert [r["kind"] for r in Journal(journal.path).records()] == ["llm_answer", "llm_orphaned", "llm_answer"]


def test_answered_counts_per_tag_and_spec(tmp_path: Path):
    journal = first_process(tmp_path)
    assert journal.answered(SPEC) == {"gen": 1} and journal.answered("replay:other.json") == {}
    assert journal.pending_spend({}) == (Usage().total_tokens, 0.0)
