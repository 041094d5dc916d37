"""Before a run does any work: each backend's credentials, model and server, refused in one line that names the
backend and what to set (exit 2 from the command line, nothing written); the price table."""

from __future__ import annotations

import base64
import json
import socket
import urllib.parse
from pathlib import Path

import pytest
from conftest import write_transcript
from llm_wires import (BEDROCK_MODEL, OPENAI_MODEL, SERVICE_ACCOUNT, VERTEX_MODEL, VERTEX_PROJECT, VERTEX_REGION,
                       WIRES, aws_environment, google_environment)
from pytest_httpserver import HTTPServer
from test_cli import refusal

from orchestrator.llm import LLMError, Usage, load_prices, make_llm
from orchestrator.llm.prices import Price, PriceTable, claude_family
from orchestrator.run.runs import RunSettings

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def refused(spec: str) -> str:
    with pytest.raises(LLMError) as caught:
        make_llm(spec).preflight()
    message = str(caught.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- Bedrock


@pytest.fixture
def aws(monkeypatch) -> pytest.MonkeyPatch:
    aws_environment(monkeypatch)
    return monkeypatch


def test_bedrock_needs_a_region(aws):
    aws.delenv("AWS_REGION")
    assert refused(f"bedrock:{BEDROCK_MODEL}").startswith("bedrock: no AWS region: export AWS_REGION=")


def test_bedrock_needs_credentials(aws):
    aws.delenv("AWS_ACCESS_KEY_ID")
    aws.delenv("AWS_SECRET_ACCESS_KEY")
    message = refused(f"bedrock:{BEDROCK_MODEL}")
    assert message.startswith("bedrock: no AWS credentials: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    assert "AWS_PROFILE" in message and "AWS_BEARER_TOKEN_BEDROCK" in message


def test_bedrock_names_a_profile_that_is_not_there(aws):
    aws.setenv("AWS_PROFILE", "no-such-profile")
    message = refused(f"bedrock:{BEDROCK_MODEL}")
    assert "no-such-profile" in message and message.startswith("bedrock: ") and "set AWS_PROFILE" in message


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "meta.llama3-70b-instruct-v1:0", "anthropic.sonnet"])
def test_bedrock_refuses_a_model_id_that_is_no_claude_on_bedrock(aws, model: str):
    assert refused(f"bedrock:{model}").startswith(f"bedrock: {model!r} is not a Claude model id on Bedrock")


def test_bedrock_with_an_api_key_sends_it_instead_of_a_signature(aws, httpserver: HTTPServer):
    aws.delenv("AWS_ACCESS_KEY_ID")
    aws.delenv("AWS_SECRET_ACCESS_KEY")
    aws.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key")
    aws.setenv("ANTHROPIC_BEDROCK_BASE_URL", httpserver.url_for(""))
    wire = WIRES["bedrock"]
    httpserver.expect_request(wire.path(False), method="POST").respond_with_response(wire.success("signed off"))

    llm = make_llm(f"bedrock:{BEDROCK_MODEL}")
    llm.preflight()

    assert llm.complete(USER, max_tokens=100).text == "signed off"
    assert httpserver.log[-1][0].headers["Authorization"] == "Bearer bedrock-api-key"


def test_bedrock_whose_endpoint_answers_nothing_is_refused(aws, closed_port: int):
    aws.setenv("ANTHROPIC_BEDROCK_BASE_URL", f"http://127.0.0.1:{closed_port}")
    message = refused(f"bedrock:{BEDROCK_MODEL}")
    assert message.startswith(f"bedrock: no server answers at http://127.0.0.1:{closed_port}")
    assert "ConnectionRefusedError" in message and "check AWS_REGION ('us-east-1')" in message


def test_anthropic_whose_endpoint_answers_nothing_is_refused(monkeypatch, closed_port: int):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{closed_port}")
    message = refused("anthropic")
    assert message.startswith(f"anthropic: no server answers at http://127.0.0.1:{closed_port}")
    assert message.endswith("check the network, or ANTHROPIC_BASE_URL where it is set")


# --------------------------------------------------------------------------- Vertex


@pytest.fixture
def gcloud(monkeypatch, tmp_path: Path, httpserver: HTTPServer) -> pytest.MonkeyPatch:
    """Application Default Credentials of a service account whose token endpoint is the local server."""
    google_environment(monkeypatch, tmp_path, httpserver.url_for("/token"), httpserver.url_for(""))
    return monkeypatch


def test_vertex_mints_its_token_from_application_default_credentials(gcloud, httpserver: HTTPServer):
    httpserver.expect_request("/token", method="POST").respond_with_json(
        {"access_token": "ya29.minted", "expires_in": 3600, "token_type": "Bearer"})
    wire = WIRES["vertex"]
    httpserver.expect_request(wire.path(False), method="POST").respond_with_response(wire.success("hi"))

    llm = make_llm(f"vertex:{VERTEX_MODEL}")
    llm.preflight()
    reply = llm.complete(USER, max_tokens=100)

    assert reply.text == "hi" and llm.label == f"vertex {VERTEX_MODEL} in {VERTEX_REGION}, project {VERTEX_PROJECT}"
    token_request = next(r for r, _ in httpserver.log if r.path == "/token")
    assertion = urllib.parse.parse_qs(token_request.get_data(as_text=True))["assertion"][0]
    claims = json.loads(base64.urlsafe_b64decode(assertion.split(".")[1] + "=="))
    assert claims["iss"] == SERVICE_ACCOUNT
    assert claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
    assert httpserver.log[-1][0].headers["Authorization"] == "Bearer ya29.minted"


def test_vertex_credentials_that_give_no_token_are_refused(gcloud, httpserver: HTTPServer):
    httpserver.expect_request("/token", method="POST").respond_with_json(
        {"error": "invalid_grant", "error_description": "Token has been expired or revoked."}, status=400)

    message = refused(f"vertex:{VERTEX_MODEL}")
    assert message.startswith("vertex: the Google credentials give no access token (")
    assert "invalid_grant" in message and message.endswith("gcloud auth application-default login`, or export "
                                                           "GOOGLE_APPLICATION_CREDENTIALS=KEY.json")


def test_vertex_needs_credentials(gcloud, tmp_path: Path):
    gcloud.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    message = refused(f"vertex:{VERTEX_MODEL}")
    assert message.startswith("vertex: no Google credentials (") and "absent.json" in message


def test_vertex_needs_a_region(gcloud):
    gcloud.delenv("CLOUD_ML_REGION")
    assert refused(f"vertex:{VERTEX_MODEL}").startswith("vertex: no region: export CLOUD_ML_REGION=")


def test_vertex_needs_a_project(gcloud):
    gcloud.delenv("ANTHROPIC_VERTEX_PROJECT_ID")  # and the key file names none
    assert refused(f"vertex:{VERTEX_MODEL}") == \
        "vertex: no Google Cloud project: export ANTHROPIC_VERTEX_PROJECT_ID=PROJECT"


def test_vertex_refuses_a_model_id_that_is_no_claude(gcloud):
    assert refused("vertex:gemini-2.5-pro").startswith("vertex: 'gemini-2.5-pro' is not a Claude model id on Vertex")


# --------------------------------------------------------------------------- OpenAI-compatible servers


@pytest.fixture
def openai_env(monkeypatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return monkeypatch


def models(httpserver: HTTPServer, *ids: str, status: int = 200) -> None:
    body = {"object": "list", "data": [{"id": i, "object": "model", "owned_by": "me"} for i in ids]} \
        if status == 200 else {"error": {"message": "no", "type": "authentication_error", "code": status}}
    httpserver.expect_request("/v1/models", method="GET").respond_with_json(body, status=status)


def test_openai_server_that_is_not_there_is_refused(openai_env, closed_port: int):
    url = f"http://127.0.0.1:{closed_port}/v1"
    message = refused(f"openai:{OPENAI_MODEL}@{url}")
    assert message.startswith(f"openai: no server answers at {url} (APIConnectionError")
    assert message.endswith("start it, or give its URL: --llm openai:MODEL@URL (or OPENAI_BASE_URL)")


def test_openai_model_the_server_does_not_serve_is_refused_with_what_it_serves(openai_env, httpserver: HTTPServer):
    models(httpserver, "qwen2.5-coder:7b", "llama3.1:8b")
    url = httpserver.url_for("/v1")
    assert refused(f"openai:qwen2.5-coder:32b@{url}") == (
        f"openai: the OpenAI-compatible server at {url} serves no model 'qwen2.5-coder:32b' (it serves: "
        f"'qwen2.5-coder:7b', 'llama3.1:8b'): use --llm openai:MODEL@{url} with one of them")


@pytest.mark.parametrize("status, says", [(401, "refused the key"), (403, "refused the key"),
                                          (404, "does not list its models")])
def test_openai_server_refusing_the_model_list_is_refused(openai_env, httpserver: HTTPServer, status: int, says: str):
    models(httpserver, status=status)
    message = refused(f"openai:{OPENAI_MODEL}@{httpserver.url_for('/v1')}")
    assert says in message and f"HTTP {status} " in message
    assert ("set OPENAI_API_KEY" in message) == (status != 404)


@pytest.mark.parametrize("body, content_type", [("<html>a web page</html>", "text/html"),
                                                ('{"models": []}', "application/json")])
def test_a_url_that_is_no_openai_server_is_refused(openai_env, httpserver: HTTPServer, body: str, content_type: str):
    httpserver.expect_request("/models", method="GET").respond_with_data(body, content_type=content_type)
    message = refused(f"openai:{OPENAI_MODEL}@{httpserver.url_for('')}")
    assert message.startswith(f"openai: {httpserver.url_for('').rstrip('/')} does not answer /models as an OpenAI-")
    assert message.endswith("check the URL (it usually ends in /v1)")


def test_openai_reads_its_url_and_key_from_the_environment(openai_env, httpserver: HTTPServer):
    models(httpserver, OPENAI_MODEL)
    openai_env.setenv("OPENAI_BASE_URL", httpserver.url_for("/v1"))
    openai_env.setenv("OPENAI_API_KEY", "sk-local")

    llm = make_llm(f"openai:{OPENAI_MODEL}")
    llm.preflight()

    assert llm.label == f"openai {OPENAI_MODEL} at {httpserver.url_for('/v1')}"
    assert httpserver.log[0][0].headers["Authorization"] == "Bearer sk-local"
    assert llm.price_note.startswith(f"$0: {OPENAI_MODEL!r} is in no price table, so it counts as a server of your own")


def test_openai_s_own_api_needs_its_key(openai_env):
    assert refused("openai:gpt-4.1").startswith("openai: OPENAI_API_KEY is not set: export OPENAI_API_KEY=")


# --------------------------------------------------------------------------- prices


@pytest.mark.parametrize("model, family", [
    ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
    ("us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1-20250805"),
    ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5-20251001"),
    ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5-20250929"),
    ("claude-opus-4-1@latest", "claude-opus-4-1"),
    ("claude-sonnet-4-6", "claude-sonnet-4-6"),
    ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-Coder-7B-Instruct"),
])
def test_claude_model_ids_of_the_platforms_are_priced_by_their_family(model: str, family: str):
    assert claude_family(model) == family


def test_the_researcher_s_prices_come_before_the_list_prices(tmp_path: Path):
    path = tmp_path / "llm_prices.json"
    path.write_text(json.dumps({"us.anthropic.claude-sonnet-4-5": {"input": 3.3, "output": 16.5},
                                "claude-haiku": {"input": 0.5, "output": 2.5, "cache_read": 0.01}}))
    table = load_prices(path)
    million = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)

    assert table.claude("us.anthropic.claude-sonnet-4-5-20250929-v1:0")[0].usd(million) == pytest.approx(
        3.3 + 16.5 + 3.3 * 1.25 + 3.3 * 0.1)
    assert table.claude("claude-haiku-4-5@20251001") == (Price(0.5, 2.5, 0.625, 0.01), f"priced from {path}")
    assert table.claude("anthropic.claude-opus-4-5-20251101-v1:0") == (Price.of(5.0, 25.0),
                                                                       "priced at Anthropic's list prices")
    price, note = table.claude("claude-future-9")
    assert price == Price.of(3.0, 15.0) and note.startswith("priced as Sonnet: 'claude-future-9' is in no price")
    assert PriceTable().own_server("my-coder")[0] is None


@pytest.mark.parametrize("content", ["{not json", '{"m": {"input": 1}}', '{"m": 3}', "[1]"])
def test_a_price_table_that_cannot_be_read_says_its_format(tmp_path: Path, content: str):
    path = tmp_path / "llm_prices.json"
    path.write_text(content)
    with pytest.raises(LLMError, match=r"^cannot read the price table .*expected JSON \{\"MODEL-PREFIX\""):
        load_prices(path)


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("llm_spec, setup, says", [
    ("openai:m@http://127.0.0.1:{port}/v1", lambda env, root: None, "error: openai: no server answers at"),
    (f"bedrock:{BEDROCK_MODEL}", lambda env, root: env.delenv("AWS_REGION"), "error: bedrock: no AWS region"),
    (f"vertex:{VERTEX_MODEL}", lambda env, root: env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(root / "none")),
     "error: vertex: no Google credentials"),
    ("replay:{transcript}", lambda env, root: (root / "llm_prices.json").write_text("{"),
     "error: cannot read the price table"),
    ("bedrock:", lambda env, root: None, "error: --llm 'bedrock:' names no model"),
])
def test_run_refuses_a_backend_that_cannot_work_in_one_line_before_writing_anything(
        project: Path, tmp_path: Path, aws, closed_port: int, capsys, llm_spec: str, setup, says: str):
    aws.setenv("CLOUD_ML_REGION", VERTEX_REGION)
    aws.setenv("ANTHROPIC_VERTEX_PROJECT_ID", VERTEX_PROJECT)
    setup(aws, project)
    before = sorted(p.name for p in project.iterdir())
    spec = llm_spec.format(port=closed_port, transcript=write_transcript(tmp_path / "t.json", [])[len("replay:"):])

    shown = refusal(["run", "--llm", spec, "--project-root", str(project)], capsys, aws)

    assert shown.startswith(says)
    assert sorted(p.name for p in project.iterdir()) == before


@pytest.mark.parametrize("value", ["0", "64001"])
def test_run_refuses_an_answer_budget_no_backend_takes(project: Path, tmp_path: Path, capsys, monkeypatch, value):
    shown = refusal(["run", "--llm", write_transcript(tmp_path / "t.json", []), "--max-answer-tokens", value,
                     "--project-root", str(project)], capsys, monkeypatch)
    assert f"--max-answer-tokens must be from 1 to 64000, got {value}" in shown


def test_resume_refuses_an_answer_budget_no_backend_takes(project: Path, capsys, monkeypatch):
    RunSettings(run_id="r1", llm="replay:x.json", project_root=str(project),
                source_of_truth=str(project / "source_of_truth"), status="budget").save()
    shown = refusal(["resume", "r1", "--max-answer-tokens", "0", "--project-root", str(project)], capsys, monkeypatch)
    assert "--max-answer-tokens must be from 1 to 64000, got 0" in shown
