"""Every answered call, told to whoever keeps the log: the backend and model that answered, what it cost, the
model's reasoning; and what was done to fit the server's context (`note`)."""

from __future__ import annotations

from typing import Callable

from orchestrator.llm.base import Backend, Message, Reply


class ReportedLLM:
    """`inner`, with `on_reply(tag, reply)` called after each answer it gives (errors raise as they would), and
    `on_note(tag, line)` for what an exchange did to fit the server's context (orchestrator.llm.asking)."""

    def __init__(self, inner: Backend, on_reply: Callable[[str, Reply], None],
                 on_note: Callable[[str, str], None] = lambda tag, line: None) -> None:
        self.inner, self._on_reply, self._on_note = inner, on_reply, on_note
        self.max_output_tokens = inner.max_output_tokens
        self.window = getattr(inner, "window", None)

    def note(self, tag: str, line: str) -> None:
        self._on_note(tag, line)

    def complete(self, messages: list[Message], *, system: str = "", max_tokens: int = 8192,
                 cache_prefix: list[str] | None = None, tag: str = "") -> Reply:
        reply = self.inner.complete(messages, system=system, max_tokens=max_tokens, cache_prefix=cache_prefix,
                                    tag=tag)
        self._on_reply(tag, reply)
        return reply


def call_line(reply: Reply) -> str:
    """One line for the action log: who answered, the tokens (and who counted them when the server did not), the
    budget asked for, how it ended, a tool call instead of text, the request id."""
    u = reply.usage
    cache = (f", cache read {u.cache_read_input_tokens}, cache write {u.cache_creation_input_tokens}"
             if u.cache_read_input_tokens or u.cache_creation_input_tokens else "")
    counted = {"tokenizer": " (counted by the model's tokenizer: the server reported none)",
               "estimate": " (estimated: the server reported none)"}.get(reply.counted, "")
    budget = f" of {reply.budget} asked for" if reply.budget else ""
    calls = f"; a tool call instead of text: {', '.join(reply.tool_calls)}" if reply.tool_calls else ""
    return (f"{reply.backend} {reply.model} answered: {u.input_tokens} tokens in, {u.output_tokens} out{budget}"
            f"{cache}{counted}; stop {reply.stop_reason or '-'}{calls}; request {reply.request_id or '-'}; "
            f"${reply.cost_usd:.4f}")
