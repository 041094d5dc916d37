"""A local coder model as researchers serve them: an OpenAI-compatible server with a context length, and a scripted
model that answers like a reasoning coder model does.

The server (`CoderServer`) speaks vLLM's dialect of the chat completions API on 127.0.0.1 (and the Messages API at
`POST /v1/messages`, with Anthropic's words for a request too long): `GET /v1/models` states
`max_model_len`; every request's prompt is counted with a real tokenizer (the tiny model's byte-level BPE, through
the tiny model's ChatML template: `<|im_start|>ROLE\\nCONTENT<|im_end|>\\n` per message and
`<|im_start|>assistant\\n`), and a request whose prompt plus `max_tokens` exceeds the context is refused with
vLLM's own 400 text. An answer longer than `max_tokens` (or than the server's own `output_cap`, where set) is cut
there with `finish_reason: "length"`; `usage` is reported unless `report_usage` is off; streamed requests get
server-sent events. Every request is recorded (`Request`).

The model (`CoderModel`) answers from the demo's recorded answers for an example (orchestrator.demo), chosen by what
each request asks, in ways a local coder model answers:
- `think`: every answer starts with a `<think>` block holding a draft that is wrong (a roles mapping with the
  other delivery, code sketches in fences without `FILE:` lines, a fix that edits a GENERIC line);
- `fixes="reformat"`: a fix is one SEARCH/REPLACE of the whole train.py as the prompt shows it (GENERIC sections
  included, summarised or not), quotes normalised to double quotes everywhere, with the one-line fix in it;
- `fixes="diff"`: a fix is a unified diff in a ```diff fence, its hunk line numbers 2 off;
- `tool_calls`: every answer comes back as a tool call with null content.
"""

from __future__ import annotations

import difflib
import io
import json
import logging
import re
import threading
import tokenize
from dataclasses import dataclass
from typing import Any

from werkzeug import Request as HTTPRequest
from werkzeug import Response
from werkzeug.serving import make_server

from orchestrator.demo import Example, faults, transcript

ASKS = {  # how each node's question starts (agent_prompts/) -> the transcript's tag
    "Before any code is written": "map_roles", "Step 1:": "generate_helpers", "Step 2:": "generate_prompts",
    "Step 3:": "generate_train", "Step 4:": "generate_launch", "Plan the formal training run": "formal_train",
    "The formal training run finished": "review", "The short training run of": "log_format",
}
ANTHROPIC_TOO_LONG = ("input length and `max_tokens` exceed context limit: {prompt} + {budget} > {context}, decrease "
                      "input length or `max_tokens` and try again")
VLLM_TOO_LONG = ("This model's maximum context length is {context} tokens. However, you requested {total} tokens "
                 "({prompt} in the messages, {budget} in the completion). Please reduce the length of the messages "
                 "or completion.")


@dataclass
class Request:
    tag: str
    prompt_tokens: int
    max_tokens: int
    refused: bool = False
    output_tokens: int = 0
    finish: str = ""
    reask: bool = False
    text: str = ""  # the prompt as the server saw it (system and messages)


def asked_tag(body: dict) -> str:
    """The node a request comes from: the question at the end of its first user message (after the files)."""
    user = "\n" + next(m["content"] for m in body["messages"] if m["role"] == "user")
    found = [(user.rfind(f"\n{start}"), tag) for start, tag in ASKS.items() if f"\n{start}" in user]
    return max(found)[1] if found else "fix"


def shown_file(prompt: str, name: str) -> str | None:
    """The text of file `name` as the prompt shows it (whole, or summarised by the orchestrator)."""
    found = re.search(rf"^=== FILE: {re.escape(name)}(?: \([^\n]*\))? ===\n", prompt, re.M)
    if found is None:
        return None
    rest = prompt[found.end():]
    end = re.search(r"\n\n(?:=== FILE: |The [\w ]+ check failed)", rest)
    return rest[: end.start()] if end else rest


def double_quoted(code: str) -> str:
    """Every plain single-quoted string literal written with double quotes: what a formatter does to a file."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return code
    lines = code.splitlines(keepends=True)
    for token in reversed(tokens):
        text = token.string
        if (token.type == tokenize.STRING and token.start[0] == token.end[0] and text[:1] == "'"
                and not text.startswith("'''") and '"' not in text and "\\" not in text):
            row, col = token.start[0] - 1, token.start[1]
            line = lines[row]
            lines[row] = line[:col] + '"' + text[1:-1] + '"' + line[col + len(text):]
    return "".join(lines)


class CoderModel:
    """Answers each request from the example's recorded answers for what it asks (see the module docstring)."""

    def __init__(self, ex: Example, *, think: bool = True, fixes: str = "search", tool_calls: bool = False) -> None:
        replies = transcript(ex)["replies"]
        self.answers = {tag: [r["text"] for r in replies if r["tag"] == tag] for tag in {r["tag"] for r in replies}}
        self.fixes_by_fault = [(new, old) for old, new in faults((ex.reference / "train.py").read_text())]
        self.think, self.fixes, self.tool_calls = think, fixes, tool_calls

    def answer(self, tag: str, prompt: str) -> str:
        """The answer to a request of `tag` whose text is `prompt`."""
        if tag == "fix":
            text = self._fix(prompt)
        else:
            queue = self.answers.get(tag) or []
            if not queue:
                raise RuntimeError(f"no recorded answer for {tag}")
            text = queue[0]
            alone = re.search(r"this answer is CUSTOMIZE (\d+) alone", prompt)
            if tag == "generate_train" and alone:  # asked for one section: its block of the whole answer
                blocks = re.split(r"(?m)^(?=CUSTOMIZE \d+:)", text)
                text = next(b for b in blocks if b.startswith(f"CUSTOMIZE {alone.group(1)}:"))
        return f"<think>\n{self._draft(tag, prompt)}\n</think>\n\n{text}" if self.think else text

    def used(self, tag: str) -> None:
        """The answer to `tag` was delivered whole: the next request of `tag` gets the next recorded one."""
        if tag != "fix" and len(self.answers.get(tag) or []) > 1:
            self.answers[tag].pop(0)

    def _fix(self, prompt: str) -> str:
        shown = shown_file(prompt, "train.py")
        if shown is None:
            raise RuntimeError("a fix prompt that shows no train.py")
        fault = next(((bad, good) for bad, good in self.fixes_by_fault if bad in shown), None)
        if fault is None:
            raise RuntimeError("a fix asked for a failure this model does not know")
        bad, good = fault
        fixed = shown.replace(bad, good, 1)
        if self.fixes == "reformat":
            return f"FILE: train.py\n<<<<<<< SEARCH\n{shown.rstrip()}\n=======\n{double_quoted(fixed).rstrip()}\n" \
                   f">>>>>>> REPLACE\n"
        if self.fixes == "diff":
            diff = difflib.unified_diff(shown.splitlines(), fixed.splitlines(), "a/train.py", "b/train.py", lineterm="")
            off = [re.sub(r"^@@ -(\d+)", lambda m: f"@@ -{int(m.group(1)) + 2}", line) for line in diff]
            return "The import was misspelt; here is the patch:\n\n```diff\n" + "\n".join(off) + "\n```\n"
        return f"FILE: train.py\n<<<<<<< SEARCH\n{bad.rstrip()}\n=======\n{good.rstrip()}\n>>>>>>> REPLACE\n"

    def _draft(self, tag: str, prompt: str) -> str:
        """A draft the model corrects before its answer: applied, it would be wrong."""
        if tag == "map_roles":
            return ('First draft of the mapping:\n```json\n{"roles": {}, "delivery": "config_file", "notes": '
                    '"draft"}\n```\nNo wait: the template parses flags, so the guess\'s delivery stands.')
        if tag == "fix":
            return ("Maybe the GENERIC code is wrong:\nFILE: train.py\n<<<<<<< SEARCH\n# === GENERIC — DO NOT MODIFY "
                    "===\n=======\n# GENERIC, edited\n>>>>>>> REPLACE\nNo: GENERIC code is never edited. The fix is in "
                    "a CUSTOMIZE section.")
        return ("Let me sketch it first.\n```python\ndef sketch(env, agent_id):\n    return True  # draft\n```\n"
                "```json\n{\"draft\": true}\n```\nNow the real answer, in the format asked for.")


class CoderServer:
    """The OpenAI-compatible server of the module docstring, on a free local port (`url` ends in /v1)."""

    def __init__(self, model: CoderModel, tokenizer_file: str, *, served_as: str, context: int = 32768,
                 state_context: bool = True, report_usage: bool = True, output_cap: int | None = None) -> None:
        from tokenizers import Tokenizer

        self.model, self.served_as, self.context = model, served_as, context
        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        self.state_context, self.report_usage, self.output_cap = state_context, report_usage, output_cap
        self.requests: list[Request] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

        @HTTPRequest.application
        def app(request: HTTPRequest) -> Response:
            if request.method == "GET" and request.path == "/v1/models":
                entry = {"id": self.served_as, "object": "model", "owned_by": "vllm"}
                if self.state_context:
                    entry["max_model_len"] = self.context
                return Response(json.dumps({"object": "list", "data": [entry]}), content_type="application/json")
            if request.method == "POST" and request.path == "/v1/chat/completions":
                with self._lock:
                    return self._complete(json.loads(request.data))
            if request.method == "POST" and request.path == "/v1/messages":
                with self._lock:
                    return self._message(json.loads(request.data))
            return Response(json.dumps({"error": {"message": "not found", "code": 404}}), status=404,
                            content_type="application/json")

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.root = f"http://127.0.0.1:{self.server.server_port}"  # the Messages API's base URL
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def prompt_text(self, body: dict) -> str:
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"]) \
            + "<|im_start|>assistant\n"

    def _complete(self, body: dict) -> Response:
        """A chat completion (vLLM's wire)."""
        outcome = self._answer(body)
        if isinstance(outcome, str):
            return Response(json.dumps({"object": "error", "message": outcome, "type": "BadRequestError",
                                        "param": None, "code": 400}), status=400, content_type="application/json")
        text, finish, usage = outcome
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if self.model.tool_calls:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "write_file", "arguments": json.dumps({"content": text})}}]}
            finish = "tool_calls"
        if body.get("stream"):
            return Response(self._events(message, finish, usage), content_type="text/event-stream")
        return Response(json.dumps({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": self.served_as,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            **({"usage": usage} if self.report_usage else {})}), content_type="application/json")

    def _message(self, body: dict) -> Response:
        """A Messages API message (Anthropic's wire): the same model, counted and limited the same way."""
        def text(content: Any) -> str:
            return content if isinstance(content, str) else "\n\n".join(block.get("text", "") for block in content)

        system = body.get("system") or ""
        chat = {"messages": ([{"role": "system", "content": text(system)}] if system else [])
                + [{"role": m["role"], "content": text(m["content"])} for m in body["messages"]],
                "max_tokens": body["max_tokens"]}
        outcome = self._answer(chat, anthropic=True)
        if isinstance(outcome, str):
            return Response(json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                                    "message": outcome}}), status=400,
                            content_type="application/json")
        answer, finish, usage = outcome
        stop = {"length": "max_tokens", "stop": "end_turn"}[finish]
        counts = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}
        message = {"id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant", "model": self.served_as,
                   "content": [{"type": "text", "text": answer}], "stop_reason": stop, "stop_sequence": None,
                   "usage": counts}
        if not body.get("stream"):
            return Response(json.dumps(message), content_type="application/json")
        events = [{"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                        "usage": {**counts, "output_tokens": 1}}},
                  {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer}},
                  {"type": "content_block_stop", "index": 0},
                  {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": counts["output_tokens"]}},
                  {"type": "message_stop"}]
        return Response("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events),
                        content_type="text/event-stream")

    def _answer(self, body: dict, anthropic: bool = False) -> tuple[str, str, dict] | str:
        """(text, finish_reason, usage) of a chat request, or the refusal's message."""
        rendered = self.prompt_text(body)
        prompt, budget, tag = self.count(rendered), int(body["max_tokens"]), asked_tag(body)
        record = Request(tag, prompt, budget, reask=sum(m["role"] == "assistant" for m in body["messages"]) > 0,
                         text=rendered)
        self.requests.append(record)
        if prompt + budget > self.context:
            record.refused = True
            return (ANTHROPIC_TOO_LONG if anthropic else VLLM_TOO_LONG).format(
                context=self.context, total=prompt + budget, prompt=prompt, budget=budget)
        try:
            text = self.model.answer(tag, rendered)
        except RuntimeError as error:
            self.errors.append(f"{tag}: {error}")
            return str(error)
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        limit = min(budget, self.output_cap or budget)
        finish = "stop"
        if len(ids) > limit:
            ids, finish = ids[:limit], "length"
            text = self.tokenizer.decode(ids)
        else:
            self.model.used(tag)
        record.output_tokens, record.finish = len(ids), finish
        return text, finish, {"prompt_tokens": prompt, "completion_tokens": len(ids), "total_tokens": prompt + len(ids)}

    def _events(self, message: dict, finish: str, usage: dict) -> str:
        def chunk(delta: dict, finish_reason: str | None = None) -> dict:
            return {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 0, "model": self.served_as,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

        events = [chunk({"role": "assistant", "content": ""})]
        if message.get("tool_calls"):
            events.append(chunk({"tool_calls": [{"index": 0, **message["tool_calls"][0]}]}))
        else:
            content = message["content"]
            events += [chunk({"content": content[i: i + 4000]}) for i in range(0, len(content), 4000)]
        events.append(chunk({}, finish))
        if self.report_usage:
            events.append({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 0,
                           "model": self.served_as, "choices": [], "usage": usage})
        return "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
