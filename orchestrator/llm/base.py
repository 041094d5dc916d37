"""What every backend shares: the `LLM` protocol, its `Reply` and `Usage`, and the one error callers catch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

MAX_ANSWER_TOKENS = 64000  # the largest output budget one answer is asked for, unless a backend allows less
_ONE_LINE_LIMIT = 300


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
    answers: tuple[int, ...] = ()  # the journal records this reply accounts for (orchestrator.run.journal)
    backend: str = ""  # which backend answered: anthropic, bedrock, vertex, openai or replay
    reasoning: str = ""  # the model's reasoning (<think> blocks, reasoning fields): logged, never parsed
    tool_calls: tuple[str, ...] = ()  # the names of tool calls the server returned instead of text
    budget: int | None = None  # the output budget the request asked for (max_tokens as sent)
    counted: str = ""  # "" when the server reported the tokens; "tokenizer" or "estimate" when it did not


Message = dict  # {"role": "user" | "assistant", "content": str}


class LLM(Protocol):
    max_output_tokens: int  # the most output tokens one answer may be asked for

    def complete(
        self,
        messages: list[Message],
        *,
        system: str = "",
        max_tokens: int = 8192,
        cache_prefix: list[str] | None = None,
        tag: str = "",
    ) -> Reply: ...


class Backend(LLM, Protocol):
    """An LLM as `--llm` names it: what the logs call it, and a check of it before a run does any work."""

    @property
    def label(self) -> str:
        """What the logs call it, e.g. "openai Qwen/Qwen2.5-Coder-7B-Instruct at http://localhost:8000/v1"."""
        ...

    @property
    def price_note(self) -> str:
        """How its answers are priced, in words."""
        ...

    def preflight(self) -> None:
        """Raise LLMError (one line: the backend, what is wrong, what to set) when a call cannot work."""
        ...


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ONE_LINE_LIMIT else text[: _ONE_LINE_LIMIT - 3] + "..."
