"""A researcher's grpo_config.py: read its GRPOConfig, its fields, rewrite its values.

The brief lets a run change the config's values, never its field names, so the generated copy of
`grpo_config.py` is one of the two ways values reach train.py (the other is the command line, when
the template parses it). `set_values` rewrites default values in place, as text, keeping everything
else of the researcher's file (comments, help texts, validation) byte for byte.

The file is code (the generated copy is generated code), so it never runs in the orchestrator's process:
`read_config` imports it in a fresh interpreter (`python -m orchestrator.sources.config_file`), which
answers with its fields' defaults and kinds, and runs the config's own validation there on request
(`ConfigFile(**values)`, `accepted_values`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_CLASS = "GRPOConfig"  # the brief's config class
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the orchestrator package
READ_TIMEOUT_S = 120.0
_ANSWER = "@@config-file-answer@@ "  # the child's answer line, apart from whatever the config prints


@dataclass(frozen=True)
class Opaque:
    """A default no literal can spell (a Path, an enum member): its type and repr, never sent back as a value."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ConfigFile:
    """A grpo_config.py's GRPOConfig as a fresh interpreter read it: each field's default (None for a field
    without one) and kind, in declaration order. Called with values, it runs the config's own validation on
    them (over its defaults) in a fresh interpreter and raises ValueError with the config's error."""

    path: Path
    defaults: dict[str, Any]
    kinds: dict[str, str]

    def __call__(self, **values: Any) -> None:
        error = _ask(self.path, {"op": "validate", "values": _encode(_sendable(values))})["error"]
        if error:
            raise ValueError(error)


def read_config(path: Path) -> ConfigFile:
    """GRPOConfig of `path`, read in a fresh interpreter; ValueError (one line) when it does not load."""
    answer = _ask(path, {"op": "read"})
    if answer.get("error"):
        raise ValueError(f"{path.name}: {answer['error']}")
    return ConfigFile(path, _decode(answer["defaults"]), answer["kinds"])


def accepted_values(config: ConfigFile, values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The values the config's own validation accepts on top of its defaults, and the names it refused.

    Each value is tried in turn with those already accepted; when the defaults alone do not construct
    (a field without a default), nothing can be judged and every value is accepted."""
    answer = _ask(config.path, {"op": "accept", "values": _encode(_sendable(values))})
    if answer.get("error"):
        return dict(values), []
    refused = answer["refused"]
    return {k: v for k, v in values.items() if k not in refused}, refused


def _sendable(values: dict[str, Any]) -> dict[str, Any]:
    """Values without the defaults read as Opaque: the config keeps its own there."""
    return {k: v for k, v in values.items() if not isinstance(v, Opaque)}


def _ask(path: Path, request: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH"))
                                                       if p), "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run([sys.executable, "-m", "orchestrator.sources.config_file", str(Path(path).resolve()),
                               json.dumps(request)], capture_output=True, text=True, timeout=READ_TIMEOUT_S, env=env,
                              cwd=Path(path).resolve().parent, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"importing it did not finish within {READ_TIMEOUT_S:.0f} s"}
    line = next((l for l in reversed(done.stdout.splitlines()) if l.startswith(_ANSWER)), None)
    if line is None:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"error": f"reading it failed: {last[:300]}"}
    return json.loads(line[len(_ANSWER):])


def _encode(value: Any) -> Any:
    """Plain data as JSON, tuples and sets marked so they come back as they were; anything else Opaque."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_encode(v) for v in (sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value)]
        return items if isinstance(value, list) else {f"__{type(value).__name__}__": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v) for k, v in value.items()}}
    if isinstance(value, Opaque):
        return {"__opaque__": [value.type_name, value.text]}
    return {"__opaque__": [type(value).__name__, repr(value)]}


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    (kind, inner), = value.items()
    if kind == "__float__":
        return float(inner)
    if kind == "__dict__":
        return {k: _decode(v) for k, v in inner.items()}
    if kind == "__opaque__":
        return Opaque(*inner)
    return {"__tuple__": tuple, "__set__": set, "__frozenset__": frozenset}[kind](_decode(v) for v in inner)


# ---------------------------------------------------------------- in the child interpreter

def _load_config_class(path: Path) -> type:
    """GRPOConfig from a grpo_config.py, imported in this (child) interpreter."""
    name = f"_grpo_config_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    config_cls = getattr(module, CONFIG_CLASS, None)
    if not dataclasses.is_dataclass(config_cls):
        raise ValueError(f"it defines no dataclass {CONFIG_CLASS}")
    return config_cls


def _answer(path: Path, request: dict) -> dict:
    try:
        config_cls = _load_config_class(path)
    except Exception as exc:  # the researcher's or the generated code: its error is the answer
        return {"error": f"{type(exc).__name__}: {exc}"}
    if request["op"] == "read":
        return {"defaults": _encode(_defaults_of(config_cls)), "kinds": _kinds_of(config_cls)}
    values = _decode(request["values"])
    if request["op"] == "validate":
        try:
            config_cls(**{**_defaults_of(config_cls), **values})
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"error": ""}
    return _accepted(config_cls, values)


def _accepted(config_cls: type, values: dict[str, Any]) -> dict:
    defaults = _defaults_of(config_cls)
    try:
        config_cls(**defaults)
    except Exception as exc:  # the researcher's validation may raise anything; then there is no baseline to judge by
        return {"error": f"{type(exc).__name__}: {exc}"}
    accepted: dict[str, Any] = {}
    refused: list[str] = []
    for name, value in values.items():
        try:
            config_cls(**{**defaults, **accepted, name: value})
        except Exception:
            refused.append(name)
        else:
            accepted[name] = value
    return {"refused": refused}


def _defaults_of(config_cls: type) -> dict[str, Any]:
    """Each field's default value (None for a field without one), in declaration order."""
    return {f.name: _default_of(f) for f in dataclasses.fields(config_cls)}


def _kinds_of(config_cls: type) -> dict[str, str]:
    """Each field's kind (bool, int, float, str or other): its default's, or read from its annotation when it
    has none (a required field, or `Optional[int] = None`)."""
    kinds = {}
    for f in dataclasses.fields(config_cls):
        default = _default_of(f)
        kinds[f.name] = value_kind(default) if default is not None else _annotation_kind(f.type)
    return kinds


def _annotation_kind(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    names = [n for n in re.findall(r"[A-Za-z_]+", text) if n not in ("Optional", "None", "typing", "Union")]
    return names[0] if len(names) == 1 and names[0] in ("bool", "int", "float", "str") else "other"


def _default_of(f: dataclasses.Field) -> Any:
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


def main() -> None:
    answer = _answer(Path(sys.argv[1]), json.loads(sys.argv[2]))
    sys.stdout.write("\n" + _ANSWER + json.dumps(answer) + "\n")
    sys.stdout.flush()
    os._exit(0)  # whatever the config left running


if __name__ == "__main__":
    main()
