"""How the probe learns to play and to copy a game it has never seen, on small games written the ways library
wrappers are: a reset that reseeds from the OS, an inner environment that pickles by its constructor arguments
(Gymnasium's EzPickle), a random stream nothing can copy, a step that draws the OS's randomness. What the probe
cannot verify is a note, never a verdict."""

from __future__ import annotations

import random
import sys
import threading
import types

import pytest

from orchestrator.rules.probe.game import learn_play, start_recipe
from orchestrator.rules.probe.game import choose as choose_copier_of
from orchestrator.rules.probe.replicas import Recipe, copy_data, state
from orchestrator.rules.probe.values import canonical, coordinate_pairs

MOVES = ("stay", "left", "right")
DELTA = {"stay": 0, "left": -1, "right": 1}


class Grid:
    """Two agents on a line; reset(seed=None) reseeds from the OS, as Gymnasium's reset does."""

    def __init__(self, seed: int | None = 0) -> None:
        self.reset(seed)

    def reset(self, seed: int | None = None) -> list[int]:
        self._rng = random.Random(seed)
        self.positions = [self._rng.randint(0, 9) for _ in range(2)]
        self._pending: dict[int, str] = {}
        self.turn = 0
        return list(self.positions)

    def act(self, agent_id: int, move: str) -> None:
        if agent_id not in (0, 1) or move not in DELTA:
            raise ValueError(f"bad agent or move: {agent_id!r}, {move!r}")
        self._pending[agent_id] = move

    def step(self) -> list[int]:
        for agent, move in self._pending.items():
            self.positions[agent] += DELTA[move]
        self._pending = {}
        self.turn += 1
        return list(self.positions)


class Shuffling(Grid):
    """`shuffle()` changes the game and depends on the actions chosen, but draws the OS's randomness: no step."""

    def shuffle(self) -> list[int]:
        self.positions = [p + DELTA[self._pending.get(a, "stay")] + random.SystemRandom().randint(0, 99)
                          for a, p in enumerate(self.positions)]
        return list(self.positions)


class Engine:
    """A library environment that pickles by its constructor arguments (EzPickle): a copy starts over."""

    def __init__(self, width: int = 10) -> None:
        self.width = width
        self.cells: list[int] = []

    def __reduce__(self):
        return type(self), (self.width,)


class Wrapped(Grid):
    """The game's positions live in the library object: deepcopy loses them."""

    def reset(self, seed: int | None = None) -> list[int]:
        self._engine = Engine()
        positions = super().reset(seed)
        self._engine.cells = positions
        self.positions = self._engine.cells
        return positions


class Streamed(Grid):
    """Randomness drawn from a generator object, which neither deepcopy nor pickle can copy: only building the
    game again from its recipe reproduces it."""

    def reset(self, seed: int | None = None) -> list[int]:
        positions = super().reset(seed)
        rng = random.Random(seed)
        self._noise = (rng.randint(0, 1) for _ in iter(int, 1))
        return positions

    def step(self) -> list[int]:
        positions = super().step()
        self.positions[0] += next(self._noise)
        return positions


@pytest.fixture
def game_module():
    """The test's games as a module of their own, as the probe meets env_move (its module-level MOVES)."""
    module = types.ModuleType("probe_games_under_test")
    module.MOVES = MOVES
    for cls in (Grid, Shuffling, Engine, Wrapped, Streamed):
        setattr(module, cls.__name__, cls)
        cls.__module__ = module.__name__
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def learned(cls: type):
    play = learn_play(cls, start_recipe(cls, {"seed": None}))
    notes = choose_copier_of(play)
    return play, notes


def test_a_reset_that_reseeds_from_the_os_is_not_the_step(game_module) -> None:
    play, _ = learned(game_module.Grid)
    assert (play.setter, play.stepper, play.agents) == ("act", "step", [0, 1])
    assert play.actions[:3] == list(MOVES)
    assert play.copier.name == "copy.deepcopy"


def test_a_method_whose_outcome_is_random_is_not_the_step_and_the_note_says_so(game_module) -> None:
    play, _ = learned(game_module.Shuffling)
    assert play.stepper == "step"
    assert any("shuffle() not taken: the same action on the same state gave two outcomes" in n for n in play.notes)


def test_a_library_object_that_pickles_by_constructor_arguments_is_copied_by_its_data(game_module) -> None:
    play, notes = learned(game_module.Wrapped)
    assert play.copier.name.startswith("a copy of its data")
    assert any("copy.deepcopy: after 1 turn(s) the copy differs at _engine" in n for n in notes)
    game = play.start.build()
    replica = play.copier.copy(game, play.start)
    assert state(replica) == state(game) and replica._engine is not game._engine


def test_a_stream_nothing_can_copy_is_rebuilt_from_its_recipe(game_module) -> None:
    play, notes = learned(game_module.Streamed)
    assert play.copier.name == "building it again from its recipe"
    assert "a copy of its data" in notes[0]


def test_a_game_built_unseeded_is_built_seeded(game_module) -> None:
    """The training's factory left the seed unset: the probe's start sets it, so every run plays the same board."""
    recipe = start_recipe(game_module.Grid, {"seed": None})
    assert recipe.kwargs == {"seed": 0}
    assert state(recipe.build()) == state(Recipe(game_module.Grid, {"seed": 0}).build())


def test_copy_data_shares_what_cannot_be_copied_and_copies_the_rest() -> None:
    class Holder:
        def __init__(self) -> None:
            self.lock, self.values, self.rng = threading.Lock(), [1, [2, 3]], random.Random(3)

    holder = Holder()
    lock = holder.lock
    twin = copy_data(holder)
    assert twin.lock is lock and twin.values == holder.values and twin.values[1] is not holder.values[1]
    assert canonical(twin.rng) == canonical(holder.rng) and twin.rng is not holder.rng


@pytest.mark.parametrize("text,pairs", [
    ("You are at (2,3). You see an apple at (2,4).", [(2, 3), (2, 4)]),
    ("You are at (+0.21, -0.60), landmark at (-1.5e-1, 0.9)", [(0.21, -0.6), (-0.15, 0.9)]),
    ("position x=0.21, y=-0.60; target x: 3 y: 4", [(0.21, -0.6), (3, 4)]),
    ("You stand at (row 2, col 3)", [(2, 3)]),
    ("[1.5 2.0]", [(1.5, 2.0)]),
    ("You have 3 apples and 4 turns left.", []),
])
def test_coordinates_in_any_numeric_form(text: str, pairs: list) -> None:
    assert coordinate_pairs(text) == [(float(x), float(y)) for x, y in pairs]
