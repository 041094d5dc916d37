"""Wire-level tests of the Bedrock, Vertex and OpenAI-compatible backends: a local HTTP server speaks each
platform's protocol (tests/llm_wires.py), successes, cut answers, streams, refusals and retries included; and what
local coder models send: refusals for length, reasoning in the text or apart, tool calls, no usage, the context
length a server states."""

from __future__ import annotations

import json

import pytest
from llm_wires import (AWS_REGION, BEDROCK_MODEL, OPENAI_MODEL, OPENAI_USAGE, VERTEX_MODEL, VERTEX_PROJECT,
                       VERTEX_REGION, WIRES, Wire, aws_environment, sigv4_signature_matches)
from messages_api import USAGE
from pytest_httpserver import HTTPServer
from werkzeug import Response

from tokenizers import Tokenizer

from orchestrator.llm import LLMError, Usage
from orchestrator.llm.context import ContextExceeded, model_counter
from orchestrator.llm.prices import PriceTable, Price
from orchestrator.llm.reported import call_line

USER = [{"role": "user", "content": "write the file"}]


@pytest.fixture(params=sorted(WIRES))
def wire(request, monkeypatch) -> Wire:
    aws_environment(monkeypatch)
    return WIRES[request.param]


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def retries() -> list[str]:
    return []


@pytest.fixture
def make(httpserver: HTTPServer, wire: Wire, sleeps: list[float], retries: list[str]):
    def build(**kwargs):
        return wire.build(httpserver, sleep=sleeps.append, on_retry=retries.append, **kwargs)

    return build


def respond(httpserver: HTTPServer, wire: Wire, response: Response, *, stream: bool = False) -> None:
    httpserver.expect_ordered_request(wire.path(stream), method="POST").respond_with_response(response)


def sent(httpserver: HTTPServer) -> list:
    return [request for request, _ in httpserver.log]


# --------------------------------------------------------------------------- success paths


def test_an_answer_carries_its_text_tokens_cost_and_request_id_and_the_request_is_the_platform_s(
        httpserver: HTTPServer, wire: Wire, make):
    respond(httpserver, wire, wire.success("the answer"))

    reply = make().complete(USER, system="you write code", max_tokens=1024, cache_prefix=["GAME", "TEMPLATE"],
                            tag="write")

    assert reply.text == "the answer" and reply.stop_reason == "end_turn" and reply.request_id == "req_1"
    assert reply.backend == wire.name
    (request,) = sent(httpserver)
    body = json.loads(request.get_data())
    assert body["max_tokens"] == 1024 and not body.get("stream")
    if wire.name == "openai":
        assert reply.usage == Usage(input_tokens=120, output_tokens=30, cache_read_input_tokens=7000)
        assert reply.cost_usd == 0.0 and reply.model == OPENAI_MODEL
        assert request.headers["Authorization"] == "Bearer test-key"
        assert body["model"] == OPENAI_MODEL
        assert body["messages"] == [{"role": "system", "content": "you write code"},
                                    {"role": "user", "content": "GAME\n\nTEMPLATE\n\nwrite the file"}]
        return
    assert reply.usage == Usage(**USAGE)
    assert reply.cost_usd == pytest.approx(Price.of(3.0, 15.0).usd(Usage(**USAGE))) and reply.cost_usd > 0
    assert "model" not in body  # the path names it
    assert body["system"] == [{"type": "text", "text": "you write code", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"][0]["content"][1] == {"type": "text", "text": "TEMPLATE",
                                                  "cache_control": {"type": "ephemeral"}}
    assert body["anthropic_version"]  # the platforms take the API version in the body, not a header
    if wire.name == "bedrock":
        assert sigv4_signature_matches(request) and not sigv4_signature_matches(request, secret="another secret")
        assert f"/{AWS_REGION}/bedrock/aws4_request" in request.headers["Authorization"]
    else:
        assert request.headers["Authorization"] == "Bearer ya29.test"


def test_a_long_answer_is_streamed_and_assembled(httpserver: HTTPServer, wire: Wire, make):
    respond(httpserver, wire, wire.stream(["Hel", "lo ", "world"]), stream=True)

    reply = make().complete(USER, max_tokens=16000, cache_prefix=["P"])

    assert reply.text == "Hello world" and reply.stop_reason == "end_turn" and reply.request_id == "req_s"
    (request,) = sent(httpserver)
    body = json.loads(request.get_data())
    assert body["max_tokens"] == 16000
    if wire.name == "openai":
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert reply.usage.cache_read_input_tokens == OPENAI_USAGE["prompt_tokens_details"]["cached_tokens"]
    else:
        assert reply.usage == Usage(**USAGE)
    if wire.name == "bedrock":
        assert sigv4_signature_matches(request)


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_cut_at_its_budget_says_so(httpserver: HTTPServer, wire: Wire, make, stream: bool):
    respond(httpserver, wire, wire.stream(["half an"], cut=True) if stream else wire.success("half an", cut=True),
            stream=stream)

    reply = make().complete(USER, max_tokens=8000 if stream else 100)

    assert reply.text == "half an" and reply.stop_reason == "max_tokens"


def test_the_backend_s_ceiling_caps_the_budget_asked_for(httpserver: HTTPServer, wire: Wire, make):
    respond(httpserver, wire, wire.success("short"))

    llm = make(max_output_tokens=512)
    assert llm.max_output_tokens == 512
    llm.complete(USER, max_tokens=16000)

    assert json.loads(sent(httpserver)[0].get_data())["max_tokens"] == 512  # and not streamed: under 4096


# --------------------------------------------------------------------------- retries


def test_a_rate_limit_waits_for_retry_after_then_succeeds(httpserver: HTTPServer, wire: Wire, make, sleeps, retries):
    limited = wire.refusal(429, "slow down")
    limited.headers["retry-after"] = "7"
    respond(httpserver, wire, limited)
    respond(httpserver, wire, wire.success("ok"))

    assert make().complete(USER, max_tokens=100, tag="fix").text == "ok"

    assert sleeps == [pytest.approx(7.0)] and len(sent(httpserver)) == 2
    assert retries[0].startswith("[fix] ") and " attempt 1/6 failed (HTTP 429 " in retries[0]
    assert "slow down" in retries[0] and "\n" not in retries[0]


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retried_with_growing_waits(httpserver: HTTPServer, wire: Wire, make, sleeps, status):
    for _ in range(3):
        respond(httpserver, wire, wire.refusal(status, "try later"))
    respond(httpserver, wire, wire.success("finally"))

    assert make(max_attempts=4).complete(USER, max_tokens=100).text == "finally"
    assert len(sleeps) == 3 and sleeps[0] < sleeps[2] <= 60.0


def test_a_body_that_is_no_answer_is_retried_then_given_up(httpserver: HTTPServer, wire: Wire, make, retries):
    httpserver.expect_request(wire.path(False), method="POST").respond_with_data(
        '{"unexpected": 1}', content_type="application/json")

    with pytest.raises(LLMError, match=r" still failing after 3 attempts: malformed response") as caught:
        make(max_attempts=3).complete(USER, max_tokens=100)
    assert "\n" not in str(caught.value) and len(sent(httpserver)) == 3 and len(retries) == 2


def test_a_stream_cut_off_is_retried(httpserver: HTTPServer, wire: Wire, make, retries):
    respond(httpserver, wire, wire.stream(["partial"], complete=False), stream=True)
    respond(httpserver, wire, wire.stream(["complete"]), stream=True)

    assert make().complete(USER, max_tokens=8000).text == "complete"
    assert "malformed response" in retries[0] and "stream ended without" in retries[0]


def test_server_trouble_inside_a_stream_is_retried(httpserver: HTTPServer, wire: Wire, make, retries):
    respond(httpserver, wire, wire.stream_trouble(), stream=True)
    respond(httpserver, wire, wire.stream(["ok"]), stream=True)

    assert make().complete(USER, max_tokens=8000).text == "ok"
    expected = {"bedrock": "throttlingException", "vertex": "overloaded_error", "openai": "engine overloaded"}
    assert expected[wire.name] in retries[0]


@pytest.mark.parametrize("status, says", [
    (400, {"bedrock": "rejected the request", "vertex": "rejected the request", "openai": "rejected the request"}),
    (403, {"bedrock": "AWS_ACCESS_KEY_ID", "vertex": f"project '{VERTEX_PROJECT}' may use",
           "openai": "OPENAI_API_KEY"}),
    (404, {"bedrock": f"is it offered in {AWS_REGION}", "vertex": f"is it served in {VERTEX_REGION}",
           "openai": "it usually ends in /v1"}),
])
def test_a_refusal_is_not_retried_and_says_what_to_check(httpserver: HTTPServer, wire: Wire, make, sleeps,
                                                         status: int, says: dict):
    httpserver.expect_request(wire.path(False), method="POST").respond_with_response(wire.refusal(status, "nope"))

    with pytest.raises(LLMError) as caught:
        make().complete(USER, max_tokens=100)

    message = str(caught.value)
    assert f"HTTP {status} " in message and ": nope" in message and says[wire.name] in message
    assert "\n" not in message and len(sent(httpserver)) == 1 and sleeps == []


def test_a_server_saying_do_not_retry_is_obeyed(httpserver: HTTPServer, wire: Wire, make):
    spent = wire.refusal(429, "quota spent for the month")
    spent.headers["x-should-retry"] = "false"
    httpserver.expect_request(wire.path(False), method="POST").respond_with_response(spent)

    with pytest.raises(LLMError, match="rejected the request .*quota spent for the month"):
        make().complete(USER, max_tokens=100)
    assert len(sent(httpserver)) == 1


# --------------------------------------------------------------------------- prices


def test_a_price_table_of_the_researcher_s_own_prices_a_model(httpserver: HTTPServer, wire: Wire, make):
    respond(httpserver, wire, wire.success("priced"))
    model = {"bedrock": BEDROCK_MODEL, "vertex": VERTEX_MODEL, "openai": OPENAI_MODEL}[wire.name]
    table = PriceTable({model[:12]: Price.of(2.0, 10.0, cache_read=0.5)}, source="llm_prices.json")

    llm = make(prices=table)
    reply = llm.complete(USER, max_tokens=100)

    assert llm.price_note == "priced from llm_prices.json"
    assert reply.cost_usd == pytest.approx(table.own[model[:12]].usd(reply.usage)) and reply.cost_usd > 0


# --------------------------------------------------------------------------- local coder models


def test_a_refusal_for_length_says_the_numbers_on_every_wire(httpserver: HTTPServer, wire: Wire, make):
    text = ("This model's maximum context length is 32768 tokens. However, you requested 48213 tokens (32213 in the "
            "messages, 16000 in the completion). Please reduce the length of the messages or completion.")
    httpserver.expect_request(wire.path(False), method="POST").respond_with_response(wire.refusal(400, text))

    with pytest.raises(ContextExceeded) as caught:
        make().complete(USER, max_tokens=100)
    assert (caught.value.context, caught.value.prompt_tokens) == (32768, 32213) and len(sent(httpserver)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_is_never_the_text_of_an_answer(httpserver: HTTPServer, wire: Wire, make, stream: bool):
    answer = "<think>\nFILE: draft.py\n```\nno\n```\n</think>\n\nFILE: helpers.py"
    respond(httpserver, wire, wire.stream([answer[:20], answer[20:]]) if stream else wire.success(answer),
            stream=stream)

    reply = make().complete(USER, max_tokens=8000 if stream else 100)
    assert reply.text == "FILE: helpers.py" and reply.reasoning == "FILE: draft.py\n```\nno\n```"


def openai_body(message: dict, finish: str = "stop", usage: dict | None = OPENAI_USAGE) -> Response:
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": OPENAI_MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            **({"usage": usage} if usage else {})}
    return Response(json.dumps(body), content_type="application/json")


def openai_stream(*deltas: dict, finish: str = "stop") -> Response:
    chunks = [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": OPENAI_MODEL,
               "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    chunks.append({**chunks[0], "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    data = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return Response(data, content_type="text/event-stream")


@pytest.fixture
def openai(httpserver: HTTPServer, sleeps, retries):
    return lambda **kwargs: WIRES["openai"].build(httpserver, sleep=sleeps.append, on_retry=retries.append, **kwargs)


def test_a_reasoning_parser_s_field_is_the_reasoning_and_a_tool_call_is_named(httpserver: HTTPServer, openai):
    path = "/v1/chat/completions"
    httpserver.expect_ordered_request(path).respond_with_response(
        openai_body({"content": "the answer", "reasoning_content": "thinking apart"}))
    httpserver.expect_ordered_request(path).respond_with_response(openai_body(
        {"content": None, "tool_calls": [{"id": "1", "type": "function",
                                          "function": {"name": "write_file", "arguments": "{}"}}]}, "tool_calls"))
    httpserver.expect_ordered_request(path).respond_with_response(openai_stream(
        {"role": "assistant", "content": None},
        {"tool_calls": [{"index": 0, "id": "1", "type": "function", "function": {"name": "edit", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, finish="tool_calls"))

    llm = openai()
    first, second, third = (llm.complete(USER, max_tokens=budget) for budget in (100, 100, 8000))
    assert (first.text, first.reasoning) == ("the answer", "thinking apart")
    assert (second.text, second.tool_calls, third.tool_calls) == ("", ("write_file",), ("edit",))


def test_a_server_that_reports_no_usage_is_counted_and_says_so(httpserver: HTTPServer, openai, tiny_model_dir):
    httpserver.expect_request("/v1/chat/completions").respond_with_response(
        openai_body({"content": "an answer of some words"}, usage=None))

    estimated = openai().complete(USER, max_tokens=100)
    counted = WIRES["openai"].build(httpserver)
    counted.window.counter = model_counter(str(tiny_model_dir))
    exact = counted.complete(USER, max_tokens=100)

    assert estimated.counted == "estimate" and estimated.usage.input_tokens > 0 and estimated.usage.output_tokens > 0
    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    assert exact.counted == "tokenizer"
    assert exact.usage.output_tokens == len(tokenizer.encode("an answer of some words", add_special_tokens=False).ids)
    assert "(estimated: the server reported none)" in call_line(estimated)


@pytest.mark.parametrize("entry, ollama, context", [
    ({"max_model_len": 32768}, None, 32768),  # vLLM, SGLang
    ({}, {"parameters": "num_ctx 8192\nstop \"<|im_end|>\""}, 8192),  # Ollama, num_ctx set for the model
    ({}, {"parameters": "stop \"<|im_end|>\""}, None),  # Ollama with its default: not stated
])
def test_preflight_reads_the_context_length_where_the_server_says_it(httpserver: HTTPServer, openai, entry, ollama,
                                                                     context):
    httpserver.expect_request("/v1/models").respond_with_json(
        {"object": "list", "data": [{"id": OPENAI_MODEL, "object": "model", "owned_by": "me", **entry}]})
    if ollama is not None:
        httpserver.expect_request("/api/show", method="POST", json={"model": OPENAI_MODEL}).respond_with_json(ollama)

    llm = openai()
    llm.preflight()
    assert llm.window.tokens == context

    given = openai(max_context=16384)
    given.preflight()
    assert given.window.tokens == 16384 and given.window.source == "--max-context"
