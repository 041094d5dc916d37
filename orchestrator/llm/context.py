"""A server's context length and the tokens of a request: what every answer's budget is made of.

The context length is read where the server says it: vLLM's and SGLang's `GET /v1/models` (`max_model_len`),
Ollama's `num_ctx` (`POST /api/show`), the model's own `config.json` where the model is a local folder or in the
Hugging Face cache (`transformers serve` says nothing), `--max-context N`, or a refusal's text ("This model's
maximum context length is 32768 tokens..."), learned the first time one comes. A request's answer budget is
then context - prompt - margin.

Tokens are counted by the model's own tokenizer where it is at hand (its `tokenizer.json`, offline), else
estimated from characters (3 to a token, then as many as the server's own counts have shown) and said to be
an estimate; the margin of an estimate is larger.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from orchestrator.llm.base import LLMError, Message

MIN_CONTEXT_TOKENS = 1024  # the least context length --max-context takes
CHARS_PER_TOKEN = 1.5  # before any count from the server: fewer than any tokenizer gives (BPE: 3-4.5 for code)
MESSAGE_OVERHEAD = 8  # a chat template's tokens around one message (role, start and end markers)
EXACT_MARGIN = 32  # tokens kept free when counted by the model's tokenizer
ESTIMATE_MARGIN = 0.05  # share of an estimated prompt kept free, beyond EXACT_MARGIN
_CONFIG_CONTEXT_KEYS = ("max_position_embeddings", "max_seq_len", "n_positions", "seq_length", "max_sequence_length")

# what servers say when a request is longer than their context: (context, prompt tokens or None)
_REFUSALS = (
    # vLLM: "This model's maximum context length is 32768 tokens. However, you requested 48213 tokens (32213 in the
    # messages, 16000 in the completion)." / "... and your request has 32213 input tokens (16000 > 32768 - 32213)"
    re.compile(r"maximum context length is (?P<context>\d+) tokens(?:.*?(?:\((?P<prompt>\d+) in the messages"
               r"|request has (?P<prompt2>\d+) input tokens|messages resulted in (?P<prompt3>\d+) tokens))?", re.S),
    # SGLang: "The input (40000 tokens) is longer than the model's context length (32768 tokens)."
    re.compile(r"input \((?P<prompt>\d+) tokens\) is longer than the model's context length \((?P<context>\d+) "
               r"tokens\)"),
    # SGLang: "Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total
    # of 48213 tokens: 32213 tokens from the input messages and 16000 tokens for the completion."
    re.compile(r"context length of (?P<context>\d+) tokens.*?(?P<prompt>\d+) tokens from the input", re.S),
    # llama.cpp: "request (40000 tokens) exceeds the available context size (32768 tokens)"
    re.compile(r"request \((?P<prompt>\d+) tokens\) exceeds the available context size \((?P<context>\d+) tokens\)"),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    re.compile(r"prompt is too long: (?P<prompt>\d+) tokens > (?P<context>\d+) maximum"),
    # Anthropic: "input length and `max_tokens` exceed context limit: 197000 + 64000 > 200000"
    re.compile(r"exceed context limit: (?P<prompt>\d+) \+ \d+ > (?P<context>\d+)"),
)


class ContextExceeded(LLMError):
    """The server refused a request as longer than its context; what it said of the numbers."""

    def __init__(self, message: str, context: int, prompt_tokens: int | None) -> None:
        super().__init__(message)
        self.context, self.prompt_tokens = context, prompt_tokens


class ContextTooSmall(LLMError):
    """A node's request does not fit the server's context in any form: one line with the numbers."""


def context_refusal(text: str) -> tuple[int, int | None] | None:
    """(context, prompt tokens or None) from a server's refusal of a request longer than its context."""
    for pattern in _REFUSALS:
        found = pattern.search(text)
        if found:
            groups = found.groupdict()
            prompt = next((groups[k] for k in ("prompt", "prompt2", "prompt3") if groups.get(k)), None)
            return int(groups["context"]), int(prompt) if prompt else None
    return None


class TokenCounter:
    """A request's tokens: the model's tokenizer where at hand (`exact`), else characters / chars_per_token, the
    ratio taken from the server's own counts once it has given some."""

    def __init__(self, tokenizer: Any = None, *, source: str = "") -> None:
        self._tokenizer = tokenizer
        self.source = source or ("the model's tokenizer" if tokenizer is not None else "an estimate")
        self.tokens_per_char: float | None = None  # the largest the server's counts have shown
        self.scale = 1.0  # raised each time the server refused a request this counter said would fit

    @property
    def exact(self) -> bool:
        return self._tokenizer is not None

    def text(self, text: str) -> int:
        if not text:
            return 0
        if self._tokenizer is not None:
            return math.ceil(len(self._tokenizer.encode(text, add_special_tokens=False).ids) * self.scale)
        return math.ceil(len(text) * (self.tokens_per_char or 1 / CHARS_PER_TOKEN) * self.scale)

    def request(self, system: str, messages: Iterable[Message], cache_prefix: Iterable[str] = ()) -> int:
        """The prompt tokens of a chat request: every text, and each message's template overhead."""
        texts = [system, *cache_prefix, *(str(m.get("content") or "") for m in messages)]
        return sum(self.text(t) for t in texts) + MESSAGE_OVERHEAD * (len(texts) + 1)

    def margin(self, prompt_tokens: int) -> int:
        return EXACT_MARGIN + (0 if self.exact else math.ceil(prompt_tokens * ESTIMATE_MARGIN))

    def recount(self, counted: int, server_count: int) -> None:
        """The server counted `server_count` tokens where this counter said `counted`: count as many from now."""
        if server_count > counted > 0:
            self.scale *= server_count / counted

    def surprised(self) -> None:
        """The server refused a request this counter said would fit, without saying its own count: count more."""
        self.scale *= 1.25

    def observe(self, chars: int, tokens: int) -> None:
        """The server counted `tokens` for a request of `chars` characters: estimates follow its counts."""
        if self._tokenizer is None and chars > 0 and tokens > 0:
            self.tokens_per_char = max(self.tokens_per_char or 0.0, tokens / chars)


@dataclass
class ContextWindow:
    """What a backend knows of its server's limits; learned as the server says them."""

    counter: TokenCounter = field(default_factory=TokenCounter)
    tokens: int | None = None  # the context length, prompt and answer together; None: not known
    source: str = ""  # where it was read, for the messages
    output_cap: int | None = None  # the most output tokens the server let one answer have (its own limit)

    def learn(self, tokens: int, source: str) -> None:
        self.tokens, self.source = tokens, source

    def describe(self) -> str:
        return f"{self.tokens:,}-token context ({self.source})" if self.tokens else "context not known"


def chars_of(system: str, messages: Iterable[Message], cache_prefix: Iterable[str] = ()) -> int:
    return len(system) + sum(len(t) for t in cache_prefix) + sum(len(str(m.get("content") or "")) for m in messages)


def local_model_files(model: str) -> Path | None:
    """The folder holding the model's tokenizer and config: the model itself when it is a folder, else its
    snapshot in the Hugging Face cache (read offline); None when neither is here."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder if (folder / "tokenizer.json").is_file() or (folder / "config.json").is_file() else None
    if model.count("/") != 1 or model.startswith(("/", ".")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - installed with transformers
        return None
    for name in ("tokenizer.json", "config.json"):
        found = try_to_load_from_cache(model, name)
        if isinstance(found, str):
            return Path(found).parent
    return None


def model_counter(model: str) -> TokenCounter:
    """The model's own tokenizer when its tokenizer.json is at hand, else an estimating counter."""
    files = local_model_files(model)
    if files is not None and (files / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer

            return TokenCounter(Tokenizer.from_file(str(files / "tokenizer.json")),
                                source=f"the model's tokenizer ({files / 'tokenizer.json'})")
        except Exception:  # noqa: BLE001 - a tokenizer file this library cannot read: estimate instead
            pass
    return TokenCounter()


def model_config_context(model: str) -> int | None:
    """The context length the model's own config.json gives, where it is at hand."""
    files = local_model_files(model)
    if files is None or not (files / "config.json").is_file():
        return None
    try:
        config = json.loads((files / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for holder in (config, config.get("text_config") or {}):
        for key in _CONFIG_CONTEXT_KEYS:
            if isinstance(holder.get(key), int) and holder[key] > 0:
                return holder[key]
    return None


def served_context(entry: dict[str, Any]) -> int | None:
    """The context length a `/v1/models` entry states (vLLM, SGLang: max_model_len; others' spellings)."""
    for key in ("max_model_len", "context_length", "max_context_length", "context_window"):
        value = entry.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def ollama_num_ctx(show: dict[str, Any]) -> int | None:
    """The context Ollama runs a model with, from its `/api/show` answer: the `num_ctx` parameter."""
    found = re.search(r"^\s*num_ctx\s+(\d+)\s*$", str(show.get("parameters") or ""), re.M)
    return int(found.group(1)) if found else None
