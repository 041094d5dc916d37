"""The LLM layer: one `complete()` call that returns a `Reply`, behind two backends.

`AnthropicLLM` talks to the Anthropic Messages API. The SDK's own retries are off
(`max_retries=0`) so the tenacity policy here is the single, logged retry mechanism.

Retried (at most `max_attempts` attempts, exponential backoff with jitter capped at
`backoff_max_s`; a `retry-after-ms` header, or else `retry-after`, lengthens the wait, within
the same cap; each retry is reported to `on_retry`, which a run turns into an event):
  * 429 rate limit, 529 overloaded and any other status >= 500;
  * connection errors and timeouts, including a stream cut off mid-way;
  * malformed responses: a body that is not JSON or not a Messages API message, and a
    stream that ends without `message_stop` or carries an overloaded/api/rate-limit/timeout
    `error` event (the same troubles as HTTP 529/500/429/504 before the stream starts).
Aborted at once with `LLMError`: every other 4xx (400, 401, 403, 404, ...) and any
response that carries `x-should-retry: false` (e.g. a 429 for a spent budget).
After the last attempt fails, `LLMError` says how many attempts were made.

`ReplayLLM` plays a scripted transcript for tests and the offline demo.
`make_llm` builds either from a spec string.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Protocol

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception, stop_after_attempt
from tenacity import wait_exponential_jitter

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-sonnet-4-6"
STREAM_ABOVE_MAX_TOKENS = 4096  # longer replies are streamed so no single read waits for the whole answer
_EPHEMERAL = {"type": "ephemeral"}
_ONE_LINE_LIMIT = 300
# `error` events inside a 200 stream that mean "server trouble, try again".
_RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})

# (model-name prefix, input $, output $) per million tokens; the first matching prefix wins.
# Opus 4 and 4.1 cost $15/$75; Opus 4.5 and later $5/$25.
_PRICES: tuple[tuple[str, float, float], ...] = (
    ("claude-opus-4-0", 15.0, 75.0),
    ("claude-opus-4-1", 15.0, 75.0),
    ("claude-opus-4-2025", 15.0, 75.0),
    ("claude-opus-4", 5.0, 25.0),
    ("claude-sonnet-4", 3.0, 15.0),
    ("claude-haiku-4-5", 1.0, 5.0),
)
_DEFAULT_PRICE = (3.0, 15.0)  # unknown models (and replays) are priced as Sonnet
_CACHE_WRITE_FACTOR = 1.25
_CACHE_READ_FACTOR = 0.1

_MISSING_KEY = (
    "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=... "
    "or run the offline demo with `python -m orchestrator demo`"
)
_SPECS = "'anthropic', 'anthropic:MODEL' or 'replay:PATH'"


class LLMError(RuntimeError):
    """The one error callers catch; its message is one line that says what to do."""


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


@dataclass(frozen=True)
class Reply:
    text: str
    usage: Usage
    cost_usd: float
    model: str
    request_id: str | None = None
    stop_reason: str | None = None  # "max_tokens": the answer was cut at the budget and is incomplete
    answers: tuple[int, ...] = ()  # the journal records this reply accounts for (orchestrator.journal)


Message = dict  # {"role": "user" | "assistant", "content": str}


class LLM(Protocol):
    def complete(
        self,
        messages: list[Message],
        *,
        system: str = "",
        max_tokens: int = 8192,
        cache_prefix: list[str] | None = None,
        tag: str = "",
    ) -> Reply: ...


def price_usd(model: str, usage: Usage) -> float:
    """Dollar cost of `usage` on `model`; models not in the table are priced as Sonnet."""
    input_price, output_price = next(
        ((inp, out) for prefix, inp, out in _PRICES if model.startswith(prefix)), _DEFAULT_PRICE
    )
    dollars_per_mtok = (
        usage.input_tokens * input_price
        + usage.output_tokens * output_price
        + usage.cache_creation_input_tokens * input_price * _CACHE_WRITE_FACTOR
        + usage.cache_read_input_tokens * input_price * _CACHE_READ_FACTOR
    )
    return dollars_per_mtok / 1_000_000


def make_llm(spec: str, *, answered: dict[str, int] | None = None,
             on_retry: Callable[[str], None] | None = None) -> LLM:
    """Build a backend from "anthropic", "anthropic:MODEL" or "replay:PATH".

    `answered` (tag -> answers already given in this run) lets a resumed replay continue where it
    stopped; `on_retry` receives one line per retried API attempt.
    """
    kind, _, arg = spec.partition(":")
    if kind == "anthropic" and spec == "anthropic":
        return AnthropicLLM(on_retry=on_retry)
    if kind == "anthropic" and arg:
        return AnthropicLLM(arg, on_retry=on_retry)
    if kind == "replay" and arg:
        return ReplayLLM(transcript=arg, answered=answered)
    raise LLMError(f"unknown LLM spec {spec!r}: use {_SPECS}")


# --------------------------------------------------------------------------- Anthropic


class _MalformedResponse(Exception):
    """A 200 response that is not a complete Messages API message."""


def _sdk() -> ModuleType:
    """The anthropic SDK, imported on first use: importing it takes about a second, which the commands
    that never call the API (status, list, history, replayed runs) should not pay."""
    import anthropic

    return anthropic


def _transport_error() -> type[Exception]:
    try:  # anthropic 2.x runs on httpx2; earlier releases on httpx
        import httpx2 as http
    except ImportError:  # pragma: no cover - depends on the installed SDK
        import httpx as http  # type: ignore[no-redef]
    return http.TransportError


def _malformed() -> tuple[type[Exception], ...]:
    return (_MalformedResponse, json.JSONDecodeError, _sdk().APIResponseValidationError)


class AnthropicLLM:
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_attempts: int = 6,
        timeout_s: float = 600.0,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise LLMError(_MISSING_KEY)
        self.model = model
        self._client = _sdk().Anthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
        )
        self._max_attempts = max_attempts
        self._backoff = wait_exponential_jitter(
            multiplier=backoff_initial_s, max=backoff_max_s, jitter=backoff_initial_s
        )
        self._backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._on_retry = on_retry

    def complete(
        self,
        messages: list[Message],
        *,
        system: str = "",
        max_tokens: int = 8192,
        cache_prefix: list[str] | None = None,
        tag: str = "",
    ) -> Reply:
        params = self._request_params(messages, system, max_tokens, cache_prefix or [])
        retrying = Retrying(
            stop=stop_after_attempt(self._max_attempts),
            wait=self._wait,
            retry=retry_if_exception(_is_retryable),
            sleep=self._sleep,
            before_sleep=lambda state: self._report_retry(state, tag),
        )
        try:
            return retrying(self._send, params)
        except RetryError as err:
            last = err.last_attempt.exception()
            raise LLMError(
                f"Anthropic API still failing after {self._max_attempts} attempts: "
                f"{_describe(last)}; try again later or resume the run"
            ) from last
        except _sdk().APIStatusError as err:
            raise self._rejected(err) from err

    def _request_params(
        self, messages: list[Message], system: str, max_tokens: int, cache_prefix: list[str]
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": _with_cache_prefix(messages, cache_prefix),
        }
        if system:
            params["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
        return params

    def _send(self, params: dict[str, Any]) -> Reply:
        if params["max_tokens"] > STREAM_ABOVE_MAX_TOKENS:
            message, request_id = self._stream(params)
        else:
            message = self._client.messages.create(**params)
            request_id = getattr(message, "_request_id", None)
        return _reply_from(_checked(message), request_id, self.model)

    def _stream(self, params: dict[str, Any]) -> tuple[Any, str | None]:
        with self._client.messages.stream(**params) as stream:
            seen = {event.type for event in stream}
            missing = {"message_start", "message_stop"} - seen
            if missing:
                raise _MalformedResponse(f"stream ended without {', '.join(sorted(missing))}")
            return stream.get_final_message(), stream.response.headers.get("request-id")

    def _wait(self, state: RetryCallState) -> float:
        retry_after = _retry_after_s(state.outcome.exception()) if state.outcome else None
        return min(max(self._backoff(state), retry_after or 0.0), self._backoff_max_s)

    def _report_retry(self, state: RetryCallState, tag: str) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        where = f"[{tag}] " if tag else ""
        line = (
            f"{where}Anthropic API attempt {state.attempt_number}/{self._max_attempts} failed "
            f"({_describe(error)}); retrying in {delay:.1f}s"
        )
        log.warning(line)
        if self._on_retry:
            self._on_retry(line)

    def _rejected(self, err: anthropic.APIStatusError) -> LLMError:
        detail = _describe(err)
        if err.status_code == 401:
            return LLMError(f"Anthropic API rejected the API key ({detail}): check ANTHROPIC_API_KEY")
        if err.status_code == 403:
            return LLMError(
                f"Anthropic API denied access ({detail}): check that ANTHROPIC_API_KEY "
                f"may use model {self.model!r}"
            )
        if err.status_code == 404:
            return LLMError(
                f"Anthropic API found no such resource ({detail}): check the model name "
                f"{self.model!r} (spec 'anthropic:MODEL')"
            )
        return LLMError(
            f"Anthropic API rejected the request ({detail}); not retried: "
            "fix the request or account, then resume the run"
        )


def _with_cache_prefix(messages: list[Message], cache_prefix: list[str]) -> list[Message]:
    """Copy `messages`, putting the cacheable texts first in the first user message."""
    result = [dict(message) for message in messages]
    prefix = [{"type": "text", "text": text} for text in cache_prefix if text]
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


def _is_retryable(err: BaseException) -> bool:
    if isinstance(err, (_sdk().APIConnectionError, _transport_error(), *_malformed())):
        return True
    if not isinstance(err, _sdk().APIStatusError):
        return False
    if err.response.headers.get("x-should-retry") == "false":
        return False
    if err.status_code in (429, 529) or err.status_code >= 500:
        return True
    # A stream that already answered 200 reports server trouble as an `error` event.
    return _error_fields(err.body)[0] in _RETRYABLE_ERROR_TYPES


def _retry_after_s(err: BaseException | None) -> float | None:
    """The server's requested wait: `retry-after-ms` first, then `retry-after` (seconds)."""
    if not isinstance(err, _sdk().APIStatusError):
        return None
    headers = err.response.headers
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers.get(name, "")) / scale
        except ValueError:  # absent, or an HTTP date, which the API does not send
            continue
    return None


def _checked(message: Any) -> Any:
    if getattr(message, "type", None) != "message" or not isinstance(getattr(message, "content", None), list):
        raise _MalformedResponse(f"not a Messages API message: {str(message)[:120]!r}")
    return message


def _reply_from(message: Any, request_id: str | None, requested_model: str) -> Reply:
    usage = _usage_from(getattr(message, "usage", None))
    model = getattr(message, "model", None) or requested_model
    return Reply(
        text="".join(block.text for block in message.content if getattr(block, "type", None) == "text"),
        usage=usage,
        cost_usd=price_usd(model, usage),
        model=model,
        request_id=request_id,
        stop_reason=getattr(message, "stop_reason", None),
    )


def _usage_from(usage: Any) -> Usage:
    def count(field: str) -> int:
        return getattr(usage, field, None) or 0

    return Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_creation_input_tokens=count("cache_creation_input_tokens"),
        cache_read_input_tokens=count("cache_read_input_tokens"),
    )


def _error_fields(body: object) -> tuple[str | None, str | None]:
    """(error.type, error.message) from an API error body, when it has them."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, None
    return error.get("type"), error.get("message")


def _describe(err: BaseException | None) -> str:
    if isinstance(err, _sdk().APIStatusError):
        kind, text = _error_fields(err.body)
        text = f"HTTP {err.status_code} {kind or type(err).__name__}: {text or err}"
    elif isinstance(err, _malformed()):
        text = f"malformed response ({type(err).__name__}: {err})"
    else:
        text = f"{type(err).__name__}: {err}"
    return _one_line(text)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ONE_LINE_LIMIT else text[: _ONE_LINE_LIMIT - 3] + "..."


# --------------------------------------------------------------------------- Replay


@dataclass(frozen=True)
class _Scripted:
    text: str
    tag: str | None = None
    usage: Usage = Usage()
    stop_reason: str = "end_turn"


class ReplayLLM:
    """Plays scripted replies and records every request in `.calls`.

    When every reply has a tag, replies are keyed by what is asked: the k-th call with tag T gets the
    k-th reply tagged T, so a resumed run continues where it stopped (`answered`: tag -> replies
    already given in this run). Untagged replies are played in order.
    """

    def __init__(self, replies: list[str] | None = None, *, transcript: str | Path | None = None,
                 answered: dict[str, int] | None = None) -> None:
        if replies is not None and transcript is not None:
            raise LLMError("ReplayLLM takes replies or a transcript, not both: pass one of them")
        if transcript is not None:
            self._script = _load_transcript(Path(transcript))
        else:
            self._script = [_Scripted(text) for text in replies or []]
        self._keyed = bool(self._script) and all(s.tag is not None for s in self._script)
        self._answered = dict(answered or {})
        self._next = 0 if self._keyed else sum(self._answered.values())
        self.calls: list[dict[str, Any]] = []

    @property
    def remaining(self) -> int:
        used = sum(self._answered.values()) if self._keyed else self._next
        return len(self._script) - used

    def _pick(self, tag: str) -> _Scripted:
        if self._keyed:
            tagged = [s for s in self._script if s.tag == tag]
            index = self._answered.get(tag, 0)
            if index >= len(tagged):
                raise LLMError(f"replay transcript has no reply #{index + 1} for {tag!r} "
                               f"({len(tagged)} scripted): add one to the transcript")
            self._answered[tag] = index + 1
            return tagged[index]
        if not self.remaining:
            raise LLMError(f"replay transcript exhausted after {len(self._script)} replies")
        scripted = self._script[self._next]
        if scripted.tag is not None and scripted.tag != tag:
            raise LLMError(
                f"replay transcript out of step: expected a call for {scripted.tag!r}, got {tag!r}"
            )
        self._next += 1
        return scripted

    def complete(
        self,
        messages: list[Message],
        *,
        system: str = "",
        max_tokens: int = 8192,
        cache_prefix: list[str] | None = None,
        tag: str = "",
    ) -> Reply:
        self.calls.append({
            "tag": tag,
            "system": system,
            "messages": copy.deepcopy(messages),
            "cache_prefix": list(cache_prefix or []),
            "max_tokens": max_tokens,
        })
        scripted = self._pick(tag)
        return Reply(
            text=scripted.text,
            usage=scripted.usage,
            cost_usd=price_usd(DEFAULT_MODEL, scripted.usage),
            model="replay",
            stop_reason=scripted.stop_reason,
        )


def _load_transcript(path: Path) -> list[_Scripted]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["replies"]
        return [
            _Scripted(text=entry["text"], tag=entry.get("tag"), usage=Usage(**entry.get("usage", {})),
                      stop_reason=entry.get("stop_reason", "end_turn"))
            for entry in entries
        ]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LLMError(
            f"cannot load replay transcript {path} ({_one_line(f'{type(err).__name__}: {err}')}): "
            'expected JSON {"replies": [{"tag": ..., "text": ..., "usage": {...}}]}'
        ) from err
