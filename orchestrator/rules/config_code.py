"""grpo_config.py is values only ("Do NOT add or delete parameters in grpo_config.py, but you can change values").

- config-code-changed: the generated grpo_config.py's syntax tree is the source of truth's, node for node, except
  where the source of truth holds a literal value (a constant, a tuple, list, set or dict of literals, a sign, an
  arithmetic expression of literals, `float("inf")`): there the generated file may hold any other literal value.
  Anything else (a statement added or dropped, an import, a call, a name, a decorator, a changed validation
  method) is one violation naming the first line where the trees part.

The config is imported before any check takes its baseline (train.py, the template and the probe import it), so
code in it would run ahead of every comparison: values are all a run may change there. Comments and formatting
are not part of the syntax tree and may change freely.
"""

from __future__ import annotations

import ast
from typing import Any

from orchestrator.rules.violation import Violation

NAME = "grpo_config.py"
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
SIGNS = (ast.USub, ast.UAdd, ast.Not, ast.Invert)
CONVERSIONS = {"float", "int", "str", "bool", "complex", "tuple", "list", "dict", "set", "frozenset"}
SKIPPED_FIELDS = {"ctx", "type_comment", "kind"}


def is_literal(node: ast.AST, bound: frozenset[str] = frozenset()) -> bool:
    """A literal value, or an expression of literals only (no name, no attribute, no call but a conversion of
    literals by a builtin the file does not rebind)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(is_literal(e, bound) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and is_literal(k, bound) for k in node.keys) and all(
            is_literal(v, bound) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, SIGNS) and is_literal(node.operand, bound)
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ARITHMETIC) and is_literal(node.left, bound) and is_literal(node.right, bound)
    if isinstance(node, ast.Call):
        return (isinstance(node.func, ast.Name) and node.func.id in CONVERSIONS - bound and not node.keywords
                and all(is_literal(a, bound) for a in node.args))
    return False


def bound_names(tree: ast.Module) -> frozenset[str]:
    """Every name the file binds anywhere (a conversion it rebinds is no builtin)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return frozenset(names)


class Parted(Exception):
    """Where the two trees part: the generated node (or the nearest one with a line) and the source's."""

    def __init__(self, got: ast.AST | None, want: ast.AST | None, parent: ast.AST | None) -> None:
        super().__init__()
        self.got, self.want, self.parent = got, want, parent


def compare(got: Any, want: Any, parent: ast.AST | None, bound: frozenset[str]) -> None:
    """Raise Parted at the first place `got` (generated) differs from `want` (source) other than in a literal."""
    if isinstance(want, ast.AST):
        if isinstance(got, ast.AST) and is_literal(want, bound) and is_literal(got, bound):
            return
        if type(got) is not type(want):
            raise Parted(got if isinstance(got, ast.AST) else None, want, parent)
        here = got if hasattr(got, "lineno") else parent
        for name in want._fields:
            if name not in SKIPPED_FIELDS:
                compare(getattr(got, name, None), getattr(want, name, None), here, bound)
    elif isinstance(want, list):
        if not isinstance(got, list):
            raise Parted(None, None, parent)
        for index in range(max(len(got), len(want))):
            if index >= len(got) or index >= len(want):
                extra = got[index] if index < len(got) else None
                raise Parted(extra if isinstance(extra, ast.AST) else None,
                             want[index] if index < len(want) and isinstance(want[index], ast.AST) else None, parent)
            compare(got[index], want[index], parent, bound)
    elif got != want:
        raise Parted(None, None, parent)


def check_config_code(text: str, source_text: str) -> list[Violation]:
    """config-code-changed: one violation at the first place the generated config is more than new values."""
    tree, source = ast.parse(text), ast.parse(source_text)
    try:
        compare(tree, source, None, bound_names(source))
    except Parted as parted:
        return [describe(parted, text, source_text)]
    return []


def describe(parted: Parted, text: str, source_text: str) -> Violation:
    got = parted.got if parted.got is not None and hasattr(parted.got, "lineno") else parted.parent
    line = getattr(got, "lineno", None)
    shown = _segment(text, got) if got is not None else "the end of the file"
    want = parted.want if parted.want is not None and hasattr(parted.want, "lineno") else None
    source_part = (f"source_of_truth/{NAME} has `{_segment(source_text, want)}` (line {want.lineno})" if want is not None
                   else f"source_of_truth/{NAME} has nothing there" if parted.got is not None
                   else f"it differs from source_of_truth/{NAME} there")
    return Violation("config-code-changed", NAME, line,
                     f"`{shown}` is more than a changed value: {source_part}. The brief allows only values to change "
                     f"in {NAME} (no statement, import, call, name or method of your own: the config is imported "
                     f"before every check); restore the source of truth's code and change literal values only")


def _segment(text: str, node: ast.AST) -> str:
    segment = ast.get_source_segment(text, node) or ast.unparse(node)
    first = segment.strip().splitlines()[0] if segment.strip() else ""
    return first if len(first) <= 120 else first[:120] + "..."
