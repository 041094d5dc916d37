"""ask(): an answer cut at its token budget is never parsed or applied; it is asked again with more room, and
once more, to be shorter, when it was cut at the most the backend allows. Against a server's context: every
budget is the room the prompt leaves, a prompt too long goes in a smaller form, a refusal teaches the numbers,
a server's own cut is its limit; tool calls and answers of reasoning only are named."""

from __future__ import annotations

import pytest

from orchestrator.llm import Reply, Usage
from orchestrator.llm.asking import MAX_ANSWER_TOKENS, ask
from orchestrator.llm.context import ContextExceeded, ContextTooSmall, ContextWindow, TokenCounter
from orchestrator.llm.fitting import Form

USER = [{"role": "user", "content": "edit train.py"}]


class Scripted:
    """Answers (text, stop_reason) in turn and records the budgets and conversations asked with."""

    def __init__(self, *answers: tuple[str, str], max_output_tokens: int = MAX_ANSWER_TOKENS) -> None:
        self.answers, self.budgets, self.conversations = list(answers), [], []
        self.max_output_tokens = max_output_tokens

    def complete(self, messages, *, system="", max_tokens=8192, cache_prefix=None, tag=""):
        self.budgets.append(max_tokens)
        self.conversations.append(list(messages))
        text, stop = self.answers.pop(0)
        return Reply(text, Usage(10, 5), 0.001, "m", stop_reason=stop)


def parse_two_blocks(text: str) -> str:
    if text.count("REPLACE") != 2:
        raise ValueError("two blocks expected")
    return text


def test_an_answer_cut_at_max_tokens_is_asked_again_with_a_larger_budget():
    llm = Scripted(("block 1 REPLACE", "max_tokens"), ("block 1 REPLACE block 2 REPLACE", "end_turn"))
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=16000)

    assert answer.parsed == "block 1 REPLACE block 2 REPLACE"
    assert llm.budgets == [16000, 32000]
    assert answer.calls == 2 and answer.usage == Usage(20, 10)  # the cut answer was paid for too


def test_a_cut_answer_that_would_parse_is_still_not_applied():
    # one complete-looking block; the second was cut off: parse() would accept the text as it stands
    llm = Scripted(*[("block 1 REPLACE block 2 REPLACE", "max_tokens")] * 3)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=MAX_ANSWER_TOKENS // 2)

    assert answer.parsed is None and answer.calls == 3
    assert answer.error == (f"the answer was cut at its budget of {MAX_ANSWER_TOKENS} output tokens (stop_reason "
                            "max_tokens) and is incomplete; it was not applied")
    assert llm.budgets == [MAX_ANSWER_TOKENS // 2, MAX_ANSWER_TOKENS, MAX_ANSWER_TOKENS]


def test_a_backend_that_allows_less_sets_the_ceiling_and_a_cut_answer_there_is_asked_to_be_shorter():
    llm = Scripted(("block 1 REPLACE block", "max_tokens"), ("block 1 REPLACE block 2 REPLACE", "end_turn"),
                   max_output_tokens=300)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=16000)

    assert answer.parsed == "block 1 REPLACE block 2 REPLACE" and answer.error == ""
    assert llm.budgets == [300, 300]
    cut, told = llm.conversations[1][-2:]
    assert cut == {"role": "assistant", "content": "block 1 REPLACE block"}
    assert told["role"] == "user" and told["content"].startswith(
        "Your answer could not be used: the answer was cut at its budget of 300 output tokens")
    assert "It must fit in 300 output tokens" in told["content"]


def test_a_cut_answer_at_the_ceiling_uses_the_one_re_ask_a_malformed_answer_would():
    llm = Scripted(("block 1 REPLACE block", "max_tokens"), ("block 1 REPLACE block", "max_tokens"),
                   ("one block REPLACE", "end_turn"), max_output_tokens=300)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=200)

    assert llm.budgets == [200, 300, 300]
    assert answer.parsed is None and answer.error == "two blocks expected" and answer.calls == 3


# --------------------------------------------------------------------------- a server's context


class Windowed(Scripted):
    """A backend whose server has a context (counted by estimate: 1 token a character) and refuses past it."""

    def __init__(self, *answers, context: int | None = 1000, refuse_over: int | None = None, **kwargs) -> None:
        super().__init__(*answers, **kwargs)
        self.window = ContextWindow(TokenCounter())
        self.window.counter.tokens_per_char = 1.0
        if context:
            self.window.learn(context, "the test")
        self.refuse_over, self.prompts = refuse_over, []

    def complete(self, messages, *, system="", max_tokens=8192, cache_prefix=None, tag=""):
        prompt = self.window.counter.request(system, messages, cache_prefix or [])
        self.prompts.append((prompt, cache_prefix))
        if self.refuse_over and prompt + max_tokens > self.refuse_over:
            self.budgets.append(max_tokens)
            raise ContextExceeded("too long", self.refuse_over, prompt)
        return super().complete(messages, system=system, max_tokens=max_tokens, cache_prefix=cache_prefix, tag=tag)


def two_forms(big: int, small: int) -> dict:
    return {"cache_prefix": ["x" * big],
            "forms": lambda: [Form(USER, ["x" * big]), Form(USER, ["x" * small], "the file summarised")]}


def test_the_answer_budget_is_the_context_less_the_prompt_and_a_margin():
    llm = Windowed(("block 1 REPLACE block 2 REPLACE", "end_turn"), context=4000)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", cache_prefix=["x" * 1000], max_tokens=16000)

    prompt = llm.prompts[0][0]
    assert llm.budgets == [4000 - prompt - llm.window.counter.margin(prompt)] and answer.parsed


def test_a_prompt_that_leaves_too_little_room_is_sent_in_its_smaller_form_and_says_so():
    llm = Windowed(("block 1 REPLACE block 2 REPLACE", "end_turn"), context=2000)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=500, **two_forms(1900, 900))

    assert llm.prompts[0][1] == ["x" * 900] and llm.budgets == [500]
    assert answer.notes and "sent with the file summarised" in answer.notes[0]


def test_a_request_that_fits_in_no_form_is_one_line_with_the_numbers():
    llm = Windowed(context=2000)
    with pytest.raises(ContextTooSmall) as error:
        ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=500, **two_forms(1900, 1800))

    message = str(error.value)
    assert "\n" not in message and message.startswith("fix: the request does not fit the server's 2,000-token context")
    assert "prompt tokens even in its smallest form" in message and "needs at least 256" in message
    assert not llm.budgets  # nothing was sent


def test_a_refusal_teaches_the_context_and_the_prompt_s_size_and_the_next_request_differs():
    llm = Windowed(("block 1 REPLACE block 2 REPLACE", "end_turn"), context=None, refuse_over=3000)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", cache_prefix=["x" * 1000], max_tokens=16000)

    assert answer.parsed and llm.budgets[0] == 16000 and llm.budgets[1] < 3000 - 1000
    assert llm.window.tokens == 3000 and "refused a request as longer than its 3,000-token context" in answer.notes[0]


def test_an_answer_the_server_cut_below_its_budget_is_its_limit_and_never_asked_for_again_the_same_way():
    cut = Reply("half", Usage(10, 300), 0.0, "m", stop_reason="max_tokens")
    llm = Windowed(context=100000)
    llm.answers = [cut, Reply("block 1 REPLACE block 2 REPLACE", Usage(10, 5), 0.0, "m", stop_reason="end_turn")]
    llm.complete = _replying(llm)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=4000)

    assert llm.budgets == [4000, 300] and llm.window.output_cap == 300  # not 8,000: the server would cut it again
    assert "must fit in 300 output tokens" in llm.conversations[1][-1]["content"]
    assert answer.parsed and "its own limit" in answer.notes[0]


def test_with_can_split_an_answer_cut_by_the_server_s_room_comes_back_to_the_caller():
    cut = Reply("half", Usage(10, 300), 0.0, "m", stop_reason="max_tokens")
    llm = Windowed(context=100000)
    llm.answers = [cut]
    llm.complete = _replying(llm)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="generate_train", max_tokens=4000, can_split=True)

    assert answer.cut_short and answer.parsed is None and answer.calls == 1


def test_a_tool_call_is_named_and_not_asked_again():
    llm = Scripted()
    llm.answers = [Reply("", Usage(10, 5), 0.0, "m", stop_reason="tool_calls", tool_calls=("write_file",))]
    llm.complete = _replying(llm)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix")

    assert answer.calls == 1 and answer.parsed is None
    assert answer.error.startswith("the server returned a tool call (write_file) instead of a text answer")


def test_an_answer_of_reasoning_only_is_sent_back_to_write_the_answer_after_it():
    llm = Scripted()
    llm.answers = [Reply("", Usage(10, 5), 0.0, "m", stop_reason="end_turn", reasoning="I think two blocks"),
                   Reply("block 1 REPLACE block 2 REPLACE", Usage(10, 5), 0.0, "m", stop_reason="end_turn")]
    llm.complete = _replying(llm)
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix")

    assert answer.parsed and "held only reasoning" in llm.conversations[1][-1]["content"]


def _replying(llm):
    """complete() giving llm.answers (whole Replies) in turn, recording budgets and conversations."""
    def complete(messages, *, system="", max_tokens=8192, cache_prefix=None, tag=""):
        llm.budgets.append(max_tokens)
        llm.conversations.append(list(messages))
        return llm.answers.pop(0)
    return complete
