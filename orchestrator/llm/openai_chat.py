"""Any OpenAI-compatible chat completions server: `--llm openai:MODEL@URL`, or `openai:MODEL` with the URL
in OPENAI_BASE_URL, through the openai package (`pip install 'grpo-orchestrator[openai]'`).

vLLM, SGLang, Ollama, LM Studio, llama.cpp's server and `transformers serve` all answer
`POST URL/chat/completions` (URL usually ends in /v1). OPENAI_API_KEY is sent where set; a server of your
own usually needs none (api.openai.com does). Before a run, `GET URL/models` must answer and list MODEL.

The request is the Messages one in chat form: the system prompt first, then the cacheable file blocks at the
head of the first user message, so the prompts of one run share a long prefix (vLLM's and SGLang's prefix
caches reuse it; the server reports the tokens it reused as `prompt_tokens_details.cached_tokens`). Tokens
come from the server's `usage` (streamed replies ask for it with `stream_options.include_usage`); a server that
sends none has its tokens counted by the model's tokenizer where it is at hand, else estimated, and the reply
says which (`counted`). A model in no price table costs $0 (orchestrator.llm.prices). `finish_reason: length` is
the cut answer (`max_tokens`). A reasoning parser's `reasoning_content` (or `reasoning`) is the reply's reasoning,
never its text; an answer that is a tool call names the call (`tool_calls`): the text is then empty.

The context length (orchestrator.llm.context) is read by `preflight()`: `max_model_len` of the model's
`/models` entry (vLLM, SGLang), else Ollama's `num_ctx` (`POST /api/show`), else the model's own config.json
where it is at hand; `max_context` (`--max-context`) wins over all of them.

Retried (orchestrator.llm.retrying): 408, 409, 429 and any status >= 500, connection errors and timeouts,
a body that is not a chat completion, a stream that ends without a finish_reason, and an `error` a stream
carries for server trouble (no code, or one >= 500 or 429). Aborted at once with LLMError: every other
4xx and a response with `x-should-retry: false`.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from types import ModuleType
from typing import Any

from orchestrator.llm.base import LLMError, Message, Reply, Usage, one_line
from orchestrator.llm.context import model_config_context, model_counter, ollama_num_ctx, served_context
from orchestrator.llm.prices import Price, PriceTable
from orchestrator.llm.retrying import MalformedResponse, RetryingLLM, retry_after_s, transport_error

OPENAI_URL = "https://api.openai.com/v1"
_EXTRA = "pip install 'grpo-orchestrator[openai]'"
_NO_KEY = "EMPTY"  # what a server of your own gets when OPENAI_API_KEY is not set (vLLM's documented stand-in)
_STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}


def _sdk() -> ModuleType:
    try:
        import openai
    except ImportError as err:
        raise LLMError(f"openai: the openai package is not installed: {_EXTRA}") from err
    return openai


class OpenAIChatLLM(RetryingLLM):
    backend = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 600.0, prices: PriceTable | None = None, **retry: Any) -> None:
        super().__init__(**retry)
        self.model = model
        self.window.counter = model_counter(model)
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL).rstrip("/")
        if urllib.parse.urlsplit(self.base_url).scheme not in ("http", "https"):
            raise LLMError(f"openai: {self.base_url!r} is not a server's URL: give one like http://localhost:8000/v1 "
                           "(--llm openai:MODEL@URL, or OPENAI_BASE_URL)")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key and self.base_url == OPENAI_URL:
            raise LLMError("openai: OPENAI_API_KEY is not set: export OPENAI_API_KEY=..., or name your own server: "
                           "--llm openai:MODEL@http://HOST:PORT/v1")
        self.platform = f"the OpenAI-compatible server at {self.base_url}"
        self._client = _sdk().OpenAI(api_key=api_key or _NO_KEY, base_url=self.base_url, max_retries=0,
                                     timeout=timeout_s)
        self._price: Price | None
        self._price, self.price_note = (prices or PriceTable()).own_server(model)

    @property
    def label(self) -> str:
        return f"openai {self.model} at {self.base_url}"

    def preflight(self) -> None:
        """The server answers `GET /models`, takes the key, and serves the model."""
        openai = _sdk()
        try:
            entries = list(self._client.models.list().data)
            served = [entry.id for entry in entries]
        except openai.APIConnectionError as err:
            raise LLMError(f"openai: no server answers at {self.base_url} ({self._describe(err)}): start it, or "
                           "give its URL: --llm openai:MODEL@URL (or OPENAI_BASE_URL)") from err
        except openai.APIStatusError as err:
            if err.status_code in (401, 403):
                raise LLMError(f"openai: {self.platform} refused the key ({self._describe(err)}): set "
                               "OPENAI_API_KEY to a key it accepts") from err
            raise LLMError(f"openai: {self.platform} does not list its models ({self._describe(err)}): check the "
                           "URL (an OpenAI-compatible server answers at .../v1)") from err
        except (json.JSONDecodeError, openai.APIResponseValidationError, AttributeError, TypeError) as err:
            raise LLMError(f"openai: {self.base_url} does not answer /models as an OpenAI-compatible server "
                           f"({one_line(f'{type(err).__name__}: {err}')}): check the URL (it usually ends in /v1)"
                           ) from err
        if self.model not in served:
            raise LLMError(f"openai: {self.platform} serves no model {self.model!r} (it serves: "
                           f"{', '.join(map(repr, served)) or 'none'}): use --llm openai:MODEL@{self.base_url} "
                           "with one of them")
        if self.window.tokens is None:
            self._learn_context(entries[served.index(self.model)])

    def _learn_context(self, entry: Any) -> None:
        """The server's context length, where it says it; else the model's own config's, where it is at hand."""
        stated = served_context(_fields(entry))
        if stated:
            self.window.learn(stated, f"max_model_len of {self.base_url}/models")
            return
        num_ctx = self._ollama_num_ctx()
        if num_ctx:
            self.window.learn(num_ctx, "Ollama's num_ctx for the model")
            return
        configured = model_config_context(self.model)
        if configured:
            self.window.learn(configured, "the model's config.json")

    def _ollama_num_ctx(self) -> int | None:
        """Ollama's `num_ctx` for the model (`POST /api/show` beside /v1); None from any other server."""
        root = self.base_url.removesuffix("/v1")
        if root == self.base_url:
            return None
        try:
            shown = self._client.post(f"{root}/api/show", body={"model": self.model}, cast_to=object,
                                      options={"timeout": 10.0})
        except Exception:  # noqa: BLE001 - not Ollama, or it would not say: the context stays unknown
            return None
        return ollama_num_ctx(shown) if isinstance(shown, dict) else None

    def _request_params(self, messages: list[Message], system: str, max_tokens: int,
                        cache_prefix: list[str]) -> dict[str, Any]:
        chat = [{"role": "system", "content": system}] if system else []
        return {"model": self.model, "messages": chat + _with_prefix_text(messages, cache_prefix),
                "max_tokens": max_tokens}

    def _send(self, params: dict[str, Any], stream: bool) -> Reply:
        if stream:
            return self._streamed(params)
        raw = self._client.chat.completions.with_raw_response.create(**params)
        completion = raw.parse()
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            raise MalformedResponse(f"not a chat completion: {str(completion)[:120]!r}")
        choice = choices[0]
        message = choice.message
        calls = tuple(getattr(getattr(call, "function", None), "name", None) or "?"
                      for call in getattr(message, "tool_calls", None) or [])
        return self._reply(params, message.content or "", _reasoning_of(message), calls, choice.finish_reason,
                           completion.usage, getattr(completion, "model", None), raw.headers.get("x-request-id"))

    def _streamed(self, params: dict[str, Any]) -> Reply:
        chunks = self._client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, str] = {}
        finish, usage, model = None, None, None
        with chunks:
            for chunk in chunks:
                model = getattr(chunk, "model", None) or model
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or []:
                    delta = getattr(choice, "delta", None)
                    text.append(getattr(delta, "content", None) or "")
                    reasoning.append(_reasoning_of(delta))
                    for call in getattr(delta, "tool_calls", None) or []:  # the name comes in the call's first delta
                        index, name = getattr(call, "index", 0) or 0, getattr(call.function, "name", None)
                        if name or index not in calls:
                            calls[index] = name or "?"
                    finish = getattr(choice, "finish_reason", None) or finish
            request_id = chunks.response.headers.get("x-request-id")
        if finish is None:
            raise MalformedResponse("stream ended without a finish_reason")
        return self._reply(params, "".join(text), "".join(reasoning), tuple(calls[i] for i in sorted(calls)), finish,
                           usage, model, request_id)

    def _reply(self, params: dict[str, Any], text: str, reasoning: str, calls: tuple[str, ...], finish: str | None,
               usage: Any, model: str | None, request_id: str | None) -> Reply:
        counted, how = _usage_from(usage), ""
        if not counted.total_tokens:  # the server reported nothing: count, and say how
            counter = self.window.counter
            counted = Usage(input_tokens=counter.request("", params["messages"]),
                            output_tokens=counter.text(reasoning) + counter.text(text))
            how = "tokenizer" if counter.exact else "estimate"
        return Reply(text=text, usage=counted, cost_usd=self._price.usd(counted) if self._price else 0.0,
                     model=model or self.model, request_id=request_id,
                     stop_reason=_STOP_REASONS.get(finish or "", finish), backend=self.backend, reasoning=reasoning,
                     tool_calls=calls, counted=how)

    def _status_error(self) -> type[Exception]:
        return _sdk().APIStatusError

    def _is_retryable(self, err: BaseException) -> bool:
        openai = _sdk()
        if isinstance(err, (openai.APIConnectionError, transport_error(), *_malformed())):
            return True
        if isinstance(err, openai.APIStatusError):
            if err.response.headers.get("x-should-retry") == "false":
                return False
            return err.status_code in (408, 409, 429) or err.status_code >= 500
        if isinstance(err, openai.APIError):  # an `error` the server sent inside a 200 stream
            code = str(_error_body(err.body).get("code") or "")
            if not code.isdigit():
                return True  # no status of its own: server trouble
            return int(code) in (408, 429) or int(code) >= 500
        return False

    def _retry_after_s(self, err: BaseException | None) -> float | None:
        return retry_after_s(err.response.headers) if isinstance(err, _sdk().APIStatusError) else None

    def _describe(self, err: BaseException | None) -> str:
        openai = _sdk()
        if isinstance(err, openai.APIStatusError):
            body = _error_body(err.body)
            kind = body.get("type") or body.get("code") or type(err).__name__
            return one_line(f"HTTP {err.status_code} {kind}: {body.get('message') or body.get('detail') or err}")
        if isinstance(err, _malformed()):
            return one_line(f"malformed response ({type(err).__name__}: {err})")
        if isinstance(err, openai.APIError) and not isinstance(err, openai.APIConnectionError):
            body = _error_body(err.body)
            return one_line(f"error in the stream ({body.get('type') or body.get('code')}: {err.message})")
        return one_line(f"{type(err).__name__}: {err}")

    def _rejected(self, err: Any) -> LLMError:
        detail = self._describe(err)
        if err.status_code in (401, 403):
            return LLMError(f"{self.platform} refused the key ({detail}): set OPENAI_API_KEY to a key it accepts")
        if err.status_code == 404:
            return LLMError(f"{self.platform} found no such resource ({detail}): check the model {self.model!r} "
                            "and the URL (it usually ends in /v1)")
        hint = " (if the answer budget is more than the server's context allows, run with --max-answer-tokens " \
               "below it)" if err.status_code == 400 and "token" in detail.lower() else ""
        return LLMError(f"{self.platform} rejected the request ({detail}); not retried: fix the request or the "
                        f"server{hint}, then resume the run")


def _with_prefix_text(messages: list[Message], cache_prefix: list[str]) -> list[Message]:
    """Copy `messages`, the cacheable texts first in the first user message, as one string."""
    result = [dict(message) for message in messages]
    prefix = [text for text in cache_prefix if text]
    if not prefix:
        return result
    first_user = next((m for m in result if m.get("role") == "user"), None)
    if first_user is None:
        raise LLMError("cache_prefix needs a user message to attach to: add one to `messages`")
    first_user["content"] = "\n\n".join([*prefix, *([first_user["content"]] if first_user.get("content") else [])])
    return result


def _reasoning_of(message: Any) -> str:
    """What a reasoning parser sent apart from the answer: `reasoning_content` (vLLM, SGLang, DeepSeek) or
    `reasoning` (newer vLLM, OpenRouter)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if value is None:
            value = (getattr(message, "model_extra", None) or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _fields(entry: Any) -> dict[str, Any]:
    """A `/models` entry's fields, the server's own extras (max_model_len) included."""
    dump = getattr(entry, "model_dump", None)
    return dump() if callable(dump) else dict(getattr(entry, "__dict__", {}))


def _malformed() -> tuple[type[Exception], ...]:
    return (MalformedResponse, json.JSONDecodeError, _sdk().APIResponseValidationError)


def _error_body(body: object) -> dict[str, Any]:
    """The error object of a refusal: OpenAI's `{"error": {...}}`, vLLM's flat one, FastAPI's `{"detail": ...}`."""
    if isinstance(body, dict):
        inner = body.get("error")
        return inner if isinstance(inner, dict) else body
    return {"message": body} if isinstance(body, str) and body else {}


def _usage_from(usage: Any) -> Usage:
    prompt = getattr(usage, "prompt_tokens", None) or 0
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None) or 0
    return Usage(input_tokens=prompt - cached, output_tokens=getattr(usage, "completion_tokens", None) or 0,
                 cache_read_input_tokens=cached)
