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


def test_a_request_s_key_is_what_it_asks_not_where_or_when(tmp_path: Path):
    """The same question asked again after a rollback, in a copy of the project, or of a check run again (another
    temporary folder, process id, time) has the same key; another question has another."""
    from orchestrator.run.journal import request_key

    def evidence(root: str, pid: int, seconds: float, tmp: str, line: int = 102) -> list[dict]:
        return [{"role": "user", "content": f'File "{root}/runs/r1/runtime_check/code/train.py", line {line}\n'
                                            f"rank 0: exit code -15 (Signal 15 (SIGTERM) received by PID {pid})\n"
                                            f"in {tmp}/probe-a1b2c3: failed after {seconds} s at 0x7f3a9c2e10"}]

    def key(messages: list[dict], root: str) -> str:
        return request_key("fix", messages, "s", 4000, ["helpers.py"], Path(root))

    first = key(evidence("/home/a/project", 12019, 3.7, "/tmp/tmpx81kq2_a"), "/home/a/project")
    assert key(evidence("/home/a/project", 12983, 14.9, "/tmp/tmpq0vv93zz"), "/home/a/project") == first
    assert key(evidence("/srv/copy", 4711, 3.7, "/tmp/tmpx81kq2_a"), "/srv/copy") == first
    assert key([{"role": "user", "content": "another failure"}], "/home/a/project") != first
    assert request_key("generate_train", evidence("/p", 1, 1.0, "/tmp/x"), "s", 4000, None, Path("/p")) != \
        request_key("fix", evidence("/p", 1, 1.0, "/tmp/x"), "s", 4000, None, Path("/p"))


def test_a_pending_answer_is_found_wherever_it_stands_among_its_tag_s(tmp_path: Path):
    """Two answers for `gen` pending; the re-run asks the second question first: each is served, nothing is paid."""
    journal = Journal(tmp_path / "journal.jsonl")
    asked = JournaledLLM(ReplayLLM(["one", "two"]), journal, SPEC)
    asked.complete([{"role": "user", "content": "first"}], tag="gen")
    asked.complete([{"role": "user", "content": "second"}], tag="gen")
    server = ReplayLLM([])  # would fail if asked
    again = journaled(server, Journal(journal.path), SPEC, ledger={})
    assert again.complete([{"role": "user", "content": "second"}], tag="gen").text == "two"
    assert again.complete([{"role": "user", "content": "first"}], tag="gen").text == "one"
    assert server.calls == [] and Journal(journal.path).records("llm_orphaned") == []
