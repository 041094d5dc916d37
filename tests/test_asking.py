"""ask(): an answer cut at its token budget is never parsed or applied; it is asked again with more room, and
once more, to be shorter, when it was cut at the most the backend allows."""

from __future__ import annotations

from orchestrator.llm.asking import MAX_ANSWER_TOKENS, ask
from orchestrator.llm import Reply, Usage

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
