"""Every answered call, told to whoever keeps the log: the backend and model that answered, what it cost."""

from __future__ import annotations

from typing import Callable

from orchestrator.llm.base import Backend, Message, Reply


class ReportedLLM:
    """`inner`, with `on_reply(tag, reply)` called after each answer it gives (errors raise as they would)."""

    def __init__(self, inner: Backend, on_reply: Callable[[str, Reply], None]) -> None:
        self.inner, self._on_reply = inner, on_reply
        self.max_output_tokens = inner.max_output_tokens

    def complete(self, messages: list[Message], *, system: str = "", max_tokens: int = 8192,
                 cache_prefix: list[str] | None = None, tag: str = "") -> Reply:
        reply = self.inner.complete(messages, system=system, max_tokens=max_tokens, cache_prefix=cache_prefix,
                                    tag=tag)
        self._on_reply(tag, reply)
        return reply


def call_line(reply: Reply) -> str:
    """One line for the action log: who answered, the tokens, how it ended, the request id."""
    u = reply.usage
    cache = (f", cache read {u.cache_read_input_tokens}, cache write {u.cache_creation_input_tokens}"
             if u.cache_read_input_tokens or u.cache_creation_input_tokens else "")
    return (f"{reply.backend} {reply.model} answered: {u.input_tokens} tokens in, {u.output_tokens} out{cache}; "
            f"stop {reply.stop_reason or '-'}; request {reply.request_id or '-'}; ${reply.cost_usd:.4f}")
