"""Messages API wire format for tests that run a local server in place of Anthropic's."""

import json

USAGE = {
    "input_tokens": 120,
    "output_tokens": 30,
    "cache_creation_input_tokens": 2000,
    "cache_read_input_tokens": 5000,
}
def message_json(text: str = "hello", usage: dict | None = None) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def error_json(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


def sse(*events: dict) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def stream_events(chunks: list[str]) -> list[dict]:
    start = {**message_json(), "content": [], "stop_reason": None, "usage": {**USAGE, "output_tokens": 1}}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": chunk}}
            for chunk in chunks
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]


def answer(request_body: dict, text: str):
    """`text` as the Messages API sends it: SSE events for a streamed request, one JSON message otherwise."""
    from werkzeug import Response

    if request_body.get("stream"):
        return Response(sse(*stream_events([text])), content_type="text/event-stream")
    return Response(json.dumps(message_json(text, USAGE)), content_type="application/json")


class ScriptedServer:
    """Serves scripted reply texts in order (streamed or not, as asked) and records requests."""

    def __init__(self, httpserver, replies: list[str]) -> None:
        from werkzeug import Response

        self.replies, self.requests = list(replies), []

        def handler(request):
            self.requests.append(json.loads(request.data))
            if not self.replies:
                return Response(json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                                        "message": "script exhausted"}}), status=400)
            return answer(self.requests[-1], self.replies.pop(0))

        httpserver.expect_request("/v1/messages", method="POST").respond_with_handler(handler)
        self.url = httpserver.url_for("")

    def prompt_text(self, index: int) -> str:
        """Everything the request at `index` sent as user text, cached file blocks included."""
        parts = []
        for message in self.requests[index]["messages"]:
            content = message["content"]
            parts += [content] if isinstance(content, str) else [b.get("text", "") for b in content]
        return "\n".join(parts)


class PromptDrivenServer:
    """A model that answers only from what a request shows it: `respond(prompt_text, request_body)`
    returns the reply text; every request is recorded."""

    def __init__(self, httpserver, respond) -> None:
        self.requests: list[dict] = []

        def handler(request):
            body = json.loads(request.data)
            self.requests.append(body)
            return answer(body, respond(request_text(body), body))

        httpserver.expect_request("/v1/messages", method="POST").respond_with_handler(handler)
        self.url = httpserver.url_for("")


def request_text(body: dict) -> str:
    """Everything a request sent as text: system prompt, cached file blocks, messages."""
    parts = []
    system = body.get("system") or []
    parts += [system] if isinstance(system, str) else [b.get("text", "") for b in system]
    for message in body["messages"]:
        content = message["content"]
        parts += [content] if isinstance(content, str) else [b.get("text", "") for b in content]
    return "\n".join(parts)
