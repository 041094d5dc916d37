"""The rules hold at run time, on both examples: mutants that keep the text of the brief and break what the
code does (GENERIC code steered from CUSTOMIZE code, the game changed without touching env_move.py,
helpers with side effects, a dispatch or prompts that pass a shape check, launch scripts that hide values)
are flagged by their rule ids, and valid variants pass. Mutants are built from each example's own files.

Each probe run costs a fresh interpreter that imports torch, so the mutants that can share one folder
do (each names its own object, and the test asserts each finding): one probe run, many rules."""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import edit_file, example_generated, into_first_hole

from orchestrator.checks import rule_violations, run_guards, run_import_check
from orchestrator.demo import example, recorded_roles
from orchestrator.helper_docs import helper_readme
from orchestrator.rules import check_folder, errors
from orchestrator.rules.dynamic import customize_callables, probe_folder
from orchestrator.rules.exposed import action_helpers, static_action_helpers, unresolved_names
from orchestrator.rules.inputs import check_inputs
from orchestrator.rules.probe.game import choose, default_recipe, import_apart, learn_play, reached_modules
from orchestrator.rules.recorded_launch import check_recorded_launch, probe_args
from orchestrator.rules.static import MESSAGES, type_bindings, type_verdict
from orchestrator.template import read_sections

EXAMPLES = ["cleanup", "staghunt", "spread"]


# ---------------------------------------------------------------- what each example's own files say

def read(folder: Path, name: str) -> str:
    return (folder / name).read_text()


@functools.cache
def learned(folder: Path):
    """How the folder's game is played, learned as the probe learns it (setter, actions, step method)."""
    module = import_apart(str(folder / "env_move.py"), f"_env_move_under_test_{abs(hash(str(folder)))}")
    recipe = default_recipe(module)
    play = learn_play(recipe.cls, recipe)
    choose(play)
    return play


def setter_and_action(folder: Path) -> tuple[str, Any]:
    """How the game records an action, and one action it accepts: `env.NAME(agent_id, ACTION)`."""
    play = learned(folder)
    return play.setter, play.actions[0]


def stepper(folder: Path) -> str:
    """The game's step method."""
    return learned(folder).stepper


def helper_bodies(folder: Path) -> list[tuple[ast.FunctionDef, list[ast.stmt]]]:
    """The reference set's action helpers, each with its body (docstring aside)."""
    return [(node, [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))])
            for node in ast.parse(read(folder, "helpers.py")).body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.name != "observation_to_text"]


def simple_helper(folder: Path) -> str:
    """The reference helper called as NAME(env, agent_id) with the shortest body, one ending `return True` first
    (stay, wait)."""
    found = [(ast.unparse(body[-1]) != "return True", len(body), node.name) for node, body in helper_bodies(folder)
             if len(node.args.args) == 2 and body]
    assert found, "no helper takes only (env, agent_id)"
    return min(found)[2]


def truthy_helper(folder: Path) -> str:
    """The reference helper with the shortest body that ends `return True`."""
    found = [(len(body), node.name) for node, body in helper_bodies(folder)
             if body and ast.unparse(body[-1]) == "return True"]
    assert found, "no helper ends with return True"
    return min(found)[1]


def function_node(text: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == name)


def factory(folder: Path) -> str:
    return customize_callables(read(folder, "train.py"))[0]


def dispatch(folder: Path) -> str:
    """The CUSTOMIZE function of (game, call) that runs the named helper with `**` arguments."""
    text = read(folder, "train.py")
    return next(n for n in customize_callables(text) if len(function_node(text, n.rpartition(".")[2]).args.args) == 2
                and any(isinstance(k, ast.keyword) and k.arg is None
                        for k in ast.walk(function_node(text, n.rpartition(".")[2]))))


def at_top_of(name: str, code: Callable[[Path], str]) -> Callable[[Path], None]:
    """`code` (lines, indented for a function body) as the first statements of train.py's function `name(folder)`."""
    def mutate(folder: Path) -> None:
        def change(text: str) -> str:
            node = function_node(text, name if isinstance(name, str) else name(folder))
            first = node.body[0]
            lines = text.split("\n")
            indent = " " * first.col_offset
            lines[first.lineno - 1:first.lineno - 1] = [indent + line for line in code(folder).split("\n")]
            return "\n".join(lines)
        edit_file(folder, "train.py", change)
    return mutate


def in_factory(code: Callable[[Path], str]) -> Callable[[Path], None]:
    return lambda folder: at_top_of(factory(folder), code)(folder)


def in_dispatch(code: Callable[[Path], str]) -> Callable[[Path], None]:
    return lambda folder: at_top_of(dispatch(folder), code)(folder)


def append(name: str, code: Callable[[Path], str]) -> Callable[[Path], None]:
    return lambda folder: edit_file(folder, name, lambda text: text + "\n\n" + code(folder) + "\n")


def env_class(folder: Path) -> str:
    return re.search(r"env_move\.(\w+)\(", read(folder, "train.py")).group(1)


def first_env_function(folder: Path) -> str:
    return next(n.name for n in ast.parse(read(folder, "env_move.py")).body if isinstance(n, ast.FunctionDef))


def first_env_table(folder: Path) -> str | None:
    """The first module-level dict of env_move whose values are tuples (a moves table), if any."""
    return next((n.targets[0].id if isinstance(n, ast.Assign) else n.target.id
                 for n in ast.parse(read(folder, "env_move.py")).body
                 if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Dict)
                 and n.value.values and all(isinstance(v, ast.Tuple) for v in n.value.values)), None)


def library_method(folder: Path) -> str:
    """`module.Class.method`: a public method of a class of a library the game reaches (a PettingZoo wrapper,
    the random generator a pure-Python game holds), defined in that library; the nearest library outside the
    standard library first."""
    play = learned(folder)
    modules = reached_modules(play.start.build(), {play.cls.__module__})
    for module in sorted(modules, key=lambda m: m.__name__.split(".")[0] in sys.stdlib_module_names):
        for name, cls in sorted(vars(module).items()):
            if isinstance(cls, type) and cls.__module__ == module.__name__ and not name.startswith("_"):
                method = next((m for m, v in sorted(vars(cls).items()) if not m.startswith("_") and callable(v)), None)
                if method:
                    return f"{module.__name__}.{name}.{method}"
    raise AssertionError("the game reaches no library class")


def fixed_attribute(folder: Path) -> str | None:
    """A public int attribute of the game that playing never changes (a size, a horizon), if any."""
    play = learned(folder)
    game = play.start.build()
    before = dict(vars(game))
    for turn in range(3):
        play.play_turn(game, turn)
    return next((k for k, v in before.items() if not k.startswith("_") and type(v) is int and vars(game)[k] == v
                 and "agent" not in k), None)


def cap_field(folder: Path) -> str:
    return recorded_roles(example(folder.name))["roles"]["thinking_cap"]


def class_with_customize_section(folder: Path) -> str | None:
    text = read(folder, "grpo_template.py")
    inner = [s for s in read_sections(text) if s.kind == "customize" and s.text[:1].isspace()]
    if not inner:
        return None
    return next(n.name for n in ast.parse(text).body if isinstance(n, ast.ClassDef)
                and n.lineno < inner[0].start_line <= n.end_lineno)


def replace_class_member(folder: Path) -> str:
    """A CUSTOMIZE method replaces a GENERIC one: `__init__` redefined in the CUSTOMIZE section inside a
    class; where the template has none, a GENERIC class's method replaced from the game factory."""
    owner = class_with_customize_section(folder)
    if owner is not None:
        def change(text: str) -> str:
            hole = next(s for s in read_sections(text) if s.kind == "customize" and s.text[:1].isspace())
            lines = text.split("\n")
            lines.insert(hole.start_line, "    def __init__(self, tokenizer):\n        self.tokenizer = tokenizer\n"
                                          "        self.prompt_ids = lambda messages: []\n")
            return "\n".join(lines)
        edit_file(folder, "train.py", change)
        return owner
    methods = [(cls, m) for cls in ast.parse(read(folder, "grpo_template.py")).body if isinstance(cls, ast.ClassDef)
               for m in cls.body if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")]
    cls, method = max(methods, key=lambda pair: len(pair[1].body))
    method = method.name
    in_factory(lambda f: f"type.__setattr__({cls.name}, {method!r}, lambda self, *a, **k: None)")(folder)
    return cls.name


def found(violations, rule: str, *words: str) -> bool:
    return any(v.rule == rule and all(w in v.message for w in words) for v in violations)


def probe(folder: Path, source: Path):
    answer = probe_folder(folder, source_of_truth=source)
    assert not answer.import_failed, answer.traceback[-3000:]
    return answer.violations


# ---------------------------------------------------------------- the groups: one probe run each

def generic_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """GENERIC behaviour changed from CUSTOMIZE code while the GENERIC text stays byte-identical."""
    into_first_hole("import torch as _torch\n_torch.clamp = lambda value, *args, **kwargs: value")(folder)
    in_factory(lambda f: "import __main__\n"
                         "__main__.group_advantages = lambda returns, *args, **kwargs: returns")(folder)
    owner = replace_class_member(folder)
    in_dispatch(lambda f: "global ACTION_ERRORS\nACTION_ERRORS = (Exception,)")(folder)
    return [("generic-object-rebound", ("torch.clamp",)), ("generic-behaviour-changed", ("grpo_token_loss",)),
            ("generic-object-rebound", ("group_advantages",)), ("generic-object-rebound", (owner,)),
            ("generic-object-rebound", ("ACTION_ERRORS",))]


def game_class_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """make_env returns a subclass; a CUSTOMIZE write to a config value; a value the config refuses."""
    cls = env_class(folder)
    edit_file(folder, "train.py", lambda t: t.replace(f"env_move.{cls}(", f"type('Game', (env_move.{cls},), {{}})(", 1))
    config = function_node(read(folder, "train.py"), factory(folder)).args.args[0].arg
    in_factory(lambda f: f"object.__setattr__({config}, {cap_field(f)!r}, 8)")(folder)
    group = recorded_roles(example(folder.name))["roles"]["group_generations"]
    edit_file(folder, "grpo_config.py", lambda t: re.sub(
        rf"(\b{group}\s*:\s*int\s*=\s*(?:field\(default=)?)\d+", r"\g<1>1", t, count=1))
    return [("game-class-changed", ("Game",)), ("config-written-at-run-time", (cap_field(folder),)),
            ("config-invalid", ())]


def game_patch_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The protected game changed without touching env_move.py: a method patched through type(env), a
    function's __globals__, a module-level table updated at call time (moves of 2 cells; a game without one
    gets an attribute changed after it is built), a method of a library class the game reaches replaced, and
    a module attribute patched at import."""
    cls, function, table = env_class(folder), first_env_function(folder), first_env_table(folder)
    setter, _ = setter_and_action(folder)
    library = library_method(folder)
    module, owner, method = library.rsplit(".", 2)
    changed = (f"env_move.{table}.update({{k: (2 * a, 2 * b) for k, (a, b) in env_move.{table}.items()}})" if table
               else f"game.{fixed_attribute(folder)} += 1")

    def change(text: str) -> str:
        node = next(n for n in ast.walk(function_node(text, factory(folder))) if isinstance(n, ast.Return))
        call = ast.get_source_segment(text, node.value)
        lines = ["game = " + call, "type(game).render = lambda self: 'patched'",
                 f"type(game).{setter}.__globals__[{function!r}] = lambda *args, **kwargs: 0", changed,
                 f"import {module} as _library", f"_library.{owner}.{method} = lambda self, *args, **kwargs: None",
                 "return game"]
        indent = "\n" + " " * node.col_offset
        return text.replace(call and f"return {call}", indent.join(lines).lstrip("\n"), 1)
    edit_file(folder, "train.py", change)
    into_first_hole("import env_move as _game\n_game.render_patched = None")(folder)
    return [("protected-module-patched", (f"{cls}.render",)), ("protected-module-patched", (function,)),
            *([("protected-module-patched", (table,))] if table else []), ("game-behaviour-changed", ()),
            ("protected-module-patched", (library,)), ("protected-module-patched", ("render_patched",))]


def helpers_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Helpers with side effects, an action the game refuses, a truthy int, a crash, a hidden call."""
    setter, action = setter_and_action(folder)
    step, easy, truthy = stepper(folder), simple_helper(folder), truthy_helper(folder)
    append("helpers.py", lambda f: f"""def dash(env, agent_id) -> bool:
    cells = next((v for v in vars(env).values() if isinstance(v, list) and v
                  and all(isinstance(c, tuple) and len(c) == 2 for c in v)), None)
    if cells is None:  # no list of cells: a setting of the game changed instead
        {f"env.{fixed_attribute(f)} += 1" if fixed_attribute(f) else "raise AssertionError('no setting to change')"}
    else:
        cells[agent_id] = (cells[agent_id][0] + 1, cells[agent_id][1])
    return True


def rally(env, agent_id) -> bool:
    env.{setter}(1 - agent_id, {action!r})
    return True


def rush(env, agent_id) -> bool:
    env.{setter}(agent_id, {action!r})
    env.{step}()
    return True


def leap(env, agent_id) -> bool:
    env.{setter}(agent_id, "LEAP")
    return True


def idle_around(env, agent_id) -> bool:
    return undefined_name


_STEPS = [{easy}]


def relay_all(env, agent_id) -> bool:
    return all(step(env, agent_id) for step in _STEPS)""")(folder)
    def truthy_int(text: str) -> str:
        node = function_node(text, truthy).body[-1]
        lines = text.split("\n")
        lines[node.lineno - 1] = lines[node.lineno - 1].replace("return True", "return 1")
        return "\n".join(lines)
    edit_file(folder, "helpers.py", truthy_int)
    return [("helper-side-effect", ("dash",)), ("helper-acts-for-others", ("rally",)),
            ("helper-advances-game", ("rush",)), ("helper-invalid-action", ("leap",)),
            ("helper-returns-non-bool", (truthy,)), ("helper-raises", ("idle_around",)),
            ("helper-calls-helper", (easy, "relay_all"))]


def prompts_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """A dispatch that accepts raw low-level actions and always calls one helper; an observation that is not
    observation_to_text's; a Stage-2 prompt without the reasoning or the observation, naming the wrong
    agent; prompts without the helper menu; observation_to_text without coordinates."""
    setter, _ = setter_and_action(folder)
    easy = simple_helper(folder)
    game = function_node(read(folder, "train.py"), dispatch(folder)).args.args[0].arg
    in_dispatch(lambda f: f"if str(call['action']).isupper():\n    {game}.{setter}(call['agent_id'], call['action'])\n"
                          f"    return True\nreturn helpers.{easy}({game}, call['agent_id'])")(folder)
    edit_file(folder, "train.py", lambda t: re.sub(r"helpers\.observation_to_text\((\w+), \w+\)", r"\1.render()", t))

    def stage2(text: str) -> str:
        head, _, body = text.partition("def create_single_stage_prompt(")
        signature, _, rest = body.partition("\n")
        rest = re.sub(r"\bobs_text\b", "str()", rest).replace("thinking_response.strip()", "str()")
        return head + "def create_single_stage_prompt(" + signature + "\n" + rest.replace("% agent_id", "% 0")
    edit_file(folder, "prompt_template.py", lambda t: stage2(t).replace("{_action_menu()}", ""))
    edit_file(folder, "helpers.py", lambda t: re.sub(r"(def observation_to_text\([^)]*\)[^:]*:\n)",
                                                     r'\1    return "You see a field."\n', t, count=1))
    return [("observation-to-text", ()), ("dispatch-accepts-raw-action", ()), ("dispatch-wrong-helper", (easy,)),
            ("observation-not-from-helpers", ()), ("prompt-missing-thinking", ()),
            ("prompt-missing-observation", ("create_single_stage_prompt",)), ("prompt-wrong-agent-id", ()),
            ("prompt-missing-helper-menu", ())]


def played_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """What only the training's way of playing shows: a helper acting for another agent through a module-level
    cache of the game (from its second call on the same game), a helper that turns slow on the same game, a
    dispatch that substitutes a helper for an unknown action and drops arguments the helper lacks, and a
    Stage-2 prompt fed the observation the last Stage-1 call saw (the training renders every Stage 1 first)."""
    setter, action = setter_and_action(folder)
    easy = simple_helper(folder)
    append("helpers.py", lambda f: f"""_GAMES_SEEN = []


def rally_later(env, agent_id) -> bool:
    if _GAMES_SEEN and _GAMES_SEEN[-1] is env:
        env.{setter}((agent_id + 1) % 2, {action!r})
    _GAMES_SEEN.append(env)
    env.{setter}(agent_id, {action!r})
    return True


_CALLS_PER_GAME = {{}}


def dawdle(env, agent_id) -> bool:
    _CALLS_PER_GAME[id(env)] = _CALLS_PER_GAME.get(id(env), 0) + 1
    if _CALLS_PER_GAME[id(env)] > 1:
        import time
        time.sleep(300)
    env.{setter}(agent_id, {action!r})
    return True""")(folder)
    node = function_node(read(folder, "train.py"), dispatch(folder))
    parsed = node.args.args[1].arg
    in_dispatch(lambda f: f"import inspect as _inspect\n_known = getattr(helpers, str({parsed}['action']), None)\n"
                          f"if not callable(_known) or str({parsed}['action']).startswith('_'):\n"
                          f"    {parsed} = dict({parsed}, action={easy!r}, args={{}})\n"
                          f"elif isinstance({parsed}.get('args'), dict):\n"
                          f"    _params = _inspect.signature(_known).parameters\n"
                          f"    {parsed} = dict({parsed}, args={{k: v for k, v in {parsed}['args'].items() "
                          f"if k in _params}})")(folder)

    def stage2_reads_cache(text: str) -> str:
        text = re.sub(r"(def create_thinking_prompt\([^)]*\)[^:]*:\n(?:    \"\"\"[^\n]*\"\"\"\n)?)",
                      r"\1    _LAST_OBSERVATION[0] = obs_text\n", text, count=1)
        text = re.sub(r"(def create_single_stage_prompt\([^)]*\)[^:]*:\n(?:    \"\"\"[^\n]*\"\"\"\n)?)",
                      r"\1    obs_text = _LAST_OBSERVATION[0]\n", text, count=1)
        return text + "\n\n_LAST_OBSERVATION = ['']\n"
    edit_file(folder, "prompt_template.py", stage2_reads_cache)
    return [("helper-acts-for-others", ("rally_later", "turn")), ("helper-too-slow", ("dawdle",)),
            ("dispatch-accepts-raw-action", (f"ran {easy}() instead",)), ("dispatch-accepts-bad-arguments", ()),
            ("prompt-missing-observation", ("create_single_stage_prompt",))]


def together(*groups: Callable[[Path], list]) -> Callable[[Path], list]:
    """Groups whose mutants touch different code, in one folder: one probe run judges them all."""
    return lambda folder: [finding for group in groups for finding in group(folder)]


# four probe runs per example: GENERIC + helpers, the game's class + prompts and dispatch, the patched game,
# what only the training's way of playing shows
GROUPS = {"generic+helpers": together(generic_group, helpers_group),
          "game-class+prompts": together(game_class_group, prompts_group), "game-patch": game_patch_group,
          "played": played_group}


def missing_findings(violations, expected) -> list:
    return [(rule, words) for rule, words in expected if not found(violations, rule, *words)]


TWICE = ("cleanup", "generic+helpers")  # run twice by test_the_verdict_is_the_same_run_after_run


@pytest.mark.parametrize("name,group", [(n, g) for n in EXAMPLES for g in sorted(GROUPS) if (n, g) != TWICE])
def test_one_probe_run_flags_each_mutant_of_the_group(tmp_path: Path, name: str, group: str) -> None:
    folder, source = example_generated(tmp_path, name)
    expected = GROUPS[group](folder)
    violations = probe(folder, source)
    assert not missing_findings(violations, expected), "\n".join(map(str, violations))


@pytest.mark.slow
def test_the_verdict_is_the_same_run_after_run(tmp_path: Path) -> None:
    """Seeded games and calls, a fixed hash seed: the same files, the same violations, also when train.py builds
    its game unseeded (the game's own default seed, None for Cleanup, once made two verdicts flip between runs)."""
    folder, source = example_generated(tmp_path, TWICE[0])
    expected = GROUPS[TWICE[1]](folder)
    edit_file(folder, "train.py", lambda t: re.sub(r"seed=config\.\w+\)", "seed=None)", t, count=1))  # unseeded game
    first, second = probe(folder, source), probe(folder, source)
    assert not missing_findings(first, expected), "\n".join(map(str, first))
    assert [str(v) for v in first] == [str(v) for v in second]


def with_header(folder: Path) -> None:
    edit_file(folder, "train.py", lambda t: re.sub(r"return (helpers\.observation_to_text\(\w+, \w+\))",
                                                   r'return "What you see now:\\n" + \1', t, count=1))


def array_before_args(folder: Path) -> None:
    edit_file(folder, "launch_training.sh", lambda t: t.replace("set -euo pipefail", (
        f"set -euo pipefail\nEXTRA=(--{cap_field(folder)} 8)\nNP_FOUND=yes"), 1).replace(
        'train.py "$@"', 'train.py "${EXTRA[@]}" "$@"'))


@pytest.mark.parametrize("name", EXAMPLES)
def test_valid_variants_pass_every_rule(tmp_path: Path, name: str) -> None:
    """What the brief allows: an observation with a header around observation_to_text's, a private utility in
    helpers.py, a launch script that builds arguments in an array before "$@" (the orchestrator's come last)."""
    folder, source = example_generated(tmp_path, name)
    with_header(folder)
    append("helpers.py", lambda f: "def _manhattan(a, b):\n    return abs(a[0] - b[0]) + abs(a[1] - b[1])")(folder)
    array_before_args(folder)
    assert run_guards(folder, source).passed, run_guards(folder, source).evidence
    result = run_import_check(folder, source_of_truth=source)
    assert result.passed, result.evidence


# ---------------------------------------------------------------- the launch script, run with recorders

def launch_edit(old: str, new: Callable[[Path], str], count: int = 0) -> Callable[[Path], None]:
    return lambda folder: edit_file(folder, "launch_training.sh", lambda t: re.sub(old, new(folder), t, count=count))


def after_set(line: Callable[[Path], str]) -> Callable[[Path], None]:
    return lambda folder: edit_file(folder, "launch_training.sh",
                                    lambda t: t.replace("set -euo pipefail", f"set -euo pipefail\n{line(folder)}", 1))


def hide(prelude: Callable[[Path], str], tail: str) -> Callable[[Path], None]:
    """A training value hidden from the static rule, passed to train.py after "$@"."""
    def mutate(folder: Path) -> None:
        after_set(prelude)(folder)
        edit_file(folder, "launch_training.sh", lambda t: t.replace('train.py "$@"', f'train.py "$@" {tail}'))
    return mutate


LAUNCH: dict[str, Callable[[Path], None]] = {
    "launch-process-count/variable": lambda f: (after_set(lambda _: "NP=4")(f), launch_edit(
        r'--num_processes\s+(\$\(\([^)]*(?:NUM_GPUS|PER_NODE)[^)]*\)\)|"?\$\{NUM_GPUS\}"?)',
        lambda _: '--num_processes "${NP}"', 1)(f)),
    "launch-overrides-args/variable": hide(lambda f: f'EXTRA="--{cap_field(f)} 8"', "${EXTRA}"),
    "launch-overrides-args/heredoc": hide(lambda f: f"EXTRA=$(cat <<'END'\n--{cap_field(f)} 8\nEND\n)", "${EXTRA}"),
    "launch-overrides-args/array": hide(lambda f: f"EXTRA=(--{cap_field(f)} 8)", '"${EXTRA[@]}"'),
    "launch-overrides-args/hyphenated": lambda f: edit_file(f, "launch_training.sh", lambda t: t.replace(
        'train.py "$@"', f'train.py "$@" --{cap_field(f).replace("_", "-")}=8')),
    "launch-drops-args": launch_edit(r'train\.py "\$@"', lambda _: "train.py"),
    "launch-writes-config": after_set(lambda _: "sed -i 's/= /=  /' grpo_config.py"),
}


@pytest.mark.parametrize("kind", sorted(LAUNCH))
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_recorded_launch_flags_each_mutant(tmp_path: Path, name: str, kind: str) -> None:
    folder, _ = example_generated(tmp_path, name)
    LAUNCH[kind](folder)
    found_rules = {v.rule for v in check_recorded_launch(folder, probe_args(read(folder, "grpo_config.py")))}
    assert kind.split("/")[0] in found_rules, found_rules


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_rule_that_may_be_an_import_error_shows_the_import_error(tmp_path: Path, name: str) -> None:
    """train.py without `import helpers` but with getattr(helpers, name): the rule names the missing import,
    and the evidence carries the NameError of the import check."""
    folder, source = example_generated(tmp_path, name)
    edit_file(folder, "train.py", lambda t: t.replace("import helpers\n", "", 1))
    result = run_guards(folder, source)
    assert not result.passed and "never imports it" in result.evidence
    assert "NameError" in result.evidence and "helpers" in result.summary and "import train" in result.summary


# ---------------------------------------------------------------- the rules judge meaning, not style (issue 32)

def role(folder: Path, name: str) -> str:
    return recorded_roles(example(folder.name))["roles"][name]


def parser(folder: Path) -> str:
    """The CUSTOMIZE function of (text, agent_id) that returns the parsed call (annotated `-> dict`)."""
    text = read(folder, "train.py")
    return next(n for n in customize_callables(text) if "." not in n
                and ast.unparse(function_node(text, n).returns or ast.Constant(None)) == "dict"
                and len(function_node(text, n).args.args) == 2)


def eval_in_parser(folder: Path) -> None:
    """The action parser runs the model's text as Python."""
    text = function_node(read(folder, "train.py"), parser(folder)).args.args[0].arg
    at_top_of(parser, lambda f: f"call = eval({text})\nif isinstance(call, dict):\n    return call")(folder)


def agents_from_environment(folder: Path) -> None:
    """The game factory takes the agent count from the environment, over the config's."""
    field = role(folder, "agent_count")
    in_factory(lambda f: "import os")(folder)
    edit_file(folder, "train.py", lambda t: re.sub(rf"=config\.{field}\b",
                                                   f'=int(os.environ.get("NUM_AGENTS", config.{field}))', t, count=1))


STATIC_MEANING: dict[str, Callable[[Path], None]] = {
    "eval-of-model-output/parser": eval_in_parser,
    "eval-of-model-output/helper": append("helpers.py", lambda f: (
        "def steer(env, agent_id, plan: str) -> bool:\n    exec(compile(plan, 'plan', 'exec'))\n    return True")),
    "config-from-environment": agents_from_environment,
    "generic-object-rebound/write-through-vars": in_factory(lambda f: "vars(helpers).update(extra=None)"),
}


@pytest.mark.parametrize("kind", sorted(STATIC_MEANING))
@pytest.mark.parametrize("name", EXAMPLES)
def test_model_text_run_as_code_and_config_from_the_environment_are_flagged(tmp_path: Path, name: str,
                                                                              kind: str) -> None:
    folder, source = example_generated(tmp_path, name)
    STATIC_MEANING[kind](folder)
    assert kind.split("/")[0] in {v.rule for v in errors(check_folder(folder, source))}


def swap_model_under_slurm(folder: Path) -> None:
    """The model train.py gets changes when SLURM runs the script (the recorded launch clears SLURM_*)."""
    after_set(lambda f: 'MODEL=""\nif [ -n "${SLURM_JOB_ID:-}" ]; then MODEL=other-model; fi')(folder)
    edit_file(folder, "launch_training.sh", lambda t: t.replace(
        'train.py "$@"', f'train.py ${{MODEL:+--{role(folder, "model")} "$MODEL"}} "$@"'))


def launch_under_a_dead_branch(folder: Path) -> None:
    """`accelerate launch` sits under `if false` while plain python runs train.py."""
    after_set(lambda f: 'if false; then\n    accelerate launch train.py "$@"\nelse\n    exec "${PYTHON:-python}" '
                        'train.py "$@"\nfi')(folder)


def launch_config(processes: str) -> str:
    """A script that writes accelerate's settings to a temporary file and launches with it."""
    return (f"GPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)\n"
            f"CONFIG_DIR=$(mktemp -d)\ntrap 'rm -rf \"${{CONFIG_DIR}}\"' EXIT\n"
            f"cat > \"${{CONFIG_DIR}}/accelerate.yaml\" <<EOF\ncompute_environment: LOCAL_MACHINE\n"
            f"num_machines: 1\nnum_processes: {processes}\nmixed_precision: \"no\"\nEOF\n"
            f'accelerate launch --config_file "${{CONFIG_DIR}}/accelerate.yaml" train.py "$@"\nexit $?')


LAUNCH_MEANING: dict[str, Callable[[Path], None]] = {
    "launch-without-accelerate/dead-branch": launch_under_a_dead_branch,
    "launch-args-differ/slurm-model": swap_model_under_slurm,
    "launch-process-count/heredoc-config": after_set(lambda f: launch_config("4")),
}


@pytest.mark.parametrize("kind", sorted(LAUNCH_MEANING))
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_recorded_launch_judges_what_runs_under_slurm_too(tmp_path: Path, name: str, kind: str) -> None:
    """Each passes the static launch rules; the recorded launch (run directly, and as a one- and a two-node
    SLURM job) finds what really starts train.py, with what."""
    folder, source = example_generated(tmp_path, name)
    LAUNCH_MEANING[kind](folder)
    assert not [v for v in errors(check_folder(folder, source)) if v.file == "launch_training.sh"]
    found = {v.rule for v in errors(rule_violations(folder, source))}
    assert kind.split("/")[0] in found, found


def optional_parameter(folder: Path, helper: str) -> None:
    """An action helper gains an optional parameter that the prompts do not name."""
    edit_file(folder, "helpers.py", lambda t: re.sub(rf"(def {helper}\([^)]*)\)", r"\1, note=None)", t, count=1))


def helper_from_a_class(folder: Path, helper: str) -> None:
    """An action helper defined as a staticmethod of a private class and exposed by name."""
    text = read(folder, "helpers.py")
    node = function_node(text, helper)
    source = "\n".join(text.split("\n")[node.lineno - 1:node.end_lineno])
    moved = f"class _Idle:\n    @staticmethod\n{textwrap.indent(source, '    ')}\n\n\n{helper} = _Idle.{helper}"
    edit_file(folder, "helpers.py", lambda t: t.replace(source, moved, 1))


def dispatch_table_from_vars(folder: Path) -> None:
    edit_file(folder, "train.py", lambda t: re.sub(
        r"\{name: getattr\(helpers, name\) for name in ([\w.]+)\}",
        r"{name: value for name, value in vars(helpers).items() if name in \1}", t, count=1))


def alias_for_type_checkers(folder: Path) -> None:
    """The builders' return annotation is an alias defined under `if TYPE_CHECKING:`."""
    def change(text: str) -> str:
        text = re.sub(r"\) -> list\[dict(\[str, str\])?\]:", ") -> Messages:", text)
        return text.replace("from __future__ import annotations\n", "from __future__ import annotations\n\n"
                            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                            "    Messages = list[dict[str, str]]\n", 1)
    edit_file(folder, "prompt_template.py", change)


def two_argument_helper(folder: Path, but: str) -> str:
    return next(n.name for n in ast.parse(read(folder, "helpers.py")).body if isinstance(n, ast.FunctionDef)
                and not n.name.startswith("_") and n.name not in ("observation_to_text", but) and len(n.args.args) == 2)


@pytest.mark.parametrize("name", EXAMPLES)
def test_valid_variants_of_meaning_pass_every_rule(tmp_path: Path, name: str) -> None:
    """What the rules once refused for its style: an optional helper parameter the prompts do not name, a helper
    exposed by name from a class, a dispatch table built over vars(helpers), a return annotation whose alias
    only type checkers see; with a launcher's own variable read from the environment and a launch script that
    writes its accelerate config to a temporary file (one process per GPU) and launches with it."""
    folder, source = example_generated(tmp_path, name)
    easy = simple_helper(folder)
    optional_parameter(folder, two_argument_helper(folder, but=easy))
    helper_from_a_class(folder, easy)
    dispatch_table_from_vars(folder)
    alias_for_type_checkers(folder)
    in_factory(lambda f: 'import os\n_rank = int(os.environ.get("LOCAL_RANK", "0"))')(folder)
    after_set(lambda f: launch_config("$(( GPUS > 0 ? GPUS : 1 ))"))(folder)
    result = run_guards(folder, source)
    assert result.passed, result.evidence
    result = run_import_check(folder, source_of_truth=source)
    assert result.passed, result.evidence
    assert f"| `{easy}` |" in helper_readme(read(folder, "helpers.py"))  # the readme documents it too


EXPOSED_HELPERS = """
import functools
from collections import deque


def _move(env, agent_id, direction="UP", steps=1):
    return True


def walk(env, agent_id, direction):
    return True


class _Tools:
    @staticmethod
    def wait(env, agent_id):
        return True

    @classmethod
    def rest(cls, env, agent_id, turns=1):
        return True

    def bow(self, env, agent_id, depth):
        return True

    def __call__(self, env, agent_id, times=2):
        return True


def _cached(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper


@_cached
def dash(env, agent_id, speed: int = 2):
    return True


def _make_noop():
    def noop(env, agent_id):
        return True
    return noop


wait = _Tools.wait
rest = _Tools.rest
bow = _Tools().bow
clap = _Tools()
go_up = functools.partial(_move, direction="UP")
go = walk
hop = lambda env, agent_id, height=1: True
spin = _cached(_move)
noop = _make_noop()
Queue = deque
gone = walk
del gone
"""


def test_the_static_and_the_running_definition_of_an_action_helper_agree(tmp_path: Path) -> None:
    """Every way a module can expose a helper: the AST reading names the same helpers, with the same
    parameters, as the imported module has; a factory's closure is unresolved, a class or an import is none."""
    path = tmp_path / "exposing_helpers.py"
    path.write_text(EXPOSED_HELPERS)
    spec = importlib.util.spec_from_file_location("exposing_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tree = ast.parse(EXPOSED_HELPERS)
    static, running = static_action_helpers(tree), action_helpers(module)
    assert set(running) == set(static) | unresolved_names(tree) == {
        "walk", "dash", "wait", "rest", "bow", "clap", "go_up", "go", "hop", "spin", "noop"}
    assert unresolved_names(tree) == {"noop"}
    for name, helper in static.items():
        params = [(a.arg, d is not None) for a, d in zip(
            helper.args.posonlyargs + helper.args.args,
            [None] * (len(helper.args.posonlyargs + helper.args.args) - len(helper.args.defaults))
            + helper.args.defaults)] + [(a.arg, d is not None) for a, d in zip(helper.args.kwonlyargs,
                                                                             helper.args.kw_defaults)]
        signature = inspect.signature(running[name]).parameters.values()
        assert params == [(p.name, p.default is not p.empty) for p in signature], name


ANNOTATION_MODULE = """
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TypedDict
from chat_types import ChatLog

if TYPE_CHECKING:
    Messages = list["Message"]
else:
    Messages = list


class Message(TypedDict):
    role: str
    content: str


class Turn:
    text: str


Log = Messages
"""


@pytest.mark.parametrize("annotation, verdict", [
    ("Messages", True), ("'Log'", True), ("List[Dict[str, Any]]", True), ("Optional[list[dict]]", True),
    ("list[Message] | None", True), ("ChatLog", None), ("list[ChatLog]", True), ("typing.Sequence[dict]", True),
    ("str", False), ("dict", False), ("list[str]", False), ("list[Turn]", False), ("tuple[dict, ...]", False),
    ("None", False)])
def test_return_annotations_are_resolved_as_type_checkers_read_them(annotation: str, verdict: bool | None) -> None:
    """Aliases (quoted, chained, under `if TYPE_CHECKING:`), typing's names and classes are followed; only what is
    surely no list of chat messages is refused (False); another module's name cannot be told (None, accepted)."""
    types = type_bindings(ast.parse(ANNOTATION_MODULE))
    assert type_verdict(ast.parse(annotation, mode="eval").body, types, MESSAGES) is verdict


MARKED = """import os
# === GENERIC — DO NOT MODIFY ===
AGENTS = int(os.environ.get("NUM_AGENTS", "2"))
SOURCE = eval(os.environ.get("EXPR", "1"))
# === CUSTOMIZE ===
RANK = int(os.environ.get("LOCAL_RANK", "0"))
CACHE = os.getenv("HF_HOME")
PARSED = eval("1 + 1")
{extra}
"""


@pytest.mark.parametrize("extra, found", [
    ("", []), ('WIDTH = int(os.environ["GRID_WIDTH"])', [("config-from-environment", 9)]),
    ("from os import getenv as env\nSEED = env('SEED')", [("config-from-environment", 10)]),
    ("if 'FAST' in os.environ:\n    pass", [("config-from-environment", 9)]),
    ("def act(text):\n    return exec(text)", [("eval-of-model-output", 10)]),
    ("from re import compile\nPATTERN = compile(os.sep)", [])])
def test_the_researchers_generic_code_is_not_judged_and_runtime_facts_are_fine(extra: str, found: list) -> None:
    """The template's GENERIC lines are the researcher's; in generated code a launcher's variable, a library's
    knob and a constant eval pass, a config value from the environment and exec of a text do not; a `compile`
    imported from elsewhere is not the builtin."""
    text = MARKED.format(extra=extra)
    assert [(v.rule, v.line) for v in check_inputs("train.py", ast.parse(text), text)] == found
