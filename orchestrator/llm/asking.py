"""One LLM exchange whose answer must parse and be complete: a malformed answer is fed back once,
an answer cut at its token budget is asked again with a larger one (and, cut at the most the backend
allows, fed back once to be shorter); never a crash, never half an answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from orchestrator.llm.edits import EditFormatError
from orchestrator.llm import LLM, MAX_ANSWER_TOKENS, Message, Usage
from orchestrator.llm.prompts import render

T = TypeVar("T")

TRUNCATED = "max_tokens"  # the API's stop_reason for an answer cut at its budget


@dataclass
class Answer(Generic[T]):
    parsed: T | None  # None when the answer stayed malformed after the re-ask, or stayed incomplete
    error: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    calls: int = 0
    request_ids: list[str] = field(default_factory=list)
    last_text: str = ""  # the last reply, parsed or not
    answers: list[int] = field(default_factory=list)  # journal records of the paid answers (orchestrator.run.journal)

    def ledger_row(self) -> dict:
        u = self.usage
        row = {"calls": self.calls, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
               "cache_read_tokens": u.cache_read_input_tokens, "cache_write_tokens": u.cache_creation_input_tokens,
               "tokens": u.total_tokens, "cost_usd": self.cost_usd}
        if self.answers:  # which journaled answers this row accounts for: a resume reuses the others
            row["answers"] = list(self.answers)
        return row


def ask(llm: LLM, messages: list[Message], parse: Callable[[str], T], *, system: str, tag: str,
        cache_prefix: list[str] | None = None, max_tokens: int = 16000, reasks: int = 1) -> Answer[T]:
    """Ask, parse; on EditFormatError/ValueError send the error back (up to `reasks` times).

    An answer cut at its budget (stop_reason "max_tokens") is incomplete: it is never parsed or applied. The
    same question is asked again with twice the budget, up to the ceiling: MAX_ANSWER_TOKENS, or less where the
    backend allows less (`llm.max_output_tokens`). An answer cut at the ceiling is sent back like a malformed
    one (one of the `reasks`), asking for an answer that fits.
    """
    answer: Answer[T] = Answer(parsed=None)
    conversation = list(messages)
    ceiling = min(MAX_ANSWER_TOKENS, llm.max_output_tokens)
    budget = min(max_tokens, ceiling)
    format_errors = 0
    while True:
        reply = llm.complete(conversation, system=system, max_tokens=budget, cache_prefix=cache_prefix, tag=tag)
        answer.usage += reply.usage
        answer.cost_usd += reply.cost_usd
        answer.calls += 1
        answer.last_text = reply.text
        answer.answers += list(getattr(reply, "answers", ()) or ())
        if reply.request_id:
            answer.request_ids.append(reply.request_id)
        if reply.stop_reason == TRUNCATED and budget < ceiling:
            budget = min(budget * 2, ceiling)
            continue
        if reply.stop_reason == TRUNCATED:
            answer.error = (f"the answer was cut at its budget of {budget} output tokens (stop_reason max_tokens) "
                            f"and is incomplete; it was not applied")
            told = f"{answer.error}. It must fit in {budget} output tokens: leave out explanations and comments"
        else:
            try:
                answer.parsed, answer.error = parse(reply.text), ""
                return answer
            except (EditFormatError, ValueError) as exc:
                answer.error = told = str(exc)
        format_errors += 1
        if format_errors > reasks:
            return answer
        conversation += [{"role": "assistant", "content": reply.text},
                         {"role": "user", "content": render("reask_format", error=told)}]
