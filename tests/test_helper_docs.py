"""helper_readme.md rendered from helpers.py's text (strings in, strings out): every action helper with its
signature, docstring and a JSON call form that parses and names exactly its parameters."""

import ast
import json
import re
from pathlib import Path

import pytest

from orchestrator.demo import example
from orchestrator.rules.helper_docs import helper_readme, rendered_docs, stale_docs

EXAMPLES = ("cleanup", "staghunt", "spread")

UNSEEN = '''"""Helpers for a game of boats on a lake. Positions are (lat, lon)."""

import missing_module_that_would_fail_an_import  # rendered without importing

from typing import Literal, Optional

DEFAULT_SPEED = 3


def observation_to_text(game, boat):
    return "You see water."


def sail(game, boat, lat: int, lon: int, speed: float = 1.5, *, careful: bool = False) -> bool:
    """Sail one leg towards (lat, lon).

    True when the boat is at (lat, lon) after this turn."""
    return True


def anchor(game, boat):
    return True


def signal(game, boat, colour: Literal["red", "green"], times: "int" = 2, note=None, *, to: Optional[int] = None,
           pattern: list[int], label: str, mood, speed: int = DEFAULT_SPEED) -> bool:
    """Raise a flag | wave it."""
    return True


async def drift(game, boat, minutes: int | None, where: tuple[int, int], mode: Literal[b"raw"]) -> bool:
    """Let the current carry the boat."""
    return True


def _shared(game):
    return game
'''


def call_forms(readme: str) -> dict[str, dict]:
    calls = [json.loads(block) for block in re.findall(r"```json\n(.*?)\n```", readme, re.DOTALL)]
    assert len({call["action"] for call in calls}) == len(calls)
    return {call["action"]: call for call in calls}


def parameters(function: ast.FunctionDef) -> list[str]:
    args = function.args
    return [a.arg for a in (args.posonlyargs + args.args)[2:] + args.kwonlyargs]


def action_helpers(source: str) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")
            and node.name != "observation_to_text"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_examples_readme_is_the_rendering_of_its_helpers(name: str):
    reference = example(name).reference
    assert (reference / "helper_readme.md").read_text() == helper_readme((reference / "helpers.py").read_text())


@pytest.mark.parametrize("source", [*(example(n).reference / "helpers.py" for n in EXAMPLES), UNSEEN],
                         ids=[*EXAMPLES, "unseen"])
def test_every_action_helper_has_a_json_call_form_with_exactly_its_parameters(source):
    text = source.read_text() if isinstance(source, Path) else source
    readme = helper_readme(text)
    helpers = action_helpers(text)
    calls = call_forms(readme)
    assert set(calls) == set(helpers)
    for name, function in helpers.items():
        assert calls[name]["agent_id"] == 0 and list(calls[name]["args"]) == parameters(function)
        assert f"| `{name}` |" in readme and f"## `{name}(" in readme
        docstring = ast.get_docstring(function)
        assert docstring is None or docstring in readme  # the whole docstring, dedented
    assert "observation_to_text" not in calls and "Not an action" in readme


def test_example_values_come_from_the_default_else_from_the_annotation():
    calls = call_forms(helper_readme(UNSEEN))
    assert calls["sail"] == {"action": "sail", "agent_id": 0,
                             "args": {"lat": 1, "lon": 2, "speed": 1.5, "careful": False}}
    # a default that is no JSON literal (a constant's name) gives way to the annotation
    assert calls["signal"]["args"] == {"colour": "red", "times": 2, "note": None, "to": None, "pattern": [1],
                                       "label": "<label>", "mood": "<mood>", "speed": 2}
    assert calls["drift"]["args"] == {"minutes": 1, "where": [2, 3], "mode": "<mode>"}  # bytes are no JSON
    assert calls["anchor"]["args"] == {}


def test_signatures_docstrings_and_a_helper_without_a_docstring():
    readme = helper_readme(UNSEEN)
    assert readme.startswith("# Helpers")
    assert "Helpers for a game of boats on a lake. Positions are (lat, lon)." in readme  # the module docstring
    assert ("## `sail(game, boat, lat: int, lon: int, speed: float=1.5, *, careful: bool=False) -> bool`\n\n"
            "Sail one leg towards (lat, lon).\n\nTrue when the boat is at (lat, lon) after this turn.") in readme
    assert "## `anchor(game, boat) -> bool`\n\n_(helpers.py gives this helper no docstring)_" in readme
    assert "| `anchor` | none | - |" in readme
    assert "| `signal` | `colour: Literal['red', 'green']`, " in readme and "Raise a flag \\| wave it. |" in readme
    assert "`speed: float = 1.5`, `careful: bool = False` | Sail one leg towards (lat, lon). |" in readme
    assert "_shared" not in readme


def test_a_helpers_py_that_does_not_parse_renders_nothing():
    assert rendered_docs({"helpers.py": "def broken(:\n"}) == {}
    assert rendered_docs({"helpers.py": "x = 1\0\n"}) == {}
    assert rendered_docs({"train.py": "x = 1\n"}) == {}
    assert rendered_docs({"helpers.py": UNSEEN}) == {"helper_readme.md": helper_readme(UNSEEN)}
    with pytest.raises(SyntaxError):
        helper_readme("def broken(:\n")


def test_only_a_missing_or_different_readme_is_to_be_written():
    readme = helper_readme(UNSEEN)
    assert stale_docs({"helpers.py": UNSEEN}, {"helper_readme.md": readme}.get) == {}
    assert stale_docs({"helpers.py": UNSEEN}, {}.get) == {"helper_readme.md": readme}
    assert stale_docs({"helpers.py": UNSEEN}, {"helper_readme.md": "old"}.get) == {"helper_readme.md": readme}
