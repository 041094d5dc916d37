"""Static guards over a generated folder: the brief's rules, as code.

Every rule is a pure function over file texts that returns a list of `Violation`s (empty: the rule
holds). Nothing is imported or executed: the rules use `compile`, the AST and the template's
section markers only, so whatever needs running code (that the prompt builders really return chat
messages, that a helper really plays) is left to the import and runtime checks. `check_folder` is
the only function that reads the disk. Line numbers refer to the checked file. Each rule names the
line of BRIEF.md it enforces; a rule the brief does not ask for reports a warning, never a failure.

Rule ids, cheapest first:

- file-missing: each generated file and each copy of a source-of-truth file exists.
- syntax-error: each .py file compiles.
- protected-file-changed: env_move.py and grpo_template.py are byte-identical to the source of
  truth ("Do NOT modify env_move.py, or grpo_template.py").
- config-class-missing, config-fields-changed, config-field-type-changed, config-code-changed: grpo_config.py
  keeps class GRPOConfig with exactly the source's field names, each with its annotation and the kind of its
  default, and is otherwise the source's code with other literal values (rules/config_code.py) ("Do NOT add
  or delete parameters in grpo_config.py, but you can change values": values, not types, not code).
- markers-broken, sections-changed: train.py has the template's sections, in the template's order,
  each opened by the template's own marker line ("Replace every # === CUSTOMIZE === section").
- generic-section-changed: each GENERIC section equals the template's, byte for byte ("Keep all
  # === GENERIC — DO NOT MODIFY === sections unchanged").
- customize-hole-unfilled: each CUSTOMIZE section holds code that is neither empty, nor the
  template's text, nor a placeholder (`pass`, `...`, `raise NotImplementedError`) ("Replace every
  # === CUSTOMIZE === section with real implementations").
- outside-sections-changed (warning): text outside every section (a docstring above the first
  marker, text after an end marker) differs from the template's.
- prompt-builder-missing, prompt-builder-signature: create_thinking_prompt(obs_text, agent_id) and
  create_single_stage_prompt(obs_text, thinking_response, agent_id) exist and take those arguments
  positionally, with no return annotation that surely says something else than chat messages once
  resolved as typing.get_type_hints would ("Two prompt-building functions that return list[dict] with
  role/content keys").
- unknown-action: every action name prompt_template.py offers (a JSON example's "action" value, an
  entry of a list or dict of names that are mostly helpers' names) is an action helper in helpers.py:
  a callable it exposes under that name (rules/exposed.py) ("When fixing prompt_template.py, ensure
  action names match the functions in helpers.py").
- observation-to-text-missing: helpers.py exposes observation_to_text(env, agent_id).
- helper-signature: every action helper takes the env and the agent id first and its further
  parameters by name, so it is callable from {"action": NAME, "agent_id": I, "args": {...}} as
  NAME(env, agent_id, **args); a return annotation, if any, does not surely say something else than
  bool ("Functions are called via JSON", "returns whether the task completed").
- helper-calls-helper: no action helper (nor private utility) calls a public helper ("Functions
  must be independent — no helper calling another helper").
- eval-of-model-output, config-from-environment (rules/inputs.py): no generated code runs text as
  Python, or reads a config value from the environment.
- import-machinery, source-file-written (rules/machinery.py): no generated code loads, reloads or redirects
  modules by hand, or writes a file of the source of truth.
"""

from __future__ import annotations

import ast
import difflib
import re
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path

from orchestrator.sources.config_file import CONFIG_CLASS
from orchestrator.rules.config_code import check_config_code
from orchestrator.rules.exposed import (OBSERVATION_HELPER, Exposed, exposed_callables, helper_names,
                                        module_statements, static_action_helpers, unresolved_names)
from orchestrator.rules.inputs import check_config_inputs, check_inputs, generic_lines
from orchestrator.rules.integrity import (bound_names, check_config_reads, check_config_writes,
                                          check_dispatch_uses_helpers, check_generic_rebinding,
                                          check_helper_references, check_menu_mutation, check_protected_patches,
                                          check_shadowing, check_shadowing_files, config_members)
from orchestrator.rules.launch import check_launch
from orchestrator.rules.machinery import check_machinery
from orchestrator.rules.violation import Violation
from orchestrator.sources.template import (CUSTOMIZE, GENERIC, Section, TemplateError, outside_lines, read_sections,
                                   read_template, split_lines)

PROTECTED_FILES = ("env_move.py", "grpo_template.py")
HELPER_README = "helper_readme.md"  # rendered from helpers.py by code (orchestrator/rules/helper_docs.py), never asked for
GENERATED_FILES = ("helpers.py", HELPER_README, "prompt_template.py", "train.py", "launch_training.sh")
SOURCE_FILES = ("env_move.py", "grpo_config.py", "grpo_template.py")
FOLDER_FILES = GENERATED_FILES + SOURCE_FILES

PROMPT_BUILDERS = {
    "create_thinking_prompt": ("obs_text", "agent_id"),
    "create_single_stage_prompt": ("obs_text", "thinking_response", "agent_id"),
}
DIFF_LINES = 40  # lines of a unified diff shown in one violation

_Function = ast.FunctionDef | ast.AsyncFunctionDef


# ---------------------------------------------------------------- protected files and config

def check_protected(name: str, text: str, source_text: str) -> list[Violation]:
    """A protected file must equal its source of truth exactly (compared as given)."""
    if text == source_text:
        return []
    line = _first_difference(split_lines(text), split_lines(source_text)) + 1
    return [Violation("protected-file-changed", name, line,
                      f"{name} is protected but differs from source_of_truth/{name} at line {line}; restore it "
                      f"byte-identical from source_of_truth and make the change in a generated file instead")]


def check_config(text: str, source_text: str) -> list[Violation]:
    """GRPOConfig keeps the source's set of field names (annotated class attributes); values may change."""
    syntax = check_syntax("grpo_config.py", text)
    if syntax:
        return syntax
    expected = config_fields(ast.parse(source_text))
    if expected is None:
        raise ValueError(f"source_of_truth/grpo_config.py has no class {CONFIG_CLASS}")
    actual = config_fields(ast.parse(text))
    if actual is None:
        return [Violation("config-class-missing", "grpo_config.py", None,
                          f"class {CONFIG_CLASS} is missing; restore it from source_of_truth/grpo_config.py "
                          "(field values may change, field names may not)")]
    added = [name for name in actual if name not in expected]
    removed = [name for name in expected if name not in actual]
    if not added and not removed:  # then code of its own, a value read from the environment the most telling
        return (_check_field_types(ast.parse(text), ast.parse(source_text))
                or check_config_inputs(text, source_text) or check_config_code(text, source_text))
    changes = []
    if added:
        changes.append(f"added {', '.join(f'{n!r} (line {actual[n]})' for n in added)}")
    if removed:
        changes.append(f"removed {', '.join(repr(n) for n in removed)}")
    return [Violation("config-fields-changed", "grpo_config.py", actual[added[0]] if added else None,
                      f"{CONFIG_CLASS}'s field names changed: {'; '.join(changes)}; a run may change field values, "
                      f"never the set of names: restore the names of source_of_truth/grpo_config.py")]


def _check_field_types(tree: ast.Module, source_tree: ast.Module) -> list[Violation]:
    """config-field-type-changed: each field keeps the source's annotation and the kind of its default
    (an int may become a float where the field is a float); only the value may change."""
    found = []
    source = {node.target.id: node for node in _config_nodes(source_tree)}
    for node in _config_nodes(tree):
        want = source.get(node.target.id)
        if want is None:
            continue
        got_type, want_type = ast.unparse(node.annotation), ast.unparse(want.annotation)
        got_kind, want_kind = _default_kind(node), _default_kind(want)
        kind_changed = None not in (got_kind, want_kind) and got_kind != want_kind and not (
            {got_kind, want_kind} == {"int", "float"} and "float" in want_type)
        if got_type != want_type or kind_changed:
            what = f"annotated {got_type}" if got_type != want_type else f"a {got_kind} default"
            found.append(Violation("config-field-type-changed", "grpo_config.py", node.lineno,
                                   f"field {node.target.id!r} is {what}, but source_of_truth/grpo_config.py has it "
                                   f"{want_type} = a {want_kind or 'value'}; change only its value, never its type "
                                   f"(train.py and the command line parse it by that type)"))
    return found


def _config_nodes(tree: ast.Module) -> list[ast.AnnAssign]:
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == CONFIG_CLASS]
    if not classes:
        return []
    return [node for node in classes[-1].body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)]


def _default_kind(node: ast.AnnAssign) -> str | None:
    """The type name of a field's literal default (`= 3`, `= field(default=3)`), None when not a literal."""
    value = node.value
    if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field":
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    if value is None:
        return None
    try:
        literal = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return None if literal is None else type(literal).__name__


def config_fields(tree: ast.Module) -> dict[str, int] | None:
    """Field name -> line, in order; None without a top-level class GRPOConfig."""
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == CONFIG_CLASS]
    if not classes:
        return None
    return {node.target.id: node.lineno for node in classes[-1].body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


# ---------------------------------------------------------------- train.py

def check_train(text: str, template_text: str) -> list[Violation]:
    """train.py has the template's sections in order: GENERIC ones byte-identical, CUSTOMIZE ones filled.

    Sections are paired by position. The template is the researcher's and is trusted: a template
    whose markers cannot be read raises TemplateError (bad input, reported before any run).
    """
    expected = read_template(template_text)
    try:
        actual = read_sections(text)
    except TemplateError as error:
        return [Violation("markers-broken", "train.py", error.line,
                          f"section markers are broken: {error.problem}; keep the marker lines of grpo_template.py")]
    if [s.kind for s in actual] != [s.kind for s in expected]:
        return [Violation("sections-changed", "train.py", None,
                          f"train.py's sections are [{_layout(actual)}] but grpo_template.py's are "
                          f"[{_layout(expected)}]; keep every marker line of the template, in its order, and "
                          f"write code only inside the CUSTOMIZE sections")]
    violations = []
    for got, want in zip(actual, expected):
        if got.marker != want.marker:
            violations.append(Violation(
                "markers-broken", "train.py", got.start_line,
                f"marker line {got.marker.strip()!r} differs from the template's {want.marker.strip()!r} "
                f"(line {want.start_line}); write it exactly as in grpo_template.py"))
        elif want.kind == GENERIC and got.text != want.text:
            violations.append(_generic_changed(got, want))
        elif want.kind == CUSTOMIZE:
            reason = unfilled_reason(got.text, want.text)
            if reason is not None:
                violations.append(Violation(
                    "customize-hole-unfilled", "train.py", got.start_line,
                    f"{want.describe()} is not filled: {reason}; replace it with a real implementation of what "
                    f"the template asks there"))
    if not violations:
        violations += _check_outside(text, actual, template_text, expected)
    return violations


def _layout(sections: list[Section]) -> str:
    return ", ".join(f"{s.kind.upper()}@{s.start_line}" for s in sections) or "none"


def _generic_changed(got: Section, want: Section) -> Violation:
    got_lines, want_lines = split_lines(got.text), split_lines(want.text)
    index = _first_difference(got_lines, want_lines)
    diff = list(difflib.unified_diff(want_lines, got_lines, fromfile="grpo_template.py", tofile="train.py",
                                     lineterm="", n=1))
    shown = "".join(line if line.endswith("\n") else line + "\n" for line in diff[:DIFF_LINES])
    more = f"... {len(diff) - DIFF_LINES} more diff lines\n" if len(diff) > DIFF_LINES else ""
    return Violation("generic-section-changed", "train.py", got.start_line + 1 + index,
                     f"{want.describe()} was changed; restore it exactly from grpo_template.py (diff, template "
                     f"first):\n{shown}{more}".rstrip("\n"))


_PLACEHOLDER_CALLS = {"NotImplementedError"}


def unfilled_reason(got: str, want: str) -> str | None:
    """Why a CUSTOMIZE section still holds no real code, or None when it does."""
    code = _code_lines(got)
    if not code:
        return "it holds no code"
    if _same_code(got, want):
        return "it is still the template's text"
    tree = _parse_block(got)
    if tree is None:
        return None  # the syntax check reports a broken file; a hole that cannot parse alone is judged at run time
    if all(_is_placeholder(node) for node in tree.body):
        return "it holds only placeholder statements (pass, ..., raise NotImplementedError)"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and all(
                _is_placeholder(statement) for statement in _without_docstring(node.body)):
            return f"{node.name}() still has a placeholder body"
    return None


def _parse_block(text: str) -> ast.Module | None:
    try:
        return ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        return None


def _same_code(a: str, b: str) -> bool:
    tree_a, tree_b = _parse_block(a), _parse_block(b)
    if tree_a is not None and tree_b is not None:
        return ast.dump(tree_a) == ast.dump(tree_b)
    return [line for _, line in _code_lines(a)] == [line for _, line in _code_lines(b)]


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _is_placeholder(node: ast.stmt) -> bool:
    if isinstance(node, ast.Pass):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return node.value.value is Ellipsis or isinstance(node.value.value, str)
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return isinstance(exc, ast.Name) and exc.id in _PLACEHOLDER_CALLS
    return False


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(0-based offset, stripped line) for each line that is neither blank nor a comment."""
    return [(offset, line.strip()) for offset, line in enumerate(split_lines(text))
            if line.strip() and not line.strip().startswith("#")]


def _check_outside(text: str, sections: list[Section], template_text: str,
                   template_sections: list[Section]) -> list[Violation]:
    got = outside_lines(text, sections)
    want = [line for _, line in outside_lines(template_text, template_sections)]
    index = _first_difference([line for _, line in got], want)
    if index == len(got) == len(want):
        return []
    return [Violation("outside-sections-changed", "train.py", got[index][0] if index < len(got) else None,
                      f"the text outside the sections differs from grpo_template.py: expected "
                      f"{_quote_at(want, index)}, found {_quote_at([line for _, line in got], index)}; keep the "
                      f"template's text outside its sections", severity="warning")]


# ---------------------------------------------------------------- prompt_template.py

def check_prompt_template(text: str, helpers_text: str) -> list[Violation]:
    """Both prompt builders exist and take the brief's arguments; every offered action is a helper.

    A builder, like a helper, is whatever callable the module exposes under that name (rules/exposed.py).
    That a builder returns list[dict] with "role" and "content" cannot be proven from the AST: only a
    return annotation, when present, is checked, resolved as typing.get_type_hints would (the
    `if TYPE_CHECKING:` block included), and only one that is surely something else is refused; the
    import and runtime checks call the builders.
    """
    syntax = check_syntax("prompt_template.py", text) + check_syntax("helpers.py", helpers_text)
    if syntax:
        return syntax
    tree, helpers_tree = ast.parse(text), ast.parse(helpers_text)
    builders = exposed_callables(tree)
    helpers, names = set(static_action_helpers(helpers_tree)), helper_names(helpers_tree)
    violations = (_check_offered_actions(tree, helpers, names)
                  + check_menu_mutation(tree, action_menus(tree, names)))
    types = type_bindings(tree)
    for name, params in PROMPT_BUILDERS.items():
        builder = builders.get(name)
        if builder is None:
            violations.append(Violation(
                "prompt-builder-missing", "prompt_template.py", None,
                f"no top-level function {name}({', '.join(params)}); define it, returning chat messages "
                f"[{{\"role\": ..., \"content\": ...}}, ...]"))
        else:
            violations += _check_builder(builder, params, types)
    return violations


_JSON_ACTION = re.compile(r"""["']action["']\s*:\s*["']([A-Za-z_]\w*)["']""")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
# what a format description puts where a name goes: {"action": "action_name", ...} offers no action
_PLACEHOLDERS = {"name", "action", "action_name", "helper", "helper_name", "function", "function_name", "func",
                 "tool", "tool_name", "your_action", "some_action"}


def offered_actions(tree: ast.AST, helpers: set[str]) -> list[tuple[str, int]]:
    """(name, line) of each action name the prompts offer the model.

    Two sources: the "action" value of any JSON-like example in a string (placeholders such as
    "action_name" or "NAME" aside), and the names in any list, tuple, set or dict-keys literal of
    names that are mostly helpers' names (an action menu).
    """
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(name, node.lineno) for name in _JSON_ACTION.findall(node.value)
                      if name.lower() not in _PLACEHOLDERS and not name.isupper()]
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            names = [(e.value, e.lineno) for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)
                     and _IDENTIFIER.match(e.value)]
            if 2 * sum(name in helpers for name, _ in names) > len(names):
                found += names
    return found


def action_menus(tree: ast.Module, helpers: set[str]) -> set[str]:
    """Module-level names first bound to a literal menu of action names."""
    menus = set()
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, (ast.List, ast.Tuple, ast.Set, ast.Dict)) and offered_actions(value, helpers):
            menus |= bound_names(node)
    return menus


def _check_offered_actions(tree: ast.Module, helpers: set[str], names: set[str]) -> list[Violation]:
    """Each offered name is in `names` (the helpers, and what may be one); the message lists the helpers."""
    violations, seen = [], set()
    for name, line in offered_actions(tree, names):
        if name in names or name in seen:
            continue
        seen.add(name)
        violations.append(Violation(
            "unknown-action", "prompt_template.py", line,
            f"the prompt offers action {name!r}, which is not an action helper in helpers.py; the action "
            f"helpers are: {', '.join(sorted(helpers)) or '(none)'}; use one of them or define {name} in helpers.py"))
    return violations


def _check_builder(builder: Exposed, params: tuple[str, ...], types: dict[str, ast.AST | None]) -> list[Violation]:
    violations = []
    args = builder.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults)
    required_keywords = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if not (required <= len(params) <= len(positional) or args.vararg) or required_keywords:
        violations.append(Violation(
            "prompt-builder-signature", "prompt_template.py", builder.line,
            f"{builder.name}({ast.unparse(args)}) must be callable as {builder.name}({', '.join(params)}): "
            f"exactly {len(params)} positional arguments and nothing else required"))
    if builder.returns is not None and type_verdict(builder.returns, types, MESSAGES) is False:
        violations.append(Violation(
            "prompt-builder-signature", "prompt_template.py", builder.line,
            f"{builder.name} is annotated to return {_quote(ast.unparse(builder.returns))} but must return chat "
            f"messages [{{\"role\": ..., \"content\": ...}}]; annotate it list[dict[str, str]] or drop the annotation"))
    return violations


# ---------------------------------------------------------------- annotations, as typing.get_type_hints reads them

MESSAGES, MESSAGE, BOOL = "messages", "message", "bool"  # a list of chat messages; one message (a dict); a bool
_TYPING_MODULES = ("typing", "typing_extensions", "collections.abc", "collections", "builtins")
_LISTS = {"list", "List", "Sequence", "MutableSequence"}
_DICTS = {"dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict", "TypedDict"}
_ANYTHING = {"Any", "object"}
_SURELY_NOT = {"str", "bytes", "int", "float", "complex", "bool", "None", "NoneType", "tuple", "Tuple", "set", "Set",
               "frozenset", "FrozenSet", "Literal", "Iterator", "Generator", "Callable"}
_MOST_ALIASES = 12  # alias chains followed; a longer one (or a cycle) is not judged


def type_bindings(tree: ast.Module) -> dict[str, ast.AST | None]:
    """What each module-level name means in an annotation: an alias's value (`Name = value`, `Name: TypeAlias =
    value`, `type Name = value`), a class, a name imported from typing (as that name), or None (imported from
    elsewhere: unknown). Read as typing.get_type_hints resolves names, the `if TYPE_CHECKING:` block included;
    the last binding wins."""
    found: dict[str, ast.AST | None] = {}
    for node in module_statements(tree.body, type_checking=True):
        if isinstance(node, ast.Assign):
            found.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
        elif type(node).__name__ == "TypeAlias":  # `type Name = value` (Python 3.12)
            found[node.name.id] = node.value
        elif isinstance(node, ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            typing = node.module in _TYPING_MODULES
            found.update({a.asname or a.name: ast.Name(a.name) if typing else None for a in node.names})
        elif isinstance(node, ast.Import):
            found.update({(a.asname or a.name).split(".")[0]: None for a in node.names
                          if a.name not in _TYPING_MODULES})
    return found


def type_verdict(annotation: ast.AST, types: dict[str, ast.AST | None], want: str, depth: int = 0) -> bool | None:
    """Whether `annotation` says `want` (MESSAGES, MESSAGE or BOOL): True, False (surely something else), or None
    (it cannot be told statically: an imported name, an unknown class)."""
    if depth > _MOST_ALIASES:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return False
    base, params = annotation, []
    if isinstance(annotation, ast.Subscript):
        base = annotation.value
        params = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union_verdict([annotation.left, annotation.right], types, want, depth)
    name = _type_name(base)
    if name in ("Optional", "Union"):
        return _union_verdict(params, types, want, depth)
    if name == "Annotated" and params:
        return type_verdict(params[0], types, want, depth + 1)
    if isinstance(base, ast.Name) and name in types:
        meaning = types[name]
        if isinstance(meaning, ast.ClassDef):
            return _class_verdict(meaning, want)
        if isinstance(meaning, ast.Call):  # TypedDict("Message", {...})
            return (want == MESSAGE) if _type_name(meaning.func) == "TypedDict" else None
        if meaning is None or (isinstance(meaning, ast.Name) and meaning.id == name):
            return None if meaning is None else _named_verdict(name, params, types, want, depth)
        return type_verdict(meaning, types, want, depth + 1)
    return None if name is None else _named_verdict(name, params, types, want, depth)


def _named_verdict(name: str, params: list[ast.expr], types: dict, want: str, depth: int) -> bool | None:
    """A builtin or typing name, with its parameters."""
    if name in _ANYTHING:
        return True
    if want == MESSAGES and name in _LISTS:
        return type_verdict(params[0], types, MESSAGE, depth + 1) is not False if params else True
    if (want == MESSAGE and name in _DICTS) or (want == BOOL and name == "bool"):
        return True
    if name in _SURELY_NOT | _LISTS | _DICTS:
        return False
    return None


def _union_verdict(members: list[ast.expr], types: dict, want: str, depth: int) -> bool | None:
    """A union says `want` when each member but None does (None aside: the probe sees what really returns)."""
    verdicts = [type_verdict(m, types, want, depth + 1) for m in members
                if not (isinstance(m, ast.Constant) and m.value is None) and _type_name(m) != "None"]
    if not verdicts or False in verdicts:
        return False
    return True if all(verdicts) else None


def _class_verdict(cls: ast.ClassDef, want: str) -> bool | None:
    bases = {_type_name(b) for b in cls.bases}
    if bases & _DICTS:
        return want == MESSAGE
    if bases & {"list", "List"}:
        return want == MESSAGES
    return False if not bases or bases <= {"object"} else None  # a plain class; an unknown base: not told


def _type_name(node: ast.AST) -> str | None:
    """`List` of `List`, `typing.List` and `collections.abc.Sequence`'s last part; None for another module's name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) in (*_TYPING_MODULES, "t"):
        return node.attr
    if isinstance(node, ast.Constant) and node.value is None:
        return "None"
    return None


# ---------------------------------------------------------------- helpers.py

def check_helpers(text: str) -> list[Violation]:
    """observation_to_text(env, agent_id) exists; action helpers are callable as NAME(env, agent_id, **args).

    Action helpers are the callables helpers.py exposes under a public name (no leading "_"; see
    rules/exposed.py), observation_to_text aside. Helpers must not call one another: a call is an
    `ast.Call` whose func is a bare name, and a call from a top-level function to any other public
    helper, observation_to_text included, is a violation. Private `_` functions are shared utilities
    that anyone may call; so that they cannot smuggle such a call in, a private function calling a
    public helper is a violation too.
    """
    syntax = check_syntax("helpers.py", text)
    if syntax:
        return syntax
    tree = ast.parse(text)
    exposed, unresolved = exposed_callables(tree), unresolved_names(tree)
    violations = []
    observe = exposed.get(OBSERVATION_HELPER)
    if observe is None and OBSERVATION_HELPER not in unresolved:
        violations.append(Violation(
            "observation-to-text-missing", "helpers.py", None,
            f"no top-level function {OBSERVATION_HELPER}(env, agent_id); define it, returning the text one "
            f"agent sees this turn, with coordinates"))
    elif observe is not None:
        violations += _check_observation_signature(observe)
    public = set(exposed)  # an unresolved name may be a constant: the probe sees a helper reached at run time
    types = type_bindings(tree)
    for name, helper in exposed.items():
        if name != OBSERVATION_HELPER:
            violations += _check_helper_signature(helper, types)
    for name, function in top_level_functions(tree).items():
        violations += _check_helper_calls(function, public - {name})
    return violations + check_helper_references(tree, public)


def top_level_functions(tree: ast.Module) -> dict[str, _Function]:
    """Top-level functions by name; a later definition replaces an earlier one, as at runtime."""
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _check_observation_signature(function: Exposed) -> list[Violation]:
    args = function.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults) + sum(d is None for d in args.kw_defaults)
    if len(positional) >= 2 and required <= 2:
        return []
    return [Violation("helper-signature", "helpers.py", function.line,
                      f"{OBSERVATION_HELPER}({ast.unparse(args)}) is called as {OBSERVATION_HELPER}(env, agent_id): "
                      f"take (env, agent_id) first and give any further parameter a default")]


def _check_helper_signature(function: Exposed, types: dict[str, ast.AST | None]) -> list[Violation]:
    args = function.args
    call = f"{function.name}(env, agent_id, **args)"
    if len(args.posonlyargs + args.args) < 2:
        return [Violation("helper-signature", "helpers.py", function.line,
                          f"action helper {function.name}({ast.unparse(args)}) must take the env and the agent id as "
                          f"its first two parameters: it is called as {call}")]
    problems = [f"parameter {a.arg!r} is positional-only (before '/')" for a in args.posonlyargs[2:]]
    if args.vararg is not None:
        problems.append(f"it takes *{args.vararg.arg}")
    if function.returns is not None and type_verdict(function.returns, types, BOOL) is False:
        problems.append(f"it is annotated to return {ast.unparse(function.returns)}, but a helper returns bool "
                        f"(whether its task completed)")
    if not problems:
        return []
    return [Violation("helper-signature", "helpers.py", function.line,
                      f"action helper {function.name}: {'; '.join(problems)}; it is called from the JSON form as "
                      f"{call} and returns bool")]


def _check_helper_calls(function: _Function, public: set[str]) -> list[Violation]:
    kind = "private function" if function.name.startswith("_") else "action helper"
    calls = sorted((node.lineno, node.func.id) for node in ast.walk(function)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in public)
    return [Violation("helper-calls-helper", "helpers.py", line,
                      f"{kind} {function.name} calls public helper {callee}(); helpers must not call one "
                      f"another: move the shared logic into a private _function that both call")
            for line, callee in calls]


# ---------------------------------------------------------------- syntax, all rules, folder

def check_syntax(name: str, text: str) -> list[Violation]:
    """A .py file must compile; other files are not checked here (a .sh is never run)."""
    if not name.endswith(".py"):
        return []
    try:
        compile(text, name, "exec", dont_inherit=True)
    except SyntaxError as error:
        where = f" in {_quote(error.text)}" if error.text and error.text.strip() else ""
        return [Violation("syntax-error", name, error.lineno,
                          f"{name} does not compile: {_one_line(str(error.msg))}{where}; fix the syntax")]
    except ValueError as error:  # null bytes, or bytes that are not UTF-8
        return [Violation("syntax-error", name, None,
                          f"{name} cannot be compiled: {_one_line(str(error))}; write plain UTF-8 Python")]
    return []


# the folder files each file's rules read (a file's own rules read at least the file itself)
_RULE_INPUTS = {"prompt_template.py": ("prompt_template.py", "helpers.py"), "train.py": ("train.py", "helpers.py")}


def check_all(files: dict[str, str | None], sources: dict[str, str],
              *, only: Iterable[str] | None = None) -> list[Violation]:
    """Every rule over a generated folder's texts: missing files, then syntax, then the rules.

    `files` maps a name of FOLDER_FILES to its text (None or absent: missing); `sources` maps each of
    SOURCE_FILES to the source of truth's text. `only` restricts the check to the rules of those
    files (plus the presence and syntax of what those rules read). A rule runs only when every file
    it reads is present and compiles, so one broken file is reported once. Protected copies are only
    compared with their source: identical text compiles.
    """
    selected = set(FOLDER_FILES) if only is None else set(only)
    unknown = selected - set(FOLDER_FILES)
    if unknown:
        raise ValueError(f"unknown file(s) {sorted(unknown)}; choose from {list(FOLDER_FILES)}")
    needed = [name for name in FOLDER_FILES
              if any(name in _RULE_INPUTS.get(owner, (owner,)) for owner in selected)]
    present = {name: text for name in needed if (text := files.get(name)) is not None}
    violations = [_missing(name) for name in needed if name not in present]
    usable = set(present)
    for name, text in present.items():
        found = [] if name in PROTECTED_FILES else check_syntax(name, text)
        if found:
            usable.discard(name)
            violations += found
    rules: dict[str, Callable[[], list[Violation]]] = {
        "env_move.py": lambda: check_protected("env_move.py", present["env_move.py"], sources["env_move.py"]),
        "grpo_template.py": lambda: check_protected(
            "grpo_template.py", present["grpo_template.py"], sources["grpo_template.py"]),
        "grpo_config.py": lambda: check_config(present["grpo_config.py"], sources["grpo_config.py"]),
        "helpers.py": lambda: check_helpers(present["helpers.py"]),
        "prompt_template.py": lambda: check_prompt_template(present["prompt_template.py"], present["helpers.py"]),
        "train.py": lambda: check_train(present["train.py"], sources["grpo_template.py"]) + check_train_integrity(
            present["train.py"], sources["grpo_template.py"], present["helpers.py"], sources["grpo_config.py"]),
        "launch_training.sh": lambda: check_launch(present["launch_training.sh"]),
    }
    for name, rule in rules.items():
        if name in selected and all(n in usable for n in _RULE_INPUTS.get(name, (name,))):
            violations += rule()
    for name in set(GENERATED_FILES) & selected & usable:
        if name.endswith(".py"):
            tree = ast.parse(present[name])
            violations += (check_protected_patches(name, tree) + check_shadowing(name, tree)
                           + check_inputs(name, tree, present[name])
                           + check_machinery(name, tree, generic_lines(present[name])))
    return violations


def check_train_integrity(text: str, template_text: str, helpers_text: str, config_text: str) -> list[Violation]:
    """train.py keeps the GENERIC objects as they are, dispatches through the helpers, reads real config fields."""
    tree = ast.parse(text)
    fields, members = config_members(config_text)
    return (check_generic_rebinding(text, template_text)
            + check_dispatch_uses_helpers(tree, helper_names(ast.parse(helpers_text)))
            + check_config_reads(tree, fields, members) + check_config_writes(text))


def check_folder(folder: Path, source_of_truth: Path, only: Iterable[str] | None = None) -> list[Violation]:
    """check_all over the files of `folder` against `source_of_truth`; the only function that reads disk."""
    files = {name: read_text(folder / name) if (folder / name).is_file() else None for name in FOLDER_FILES}
    sources = {name: read_text(source_of_truth / name) for name in SOURCE_FILES}
    return check_all(files, sources, only=only) + check_shadowing_files(folder)


def read_text(path: Path) -> str:
    # bytes, not read_text: universal newlines would hide a CRLF change to a protected file
    return path.read_bytes().decode("utf-8", errors="surrogateescape")


def _missing(name: str) -> Violation:
    fix = (f"copy it unchanged from source_of_truth/{name}" if name in SOURCE_FILES
           else "it is rendered from helpers.py's docstrings once helpers.py compiles: edit helpers.py"
           if name == HELPER_README else "generate it")
    return Violation("file-missing", name, None, f"{name} is missing from the generated folder; {fix}")


# ---------------------------------------------------------------- text utilities

def _first_difference(a: list[str], b: list[str]) -> int:
    """Index of the first differing item; len of the shorter list when one is a prefix of the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _quote_at(lines: list[str], index: int) -> str:
    return _quote(lines[index], limit=200) if index < len(lines) else "the end of the text"


def _quote(text: str, limit: int = 80) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _one_line(text: str) -> str:
    return " ".join(text.split())
