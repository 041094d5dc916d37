"""`--llm replay:TRANSCRIPT.json`: scripted replies for tests and the offline demo."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.llm.base import MAX_ANSWER_TOKENS, LLMError, Message, Reply, Usage, one_line
from orchestrator.llm.prices import SONNET
from orchestrator.llm.reasoning import without_reasoning


@dataclass(frozen=True)
class _Scripted:
    text: str
    tag: str | None = None
    usage: Usage = Usage()
    stop_reason: str = "end_turn"


class ReplayLLM:
    """Plays scripted replies and records every request in `.calls`.

    When every reply has a tag, replies are keyed by what is asked: the k-th call with tag T gets the
    k-th reply tagged T, so a resumed run continues where it stopped (`answered`: tag -> replies
    already given in this run). Untagged replies are played in order. Recorded usage is priced as Sonnet.
    """

    backend = "replay"
    price_note = "the recorded tokens, priced at Sonnet's list prices"
    max_output_tokens = MAX_ANSWER_TOKENS

    def __init__(self, replies: list[str] | None = None, *, transcript: str | Path | None = None,
                 answered: dict[str, int] | None = None) -> None:
        if replies is not None and transcript is not None:
            raise LLMError("ReplayLLM takes replies or a transcript, not both: pass one of them")
        if transcript is not None:
            self._script = _load_transcript(Path(transcript))
        else:
            self._script = [_Scripted(text) for text in replies or []]
        self.label = f"replay {transcript}" if transcript is not None else "replay"
        self._keyed = bool(self._script) and all(s.tag is not None for s in self._script)
        self._answered = dict(answered or {})
        self._next = 0 if self._keyed else sum(self._answered.values())
        self.calls: list[dict[str, Any]] = []

    @property
    def remaining(self) -> int:
        used = sum(self._answered.values()) if self._keyed else self._next
        return len(self._script) - used

    def preflight(self) -> None:
        """Nothing to reach: the transcript was read when the backend was made."""

    def _pick(self, tag: str) -> _Scripted:
        if self._keyed:
            tagged = [s for s in self._script if s.tag == tag]
            index = self._answered.get(tag, 0)
            if index >= len(tagged):
                raise LLMError(f"replay transcript has no reply #{index + 1} for {tag!r} "
                               f"({len(tagged)} scripted): add one to the transcript")
            self._answered[tag] = index + 1
            return tagged[index]
        if not self.remaining:
            raise LLMError(f"replay transcript exhausted after {len(self._script)} replies")
        scripted = self._script[self._next]
        if scripted.tag is not None and scripted.tag != tag:
            raise LLMError(
                f"replay transcript out of step: expected a call for {scripted.tag!r}, got {tag!r}"
            )
        self._next += 1
        return scripted

    def complete(
        self,
        messages: list[Message],
        *,
        system: str = "",
        max_tokens: int = 8192,
        cache_prefix: list[str] | None = None,
        tag: str = "",
    ) -> Reply:
        self.calls.append({
            "tag": tag,
            "system": system,
            "messages": copy.deepcopy(messages),
            "cache_prefix": list(cache_prefix or []),
            "max_tokens": max_tokens,
        })
        scripted = self._pick(tag)
        return without_reasoning(Reply(
            text=scripted.text,
            usage=scripted.usage,
            cost_usd=SONNET.usd(scripted.usage),
            model="replay",
            stop_reason=scripted.stop_reason,
            backend=self.backend,
            budget=max_tokens,
        ))


def _load_transcript(path: Path) -> list[_Scripted]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["replies"]
        return [
            _Scripted(text=entry["text"], tag=entry.get("tag"), usage=Usage(**entry.get("usage", {})),
                      stop_reason=entry.get("stop_reason", "end_turn"))
            for entry in entries
        ]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise LLMError(
            f"cannot load replay transcript {path} ({one_line(f'{type(err).__name__}: {err}')}): "
            'expected JSON {"replies": [{"tag": ..., "text": ..., "usage": {...}}]}'
        ) from err
