"""The probe's main: import a generated folder's modules in this fresh interpreter, run them on a real
game, and compare what they do with what the researcher's own code does.

Run as `python -m orchestrator.rules.probe FOLDER PLAN_JSON` (dynamic.py builds the plan: the
template's GENERIC and CUSTOMIZE names, read from its markers, and where the researcher's own env_move.py
and grpo_template.py are). It prints one JSON object:

    {"import_failed": MODULE, "traceback": TEXT}                a module did not import (Phase 1 of the brief)
    {"violations": [{"rule", "file", "message"}, ...], "note"}   what the running code breaks of the contract

The order matters. Before any generated code runs, a clean copy of env_move and the template are imported
apart, and the template's GENERIC functions are called on fixed inputs. Then helpers, prompt_template and
train are imported (train with `__main__` bound to it, as under `accelerate launch`), the game is found
and played, every helper, prompt builder and the dispatch are probed on copies of real game states, and
only then, with all CUSTOMIZE code run, are GENERIC names, library objects and protected modules compared
with their state before. Every call into generated code is seeded and guarded (values.guarded): the same
files give the same verdict, and nothing is written.

The rules, each the running side of a line of the brief (game.py, effects.py and generic.py hold theirs):
- protected-module-shadowed: `env_move` and `grpo_config` resolve to the folder's own files.
- protected-module-patched ("Do NOT modify env_move.py"): neither importing the generated modules nor
  running them (the game factory, helpers, prompts, dispatch) changes a function, method, class attribute
  or module-level value of env_move or grpo_config.
- config-invalid ("you can change values"): GRPOConfig() with the generated values passes its own validation.
- config-written-at-run-time ("Set configs via grpo_config.py or cmd parameters"): the CUSTOMIZE code the
  probe runs with a config leaves every field of it as it was.
- observation-to-text: `observation_to_text(game, 0)` returns text with at least one coordinate pair.
- source-file-written (protect.py): nothing the generated code runs, its imports included, writes a file of the
  source of truth; the write is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import json
import os
import sys
import traceback
import types
from typing import Any

from orchestrator.rules.exposed import OBSERVATION_HELPER, action_helpers
from orchestrator.rules.probe.effects import (QUOTED, Board, callees, check_dispatch, check_helpers, check_observation,
                                              check_prompts, check_stages, find_dispatch)
from orchestrator.rules.probe.episodes import (check_environment, check_episodes, check_history, kept_state,
                                               module_data)
from orchestrator.rules.probe.hooks import RewardCheck, check_observation_hook, find_shaper, reward_inputs
from orchestrator.rules.probe.logs import check_logging
from orchestrator.rules.probe.game import (check_game, choose, default_recipe, dependencies, dependency_changes,
                                           env_base, find_factory, game_instance, import_apart, learn_play,
                                           reference_positions, start_recipe)
from orchestrator.rules.probe.generic import TEMPLATE_MODULE, Reference
from orchestrator.rules.probe.protect import protect
from orchestrator.rules.probe.values import (Reading, call, canonical, coordinate_pairs, differences, digest,
                                             show_path, violation)

PROTECTED = ("env_move", "grpo_config")
GENERATED = ("helpers", "prompt_template", "train")
CONFIG_CLASS = "GRPOConfig"
REFERENCE_ENV = "_env_move_reference"


def snapshot(module: types.ModuleType) -> dict[str, str]:
    """A fingerprint of each module attribute, and of each member of the classes the module defines."""
    found = {}
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        found[name] = digest(value)
        if isinstance(value, type) and value.__module__ == module.__name__:
            found.update({f"{name}.{member}": digest(inner, 1) for member, inner in vars(value).items()
                          if not member.startswith("__") or member in ("__init__", "__call__", "__new__")})
    return found


def protected_modules(folder: str) -> tuple[dict[str, types.ModuleType], list[dict]]:
    found, problems = {}, []
    for name in PROTECTED:
        module = importlib.import_module(name)
        where = os.path.realpath(getattr(module, "__file__", "") or "")
        if where != os.path.realpath(os.path.join(folder, f"{name}.py")):
            problems.append(violation("protected-module-shadowed", f"{name}.py",
                                      f"`import {name}` loads {where or 'a module without a file'}, not {name}.py of "
                                      f"this folder; remove whatever shadows it"))
        found[name] = module
    return found, problems


def import_generated() -> dict[str, types.ModuleType] | dict[str, str]:
    """helpers, prompt_template and train, as `import NAME` would; train with `__main__` bound to it (under
    `accelerate launch` it is __main__), its __name__ left as "train" so that nothing starts training.
    On failure: {"import_failed": NAME, "traceback": TEXT}."""
    loaded = {}
    probe_main = sys.modules.get("__main__")
    for name in GENERATED:
        try:
            if name == "train":
                spec = importlib.util.find_spec(name)
                if spec is None:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = sys.modules["__main__"] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(name, None)
                    sys.modules["__main__"] = probe_main
                    raise
                loaded[name] = module
            else:
                loaded[name] = importlib.import_module(name)
        except BaseException:  # the brief's Phase 1: the first module that does not import is the evidence
            return {"import_failed": name, "traceback": traceback.format_exc()}
    return loaded


def patched(before: dict[str, dict[str, str]], modules: dict[str, types.ModuleType], when: str,
            known: set[tuple[str, str]]) -> list[dict]:
    problems = []
    for name, module in modules.items():
        after = snapshot(module)
        changed = [k for k in sorted(set(before[name]) | set(after)) if before[name].get(k) != after.get(k)
                   and (name, k) not in known]
        changed = [k for k in changed if not any(other.startswith(k + ".") for other in changed)]
        known.update((name, k) for k in changed)
        if changed or sys.modules.get(name) is not module:
            problems.append(violation("protected-module-patched", f"{name}.py",
                                      f"{when} changed {name}: {', '.join(changed) or 'the module object itself'}; "
                                      f"{name}.py is protected: change behaviour in the generated files, never by "
                                      f"patching it"))
    return problems


def config_instance(config_cls: Any) -> Any:
    """GRPOConfig() with the folder's values; where its validation refuses them, the same values unchecked
    (config-invalid reports that), so the game and the GENERIC checks still run."""
    try:
        return config_cls()
    except Exception:
        config = config_cls.__new__(config_cls)
        for f in dataclasses.fields(config_cls):
            if f.default is not dataclasses.MISSING:
                object.__setattr__(config, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                object.__setattr__(config, f.name, f.default_factory())
        return config


def check_config(config_cls: Any) -> list[dict]:
    if dataclasses.is_dataclass(config_cls) and all(  # with required fields, only a launch can construct it
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            for f in dataclasses.fields(config_cls)):
        _, error = call(config_cls)
        if error is not None:
            return [violation("config-invalid", "grpo_config.py",
                              f"GRPOConfig() fails its own validation: {type(error).__name__}: {error}; change the "
                              f"value back to one the config accepts")]
    return []


def probe(folder: str, plan: dict[str, Any]) -> dict:
    sys.path.insert(0, folder)
    os.chdir(folder)
    guard = protect(folder)  # refused from the first import on: the folder is the workspace's own
    notes: list[str] = []
    modules, problems = protected_modules(folder)
    before = {name: snapshot(module) for name, module in modules.items()}
    argv = list(sys.argv)
    reference_env = reference = None
    if not plan.get("import_only"):
        try:
            reference_env = import_apart(plan.get("env_move") or os.path.join(folder, "env_move.py"), REFERENCE_ENV)
        except Exception as exc:
            notes.append(f"env_move could not be imported apart ({type(exc).__name__}): game checks skipped")
        try:
            template = import_apart(plan.get("template") or os.path.join(folder, "grpo_template.py"), TEMPLATE_MODULE)
            reference = Reference(template, plan)
        except Exception as exc:
            notes.append(f"the template could not be imported apart ({type(exc).__name__}: {exc}): GENERIC behaviour "
                         f"not compared")
    clean_game = game_instance(reference_env) if reference_env is not None else None
    relied_on = dependencies(modules["env_move"], clean_game)  # after the template's libraries, before generated code
    loaded = import_generated()
    if "import_failed" in loaded:
        return loaded
    generic = set(plan.get("generic_names", []))
    counted = {n: canonical(v) for n, v in vars(loaded["train"]).items() if n not in generic and not n.startswith("__")
               and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if plan.get("import_only"):
        return {"violations": problems + guard.violations("while it was imported"), "note": "imported only"}
    known: set[tuple[str, str]] = set()
    problems += patched(before, modules, "importing the generated modules", known)
    config_cls = getattr(modules["grpo_config"], CONFIG_CLASS, None)
    problems += check_config(config_cls)
    config = config_instance(config_cls) if dataclasses.is_dataclass(config_cls) else None
    config_before = canonical(config)
    problems += behaviour(modules, loaded, reference_env, config, plan, notes, counted)
    if config is not None and canonical(config) != config_before:
        changed = ", ".join(show_path(p) for p in differences(config_before, canonical(config))[:5])
        problems.append(violation("config-written-at-run-time", "train.py",
                                  f"train.py's CUSTOMIZE code wrote the config while it ran: {changed}; values reach "
                                  f"train.py through grpo_config.py or the command line, never set by the code"))
    if sys.argv != argv:
        problems.append(violation("config-written-at-run-time", "train.py",
                                  f"the generated code changed sys.argv (to {sys.argv[1:]!r}), the command line the "
                                  f"orchestrator's values arrive on; leave it as it is"))
    if reference is not None:
        problems += reference.compare(loaded["train"])
        notes.append(f"{len(reference.outputs)} GENERIC functions compared on fixed inputs")
    problems += patched(before, modules, "running the generated code", known)
    replaced = dependency_changes(modules["env_move"], relied_on, clean_game)
    if replaced:
        problems.append(violation("protected-module-patched", "env_move.py",
                                  f"the generated code replaced {', '.join(replaced[:5])}, which env_move relies on; "
                                  f"changing what the game runs on changes the game: leave those modules as they are"))
    notes += Reading.notes()
    return {"violations": problems + guard.violations("while it was imported and probed"), "note": "; ".join(notes),
            "notes": notes}


def behaviour(modules: dict[str, types.ModuleType], loaded: dict[str, types.ModuleType],
              reference_env: types.ModuleType | None, config: Any, plan: dict[str, Any],
              notes: list[str], counted: dict[str, Any]) -> list[dict]:
    """The game, helpers, observation, reward, prompts and dispatch, on real game states; then over whole
    episodes of the training's factory, and with train.py's own counters far ahead (`counted`: its module-level
    numbers as importing it made them)."""
    env_move, helpers = modules["env_move"], loaded["helpers"]
    prompts, train = loaded["prompt_template"], loaded["train"]
    customize = plan.get("customize_callables", [])
    factory = find_factory(train, customize, config, CONFIG_CLASS, env_move) if config is not None else None
    if reference_env is None:
        return []
    start = None
    if factory is not None:
        base = env_base(factory.game, env_move) or factory.built_with
        ref_cls = getattr(reference_env, base.__name__, None) if base else None
        recipe = factory.recipe if factory.recipe is not None and factory.recipe.cls is base else None
        if ref_cls is not None:
            start = start_recipe(ref_cls, recipe.kwargs if recipe else None, recipe.calls if recipe else ())
    else:
        start = default_recipe(reference_env)
    if start is None:
        notes.append("no game could be built (no CUSTOMIZE factory returns one, none constructs without arguments): "
                     "game checks skipped")
        return []
    play = learn_play(start.cls, start)
    if play is None:
        notes.append(f"no method of {start.cls.__name__} takes (agent id, action): game checks skipped")
        return []
    notes += choose(play)
    problems = check_game(factory, play, env_move) if factory else []
    if config is not None:
        problems += check_environment(
            lambda: find_factory(train, customize, config, CONFIG_CLASS, env_move), factory, play)
    notes += play.notes
    notes.append(f"game: {factory.name + '() -> ' if factory else ''}{start.cls.__name__}, actions set with "
                 f"{play.setter}, played with {play.stepper}(), {len(play.agents)} agents, {len(play.actions)} "
                 f"actions, copied by {play.copier.name if play.copier else 'no faithful way'}")
    if play.copier is None:
        return problems
    positions = reference_positions(play)
    observe = getattr(helpers, OBSERVATION_HELPER, None)
    board = Board(play, positions, observe if callable(observe) else None)
    if not callable(observe):
        return problems
    observations, error = {}, None
    for agent in dict.fromkeys([play.agents[0], play.agents[-1]]):
        observations[agent], error = call(observe, board.copy(len(positions) - 1), agent)
        if error is not None:
            problems.append(violation("observation-to-text", "helpers.py",
                                      f"observation_to_text(game, {agent}) raised {type(error).__name__}: {error}"))
            return problems
    first = observations[play.agents[0]]
    if not isinstance(first, str) or not coordinate_pairs(first):
        problems.append(violation("observation-to-text", "helpers.py",
                                  f"observation_to_text(game, 0) returned {repr(first)[:160]}: the brief asks for "
                                  f"natural language with coordinates, e.g. 'You are at (2,3)'"))
        observations = {a: str(o) for a, o in observations.items()}
    table = action_helpers(helpers)
    candidates = callees(train, customize)
    inputs = reward_inputs(board)
    reward = RewardCheck(find_shaper(candidates, inputs), inputs)
    reward.start()  # before the prompts, the helpers and the dispatch run: what it returns first is the yardstick
    prompt_problems, rendered = check_prompts(prompts, observations[play.agents[0]], set(table))
    problems += prompt_problems
    stage_problems, stage2 = check_stages(candidates, prompts, observations, table)
    problems += stage_problems + check_observation(candidates, board, observe, list(observations))
    problems += check_observation_hook(candidates, board, observe, list(observations))
    words = [a for a in play.actions if isinstance(a, str)]
    words += QUOTED.findall(rendered + "\n" + (inspect.getsource(helpers) or ""))
    helper_problems, working, flagged = check_helpers(table, board, list(dict.fromkeys(words)), observe)
    problems += helper_problems
    # every function of helpers.py and prompt_template.py has run once: what they set up on a first call (a lazily
    # built table) is theirs; what changes from here on is state kept between calls
    generated = {name: loaded[name] for name in ("helpers", "prompt_template")}
    kept = {name: module_data(module) for name, module in generated.items()}
    sound = {name: success for name, success in working.items() if name not in flagged}
    if sound:
        problems += check_episodes(table, board, sound, factory, play, observe)
    check_stages(candidates, prompts, observations, table)  # the prompts rendered once more
    dispatch = None
    if working:
        others = [OBSERVATION_HELPER] + [n for n, f in vars(helpers).items() if n.startswith("_") and not
                                         n.startswith("__") and isinstance(f, types.FunctionType)][:1]
        problems += check_dispatch(candidates, table, board, working, stage2, others)
        dispatch = find_dispatch(candidates, table, board, working)
    problems += kept_state(kept, generated)
    problems += check_history(train, list(counted), counted, factory, play, dispatch, table, board, sound)
    problems += check_logging(train, plan.get("customize_classes", []), candidates, config)
    return problems + reward.finish()


def main() -> None:
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # whatever the generated code prints must not garble the answer
        answer = probe(os.path.abspath(sys.argv[1]), json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
    out.write(json.dumps(answer, default=str) + "\n")
    out.flush()
    os._exit(0)  # the generated code may have left threads or atexit handlers; the answer is out
