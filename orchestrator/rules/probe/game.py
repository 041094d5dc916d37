"""The game: how it is played, learned from the researcher's env_move, and whether the training's game
is that game.

Nothing about any particular game is assumed. From a clean copy of env_move (imported apart, before
any generated code runs) and a game built the way the training builds it, the probe learns:
- the actions: values the game accepts, from env_move's module-level strings (tuples, lists, sets,
  dict keys), else small ints;
- the setter: the public method called as (agent id, action) that records the action and changes
  the game's state (`set_action`, `declare`, ...); the one that accepts the most actions;
- the agents: the ids the setter accepts;
- the stepper: the public method called with no argument whose outcome depends on the actions set
  (`step`, `advance`, ...).

Rules (the game is the researcher's: "Do NOT modify env_move.py"; changing it at run time, from
train.py, is modifying it; "Import and instantiate the environment from env_move.py"):
- game-class-changed: the game train.py's CUSTOMIZE factory (found by calling its CUSTOMIZE functions
  with a config and ints: the one that returns an env_move game) is an instance of a class env_move
  defines, not of a subclass or a wrapper.
- game-behaviour-changed: that game, driven by a fixed, seeded action sequence, stays equal to a clean
  env_move game started from the same state, turn after turn (state and what each step returns), and
  starts equal to a clean game built with the same constructor arguments; it carries no function
  of its own (a method patched on the instance).
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import random
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.rules.probe.values import (at, attributes, call, canonical, covered, differences, guarded,
                                             same_object, seed_everything, short, show_path, violation)

MOST_AGENTS = 16
COMPARED_TURNS = 8
STATE_TURNS = (0, 3, 6)  # the real game states the helpers are judged on
SEQUENCE_SEED = 20_240_601
CONFIG_NAMES = ("config", "cfg", "conf", "args", "settings")
INDEX_NAMES = ("seed", "index", "rank", "episode", "agent_id", "num")


def import_apart(path: str, name: str) -> types.ModuleType:
    """The module at `path` as a fresh module `name`, sharing nothing with a module of the same file."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def game_classes(module: types.ModuleType) -> list[type]:
    """Classes the module defines, those with the most public methods first."""
    classes = [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__]
    return sorted(classes, key=lambda c: -sum(1 for n in vars(c) if not n.startswith("_") and callable(getattr(c, n))))


def seeded_kwargs(cls: type) -> list[dict[str, int]]:
    """Constructor arguments to try: every seed-like parameter at 0 (a deterministic game), then none."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return [{}]
    seeds = {name: 0 for name in params if "seed" in name.lower()}
    return [seeds, {}] if seeds else [{}]


def game_instance(module: types.ModuleType) -> Any:
    """The first class of `module` that constructs from its defaults (seeded where it takes a seed)."""
    for cls in game_classes(module):
        for kwargs in seeded_kwargs(cls):
            try:
                return cls(**kwargs)
            except Exception:  # not the game, or not constructible this way: try the next
                continue
    return None


def state(game: Any) -> dict:
    """The game's data, comparable across two copies of env_move (functions stored on it aside)."""
    return {k: canonical(v) for k, v in (attributes(game) or {}).items() if not is_function(v)}


def is_function(value: Any) -> bool:
    return callable(value) and not isinstance(value, type)


def transplant(game: Any, cls: type) -> Any:
    """A new `cls` object holding a deep copy of `game`'s data (not its functions)."""
    twin = cls.__new__(cls)
    for name, value in copy.deepcopy({k: v for k, v in (attributes(game) or {}).items() if not is_function(v)}).items():
        object.__setattr__(twin, name, value)
    return twin


def public_methods(cls: type) -> dict[str, tuple[Callable, int]]:
    """Public methods (not properties) and how many positional arguments they require after self."""
    found = {}
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if not isinstance(raw, types.FunctionType):
            continue
        params = list(inspect.signature(raw).parameters.values())[1:]
        required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                                             p.POSITIONAL_OR_KEYWORD)]
        if not any(p.kind in (p.KEYWORD_ONLY,) and p.default is p.empty for p in params):
            found[name] = (raw, len(required))
    return found


def action_words(module: types.ModuleType) -> list[Any]:
    """Candidate actions: strings of env_move's module-level tuples, lists, sets and dict keys, then small ints
    (a game whose actions are numbers)."""
    words: list[Any] = []
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        items = list(value) if isinstance(value, (tuple, list, set, frozenset, dict)) else []
        if isinstance(value, (set, frozenset)):
            items = sorted(items, key=repr)
        words += [w for w in items if isinstance(w, str) and w.strip() and len(w) <= 40]
    return list(dict.fromkeys(words)) + list(range(8))


@dataclass
class Play:
    """How the clean game is played: learned once, on the reference class."""
    cls: type  # the reference (clean) game class
    setter: str
    actions: list[Any]
    agents: list[int]
    stepper: str | None
    init_args: dict[str, Any] | None = None  # how the training builds it, when seen
    notes: list[str] = field(default_factory=list)

    def set(self, game: Any, agent: int, action: Any) -> BaseException | None:
        return call(getattr(game, self.setter), agent, action, seconds=2.0)[1]

    def step(self, game: Any) -> tuple[Any, BaseException | None]:
        return call(getattr(game, self.stepper), seconds=5.0)

    def sequence(self, turns: int) -> list[list[Any]]:
        """The fixed, seeded actions: one per agent per turn."""
        rng = random.Random(SEQUENCE_SEED)
        return [[rng.choice(self.actions) for _ in self.agents] for _ in range(turns)]

    def fresh(self) -> Any:
        """A clean game built as the training builds it (or from the class's seeded defaults)."""
        for kwargs in ([self.init_args] if self.init_args is not None else []) + seeded_kwargs(self.cls):
            game, error = call(lambda: self.cls(**copy.deepcopy(kwargs)))
            if error is None:
                return game
        return None


def clean_start(cls: type, init_args: dict[str, Any] | None) -> Any:
    """A clean game to play the fixed sequence from, the same in every run: built with the training's
    arguments when that is deterministic (an unset seed set to 0), else from the class's seeded defaults."""
    tries = [] if init_args is None else [init_args, {k: 0 if "seed" in k.lower() and v is None else v
                                                         for k, v in init_args.items()}]
    for kwargs in tries + seeded_kwargs(cls):
        first, error = call(lambda: cls(**copy.deepcopy(kwargs)))
        second, again = call(lambda: cls(**copy.deepcopy(kwargs)))
        if error is None and again is None and state(first) == state(second):
            return first
    return None


def learn_play(ref_cls: type, start: Any) -> Play | None:
    """The setter, its actions and agents, and the stepper of `ref_cls`, by trying them on copies of `start`."""
    candidates = action_words(sys.modules[ref_cls.__module__])
    methods = public_methods(ref_cls)
    before = state(start)
    setters = []
    for name, (_, required) in methods.items():
        if required != 2:
            continue
        accepted, changed = [], set()
        for value in candidates[:40]:
            game = copy.deepcopy(start)
            _, error = call(getattr(game, name), 0, value, seconds=1.0)
            if error is None and state(game) != before:
                accepted.append(value)
                changed.update(map(repr, differences(before, state(game))))
        if accepted:
            setters.append((-len(accepted), len(changed), name, accepted))
    if not setters:
        return None
    _, _, setter, actions = min(setters, key=lambda s: s[:3])
    play = Play(ref_cls, setter, actions, [], None)
    for agent in range(MOST_AGENTS):
        if play.set(copy.deepcopy(start), agent, actions[0]) is not None:
            break
        play.agents.append(agent)
    for name, (_, required) in methods.items():
        if required == 0 and name != setter and depends_on_actions(play, start, name):
            play.stepper = name
            break
    return play


def depends_on_actions(play: Play, start: Any, name: str) -> bool:
    """Whether `name` changes the game, differently after two different actions of agent 0 (a step), not
    in the same way whatever was chosen (a reset) nor not at all (a copy, a render)."""
    outcomes = []
    for action in play.actions[:6]:
        game = copy.deepcopy(start)
        play.set(game, play.agents[0], action)
        chosen = state(game)
        if call(getattr(game, name), seconds=2.0)[1] is not None or state(game) == chosen:
            return False
        outcomes.append(state(game))
        if len(outcomes) > 1 and outcomes[-1] != outcomes[0]:
            return True
    return False


# ---------------------------------------------------------------- the training's game factory

class InitRecorder:
    """Sees the first constructor call of a game class: its arguments, as the training passed them."""

    def __init__(self, classes: list[type]) -> None:
        self.codes = {}
        for cls in classes:
            init = vars(cls).get("__init__")
            if isinstance(init, types.FunctionType):
                self.codes[init.__code__] = cls
        self.found: tuple[type, dict[str, Any]] | None = None

    def __call__(self, frame, event, arg):
        if event != "call" or self.found is not None or frame.f_code not in self.codes:
            return
        code = frame.f_code
        names = code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount]
        args = {n: frame.f_locals[n] for n in names if n in frame.f_locals}
        if code.co_flags & inspect.CO_VARKEYWORDS:
            args.update(frame.f_locals.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount
                                                             + bool(code.co_flags & inspect.CO_VARARGS)], {}))
        try:
            self.found = (self.codes[code], copy.deepcopy(args))
        except Exception:  # arguments that cannot be copied: build from the factory's game instead
            self.found = (self.codes[code], None)


def fill_arguments(function: Callable, config: Any, config_name: str) -> list[Any] | None:
    """Positional arguments for a factory-like function: the config where it asks for one, 0 for an
    index or seed; None when a required parameter is neither (a game, a text, a dict: not a factory)."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    args = []
    for p in params:
        if p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        text, name = str(p.annotation), p.name.lower()
        if config_name in text or name in CONFIG_NAMES or "config" in name:
            args.append(config)
        elif "int" in text or any(word in name for word in INDEX_NAMES):
            args.append(0)
        else:
            return None
    return args


@dataclass
class Factory:
    name: str  # e.g. make_env
    game: Any
    init: tuple[type, dict[str, Any] | None] | None  # the env_move class and arguments it was built with


def find_factory(train: types.ModuleType, names: list[str], config: Any, config_name: str,
                 env_module: types.ModuleType) -> Factory | None:
    """The CUSTOMIZE function that builds the game: called with the config (and 0 for ints), it returns
    an object of a class that is, or derives from, a class of env_move, or it builds one (and returns
    something else: a wrapper)."""
    env_classes = game_classes(env_module)
    for name in names:
        function = getattr(train, name, None)
        if "." in name or not isinstance(function, types.FunctionType):
            continue
        args = fill_arguments(function, config, config_name)
        if args is None:
            continue
        recorder = InitRecorder(env_classes)
        seed_everything()
        sys.setprofile(recorder)
        try:
            with guarded(10.0):
                game = function(*args)
        except BaseException:  # not the factory, or a broken one: the runtime check shows its traceback
            continue
        finally:
            sys.setprofile(None)
        if any(c in env_classes for c in type(game).__mro__) or recorder.found is not None:
            return Factory(name, game, recorder.found)  # a game, or a wrapper around the game it built
    return None


def env_base(game: Any, env_module: types.ModuleType) -> type | None:
    return next((c for c in type(game).__mro__ if c.__module__ == env_module.__name__
                 and getattr(env_module, c.__name__, None) is c), None)


def check_game(factory: Factory, play: Play, env_module: types.ModuleType) -> list[dict]:
    """game-class-changed and game-behaviour-changed for the game the factory built."""
    problems = []
    game, who = factory.game, f"{factory.name}()"
    base = env_base(game, env_module)
    if type(game) is not base:
        built = base or (factory.init[0] if factory.init else None)
        problems.append(violation("game-class-changed", "train.py",
                                  f"{who} returns a {type(game).__qualname__} (defined in {type(game).__module__}), "
                                  f"not env_move's own {built.__name__ if built else 'game class'}: return the game "
                                  f"built with env_move's class itself, unchanged (no subclass, no wrapper)"))
        if base is None:
            return problems
    own = sorted(k for k, v in (attributes(game) or {}).items() if is_function(v))
    if own:
        problems.append(violation("game-behaviour-changed", "train.py",
                                  f"the game {who} returns carries its own {', '.join(own)} (set on the object), "
                                  f"which replaces env_move's: leave the game's methods as env_move defines them"))
    clean = play.fresh() if play.init_args is not None else None
    if clean is not None and state(clean) == state(play.fresh()):  # deterministic: comparable
        movable = mutable_paths(play, clean)
        changed = [p for p in differences(state(clean), state(game)) if not covered(p, movable)]
        if changed:
            problems.append(violation("game-behaviour-changed", "train.py",
                                      f"the game {who} returns is not env_move's game built with the same arguments: "
                                      f"{describe(changed, state(game), state(clean))}, which no method of the game "
                                      f"changes; build it with env_move's class and change nothing of it after"))
    if play.stepper is None:
        return problems
    twin = transplant(game, play.cls)
    for turn, actions in enumerate(play.sequence(COMPARED_TURNS)):
        outcomes = []
        for g in (game, twin):
            errors = [play.set(g, agent, action) for agent, action in zip(play.agents, actions)]
            result, error = play.step(g)
            outcomes.append((state(g), canonical(result), [type(e).__name__ for e in errors + [error] if e]))
        (here, result_here, errors_here), (there, result_there, errors_there) = outcomes
        if errors_here or errors_there:
            if errors_here != errors_there:
                problems.append(behaviour_changed(who, turn, actions, play, f"it raised {errors_here or 'nothing'} "
                                                  f"where env_move's raised {errors_there or 'nothing'}"))
            break
        changed = differences(there, here) or ([("(what the step returned)",)] if result_here != result_there else [])
        if changed:
            detail = describe(changed, here, there) if differences(there, here) else \
                f"{play.stepper}() returned {short(result_here)} where env_move's returned {short(result_there)}"
            problems.append(behaviour_changed(who, turn, actions, play, detail))
            break
    return problems


def mutable_paths(play: Play, start: Any) -> list[tuple]:
    """What the game's own methods change (a reset, a step, the actions): a factory may have called them."""
    before, paths = state(start), []
    for name, (_, required) in public_methods(play.cls).items():
        if required == 0:
            game = copy.deepcopy(start)
            if call(getattr(game, name), seconds=2.0)[1] is None:
                paths += differences(before, state(game))
    if play.stepper is not None:
        game = copy.deepcopy(start)
        for actions in play.sequence(3):
            for agent, action in zip(play.agents, actions):
                play.set(game, agent, action)
            play.step(game)
            paths += differences(before, state(game))
    return paths


def dependencies(module: types.ModuleType) -> dict[str, Any]:
    """What env_move relies on from other modules, by dotted name: the attributes of the modules it imports,
    the members of their classes and of the classes it imports by name (random.Random.random, ...)."""
    found: dict[str, Any] = {}
    classes = []
    for name, value in vars(module).items():
        if isinstance(value, types.ModuleType) and value is not module:
            for attr, inner in vars(value).items():
                if not attr.startswith("__"):
                    found[f"{value.__name__}.{attr}"] = inner
                    if isinstance(inner, type) and inner.__module__ == value.__name__:
                        classes.append((f"{value.__name__}.{attr}", inner))
        elif isinstance(value, type) and value.__module__ != module.__name__:
            classes.append((f"{value.__module__}.{value.__qualname__}", value))
    for dotted, cls in classes:
        found.update({f"{dotted}.{member}": inner for member, inner in vars(cls).items() if not member.startswith("__")
                      or member in ("__init__", "__new__", "__call__")})
        found[f"{dotted}.<members>"] = frozenset(vars(cls))
    return found


def dependency_changes(module: types.ModuleType, before: dict[str, Any]) -> list[str]:
    after = dependencies(module)
    return sorted(k for k in before if not same_object(before[k], after.get(k, MISSING_VALUE)))


MISSING_VALUE = object()


def behaviour_changed(who: str, turn: int, actions: list[Any], play: Play, detail: str) -> dict:
    moves = ", ".join(f"{play.setter}({a}, {v!r})" for a, v in zip(play.agents, actions))
    return violation("game-behaviour-changed", "train.py",
                     f"the game {who} returns plays differently from a clean env_move game in the same state: at "
                     f"turn {turn + 1} ({moves}, then {play.stepper}()) {detail}. CUSTOMIZE code changed the game "
                     f"(a subclass, a patched method, a changed module table or global); env_move.py is protected, "
                     f"so its behaviour is too: remove that change from train.py")


def describe(changed: list[tuple], here: Any, there: Any) -> str:
    first = changed[0]
    shown = f"{show_path(first)} is {short(at(here, first))} here but {short(at(there, first))} in env_move's"
    return shown + (f" (and {len(changed) - 1} more difference(s))" if len(changed) > 1 else "")


def reference_states(play: Play, start: Any) -> list[tuple[int, Any]]:
    """(turn, game) pairs of a clean game played with the fixed sequence: the real states helpers meet."""
    game = copy.deepcopy(start)
    found = [(0, copy.deepcopy(game))] if 0 in STATE_TURNS else []
    if play.stepper is None:
        return found
    for turn, actions in enumerate(play.sequence(max(STATE_TURNS)), start=1):
        for agent, action in zip(play.agents, actions):
            play.set(game, agent, action)
        if play.step(game)[1] is not None:
            break
        if turn in STATE_TURNS:
            found.append((turn, copy.deepcopy(game)))
    return found
