"""Step 3's answer format: the CUSTOMIZE sections only, spliced into the template (strings in, strings out)."""

from pathlib import Path

import pytest

from orchestrator.llm.edits import EditFormatError, parse_files, parse_sections, sections_answer
from orchestrator.rules.static import check_train
from orchestrator.sources.template import holes, read_sections

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "cleanup": (ROOT / "source_of_truth/grpo_template.py", ROOT / "examples/cleanup/reference_generated/train.py"),
    "staghunt": (ROOT / "examples/staghunt/source_of_truth/grpo_template.py",
                 ROOT / "examples/staghunt/reference_generated/train.py"),
    "spread": (ROOT / "examples/spread/source_of_truth/grpo_template.py",
               ROOT / "examples/spread/reference_generated/train.py"),
}
TEMPLATE = """\
import os
# === GENERIC — DO NOT MODIFY ===
def generic():
    return make()


# === CUSTOMIZE ===
def make():
    raise NotImplementedError


# === GENERIC — DO NOT MODIFY ===
class Box:
    def __init__(self):
        self.value = 1

    # === CUSTOMIZE ===
    def size(self):
        raise NotImplementedError

    # === GENERIC — DO NOT MODIFY ===
    def twice(self):
        return 2 * self.size()
"""


def answer(*blocks: tuple[str, str]) -> str:
    return "\n".join(f"{label}\n```python\n{code}```\n" for label, code in blocks)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_sections_of_a_reference_train_py_rebuild_it_byte_for_byte(name):
    template, train = (path.read_text() for path in EXAMPLES[name])
    sent = sections_answer(train)
    assert parse_sections(sent, template) == train
    assert len(sent) < len(train) / 3  # the answer is the holes, not the template


def test_the_train_py_is_the_template_outside_the_holes_whatever_the_code():
    built = parse_sections(answer(("CUSTOMIZE 1: # === CUSTOMIZE ===", "def make():\n    return 3\n"),
                                  ("CUSTOMIZE 2: # === CUSTOMIZE ===", "    def size(self):\n        return 4\n")),
                           TEMPLATE)
    assert built == TEMPLATE.replace("    raise NotImplementedError", "    return 3", 1) \
        .replace("        raise NotImplementedError", "        return 4")
    assert check_train(built, TEMPLATE) == []


def test_a_hole_inside_a_class_written_at_column_0_is_indented_as_its_marker():
    built = parse_sections(answer(("CUSTOMIZE 1:", "def make():\n    return Box()\n"),
                                  ("CUSTOMIZE 2:", "def size(self):\n    return 4\n")), TEMPLATE)
    namespace: dict = {}
    exec(compile(built, "train.py", "exec"), namespace)
    assert namespace["generic"]().twice() == 8


def test_a_section_named_as_the_prompt_lists_it_is_taken():
    listed = "CUSTOMIZE 2: `# === CUSTOMIZE ===`   (grpo_template.py line 17, indented 4 spaces)"
    built = parse_sections(answer(("**CUSTOMIZE 1**", "def make():\n    return 3\n"),
                                  (listed, "    def size(self):\n        return 4\n")), TEMPLATE)
    assert "        return 4\n" in built


def test_a_repeated_marker_line_and_an_end_marker_around_the_code_are_dropped():
    code = "# === CUSTOMIZE ===\ndef make():\n    return 3\n# === END CUSTOMIZE ===\n"
    built = parse_sections(answer(("CUSTOMIZE 1: # === CUSTOMIZE ===", code),
                                  ("CUSTOMIZE 2: # === CUSTOMIZE ===", "    def size(self):\n        return 4\n")),
                           TEMPLATE)
    assert [s.kind for s in read_sections(built)] == [s.kind for s in read_sections(TEMPLATE)]
    assert holes(read_sections(built))[0].text == "def make():\n    return 3\n\n\n"


def test_a_missing_a_duplicated_and_a_misnamed_section_are_named_at_once_with_the_exact_list():
    sent = answer(("CUSTOMIZE 1: # === CUSTOMIZE ===", "def make():\n    return 3\n"),
                  ("CUSTOMIZE 1: # === CUSTOMIZE ===", "def make():\n    return 4\n"),
                  ("CUSTOMIZE 3: # === CUSTOMIZE ===", "x = 1\n"))
    with pytest.raises(EditFormatError) as error:
        parse_sections(sent, TEMPLATE)
    message = str(error.value)
    assert message.startswith("3 format error(s)")
    assert "CUSTOMIZE 1 is sent twice (lines 1 and 7)" in message
    assert "`CUSTOMIZE 3: # === CUSTOMIZE ===` names no CUSTOMIZE section of the template" in message
    assert "CUSTOMIZE 2 is missing" in message
    assert "CUSTOMIZE 2: # === CUSTOMIZE ===   (grpo_template.py line 17, indented 4 spaces" in message


def test_generic_code_sent_inside_a_section_is_refused():
    code = "def make():\n    return 3\n\n\n# === GENERIC — DO NOT MODIFY ===\nclass Box:\n    pass\n"
    with pytest.raises(EditFormatError, match=r"the code of CUSTOMIZE 1 holds the marker line `# === GENERIC"):
        parse_sections(answer(("CUSTOMIZE 1:", code), ("CUSTOMIZE 2:", "    def size(self):\n        return 4\n")),
                       TEMPLATE)


def test_a_marker_line_quoted_in_a_string_of_the_code_is_code():
    code = 'def make():\n    return """\n# === GENERIC ===\n"""\n'
    built = parse_sections(answer(("CUSTOMIZE 1:", code), ("CUSTOMIZE 2:", "    def size(self):\n        return 4\n")),
                           TEMPLATE)
    assert '# === GENERIC ===\n"""' in built


def test_every_problem_of_a_whole_file_answer_is_named_at_once():
    sent = "FILE: helpers.py\nHere it is:\n```python\nx = 1\n```\nFILE: helpers.py\n```\ny = 2\n```\n```\nz\n```\n"
    with pytest.raises(EditFormatError) as error:
        parse_files(sent)
    message = str(error.value)
    assert message.startswith("3 format error(s)")
    assert "Line 1: `FILE: helpers.py` must be followed directly by the code fence" in message
    assert "Line 6: helpers.py is sent twice" in message
    assert "Line 10: this code fence has no `FILE: path` line before it" in message


def test_a_researchers_own_marker_spelling_names_the_section():
    template = ("#==== GENERIC - do not modify ====\nimport math\n#==== CUSTOMISE: reward shaping ====\n"
                "def shape(r):\n    raise NotImplementedError\n#==== END CUSTOMISE ====\n\n"
                "#==== GENERIC - do not modify ====\nprint(shape(math.pi))\n")
    sent = answer(("CUSTOMIZE 1: #==== CUSTOMISE: reward shaping ====", "def shape(r):\n    return round(r)\n"))
    built = parse_sections(sent, template)
    assert built == template.replace("    raise NotImplementedError", "    return round(r)")
    with pytest.raises(EditFormatError, match="names the marker line `# === CUSTOMIZE ===`"):
        parse_sections(answer(("CUSTOMIZE 1: # === CUSTOMIZE ===", "def shape(r):\n    return 1\n")), template)


def test_a_sketch_fence_in_the_prose_is_no_problem_while_every_section_is_there_and_named_when_one_is_missing():
    sections = answer(("CUSTOMIZE 1: # === CUSTOMIZE ===", "def make():\n    return 3\n"),
                      ("CUSTOMIZE 2: # === CUSTOMIZE ===", "def size(self):\n    return 4\n"))
    sketch = "First a sketch:\n```python\ndef make(): ...\n```\n"
    assert parse_sections(sketch + sections, TEMPLATE) == parse_sections(sections, TEMPLATE)

    with pytest.raises(EditFormatError) as error:
        parse_sections(sketch + sections.split("CUSTOMIZE 2:")[0], TEMPLATE)
    assert "Line 2: this code fence has no `CUSTOMIZE N: marker line` line before it." in str(error.value)
    assert "CUSTOMIZE 2 is missing from the answer" in str(error.value)
