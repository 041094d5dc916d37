"""ask(): an answer cut at its token budget is never parsed or applied; it is asked again with more room."""

from __future__ import annotations

from orchestrator.asking import MAX_ANSWER_TOKENS, ask
from orchestrator.llm import Reply, Usage

USER = [{"role": "user", "content": "edit train.py"}]


class Scripted:
    """Answers (text, stop_reason) in turn and records the budgets asked for."""

    def __init__(self, *answers: tuple[str, str]) -> None:
        self.answers, self.budgets = list(answers), []

    def complete(self, messages, *, system="", max_tokens=8192, cache_prefix=None, tag=""):
        self.budgets.append(max_tokens)
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
    llm = Scripted(("block 1 REPLACE block 2 REPLACE", "max_tokens"),
                   ("block 1 REPLACE block 2 REPLACE", "max_tokens"))
    answer = ask(llm, USER, parse_two_blocks, system="s", tag="fix", max_tokens=MAX_ANSWER_TOKENS // 2)

    assert answer.parsed is None and "max_tokens" in answer.error and "not applied" in answer.error
    assert llm.budgets == [MAX_ANSWER_TOKENS // 2, MAX_ANSWER_TOKENS]
