"""What an answer costs: Claude's list prices built in, and a table the researcher can extend.

`PROJECT_ROOT/llm_prices.json` (optional) maps model-name prefixes to dollars per million tokens::

    {"Qwen/Qwen2.5-Coder-32B-Instruct": {"input": 0.2, "output": 0.6},
     "us.anthropic.claude-sonnet-4-5": {"input": 3.3, "output": 16.5, "cache_read": 0.33}}

`cache_write` defaults to 1.25 x `input` and `cache_read` to 0.1 x `input` (Claude's factors). The longest
matching prefix wins, the researcher's entries before the built-in ones. A Claude model is looked up by its id
as the platform spells it, then by its family name (`anthropic.claude-sonnet-4-5-20250929-v1:0` on Bedrock and
`claude-sonnet-4-5@20250929` on Vertex are `claude-sonnet-4-5-20250929`); one in neither is priced as Sonnet.
A model on an OpenAI-compatible server that the table does not name costs $0: a server of the researcher's own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.llm.base import LLMError, Usage, one_line

PRICES_FILE = "llm_prices.json"
_CACHE_WRITE_FACTOR = 1.25
_CACHE_READ_FACTOR = 0.1


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    @classmethod
    def of(cls, input_usd: float, output_usd: float, cache_write: float | None = None,
           cache_read: float | None = None) -> Price:
        return cls(input_usd, output_usd,
                   input_usd * _CACHE_WRITE_FACTOR if cache_write is None else cache_write,
                   input_usd * _CACHE_READ_FACTOR if cache_read is None else cache_read)

    def usd(self, usage: Usage) -> float:
        return (usage.input_tokens * self.input + usage.output_tokens * self.output
                + usage.cache_creation_input_tokens * self.cache_write
                + usage.cache_read_input_tokens * self.cache_read) / 1_000_000


# Opus 4 and 4.1 cost $15/$75; Opus 4.5 and later $5/$25.
CLAUDE_PRICES: dict[str, Price] = {
    "claude-opus-4-0": Price.of(15.0, 75.0),
    "claude-opus-4-1": Price.of(15.0, 75.0),
    "claude-opus-4-2025": Price.of(15.0, 75.0),
    "claude-opus-4": Price.of(5.0, 25.0),
    "claude-sonnet-4": Price.of(3.0, 15.0),
    "claude-haiku-4-5": Price.of(1.0, 5.0),
}
SONNET = Price.of(3.0, 15.0)  # unknown Claude models (and replays) are priced as Sonnet

# anthropic.claude-..., us.anthropic.claude-..., global.anthropic.claude-...: Bedrock's model ids and inference
# profiles, with their version suffix (-v1:0)
BEDROCK_MODEL_ID = re.compile(r"(?:[a-z]{2,6}\.)?anthropic\.(?P<family>claude-[\w.-]+?)(?:-v\d+(?::\d+)?)?")
VERTEX_MODEL_ID = re.compile(r"(?P<family>claude-[\w.-]+?)(?:@(?P<version>[\w.-]+))?")


def claude_family(model: str) -> str:
    """The Anthropic API's name of a Claude model id as Bedrock or Vertex spells it; other names unchanged."""
    bedrock = BEDROCK_MODEL_ID.fullmatch(model)
    if bedrock:
        return bedrock["family"]
    vertex = VERTEX_MODEL_ID.fullmatch(model)
    if vertex and vertex["version"]:
        return f"{vertex['family']}-{vertex['version']}" if vertex["version"].isdigit() else vertex["family"]
    return model


def _longest_prefix(table: dict[str, Price], model: str) -> Price | None:
    matches = [prefix for prefix in table if model.startswith(prefix)]
    return table[max(matches, key=len)] if matches else None


class PriceTable:
    """The built-in Claude prices and the researcher's own (`source` names the file they came from)."""

    def __init__(self, own: dict[str, Price] | None = None, source: str = "") -> None:
        self.own = dict(own or {})
        self.source = source or PRICES_FILE

    def claude(self, model: str) -> tuple[Price, str]:
        """The price of a Claude model id, and how it was found, in words."""
        family = claude_family(model)
        for name in dict.fromkeys((model, family)):
            price = _longest_prefix(self.own, name)
            if price is not None:
                return price, f"priced from {self.source}"
        price = _longest_prefix(CLAUDE_PRICES, family)
        if price is not None:
            return price, "priced at Anthropic's list prices"
        return SONNET, f"priced as Sonnet: {model!r} is in no price table (add it to {self.source})"

    def own_server(self, model: str) -> tuple[Price | None, str]:
        """The price of a model on an OpenAI-compatible server: the researcher's entry, or None ($0)."""
        price = _longest_prefix(self.own, model)
        if price is not None:
            return price, f"priced from {self.source}"
        return None, f"$0: {model!r} is in no price table, so it counts as a server of your own " \
                     f"(add it to {self.source} to count its cost)"


def price_usd(model: str, usage: Usage) -> float:
    """Dollar cost of `usage` on a Claude `model` at list prices; models not in the table are priced as Sonnet."""
    return PriceTable().claude(model)[0].usd(usage)


def load_prices(path: Path) -> PriceTable:
    """The researcher's price table at `path` (none there: the built-in prices only)."""
    if not path.exists():
        return PriceTable(source=str(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        own = {str(prefix): Price.of(float(entry["input"]), float(entry["output"]),
                                     _optional(entry.get("cache_write")), _optional(entry.get("cache_read")))
               for prefix, entry in data.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise LLMError(f"cannot read the price table {path} ({one_line(f'{type(err).__name__}: {err}')}): expected "
                       'JSON {"MODEL-PREFIX": {"input": USD_PER_MTOK, "output": USD_PER_MTOK}}') from err
    return PriceTable(own, source=str(path))


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)
