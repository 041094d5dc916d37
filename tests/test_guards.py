"""The guards: each rule fires on a small mutation of the reference generated set, and only then."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SOURCE_OF_TRUTH
from orchestrator.guards import (
    CUSTOMIZE_END,
    CUSTOMIZE_START,
    GENERIC_END,
    GENERIC_START,
    MarkerError,
    Violation,
    check_all,
    check_folder,
    check_protected,
    check_syntax,
    check_train,
    extract_sections,
)

TEMPLATE = (SOURCE_OF_TRUTH / "grpo_template.py").read_text()
HOLES = ["imports", "make_env", "format_observation", "prompts", "actions", "reward"]


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


# ---------------------------------------------------------------- the reference set and the template

def test_reference_set_passes(generated_dir: Path) -> None:
    assert check(generated_dir) == []


def test_extract_sections_on_the_template() -> None:
    sections = extract_sections(TEMPLATE)
    generic = [s for s in sections if s.kind == "generic"]
    customize = [s for s in sections if s.kind == "customize"]
    assert [s.name for s in generic] == ["0", "1"]
    assert [s.name for s in customize] == HOLES
    lines = TEMPLATE.split("\n")
    assert all(lines[s.start_line - 1] == GENERIC_START for s in generic)
    assert all(lines[s.start_line - 1] == CUSTOMIZE_START for s in customize)
    assert generic[0].text.startswith("from __future__ import annotations\n")
    assert customize[0].text.startswith("# HOLE imports:")


def test_untouched_template_as_train_has_every_hole_unfilled(generated_dir: Path) -> None:
    shutil.copy(SOURCE_OF_TRUTH / "grpo_template.py", generated_dir / "train.py")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-hole-unfilled"] * len(HOLES)
    assert [v.message.split("'")[1] for v in violations] == HOLES
    make_env = violations[1]
    assert make_env.line == line_of(generated_dir, "train.py", 'NotImplementedError("CUSTOMIZE make_env")')
    assert "placeholder" in make_env.message
    assert "holds no code" in violations[0].message


def test_violation_str() -> None:
    assert str(Violation("syntax-error", "helpers.py", 3, "fix it")) == "syntax-error helpers.py:3: fix it"
    assert str(Violation("file-missing", "train.py", None, "write it")) == "file-missing train.py: write it"


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

def test_changed_generic_line_names_its_section(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "ADVANTAGE_EPS = 1e-4", "ADVANTAGE_EPS = 1e-3")
    violations = check(generated_dir)
    assert rules(violations) == ["generic-section-changed"]
    assert violations[0].line == line_of(generated_dir, "train.py", "ADVANTAGE_EPS = 1e-3")
    message = violations[0].message
    assert "2nd GENERIC section" in message and "'ADVANTAGE_EPS = 1e-4'" in message
    assert "restore it exactly from grpo_template.py" in message


def test_removed_generic_section(generated_dir: Path) -> None:
    train = (generated_dir / "train.py").read_text()
    start = train.index(f"\n{GENERIC_START}\n") + 1  # the docstring quotes the marker too
    end = train.index(GENERIC_END) + len(GENERIC_END) + 1
    (generated_dir / "train.py").write_text(train[:start] + train[end:])
    violations = check(generated_dir)
    assert rules(violations) == ["generic-section-changed"]
    assert "1 GENERIC sections" in violations[0].message and "1st GENERIC section" in violations[0].message


def test_unbalanced_markers_are_a_violation(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", f"    return reward\n{CUSTOMIZE_END}\n", "    return reward\n")
    violations = check(generated_dir)
    assert rules(violations) == ["markers-broken"]
    reward_start = line_of(generated_dir, "train.py", "# HOLE reward:") - 1
    assert violations[0].line == reward_start + 6  # the next start marker finds the section still open
    assert f"CUSTOMIZE section opened at line {reward_start}" in violations[0].message


def test_misspelled_marker_is_a_violation(generated_dir: Path) -> None:
    train = (generated_dir / "train.py").read_text()
    (generated_dir / "train.py").write_text(
        train.replace(f"\n{GENERIC_START}\n", "\n# === GENERIC - DO NOT MODIFY ===\n", 1))
    violations = check(generated_dir)
    assert rules(violations) == ["markers-broken"] and violations[0].line == line_of(
        generated_dir, "train.py", "# === GENERIC - DO NOT MODIFY ===")
    assert GENERIC_START in violations[0].message


@pytest.mark.parametrize("text, line, words", [
    (f"{CUSTOMIZE_START}\nx = 1\n", 1, "never closed"),
    (f"x = 1\n{GENERIC_END}\n", 2, "closes no open section"),
    (f"{CUSTOMIZE_START}\n{GENERIC_START}\n{GENERIC_END}\n{CUSTOMIZE_END}\n", 2, "inside the CUSTOMIZE section"),
    (f"{GENERIC_START}\nx = 1\n{CUSTOMIZE_END}\n", 3, "cannot close the GENERIC section"),
])
def test_extract_sections_rejects_broken_markers(text: str, line: int, words: str) -> None:
    with pytest.raises(ValueError, match=f"line {line}: .*{words}") as error:
        extract_sections(text)
    assert isinstance(error.value, MarkerError) and error.value.line == line


def test_emptied_hole_is_unfilled(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "    return reward\n", "")
    mutate(generated_dir, "train.py", "def shape_reward(reward: float, info: dict, agent_id: int) -> float:\n",
           "# nothing yet\n")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-hole-unfilled"]
    assert "'reward'" in violations[0].message and "holds no code" in violations[0].message


def test_partly_filled_hole_is_unfilled(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "    return reward\n",
           "    raise NotImplementedError('CUSTOMIZE shape_reward')\n")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-hole-unfilled"]
    assert violations[0].line == line_of(generated_dir, "train.py", "NotImplementedError('CUSTOMIZE")


def test_hole_equal_to_the_template_code_is_unfilled() -> None:
    template = f"{CUSTOMIZE_START}\n# HOLE answer: the answer.\nANSWER = 0\n{CUSTOMIZE_END}\n"
    same_code = template.replace("ANSWER = 0\n", "# still to do\nANSWER = (0)  # placeholder\n")
    assert rules(check_train(same_code, template)) == ["customize-hole-unfilled"]
    assert check_train(template.replace("ANSWER = 0", "ANSWER = 42"), template) == []


def test_customize_sections_out_of_order(generated_dir: Path) -> None:
    mutate(generated_dir, "train.py", "# HOLE reward:", "# HOLE rewards:")
    violations = check(generated_dir)
    assert rules(violations) == ["customize-sections-changed"]
    assert "rewards (line" in violations[0].message and "reward]" in violations[0].message


def test_code_after_the_last_generic_section(generated_dir: Path) -> None:
    with (generated_dir / "train.py").open("a") as fh:
        fh.write("\ndef grpo_token_loss(*args):\n    return 0\n")
    violations = check(generated_dir)
    assert rules(violations) == ["outside-sections-changed"]
    assert violations[0].line == line_of(generated_dir, "train.py", "def grpo_token_loss(*args)")


# ---------------------------------------------------------------- prompt_template.py

def test_action_name_not_in_helpers(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", '"clean", "stay"]', '"clean", "stay", "fly"]')
    violations = check(generated_dir)
    assert rules(violations) == ["unknown-action"]
    assert "'fly'" in violations[0].message
    assert violations[0].line == line_of(generated_dir, "prompt_template.py", "ACTION_NAMES = [")


def test_observation_to_text_is_not_an_action(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", '"clean", "stay"]', '"clean", "stay", "observation_to_text"]')
    violations = check(generated_dir)
    assert rules(violations) == ["unknown-action"] and "not an action helper" in violations[0].message


def test_action_names_missing_or_not_literal(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "ACTION_NAMES = [", "NAMES = [")
    assert rules(check(generated_dir, only=["prompt_template.py"]))[0] == "action-names-missing"
    mutate(generated_dir, "prompt_template.py", "NAMES = [", "ACTION_NAMES = list(ACTION_DOCS)\nNAMES = [")
    assert "action-names-invalid" in rules(check(generated_dir, only=["prompt_template.py"]))


def test_prompt_builder_missing(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "def build_action_prompt(", "def build_action_messages(")
    violations = check(generated_dir)
    assert rules(violations) == ["prompt-builder-missing"] and "build_action_prompt" in violations[0].message


def test_prompt_builder_wrong_parameters(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "agent_id: int, turn: int, thinking: str)",
           "agent_id: int, thinking: str)")
    violations = check(generated_dir)
    assert rules(violations) == ["prompt-builder-signature"]
    assert violations[0].line == line_of(generated_dir, "prompt_template.py", "def build_action_prompt(")


def test_prompt_builder_return_annotation(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "turn: int) -> list[dict]:", "turn: int) -> str:")
    violations = check(generated_dir)
    assert rules(violations) == ["prompt-builder-signature"] and "'str'" in violations[0].message


def test_prompt_builder_alias_annotation_is_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "prompt_template.py", "turn: int) -> list[dict]:", "turn: int) -> Messages:")
    mutate(generated_dir, "prompt_template.py", "ACTION_DOCS = {", "Messages = list[dict[str, str]]\nACTION_DOCS = {")
    assert check(generated_dir) == []


# ---------------------------------------------------------------- helpers.py

def test_helper_calling_helper(generated_dir: Path) -> None:
    docstring = '    """Fire the cleaning beam in the direction the agent faces."""\n'
    mutate(generated_dir, "helpers.py", docstring + '    return "CLEAN"',
           docstring + '    return stay(env, agent_id) and "CLEAN"')
    violations = check(generated_dir)
    assert rules(violations) == ["helper-calls-helper"]
    assert violations[0].line == line_of(generated_dir, "helpers.py", "return stay(env, agent_id)")
    assert "clean" in violations[0].message and "stay()" in violations[0].message


def test_helper_calling_observation_to_text(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", '    """Do nothing this turn."""\n',
           '    """Do nothing this turn."""\n    observation_to_text(env, agent_id)\n')
    assert rules(check(generated_dir)) == ["helper-calls-helper"]


def test_helper_calling_private_function_is_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", '    """Do nothing this turn."""\n',
           '    """Do nothing this turn."""\n    _distance((0, 0), (1, 1))\n')
    assert check(generated_dir) == []


def test_private_function_calling_public_helper(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "    return abs(a[0] - b[0]) + abs(a[1] - b[1])",
           "    stay(None, 0)\n    return abs(a[0] - b[0]) + abs(a[1] - b[1])")
    violations = check(generated_dir)
    assert rules(violations) == ["helper-calls-helper"] and "private function _distance" in violations[0].message


@pytest.mark.parametrize("old, new", [
    ("def stay(env: CleanupEnv, agent_id: int)", "def stay(env: CleanupEnv, agent_id: int, *rest)"),
    ("def stay(env: CleanupEnv, agent_id: int)", "def stay(game: CleanupEnv, agent_id: int)"),
    ("def stay(env: CleanupEnv, agent_id: int)", "def stay(env: CleanupEnv)"),
    ("agent_id: int, direction: str)", "agent_id: int, direction: str, /)"),
])
def test_helper_signature(generated_dir: Path, old: str, new: str) -> None:
    mutate(generated_dir, "helpers.py", old, new)
    violations = check(generated_dir)
    assert rules(violations) == ["helper-signature"]
    assert violations[0].line == line_of(generated_dir, "helpers.py", new)


def test_helper_keyword_only_parameters_are_fine(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "def move_to(env: CleanupEnv, agent_id: int, x: int, y: int)",
           "def move_to(env: CleanupEnv, agent_id: int, *, x: int, y: int, **extra)")
    assert check(generated_dir) == []


def test_observation_to_text_missing(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "def observation_to_text(", "def describe(")
    assert rules(check(generated_dir)) == ["observation-to-text-missing"]


def test_observation_to_text_wrong_parameters(generated_dir: Path) -> None:
    mutate(generated_dir, "helpers.py", "def observation_to_text(env: CleanupEnv, agent_id: int)",
           "def observation_to_text(env: CleanupEnv, agent_id: int, verbose: bool)")
    assert rules(check(generated_dir)) == ["helper-signature"]


# ---------------------------------------------------------------- only, check_all

def test_only_helpers_after_step_one(tmp_path: Path) -> None:
    shutil.copy(SOURCE_OF_TRUTH.parent / "examples/reference_generated/helpers.py", tmp_path / "helpers.py")
    assert check(tmp_path, only=["helpers.py"]) == []
    mutate(tmp_path, "helpers.py", "def observation_to_text(", "def describe(")
    assert rules(check(tmp_path, only=["helpers.py"])) == ["observation-to-text-missing"]


def test_only_prompt_template_needs_helpers(generated_dir: Path) -> None:
    (generated_dir / "helpers.py").unlink()
    (generated_dir / "train.py").unlink()
    assert [(v.rule, v.file) for v in check(generated_dir, only=["prompt_template.py"])] == [
        ("file-missing", "helpers.py")]


def test_check_all_rejects_unknown_names_in_only() -> None:
    with pytest.raises(ValueError, match="unknown file"):
        check_all({}, {}, only=["nope.py"])
