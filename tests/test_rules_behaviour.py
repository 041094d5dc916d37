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
from orchestrator.rules.helper_docs import helper_readme
from orchestrator.rules import check_folder, errors
from orchestrator.rules.dynamic import customize_callables, probe_folder
from orchestrator.rules.exposed import action_helpers, static_action_helpers, unresolved_names
from orchestrator.rules.inputs import check_inputs
from orchestrator.rules.probe.game import choose, default_recipe, import_apart, learn_play, reached_modules
from orchestrator.rules.recorded_launch import check_recorded_launch, probe_args
from orchestrator.rules.static import MESSAGES, type_bindings, type_verdict
from orchestrator.sources.template import read_sections

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
# what only the training's way of playing shows (a whole episode is played only by helpers that pass one turn)
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
    """Site defaults before "$@", in an array and written out (`--report_to none --save_interval 50 "$@"`): the
    orchestrator's values reach train.py last, so they win."""
    edit_file(folder, "launch_training.sh", lambda t: t.replace("set -euo pipefail", (
        f"set -euo pipefail\nEXTRA=(--{cap_field(folder)} 8)\nNP_FOUND=yes"), 1).replace(
        'train.py "$@"', f'train.py "${{EXTRA[@]}}" --{role(folder, "model")} site-default-model "$@"'))


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
def test_valid_variants_pass_every_rule(tmp_path: Path, name: str) -> None:
    """What the brief allows, in one folder: an observation with a header around observation_to_text's, a private
    utility in helpers.py; and what the rules once refused for its style: an optional helper parameter the prompts
    do not name, a helper exposed by name from a class, a dispatch table built over vars(helpers), a return
    annotation whose alias only type checkers see; with a launcher's own variable read from the environment and a
    launch script that writes its accelerate config to a temporary file (one process per GPU) and launches with it.
    Apart, a launch script that builds arguments in an array before "$@" (the orchestrator's come last)."""
    folder, source = example_generated(tmp_path, name)
    with_header(folder)
    append("helpers.py", lambda f: "def _manhattan(a, b):\n    return abs(a[0] - b[0]) + abs(a[1] - b[1])")(folder)
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
    (tmp_path / "arrays").mkdir()
    arrays, _ = example_generated(tmp_path / "arrays", name)
    array_before_args(arrays)
    result = run_guards(arrays, source)
    assert result.passed, result.evidence


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


# ---------------------------------------------------------------- the training run judged from inside

# CUSTOMIZE code that only the training loop runs (the import check's probe never calls it), and a GENERIC class
# whose instance the training keeps, with a method the GENERIC code calls on it
TRAINING_ONLY = {"cleanup": "shape_reward", "staghunt": "start"}  # staghunt: RunLogger.start, on rank 0
SHADOWED = {"cleanup": ("Trainer", "optimisation_plan"), "staghunt": ("HunterPrompts", "prompt_ids")}


def on_first_training_call(code: Callable[[Path], str]) -> Callable[[Path], None]:
    """`code` run once, on the first call of the example's training-only CUSTOMIZE function, in a process that runs
    train.py as its script (the probe, which calls the reward and logging hooks too, imports it)."""
    def once(folder: Path) -> str:
        body = "\n".join("    " + line for line in code(folder).split("\n"))
        return (f"if not globals().get('_patched_in_training') and __import__('sys').argv[0].endswith('train.py'):\n"
                f"    globals()['_patched_in_training'] = True\n{body}")
    return lambda folder: at_top_of(TRAINING_ONLY[folder.name], once)(folder)


def training_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """While training runs: torch.clamp made a no-op, Accelerator.clip_grad_norm_ patched so gradients are never
    clipped (and torch's clip_grad_norm_, which the GENERIC code never names), an instance attribute that shadows
    a method of a GENERIC class, and one that shadows the method of the accelerator the GENERIC code calls (both
    calling that same method)."""
    cls, member = SHADOWED[folder.name]
    on_first_training_call(lambda f: f"""import functools, gc, torch, accelerate
torch.clamp = lambda value, *args, **kwargs: value
accelerate.Accelerator.clip_grad_norm_ = lambda self, parameters, max_norm, norm_type=2: \\
    torch.nn.utils.clip_grad_norm_(parameters, float("inf"), norm_type)
torch.nn.utils.clip_grad_norm_ = lambda parameters, max_norm, *args, **kwargs: \\
    torch.nn.utils.clip_grad.clip_grad_norm_(parameters, float("inf"), *args, **kwargs)
for obj in gc.get_objects():
    if type(obj).__name__ == {cls!r}:
        obj.{member} = functools.partial(type(obj).{member}, obj)
    elif type(obj) is accelerate.Accelerator:
        obj.backward = lambda loss, _self=obj, **kwargs: \\
            accelerate.Accelerator.backward(_self, loss, **kwargs)""")(folder)
    return [("generic-object-rebound", ("torch.clamp", "during training")),
            ("generic-behaviour-changed", ("grpo_token_loss", "during training")),
            ("generic-object-rebound", ("Accelerator", "clip_grad_norm_", "during training")),
            ("generic-object-rebound", ("torch.nn.utils.clip_grad_norm_", "library code", "during training")),
            ("generic-object-rebound", ("instance of the GENERIC class", cls, member, "during training")),
            ("generic-object-rebound", ("instance of Accelerator", "backward", "during training"))]


def example_roles(name: str, source: Path):
    from orchestrator.sources.config_file import read_config
    from orchestrator.sources.roles import validate_roles

    kinds = read_config(source / "grpo_config.py").kinds
    return validate_roles(recorded_roles(example(name)), kinds, cli_possible=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRAINING_ONLY))
def test_patches_made_only_while_training_are_flagged_inside_the_training_run(tmp_path: Path, name: str,
                                                                              tiny_model_dir: Path) -> None:
    """The import check's probe never runs the patching code, so it passes; the runtime check's training
    process compares at its end and fails with each patch's rule, said to have happened during training.
    One process: with two, a rank stopped by the launcher while the other raises could not compare."""
    from orchestrator.checks import RuntimeCheckSpec, judge_short_run, short_run

    folder, source = example_generated(tmp_path, name)
    expected = training_group(folder)
    assert run_import_check(folder, source_of_truth=source).passed
    spec = RuntimeCheckSpec(model=str(tiny_model_dir), real_model=False, episodes=4, group=2, turns=2, token_cap=8,
                            cpu_processes=1)
    run = short_run(folder, spec, example_roles(name, source), tmp_path / "check", source_of_truth=source)
    result = judge_short_run(run, spec)
    assert run.training is not None and not run.training.notes, run.result.stderr[-3000:]
    violations = violations_of(run.training.violations)
    assert not missing_findings(violations, expected), "\n".join(map(str, violations))
    assert not result.passed and all(str(v) in result.evidence for v in violations)
    # unclamped and unclipped, the weights blow up: a NaN loss logged (Cleanup; the findings are the failure) or a
    # NaN met while sampling (Stag Hunt; its traceback is, the findings follow it)
    if run.result.ok:
        assert result.kind == "contract" and "during the training run" in result.summary
    else:
        assert result.kind == "runtime_error" and "During the training run, also" in result.evidence


WRITTEN_AT_RUN_TIME = '''# === GENERIC — DO NOT MODIFY ===
LIMIT = 3
CACHE = {}
SEEN = []
STEP = 0


def remember(key: str) -> int:
    global STEP
    STEP += 1
    CACHE[key] = STEP
    SEEN.append(key)
    return LIMIT


class Engine:
    def step(self, key: str) -> int:
        self.calls.append(key)
        self.last = key
        return LIMIT
'''


def test_the_names_the_template_s_own_functions_change_are_known():
    """Their values at the end of a training are the training's, so that comparison leaves them out; so are the
    attributes they set or fill (an instance may hold its own)."""
    from orchestrator.rules.dynamic import template_facts

    facts = template_facts(WRITTEN_AT_RUN_TIME)
    assert facts["run_time_written"] == ["CACHE", "SEEN", "STEP"]
    assert facts["attribute_stores"] == ["calls", "last"]
    assert "append" in facts["attributes"] and "LIMIT" in facts["generic_names"]


LIBRARY_TEMPLATE = '''# === GENERIC — DO NOT MODIFY ===
from argparse import ArgumentParser


def parser() -> ArgumentParser:
    made = ArgumentParser()
    made.add_argument("--steps")
    return made
'''


def test_a_library_class_method_reached_through_an_instance_is_compared(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """ArgumentParser is imported by name and add_argument is inherited: wrapped by code of the training's
    folder it is flagged, right after the import and during training; a library wrapping its own function
    (as torch._dynamo wraps torch.manual_seed) counts only right after the import."""
    import argparse
    import functools

    from orchestrator.rules.dynamic import template_facts
    from orchestrator.rules.probe.game import import_apart
    from orchestrator.rules.probe.generic import AFTER_IMPORT, DURING_TRAINING, Reference

    (tmp_path / "grpo_template.py").write_text(LIBRARY_TEMPLATE)
    (tmp_path / "train.py").write_text(LIBRARY_TEMPLATE)
    reference = Reference(import_apart(str(tmp_path / "grpo_template.py"), "_library_template"),
                          template_facts(LIBRARY_TEMPLATE))
    train = import_apart(str(tmp_path / "train.py"), "_library_train")
    assert reference.compare(train, DURING_TRAINING) == []
    original = argparse._ActionsContainer.add_argument
    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", functools.wraps(original)(
        lambda *args, **kwargs: original(*args, **kwargs)))  # the "library's own" wrapper: written here, not there
    assert reference.compare(train, DURING_TRAINING) == []
    assert found(violations_of(reference.compare(train, AFTER_IMPORT)), "generic-object-rebound", "add_argument")
    # the generated code's own wrapper still calls the original: written in the training's folder, it counts
    patch = eval(compile("lambda *args, **kwargs: original(*args, **kwargs)", str(tmp_path / "train.py"), "eval"),
                 {"original": original})
    monkeypatch.setattr(train.ArgumentParser, "add_argument", functools.wraps(original)(patch))
    during = violations_of(reference.compare(train, DURING_TRAINING))
    assert found(during, "generic-object-rebound", "ArgumentParser", "add_argument", "during training", "train.py")


def violations_of(problems: list[dict]):
    from orchestrator.rules import Violation

    return [Violation(p["rule"], p["file"], None, p["message"]) for p in problems]


SHADOWING = '''
import dataclasses
import functools


@dataclasses.dataclass
class Engine:
    steps: int = 0

    def generate(self):
        return 1

    def forward(self):
        return 2

    def format(self):
        return 3

    @functools.cached_property
    def vocabulary(self):
        return 4
'''


def test_the_instance_watch_flags_only_an_attribute_that_shadows_a_generic_member(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    """Of a GENERIC class, not a dataclass field, a member the GENERIC code sets itself (`forward`), a CUSTOMIZE
    member (`format`) or a cached property; of a library class the GENERIC code names, only a method replaced
    by code of the training's folder (the library's own wrapper of it is no finding). Instances made after the
    watch started, seen at the next garbage collection."""
    import argparse
    import functools
    import gc
    import sys
    import types

    from orchestrator.rules.probe.training import InstanceWatch

    module = types.ModuleType("_watched_train")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(SHADOWING, vars(module))
    library = {argparse.ArgumentParser: frozenset({"add_argument", "format_help"})}
    watch = InstanceWatch({"Engine": {"format"}}, allowed={"forward"}, library=library, folder=str(tmp_path),
                          module=module.__name__)
    watch.install()
    try:
        engine, parser = module.Engine(), argparse.ArgumentParser()
        gc.collect()
        engine.steps, engine.forward, engine.format = 5, lambda: 0, lambda: 0
        assert engine.vocabulary == 4
        parser.add_argument = functools.partial(argparse.ArgumentParser.add_argument, parser)
        gc.collect()
        assert watch.violations() == [] and watch.instances == 2
        engine.generate = lambda: 0
        parser.format_help = eval(compile("lambda: ''", str(tmp_path / "train.py"), "eval"))
        gc.collect()
    finally:
        watch.uninstall()
    messages = [v["message"] for v in watch.violations()]
    assert [m.split(" had ")[0] for m in messages] == ["an instance of ArgumentParser",
                                                       "an instance of the GENERIC class Engine"]
    assert "ArgumentParser.format_help" in messages[0] and "Engine.generate" in messages[1] and not watch.error


def test_the_runtime_check_reads_the_findings_of_the_training_as_the_rules_failures(tmp_path: Path):
    import json
    from dataclasses import replace

    from orchestrator.training.census import FINDINGS_NAME, read_training_check
    from orchestrator.checks import CheckResult, with_training_findings

    rebound = {"rule": "generic-object-rebound", "file": "train.py", "message": "torch.clamp ... during training"}
    lines = [{"violations": [rebound], "note": ""}, {"violations": [rebound], "note": "the watch stopped"}]
    (tmp_path / FINDINGS_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))
    findings = read_training_check(tmp_path)
    assert findings.violations == [rebound] and findings.notes == ["the watch stopped"]
    passed = CheckResult("runtime_check", True, summary="2 updates with finite loss and grad norm")
    failed = with_training_findings(passed, findings)
    assert not failed.passed and failed.kind == "contract" and failed.files == ["train.py"]
    assert failed.summary.startswith("1 rule violation(s) during the training run; first: generic-object-rebound")
    non_finite = CheckResult("runtime_check", False, "non_finite", "update 1 logged a non-finite loss", "train.logs")
    both = with_training_findings(non_finite, findings)
    assert both.kind == "contract" and both.evidence.index("torch.clamp") < both.evidence.index("non-finite loss")
    crashed = CheckResult("runtime_check", False, "runtime_error", "the short training run failed: RuntimeError",
                          "Traceback ...")
    kept = with_training_findings(crashed, findings, exited=False)
    assert kept.kind == "runtime_error" and kept.summary == crashed.summary
    assert kept.evidence.index("Traceback") < kept.evidence.index("During the training run, also:\ngeneric-object")
    assert not with_training_findings(passed, findings, exited=False).passed  # a rank lost at exit after done
    noted = with_training_findings(passed, replace(findings, violations=[]))
    assert noted.passed and noted.summary.endswith("; the check during training: the watch stopped")
    assert read_training_check(tmp_path / "none") is None


HOOKED_TEMPLATE = '''# === GENERIC — DO NOT MODIFY ===
import math


def halves(n: int) -> int:
    return math.ceil(n / 2)


# === CUSTOMIZE ===
def on_step(step: int) -> None:
    raise NotImplementedError


# === GENERIC — DO NOT MODIFY ===
def main() -> None:
    for step in range(3):
        on_step(step)
    print(halves(5))


if __name__ == "__main__":
    main()
'''


def hooked_run(folder: Path, train: str, rank: str | None = "0", template: str = HOOKED_TEMPLATE,
               library: Path | None = None):
    """`python train.py` in `folder` under the runtime check's census hook, with the plan of `template`, and
    `library` (a folder of packages) on its path."""
    import os
    import subprocess
    import sys

    from orchestrator.training.census import census_env
    from orchestrator.rules.dynamic import probe_plan

    folder.mkdir(exist_ok=True)
    (folder / "grpo_template.py").write_text(template)
    (folder / "train.py").write_text(train)
    env = {**os.environ, **census_env(folder / "census", training_plan=probe_plan(folder))}
    if library is not None:
        env["PYTHONPATH"] += os.pathsep + str(library)
    env.pop("RANK", None)
    if rank is not None:
        env["RANK"] = rank
    return subprocess.run([sys.executable, "train.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("rank", ["0", "1", None])
def test_the_census_hook_judges_the_training_of_every_rank_from_inside_and_prints_nothing(tmp_path: Path, rank):
    """A plain `python train.py` (no torch: a quick interpreter) whose CUSTOMIZE step replaces math.ceil on its
    first call: the hook of every process (rank 0, 1, or a process without RANK) takes the template's reference
    first and finds the patch at exit; the run's own output is all that is printed."""
    from orchestrator.training.census import read_training_check

    run = hooked_run(tmp_path, HOOKED_TEMPLATE.replace(
        "    raise NotImplementedError", "    if step == 0:\n        math.ceil = lambda value: 0"), rank)
    assert run.returncode == 0 and run.stdout == "0\n" and run.stderr == "", run.stderr
    findings = read_training_check(tmp_path / "census")
    assert findings.notes == ["no optimizer-step hook (torch not loaded by the template): compared at exit only"]
    assert findings.checked["functions"] == 1, findings
    violations = violations_of(findings.violations)
    assert found(violations, "generic-object-rebound", "math.ceil", "during training", "train.py, line")
    assert found(violations, "generic-behaviour-changed", "halves", "during training")


def test_a_train_py_that_raises_before_its_generic_code_is_bound_is_a_note_not_a_finding(tmp_path: Path):
    """Its traceback is the evidence: nothing is compared, and the hook says why."""
    from orchestrator.training.census import read_training_check

    run = hooked_run(tmp_path, HOOKED_TEMPLATE.replace("def halves(", "undefined_name\n\n\ndef halves("))
    assert run.returncode == 1 and "NameError" in run.stderr
    findings = read_training_check(tmp_path / "census")
    assert findings.violations == [] and findings.notes[-1] == (
        "train.py raised before it bound every GENERIC name: its traceback is the evidence, its GENERIC code was "
        "not compared")


LIBRARY_UNDER_TEMPLATE = HOOKED_TEMPLATE.replace("import math", "import fakelib").replace(
    "def halves(n: int) -> int:\n    return math.ceil(n / 2)",
    "def doubled(n: int) -> int:\n    return fakelib.outer(n)").replace("print(halves(5))", "print(doubled(1))")
FAKE_LIBRARY = '''def inner(value):
    return value + 1


def outer(value):
    return inner(value) * 2


class Clipper:
    def clip(self, value):
        return min(value, 1)
'''


def test_library_code_the_generic_code_runs_on_without_naming_it_is_judged_too(tmp_path: Path):
    """The GENERIC code calls fakelib.outer, which calls fakelib.inner: a CUSTOMIZE patch of inner (and of a class
    of that package) while training runs is found in the package's modules, code of train.py where the library's
    was."""
    from orchestrator.training.census import read_training_check

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "fakelib.py").write_text(FAKE_LIBRARY)
    train = LIBRARY_UNDER_TEMPLATE.replace("    raise NotImplementedError", (
        "    if step == 0:\n        fakelib.inner = lambda value: 0\n"
        "        fakelib.Clipper.clip = lambda self, value: value"))
    run = hooked_run(tmp_path / "code", train, template=LIBRARY_UNDER_TEMPLATE, library=tmp_path / "site")
    assert run.returncode == 0 and run.stdout == "0\n" and run.stderr == "", run.stderr
    violations = violations_of(read_training_check(tmp_path / "code" / "census").violations)
    assert found(violations, "generic-object-rebound", "fakelib.inner, fakelib.Clipper.clip", "train.py, line")
    assert found(violations, "generic-behaviour-changed", "doubled", "during training")
