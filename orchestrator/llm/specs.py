"""`--llm SPEC`: which backend answers, built from its spec string."""

from __future__ import annotations

import re
from typing import Any, Callable

from orchestrator.llm.base import MAX_ANSWER_TOKENS, Backend, LLMError
from orchestrator.llm.bedrock import BedrockLLM
from orchestrator.llm.messages import AnthropicLLM
from orchestrator.llm.openai_chat import OpenAIChatLLM
from orchestrator.llm.prices import PriceTable
from orchestrator.llm.replay import ReplayLLM
from orchestrator.llm.vertex import VertexLLM

SPECS = "'anthropic[:MODEL]', 'bedrock:MODEL', 'vertex:MODEL', 'openai:MODEL[@URL]' or 'replay:PATH'"
_EXAMPLES = {
    "bedrock": "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "vertex": "vertex:claude-sonnet-4-5@20250929",
    "openai": "openai:Qwen/Qwen2.5-Coder-7B-Instruct@http://localhost:8000/v1",
}
_MODEL_AT_URL = re.compile(r"(?P<model>.+?)@(?P<url>https?://\S+)")


def make_llm(spec: str, *, answered: dict[str, int] | None = None, on_retry: Callable[[str], None] | None = None,
             prices: PriceTable | None = None, max_output_tokens: int = MAX_ANSWER_TOKENS,
             max_context: int | None = None) -> Backend:
    """The backend `spec` names (SPECS). Credentials are checked here, without the network; `preflight()` then
    checks that the server answers.

    `answered` (tag -> answers already given in this run) lets a resumed replay continue where it stopped;
    `on_retry` receives one line per retried API attempt; `prices` is the researcher's price table;
    `max_output_tokens` caps the output budget of one answer; `max_context` is the server's context length,
    over what the server says of it (orchestrator.llm.context); a replay has none.
    """
    kind, sep, arg = spec.partition(":")
    common: dict[str, Any] = {"on_retry": on_retry, "prices": prices, "max_output_tokens": max_output_tokens,
                              "max_context": max_context}
    if kind == "anthropic" and not sep:
        return AnthropicLLM(**common)
    if kind in _EXAMPLES and not arg:
        raise LLMError(f"--llm {spec!r} names no model: use {kind}:MODEL, e.g. {_EXAMPLES[kind]}")
    if not arg:
        raise LLMError(f"unknown LLM spec {spec!r}: use {SPECS}")
    if kind == "anthropic":
        return AnthropicLLM(arg, **common)
    if kind == "bedrock":
        return BedrockLLM(arg, **common)
    if kind == "vertex":
        return VertexLLM(arg, **common)
    if kind == "openai":
        at_url = _MODEL_AT_URL.fullmatch(arg)
        if at_url:
            return OpenAIChatLLM(at_url["model"], base_url=at_url["url"], **common)
        return OpenAIChatLLM(arg, **common)
    if kind == "replay":
        return ReplayLLM(transcript=arg, answered=answered)
    raise LLMError(f"unknown LLM spec {spec!r}: use {SPECS}")
