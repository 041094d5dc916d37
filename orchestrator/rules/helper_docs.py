"""helper_readme.md, rendered from helpers.py's text: the helpers' docstrings and signatures are their docs.

Step 1 asks the LLM for helpers.py only. Its module docstring (the coordinate system, how a helper is
called) and each helper's docstring (what it does this turn, its args, what True means) are the
documentation; this module lays them out for Steps 2 and 3 and the review: the overview, a table of
the action helpers, then each one's signature, docstring and JSON call form. Every write of helpers.py
(a generation, a fix) renders the readme again in the same commit, so it cannot go stale.

helpers.py is read with the AST, never imported: while it is being debugged it may not import. One
that does not parse renders nothing (the rules report its syntax error; the last readme stays).
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping

from orchestrator.rules import static
from orchestrator.rules.exposed import OBSERVATION_HELPER, Exposed, exposed_callables

HELPERS_FILE = "helpers.py"
EXAMPLE_AGENT_ID = 0
CALLED_AS = ('Each is called with ONE JSON object `{"action": NAME, "agent_id": I, "args": {...}}`, that is '
             "`NAME(env, agent_id, **args)`, and returns a bool: whether its task completed.")
_SEQUENCES = {"list", "set", "frozenset", "Sequence", "Iterable", "List", "Set", "tuple", "Tuple"}
_JSON_SCALARS = (str, int, float, bool, type(None))
_NO_DOCSTRING = "_(helpers.py gives this helper no docstring)_"


def rendered_docs(files: Mapping[str, str]) -> dict[str, str]:
    """The files rendered from `files`: helper_readme.md when they hold a helpers.py that parses, else none."""
    source = files.get(HELPERS_FILE)
    if source is None:
        return {}
    try:
        return {static.HELPER_README: helper_readme(source)}
    except (SyntaxError, ValueError):  # ValueError: null bytes in the source
        return {}


def stale_docs(files: Mapping[str, str], current: Callable[[str], str | None]) -> dict[str, str]:
    """The files rendered from `files` whose text is not `current(name)` (None: missing): the ones to write."""
    return {name: text for name, text in rendered_docs(files).items() if current(name) != text}


def helper_readme(helpers_source: str) -> str:
    """The usage docs of every helper in `helpers_source`; raises SyntaxError when it does not parse."""
    tree = ast.parse(helpers_source)
    exposed = exposed_callables(tree)  # the action helpers, as every rule reads them, and observation_to_text
    actions = [helper for name, helper in exposed.items() if name != OBSERVATION_HELPER]
    parts = ["# Helpers (`helpers.py`)",
             "Rendered from `helpers.py` by the orchestrator: its docstrings and signatures are the documentation."]
    overview = ast.get_docstring(tree)
    if overview:
        parts.append(overview)
    parts += ["## Action helpers", CALLED_AS, _table(actions)]
    parts += [_section(function) for function in actions]
    observe = exposed.get(OBSERVATION_HELPER)
    if observe is not None:
        parts.append(f"## `{OBSERVATION_HELPER}({ast.unparse(observe.args)}) -> str`\n\n"
                     "Not an action: the text one agent reads about the game each turn (train.py builds prompts "
                     "from it).\n\n" + (observe.docstring or _NO_DOCSTRING))
    return "\n\n".join(parts) + "\n"


def _json_call(function: Exposed) -> str:
    """The helper's JSON call form, with example values: a parameter's default, else one its annotation allows."""
    ints = itertools.count(1)  # distinct small numbers, so that two int args are told apart
    args = {arg.arg: _example(arg, default, ints) for arg, default in _parameters(function)}
    return json.dumps({"action": function.name, "agent_id": EXAMPLE_AGENT_ID, "args": args})


def _table(actions: list[Exposed]) -> str:
    rows = ["| action | args | what it does |", "|---|---|---|"]
    for function in actions:
        args = ", ".join(f"`{_parameter(arg, default)}`" for arg, default in _parameters(function)) or "none"
        summary = re.split(r"\n\s*\n", function.docstring or "")[0]  # its first paragraph
        rows.append(f"| `{function.name}` | {_cell(args)} | {_cell(' '.join(summary.split()) or '-')} |")
    return "\n".join(rows)


def _section(function: Exposed) -> str:
    returns = f" -> {ast.unparse(function.returns)}" if function.returns is not None else " -> bool"
    return (f"## `{function.name}({ast.unparse(function.args)}){returns}`\n\n"
            f"{function.docstring or _NO_DOCSTRING}\n\n```json\n{_json_call(function)}\n```")


def _parameters(function: Exposed) -> list[tuple[ast.arg, ast.expr | None]]:
    """The parameters its JSON `args` name (all but the env and the agent id), each with its default or None."""
    args = function.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    return list(zip(positional, defaults))[2:] + list(zip(args.kwonlyargs, args.kw_defaults))


def _parameter(arg: ast.arg, default: ast.expr | None) -> str:
    text = ast.unparse(arg)
    return f"{text} = {ast.unparse(default)}" if default is not None else text


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _example(arg: ast.arg, default: ast.expr | None, ints: Iterator[int]) -> object:
    if default is not None:
        try:
            value = ast.literal_eval(default)
            json.dumps(value, allow_nan=False)
            return value
        except (ValueError, TypeError):
            pass  # not a JSON literal (a constant's name, a call): an example by annotation instead
    return _by_annotation(arg.annotation, f"<{arg.arg}>", ints)


def _by_annotation(annotation: ast.expr | None, placeholder: str, ints: Iterator[int]) -> object:
    """An example value that `annotation` allows; the placeholder string where it says nothing usable."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return placeholder
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):  # X | None
        members = [annotation.left, annotation.right]
        return _by_annotation(next((m for m in members if not _is_none(m)), members[0]), placeholder, ints)
    if isinstance(annotation, ast.Subscript):
        name = _name(annotation.value)
        inner = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if name == "Literal" and isinstance(inner[0], ast.Constant) and isinstance(inner[0].value, _JSON_SCALARS):
            return inner[0].value
        if name in ("Optional", "Union"):
            return _by_annotation(next((m for m in inner if not _is_none(m)), inner[0]), placeholder, ints)
        if name in ("tuple", "Tuple") and not any(isinstance(m, ast.Constant) and m.value is ... for m in inner):
            return [_by_annotation(m, placeholder, ints) for m in inner]  # tuple[int, int]: one value per place
        if name in _SEQUENCES:
            return [_by_annotation(inner[0], placeholder, ints)]
        if name in ("dict", "Dict", "Mapping"):
            return {}
        return placeholder
    return {"int": lambda: next(ints), "float": lambda: 0.5, "bool": lambda: True,
            "dict": dict, "list": list}.get(_name(annotation), lambda: placeholder)()


def _name(node: ast.expr | None) -> str:
    """`int` of `int`, `Sequence` of `typing.Sequence`; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
