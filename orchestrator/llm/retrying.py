"""One request, retried by tenacity: the single, logged retry mechanism of every network backend.

The SDKs' own retries are off (`max_retries=0`). A backend says what is worth retrying (`_is_retryable`), how
long its server asked it to wait (`_retry_after_s`), how to say an error in one line (`_describe`) and what a
refusal means for the researcher (`_rejected`). At most `max_attempts` attempts, exponential backoff with
jitter capped at `backoff_max_s`; a server's retry-after lengthens the wait, within the same cap; each retry
is reported to `on_retry` (a run turns it into an event). After the last attempt fails, LLMError says how many
attempts were made. A request never asks for more than `max_output_tokens` output tokens.

A refusal that says the request is longer than the server's context is `ContextExceeded`, with the numbers
the server gave (the caller asks again, shorter); every answer's reasoning is taken out of its text
(orchestrator.llm.reasoning), and the server's token counts teach the backend's estimates (`window`).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Callable

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception, stop_after_attempt
from tenacity import wait_exponential_jitter

from orchestrator.llm.base import MAX_ANSWER_TOKENS, LLMError, Message, Reply
from orchestrator.llm.context import ContextExceeded, ContextWindow, chars_of, context_refusal
from orchestrator.llm.reasoning import without_reasoning

log = logging.getLogger(__name__)

STREAM_ABOVE_MAX_TOKENS = 4096  # longer replies are streamed so no single read waits for the whole answer


class MalformedResponse(Exception):
    """A 200 response that is not a complete answer."""


class RetryingLLM(ABC):
    platform = ""  # how messages name the server: "Anthropic API", "Amazon Bedrock", ...

    def __init__(
        self,
        *,
        max_attempts: int = 6,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[str], None] | None = None,
        max_output_tokens: int = MAX_ANSWER_TOKENS,
        stream_above: int = STREAM_ABOVE_MAX_TOKENS,
        max_context: int | None = None,
    ) -> None:
        self.max_output_tokens = max_output_tokens
        self._stream_above = stream_above
        self._max_attempts = max_attempts
        self._backoff = wait_exponential_jitter(
            multiplier=backoff_initial_s, max=backoff_max_s, jitter=backoff_initial_s
        )
        self._backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._on_retry = on_retry
        self.window = ContextWindow()
        if max_context:
            self.window.learn(max_context, "--max-context")

    def complete(
        self,
        messages: list[Message],
        *,
        system: str = "",
        max_tokens: int = 8192,
        cache_prefix: list[str] | None = None,
        tag: str = "",
    ) -> Reply:
        params = self._request_params(messages, system, min(max_tokens, self.max_output_tokens), cache_prefix or [])
        stream = params["max_tokens"] > self._stream_above
        retrying = Retrying(
            stop=stop_after_attempt(self._max_attempts),
            wait=self._wait,
            retry=retry_if_exception(self._is_retryable),
            sleep=self._sleep,
            before_sleep=lambda state: self._report_retry(state, tag),
        )
        try:
            reply = without_reasoning(replace(retrying(self._send, params, stream), budget=params["max_tokens"]))
        except RetryError as err:
            last = err.last_attempt.exception()
            raise LLMError(
                f"{self.platform} still failing after {self._max_attempts} attempts: "
                f"{self._describe(last)}; try again later or resume the run"
            ) from last
        except self._status_error() as err:
            refused = context_refusal(f"{self._describe(err)} {err}")
            if refused:
                raise ContextExceeded(f"{self.platform} refused the request as longer than its context "
                                      f"({self._describe(err)})", *refused) from err
            raise self._rejected(err) from err
        if not reply.counted:
            u = reply.usage
            self.window.counter.observe(chars_of(system, messages, cache_prefix or []),
                                        u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens)
        return reply

    @abstractmethod
    def _request_params(self, messages: list[Message], system: str, max_tokens: int,
                        cache_prefix: list[str]) -> dict[str, Any]:
        """The request body; its "max_tokens" is the output budget."""

    @abstractmethod
    def _send(self, params: dict[str, Any], stream: bool) -> Reply:
        """One attempt; raises what `_is_retryable` judges."""

    @abstractmethod
    def _status_error(self) -> type[Exception]:
        """The SDK's error for an HTTP status the server refused with."""

    @abstractmethod
    def _is_retryable(self, err: BaseException) -> bool: ...

    @abstractmethod
    def _retry_after_s(self, err: BaseException | None) -> float | None: ...

    @abstractmethod
    def _describe(self, err: BaseException | None) -> str:
        """One line: the status, the server's error kind and message."""

    @abstractmethod
    def _rejected(self, err: Any) -> LLMError:
        """The refusal of a request that is not retried, with what to do about it."""

    def _wait(self, state: RetryCallState) -> float:
        retry_after = self._retry_after_s(state.outcome.exception()) if state.outcome else None
        return min(max(self._backoff(state), retry_after or 0.0), self._backoff_max_s)

    def _report_retry(self, state: RetryCallState, tag: str) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        where = f"[{tag}] " if tag else ""
        line = (
            f"{where}{self.platform} attempt {state.attempt_number}/{self._max_attempts} failed "
            f"({self._describe(error)}); retrying in {delay:.1f}s"
        )
        log.warning(line)
        if self._on_retry:
            self._on_retry(line)


def retry_after_s(headers: Any) -> float | None:
    """The server's requested wait: `retry-after-ms` first, then `retry-after` (seconds)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers.get(name, "")) / scale
        except ValueError:  # absent, or an HTTP date, which these servers do not send
            continue
    return None


def transport_error() -> type[Exception]:
    """httpx's TransportError, as the installed SDKs use it."""
    try:  # anthropic 2.x and openai 3.x run on httpx2; earlier releases on httpx
        import httpx2 as http
    except ImportError:  # pragma: no cover - depends on the installed SDK
        import httpx as http  # type: ignore[no-redef]
    return http.TransportError
