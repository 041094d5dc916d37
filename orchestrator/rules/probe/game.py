"""The game: how it is played, learned from the researcher's env_move, and whether the training's game
is that game.

Nothing about any particular game is assumed. From a clean copy of env_move (imported apart, before
any generated code runs) and a game built the way the training builds it, the probe learns:
- the start: a `Recipe` (the class, the training's constructor arguments with an unset seed set to 0, the
  calls the training's factory made on the game, and a seeded reset when the game plays only after one);
- the actions: values the game accepts, from env_move's module-level strings (tuples, lists, sets,
  dict keys), else small ints;
- the setter: the public method called as (agent id, action) that records the action and changes
  the game's state (`set_action`, `declare`, `submit`, ...); the one that accepts the most actions;
- the agents: the ids the setter accepts;
- the stepper: the public method called with no argument whose outcome depends on the actions set and is
  the same when the same actions are played on the same state (`step`, `advance`, ...); where no method's
  state change shows that, the one whose results (rewards, done) do; a reset-like method (`reset`,
  `restart`, `seed`, ...) never is, and where several methods qualify the note says which;
- how to copy it: the first way `replicas.choose_copier` verifies on this game.

Rules (the game is the researcher's: "Do NOT modify env_move.py"; changing it at run time, from
train.py, is modifying it; "Import and instantiate the environment from env_move.py"):
- game-class-changed: the game train.py's CUSTOMIZE factory (found by calling its CUSTOMIZE functions
  with a config and ints: the one that returns an env_move game) is an instance of a class env_move
  defines, not of a subclass or a wrapper.
- game-behaviour-changed: that game, driven by a fixed, seeded action sequence, stays equal to a clean
  env_move game started from the same state, turn after turn (state and what each step returns), and
  starts equal to a clean game built with the same constructor arguments and calls; it carries no function
  of its own (a method patched on the instance). Compared only through copies verified on this game.
"""

from __future__ import annotations

import collections
import copy
import importlib.util
import inspect
import random
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.rules.probe.replicas import (Call, Copier, Recipe, choose_copier, copy_data, is_function,
                                               reproducible, state)
from orchestrator.rules.probe.values import (at, attributes, call, canonical, covered, differences, guarded,
                                             same_object, seed_everything, short, show_path, violation)

MOST_AGENTS = 16
COMPARED_TURNS = 8
STATE_TURNS = (0, 3, 6)  # the real game states the helpers are judged on
SEQUENCE_SEED = 20_240_601
GAME_SEED = 0  # an unset seed of the game, its constructor's or its reset's
CONFIG_NAMES = ("config", "cfg", "conf", "args", "settings")
INDEX_NAMES = ("seed", "index", "rank", "episode", "agent_id", "num")
RESET_WORDS = ("reset", "restart", "seed", "new_episode", "new_game", "init", "clear", "close", "reload", "load",
               "restore", "set_state")
STEP_WORDS = ("step", "advance", "tick", "turn", "play", "resolve", "update", "next")
STEP_TRIES = 6  # actions of agent 0 a stepper candidate is tried with


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


def seeded(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The same arguments with every unset seed-like one set to GAME_SEED: the same game in every run."""
    return {k: GAME_SEED if "seed" in k.lower() and v is None else v for k, v in kwargs.items()}


def seeded_kwargs(cls: type) -> list[dict[str, int]]:
    """Constructor arguments to try: every seed-like parameter at GAME_SEED (a deterministic game), then none."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return [{}]
    seeds = {name: GAME_SEED for name in params if "seed" in name.lower()}
    return [seeds, {}] if seeds else [{}]


def game_instance(module: types.ModuleType) -> Any:
    """The first class of `module` that constructs from its defaults (seeded where it takes a seed)."""
    recipe = default_recipe(module)
    return None if recipe is None else call(recipe.build)[0]


def default_recipe(module: types.ModuleType) -> Recipe | None:
    """The first class of `module` that constructs from its defaults, as a recipe."""
    for cls in game_classes(module):
        for kwargs in seeded_kwargs(cls):
            if call(lambda: cls(**kwargs))[1] is None:
                return Recipe(cls, kwargs)
    return None


def start_recipe(cls: type, init_args: dict[str, Any] | None, calls: tuple[Call, ...] = ()) -> Recipe | None:
    """The game to play the fixed sequence from, the same in every run where possible: built with the
    training's arguments and calls (unset seeds set), else from the class's seeded defaults; the first
    reproducible one, else the first that builds."""
    tries = [] if init_args is None else [Recipe(cls, init_args, calls), Recipe(cls, seeded(init_args), seeded_calls(calls))]
    tries += [Recipe(cls, kwargs) for kwargs in seeded_kwargs(cls)]
    built = [r for r in tries if call(r.build)[1] is None]
    return next((r for r in built if reproducible(r)), built[0] if built else None)


def seeded_calls(calls: tuple[Call, ...]) -> tuple[Call, ...]:
    return tuple(Call(c.method, c.args, seeded(c.kwargs)) for c in calls)


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


def is_reset_like(name: str) -> bool:
    return any(word in name.lower() for word in RESET_WORDS)


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
    start: Recipe | None = None  # where the fixed sequence starts
    setup: tuple[Call, ...] = ()  # calls the probe added to make the training's game playable (a seeded reset)
    copier: Copier | None = None  # the way of copying verified on this game
    notes: list[str] = field(default_factory=list)

    def set(self, game: Any, agent: int, action: Any) -> BaseException | None:
        return call(getattr(game, self.setter), agent, action, seconds=2.0)[1]

    def step(self, game: Any) -> tuple[Any, BaseException | None]:
        return call(getattr(game, self.stepper), seconds=5.0)

    def sequence(self, turns: int) -> list[list[Any]]:
        """The fixed, seeded actions: one per agent per turn."""
        rng = random.Random(SEQUENCE_SEED)
        return [[rng.choice(self.actions) for _ in self.agents] for _ in range(turns)]

    def turn_calls(self, actions: list[Any]) -> tuple[Call, ...]:
        return tuple(Call(self.setter, (agent, action)) for agent, action in zip(self.agents, actions)) + \
            ((Call(self.stepper),) if self.stepper else ())

    def play_turn(self, game: Any, turn: int) -> tuple[Any, BaseException | None]:
        """Turn `turn` of the fixed sequence on `game`: every agent's action, then the step."""
        actions = self.sequence(turn + 1)[turn]
        for agent, action in zip(self.agents, actions):
            error = self.set(game, agent, action)
            if error is not None:
                return None, error
        return self.step(game) if self.stepper else (None, None)


def learn_play(ref_cls: type, start: Recipe) -> Play | None:
    """The setter, its actions and agents, and the stepper of `ref_cls`, by trying them on fresh builds of
    `start`; a game that plays only after a reset gets a seeded one. None when nothing sets an action."""
    play = _learn_play(ref_cls, start)
    reset = reset_call(ref_cls)
    if (play is None or play.stepper is None) and reset is not None and all(c.method != reset.method
                                                                            for c in start.calls):
        with_reset = _learn_play(ref_cls, start.then(reset))
        if with_reset is not None and (play is None or with_reset.stepper is not None):
            with_reset.setup = (reset,)
            return with_reset
    return play


def reset_call(cls: type) -> Call | None:
    """A seeded call of the game's reset-like method (`reset(seed=0)`), or a plain one where it takes no seed."""
    for name, (raw, required) in public_methods(cls).items():
        if required or not is_reset_like(name) or not any(w in name.lower() for w in ("reset", "restart", "new_")):
            continue
        params = list(inspect.signature(raw).parameters)[1:]
        seed = next((p for p in params if "seed" in p.lower()), None)
        return Call(name, (), {seed: GAME_SEED} if seed else {})
    return None


def _learn_play(ref_cls: type, start: Recipe) -> Play | None:
    fresh = start.build
    candidates = action_words(sys.modules[ref_cls.__module__])
    methods = public_methods(ref_cls)
    try:
        before = state(fresh())
    except Exception:  # the start does not build: nothing to learn from
        return None
    setters = []
    for name, (_, required) in methods.items():
        if required != 2 or is_reset_like(name):
            continue
        accepted, changed = [], set()
        for value in candidates[:40]:
            game = fresh()
            _, error = call(getattr(game, name), 0, value, seconds=1.0)
            if error is None and state(game) != before:
                accepted.append(value)
                changed.update(map(repr, differences(before, state(game))))
        if accepted:
            setters.append((-len(accepted), len(changed), name, accepted))
    if not setters:
        return None
    _, _, setter, actions = min(setters, key=lambda s: s[:3])
    play = Play(ref_cls, setter, actions, [], None, start=start)
    for agent in range(MOST_AGENTS):
        if play.set(fresh(), agent, actions[0]) is not None:
            break
        play.agents.append(agent)
    play.stepper, considered = learn_stepper(play, fresh, methods)
    if play.stepper is None or any(not c.endswith("(a reset, not a step)") for c in considered[1:]):
        play.notes.append(f"{ref_cls.__name__}'s step method: {'; '.join(considered) or 'no candidate'}")
    return play


def learn_stepper(play: Play, fresh: Callable[[], Any], methods: dict[str, tuple[Callable, int]]
                  ) -> tuple[str | None, list[str]]:
    """The method that steps the game, and what was found of each candidate (for the note). Where no method's
    state change depends on the actions, one whose results (rewards, done) do is taken: a game whose state the
    probe cannot see change. Never before: a query of the pending actions answers differently too."""
    found, unchanged, considered = [], [], []
    for name, (_, required) in methods.items():
        if required or name == play.setter:
            continue
        if is_reset_like(name):
            considered.append(f"{name}() not taken (a reset, not a step)")
            continue
        verdict = step_verdict(play, fresh, name)
        if verdict == "steps":
            found.append(name)
        elif verdict:
            considered.append(f"{name}() {verdict}")
        else:
            unchanged.append(name)
    if not found:
        found = [name for name in unchanged if step_verdict(play, fresh, name, by_results=True) == "steps"]
        if found:
            considered.insert(0, f"{sorted(found, key=step_order)[0]}() taken by what it returns, which depends on "
                                 f"the actions set (the game's state did not show the change)")
    found.sort(key=step_order)
    if found:
        considered.insert(0, f"took {found[0]}()" + (f" (also stepping: {', '.join(found[1:])})" if found[1:] else ""))
    return (found[0] if found else None), considered


def step_order(name: str) -> tuple[bool, str]:
    return not any(w in name.lower() for w in STEP_WORDS), name


def step_verdict(play: Play, fresh: Callable[[], Any], name: str, by_results: bool = False) -> str:
    """'steps' when `name` changes the game, the same way when the same action is replayed on the same state
    and differently after two different actions of agent 0 (`by_results`: when what it returns does, its state
    unchanged); else why not ('' for a method that changes nothing: a copy, a render, a query)."""
    outcomes = []
    for action in play.actions[:STEP_TRIES]:
        replays = []
        for _ in range(2):
            game = fresh()
            play.set(game, play.agents[0], action)
            chosen = state(game)
            result, error = call(getattr(game, name), seconds=2.0)
            if error is not None:
                return f"raised {type(error).__name__}"
            after = state(game)
            if after == chosen and not by_results:
                return ""
            replays.append((after, canonical(result)))
        if replays[0] != replays[1]:
            return "not taken: the same action on the same state gave two outcomes (it draws randomness it " \
                   "was not given)"
        outcomes.append(replays[0])
        if len(outcomes) > 1 and outcomes[-1] != outcomes[0]:
            return "steps"
    return "" if by_results else "not taken: its outcome does not depend on the actions set"


def choose(play: Play) -> list[str]:
    """Verify a way of copying the game (play.copier); what was refused on the way, for the note."""
    if play.start is None:
        return []
    copier, refused = choose_copier(play.start, play.play_turn, reproducible(play.start))
    play.copier = copier
    if copier is None:
        return [f"no way of copying {play.cls.__name__} reproduces it ({'; '.join(refused)}): the rules that "
                f"judge helpers, the dispatch and the game turn by turn on copies are skipped"]
    if refused:
        return [f"{play.cls.__name__} copied by {copier.name} ({'; '.join(refused)})"]
    return []


# ---------------------------------------------------------------- the training's game factory

class GameRecorder:
    """Sees what the training's factory does to the game it builds: the first constructor call of a game class,
    with its arguments, then each call of the game's public methods made from outside env_move (a reset with
    a seed), in order."""

    def __init__(self, classes: list[type]) -> None:
        self.inits, self.methods, self.files = {}, {}, set()
        for cls in classes:
            for name, raw in vars(cls).items():
                if isinstance(raw, types.FunctionType):
                    self.files.add(raw.__code__.co_filename)
                    if name == "__init__":
                        self.inits[raw.__code__] = cls
                    elif not name.startswith("_"):
                        self.methods[raw.__code__] = name
        self.cls: type | None = None
        self.kwargs: dict[str, Any] | None = None
        self.game_id: int | None = None
        self.calls: list[Call] = []
        self.copyable = True

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if self.cls is None:
            if code in self.inits:
                self.cls = self.inits[code]
                self.game_id = id(frame.f_locals.get(code.co_varnames[0]))
                self.kwargs = self._arguments(frame)
            return
        name = self.methods.get(code)
        caller = frame.f_back
        if name is None or caller is None or caller.f_code.co_filename in self.files \
                or id(frame.f_locals.get(code.co_varnames[0])) != self.game_id:
            return
        kwargs = self._arguments(frame)
        if kwargs is not None:
            self.calls.append(Call(name, (), kwargs))

    def _arguments(self, frame) -> dict[str, Any] | None:
        code = frame.f_code
        names = code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount]
        args = {n: frame.f_locals[n] for n in names if n in frame.f_locals}
        if code.co_flags & inspect.CO_VARKEYWORDS:
            args.update(frame.f_locals.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount
                                                             + bool(code.co_flags & inspect.CO_VARARGS)], {}))
        try:
            return copy.deepcopy(args)
        except Exception:  # arguments that cannot be copied: the game cannot be built again this way
            self.copyable = False
            return None

    def recipe(self) -> Recipe | None:
        if self.cls is None or self.kwargs is None or not self.copyable:
            return None
        return Recipe(self.cls, self.kwargs, tuple(self.calls))


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
    built_with: type | None  # the env_move class whose constructor ran
    recipe: Recipe | None  # how it was built (class, arguments, calls), when its arguments could be copied
    remake: Callable[[], Any]  # the factory called again, as the training calls it


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
        recorder = GameRecorder(env_classes)
        seed_everything()
        sys.setprofile(recorder)
        try:
            with guarded(10.0):
                game = function(*args)
        except BaseException:  # not the factory, or a broken one: the runtime check shows its traceback
            continue
        finally:
            sys.setprofile(None)
        if any(c in env_classes for c in type(game).__mro__) or recorder.cls is not None:
            return Factory(name, game, recorder.cls, recorder.recipe(),  # a game, or a wrapper around one
                           lambda function=function, args=args: function(*args))
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
        built = base or factory.built_with
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
    recipe = factory.recipe
    if recipe is not None and recipe.cls is base:
        clean_recipe = Recipe(play.cls, recipe.kwargs, recipe.calls)
        if reproducible(clean_recipe):
            clean = clean_recipe.build()
            movable = mutable_paths(play, clean_recipe)
            changed = [p for p in differences(state(clean), state(game)) if not covered(p, movable)]
            if changed:
                problems.append(violation("game-behaviour-changed", "train.py",
                                          f"the game {who} returns is not env_move's game built with the same "
                                          f"arguments: {describe(changed, state(game), state(clean))}, which no "
                                          f"method of the game changes; build it with env_move's class and change "
                                          f"nothing of it after"))
    if play.stepper is None or play.copier is None:
        return problems
    twin = twin_of(game, play, recipe)
    if twin is None:
        play.notes.append(f"the game {who} returns could not be copied faithfully: not compared turn by turn")
        return problems
    for g in (game, twin):
        for setup in play.setup:
            setup.apply(g)
    return problems + compare_turns(game, twin, play, who)


def twin_of(game: Any, play: Play, recipe: Recipe | None) -> Any:
    """A clean env_move game (the reference class) holding the same state as the training's `game`: its data
    copied the verified way, or built again from the same recipe; None when neither reproduces it."""
    copier = play.copier
    if copier.name == "copy.deepcopy" or copier.name.startswith("a copy of its data"):
        copy_value = copy.deepcopy if copier.name == "copy.deepcopy" else copy_data
        twin, error = call(lambda: transplant(game, play.cls, copy_value))
    elif recipe is not None and reproducible(Recipe(play.cls, recipe.kwargs, recipe.calls)):
        twin, error = call(lambda: Recipe(play.cls, recipe.kwargs, recipe.calls).build())
    else:
        return None
    return twin if error is None and state(twin) == state(game) else None


def transplant(game: Any, cls: type, copy_value: Callable[[Any], Any]) -> Any:
    """A new `cls` object holding a copy of `game`'s data (not its functions)."""
    twin = cls.__new__(cls)
    data = {k: v for k, v in (attributes(game) or {}).items() if not is_function(v)}
    for name, value in copy_value(data).items():
        object.__setattr__(twin, name, value)
    return twin


def compare_turns(game: Any, twin: Any, play: Play, who: str) -> list[dict]:
    for turn, actions in enumerate(play.sequence(COMPARED_TURNS)):
        outcomes = []
        for g in (game, twin):
            errors = [play.set(g, agent, action) for agent, action in zip(play.agents, actions)]
            result, error = play.step(g)
            outcomes.append((state(g), canonical(result), [type(e).__name__ for e in errors + [error] if e]))
        (here, result_here, errors_here), (there, result_there, errors_there) = outcomes
        if errors_here or errors_there:
            if errors_here != errors_there:
                return [behaviour_changed(who, turn, actions, play, f"it raised {errors_here or 'nothing'} where "
                                                                    f"env_move's raised {errors_there or 'nothing'}")]
            return []
        changed = differences(there, here) or ([("(what the step returned)",)] if result_here != result_there else [])
        if changed:
            detail = describe(changed, here, there) if differences(there, here) else \
                f"{play.stepper}() returned {short(result_here)} where env_move's returned {short(result_there)}"
            return [behaviour_changed(who, turn, actions, play, detail)]
    return []


def mutable_paths(play: Play, start: Recipe) -> list[tuple]:
    """What the game's own methods change (a reset, a step, the actions): a factory may have called them."""
    before, paths = state(start.build()), []
    for name, (_, required) in public_methods(play.cls).items():
        if required == 0:
            game = start.build()
            if call(getattr(game, name), seconds=2.0)[1] is None:
                paths += differences(before, state(game))
    if play.stepper is not None:
        game = start.build()
        for setup in play.setup:
            setup.apply(game)
        for turn in range(3):
            play.play_turn(game, turn)
            paths += differences(before, state(game))
    return paths


# ---------------------------------------------------------------- what env_move relies on

def dependencies(module: types.ModuleType, game: Any = None) -> dict[str, Any]:
    """What env_move relies on from other modules, by dotted name: the attributes of the modules it imports,
    the members of their classes and of the classes it imports by name (random.Random.random, ...), and the
    functions and classes of every library module whose classes a clean `game` reaches (its attributes' types
    and their bases: a PettingZoo environment's scenario, world, wrappers, ...) with their methods."""
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
        found[f"{dotted}.<members>"] = frozenset(vars(cls)) - CACHED_MEMBERS
    if game is not None:
        for library in reached_modules(game, {module.__name__}):
            found.update(code_of(library))
    return found


SKIPPED_MODULES = ("builtins", "__main__", "sys", "orchestrator")
CACHED_MEMBERS = frozenset({"__slotnames__"})  # what copying an instance caches on its class (copyreg), no change
MOST_OBJECTS = 5000


def reached_modules(game: Any, own: set[str]) -> list[types.ModuleType]:
    """The modules that define the classes a game's objects are instances of, and their bases', nearest first
    (breadth first from the game's own attributes)."""
    seen, queue, names = set(), collections.deque([game]), {}
    while queue and len(seen) < MOST_OBJECTS:
        value = queue.popleft()
        if id(value) in seen or isinstance(value, (type, types.ModuleType, types.FunctionType)) or \
                value is None or isinstance(value, (bool, int, float, str, bytes)):
            continue
        seen.add(id(value))
        names.update(dict.fromkeys(c.__module__ for c in type(value).__mro__))
        if isinstance(value, dict):
            queue += list(value.keys()) + list(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            queue += list(value)
        else:
            queue += list((attributes(value) or {}).values())
    return [sys.modules[n] for n in names if n in sys.modules and n not in own
            and n.split(".")[0] not in SKIPPED_MODULES and not n.startswith("_")]


def code_of(module: types.ModuleType) -> dict[str, Any]:
    """A library module's functions and classes, and the methods of the classes it defines (its data aside:
    a library's caches and counters change as it runs)."""
    found = {}
    for attr, inner in list(vars(module).items()):
        if attr.startswith("__") or not (callable(inner) or isinstance(inner, type)):
            continue
        found[f"{module.__name__}.{attr}"] = inner
        if isinstance(inner, type) and inner.__module__ == module.__name__:
            for member, value in vars(inner).items():
                if isinstance(value, (types.FunctionType, staticmethod, classmethod, property)):
                    found[f"{module.__name__}.{attr}.{member}"] = value
    return found


def dependency_changes(module: types.ModuleType, before: dict[str, Any], game: Any = None) -> list[str]:
    after = dependencies(module, game)
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


def training_game(factory: Factory | None, play: Play) -> Any:
    """A new game as the training builds it (its factory, then the probe's setup), else the probe's start;
    None when it cannot be built."""
    game, error = call(factory.remake) if factory is not None else call(play.start.build)
    if error is not None:
        return None
    for setup in play.setup if factory is not None else ():
        setup.apply(game)
    return game


@dataclass(frozen=True)
class Position:
    """A real game state the helpers meet: the turn, how to build it again, and the game itself."""
    turn: int
    recipe: Recipe
    game: Any


def reference_positions(play: Play) -> list[Position]:
    """The clean game played with the fixed sequence, kept at STATE_TURNS (copied the verified way)."""
    recipe = play.start
    game = recipe.build()
    found = [Position(0, recipe, play.copier.copy(game, recipe))] if 0 in STATE_TURNS else []
    if play.stepper is None:
        return found
    for turn, actions in enumerate(play.sequence(max(STATE_TURNS)), start=1):
        result, error = play.play_turn(game, turn - 1)
        if error is not None:
            break
        recipe = recipe.then(*play.turn_calls(actions))
        if turn in STATE_TURNS:
            found.append(Position(turn, recipe, play.copier.copy(game, recipe)))
    return found
