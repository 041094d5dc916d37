"""Game states the probe can trust: built from a recipe, and copied only by a way verified on this game.

A library environment often does not copy the way a hand-written game does: Gymnasium's `EzPickle` pickles
an environment by its constructor arguments, so `copy.deepcopy(game)` of a PettingZoo wrapper is a fresh,
unseeded game at other positions that cannot even step. A rule that compared such a copy with the original
would blame the generated code for a difference the probe made itself. So:

- `Recipe`: a game is the class, its constructor arguments and the method calls made on it since (a
  reset with a seed, the actions of each turn); `build()` makes it again. A recipe is reproducible when two
  builds are equal (their data, random generators included) and play the same.
- `Copier`: a way to copy a game: `copy.deepcopy`, a copy of the objects' data that bypasses their own
  pickling (`copy_data`), the game's own `clone()` / `get_state()`-`set_state()` pair, or building the
  recipe again. `choose_copier` keeps the first one whose copies reproduce the game: equal data after one
  played turn, then the same results and data turn after turn under the same actions.
When none is faithful the copy-based rules are skipped with a note saying so, never turned into a verdict.
"""

from __future__ import annotations

import copy
import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.rules.probe.values import attributes, call, canonical, differences, pure_python, show_path

VERIFIED_TURNS = 3  # turns played on a copy and on its original to call a way of copying faithful
CLONE_METHODS = ("clone", "copy", "duplicate")
STATE_METHODS = (("get_state", "set_state"), ("snapshot", "restore"), ("save_state", "load_state"),
                 ("state_dict", "load_state_dict"), ("__getstate__", "__setstate__"))
ATOMIC = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.BuiltinMethodType,
          types.CodeType, types.MethodDescriptorType, types.WrapperDescriptorType)


@dataclass(frozen=True)
class Call:
    """A method call made on a game: its name and arguments."""
    method: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def apply(self, game: Any) -> tuple[Any, BaseException | None]:
        return call(getattr(game, self.method), *copy.deepcopy(self.args), **copy.deepcopy(self.kwargs))

    def __str__(self) -> str:
        spelled = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.method}({', '.join(spelled)})"


@dataclass(frozen=True)
class Recipe:
    """How to make one game state again: the class, its constructor's keyword arguments, the calls since."""
    cls: type
    kwargs: dict
    calls: tuple[Call, ...] = ()

    def build(self, cls: type | None = None) -> Any:
        """The game (of `cls`, default the recipe's class); raises what construction or a call raised."""
        game, error = call(lambda: (cls or self.cls)(**copy.deepcopy(self.kwargs)))
        if error is not None:
            raise error
        for step in self.calls:
            _, error = step.apply(game)
            if error is not None:
                raise error
        return game

    def then(self, *calls: Call) -> "Recipe":
        return Recipe(self.cls, self.kwargs, self.calls + calls)

    def __str__(self) -> str:
        made = f"{self.cls.__name__}({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"
        return ".".join([made] + [str(c) for c in self.calls])


def state(game: Any) -> dict:
    """The game's data, comparable across two copies of env_move (functions stored on it aside)."""
    return {k: canonical(v) for k, v in (attributes(game) or {}).items() if not is_function(v)}


def is_function(value: Any) -> bool:
    return callable(value) and not isinstance(value, type)


def reproducible(recipe: Recipe) -> bool:
    """Two builds of the recipe hold the same data (random generators' states included)."""
    try:
        return state(recipe.build()) == state(recipe.build())
    except Exception:  # a recipe that does not build is not reproducible
        return False


# ---------------------------------------------------------------- ways of copying a game

def copy_data(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """A deep copy that rebuilds every object with attributes from its data (`__dict__`, `__slots__`) instead of
    its own `__reduce__`/`__deepcopy__`: what a library object that pickles by constructor arguments holds
    right now. Containers are copied item by item; other values (arrays, random generators) by deepcopy, and
    what cannot be copied at all (a font, a lock) is shared."""
    memo = {} if memo is None else memo
    if id(value) in memo:
        return memo[id(value)]
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes) + ATOMIC):
        return value
    if isinstance(value, types.MethodType):
        return types.MethodType(value.__func__, copy_data(value.__self__, memo))
    kind = type(value)
    if kind in (list, tuple, set, frozenset, dict):
        if kind is list:
            memo[id(value)] = made = []
            made.extend(copy_data(v, memo) for v in value)
        elif kind is dict:
            memo[id(value)] = made = {}
            made.update((copy_data(k, memo), copy_data(v, memo)) for k, v in value.items())
        else:
            made = kind(copy_data(v, memo) for v in value)
            memo[id(value)] = made
        return made
    data = attributes(value)
    if data is None or not pure_python(kind):
        try:
            made = copy.deepcopy(value)
        except Exception:  # a resource (a font, a lock, a file): shared, as it is no state of the game
            made = value
        memo[id(value)] = made
        return made
    made = kind.__new__(kind)
    memo[id(value)] = made
    for name, inner in data.items():
        object.__setattr__(made, name, copy_data(inner, memo))
    return made


@dataclass(frozen=True)
class Copier:
    """One way of copying a game: `copy(game, recipe)`; the recipe is the game's own history."""
    name: str
    copy: Callable[[Any, Recipe], Any]


def _own_clone(game: Any) -> Callable[[Any, Recipe], Any] | None:
    for name in CLONE_METHODS:
        method = getattr(type(game), name, None)
        if isinstance(method, types.FunctionType) and _required(method) == 0:
            return lambda g, recipe, name=name: getattr(g, name)()
    return None


def _own_state(game: Any) -> tuple[str, Callable[[Any, Recipe], Any]] | None:
    for getter, setter in STATE_METHODS:
        get, put = getattr(type(game), getter, None), getattr(type(game), setter, None)
        if isinstance(get, types.FunctionType) and isinstance(put, types.FunctionType) \
                and _required(get) == 0 and _required(put) == 1:
            def made(g: Any, recipe: Recipe, getter=getter, setter=setter) -> Any:
                blank = recipe.build()
                getattr(blank, setter)(copy.deepcopy(getattr(g, getter)()))
                return blank
            return f"its own {getter}()/{setter}()", made
    return None


def _required(function: types.FunctionType) -> int:
    params = list(inspect.signature(function).parameters.values())[1:]
    return sum(1 for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def copiers(game: Any) -> list[Copier]:
    """The ways to try, cheapest first; building the recipe again is the last."""
    found = [Copier("copy.deepcopy", lambda g, recipe: copy.deepcopy(g)),
             Copier("a copy of its data (its own pickling bypassed)", lambda g, recipe: copy_data(g))]
    clone = _own_clone(game)
    if clone is not None:
        found.append(Copier("its own clone()", clone))
    own = _own_state(game)
    if own is not None:
        found.append(Copier(*own))
    found.append(Copier("building it again from its recipe", lambda g, recipe: recipe.build()))
    return found


# ---------------------------------------------------------------- verification

Turn = Callable[[Any, int], tuple[Any, BaseException | None]]  # plays turn k of a fixed sequence on a game


def unfaithful(copier: Copier, start: Recipe, play_turn: Turn) -> str:
    """Why `copier` does not reproduce this game ('' when it does): a copy taken after one turn, and its
    original, must hold the same data and then give the same results and data turn after turn."""
    try:
        original = start.build()
    except Exception as exc:
        return f"the game does not build ({type(exc).__name__})"
    play_turn(original, 0)
    history = start.then()  # the copier's recipe knows nothing of the turn: only ways that copy data can pass
    replica, error = call(lambda: copier.copy(original, history))
    if error is not None:
        return f"copying raised {type(error).__name__}: {error}"
    for turn in range(1, VERIFIED_TURNS + 1):
        changed = differences(state(original), state(replica))
        if changed:
            return f"after {turn} turn(s) the copy differs at {show_path(changed[0])}"
        if turn == VERIFIED_TURNS:
            return ""
        here, there = play_turn(original, turn), play_turn(replica, turn)
        if canonical(here[0]) != canonical(there[0]) or type(here[1]) is not type(there[1]):
            return f"the same actions gave other results on the copy at turn {turn + 1}"
    return ""


def choose_copier(start: Recipe, play_turn: Turn, replayable: bool) -> tuple[Copier | None, list[str]]:
    """The first way of copying that reproduces the game, and why each one before it did not."""
    try:
        sample = start.build()
    except Exception as exc:
        return None, [f"the game does not build ({type(exc).__name__}: {exc})"]
    refused = []
    for copier in copiers(sample):
        if copier.name.startswith("building"):
            if replayable:
                return copier, refused
            refused.append(f"{copier.name}: two builds differ (the game draws randomness it was not given)")
            continue
        reason = unfaithful(copier, start, play_turn)
        if not reason:
            return copier, refused
        refused.append(f"{copier.name}: {reason}")
    return None, refused
