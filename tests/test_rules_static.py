"""The guards: each rule fires on a small mutation of the reference generated set, and only then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SOURCE_OF_TRUTH
from orchestrator.rules.static import (
    Violation,
    check_all,
    check_folder,
    check_protected,
    check_syntax,
    check_train,
    unfilled_reason,
)
from orchestrator.sources.template import TemplateError, read_sections, read_template

TEMPLATE = (SOURCE_OF_TRUTH / "grpo_template.py").read_text()
GENERIC_START = "# === GENERIC — DO NOT MODIFY ==="
CUSTOMIZE_START = "# === CUSTOMIZE ==="
CUSTOMIZE_END = "# === END CUSTOMIZE ==="
GENERIC_END = "# === END GENERIC ==="


def mutate(folder: Path, name: str, old: str, new: str) -> None:
    path = folder / name
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {name}"
    path.write_text(text.replace(old, new))


def line_of(folder: Path, name: str, needle: str) -> int:
    lines = (folder / name).read_text().split("\n")
    return next(i for i, line in enumerate(lines, start=1) if needle in line)


def check(folder: Path, **kwargs) -> list[Violation]:
    return check_folder(folder, SOURCE_OF_TRUTH, **kwargs)


def rules(violations: list[Violation]) -> list[str]:
    return [v.rule for v in violations]


# ---------------------------------------------------------------- the reference set and reading templates

def test_reference_set_passes(generated_dir: Path) -> None:
    assert check(generated_dir) == []


def test_read_template_on_the_stand_in() -> None:
    sections = read_template(TEMPLATE)
    assert [s.kind for s in sections] == ["generic"] + ["customize"] * 6 + ["generic"]
    lines = TEMPLATE.split("\n")
    assert all(lines[s.start_line - 1] == s.marker for s in sections)
    assert sections[0].text.startswith("from __future__ import annotations\n")
    assert sections[1].text.startswith("# Imports:")


def test_start_markers_only_a_section_runs_to_the_next_marker() -> None:
    text = (f"doc\n{GENERIC_START}\nA = 1\n{CUSTOMIZE_START}\n    def f(self):\n        pass\n"
            f"{GENERIC_START}\nB = 2\n")
    assert [(s.kind, s.start_line, s.text) for s in read_sections(text)] == [
        ("generic", 2, "A = 1\n"), ("customize", 4, "    def f(self):\n        pass\n"), ("generic", 7, "B = 2\n")]


def test_indented_and_loosely_spelled_markers_are_markers() -> None:
    text = "class P:\n    # ==== CUSTOMISE ====\n    x = 1\n    # == Generic - do not modify ==\n    y = 2\n"
    assert [(s.kind, s.marker) for s in read_sections(text)] == [
        ("customize", "    # ==== CUSTOMISE ===="), ("generic", "    # == Generic - do not modify ==")]


def test_banner_comments_are_not_markers() -> None:
    assert read_sections("# ===== helpers =====\nx = 1\n") == []


def test_end_marker_closing_nothing_is_a_one_line_error() -> None:
    with pytest.raises(TemplateError, match="line 2: .*closes no open section") as error:
        read_sections(f"x = 1\n{GENERIC_END}\n")
    assert error.value.line == 2 and "\n" not in str(error.value)


def test_template_without_customize_section_is_bad_input() -> None:
    with pytest.raises(TemplateError, match="no '# === CUSTOMIZE ===' line"):
        read_template(f"{GENERIC_START}\nx = 1\n")


def test_untouched_template_as_train_has_every_hole_unfilled(generated_dir: Path) -> None:
    shutil.copy(SOURCE_OF_TRUTH / "grpo_template.py", generated_dir / "train.py")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-hole-unfilled"] * 6 + ["dispatch-bypasses-helpers"]
    assert "holds no code" in violations[0].message  # the imports hole is comments only
    violations = violations[:6]
    assert all("still the template's text" in v.message for v in violations[1:])


PLACEHOLDER_FUNCTION = "def f(x):\n    \"\"\"Doc.\"\"\"\n    raise NotImplementedError\n"


@pytest.mark.parametrize("hole, reason", [
    ("", "holds no code"),
    ("# to do\n", "holds no code"),
    ("pass\n", "only placeholder"),
    ("...\n", "only placeholder"),
    (PLACEHOLDER_FUNCTION, "f() still has a placeholder body"),
    ("class A:\n    def m(self):\n        ...\n", "m() still has a placeholder body"),
])
def test_unfilled_hole_detected_generically(hole: str, reason: str) -> None:
    assert reason in unfilled_reason(hole, "ANSWER = None\n")


def test_filled_hole_and_indented_hole() -> None:
    assert unfilled_reason("ANSWER = 42\n", "ANSWER = None\n") is None
    assert unfilled_reason("    def m(self):\n        return 1\n", "    def m(self):\n        pass\n") is None
    assert "template's text" in unfilled_reason("ANSWER = (0)  # same\n", "# fill me\nANSWER = 0\n")


def test_violation_str() -> None:
    assert str(Violation("syntax-error", "helpers.py", 3, "fix it")) == "syntax-error helpers.py:3: fix it"
    assert str(Violation("file-missing", "train.py", None, "write it")) == "file-missing train.py: write it"
    assert str(Violation("x", "train.py", None, "look", "warning")) == "warning x train.py: look"


# ---------------------------------------------------------------- file-missing, syntax-error

def test_missing_file(generated_dir: Path) -> None:
    (generated_dir / "launch_training.sh").unlink()
    violations = check(generated_dir)
    assert [(v.rule, v.file) for v in violations] == [("file-missing", "launch_training.sh")]


def test_missing_helpers_skips_the_prompt_rules_that_read_it(generated_dir: Path) -> None:
    (generated_dir / "helpers.py").unlink()
    assert [(v.rule, v.file) for v in check(generated_dir)] == [("file-missing", "helpers.py")]


def test_syntax_error_is_one_violation_without_cascade(generated_dir: Path) -> None:
    signature = "def stay(env: CleanupEnv, agent_id: int)"
    mutate(generated_dir, "helpers.py", signature, signature[:-1])
    violations = check(generated_dir)
    assert [(v.rule, v.file) for v in violations] == [("syntax-error", "helpers.py")]
    assert violations[0].line == line_of(generated_dir, "helpers.py", "def stay(")
    assert "\n" not in violations[0].message


def test_syntax_error_in_train(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "    return reward\n", "    return reward +\n")
    assert [(v.rule, v.file) for v in check(generated_dir)] == [("syntax-error", "train.py")]


def test_check_syntax_runs_nothing_for_shell_scripts() -> None:
    assert check_syntax("launch_training.sh", "if then fi (((") == []


# ---------------------------------------------------------------- protected files, config

@pytest.mark.parametrize("name", ["env_move.py", "grpo_template.py"])
def test_protected_file_changed_by_one_byte(generated_dir: Path, name: str) -> None:
    path = generated_dir / name
    data = bytearray(path.read_bytes())
    position = data.index(b"import")
    data[position] = ord("I")
    path.write_bytes(bytes(data))
    violations = check(generated_dir)
    assert [(v.rule, v.file) for v in violations] == [("protected-file-changed", name)]
    assert violations[0].line == data[:position].count(b"\n") + 1


def test_protected_file_with_crlf_newlines_is_changed(generated_dir: Path) -> None:
    path = generated_dir / "env_move.py"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert rules(check(generated_dir)) == ["protected-file-changed"]


def test_check_protected_compares_as_given() -> None:
    assert check_protected("env_move.py", "a\nb\n", "a\nb\n") == []
    assert [v.line for v in check_protected("env_move.py", "a\nb\n", "a\nb")] == [2]


def test_config_renamed_field_names_both(generated_dir: Path) -> None:
    mutate(generated_dir, "grpo_config.py", "    model_name: str =", "    model_id: str =")
    violations = check(generated_dir)
    assert rules(violations) == ["config-fields-changed"]
    assert "'model_id'" in violations[0].message and "'model_name'" in violations[0].message
    assert violations[0].line == line_of(generated_dir, "grpo_config.py", "model_id: str")


def test_config_changed_value_is_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "grpo_config.py", "group_size: int = 8", "group_size: int = 4")
    assert check(generated_dir) == []


def test_config_class_missing(generated_dir: Path) -> None:
    mutate(generated_dir, "grpo_config.py", "class GRPOConfig:", "class Config:")
    assert rules(check(generated_dir)) == ["config-class-missing"]


# ---------------------------------------------------------------- train.py

def test_changed_generic_line_shows_a_diff(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "ADVANTAGE_EPS = 1e-4", "ADVANTAGE_EPS = 1e-3")
    violations = check(generated_dir)
    assert rules(violations) == ["generic-section-changed"]
    assert violations[0].line == line_of(generated_dir, "train.py", "ADVANTAGE_EPS = 1e-3")
    message = violations[0].message
    assert "2nd GENERIC section" in message and "restore it exactly from grpo_template.py" in message
    assert "-ADVANTAGE_EPS = 1e-4" in message and "+ADVANTAGE_EPS = 1e-3" in message


def test_change_past_column_80_is_visible_in_the_diff(generated_dir: Path) -> None:
    generic = "".join(s.text for s in read_template(TEMPLATE) if s.kind == "generic")
    line = next(l for l in generic.split("\n") if len(l) > 100 and l.rstrip().endswith(")"))
    mutate(generated_dir, "train.py", line, line[:-1] + " )")
    message = check(generated_dir)[0].message
    assert f"+{line[:-1]} )" in message and f"-{line}" in message


def test_removed_generic_section(generated_dir: Path) -> None:
    train = (generated_dir / "train.py").read_text()
    start = train.index(f"\n{GENERIC_START}\n") + 1  # the docstring quotes the marker too
    end = train.index(GENERIC_END) + len(GENERIC_END) + 1
    (generated_dir / "train.py").write_text(train[:start] + train[end:])
    violations = check(generated_dir)
    assert rules(violations) == ["sections-changed"]
    assert "GENERIC@" in violations[0].message


def test_end_markers_are_optional(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", f"    return reward\n{CUSTOMIZE_END}\n", "    return reward\n")
    assert check(generated_dir) == []


def test_misspelled_marker_is_a_violation(generated_dir: Path) -> None:
    train = (generated_dir / "train.py").read_text()
    (generated_dir / "train.py").write_text(
        train.replace(f"\n{GENERIC_START}\n", "\n# === GENERIC - DO NOT MODIFY ===\n", 1))
    violations = check(generated_dir)
    assert rules(violations) == ["markers-broken"] and violations[0].line == line_of(
        generated_dir, "train.py", "# === GENERIC - DO NOT MODIFY ===")
    assert GENERIC_START in violations[0].message


def test_emptied_hole_is_unfilled(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "    return reward\n", "")
    mutate(generated_dir, "train.py", "def shape_reward(reward: float, info: dict, agent_id: int) -> float:\n",
           "# nothing yet\n")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-hole-unfilled"]
    assert "6th CUSTOMIZE section" in violations[0].message and "holds no code" in violations[0].message


def test_placeholder_body_is_unfilled(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "    return reward\n", "    raise NotImplementedError('shape_reward')\n")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-hole-unfilled"]
    assert "shape_reward() still has a placeholder body" in violations[0].message


def test_hole_equal_to_the_template_code_is_unfilled() -> None:
    template = f"{CUSTOMIZE_START}\n# the answer.\nANSWER = 0\n{CUSTOMIZE_END}\n"
    same_code = template.replace("ANSWER = 0\n", "# still to do\nANSWER = (0)  # placeholder\n")
    assert rules(check_train(same_code, template)) == ["customize-hole-unfilled"]
    assert check_train(template.replace("ANSWER = 0", "ANSWER = 42"), template) == []


def test_code_after_the_last_generic_section_is_a_warning(generated_dir: Path) -> None:
    with (generated_dir / "train.py").open("a") as fh:
        fh.write("\ndef grpo_token_loss(*args):\n    return 0\n")
    violations = check(generated_dir)
    assert rules(violations) == ["outside-sections-changed"] and violations[0].severity == "warning"
    assert violations[0].line == line_of(generated_dir, "train.py", "def grpo_token_loss(*args)")


# ---------------------------------------------------------------- prompt_template.py

def test_menu_entry_not_in_helpers_lists_the_helpers(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", '    "stay": "{} - do nothing",\n',
           '    "stay": "{} - do nothing",\n    "fly": "{} - take off",\n')
    violations = check(generated_dir)
    assert rules(violations) == ["unknown-action"]
    assert "'fly'" in violations[0].message and "clean_nearest_dirt, collect_nearest_apple" in violations[0].message
    assert violations[0].line == line_of(generated_dir, "prompt_template.py", '"fly"')


def test_json_example_naming_no_helper(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", '{"action": "move_to", "agent_id": %d', '{"action": "walk_to", "agent_id": %d')
    violations = check(generated_dir)
    assert rules(violations) == ["unknown-action"] and "'walk_to'" in violations[0].message


def test_observation_to_text_is_not_an_action(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", '    "stay": "{} - do nothing",\n',
           '    "stay": "{} - do nothing",\n    "observation_to_text": "{}",\n')
    assert rules(check(generated_dir)) == ["unknown-action"]


def test_prompt_builder_missing(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "def create_single_stage_prompt(", "def create_action_prompt(")
    violations = check(generated_dir)
    assert rules(violations) == ["prompt-builder-missing"] and "create_single_stage_prompt" in violations[0].message


def test_prompt_builder_wrong_parameters(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "thinking_response: str, agent_id: int)", "agent_id: int)")
    violations = check(generated_dir)
    assert rules(violations) == ["prompt-builder-signature"]
    assert violations[0].line == line_of(generated_dir, "prompt_template.py", "def create_single_stage_prompt(")


def test_prompt_builder_renamed_parameters_are_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "def create_thinking_prompt(obs_text: str, agent_id: int)",
           "def create_thinking_prompt(observation: str, agent: int, turn: int = 0)")
    mutate(generated_dir, "prompt_template.py", "    user = (f\"{obs_text}", "    obs_text, agent_id = observation, agent\n    user = (f\"{obs_text}")
    assert check(generated_dir) == []


def test_prompt_builder_return_annotation(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "agent_id: int) -> list[dict[str, str]]:\n    user", "agent_id: int) -> str:\n    user")
    violations = check(generated_dir)
    assert rules(violations) == ["prompt-builder-signature"] and "'str'" in violations[0].message


def test_prompt_builder_alias_annotation_is_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "agent_id: int) -> list[dict[str, str]]:\n    user", "agent_id: int) -> Messages:\n    user")
    mutate(generated_dir, "prompt_template.py", "HELPER_CALLS = {", "Messages = list[dict[str, str]]\nHELPER_CALLS = {")
    assert check(generated_dir) == []


# ---------------------------------------------------------------- helpers.py

def test_helper_calling_helper(generated_dir: Path) -> None:
    docstring = '    """Fire the cleaning beam in the direction the agent faces; True when it hits dirt."""\n'
    mutate(generated_dir, "helpers.py", docstring, docstring + "    stay(env, agent_id)\n")
    violations = check(generated_dir)
    assert rules(violations) == ["helper-calls-helper"]
    assert violations[0].line == line_of(generated_dir, "helpers.py", "    stay(env, agent_id)")
    assert "clean" in violations[0].message and "stay()" in violations[0].message


def test_helper_calling_observation_to_text(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", '    """Do nothing this turn (always completed)."""\n',
           '    """Do nothing this turn (always completed)."""\n    observation_to_text(env, agent_id)\n')
    assert rules(check(generated_dir)) == ["helper-calls-helper"]


def test_helper_calling_private_function_is_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", '    """Do nothing this turn (always completed)."""\n',
           '    """Do nothing this turn (always completed)."""\n    _distance((0, 0), (1, 1))\n')
    assert check(generated_dir) == []


def test_private_function_calling_public_helper(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "    return abs(a[0] - b[0]) + abs(a[1] - b[1])",
           "    stay(None, 0)\n    return abs(a[0] - b[0]) + abs(a[1] - b[1])")
    violations = check(generated_dir)
    assert rules(violations) == ["helper-calls-helper"] and "private function _distance" in violations[0].message


@pytest.mark.parametrize("old, new", [
    ("def stay(env: CleanupEnv, agent_id: int) -> bool", "def stay(env: CleanupEnv, agent_id: int, *rest) -> bool"),
    ("def stay(env: CleanupEnv, agent_id: int) -> bool", "def stay(env: CleanupEnv) -> bool"),
    ("def stay(env: CleanupEnv, agent_id: int) -> bool", "def stay(env: CleanupEnv, agent_id: int) -> str"),
    ("agent_id: int, direction: str)", "agent_id: int, direction: str, /)"),
])
def test_helper_signature(generated_dir: Path, old: str, new: str) -> None:
    mutate(generated_dir, "helpers.py", old, new)
    violations = check(generated_dir)
    assert rules(violations) == ["helper-signature"]
    assert violations[0].line == line_of(generated_dir, "helpers.py", new)


def test_helper_keyword_only_and_renamed_parameters_are_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "def move_to(env: CleanupEnv, agent_id: int, coord_x: int, coord_y: int)",
           "def move_to(env: CleanupEnv, agent_id: int, *, coord_x: int, coord_y: int, **extra)")
    mutate(generated_dir, "helpers.py", "def stay(env: CleanupEnv, agent_id: int) -> bool:",
           "def stay(game: CleanupEnv, agent: int) -> bool:\n    env, agent_id = game, agent")
    assert check(generated_dir) == []


def test_observation_to_text_missing(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "def observation_to_text(env: CleanupEnv, agent_id: int) -> str:",
           "def _describe(env: CleanupEnv, agent_id: int) -> str:")
    assert rules(check(generated_dir)) == ["observation-to-text-missing"]


def test_observation_to_text_wrong_parameters(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "def observation_to_text(env: CleanupEnv, agent_id: int)",
           "def observation_to_text(env: CleanupEnv, agent_id: int, verbose: bool)")
    assert rules(check(generated_dir)) == ["helper-signature"]


# ---------------------------------------------------------------- only, check_all

def test_only_helpers_after_step_one(tmp_path: Path) -> None:
    shutil.copy(SOURCE_OF_TRUTH.parent / "examples/cleanup/reference_generated/helpers.py", tmp_path / "helpers.py")
    assert check(tmp_path, only=["helpers.py"]) == []
    mutate(tmp_path, "helpers.py", "def observation_to_text(", "def describe(")
    assert rules(check(tmp_path, only=["helpers.py"])) == ["observation-to-text-missing", "helper-signature"]


def test_only_prompt_template_needs_helpers(generated_dir: Path) -> None:
    (generated_dir / "helpers.py").unlink()
    (generated_dir / "train.py").unlink()
    assert [(v.rule, v.file) for v in check(generated_dir, only=["prompt_template.py"])] == [
        ("file-missing", "helpers.py")]


def test_check_all_rejects_unknown_names_in_only() -> None:
    with pytest.raises(ValueError, match="unknown file"):
        check_all({}, {}, only=["nope.py"])


def test_a_docstring_that_shows_the_markers_holds_no_marker() -> None:
    text = f'"""How to fill it:\n{CUSTOMIZE_START}\n"""\n{GENERIC_START} (keep)\nx = 1\n# === CUSTOMIZE: reward ===\ny = 2\n'
    assert [(s.kind, s.start_line, s.text) for s in read_sections(text)] == [
        ("generic", 4, "x = 1\n"), ("customize", 6, "y = 2\n")]
