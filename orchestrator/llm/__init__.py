"""The LLM layer: one `complete()` call that returns a `Reply`, behind the backends `--llm` names.

    base.py         the LLM protocol, Reply, Usage, LLMError (what every backend shares)
    retrying.py     tenacity's retries, the one retry mechanism of every network backend
    messages.py     Claude's Messages API through the anthropic SDK; `anthropic[:MODEL]`
    bedrock.py      `bedrock:MODEL`: Claude on Amazon Bedrock (the SDK's AnthropicBedrock)
    vertex.py       `vertex:MODEL`: Claude on Google Vertex AI (the SDK's AnthropicVertex)
    openai_chat.py  `openai:MODEL@URL`: any OpenAI-compatible chat completions server (vLLM, SGLang, Ollama, ...)
    replay.py       `replay:PATH`: a scripted transcript, for tests and the offline demo
    prices.py       what an answer costs: list prices and the researcher's llm_prices.json
    reach.py        whether a server answers at all, before a run does any work
    reported.py     every answered call told to the run's log: the backend and model that answered
    specs.py        `make_llm(spec)`: the backend a spec names
    context.py      a server's context length (read where it says it, or learned from its refusal) and a request's
                    tokens (the model's tokenizer where at hand, else an estimate)
    reasoning.py    <think> blocks and reasoning fields taken out of an answer before anything reads it
    fitting.py      a prompt's smaller forms, for a server whose context cannot take the whole one
    asking.py       one exchange whose answer must parse and be complete, in the room the server leaves it
    json_answer.py  a JSON object read from an answer
    edits.py        whole-file, CUSTOMIZE-section, SEARCH/REPLACE and unified-diff answers, applied all-or-nothing
    diffs.py        unified diffs read as edits
    meaning.py      lines that differ only in form (quotes, spaces): an edit keeps their old text
    protected.py    an edited train.py's GENERIC sections put back from the template
    prompts.py      each node's prompt, rendered from agent_prompts/

A layer above sources/ (edits splice the template's sections) and below everything else; it imports nothing else
of the orchestrator's.
"""

from orchestrator.llm.base import MAX_ANSWER_TOKENS, LLM, Backend, LLMError, Message, Reply, Usage
from orchestrator.llm.messages import DEFAULT_MODEL, AnthropicLLM
from orchestrator.llm.prices import PRICES_FILE, PriceTable, load_prices, price_usd
from orchestrator.llm.replay import ReplayLLM
from orchestrator.llm.retrying import STREAM_ABOVE_MAX_TOKENS
from orchestrator.llm.specs import SPECS, make_llm

__all__ = ["DEFAULT_MODEL", "LLM", "MAX_ANSWER_TOKENS", "PRICES_FILE", "SPECS", "STREAM_ABOVE_MAX_TOKENS",
           "AnthropicLLM", "Backend", "LLMError", "Message", "PriceTable", "ReplayLLM", "Reply", "Usage",
           "load_prices", "make_llm", "price_usd"]
