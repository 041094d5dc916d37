"""Static rules against generated code that reaches the import machinery or the researcher's files on disk
("Do NOT modify env_move.py, or grpo_template.py"; "Do NOT add or delete parameters in grpo_config.py"):
anywhere in helpers.py, prompt_template.py and train.py's own code (GENERIC sections aside), module level
included.

- import-machinery: no `importlib` (or `imp`, `runpy`, `zipimport`; nor the orchestrator, whose checks run in the
  same processes), `__import__`, `reload`, `sys.meta_path`,
  `sys.path_hooks`, `sys.path_importer_cache`, or a module loaded from a file by hand (`spec_from_file_location`,
  `module_from_spec`, `exec_module`, `load_module`, `SourceFileLoader`). A generated file imports what it uses
  with `import`; loading or reloading modules by hand is how one swaps the game, the config or a library under
  the code that runs on it.
- source-file-written: no write (open for writing, write_text/write_bytes, touch, unlink, os.remove/rename/
  replace/truncate, shutil copies and moves) whose target names env_move, grpo_config or grpo_template: by a
  string the expression holds (also split and joined, or assigned to a name first) or by such a module's
  `__file__`.

What the text cannot show (a path built from the game's own attributes) the probe refuses while it runs
(rules/probe/protect.py).
"""

from __future__ import annotations

import ast
import re

from orchestrator.rules.violation import Violation

MACHINERY_MODULES = ("importlib", "imp", "runpy", "zipimport", "orchestrator")  # the last: the checks themselves
MACHINERY_ATTRIBUTES = {"meta_path", "path_hooks", "path_importer_cache"}
LOADERS = {"spec_from_file_location", "module_from_spec", "exec_module", "load_module", "SourceFileLoader",
           "SourcelessFileLoader", "spec_from_loader"}
SOURCE_STEMS = ("env_move", "grpo_config", "grpo_template")
WRITE_METHODS = {"write_text", "write_bytes", "touch", "unlink", "symlink_to", "hardlink_to"}
# os and shutil functions that write a path: which of their first two arguments are written
WRITE_FUNCTIONS = {"remove": (0,), "unlink": (0,), "truncate": (0,), "utime": (0,), "chmod": (0,),
                   "rename": (0, 1), "replace": (0, 1), "renames": (0, 1), "move": (0, 1), "link": (1,),
                   "symlink": (1,), "copy": (1,), "copy2": (1,), "copyfile": (1,), "copytree": (1,)}
OPENERS = {"open"}


def check_machinery(name: str, tree: ast.Module, skipped: set[int]) -> list[Violation]:
    """Both rules over one generated file; `skipped`: lines that are not the generated code's own (GENERIC)."""
    found, seen = [], set()
    for node, problem in machinery_uses(tree):
        if node.lineno not in skipped and node.lineno not in seen:
            seen.add(node.lineno)
            found.append(Violation("import-machinery", name, node.lineno,
                                   f"{problem}: generated code imports what it uses with `import` and never loads, "
                                   f"reloads or redirects modules by hand (that swaps the game, the config or a "
                                   f"library under the code that runs on it); remove it"))
    names = assigned_strings(tree)
    for node, target in source_writes(tree, names):
        if node.lineno not in skipped:
            found.append(Violation("source-file-written", name, node.lineno,
                                   f"{ast.unparse(node)[:120]} writes {target}, a file of the researcher's source of "
                                   f"truth (the brief: do not modify env_move.py or grpo_template.py, only values of "
                                   f"grpo_config.py, and those through the orchestrator); generated code never "
                                   f"writes them"))
    return found


def machinery_uses(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    found: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, f"import {a.name}") for a in node.names if a.name.split(".")[0] in MACHINERY_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in MACHINERY_MODULES:
                found.append((node, f"from {node.module} import ..."))
            found += [(node, f"importing {a.name}") for a in node.names if a.name in LOADERS | {"reload"}]
        elif isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else ""
            if callee == "__import__":
                found.append((node, "__import__()"))
            elif callee == "reload":
                found.append((node, f"{ast.unparse(node.func)}() reloads a module"))
            elif callee in LOADERS:
                found.append((node, f"{ast.unparse(node.func)}() loads a module by hand"))
        elif isinstance(node, ast.Attribute) and node.attr in MACHINERY_ATTRIBUTES:
            found.append((node, f"{ast.unparse(node)[:80]} (the import system's hooks)"))
    return found


def assigned_strings(tree: ast.Module) -> dict[str, str]:
    """Each name the file assigns, with the strings its values hold (joined): `p = "env_" + "move.py"`."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value else []
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = found.get(target.id, "") + strings_of(node.value, {})
    return found


def strings_of(node: ast.AST, names: dict[str, str]) -> str:
    parts = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            parts.append(inner.value)
        elif isinstance(inner, ast.Name) and inner.id in names:
            parts.append(names[inner.id])
        elif isinstance(inner, ast.Attribute) and inner.attr == "__file__":
            parts.append(ast.unparse(inner.value) + ".py")
        elif isinstance(inner, ast.Call) and isinstance(inner.func, (ast.Name, ast.Attribute)) \
                and ast.unparse(inner.func).split(".")[-1] in ("getfile", "getsourcefile") and inner.args:
            parts.append(ast.unparse(inner.args[0]) + ".py")
    return "".join(parts)


def named_source(node: ast.AST | None, names: dict[str, str]) -> str | None:
    """The source-of-truth file `node` (a path expression) names, or None."""
    if node is None:
        return None
    text = strings_of(node, names).lower()  # the file itself (a grpo_config.json of one's own is another file)
    return next((f"{stem}.py" for stem in SOURCE_STEMS if re.search(rf"\b{stem}\.py\b", text)), None)


def writes_mode(call: ast.Call, position: int) -> bool:
    """An open() whose mode (positional `position` or `mode=`) may write: a constant with w, a, x or +, or no
    constant at all (a mode that cannot be read is taken as a write when the target is a source file)."""
    mode = call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg in ("mode", "flags")), None)
    if mode is None:
        return False
    if isinstance(mode, ast.Constant):
        return isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
    return True


def source_writes(tree: ast.Module, names: dict[str, str]) -> list[tuple[ast.Call, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        callee = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        target = None
        if callee in OPENERS and isinstance(func, ast.Name) and node.args and writes_mode(node, 1):
            target = named_source(node.args[0], names)
        elif callee == "open" and isinstance(func, ast.Attribute):
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id in ("os", "io", "codecs") and node.args:
                target = named_source(node.args[0], names) if writes_mode(node, 1) else None
            else:  # Path(...).open("w")
                target = named_source(owner, names) if writes_mode(node, 0) else None
        elif callee in WRITE_METHODS and isinstance(func, ast.Attribute):
            target = named_source(func.value, names)
        elif callee in WRITE_FUNCTIONS and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id in ("os", "shutil"):
            written = [node.args[i] for i in WRITE_FUNCTIONS[callee] if i < len(node.args)]
            target = next((t for t in (named_source(a, names) for a in written) if t), None)
        if target:
            found.append((node, target))
    return found
