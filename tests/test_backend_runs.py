"""Steps 0-4 through each platform's wire (a local server in place of Bedrock, Vertex or an OpenAI-compatible
server): the same files as with the Messages API, the same re-ask of a malformed answer, and claude.logs,
`status` and the run's page naming the backend and model of every call."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REFERENCE, reference_replies
from llm_wires import (BEDROCK_MODEL, OPENAI_MODEL, VERTEX_MODEL, WIRES, ScriptedPlatform, aws_environment,
                       google_environment)
from pytest_httpserver import HTTPServer

from orchestrator import cli
from orchestrator.page import render_page
from orchestrator.runner import start_run

MALFORMED = "Sure! Here is the file you asked for."


@pytest.fixture(params=sorted(WIRES))
def platform(request, monkeypatch, httpserver: HTTPServer, tmp_path: Path) -> tuple[str, str, ScriptedPlatform]:
    """(spec, what the logs call the model, the scripted server): answers map_roles and Steps 1-4 with the
    reference files, Step 2 first with prose and no file."""
    name = request.param
    texts = [reply["text"] for reply in reference_replies()]
    texts.insert(2, MALFORMED)
    server = ScriptedPlatform(httpserver, WIRES[name], lambda text, body: texts.pop(0))
    if name == "bedrock":
        aws_environment(monkeypatch)
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", httpserver.url_for(""))
        return f"bedrock:{BEDROCK_MODEL}", "bedrock claude-sonnet-4-6", server
    if name == "vertex":
        google_environment(monkeypatch, tmp_path, httpserver.url_for("/token"), httpserver.url_for(""))
        httpserver.expect_request("/token", method="POST").respond_with_json(
            {"access_token": "ya29.minted", "expires_in": 3600, "token_type": "Bearer"})
        return f"vertex:{VERTEX_MODEL}", "vertex claude-sonnet-4-6", server
    httpserver.expect_request("/v1/models", method="GET").respond_with_json(
        {"object": "list", "data": [{"id": OPENAI_MODEL, "object": "model", "owned_by": "me"}]})
    return f"openai:{OPENAI_MODEL}@{httpserver.url_for('/v1')}", f"openai {OPENAI_MODEL}", server


def test_a_run_through_each_platform_writes_the_files_and_names_who_answered(
        project: Path, platform: tuple[str, str, ScriptedPlatform], capsys, monkeypatch):
    spec, answered_by, server = platform

    outcome = start_run(project, llm=spec, run_id="r1", until="generate_launch")

    assert outcome.status == "done", outcome.reason
    for name in ("helpers.py", "prompt_template.py", "train.py", "launch_training.sh"):
        assert (project / "workspace/generated" / name).read_text() == (REFERENCE / name).read_text()
    ledger = outcome.state["ledger"]
    assert [ledger[node]["calls"] for node in ("map_roles", "generate_helpers", "generate_prompts")] == [1, 1, 2]
    assert len(server.requests) == sum(row["calls"] for row in ledger.values()) == 6
    reasked = server.requests[3]  # Step 2 again: its malformed answer and the format error, in the conversation
    told = json.dumps(reasked["messages"][-2:])
    assert MALFORMED in told and "Your answer could not be used" in told

    calls = [e for e in map(json.loads, (project / "runs/r1/events.jsonl").read_text().splitlines())
             if e["action"] == "llm_call"]
    assert len(calls) == 6 and {f"{c['extra']['backend']} {c['extra']['model']}" for c in calls} == {answered_by}
    assert [c["node"] for c in calls] == ["map_roles", "generate_helpers", "generate_prompts", "generate_prompts",
                                          "generate_train", "generate_launch"]
    log = (project / "claude.logs").read_text()
    assert f"reason: asked {spec.partition(':')[0]} " in log and f"result: {answered_by} answered: " in log
    assert f"llm={spec} (" in log  # the start names the backend and how it is priced

    monkeypatch.setattr(sys, "argv", ["python -m orchestrator", "status", "r1", "--project-root", str(project)])
    with pytest.raises(SystemExit):
        cli.main()
    shown = capsys.readouterr().out
    unpriced = "; unpriced: $0, no price table names the model" if spec.startswith("openai") else ""
    assert "generate_prompts: 2 calls, " in shown and f"({answered_by} x2{unpriced})" in shown
    assert "map_roles: 1 calls, " in shown and f"({answered_by}{unpriced})" in shown

    page = render_page(project, "r1", None)
    assert "<th>answered by</th>" in page and page.count(f'<td class="by">{answered_by}') == 5
