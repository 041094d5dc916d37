"""Wire-level tests of the LLM layer: a local HTTP server speaks the Messages API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from messages_api import USAGE, error_json, message_json, sse, stream_events

from orchestrator.llm.context import ContextExceeded
from orchestrator.llm import (
    AnthropicLLM,
    LLMError,
    ReplayLLM,
    Usage,
    make_llm,
    price_usd,
)

FIXTURES = Path(__file__).parent / "fixtures"
PATH = "/v1/messages"
USER = [{"role": "user", "content": "write the file"}]


def respond_sse(httpserver: HTTPServer, body: str, request_id: str = "req_stream") -> None:
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_data(
        body, content_type="text/event-stream", headers={"request-id": request_id}
    )


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def retries() -> list[str]:
    return []


@pytest.fixture
def make(httpserver: HTTPServer, sleeps: list[float], retries: list[str]):
    def build(**kwargs) -> AnthropicLLM:
        return AnthropicLLM(
            api_key="test-key",
            base_url=httpserver.url_for(""),
            sleep=sleeps.append,
            on_retry=retries.append,
            **kwargs,
        )

    return build


def bodies(httpserver: HTTPServer) -> list[dict]:
    return [json.loads(request.get_data()) for request, _ in httpserver.log]


# --------------------------------------------------------------------------- success paths


def test_success_returns_reply_and_sends_cached_blocks(httpserver: HTTPServer, make):
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        message_json("the answer", USAGE), headers={"request-id": "req_123"}
    )

    reply = make().complete(
        USER, system="you write code", max_tokens=1024, cache_prefix=["GAME SOURCE", "TEMPLATE"], tag="write"
    )

    assert reply.text == "the answer"
    assert reply.usage == Usage(**USAGE)
    assert reply.cost_usd == pytest.approx(price_usd("claude-sonnet-4-6", Usage(**USAGE))) and reply.cost_usd > 0
    assert reply.request_id == "req_123"
    assert reply.stop_reason == "end_turn"
    assert reply.model == "claude-sonnet-4-6"

    (request, _), = httpserver.log
    # anthropic 2.x sends the key as a Bearer token; 0.x as x-api-key.
    assert request.headers.get("x-api-key") == "test-key" or request.headers.get("authorization") == "Bearer test-key"
    body = json.loads(request.get_data())
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == 1024
    assert "stream" not in body or body["stream"] is False
    assert body["system"] == [{"type": "text", "text": "you write code", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"] == [{
        "role": "user",
        "content": [
            {"type": "text", "text": "GAME SOURCE"},
            {"type": "text", "text": "TEMPLATE", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "write the file"},
        ],
    }]


def test_caller_messages_are_not_mutated_and_prefix_goes_to_first_user_message(httpserver: HTTPServer, make):
    httpserver.expect_request(PATH, method="POST").respond_with_json(message_json())
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "second"},
    ]
    original = json.loads(json.dumps(messages))

    make().complete(messages, max_tokens=100, cache_prefix=["BIG"])

    assert messages == original
    sent = bodies(httpserver)[0]
    assert "system" not in sent
    assert sent["messages"][0]["content"][0] == {"type": "text", "text": "BIG", "cache_control": {"type": "ephemeral"}}
    assert sent["messages"][1:] == original[1:]


def test_streaming_path_for_long_replies(httpserver: HTTPServer, make):
    respond_sse(httpserver, sse(*stream_events(["Hel", "lo ", "world"])), request_id="req_s1")

    reply = make().complete(USER, system="sys", max_tokens=16000, cache_prefix=["P"])

    assert reply.text == "Hello world"
    assert reply.usage == Usage(**USAGE)
    assert reply.request_id == "req_s1"
    assert reply.stop_reason == "end_turn"
    body = bodies(httpserver)[0]
    assert body["stream"] is True and body["max_tokens"] == 16000
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


# --------------------------------------------------------------------------- retries


def test_529_overloaded_then_success_retries_once(httpserver: HTTPServer, make, sleeps, retries):
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        error_json("overloaded_error", "Overloaded"), status=529
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(message_json("ok"))

    reply = make().complete(USER, max_tokens=100, tag="fix")

    assert reply.text == "ok"
    assert len(httpserver.log) == 2
    assert len(sleeps) == 1
    assert len(retries) == 1
    assert retries[0].startswith("[fix] Anthropic API attempt 1/6 failed (HTTP 529 overloaded_error: Overloaded)")
    assert "\n" not in retries[0]


@pytest.mark.parametrize("retry_after, expected", [("7", 7.0), ("120", 60.0)])
def test_429_waits_for_retry_after_within_the_cap(httpserver: HTTPServer, make, sleeps, retry_after, expected):
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        error_json("rate_limit_error", "slow down"), status=429, headers={"retry-after": retry_after}
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(message_json())

    make(backoff_max_s=60.0).complete(USER, max_tokens=100)

    assert sleeps == [pytest.approx(expected)]


def test_500_three_times_then_success(httpserver: HTTPServer, make, sleeps):
    for _ in range(3):
        httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
            error_json("api_error", "Internal server error"), status=500
        )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(message_json("finally"))

    reply = make(max_attempts=4, backoff_initial_s=1.0, backoff_max_s=60.0).complete(USER, max_tokens=100)

    assert reply.text == "finally"
    assert len(httpserver.log) == 4
    assert len(sleeps) == 3
    assert sleeps[0] < sleeps[2] <= 60.0  # exponential: ~1-2 s, then ~4-5 s


def test_malformed_json_is_retried(httpserver: HTTPServer, make, retries):
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_data(
        "{not json", content_type="application/json"
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(message_json("fine"))

    assert make().complete(USER, max_tokens=100).text == "fine"
    assert "malformed response" in retries[0]


@pytest.mark.parametrize(
    "body, content_type",
    [("{not json", "application/json"), ('{"unexpected": 1}', "application/json"), ("plain text", "text/plain")],
)
def test_persistent_malformed_response_raises(httpserver: HTTPServer, make, body, content_type):
    httpserver.expect_request(PATH, method="POST").respond_with_data(body, content_type=content_type)

    with pytest.raises(LLMError, match=r"still failing after 3 attempts: malformed response"):
        make(max_attempts=3).complete(USER, max_tokens=100)
    assert len(httpserver.log) == 3


def test_exhausted_retries_raise_with_attempt_count(httpserver: HTTPServer, make, sleeps, retries):
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        error_json("overloaded_error", "Overloaded"), status=529
    )

    with pytest.raises(LLMError) as caught:
        make(max_attempts=3).complete(USER, max_tokens=100)

    message = str(caught.value)
    assert message.startswith("Anthropic API still failing after 3 attempts: HTTP 529 overloaded_error")
    assert message.endswith("try again later or resume the run")
    assert "\n" not in message
    assert len(httpserver.log) == 3
    assert len(sleeps) == len(retries) == 2


def test_401_aborts_at_once(httpserver: HTTPServer, make, sleeps):
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        error_json("authentication_error", "invalid x-api-key"), status=401
    )

    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY"):
        make().complete(USER, max_tokens=100)
    assert len(httpserver.log) == 1
    assert sleeps == []


@pytest.mark.parametrize("status, kind", [(400, "invalid_request_error"), (403, "permission_error"), (404, "not_found_error")])
def test_client_errors_are_not_retried(httpserver: HTTPServer, make, status, kind):
    httpserver.expect_request(PATH, method="POST").respond_with_json(error_json(kind, "nope"), status=status)

    with pytest.raises(LLMError, match=f"HTTP {status} {kind}: nope") as caught:
        make().complete(USER, max_tokens=100)
    assert "\n" not in str(caught.value)
    assert len(httpserver.log) == 1


def test_server_saying_do_not_retry_is_obeyed(httpserver: HTTPServer, make):
    httpserver.expect_request(PATH, method="POST").respond_with_json(
        error_json("rate_limit_error", "spend limit reached"), status=429, headers={"x-should-retry": "false"}
    )

    with pytest.raises(LLMError, match="rejected the request"):
        make().complete(USER, max_tokens=100)
    assert len(httpserver.log) == 1


def test_stream_cut_off_before_message_stop_is_retried(httpserver: HTTPServer, make, retries):
    respond_sse(httpserver, sse(*stream_events(["partial"])[:3]))
    respond_sse(httpserver, sse(*stream_events(["complete"])))

    assert make().complete(USER).text == "complete"
    assert "stream ended without message_stop" in retries[0]


def test_stream_dropped_connection_is_retried(httpserver: HTTPServer, make, retries):
    partial = sse(*stream_events(["partial"])[:2]).encode()
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_response(
        Response(iter([partial]), content_type="text/event-stream", headers={"Content-Length": "100000"})
    )
    respond_sse(httpserver, sse(*stream_events(["complete"])))

    assert make().complete(USER).text == "complete"
    assert "RemoteProtocolError" in retries[0]


def test_stream_overloaded_error_event_is_retried(httpserver: HTTPServer, make, retries):
    respond_sse(httpserver, sse(stream_events([])[0], error_json("overloaded_error", "Overloaded")))
    respond_sse(httpserver, sse(*stream_events(["ok"])))

    assert make().complete(USER).text == "ok"
    assert "overloaded_error" in retries[0]


# --------------------------------------------------------------------------- construction


def test_missing_api_key_fails_at_construction(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    with pytest.raises(LLMError) as caught:
        AnthropicLLM()

    assert str(caught.value) == (
        "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=... "
        "or run the offline demo with `python -m orchestrator demo`"
    )


def test_api_key_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")

    assert AnthropicLLM("claude-haiku-4-5").model == "claude-haiku-4-5"


def test_cache_prefix_without_user_message_is_refused(make):
    with pytest.raises(LLMError, match="needs a user message"):
        make().complete([{"role": "assistant", "content": "x"}], cache_prefix=["P"])


# --------------------------------------------------------------------------- replay


def test_replay_plays_in_order_and_records_calls():
    llm = ReplayLLM(["one", "two"])

    first = llm.complete(USER, system="s", cache_prefix=["P"], tag="a")
    second = llm.complete([{"role": "user", "content": "again"}], tag="b")

    assert (first.text, second.text) == ("one", "two")
    assert first.model == "replay" and first.cost_usd == 0.0
    assert llm.remaining == 0
    assert [call["tag"] for call in llm.calls] == ["a", "b"]
    assert llm.calls[0]["system"] == "s"
    assert llm.calls[0]["messages"] == USER
    assert llm.calls[0]["cache_prefix"] == ["P"]


def test_replay_exhausted():
    llm = ReplayLLM(["only"])
    llm.complete(USER)

    with pytest.raises(LLMError, match=r"^replay transcript exhausted after 1 replies$"):
        llm.complete(USER)


def test_replay_transcript_file_checks_tags_and_prices_usage():
    llm = ReplayLLM(transcript=FIXTURES / "llm_replay.json")
    assert llm.remaining == 3

    plan = llm.complete(USER, tag="plan")
    assert plan.text == "the plan"
    assert plan.usage == Usage(input_tokens=1000, output_tokens=200)
    assert plan.cost_usd == pytest.approx((1000 * 3 + 200 * 15) / 1e6)

    assert llm.complete(USER, tag="anything").text == "untagged reply"

    with pytest.raises(LLMError, match=r"out of step: expected a call for 'write', got 'review'"):
        llm.complete(USER, tag="review")
    assert llm.remaining == 1
    assert llm.complete(USER, tag="write").usage.cache_read_input_tokens == 4000


@pytest.mark.parametrize("content", ["{broken", '{"replies": [{"txt": "x"}]}', '{"no_replies": []}'])
def test_replay_bad_transcript_is_an_llm_error(tmp_path: Path, content: str):
    path = tmp_path / "t.json"
    path.write_text(content)

    with pytest.raises(LLMError, match="cannot load replay transcript"):
        ReplayLLM(transcript=path)


def test_replay_missing_transcript_is_an_llm_error(tmp_path: Path):
    with pytest.raises(LLMError, match="cannot load replay transcript"):
        ReplayLLM(transcript=tmp_path / "absent.json")


# --------------------------------------------------------------------------- make_llm, prices


def test_make_llm_specs(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")

    assert make_llm("anthropic").model == "claude-sonnet-4-6"
    assert make_llm("anthropic:claude-opus-4-5").model == "claude-opus-4-5"
    replay = make_llm(f"replay:{FIXTURES / 'llm_replay.json'}")
    assert isinstance(replay, ReplayLLM) and replay.remaining == 3


@pytest.mark.parametrize("spec", ["gpt", "anthropic:", "replay:", "", "Anthropic"])
def test_make_llm_rejects_unknown_specs(spec: str):
    with pytest.raises(LLMError) as caught:
        make_llm(spec)
    assert str(caught.value) == (f"unknown LLM spec {spec!r}: use 'anthropic[:MODEL]', 'bedrock:MODEL', "
                                 "'vertex:MODEL', 'openai:MODEL[@URL]' or 'replay:PATH'")


@pytest.mark.parametrize("spec, example", [("openai", "openai:Qwen/"), ("bedrock:", "bedrock:us.anthropic.claude-"),
                                           ("vertex", "vertex:claude-sonnet-4-5@")])
def test_a_spec_without_its_model_says_how_to_name_one(spec: str, example: str):
    with pytest.raises(LLMError, match=rf"^--llm {spec!r} names no model: use \w+:MODEL, e.g. {re.escape(example)}"):
        make_llm(spec)


@pytest.mark.parametrize(
    "model, input_price, output_price",
    [
        ("claude-sonnet-4-5", 3, 15),
        ("claude-sonnet-4-20250514", 3, 15),
        ("claude-opus-4-1", 15, 75),
        ("claude-opus-4-20250514", 15, 75),
        ("claude-opus-4-5", 5, 25),
        ("claude-haiku-4-5", 1, 5),
        ("some-future-model", 3, 15),
    ],
)
def test_price_usd(model: str, input_price: float, output_price: float):
    usage = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)
    expected = input_price + output_price + 1.25 * input_price + 0.1 * input_price
    assert price_usd(model, usage) == pytest.approx(expected)


def test_usage_adds_and_totals():
    total = Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40)
    assert total == Usage(11, 22, 33, 44)
    assert total.total_tokens == 110


def test_stream_timeout_error_event_is_retried_like_a_504(httpserver: HTTPServer, make, retries):
    respond_sse(httpserver, sse(stream_events([])[0], error_json("timeout_error", "Request timed out")))
    respond_sse(httpserver, sse(*stream_events(["ok"])))

    assert make().complete(USER).text == "ok"
    assert "timeout_error" in retries[0]


def test_retry_after_ms_is_obeyed_before_retry_after(httpserver: HTTPServer, make, sleeps):
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        error_json("overloaded_error", "Overloaded"), status=529,
        headers={"retry-after-ms": "2500", "retry-after": "9"})
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(message_json())

    make(backoff_initial_s=0.1, backoff_max_s=60.0).complete(USER, max_tokens=100)

    assert sleeps == [pytest.approx(2.5)]


def test_replay_keyed_by_tag_continues_where_a_run_stopped(tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"replies": [{"tag": "a", "text": "a1"}, {"tag": "fix", "text": "f1"},
                                            {"tag": "fix", "text": "f2"}, {"tag": "b", "text": "b1"}]}))
    resumed = ReplayLLM(transcript=path, answered={"a": 1, "fix": 1})

    assert resumed.complete(USER, tag="fix").text == "f2"
    assert resumed.complete(USER, tag="b").text == "b1"
    assert resumed.remaining == 0
    with pytest.raises(LLMError, match=r"no reply #3 for 'fix'"):
        resumed.complete(USER, tag="fix")


def test_the_messages_api_s_refusal_for_length_and_its_thinking_blocks_are_read(httpserver: HTTPServer, make):
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        {"type": "error", "error": {"type": "invalid_request_error",
                                    "message": "prompt is too long: 210000 tokens > 200000 maximum"}}, status=400)
    thinking = {**message_json("<think>draft</think>\nthe answer", USAGE)}
    thinking["content"] = [{"type": "thinking", "thinking": "apart", "signature": "s"}, *thinking["content"]]
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(thinking)

    llm = make()
    with pytest.raises(ContextExceeded) as refused:
        llm.complete(USER, max_tokens=100)
    reply = llm.complete(USER, max_tokens=100)

    assert (refused.value.context, refused.value.prompt_tokens) == (200000, 210000)
    assert reply.text == "the answer" and reply.reasoning == "apart\n\ndraft"
