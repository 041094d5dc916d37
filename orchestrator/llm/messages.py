"""Claude's Messages API through the anthropic SDK: the request, its cache breakpoints, streaming, the reply,
and which errors are retried. `AnthropicLLM` is Anthropic's own API; Amazon Bedrock and Google Vertex AI
(`orchestrator.llm.bedrock`, `orchestrator.llm.vertex`) send the same body through the SDK's clients for them.

Retried (orchestrator.llm.retrying): 408, 429, 529 and any other status >= 500; connection errors and
timeouts, including a stream cut off mid-way; malformed responses: a body that is not JSON or not a Messages
API message, and a stream that ends without `message_stop` or carries an `error` event that means server
trouble (overloaded, api, rate-limit or timeout errors; Bedrock's throttling, internal-server,
service-unavailable, model-stream and model-timeout exceptions). Aborted at once with LLMError: every other
4xx and any response that carries `x-should-retry: false` (e.g. a 429 for a spent budget).

Prompt caching: the system prompt and the last of the cacheable file blocks carry `cache_control`
breakpoints (2 of the API's 4); Bedrock and Vertex take them in the same body.
"""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from orchestrator.llm.base import LLMError, Message, Reply, Usage, one_line
from orchestrator.llm.prices import PriceTable
from orchestrator.llm.reach import unreachable
from orchestrator.llm.retrying import MalformedResponse, RetryingLLM, retry_after_s, transport_error

if TYPE_CHECKING:
    import anthropic

DEFAULT_MODEL = "claude-sonnet-4-6"
_EPHEMERAL = {"type": "ephemeral"}
_REQUEST_ID_HEADERS = ("request-id", "x-amzn-requestid", "x-request-id")
# `error` events inside a 200 stream that mean "server trouble, try again" (lower case: Bedrock's exception
# frames name them throttlingException, ...)
_RETRYABLE_ERROR_TYPES = frozenset({
    "overloaded_error", "api_error", "rate_limit_error", "timeout_error",
    "throttlingexception", "internalserverexception", "serviceunavailableexception",
    "modelstreamerrorexception", "modeltimeoutexception", "modelnotreadyexception",
})
_MISSING_KEY = (
    "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=... "
    "or run the offline demo with `python -m orchestrator demo`"
)


def sdk() -> ModuleType:
    """The anthropic SDK, imported on first use: importing it takes about a second, which the commands
    that never call the API (status, list, history, replayed runs) should not pay."""
    import anthropic

    return anthropic


class MessagesLLM(RetryingLLM):
    """A Claude model behind one of the anthropic SDK's clients; subclasses build the client and say what the
    researcher sets when a platform refuses."""

    backend = ""

    def __init__(self, model: str, client: Any, *, prices: PriceTable | None = None, **retry: Any) -> None:
        super().__init__(**retry)
        self.model = model
        self._client = client
        self._price, self.price_note = (prices or PriceTable()).claude(model)

    @property
    def label(self) -> str:
        return f"{self.backend} {self.model}"

    def preflight(self) -> None:
        problem = unreachable(str(self._client.base_url))
        if problem:
            raise LLMError(f"{self.backend}: no server answers at {self._client.base_url} ({problem}): "
                           f"{self._unreachable_hint()}")

    def _unreachable_hint(self) -> str:
        return "check the network, or the base URL you set"

    def _hints(self) -> dict[int, str]:
        """What to check when the platform refuses with 401, 403 or 404."""
        return {}

    def _request_params(self, messages: list[Message], system: str, max_tokens: int,
                        cache_prefix: list[str]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": _with_cache_prefix(messages, cache_prefix),
        }
        if system:
            params["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
        return params

    def _send(self, params: dict[str, Any], stream: bool) -> Reply:
        if stream:
            with self._client.messages.stream(**params) as streamed:
                seen = {event.type for event in streamed}
                missing = {"message_start", "message_stop"} - seen
                if missing:
                    raise MalformedResponse(f"stream ended without {', '.join(sorted(missing))}")
                return self._reply_from(streamed.get_final_message(), streamed.response.headers)
        raw = self._client.messages.with_raw_response.create(**params)
        return self._reply_from(raw.parse(), raw.headers)

    def _reply_from(self, message: Any, headers: Any) -> Reply:
        if getattr(message, "type", None) != "message" or not isinstance(getattr(message, "content", None), list):
            raise MalformedResponse(f"not a Messages API message: {str(message)[:120]!r}")
        usage = _usage_from(getattr(message, "usage", None))
        return Reply(
            text="".join(block.text for block in message.content if getattr(block, "type", None) == "text"),
            reasoning="\n\n".join(block.thinking for block in message.content
                                   if getattr(block, "type", None) == "thinking" and getattr(block, "thinking", "")),
            usage=usage,
            cost_usd=self._price.usd(usage),
            model=getattr(message, "model", None) or self.model,
            request_id=next((headers[name] for name in _REQUEST_ID_HEADERS if headers.get(name)), None),
            stop_reason=getattr(message, "stop_reason", None),
            backend=self.backend,
        )

    def _status_error(self) -> type[Exception]:
        return sdk().APIStatusError

    def _is_retryable(self, err: BaseException) -> bool:
        if isinstance(err, (sdk().APIConnectionError, transport_error(), *_malformed())):
            return True
        if not isinstance(err, sdk().APIStatusError):
            return False
        if err.response.headers.get("x-should-retry") == "false":
            return False
        if err.status_code in (408, 429, 529) or err.status_code >= 500:
            return True
        # A stream that already answered 200 reports server trouble as an `error` event.
        return (_error_fields(err)[0] or "").lower() in _RETRYABLE_ERROR_TYPES

    def _retry_after_s(self, err: BaseException | None) -> float | None:
        return retry_after_s(err.response.headers) if isinstance(err, sdk().APIStatusError) else None

    def _describe(self, err: BaseException | None) -> str:
        if isinstance(err, sdk().APIStatusError):
            kind, text = _error_fields(err)
            return one_line(f"HTTP {err.status_code} {kind or type(err).__name__}: {text or err}")
        if isinstance(err, _malformed()):
            return one_line(f"malformed response ({type(err).__name__}: {err})")
        return one_line(f"{type(err).__name__}: {err}")

    def _rejected(self, err: anthropic.APIStatusError) -> LLMError:
        detail = self._describe(err)
        hint = self._hints().get(err.status_code)
        verb = {401: "rejected the credentials", 403: "denied access",
                404: "found no such resource"}.get(err.status_code)
        if verb and hint:
            return LLMError(f"{self.platform} {verb} ({detail}): {hint}")
        return LLMError(f"{self.platform} rejected the request ({detail}); not retried: "
                        "fix the request or account, then resume the run")


class AnthropicLLM(MessagesLLM):
    """Anthropic's own API, with ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL, where set)."""

    backend = "anthropic"
    platform = "Anthropic API"

    def __init__(self, model: str = DEFAULT_MODEL, *, api_key: str | None = None, base_url: str | None = None,
                 timeout_s: float = 600.0, prices: PriceTable | None = None, **retry: Any) -> None:
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise LLMError(_MISSING_KEY)
        client = sdk().Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s)
        super().__init__(model, client, prices=prices, **retry)

    def _unreachable_hint(self) -> str:
        return "check the network, or ANTHROPIC_BASE_URL where it is set"

    def _hints(self) -> dict[int, str]:
        return {401: "check ANTHROPIC_API_KEY",
                403: f"check that ANTHROPIC_API_KEY may use model {self.model!r}",
                404: f"check the model name {self.model!r} (spec 'anthropic:MODEL')"}


def _with_cache_prefix(messages: list[Message], cache_prefix: list[str]) -> list[Message]:
    """Copy `messages`, putting the cacheable texts first in the first user message."""
    result = [dict(message) for message in messages]
    prefix: list[dict[str, Any]] = [{"type": "text", "text": text} for text in cache_prefix if text]
    if not prefix:
        return result
    first_user = next((m for m in result if m.get("role") == "user"), None)
    if first_user is None:
        raise LLMError("cache_prefix needs a user message to attach to: add one to `messages`")
    # One breakpoint here and one on the system prompt: 2 of the API's limit of 4.
    prefix[-1]["cache_control"] = _EPHEMERAL
    own_text = first_user.get("content", "")
    first_user["content"] = prefix + ([{"type": "text", "text": own_text}] if own_text else [])
    return result


def _malformed() -> tuple[type[Exception], ...]:
    return (MalformedResponse, json.JSONDecodeError, sdk().APIResponseValidationError)


def _usage_from(usage: Any) -> Usage:
    def count(field: str) -> int:
        return getattr(usage, field, None) or 0

    return Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_creation_input_tokens=count("cache_creation_input_tokens"),
        cache_read_input_tokens=count("cache_read_input_tokens"),
    )


def _error_fields(err: Any) -> tuple[str | None, str | None]:
    """(kind, message) of a refusal, as Anthropic (`error.type`), Vertex (`error.status`) or Bedrock (a
    `message` with the kind in the x-amzn-ErrorType header) says them."""
    body = err.body[0] if isinstance(err.body, list) and len(err.body) == 1 else err.body
    if not isinstance(body, dict):
        return None, None
    error = body.get("error")
    if isinstance(error, dict):
        return error.get("type") or error.get("status"), error.get("message")
    if isinstance(body.get("message"), str):
        kind = err.response.headers.get("x-amzn-errortype", "").split(":")[0]
        return kind or None, body["message"]
    return None, None
