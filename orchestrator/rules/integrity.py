"""Static rules against code that keeps the letter of the brief and breaks its spirit.

A sloppy or scheming code writer can leave env_move.py byte-identical and still change what runs, make
one helper call another without a direct call, or drift the action names at run time. Each rule is a
pure function over parsed texts; the dynamic layer (probe/contract.py) catches what the AST cannot.

- protected-module-patched: no generated file assigns to, deletes or `setattr`s an attribute of
  env_move, grpo_config or anything imported from them, nor writes `sys.modules` ("Do NOT modify
  env_move.py, or grpo_template.py"; patching at run time is modifying).
- protected-module-shadowed: no generated file binds the name `env_move` or `grpo_config` to
  anything but that module, and the folder holds no package or module that would be imported instead.
- generic-object-rebound: a CUSTOMIZE section of train.py neither redefines nor patches what a GENERIC
  section defines, nor declares it `global`, nor reaches it through `globals()`, `vars()`, `sys.modules`
  or `__main__`, nor writes through `vars(...)` of a GENERIC object or an imported module ("Keep all
  GENERIC sections unchanged": a later definition would replace the generic one at run time). Reading
  another object's names is no rebinding: `vars(helpers)`, `getattr(helpers, name)` (a dispatch table
  built from the helpers module) are judged by what they dispatch, at run time.
- helper-reference: no helper, private function or class of helpers.py reaches a public helper other
  than itself by name (an alias, a table, a lambda, a default argument), and no module-level alias or
  table of helpers is used by one ("Functions must be independent — no helper calling another helper").
- helper-dynamic-lookup: helpers.py looks nothing up by name at run time (`globals()`, `vars()` of its own
  namespace, `sys.modules`, `getattr` on a module, importing helpers itself; importlib and `__import__`
  are machinery.py's).
- action-menu-mutated: prompt_template.py does not change an action menu after defining it (the names
  the checks read must be the names the model sees).
- dispatch-bypasses-helpers: train.py calls the action helpers (by name from helpers, or through the
  helpers module), not raw low-level actions ("parse JSON action → call the right helper function").
- config-field-unknown: train.py reads no attribute of the config that GRPOConfig does not have
  (`config.x`, `getattr(config, "x", default)`) ("Use GRPOConfig field names exactly as defined").
- config-written-at-run-time: no CUSTOMIZE code of train.py writes to the config it is given ("Set configs
  for train.py via grpo_config.py or cmd parameters": a value set in code silently wins over the plan).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from orchestrator.rules.violation import Violation
from orchestrator.sources.template import CUSTOMIZE, GENERIC, read_sections

PROTECTED_MODULES = ("env_move", "grpo_config")
OBSERVATION_HELPER = "observation_to_text"
MUTATORS = {"append", "extend", "insert", "update", "add", "pop", "remove", "clear", "setdefault", "discard",
            "popitem", "__setitem__", "__delitem__"}
DYNAMIC_LOOKUPS = {"globals", "vars"}


# ---------------------------------------------------------------- protected modules

def protected_bindings(tree: ast.Module) -> dict[str, str]:
    """Local name -> the protected module it is (or comes from), from the file's imports."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in PROTECTED_MODULES:
                    bound[alias.asname or root] = root
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROTECTED_MODULES:
            for alias in node.names:
                bound[alias.asname or alias.name] = node.module.split(".")[0]
    return bound


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_sys_modules(node: ast.expr) -> bool:
    while isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "modules" and _root_name(node) == "sys"


def check_protected_patches(name: str, tree: ast.Module) -> list[Violation]:
    bound = protected_bindings(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        for target in targets:
            root = _root_name(target)
            if isinstance(target, (ast.Attribute, ast.Subscript)) and root in bound:
                found.append(Violation("protected-module-patched", name, node.lineno,
                                       f"{ast.unparse(target).replace('.?', '')} changes {bound[root]} at run time; "
                                       f"{bound[root]}.py is protected: get the behaviour you need in a generated file"))
            elif _is_sys_modules(target):
                found.append(Violation("protected-module-patched", name, node.lineno,
                                       f"writing {ast.unparse(target)} swaps modules at run time; import the "
                                       f"project's modules as they are"))
    return found


def check_shadowing(name: str, tree: ast.Module) -> list[Violation]:
    found = []
    for node in ast.walk(tree):
        bindings: list[tuple[str, str]] = []  # (bound name, what it is bound to)
        if isinstance(node, ast.Import):
            bindings = [(a.asname, a.name) for a in node.names if a.asname in PROTECTED_MODULES and a.name != a.asname]
        elif isinstance(node, ast.ImportFrom):
            bindings = [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names
                        if (a.asname or a.name) in PROTECTED_MODULES]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bindings = [(t.id, ast.unparse(node.value) if node.value else "?") for t in targets
                        if isinstance(t, ast.Name) and t.id in PROTECTED_MODULES]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in PROTECTED_MODULES:
            bindings = [(node.name, "a definition")]
        found += [Violation("protected-module-shadowed", name, node.lineno,
                            f"the name {bound!r} is bound to {what}, not to the project's {bound}.py; import the "
                            f"real module and name your own things differently") for bound, what in bindings]
    return found


def check_shadowing_files(folder: Path) -> list[Violation]:
    """A package or compiled module in the folder that `import env_move` would pick before env_move.py."""
    found = []
    for module in PROTECTED_MODULES:
        for shadow in (folder / module, *folder.glob(f"{module}.*.so"), *folder.glob(f"{module}.pyc")):
            if shadow.exists():
                found.append(Violation("protected-module-shadowed", shadow.name, None,
                                       f"{shadow.name} in the generated folder is imported instead of {module}.py; "
                                       f"remove it"))
    return found


# ---------------------------------------------------------------- GENERIC objects in train.py

def generic_names(template_text: str) -> set[str]:
    """Names the template's module-level GENERIC code defines (functions, classes, assignments)."""
    names: set[str] = set()
    for section in read_sections(template_text):
        if section.kind != GENERIC or section.text[:1].isspace():
            continue
        tree = _parse(section.text)
        for node in tree.body if tree else []:
            names.update(bound_names(node))
    return names


def bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def check_generic_rebinding(text: str, template_text: str) -> list[Violation]:
    generic = generic_names(template_text)
    found = []
    for section in read_sections(text):
        if section.kind != CUSTOMIZE:
            continue
        tree = _parse(section.text)
        if tree is None:
            continue
        top_level = not section.text[:1].isspace()
        for node in ast.walk(tree):
            line = section.start_line + node.lineno if hasattr(node, "lineno") else None
            rebound = bound_names(node) & generic if top_level and node in tree.body else set()
            if isinstance(node, ast.Global):
                rebound |= set(node.names) & generic
            patched = {t for t in _assigned_attribute_roots(node) if t in generic}
            lookups = _dynamic_lookup(node)
            written = _written_namespace(node)  # rare: the file's imports are read only then
            if written is not None and _root_name(written.args[0]) in generic | _module_names(text):
                found.append(Violation("generic-object-rebound", "train.py", line,
                                       f"{ast.unparse(node)[:120]} in a CUSTOMIZE section writes another object's "
                                       f"names at run time (a GENERIC object's or a module's); read them if you need "
                                       f"to, never change them"))
            for name in sorted(rebound | patched):
                how = "patches" if name in patched else "rebinds (`global`)" if isinstance(node, ast.Global) else \
                    "redefines"
                found.append(Violation("generic-object-rebound", "train.py", line,
                                       f"this CUSTOMIZE section {how} "
                                       f"{name}, which a GENERIC section defines; the generic code must run as the "
                                       f"template wrote it: pick another name or change your own code"))
            if lookups:
                found.append(Violation("generic-object-rebound", "train.py", line,
                                       f"{lookups} in a CUSTOMIZE section reaches objects by name at run time, "
                                       f"so it can replace what the GENERIC sections define (or what a protected "
                                       f"module holds); refer to your own objects by name"))
    return found


def _assigned_attribute_roots(node: ast.AST) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
            and node.args:
        targets = [ast.Attribute(value=node.args[0], attr="?")]
    return {root for t in targets if isinstance(t, (ast.Attribute, ast.Subscript)) and (root := _root_name(t))}


def _dynamic_lookup(node: ast.AST) -> str:
    """How `node` reaches names of the running module (its own, or any module's through sys.modules), or "".
    `vars(x)` of something else reads x's names only: no lookup (a write through it is judged apart)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_LOOKUPS \
            and not (node.func.id == "vars" and node.args):
        return f"{node.func.id}()"
    if isinstance(node, ast.Attribute) and node.attr == "modules" and _root_name(node) == "sys":
        return "sys.modules"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args \
            and _is_module_reference(node.args[0]):
        return "getattr() on a module"
    if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (getattr(node, "module", None) or a.name) in ("__main__", "train") for a in node.names):
        return "importing train.py itself (as __main__ or train)"
    if isinstance(node, ast.Attribute) and node.attr in ("__globals__", "f_globals", "__builtins__"):
        return f"`.{node.attr}` (a module's own namespace)"
    return ""


def _written_namespace(node: ast.AST) -> ast.Call | None:
    """The `vars(X)` call that `vars(X)[k] = v`, `del vars(X)[k]` or `vars(X).update(...)` (or another
    mutator) writes through, or None."""
    targets: list[ast.expr] = []
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        targets = [ast.Subscript(value=node.func.value, slice=ast.Constant(None))]
    for target in targets:
        inner = target
        while isinstance(inner, (ast.Attribute, ast.Subscript)):
            inner = inner.value
        if inner is not target and isinstance(inner, ast.Call) and getattr(inner.func, "id", "") == "vars" \
                and inner.args:
            return inner
    return None


def _module_names(text: str) -> set[str]:
    """Names an `import` binds to a module anywhere in the file."""
    tree = _parse(text)
    return {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
            for a in n.names} if tree else set()


def _is_module_reference(node: ast.expr) -> bool:
    return _is_sys_modules(node) or (isinstance(node, ast.Subscript) and _is_sys_modules(node.value))


# ---------------------------------------------------------------- helpers.py

def check_helper_references(tree: ast.Module, public: set[str]) -> list[Violation]:
    """Public helpers reached by name from another helper, a private function or a class, directly or
    through a module-level alias or table; and run-time lookups by name."""
    aliases = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            reached = _names(node.value) & public
            if reached:
                aliases.update({name: sorted(reached) for name in bound_names(node)})
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            own = {node.name} if node.name in public else set()
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                    # direct calls from functions are the direct-call rule's; from a class they are this one's
                    if inner.id in public - own and (isinstance(node, ast.ClassDef) or not _is_direct_call(node, inner)):
                        found.append(_reference(node, inner.id, inner.lineno, "refers to"))
                    elif inner.id in aliases:
                        found.append(_reference(node, f"{inner.id} (holding {', '.join(aliases[inner.id])})",
                                                inner.lineno, "reaches helpers through"))
                lookup = _dynamic_lookup(inner) or _self_import(inner)
                if lookup:
                    found.append(Violation("helper-dynamic-lookup", "helpers.py", inner.lineno,
                                           f"{node.name} uses {lookup}, which can reach any helper by name; "
                                           f"call private _functions directly instead"))
    for node in tree.body:
        lookup = _self_import(node)
        if lookup:
            found.append(Violation("helper-dynamic-lookup", "helpers.py", node.lineno,
                                   f"helpers.py uses {lookup}; helpers must not reach one another"))
    return found


def _is_direct_call(scope: ast.AST, name: ast.Name) -> bool:
    """A plain call `name(...)`: the direct-call rule reports those already."""
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(scope))


def _self_import(node: ast.AST) -> str:
    if isinstance(node, ast.Import) and any(a.name == "helpers" for a in node.names):
        return "import helpers"
    if isinstance(node, ast.ImportFrom) and node.module == "helpers":
        return "from helpers import ..."
    return ""


def _reference(scope: ast.AST, target: str, line: int, how: str) -> Violation:
    kind = "class" if isinstance(scope, ast.ClassDef) else (
        "private function" if scope.name.startswith("_") else "helper")
    return Violation("helper-reference", "helpers.py", line,
                     f"{kind} {scope.name} {how} {target}; helpers must not call one another in any way (alias, "
                     f"table, lambda, default argument): move the shared logic into a private _function")


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


# ---------------------------------------------------------------- prompt_template.py

def check_menu_mutation(tree: ast.Module, menus: set[str]) -> list[Violation]:
    """No change to a module-level action menu after its definition."""
    found = []
    assigned: dict[str, int] = {}
    for node in tree.body:
        for name in bound_names(node) & menus:
            assigned[name] = assigned.get(name, 0) + 1
            if assigned[name] > 1 or isinstance(node, ast.AugAssign):
                found.append(_mutated(name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS \
                and _root_name(node.func.value) in menus:
            found.append(_mutated(_root_name(node.func.value), node.lineno))
        elif isinstance(node, (ast.Assign, ast.Delete, ast.AugAssign)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            found += [_mutated(_root_name(t), node.lineno) for t in targets
                      if isinstance(t, ast.Subscript) and _root_name(t) in menus]
    return found


def _mutated(name: str, line: int) -> Violation:
    return Violation("action-menu-mutated", "prompt_template.py", line,
                     f"the action menu {name} is changed after it is defined, so the names the model sees are not "
                     f"the names that were checked; write the final menu once")


# ---------------------------------------------------------------- train.py

def check_dispatch_uses_helpers(tree: ast.Module, helpers: set[str]) -> list[Violation]:
    modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
               if a.name == "helpers"}
    imported = {a.asname or a.name: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module == "helpers" for a in n.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _root_name(node) in modules and node.attr != OBSERVATION_HELPER:
            return []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars") \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in modules:
            return []
        if isinstance(node, ast.Name) and imported.get(node.id) in helpers:
            return []
        if isinstance(node, ast.ImportFrom) and node.module == "helpers" and any(a.name == "*" for a in node.names):
            return []
    unbound = next((n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "helpers"
                    and isinstance(n.ctx, ast.Load)), None)
    if unbound is not None and not modules:
        return [Violation("dispatch-bypasses-helpers", "train.py", unbound.lineno,
                          "train.py uses the name `helpers` but never imports it, so every use raises NameError; "
                          "add `import helpers` to the imports")]
    return [Violation("dispatch-bypasses-helpers", "train.py", None,
                      f"train.py never calls an action helper of helpers.py ({', '.join(sorted(helpers))}); the "
                      f"parsed JSON action must call the named helper as NAME(env, agent_id, **args)")]


def config_holders(tree: ast.AST) -> set[str]:
    """Names that hold the GRPOConfig: parameters annotated with it, names assigned GRPOConfig(...)."""
    holders = {a.arg for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               for a in n.args.args + n.args.kwonlyargs if a.annotation is not None
               and "GRPOConfig" in ast.unparse(a.annotation)}
    return holders | {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                      and ast.unparse(n.value.func).endswith("GRPOConfig")
                      for t in n.targets if isinstance(t, ast.Name)}


def check_config_reads(tree: ast.Module, fields: set[str], members: set[str]) -> list[Violation]:
    """`config.x` and `getattr(config, "x", ...)` on a name that holds the GRPOConfig."""
    holders = config_holders(tree)
    known = fields | members
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in holders \
                and isinstance(node.ctx, ast.Load):
            name = node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in holders \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value
        if name is not None and name not in known and not name.startswith("__"):
            found.append(Violation("config-field-unknown", "train.py", node.lineno,
                                   f"GRPOConfig has no field {name!r}; use one of its fields: "
                                   f"{', '.join(sorted(fields))}"))
    return found


_SETTERS = {"setattr", "delattr", "__setattr__", "__delattr__"}


def check_config_writes(text: str) -> list[Violation]:
    """No CUSTOMIZE code of train.py writes to the config it is given: `config.x = ...`, `setattr(config, ...)`,
    `object.__setattr__(config, ...)`, `vars(config)[...] = ...`, `config.__dict__.update(...)`."""
    found = []
    for section in read_sections(text):
        tree = _parse(section.text) if section.kind == CUSTOMIZE else None
        holders = config_holders(tree) if tree else set()
        for node in ast.walk(tree) if holders else []:
            written = None
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                written = next((ast.unparse(t) for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))
                                and _holder_root(t, holders)), None)
            elif isinstance(node, ast.Call):
                callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if callee in _SETTERS and any(isinstance(a, ast.Name) and a.id in holders for a in node.args[:2]):
                    written = ast.unparse(node)
                elif callee in MUTATORS and isinstance(node.func, ast.Attribute) \
                        and _holder_root(node.func.value, holders):
                    written = ast.unparse(node)
            if written:
                found.append(Violation("config-written-at-run-time", "train.py", section.start_line + node.lineno,
                                       f"{written} writes the training config from CUSTOMIZE code; values reach "
                                       f"train.py through grpo_config.py or the command line (the orchestrator sets "
                                       f"and checks them), never from the code: read the config, do not change it"))
    return found


def _holder_root(node: ast.expr, holders: set[str]) -> bool:
    """`config.x`, `config.__dict__[...]`, `vars(config)[...]`: an expression rooted in a config holder."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "vars" and node.args:
        node = node.args[0]
    return isinstance(node, ast.Name) and node.id in holders


def config_members(config_text: str) -> tuple[set[str], set[str]]:
    """(fields, other members such as methods and properties) of GRPOConfig."""
    tree = _parse(config_text)
    classes = [n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig"]
    if not classes:
        return set(), set()
    body = classes[-1].body
    fields = {n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    members = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return fields, members | {"__dataclass_fields__"}


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        return None
