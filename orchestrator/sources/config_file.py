"""A researcher's grpo_config.py: load its GRPOConfig, read its fields, rewrite its values.

The brief lets a run change the config's values, never its field names, so the generated copy of
`grpo_config.py` is one of the two ways values reach train.py (the other is the command line, when
the template parses it). `set_values` rewrites default values in place, as text, keeping everything
else of the researcher's file (comments, help texts, validation) byte for byte.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any



CONFIG_CLASS = "GRPOConfig"  # the brief\'s config class

def load_config_class(path: Path) -> type:
    """GRPOConfig from a grpo_config.py (run in this process: the brief's config is a dataclass module)."""
    name = f"_grpo_config_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve string annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    config_cls = getattr(module, CONFIG_CLASS, None)
    if not dataclasses.is_dataclass(config_cls):
        raise ValueError(f"{path} defines no dataclass {CONFIG_CLASS}")
    return config_cls


def field_defaults(config_cls: type) -> dict[str, Any]:
    """Each field's default value (None for a field without one), in declaration order."""
    return {f.name: field_defaults_one(f) for f in dataclasses.fields(config_cls)}


def field_kinds(config_cls: type) -> dict[str, str]:
    """Each field's kind (bool, int, float, str or other): its default's, or read from its annotation when it
    has none (a required field, or `Optional[int] = None`)."""
    kinds = {}
    for f in dataclasses.fields(config_cls):
        default = field_defaults_one(f)
        kinds[f.name] = value_kind(default) if default is not None else annotation_kind(f.type)
    return kinds


def annotation_kind(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    names = [n for n in re.findall(r"[A-Za-z_]+", text) if n not in ("Optional", "None", "typing", "Union")]
    return names[0] if len(names) == 1 and names[0] in ("bool", "int", "float", "str") else "other"


def field_defaults_one(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def value_kind(value: Any) -> str:
    """bool, int, float, str or other: the kind a field's default value has."""
    for kind in (bool, int, float, str):  # bool before int: True is an int too
        if isinstance(value, kind):
            return kind.__name__
    return "other"


def field_help(config_text: str) -> dict[str, str]:
    """The help text of each field: its metadata "help", or the comment on its line."""
    tree = ast.parse(config_text)
    lines = config_text.splitlines()
    helps: dict[str, str] = {}
    for node in _config_assignments(tree):
        text = ""
        if isinstance(node.value, ast.Call):
            for keyword in node.value.keywords:
                if keyword.arg == "metadata" and isinstance(keyword.value, ast.Dict):
                    for key, value in zip(keyword.value.keys, keyword.value.values):
                        if isinstance(key, ast.Constant) and key.value == "help" and isinstance(value, ast.Constant):
                            text = str(value.value)
        if not text:
            line = lines[node.end_lineno - 1]
            text = line.split("#", 1)[1].strip() if "#" in line else ""
        helps[node.target.id] = text
    return helps


def set_values(config_text: str, values: dict[str, Any]) -> str:
    """`config_text` with the default of each named field replaced by the given value (a literal).

    Handles `name: T = value` and `name: T = field(default=value, ...)`; ValueError for a field that is
    not in GRPOConfig or whose default cannot be rewritten (no default, or a default_factory).
    """
    tree = ast.parse(config_text)
    targets: dict[str, ast.expr] = {}
    for node in _config_assignments(tree):
        if node.value is None:
            continue
        target: ast.expr = node.value
        if isinstance(node.value, ast.Call) and _callee(node.value) == "field":
            target = next((k.value for k in node.value.keywords if k.arg == "default"), None)
        if target is not None:
            targets[node.target.id] = target
    unknown = [name for name in values if name not in targets]
    if unknown:
        raise ValueError(f"cannot set {', '.join(unknown)} in grpo_config.py: not a {CONFIG_CLASS} field with a "
                         f"literal default")
    lines = config_text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for name, value in values.items():
        node = targets[name]
        start = offsets[node.lineno - 1] + _char_offset(lines[node.lineno - 1], node.col_offset)
        end = offsets[node.end_lineno - 1] + _char_offset(lines[node.end_lineno - 1], node.end_col_offset)
        edits.append((start, end, repr(value)))
    text = config_text
    for start, end, literal in sorted(edits, reverse=True):
        text = text[:start] + literal + text[end:]
    return text


def default_sources(config_text: str) -> dict[str, str]:
    """Each GRPOConfig field's default as its source text (normalised by the AST), read without running the file;
    a field without a default is left out."""
    return {node.target.id: ast.unparse(node.value) for node in _config_assignments(ast.parse(config_text))
            if node.value is not None}


def _config_assignments(tree: ast.Module) -> list[ast.AnnAssign]:
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == CONFIG_CLASS]
    if not classes:
        raise ValueError(f"grpo_config.py has no class {CONFIG_CLASS}")
    return [node for node in classes[-1].body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)]


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _char_offset(line: str, byte_offset: int) -> int:
    """ast column offsets count UTF-8 bytes; string slicing counts characters."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def accepted_values(config_cls: type, values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The values the config's own validation accepts on top of its defaults, and the names it refused.

    Each value is tried in turn with those already accepted; when the defaults alone do not construct
    (a field without a default), nothing can be judged and every value is accepted.
    """
    defaults = field_defaults(config_cls)
    try:
        config_cls(**defaults)
    except Exception:  # the researcher's validation may raise anything; then there is no baseline to judge by
        return dict(values), []
    accepted: dict[str, Any] = {}
    refused: list[str] = []
    for name, value in values.items():
        try:
            config_cls(**{**defaults, **accepted, name: value})
        except Exception:
            refused.append(name)
        else:
            accepted[name] = value
    return accepted, refused
