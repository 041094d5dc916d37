"""A prompt's smaller forms (orchestrator.llm.fitting), on the examples' own files; a reasoning model's thinking
taken out of its answer (orchestrator.llm.reasoning); a server's refusal for length read in its words; of a JSON
draft and its correction, the correction."""

from __future__ import annotations

import ast

import pytest
from conftest import REFERENCE, SOURCE_OF_TRUTH

from orchestrator.llm.context import context_refusal
from orchestrator.llm.fitting import forms, outline, summarise_generic
from orchestrator.llm.prompts import file_blocks
from orchestrator.llm.reasoning import split_reasoning
from orchestrator.sources.template import CUSTOMIZE, read_sections

USER = [{"role": "user", "content": "Step 3: fill the holes."}]
TEMPLATE = (SOURCE_OF_TRUTH / "grpo_template.py").read_text()
INPUTS = {"env_move.py": (SOURCE_OF_TRUTH / "env_move.py").read_text(),
          "grpo_config.py": (SOURCE_OF_TRUTH / "grpo_config.py").read_text(), "grpo_template.py": TEMPLATE,
          "helpers.py": (REFERENCE / "helpers.py").read_text(), "helper_readme.md": (REFERENCE / "helper_readme.md").read_text()}


def test_each_form_is_smaller_than_the_one_before_and_says_what_it_left_out():
    ladder = forms(USER, file_blocks(INPUTS), droppable=["helper_readme.md"])

    sizes = [sum(map(len, form.cache_prefix)) for form in ladder]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes) and sizes[-1] < sizes[0] / 3
    assert ladder[0].note == "" and all(form.note for form in ladder[1:])
    assert "left out: helper_readme.md" in ladder[-1].note
    assert not any("=== FILE: helper_readme.md" in block for block in ladder[-1].cache_prefix)
    said = next(block for block in ladder[1].cache_prefix if block.startswith("=== FILE: grpo_template.py"))
    assert said.startswith("=== FILE: grpo_template.py (GENERIC sections summarised; `...` marks lines not shown) ===")


@pytest.mark.parametrize("keep", ["touching", "signatures", "nothing"])
def test_a_summary_keeps_every_customize_section_and_marker_whole(keep: str):
    summary = summarise_generic(TEMPLATE, {"GRPOConfig"}, keep=keep)

    assert [s.text for s in read_sections(summary) if s.kind == CUSTOMIZE] == \
        [s.text for s in read_sections(TEMPLATE) if s.kind == CUSTOMIZE]
    assert [s.marker for s in read_sections(summary)] == [s.marker for s in read_sections(TEMPLATE)]
    assert "lines not shown" in summary and len(summary) < len(TEMPLATE) / 2


def test_an_outline_keeps_signatures_and_docstrings_and_never_a_file_the_answer_edits():
    short = outline(INPUTS["env_move.py"])
    assert "def " in short and '"""' in short and len(short) < len(INPUTS["env_move.py"]) / 2
    ast.parse(short)
    ladder = forms(USER, file_blocks({"helpers.py": INPUTS["helpers.py"], "env_move.py": INPUTS["env_move.py"]}),
                   whole=["helpers.py"])
    assert ladder[-1].cache_prefix[0] == file_blocks({"helpers.py": INPUTS["helpers.py"]})[0]


@pytest.mark.parametrize("answer, kept, reasoning", [
    ("<think>\ndraft {\"a\": 1}\n</think>\n\n```json\n{\"a\": 2}\n```\n", "```json\n{\"a\": 2}\n```\n",
     "draft {\"a\": 1}"),
    ("the template opened it\n</think>\nFILE: x.py\n", "FILE: x.py\n", "the template opened it"),
    ("<think>cut while thinking", "", "cut while thinking"),
    ("FILE: x.py\n```python\nreply = text.split(\"</think>\")[-1]\n<think>\n```\n",
     "FILE: x.py\n```python\nreply = text.split(\"</think>\")[-1]\n<think>\n```\n", ""),
    ("<thinking>a</thinking>\nanswer\n<think>b</think>\n", "answer\n", "a\n\nb"),
])
def test_reasoning_blocks_are_taken_out_and_code_that_names_the_tags_is_left_alone(answer, kept, reasoning):
    assert split_reasoning(answer) == (kept, reasoning)


@pytest.mark.parametrize("text, found", [
    ("This model's maximum context length is 32768 tokens. However, you requested 48213 tokens (32213 in the "
     "messages, 16000 in the completion). Please reduce the length of the messages or completion.", (32768, 32213)),
    ("'max_tokens' is too large: 16000. This model's maximum context length is 32768 tokens and your request has "
     "32213 input tokens (16000 > 32768 - 32213).", (32768, 32213)),
    ("The input (40000 tokens) is longer than the model's context length (32768 tokens).", (32768, 40000)),
    ("request (40000 tokens) exceeds the available context size (32768 tokens), try increasing it", (32768, 40000)),
    ("prompt is too long: 210000 tokens > 200000 maximum", (200000, 210000)),
    ("This model's maximum context length is 4096 tokens.", (4096, None)),
    ("invalid model name", None),
])
def test_a_refusal_for_length_is_read_in_each_server_s_words(text: str, found):
    assert context_refusal(text) == found


def test_of_a_draft_and_its_correction_the_answer_s_json_is_the_correction():
    from orchestrator.llm.json_answer import json_object

    answer = 'A first try:\n```json\n{"delivery": "config_file"}\n```\nNo: flags.\n```json\n{"delivery": "cli"}\n```\n'
    assert json_object(answer, "the roles") == {"delivery": "cli"}
    assert json_object('{"roles": {}}', "the roles") == {"roles": {}}
