"""Static guards over a generated folder: the seed's rules, as code.

Every rule is a pure function over file texts that returns a list of `Violation`s (empty: the rule
holds). Nothing is imported or executed: the rules use `compile`, the AST and the section markers
only, so whatever needs running code (that the prompt builders really return chat messages, that
a helper returns a game action) is left to the import and runtime checks. `check_folder` is the
only function that reads the disk. Line numbers refer to the checked file.

Rule ids, cheapest first:

- file-missing: each generated file and each copy of a source-of-truth file exists.
- syntax-error: each .py file compiles (.sh files are not run here; `bash -n` is a separate check).
- protected-file-changed: env_move.py and grpo_template.py are byte-identical to source_of_truth.
- config-class-missing, config-fields-changed: grpo_config.py keeps class GRPOConfig with exactly
  the source's field names; values may change.
- markers-broken: train.py's section markers are spelled exactly, balanced, unnested and closed.
- generic-section-changed: train.py's GENERIC sections are the template's, byte for byte, in the
  same count and order.
- customize-sections-changed: train.py's CUSTOMIZE sections are the template's holes (by HOLE
  name), in the same order.
- customize-hole-unfilled: each CUSTOMIZE hole holds code that is neither empty, nor the
  template's placeholder, nor still raising NotImplementedError("CUSTOMIZE ...").
- outside-sections-changed: train.py's text outside the sections is the template's, so no code
  can sit after a GENERIC section and redefine what it defines.
- action-names-missing, action-names-invalid: prompt_template.py defines ACTION_NAMES as a
  literal list of strings.
- unknown-action: every ACTION_NAMES entry is an action helper in helpers.py.
- prompt-builder-missing, prompt-builder-signature: build_thinking_prompt(observation, agent_id,
  turn) and build_action_prompt(observation, agent_id, turn, thinking) exist, with a chat-messages
  return annotation if any.
- observation-to-text-missing: helpers.py defines observation_to_text(env, agent_id).
- helper-signature: observation_to_text and every action helper take (env, agent_id, ...) and can
  be called from {"action": NAME, "agent_id": I, "args": {...}} as NAME(env, agent_id, **args).
- helper-calls-helper: no action helper (nor private utility) calls a public helper.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

GENERIC_START = "# === GENERIC — DO NOT MODIFY ==="
GENERIC_END = "# === END GENERIC ==="
CUSTOMIZE_START = "# === CUSTOMIZE ==="
CUSTOMIZE_END = "# === END CUSTOMIZE ==="
PROTECTED_FILES = ("env_move.py", "grpo_template.py")
GENERATED_FILES = ("helpers.py", "helper_readme.md", "prompt_template.py", "train.py", "launch_training.sh")
SOURCE_FILES = ("env_move.py", "grpo_config.py", "grpo_template.py")
FOLDER_FILES = GENERATED_FILES + SOURCE_FILES

OBSERVATION_HELPER = "observation_to_text"
PROMPT_BUILDERS = {
    "build_thinking_prompt": ("observation", "agent_id", "turn"),
    "build_action_prompt": ("observation", "agent_id", "turn", "thinking"),
}
_MESSAGES_ANNOTATIONS = {"list", "list[dict]", "list[dict[str,str]]"}

_Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Violation:
    rule: str
    file: str
    line: int | None
    message: str  # one line: what is wrong and what to do about it

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{self.rule} {where}: {self.message}"


@dataclass(frozen=True)
class Section:
    kind: str  # "generic" or "customize"
    name: str  # customize: the NAME of its "# HOLE NAME:" first line, else ""; generic: its 0-based index
    start_line: int  # line of the opening marker
    text: str  # the lines between the markers, exclusive, with their newlines


class MarkerError(ValueError):
    """Broken section markers; `line` is where, `problem` says what."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line, self.problem = line, problem


# ---------------------------------------------------------------- sections

_MARKERS = {
    GENERIC_START: ("generic", True), GENERIC_END: ("generic", False),
    CUSTOMIZE_START: ("customize", True), CUSTOMIZE_END: ("customize", False),
}
_END_MARKER = {"generic": GENERIC_END, "customize": CUSTOMIZE_END}
_HOLE = re.compile(r"#\s*HOLE\s+([^\s:]+)\s*:")


def _loose(line: str) -> str:
    return re.sub(r"[^A-Z]", "", line.upper())


_LOOSE_MARKERS = {_loose(marker): marker for marker in _MARKERS}


def extract_sections(text: str) -> list[Section]:
    """The GENERIC and CUSTOMIZE sections of `text`, in order; MarkerError (a ValueError) if broken."""
    sections: list[Section] = []
    open_kind: str | None = None
    open_line = 0
    body: list[str] = []
    for number, line in enumerate(_lines(text), start=1):
        marker = _marker(line, number)
        if marker is None:
            if open_kind is not None:
                body.append(line)
            continue
        kind, opens = marker
        if opens:
            if open_kind is not None:
                raise MarkerError(number, f"{kind.upper()} start marker inside the {open_kind.upper()} section "
                                          f"opened at line {open_line}; close that one first with "
                                          f"{_END_MARKER[open_kind]!r}")
            open_kind, open_line, body = kind, number, []
            continue
        if open_kind is None:
            raise MarkerError(number, f"{_END_MARKER[kind]!r} closes no open section")
        if kind != open_kind:
            raise MarkerError(number, f"{_END_MARKER[kind]!r} cannot close the {open_kind.upper()} section opened at "
                                      f"line {open_line}; that one ends with {_END_MARKER[open_kind]!r}")
        section_text = "".join(body)
        name = _hole_name(section_text) if kind == "customize" else str(sum(s.kind == kind for s in sections))
        sections.append(Section(kind, name, open_line, section_text))
        open_kind = None
    if open_kind is not None:
        raise MarkerError(open_line, f"the {open_kind.upper()} section opened here is never closed with "
                                     f"{_END_MARKER[open_kind]!r}")
    return sections


def _marker(line: str, number: int) -> tuple[str, bool] | None:
    stripped = line.strip()
    if stripped in _MARKERS:
        return _MARKERS[stripped]
    # a near miss (a hyphen for the em dash, a missing space) would silently turn a section into plain code
    if stripped.startswith("#") and "==" in stripped and _loose(stripped) in _LOOSE_MARKERS:
        raise MarkerError(number, f"malformed section marker {stripped!r}; "
                                  f"write it exactly as {_LOOSE_MARKERS[_loose(stripped)]!r}")
    return None


def _hole_name(text: str) -> str:
    for line in _lines(text):
        if line.strip():
            match = _HOLE.match(line.strip())
            return match.group(1) if match else ""
    return ""


def _section_lines(section: Section) -> range:
    """Line numbers of the section, both markers included."""
    return range(section.start_line, section.start_line + len(_lines(section.text)) + 2)


# ---------------------------------------------------------------- protected files and config

def check_protected(name: str, text: str, source_text: str) -> list[Violation]:
    """A protected file must equal its source of truth exactly (compared as given)."""
    if text == source_text:
        return []
    line = _first_difference(_lines(text), _lines(source_text)) + 1
    return [Violation("protected-file-changed", name, line,
                      f"{name} is protected but differs from source_of_truth/{name} at line {line}; restore it "
                      f"byte-identical from source_of_truth and make the change in a generated file instead")]


def check_config(text: str, source_text: str) -> list[Violation]:
    """GRPOConfig keeps the source's set of field names (annotated class attributes); values may change."""
    syntax = check_syntax("grpo_config.py", text)
    if syntax:
        return syntax
    expected = _config_fields(ast.parse(source_text))
    if expected is None:
        raise ValueError("source_of_truth/grpo_config.py has no class GRPOConfig")
    actual = _config_fields(ast.parse(text))
    if actual is None:
        return [Violation("config-class-missing", "grpo_config.py", None,
                          "class GRPOConfig is missing; restore it from source_of_truth/grpo_config.py "
                          "(field values may change, field names may not)")]
    added = [name for name in actual if name not in expected]
    removed = [name for name in expected if name not in actual]
    if not added and not removed:
        return []
    changes = []
    if added:
        changes.append(f"added {', '.join(f'{n!r} (line {actual[n]})' for n in added)}")
    if removed:
        changes.append(f"removed {', '.join(repr(n) for n in removed)}")
    return [Violation("config-fields-changed", "grpo_config.py", actual[added[0]] if added else None,
                      f"GRPOConfig's field names changed: {'; '.join(changes)}; a run may change field values, "
                      f"never the set of names: restore the names of source_of_truth/grpo_config.py "
                      f"(values are overridden with --field value on the command line)")]


def _config_fields(tree: ast.Module) -> dict[str, int] | None:
    """Field name -> line, in order; None without a top-level class GRPOConfig."""
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "GRPOConfig"]
    if not classes:
        return None
    return {node.target.id: node.lineno for node in classes[-1].body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


# ---------------------------------------------------------------- train.py

def check_train(text: str, template_text: str) -> list[Violation]:
    """train.py keeps the template's GENERIC sections and fills every CUSTOMIZE hole.

    GENERIC sections are compared byte for byte with the template's, by position. CUSTOMIZE sections
    are matched by HOLE name; a hole is unfilled when its code (comments and blank lines aside) is
    empty, still contains NotImplementedError("CUSTOMIZE, or parses to the same AST as the
    template's hole (the stripped code lines are compared when it does not parse on its own).
    Broken markers in train.py are one violation; the template's markers are trusted, so broken
    ones there raise MarkerError.
    """
    expected = extract_sections(template_text)
    try:
        actual = extract_sections(text)
    except MarkerError as error:
        return [Violation("markers-broken", "train.py", error.line,
                          f"section markers are broken: {error.problem}; each section opens and closes with its "
                          f"own marker line, exactly as in grpo_template.py")]
    generic = [s for s in actual if s.kind == "generic"]
    expected_generic = [s for s in expected if s.kind == "generic"]
    holes = [s for s in actual if s.kind == "customize"]
    expected_holes = [s for s in expected if s.kind == "customize"]
    violations = _check_generic(generic, expected_generic) + _check_hole_order(holes, expected_holes)
    aligned = len(generic) == len(expected_generic) and [s.name for s in holes] == [s.name for s in expected_holes]
    violations += _check_holes(holes, expected_holes)
    if aligned:  # otherwise the text outside sections differs as a consequence, already reported
        violations += _check_outside(text, actual, template_text, expected)
    return violations


def _check_generic(actual: list[Section], expected: list[Section]) -> list[Violation]:
    if len(actual) != len(expected):
        texts, expected_texts = {s.text for s in actual}, {s.text for s in expected}
        lost = [_describe_generic(s) for s in expected if s.text not in texts]
        extra = [f"line {s.start_line}" for s in actual if s.text not in expected_texts]
        details = []
        if lost:
            details.append(f"missing or changed: {'; '.join(lost)}")
        if extra:
            details.append(f"not in the template: the sections at {', '.join(extra)}")
        return [Violation("generic-section-changed", "train.py", None,
                          f"train.py has {len(actual)} GENERIC sections, grpo_template.py has {len(expected)} "
                          f"({'; '.join(details)}); restore every GENERIC section exactly from grpo_template.py, "
                          f"markers included")]
    violations = []
    for got, want in zip(actual, expected):
        if got.text == want.text:
            continue
        got_lines, want_lines = _lines(got.text), _lines(want.text)
        index = _first_difference(got_lines, want_lines)
        violations.append(Violation(
            "generic-section-changed", "train.py", got.start_line + 1 + index,
            f"{_describe_generic(want)} was changed: expected {_quote_at(want_lines, index)}, found "
            f"{_quote_at(got_lines, index)}; restore it exactly from grpo_template.py"))
    return violations


def _describe_generic(section: Section) -> str:
    return (f"the {_ordinal(int(section.name) + 1)} GENERIC section (template line {section.start_line}, "
            f"beginning {_quote(_first_code_line(section.text))})")


def _check_hole_order(actual: list[Section], expected: list[Section]) -> list[Violation]:
    names = [s.name for s in actual]
    expected_names = [s.name for s in expected]
    if names == expected_names:
        return []
    found = ", ".join(f"{s.name or '(no # HOLE line)'} (line {s.start_line})" for s in actual) or "none"
    return [Violation("customize-sections-changed", "train.py", None,
                      f"train.py's CUSTOMIZE sections are [{found}] but grpo_template.py's are "
                      f"[{', '.join(expected_names)}]; keep exactly one CUSTOMIZE section per HOLE, in the "
                      f"template's order, each starting with its '# HOLE NAME:' comment")]


def _check_holes(actual: list[Section], expected: list[Section]) -> list[Violation]:
    by_name: dict[str, Section] = {}
    for section in actual:
        by_name.setdefault(section.name, section)
    violations = []
    for want in expected:
        got = by_name.get(want.name)
        problem = _unfilled(got, want) if got is not None else None
        if problem is not None:
            line, reason = problem
            violations.append(Violation(
                "customize-hole-unfilled", "train.py", line,
                f"CUSTOMIZE hole {want.name!r} is not filled: {reason}; write the code its "
                f"'# HOLE {want.name}:' comment asks for"))
    return violations


_PLACEHOLDER = re.compile(r"""NotImplementedError\(\s*["']CUSTOMIZE""")


def _unfilled(got: Section, want: Section) -> tuple[int, str] | None:
    """(line, reason) when the hole holds no real code yet."""
    code = _code_lines(got.text)
    if not code:
        return got.start_line, "it holds no code"
    for offset, line in code:
        if _PLACEHOLDER.search(line):
            return got.start_line + 1 + offset, f"it still has the template's placeholder {_quote(line)}"
    if _fingerprint(got.text) == _fingerprint(want.text):
        return got.start_line, "its code is still the template's"
    return None


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(0-based offset, stripped line) for each line that is neither blank nor a comment."""
    return [(offset, line.strip()) for offset, line in enumerate(_lines(text))
            if line.strip() and not line.strip().startswith("#")]


def _fingerprint(text: str) -> str:
    try:
        return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError):
        return "\n".join(line for _, line in _code_lines(text))


def _check_outside(text: str, sections: list[Section], template_text: str,
                   template_sections: list[Section]) -> list[Violation]:
    got = _outside_lines(text, sections)
    want = [line for _, line in _outside_lines(template_text, template_sections)]
    index = _first_difference([line for _, line in got], want)
    if index == len(got) == len(want):
        return []
    return [Violation("outside-sections-changed", "train.py", got[index][0] if index < len(got) else None,
                      f"the text outside the sections differs from grpo_template.py: expected "
                      f"{_quote_at(want, index)}, found {_quote_at([line for _, line in got], index)}; code goes "
                      f"only inside CUSTOMIZE sections: restore everything outside the sections from the template")]


def _outside_lines(text: str, sections: list[Section]) -> list[tuple[int, str]]:
    """(line number, line without trailing space) of the non-blank lines outside every section."""
    inside = {number for section in sections for number in _section_lines(section)}
    return [(number, line.rstrip()) for number, line in enumerate(_lines(text), start=1)
            if number not in inside and line.strip()]


# ---------------------------------------------------------------- prompt_template.py

def check_prompt_template(text: str, helpers_text: str) -> list[Violation]:
    """ACTION_NAMES names action helpers; both prompt builders exist with the trainer's parameters.

    That a builder returns list[dict] with "role" and "content" cannot be proven from the AST: only a
    return annotation, when present, is checked (list, list[dict] or list[dict[str, str]], directly
    or through a module-level alias); the import and runtime checks call the builders.
    """
    syntax = check_syntax("prompt_template.py", text) + check_syntax("helpers.py", helpers_text)
    if syntax:
        return syntax
    tree = ast.parse(text)
    functions = _functions(tree)
    violations = _check_action_names(tree, _functions(ast.parse(helpers_text)))
    for name, params in PROMPT_BUILDERS.items():
        builder = functions.get(name)
        if builder is None:
            violations.append(Violation(
                "prompt-builder-missing", "prompt_template.py", None,
                f"no top-level function {name}({', '.join(params)}); define it, returning chat messages "
                f"[{{\"role\": ..., \"content\": ...}}, ...]"))
        else:
            violations += _check_builder(builder, params, _aliases(tree))
    return violations


def _check_action_names(tree: ast.Module, helper_functions: dict[str, _Function]) -> list[Violation]:
    assigned = _module_assignment(tree, "ACTION_NAMES")
    if assigned is None:
        return [Violation("action-names-missing", "prompt_template.py", None,
                          "no module-level ACTION_NAMES; define ACTION_NAMES = [\"name\", ...] listing the "
                          "helpers.py action helpers the model may call")]
    value, line = assigned
    elements = value.elts if isinstance(value, (ast.List, ast.Tuple)) else []
    names = [e for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if not names or len(names) != len(elements):
        return [Violation("action-names-invalid", "prompt_template.py", line,
                          "ACTION_NAMES must be a non-empty list of string literals, e.g. [\"move\", \"stay\"], "
                          "so it can be checked without importing; write the names out")]
    actions = _action_helpers(helper_functions)
    violations = []
    for element in names:
        name = element.value
        if name not in actions:
            why = ("is not an action helper (observation_to_text and _private functions are not)"
                   if name in helper_functions else "is not a top-level function in helpers.py")
            violations.append(Violation(
                "unknown-action", "prompt_template.py", element.lineno,
                f"ACTION_NAMES entry {name!r} {why}; define def {name}(env, agent_id, ...) in helpers.py "
                f"or remove it from ACTION_NAMES"))
    return violations


def _check_builder(builder: _Function, params: tuple[str, ...], aliases: dict[str, ast.expr]) -> list[Violation]:
    violations = []
    positional = tuple(a.arg for a in builder.args.posonlyargs + builder.args.args)
    required_keywords = [a.arg for a, d in zip(builder.args.kwonlyargs, builder.args.kw_defaults) if d is None]
    if positional != params or required_keywords:
        violations.append(Violation(
            "prompt-builder-signature", "prompt_template.py", builder.lineno,
            f"{builder.name}({ast.unparse(builder.args)}) must take exactly the positional parameters "
            f"({', '.join(params)}) and nothing else required: the trainer calls {builder.name}({', '.join(params)})"))
    if builder.returns is not None and not _is_messages_annotation(builder.returns, aliases):
        violations.append(Violation(
            "prompt-builder-signature", "prompt_template.py", builder.lineno,
            f"{builder.name} is annotated to return {_quote(ast.unparse(builder.returns))} but must return chat "
            f"messages [{{\"role\": ..., \"content\": ...}}]; annotate it list[dict[str, str]] or drop the annotation"))
    return violations


def _is_messages_annotation(annotation: ast.expr, aliases: dict[str, ast.expr]) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.Name) and annotation.id in aliases:
        annotation = aliases[annotation.id]
    text = re.sub(r"\s|typing\.", "", ast.unparse(annotation))
    text = re.sub(r"\bDict\b", "dict", re.sub(r"\bList\b", "list", text))
    return text in _MESSAGES_ANNOTATIONS


def _aliases(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level `Name = value` and `Name: TypeAlias = value` bindings, the last one winning."""
    aliases: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            aliases.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            aliases[node.target.id] = node.value
    return aliases


def _module_assignment(tree: ast.Module, name: str) -> tuple[ast.expr, int] | None:
    """The value and line of the last module-level assignment to `name`."""
    node = _aliases(tree).get(name)
    return None if node is None else (node, node.lineno)


# ---------------------------------------------------------------- helpers.py


def check_helpers(text: str) -> list[Violation]:
    """observation_to_text(env, agent_id) exists; action helpers are callable as NAME(env, agent_id, **args).

    Action helpers are the public top-level functions (no leading "_") other than observation_to_text.
    Helpers must not call one another: a call is an `ast.Call` whose func is a bare name, and a call
    from an action helper to any other public helper, observation_to_text included, is a violation.
    Private `_` functions are shared utilities that anyone may call; so that they cannot smuggle such
    a call in, a private function calling a public helper is a violation too.
    """
    syntax = check_syntax("helpers.py", text)
    if syntax:
        return syntax
    functions = _functions(ast.parse(text))
    violations = []
    observe = functions.get(OBSERVATION_HELPER)
    if observe is None:
        violations.append(Violation(
            "observation-to-text-missing", "helpers.py", None,
            f"no top-level function {OBSERVATION_HELPER}(env, agent_id); define it, returning the text one "
            f"agent sees this turn"))
    else:
        violations += _check_observation_signature(observe)
    public = {name for name in functions if not name.startswith("_")}
    for name, function in functions.items():
        if name == OBSERVATION_HELPER:
            continue
        if name in public:
            violations += _check_helper_signature(function)
        violations += _check_helper_calls(function, public - {name})
    return violations


def _functions(tree: ast.Module) -> dict[str, _Function]:
    """Top-level functions by name; a later definition replaces an earlier one, as at runtime."""
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _action_helpers(functions: dict[str, _Function]) -> set[str]:
    return {name for name in functions if not name.startswith("_") and name != OBSERVATION_HELPER}


def _check_observation_signature(function: _Function) -> list[Violation]:
    args = function.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = len(positional) - len(args.defaults) + sum(d is None for d in args.kw_defaults)
    if positional[:2] == ["env", "agent_id"] and required <= 2:
        return []
    return [Violation("helper-signature", "helpers.py", function.lineno,
                      f"{OBSERVATION_HELPER}({ast.unparse(args)}) is called as {OBSERVATION_HELPER}(env, agent_id): "
                      f"take (env, agent_id) first and give any further parameter a default")]


def _check_helper_signature(function: _Function) -> list[Violation]:
    args = function.args
    call = f"{function.name}(env, agent_id, **args)"
    if [a.arg for a in (args.posonlyargs + args.args)[:2]] != ["env", "agent_id"]:
        return [Violation("helper-signature", "helpers.py", function.lineno,
                          f"action helper {function.name}({ast.unparse(args)}) must take (env, agent_id, ...) as its "
                          f"first two parameters: it is called as {call}")]
    problems = [f"parameter {a.arg!r} is positional-only (before '/')" for a in args.posonlyargs[2:]]
    if args.vararg is not None:
        problems.append(f"it takes *{args.vararg.arg}")
    if not problems:
        return []
    return [Violation("helper-signature", "helpers.py", function.lineno,
                      f"action helper {function.name}: {'; '.join(problems)}, so the JSON args cannot be passed by "
                      f"name as {call}; use named parameters after env, agent_id")]


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
_RULE_INPUTS = {"prompt_template.py": ("prompt_template.py", "helpers.py")}


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
        errors = [] if name in PROTECTED_FILES else check_syntax(name, text)
        if errors:
            usable.discard(name)
            violations += errors
    rules: dict[str, Callable[[], list[Violation]]] = {
        "env_move.py": lambda: check_protected("env_move.py", present["env_move.py"], sources["env_move.py"]),
        "grpo_template.py": lambda: check_protected(
            "grpo_template.py", present["grpo_template.py"], sources["grpo_template.py"]),
        "grpo_config.py": lambda: check_config(present["grpo_config.py"], sources["grpo_config.py"]),
        "helpers.py": lambda: check_helpers(present["helpers.py"]),
        "prompt_template.py": lambda: check_prompt_template(present["prompt_template.py"], present["helpers.py"]),
        "train.py": lambda: check_train(present["train.py"], sources["grpo_template.py"]),
    }
    for name, rule in rules.items():
        if name in selected and all(n in usable for n in _RULE_INPUTS.get(name, (name,))):
            violations += rule()
    return violations


def check_folder(folder: Path, source_of_truth: Path, only: Iterable[str] | None = None) -> list[Violation]:
    """check_all over the files of `folder` against `source_of_truth`; the only function that reads disk."""
    files = {name: _read(folder / name) if (folder / name).is_file() else None for name in FOLDER_FILES}
    sources = {name: _read(source_of_truth / name) for name in SOURCE_FILES}
    return check_all(files, sources, only=only)


def _read(path: Path) -> str:
    # bytes, not read_text: universal newlines would hide a CRLF change to a protected file
    return path.read_bytes().decode("utf-8", errors="surrogateescape")


def _missing(name: str) -> Violation:
    fix = f"copy it unchanged from source_of_truth/{name}" if name in SOURCE_FILES else "generate it"
    return Violation("file-missing", name, None, f"{name} is missing from the generated folder; {fix}")


# ---------------------------------------------------------------- text utilities

def _lines(text: str) -> list[str]:
    """Lines with their newlines, split on "\\n" only so numbers match editors and tracebacks."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _first_difference(a: list[str], b: list[str]) -> int:
    """Index of the first differing item; len of the shorter list when one is a prefix of the other."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _quote_at(lines: list[str], index: int) -> str:
    return _quote(lines[index]) if index < len(lines) else "the end of the text"


def _first_code_line(text: str) -> str:
    return next((line for line in _lines(text) if line.strip()), "")


def _quote(text: str, limit: int = 80) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
