"""One LLM exchange whose answer must parse: a malformed answer is fed back once, never a crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from orchestrator.edits import EditFormatError
from orchestrator.llm import LLM, Message, Usage
from orchestrator.prompts import render

T = TypeVar("T")


@dataclass
class Answer(Generic[T]):
    parsed: T | None  # None when the answer stayed malformed after the re-ask
    error: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    calls: int = 0
    request_ids: list[str] = field(default_factory=list)
    last_text: str = ""  # the last reply, parsed or not

    def ledger_row(self) -> dict[str, float]:
        u = self.usage
        return {"calls": self.calls, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_input_tokens, "cache_write_tokens": u.cache_creation_input_tokens,
                "tokens": u.total_tokens, "cost_usd": self.cost_usd}


def ask(llm: LLM, messages: list[Message], parse: Callable[[str], T], *, system: str, tag: str,
        cache_prefix: list[str] | None = None, max_tokens: int = 16000, reasks: int = 1) -> Answer[T]:
    """Ask, parse; on EditFormatError/ValueError send the error back (up to `reasks` times)."""
    answer: Answer[T] = Answer(parsed=None)
    conversation = list(messages)
    for _ in range(reasks + 1):
        reply = llm.complete(conversation, system=system, max_tokens=max_tokens, cache_prefix=cache_prefix, tag=tag)
        answer.usage += reply.usage
        answer.cost_usd += reply.cost_usd
        answer.calls += 1
        answer.last_text = reply.text
        if reply.request_id:
            answer.request_ids.append(reply.request_id)
        try:
            answer.parsed, answer.error = parse(reply.text), ""
            return answer
        except (EditFormatError, ValueError) as exc:
            answer.error = str(exc)
            conversation += [{"role": "assistant", "content": reply.text},
                             {"role": "user", "content": render("reask_format", error=answer.error)}]
    return answer
