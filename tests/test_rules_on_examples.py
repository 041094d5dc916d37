"""Every example triple: its reference set passes `check`, and one mutant per rule, built from the files
themselves (never from one example's names), is flagged with that rule and only that rule."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import edit_file, example_generated

from orchestrator.rules import errors, check_folder
from orchestrator.sources.template import marker_kind, read_sections, read_template

EXAMPLES = ["cleanup", "staghunt", "spread"]
ROOT = Path(__file__).resolve().parents[1]




def action_helper(helpers_text: str) -> str:
    return next(node.name for node in ast.parse(helpers_text).body if isinstance(node, ast.FunctionDef)
                and not node.name.startswith("_") and node.name != "observation_to_text")


def change_generic_line(text: str) -> str:
    generic = [s for s in read_sections(text) if s.kind == "generic"][-1]
    lines = text.split("\n")
    index = next(i for i in range(generic.start_line, generic.end_line) if lines[i].strip()
                 and not lines[i].strip().startswith("#"))
    lines[index] += "  # edited"
    return "\n".join(lines)


def refill_hole_with_template(text: str, template: str) -> str:
    hole = [s for s in read_sections(text) if s.kind == "customize"][-1]
    placeholder = [s for s in read_template(template) if s.kind == "customize"][-1]
    lines = text.splitlines(keepends=True)
    return "".join(lines[:hole.start_line]) + placeholder.text + "".join(lines[hole.end_line:])


def replace_line(text: str, number: int, new: str | None) -> str:
    lines = text.split("\n")
    lines[number - 1: number] = [] if new is None else [new]
    return "\n".join(lines)


def drop_marker(text: str) -> str:
    """The last CUSTOMIZE section's marker removed (with its end marker, where the template has them)."""
    hole = [s for s in read_sections(text) if s.kind == "customize"][-1]
    if marker_kind(text.split("\n")[hole.end_line]) == "end":
        text = replace_line(text, hole.end_line + 1, None)
    return replace_line(text, hole.start_line, None)


def respell_marker(text: str) -> str:
    marker = [s for s in read_sections(text) if s.kind == "generic"][0]
    return replace_line(text, marker.start_line, marker.marker.replace("—", "-").replace("===", "====", 1))


def first_config_field(text: str) -> str:
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig")
    return next(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign))


MUTANTS: dict[str, Callable[[Path], None]] = {
    "file-missing": lambda f: (f / "launch_training.sh").unlink(),
    "syntax-error": lambda f: edit_file(f, "helpers.py", lambda t: t + "\ndef broken(:\n"),
    "protected-file-changed": lambda f: edit_file(f, "env_move.py", lambda t: t + "\n# tweak\n"),
    "config-fields-changed": lambda f: edit_file(f, "grpo_config.py", lambda t: re.sub(
        rf"\b{first_config_field(t)}\b(\s*:)", r"renamed_field\1", t, count=1)),
    "generic-section-changed": lambda f: edit_file(f, "train.py", change_generic_line),
    "customize-hole-unfilled": lambda f: edit_file(f, "train.py", lambda t: refill_hole_with_template(
        t, (f / "grpo_template.py").read_text())),
    "sections-changed": lambda f: edit_file(f, "train.py", drop_marker),
    "markers-broken": lambda f: edit_file(f, "train.py", respell_marker),
    "prompt-builder-missing": lambda f: edit_file(f, "prompt_template.py", lambda t: t.replace(
        "def create_single_stage_prompt(", "def create_second_prompt(", 1).replace(
        "create_single_stage_prompt(", "create_second_prompt(")),
    "prompt-builder-signature": lambda f: edit_file(f, "prompt_template.py", lambda t: re.sub(
        r"def create_thinking_prompt\(([^)]*)\)", r"def create_thinking_prompt(\1, extra)", t, count=1)),
    "unknown-action": lambda f: edit_file(f, "prompt_template.py", lambda t: t + (
        '\nEXAMPLE_CALL = \'{"action": "teleport_home", "agent_id": 0, "args": {}}\'\n')),
    "observation-to-text-missing": lambda f: edit_file(f, "helpers.py", lambda t: t.replace(
        "def observation_to_text(", "def _observation_to_text(", 1)),
    "helper-signature": lambda f: edit_file(f, "helpers.py", lambda t: t + "\n\ndef shout(env) -> bool:\n    return True\n"),
    "helper-calls-helper": lambda f: edit_file(f, "helpers.py", lambda t: t + (
        f"\n\ndef twice(env, agent_id) -> bool:\n    return {action_helper(t)}(env, agent_id, **{{}})\n")),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_reference_set_passes_check(tmp_path: Path, name: str) -> None:
    folder, source = example_generated(tmp_path, name)
    result = subprocess.run([sys.executable, "-m", "orchestrator", "check", str(folder), "--source-of-truth",
                             str(source)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks pass" in result.stdout


def consequences(folder: Path, rule: str) -> set[str]:
    """Rules a mutant also breaks by the example's layout: the last CUSTOMIZE hole left unfilled also drops the
    dispatch where that hole holds it (one hole for the parsing and the dispatch, as the spread template has)."""
    if rule != "customize-hole-unfilled":
        return set()
    hole = [s for s in read_sections((folder / "train.py").read_text()) if s.kind == "customize"][-1]
    runs_helpers = any(isinstance(k, ast.keyword) and k.arg is None for k in ast.walk(ast.parse(textwrap.dedent(hole.text))))
    return {"dispatch-bypasses-helpers"} if runs_helpers else set()


@pytest.mark.parametrize("rule", sorted(MUTANTS))
@pytest.mark.parametrize("name", EXAMPLES)
def test_each_rule_flags_its_mutant(tmp_path: Path, name: str, rule: str) -> None:
    folder, source = example_generated(tmp_path, name)
    also = consequences(folder, rule)
    MUTANTS[rule](folder)
    found = sorted({v.rule for v in errors(check_folder(folder, source))})
    assert found == sorted({rule} | also)


def test_check_on_an_unreadable_template_is_one_line(tmp_path: Path) -> None:
    folder, source = example_generated(tmp_path, "staghunt")
    bad_source = tmp_path / "bad_source"
    shutil.copytree(source, bad_source)
    (bad_source / "grpo_template.py").write_text("def f():\n    return 1\n# === END GENERIC ===\n")
    result = subprocess.run([sys.executable, "-m", "orchestrator", "check", str(folder), "--source-of-truth",
                             str(bad_source)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    assert "line 3" in result.stdout and "closes no open section" in result.stdout
