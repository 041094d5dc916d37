"""Local coder models as they really are, through `openai:` (tests/coder_server.py): a 32,768-token context counted by
the server itself with a real tokenizer (vLLM's refusal of anything longer), `<think>` drafts before every answer,
fixes that send the whole train.py back reformatted, fixes as unified diffs, a server that cuts answers at a limit of
its own, sends no `usage`, or answers with tool calls.

The demo's whole pipeline on the Cleanup and Stag Hunt examples, one run each, asserted many ways: Cleanup with the
model's own tokenizer at hand (its id is the tiny model's folder) and whole-file reformatting fixes; Stag Hunt with a
hub id whose tokenizer is not here (tokens estimated, then taught by the server's counts) and diff fixes. The same
server and model through the Messages API (`anthropic:`), whose context the first refusal teaches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import git
import pytest
from coder_server import CoderModel, CoderServer, Request

from orchestrator.checks import RuntimeCheckSpec
from orchestrator.demo import example, recorded_roles, transcript
from orchestrator.llm.edits import parse_sections
from orchestrator.runner import RunOutcome, start_run
from orchestrator.run.state import Limits
from orchestrator.tiny.agent import TINY_AGENT
from orchestrator.training.formal import FormalSpec

CONTEXT = 32768
HUB_ID = "Qwen/Qwen2.5-Coder-32B-Instruct"  # not in this machine's cache: its tokens are estimated
GENERATED = ("helpers.py", "prompt_template.py", "train.py", "launch_training.sh")


@dataclass
class Run:
    name: str
    outcome: RunOutcome
    requests: list[Request]
    project: Path

    @property
    def log(self) -> str:
        return (self.project / "claude.logs").read_text()

    def events(self, action: str) -> list[dict]:
        lines = (self.project / "runs/r1/events.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["action"] == action]


def run_through(server: CoderServer, project: Path, source: Path, *, until: str = "", run_id: str = "r1",
                limits: Limits = Limits(), **specs) -> RunOutcome:
    return start_run(project, llm=f"openai:{server.served_as}@{server.url}", run_id=run_id, source_of_truth=source,
                     until=until, limits=limits, **specs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Run]:
    """The whole demo pipeline of each example through a 32k-context server (see the module docstring)."""
    mp = pytest.MonkeyPatch()
    mp.delenv("OPENAI_API_KEY", raising=False)
    done = {}
    try:
        for name, fixes, served_as in (("cleanup", "reformat", str(tiny_model_dir)), ("staghunt", "diff", HUB_ID)):
            ex = example(name)
            server = CoderServer(CoderModel(ex, think=True, fixes=fixes), str(tiny_model_dir / "tokenizer.json"),
                                 served_as=served_as, context=CONTEXT)
            project = tmp_path_factory.mktemp(name) / "project"
            try:
                outcome = run_through(server, project, ex.source_of_truth,
                                      runtime_check=RuntimeCheckSpec(model=TINY_AGENT, real_model=False, episodes=4,
                                                                     turns=2),
                                      formal=FormalSpec(model=TINY_AGENT, timeout_s=900, hang_seconds=300))
            finally:
                server.close()
            assert not server.errors, server.errors
            done[name] = Run(name, outcome, server.requests, project)
    finally:
        mp.undo()
    return done


GAMES = ("cleanup", "staghunt")


def on_both_pipelines(test):
    """A test of the module's two pipeline runs: slow, and needing both examples' tiny agents."""
    for mark in (pytest.mark.tiny_agent("staghunt"), pytest.mark.tiny_agent("cleanup"), pytest.mark.slow):
        test = mark(test)
    return test


@on_both_pipelines
@pytest.mark.parametrize("name", GAMES)
def test_the_demo_pipeline_ends_done_through_a_32k_coder_server_every_request_within_its_context(runs, name):
    run = runs[name]
    assert run.outcome.status == "done", run.outcome.reason
    assert not [r for r in run.requests if r.refused]  # the server never had to refuse a request
    assert all(r.prompt_tokens + r.max_tokens <= CONTEXT for r in run.requests)  # by the server's own count
    whole = [e for e in run.events("llm_fit") if "leaves too little room" in e["result"]]
    assert {e["node"] for e in whole} >= {"map_roles", "generate_train"}  # each fitted, and said so
    calls = run.events("llm_call")
    assert len(calls) == len(run.requests) and all(c["extra"]["backend"] == "openai" for c in calls)


@on_both_pipelines
@pytest.mark.parametrize("name", GAMES)
def test_no_think_draft_is_ever_applied_and_every_draft_is_logged_as_reasoning(runs, name):
    run = runs[name]
    ex = example(name)
    assert run.outcome.state["roles"]["delivery"] == recorded_roles(ex)["delivery"] == "cli"  # the draft: config_file
    for file in GENERATED:
        assert (run.project / "workspace/generated" / file).read_text() == (ex.reference / file).read_text(), file
    assert not [r for r in run.requests if r.reask]  # no answer was refused for its format: the drafts never parsed
    reasoning = run.events("llm_reasoning")
    assert len(reasoning) == len(run.requests)  # every answer's draft, kept as the model's reasoning
    assert all("draft" in e["result"] or "GENERIC" in e["result"] for e in reasoning)
    assert "# GENERIC, edited" not in (run.project / "workspace/generated/train.py").read_text()


@on_both_pipelines
def test_a_whole_file_reformatting_fix_lands_as_its_one_line_and_a_diff_fix_as_its_hunk(runs):
    for name, sign in (("cleanup", "<<<<<<< SEARCH"), ("staghunt", "@@ -")):
        run = runs[name]
        fixes = [a for a in run.outcome.state["attempts"] if a["node"] == "fix"]
        assert [(f["check"], f["outcome"]) for f in fixes] == [("import_check", "edited train.py"),
                                                                ("runtime_check", "edited train.py")]
        assert all(sign in f["edit"] for f in fixes)
        repo = git.Repo(run.project / "workspace")
        for fix in fixes:  # each commit changes the one faulty line, whatever the answer retyped
            changed = [line for line in repo.git.show(fix["sha"], "--format=", "--unified=0").splitlines()
                       if line[:1] in "+-" and not line.startswith(("+++", "---"))]
            assert len(changed) == 2, changed
    cleanup = [r for r in runs["cleanup"].requests if r.tag == "fix"]
    assert any("GENERIC sections left out" in r.text for r in cleanup)  # the answer's room came from the GENERIC code


def cleanup_until(tmp_path: Path, tiny_model_dir: Path, until: str, **server) -> tuple[Run, CoderServer]:
    ex = example("cleanup")
    coder = CoderServer(CoderModel(ex, think=True), str(tiny_model_dir / "tokenizer.json"),
                        **{"served_as": HUB_ID, "context": CONTEXT, **server})
    project = tmp_path / "project"
    try:
        outcome = run_through(coder, project, ex.source_of_truth, until=until)
    finally:
        coder.close()
    return Run("cleanup", outcome, coder.requests, project), coder


def test_a_server_that_does_not_say_its_context_teaches_it_with_its_refusal_and_is_never_asked_the_same_again(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run, _ = cleanup_until(tmp_path, tiny_model_dir, "generate_helpers", state_context=False)

    assert run.outcome.status == "done", run.outcome.reason
    first, second, *rest = run.requests
    assert first.refused and first.tag == second.tag == "map_roles"  # 16,000 asked for: over the 32,768
    assert not second.refused and second.prompt_tokens + second.max_tokens <= CONTEXT
    assert (second.prompt_tokens, second.max_tokens) != (first.prompt_tokens, first.max_tokens)
    assert not any(r.refused for r in rest)
    assert "the server refused a request as longer than its 32,768-token context (its count of the prompt: " \
        f"{first.prompt_tokens:,} tokens); fitted again" in run.log


def test_a_server_that_cuts_answers_below_the_budget_gets_step_3_one_section_at_a_time(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    first, _ = cleanup_until(tmp_path, tiny_model_dir, "generate_prompts")
    assert first.outcome.status == "done", first.outcome.reason
    ex = example("cleanup")
    coder = CoderServer(CoderModel(ex, think=True), str(tiny_model_dir / "tokenizer.json"), served_as=HUB_ID,
                        context=CONTEXT, output_cap=1500)
    try:
        outcome = run_through(coder, tmp_path / "project", ex.source_of_truth, until="generate_train", run_id="r2")
    finally:
        coder.close()

    assert outcome.status == "done", outcome.reason
    train = [r for r in coder.requests if r.tag == "generate_train"]
    whole, *parts = train
    assert whole.finish == "length" and whole.output_tokens == 1500 < whole.max_tokens  # the server's own limit
    assert len(parts) == 6 and all(r.finish == "stop" for r in parts)  # one request per CUSTOMIZE section
    assert len({r.text for r in train}) == len(train)  # never the same request again
    recorded = next(r["text"] for r in transcript(ex)["replies"] if r["tag"] == "generate_train")
    template = (ex.source_of_truth / "grpo_template.py").read_text()
    assert (tmp_path / "project/workspace/generated/train.py").read_text() == parse_sections(recorded, template)
    log = (tmp_path / "project/claude.logs").read_text()
    assert "the server cut the answer at 1,500 output tokens, below the " in log


def test_a_server_that_reports_no_usage_is_counted_by_the_model_s_tokenizer_and_the_token_cap_still_holds(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ex = example("cleanup")
    coder = CoderServer(CoderModel(ex, think=True), str(tiny_model_dir / "tokenizer.json"),
                        served_as=str(tiny_model_dir), context=CONTEXT, report_usage=False)
    project = tmp_path / "project"
    try:
        outcome = run_through(coder, project, ex.source_of_truth, until="generate_launch",
                              limits=Limits(max_tokens=20000))
    finally:
        coder.close()

    assert outcome.status == "budget", outcome.reason  # map_roles alone spends more than 20,000 tokens
    row = outcome.state["ledger"]["map_roles"]
    served = coder.requests[0]
    assert row["input_tokens"] == pytest.approx(served.prompt_tokens, rel=0.02)  # the model's own tokenizer
    assert row["output_tokens"] == pytest.approx(served.output_tokens, rel=0.02)
    assert "(counted by the model's tokenizer: the server reported none)" in (project / "claude.logs").read_text()
    assert [r.tag for r in coder.requests] == ["map_roles"]


def test_an_answer_that_comes_back_as_a_tool_call_is_named_as_one(tmp_path: Path, tiny_model_dir: Path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ex = example("cleanup")
    coder = CoderServer(CoderModel(ex, tool_calls=True), str(tiny_model_dir / "tokenizer.json"), served_as=HUB_ID,
                        context=CONTEXT)
    try:
        outcome = run_through(coder, tmp_path / "project", ex.source_of_truth, until="generate_helpers")
    finally:
        coder.close()

    assert outcome.status == "blocked"
    assert "the server returned a tool call (write_file) instead of a text answer: start it without a tool-call " \
           "parser" in outcome.reason
    assert len(coder.requests) == 1  # asking again would get the same tool call


def test_the_messages_api_path_takes_the_same_model_its_context_learned_from_its_refusal(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch):
    ex = example("cleanup")
    coder = CoderServer(CoderModel(ex, think=True), str(tiny_model_dir / "tokenizer.json"), served_as="claude-coder",
                        context=CONTEXT)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "local")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", coder.root)
    project = tmp_path / "project"
    try:
        outcome = start_run(project, llm="anthropic:claude-coder", run_id="r1", source_of_truth=ex.source_of_truth,
                            until="generate_launch")
    finally:
        coder.close()

    assert outcome.status == "done", outcome.reason
    first, *rest = coder.requests
    assert first.refused and not any(r.refused for r in rest)  # the first request taught the context
    assert all(r.prompt_tokens + r.max_tokens <= CONTEXT for r in rest) and not any(r.reask for r in rest)
    for file in GENERATED:
        if file != "train.py":  # Step 3's recorded answer holds the demo's two faults
            assert (project / "workspace/generated" / file).read_text() == (ex.reference / file).read_text(), file
    assert outcome.state["roles"]["delivery"] == "cli"
