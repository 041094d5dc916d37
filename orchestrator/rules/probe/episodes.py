"""The helpers over several whole episodes, each on a game the training's own factory builds, played to the game's
own end (its configured length: Cleanup's `max_env_steps`, Stag Hunt's `horizon`, Spread's `episode_length`), and
what the generated code keeps between calls.

A helper that misbehaves only from some turn on (turn 12 of 20), only after some number of calls or games, or
only on the training's game, shows only where the training's way of playing reaches it. So:

- the helpers are judged as effects.check_episode judges them, over EPISODES episodes, each until the game says
  it is over (at most MOST_TURNS turns);
- helper-keeps-state ("Functions must be independent"; a helper is a function of the game it is given): no
  plain data of helpers.py or prompt_template.py (numbers, strings, containers at module level, or carried by
  its functions and classes: attributes, mutable defaults, closure cells; not random generators) changes once
  each of their functions has run (what a first call sets up, a lazily built table, is theirs): a counter, a set
  of games seen, a list of past calls is state that survives between episodes;
- game-behaviour-changed (the game's history): train.py's own module-level numbers that the factory and the
  dispatch change as they run (a count of games built, of calls made) are set far ahead (as after a long
  training), and the factory must then still build the same game and the dispatch still run the named helper
  as calling it directly does.
- game-depends-on-environment ("Set configs for train.py via grpo_config.py or cmd parameters"): the factory
  builds the same game under another SLURM job (other node, task and CPU counts) and outside SLURM: a game
  sized from SLURM_NTASKS is sized by the machine, not by the config.
"""

from __future__ import annotations

import contextlib
import copy
import os
import types
from typing import Any, Callable, Iterator

from orchestrator.rules.probe.effects import Board, Callee, HelperTracer, Success, check_episode
from orchestrator.rules.probe.game import Factory, Play, training_game
from orchestrator.rules.probe.replicas import state
from orchestrator.rules.probe.values import at, call, canonical, differences, short, show_path, violation

EPISODES = 2
MOST_TURNS = 64  # a game that never says it is over is played this long
AHEAD = 1_000_000  # how far a counter is set ahead: past any threshold a training reaches
DATA = (type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset)


def module_data(module: types.ModuleType) -> dict[str, Any]:
    """A module's plain data, by name, in canonical form: at module level, and what its own functions and classes
    carry (a function's attributes, mutable defaults and closure cells; a class's data attributes), where state
    hides as well as in a global."""
    found = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        if type(value) in DATA:
            found[name] = canonical(value)
        elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            cells = [c.cell_contents for c in value.__closure__ or () if cell_data(c)]
            carried = {**vars(value), "<defaults>": value.__defaults__, "<keyword defaults>": value.__kwdefaults__,
                       "<closure>": cells}
            found.update({f"{name}.{k}": canonical(v) for k, v in carried.items() if type(v) in DATA})
        elif isinstance(value, type) and value.__module__ == module.__name__:
            found.update({f"{name}.{k}": canonical(v) for k, v in list(vars(value).items())
                          if not k.startswith("__") and type(v) in DATA})
    return found


def cell_data(cell: Any) -> bool:
    try:
        return type(cell.cell_contents) in DATA
    except ValueError:  # an empty cell
        return False


def check_episodes(table: dict[str, types.FunctionType], board: Board, working: dict[str, Success],
                   factory: Factory | None, play: Play, observe: Callable) -> list[dict]:
    """effects.check_episode over EPISODES episodes, each on a new game of the training's factory; the first
    finding of each rule."""
    problems: list[dict] = []
    for episode in range(1, EPISODES + 1):
        game = training_game(factory, play)
        if game is None:
            break
        found = check_episode(table, board, working, game, observe, turns=MOST_TURNS, episode=episode)
        problems += [p for p in found if p["rule"] not in {q["rule"] for q in problems}]
    return problems


def kept_state(before: dict[str, dict[str, Any]], modules: dict[str, types.ModuleType]) -> list[dict]:
    """helper-keeps-state: the module-level data of helpers.py and prompt_template.py as importing them made it."""
    problems = []
    for name, module in modules.items():
        after = module_data(module)
        changed = [key for key in before[name] if key in after and before[name][key] != after[key]]
        changed += [key for key in after if key not in before[name]]
        if changed:
            key = changed[0]
            was = before[name].get(key)
            where = differences(was, after[key])[:1] if key in before[name] else []
            detail = (f"{key}{'' if not where or not where[0] else '[' + show_path(where[0]) + ']'} went from "
                      f"{short(was, 80)} to {short(after[key], 80)}" if key in before[name]
                      else f"{key} appeared ({short(after[key], 80)})")
            problems.append(violation("helper-keeps-state", f"{name}.py",
                                      f"{name}.py keeps state between calls and episodes: at module level {detail} "
                                      f"while the probe called its functions again and played {EPISODES} episodes on "
                                      f"games of the training's factory; what a helper or a prompt does may depend only on "
                                      f"what it is given (the game, the agent, the text): keep nothing between calls "
                                      f"at module level"))
    return problems


# ---------------------------------------------------------------- the training's history, fast-forwarded

def counters(module: types.ModuleType, names: list[str], before: dict[str, Any]) -> list[str]:
    """train.py's CUSTOMIZE module-level numbers that changed since `before` (what its functions count)."""
    return [name for name in names if isinstance(getattr(module, name, None), (int, float))
            and not isinstance(getattr(module, name), bool) and canonical(getattr(module, name)) != before.get(name)]


@contextlib.contextmanager
def fast_forwarded(module: types.ModuleType, names: list[str]) -> Iterator[None]:
    """The counters `names` of `module` set AHEAD further, as after a long training; restored after."""
    saved = {name: getattr(module, name) for name in names}
    try:
        for name, value in saved.items():
            setattr(module, name, type(value)(value + AHEAD))
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def check_history(train: types.ModuleType, names: list[str], before: dict[str, Any], factory: Factory | None,
                  play: Play, dispatch: Callee | None, table: dict[str, types.FunctionType], board: Board,
                  working: dict[str, Success]) -> list[dict]:
    """game-behaviour-changed and dispatch-wrong-helper once train.py's own counters are far ahead."""
    ahead = counters(train, names, before)
    if not ahead:
        return []
    problems = []
    shown = ", ".join(ahead[:3])
    first, again = (training_game(factory, play), training_game(factory, play)) if factory else (None, None)
    if first is not None and again is not None and state(first) == state(again):  # the same game build after build
        with fast_forwarded(train, ahead):
            later = training_game(factory, play)
        if later is not None and state(first) != state(later):
            path = differences(state(first), state(later))[0]
            problems.append(violation("game-behaviour-changed", "train.py",
                                      f"{factory.name}() builds another game once train.py's counter(s) {shown} are "
                                      f"far ahead, as after many games: {show_path(path)} is "
                                      f"{short(at(state(later), path))} instead of "
                                      f"{short(at(state(first), path))}; the training's game must not depend on "
                                      f"how many games or calls came before"))
    if dispatch is not None and working:
        name, success = next(iter(working.items()))
        index = next(i for i, p in enumerate(board.positions) if p.turn == success.turn)
        payload = {"action": name, "agent_id": success.agent, "args": dict(success.args)}
        game, direct = board.copy(index), board.copy(index)
        tracer = HelperTracer(table)
        with fast_forwarded(train, ahead):
            result, error = tracer.run(dispatch.function, game, copy.deepcopy(payload))
        expected, _ = call(table[name], direct, success.agent, **copy.deepcopy(success.args))
        if error is not None or state(game) != state(direct) or result != expected:
            detail = (f"raised {type(error).__name__}: {error}" if error is not None
                      else f"left the game other than {name}(game, {success.agent}, **args) does")
            problems.append(violation("dispatch-wrong-helper", "train.py",
                                      f"{dispatch.label}(game, {payload}) {detail} once train.py's counter(s) {shown} "
                                      f"are far ahead, as after many calls; the dispatch must run the named helper the "
                                      f"same way however many calls came before"))
    return problems



# ---------------------------------------------------------------- the machine

OTHER_JOB = {"SLURM_JOB_ID": "9999", "SLURM_JOBID": "9999", "SLURM_NNODES": "3", "SLURM_JOB_NUM_NODES": "3",
             "SLURM_NTASKS": "5", "SLURM_NPROCS": "5", "SLURM_NTASKS_PER_NODE": "2", "SLURM_CPUS_ON_NODE": "3",
             "SLURM_CPUS_PER_TASK": "3", "SLURM_GPUS_ON_NODE": "3", "SLURM_ARRAY_TASK_ID": "4"}


@contextlib.contextmanager
def environment(changes: dict[str, str | None]) -> Iterator[None]:
    """os.environ with `changes` (None: removed), restored after."""
    saved = dict(os.environ)
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def check_environment(find: Callable[[], Factory | None], factory: Factory | None, play: Play) -> list[dict]:
    """game-depends-on-environment: `find` finds the factory (here, under the formal launch's job), `factory` is
    what it found here; judged where the factory's game is the same on two builds here."""
    without = {key: None for key in os.environ if key.startswith(("SLURM_", "SLURMD_"))}
    variants = (("in another SLURM job (other node, task and CPU counts)", OTHER_JOB), ("outside SLURM", without))
    if factory is None:  # it may build no game here, only elsewhere
        for what, changes in variants:
            with environment(changes):
                other = find()
            if other is not None:
                return [violation("game-depends-on-environment", "train.py",
                                  f"{other.name}() builds no game under the formal launch's SLURM job, but does "
                                  f"{what}: the game is sized by the config (grpo_config.py or the command line), "
                                  f"never by the machine's environment (SLURM_NTASKS, SLURM_NNODES, ...)")]
        return []
    first, again = training_game(factory, play), training_game(factory, play)
    if first is None or again is None or state(first) != state(again):
        return []
    for what, changes in variants:
        with environment(changes):
            other = training_game(factory, play)
        if other is not None and state(other) != state(first):
            path = differences(state(first), state(other))[0]
            return [violation("game-depends-on-environment", "train.py",
                              f"{factory.name}() builds another game {what}: {show_path(path)} is "
                              f"{short(at(state(other), path))} instead of {short(at(state(first), path))}; the game "
                              f"is sized by the config (grpo_config.py or the command line), never by the machine's "
                              f"environment (SLURM_NTASKS, SLURM_NNODES, ...)")]
    return []
