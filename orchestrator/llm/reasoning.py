"""A reasoning model's thinking, taken out of its answer before anything reads the answer.

Qwen3, QwQ and DeepSeek-R1 style models served without a reasoning parser write their thinking into the answer
as `<think>...</think>` (some chat templates open the block in the prompt, so the answer holds only its end);
servers with a parser send it apart (`reasoning_content`), and Claude as `thinking` blocks. Whatever the way,
the thinking is the model's drafts: it is logged as its reasoning and never parsed or applied.

A block opens with `<think>` (or `<thinking>`, `<reasoning>`) at the start of the answer or of a line outside a
code fence, and runs to its closing tag; an answer whose first closing tag comes before any opening one began
inside the block. A block never closed (the answer was cut while thinking) takes the rest of the answer.
"""

from __future__ import annotations

import re
from dataclasses import replace

from orchestrator.llm.base import Reply

_TAGS = ("think", "thinking", "reasoning")
_OPEN = re.compile(r"^[ \t]*<(?P<tag>" + "|".join(_TAGS) + r")>", re.I)
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_QUOTES = frozenset("'\"`\\")


def split_reasoning(text: str) -> tuple[str, str]:
    """(the answer without its reasoning blocks, the reasoning they held, blocks joined by a blank line)."""
    answer: list[str] = []
    reasoning: list[str] = []
    rest = text
    orphan = _closing(rest, _TAGS)
    if orphan and not re.search(r"<(" + "|".join(_TAGS) + r")>", rest[: orphan[0]], re.I):
        reasoning.append(rest[: orphan[0]].strip())  # the chat template opened the block: only its end is here
        rest = rest[orphan[1]:]
    fence: str | None = None
    while rest:
        line_end = rest.find("\n")
        line = rest if line_end < 0 else rest[: line_end + 1]
        opened = _OPEN.match(line) if fence is None else None
        if opened:
            body = rest[opened.end():]
            closed = _closing(body, (opened["tag"].lower(),))
            if closed is None:  # cut while thinking: nothing after it is an answer
                reasoning.append(body.strip())
                break
            reasoning.append(body[: closed[0]].strip())
            rest = body[closed[1]:]
            continue
        fenced = _FENCE.match(line)
        if fenced:
            mark = fenced.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark):]:
                fence = None
        answer.append(line)
        rest = rest[len(line):]
    return "".join(answer).strip("\n") + ("\n" if answer and text.endswith("\n") else ""), \
        "\n\n".join(part for part in reasoning if part)


def _closing(text: str, tags: tuple[str, ...]) -> tuple[int, int] | None:
    """(start, end) of the first closing tag of `tags` in `text` that is not quoted (code that splits an answer
    at "</think>" holds the tag between quotes)."""
    for found in re.finditer(r"</(" + "|".join(tags) + r")>", text, re.I):
        before = text[found.start() - 1: found.start()]
        after = text[found.end(): found.end() + 1]
        if before not in _QUOTES and after not in _QUOTES:
            return found.start(), found.end()
    return None


def without_reasoning(reply: Reply) -> Reply:
    """The reply with its text's reasoning blocks moved to `reasoning`, after what the server sent apart."""
    text, reasoning = split_reasoning(reply.text)
    if not reasoning:
        return reply
    return replace(reply, text=text, reasoning="\n\n".join(part for part in (reply.reasoning, reasoning) if part))
