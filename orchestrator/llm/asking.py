"""One LLM exchange whose answer must parse and be complete, in the room the server gives it.

A malformed answer is fed back once; an answer cut at its token budget is asked again with a larger one
(and, cut at the most the backend allows, fed back once to be shorter); never a crash, never half an answer.

Where the backend knows its server's context (orchestrator.llm.context), every request's answer budget is
context - prompt - margin, and a prompt that leaves too little room is sent in a smaller form
(orchestrator.llm.fitting): the first form that leaves the answer its floor. A request the server refuses as
too long teaches the context (and the prompt's real size) and is fitted again; an answer the server cut below
the budget asked for is the server's own limit. An answer cut by the room left to it goes to a smaller form,
else to the caller, who may split its work (`can_split`), else back to the model to be shorter: never the
same request again. Nothing fits: ContextTooSmall, one line with the numbers.

The model's reasoning never reaches `parse` (the backends take it out of the text); an answer that is only
reasoning, or a tool call, is named as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from orchestrator.llm import LLM, MAX_ANSWER_TOKENS, Message, Usage
from orchestrator.llm.context import ContextExceeded, ContextTooSmall, ContextWindow
from orchestrator.llm.edits import EditFormatError
from orchestrator.llm.fitting import Form, forms as prompt_forms
from orchestrator.llm.prompts import render

T = TypeVar("T")

TRUNCATED = "max_tokens"  # the API's stop_reason for an answer cut at its budget
MIN_ANSWER_TOKENS = 256  # the least room an answer is sent with, on the smallest contexts
ANSWER_SHARE = 8  # else a request leaves its answer at least 1/ANSWER_SHARE of the context (or what it asked)
MAX_REFUSALS = 4  # context refusals one exchange takes before it gives up
MORE_ROOM = 1.25  # an answer cut by its room is asked again only with at least this much more room
NEARLY = 0.9  # a form giving this share of the most room any form gives is as good, and keeps more of the prompt
ECHO_CHARS = 2000  # of a cut answer, shown back to the model when it is asked to be shorter


@dataclass
class Answer(Generic[T]):
    parsed: T | None  # None when the answer stayed malformed after the re-ask, or stayed incomplete
    error: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    calls: int = 0
    request_ids: list[str] = field(default_factory=list)
    last_text: str = ""  # the last reply, parsed or not (its reasoning taken out)
    answers: list[int] = field(default_factory=list)  # journal records of the paid answers (orchestrator.run.journal)
    notes: list[str] = field(default_factory=list)  # what was done to fit the server's context, one line each
    cut_short: bool = False  # cut by the room the server left it: the caller may ask for its work in parts

    def ledger_row(self) -> dict:
        u = self.usage
        row = {"calls": self.calls, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
               "cache_read_tokens": u.cache_read_input_tokens, "cache_write_tokens": u.cache_creation_input_tokens,
               "tokens": u.total_tokens, "cost_usd": self.cost_usd}
        if self.answers:  # which journaled answers this row accounts for: a resume reuses the others
            row["answers"] = list(self.answers)
        return row

    def add(self, other: Answer[Any]) -> None:
        """Count `other`'s calls and spend in this one (a node that asked in parts)."""
        self.usage += other.usage
        self.cost_usd += other.cost_usd
        self.calls += other.calls
        self.request_ids += other.request_ids
        self.answers += other.answers
        self.notes += other.notes


def tool_call_error(names: Sequence[str]) -> str:
    return (f"the server returned a tool call ({', '.join(names)}) instead of a text answer: start it without a "
            f"tool-call parser (vLLM: without --enable-auto-tool-choice and --tool-call-parser; SGLang: without "
            f"--tool-call-parser), or serve a model whose chat template answers in text")


def ask(llm: LLM, messages: list[Message], parse: Callable[[str], T], *, system: str, tag: str,
        cache_prefix: list[str] | None = None, max_tokens: int = 16000, reasks: int = 1,
        forms: Callable[[], Sequence[Form]] | None = None, can_split: bool = False) -> Answer[T]:
    """Ask, parse; on EditFormatError/ValueError send the error back (up to `reasks` times).

    An answer cut at its budget (stop_reason "max_tokens") is incomplete: it is never parsed or applied. The
    same question is asked again with twice the budget, up to the ceiling: MAX_ANSWER_TOKENS, or less where the
    backend allows less (`llm.max_output_tokens`), or the server's context does. An answer cut at the ceiling
    is sent back like a malformed one (one of the `reasks`), asking for an answer that fits; with `can_split`,
    one cut by the server's room comes back instead (`cut_short`). `forms` makes the prompt and its smaller
    forms when they are needed (default: `fitting.forms` of `messages` and `cache_prefix`).
    """
    ladder = _Ladder(Form(list(messages), list(cache_prefix or [])),
                     forms or (lambda: prompt_forms(messages, cache_prefix or [])))
    exchange = _Exchange(llm, system, tag, ladder, min(max_tokens, _ceiling(llm)))
    answer: Answer[T] = Answer(parsed=None)
    format_errors = 0
    while True:
        try:
            reply, budget = exchange.send()
        except ContextExceeded as refused:
            exchange.refused(refused)
            continue
        answer.usage += reply.usage
        answer.cost_usd += reply.cost_usd
        answer.calls += 1
        answer.last_text = reply.text
        answer.answers += list(getattr(reply, "answers", ()) or ())
        answer.notes = exchange.notes
        if reply.request_id:
            answer.request_ids.append(reply.request_id)
        echoed: str | None = None
        if reply.tool_calls and not reply.text.strip():
            answer.error = tool_call_error(reply.tool_calls)
            return answer  # asking again gets the same tool call: the server must change
        if reply.stop_reason == TRUNCATED:
            if exchange.more_room(reply, budget):
                continue
            fits = min(budget, exchange.window.output_cap or budget) if exchange.window else budget
            answer.error = (f"the answer was cut at its budget of {budget} output tokens (stop_reason max_tokens) "
                            f"and is incomplete; it was not applied" if fits == budget else
                            f"the answer was cut by the server at {fits} output tokens, its own limit (below the "
                            f"{budget} asked for), and is incomplete; it was not applied")
            if can_split and exchange.room_limited:
                answer.cut_short = True
                return answer
            told = (f"{answer.error}. It must fit in {fits} output tokens: leave out explanations, comments and "
                    f"long reasoning")
            echoed = abridge(reply.text, ECHO_CHARS)  # all of it would only take the room the answer needs
        elif not reply.text.strip() and reply.reasoning:
            answer.error = told = ("the answer held only reasoning (a <think> block) and nothing after it: write the "
                                   "answer itself after the reasoning")
        else:
            try:
                answer.parsed, answer.error = parse(reply.text), ""
                return answer
            except (EditFormatError, ValueError) as exc:
                answer.error = told = str(exc)
        format_errors += 1
        if format_errors > reasks:
            return answer
        exchange.tail += [{"role": "assistant", "content": echoed if echoed is not None else reply.text},
                          {"role": "user", "content": render("reask_format", error=told)}]


def abridge(text: str, limit: int) -> str:
    """`text` within `limit` characters: its start and its end, the middle cut at line boundaries."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2:]
    head = head[: head.rfind("\n")] if "\n" in head else head
    tail = tail[tail.find("\n") + 1:] if "\n" in tail else tail
    return f"{head}\n... ({len(text) - len(head) - len(tail)} characters cut) ...\n{tail}"


def _ceiling(llm: LLM) -> int:
    return min(MAX_ANSWER_TOKENS, llm.max_output_tokens)


def _found(llm: Any, name: str) -> Any:
    """`name` of the backend, through the wrappers around it (each keeps the one it wraps as `inner`)."""
    while llm is not None:
        if hasattr(llm, name):
            return getattr(llm, name)
        llm = getattr(llm, "inner", None)
    return None


class _Ladder:
    """A prompt's forms, the smaller ones made only when one is needed."""

    def __init__(self, whole: Form, make: Callable[[], list[Form]]) -> None:
        self._whole, self._make, self._forms = whole, make, None

    def _all(self) -> list[Form]:
        if self._forms is None:
            self._forms = list(self._make()) or [self._whole]
        return self._forms

    def __getitem__(self, level: int) -> Form:
        return self._whole if level == 0 and self._forms is None else self._all()[level]

    def __len__(self) -> int:
        return len(self._all())


class _Exchange:
    """The requests of one ask(): which form of the prompt, which budget, the re-ask turns, what was said."""

    def __init__(self, llm: LLM, system: str, tag: str, ladder: _Ladder, wanted: int) -> None:
        self.llm, self.system, self.tag, self.ladder = llm, system, tag, ladder
        self.window: ContextWindow | None = _found(llm, "window")
        self._say: Callable[[str, str], None] | None = _found(llm, "note")
        self.ceiling = _ceiling(llm)
        self.wanted = wanted  # the budget asked for before the server's room is counted
        self.level = 0  # the form in use: never a larger one again
        self.start = 0  # the smallest form index the next request may use
        self.tail: list[Message] = []  # re-ask turns after the form's messages
        self.notes: list[str] = []
        self.room_limited = False  # the last budget was the server's room, not what was wanted
        self._sent: set[tuple[int, int, int]] = set()
        self._refusals = 0

    def note(self, line: str) -> None:
        self.notes.append(line)
        if callable(self._say):
            self._say(self.tag, line)

    def send(self) -> tuple[Any, int]:
        budget = self._fit()
        form = self.ladder[self.level]
        self._sent.add((self.level, budget, len(self.tail)))
        reply = self.llm.complete(form.messages + self.tail, system=self.system, max_tokens=budget,
                                  cache_prefix=form.cache_prefix, tag=self.tag)
        return reply, budget

    def _prompt_tokens(self, level: int) -> int:
        form = self.ladder[level]
        return self.window.counter.request(self.system, form.messages + self.tail, form.cache_prefix)

    def _room(self, level: int) -> tuple[int, int]:
        """(prompt tokens, the answer's room) of the form at `level` with the re-ask turns."""
        prompt = self._prompt_tokens(level)
        return prompt, self.window.tokens - prompt - self.window.counter.margin(prompt)

    def _floor(self) -> int:
        return min(self.wanted, max(MIN_ANSWER_TOKENS, self.window.tokens // ANSWER_SHARE))

    def _plan(self, start: int) -> tuple[int, int, int]:
        """(form, its prompt tokens, budget) of the next request: the first form from `start` that leaves its
        answer the floor; ContextTooSmall when none does."""
        window = self.window
        floor = self._floor()
        prompt, room = self._room(start)
        if room >= floor:  # the common case: the smaller forms are never made
            return start, prompt, min(self.wanted, room, window.output_cap or self.wanted)
        for level in range(start + 1, len(self.ladder)):
            prompt, room = self._room(level)
            if room >= floor:
                return level, prompt, min(self.wanted, room, window.output_cap or self.wanted)
        whole, _ = self._room(0)
        raise ContextTooSmall(
            f"{self.tag}: the request does not fit the server's {window.describe()}: {prompt:,} prompt tokens even "
            f"in its smallest form ({whole:,} whole; counted by {window.counter.source}) leave {max(room, 0):,} for "
            f"an answer that needs at least {floor:,}: serve the model with a longer context (vLLM: "
            f"--max-model-len), or give --max-context N if the server takes more")

    def _fit(self) -> int:
        """The budget of the next request, in the form `_plan` picks (said once per form)."""
        if self.window is None or self.window.tokens is None:
            self.room_limited = bool(self.window and self.window.output_cap and self.window.output_cap < self.wanted)
            return min(self.wanted, self.window.output_cap or self.wanted) if self.window else self.wanted
        try:
            level, prompt, budget = self._plan(max(self.level, self.start))
        except ContextTooSmall:
            long = [m for m in self.tail if m["role"] == "assistant" and len(m["content"]) > ECHO_CHARS]
            if not long:
                raise
            self.tail = [{**m, "content": abridge(m["content"], ECHO_CHARS)} if m in long else m for m in self.tail]
            level, prompt, budget = self._plan(max(self.level, self.start))
        if level != self.level:
            whole, _ = self._room(0)
            self.note(f"the prompt ({whole:,} tokens whole) leaves too little room for the answer in the server's "
                      f"{self.window.describe()}: sent with {self.ladder[level].note} ({prompt:,} tokens)")
            self.level = level
        self.room_limited = budget < self.wanted
        return budget

    def refused(self, refused: ContextExceeded) -> None:
        """The server refused the last request as too long: learn its numbers, so the next one fits."""
        self._refusals += 1
        window = self.window or ContextWindow()
        self.window = window
        known = window.tokens
        window.learn(refused.context, "the server's refusal")
        if refused.prompt_tokens:
            window.counter.recount(self._prompt_tokens(self.level), refused.prompt_tokens)
        elif known == refused.context:  # the count was too low, and the server did not say by how much
            window.counter.surprised()
        self.note(f"the server refused a request as longer than its {refused.context:,}-token context"
                  + (f" (its count of the prompt: {refused.prompt_tokens:,} tokens)" if refused.prompt_tokens else "")
                  + "; fitted again")
        if self._refusals > MAX_REFUSALS:
            raise ContextTooSmall(f"{self.tag}: the server refused {self._refusals} requests as longer than its "
                                  f"{refused.context:,}-token context, each fitted by its own numbers: {refused}")

    def more_room(self, reply: Any, budget: int) -> bool:
        """After an answer cut at `budget`: whether a request with more room for the answer is to be sent (a
        larger budget, or a smaller form of the prompt); never the same request again."""
        out = reply.usage.output_tokens
        below = {"": budget, "tokenizer": budget * 0.9}.get(reply.counted, budget / 2)  # a count's own error
        if self.window is not None and 0 < out < below:
            self.window.output_cap = out
            self.room_limited = True
            self.note(f"the server cut the answer at {out:,} output tokens, below the {budget:,} asked for: its own "
                      f"limit; later requests ask for at most that")
            return self._bigger(budget)
        if not self.room_limited and self.wanted < self.ceiling:
            self.wanted = min(self.wanted * 2, self.ceiling)
        return self._bigger(budget)

    def _bigger(self, budget: int) -> bool:
        """Whether a next request (this form, else a smaller one) gives the answer more than `budget` (by
        MORE_ROOM at least); if so, the next request is the first form that gives it what it wants, else the
        first that gives it nearly the most room any form gives (each cut answer is paid for)."""
        if self.window is None or self.window.tokens is None:
            return self.wanted > budget
        plans: list[tuple[int, int]] = []  # (form, budget) of each next request that gives more room
        for start in range(self.level, len(self.ladder)):
            try:
                level, _, next_budget = self._plan(start)
            except ContextTooSmall:
                break
            if next_budget >= budget * MORE_ROOM and (level, next_budget, len(self.tail)) not in self._sent:
                plans.append((level, next_budget))
        if not plans:
            return False
        most = max(b for _, b in plans)
        self.start = next(level for level, b in plans if b >= min(self.wanted, most * NEARLY))
        return True
