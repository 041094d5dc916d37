"""How the probe reads a game's state whatever holds it: a C++ engine (OpenSpiel's `pyspiel.State`, read by its
own serialisation), a chain of Gymnasium wrappers (object graphs with cycles and shared references, walked once),
containers keyed by objects (compared by content, never by a repr holding an address), and what cannot be read
(a note "not verified" with the type, never a silent pass). And a step method known only by what it returns."""

from __future__ import annotations

import sys
import types

import gymnasium
import pyspiel
import pytest

from orchestrator.rules.probe.game import learn_play, start_recipe
from orchestrator.rules.probe.replicas import state
from orchestrator.rules.probe.values import MOST_NODES, PROBE_NODES, Reading, Unread, canonical, differences


class Arena:
    """A thin wrapper over an OpenSpiel game whose whole state is the C++ `pyspiel.State`."""

    def __init__(self, variant: str = "laser_tag") -> None:
        self.game = pyspiel.load_game(variant)
        self.state = self.game.new_initial_state()


def test_a_state_held_in_cpp_is_read_by_its_own_serialisation_and_the_note_says_so() -> None:
    a, b = Arena(), Arena()
    assert canonical(a) == canonical(b)
    b.state.apply_action(b.state.legal_actions()[0])  # the chance node places the players
    assert differences(canonical(a), canonical(b)) == [("state", "serialize()")]
    assert "pyspiel.State by serialize()" in " ".join(Reading.notes())


def test_a_game_swapped_for_another_variant_is_not_the_same_game() -> None:
    assert differences(canonical(Arena()), canonical(Arena("laser_tag(zero_sum=True)"))) == [("game", "serialize()")]


def test_a_gymnasium_wrapper_chain_is_walked_once_and_two_equal_environments_are_equal() -> None:
    made = [gymnasium.make("CartPole-v1") for _ in range(2)]
    for env in made:
        env.reset(seed=3)
        env.unwrapped.back = env  # a cycle through the whole chain
    first = canonical(made[0])
    assert first == canonical(made[1])
    made[1].step(0)
    assert differences(first, canonical(made[1]))


def test_shared_references_and_cycles_are_named_by_the_path_of_their_first_visit() -> None:
    holder = types.SimpleNamespace(cells=[1, 2])
    holder.alias, holder.me = holder.cells, holder
    assert canonical(holder) == {"<class>": "SimpleNamespace", "cells": [1, 2], "alias": "<same as cells>",
                                 "me": "<same as (the whole value)>"}


class Agent:
    """An object used as a dict key: hashed by identity, its repr holding a memory address."""

    def __init__(self, position: int) -> None:
        self.position = position


def test_a_container_keyed_by_objects_compares_by_content() -> None:
    def world(*positions: int) -> dict:
        return {Agent(p): p * 10 for p in positions}

    assert canonical(world(1, 2)) == canonical(world(1, 2))
    assert canonical(world(1, 2)) != canonical(world(1, 3))
    assert not any("0x" in key for key in canonical(world(1, 2)))


def test_what_is_past_the_budget_is_not_verified_and_said() -> None:
    Reading.unread.clear()
    chain: list = []
    for _ in range(MOST_NODES + 10):
        chain = [chain]
    form = canonical(types.SimpleNamespace(deep=chain))
    assert "not verified" in repr(form)
    assert any("types.SimpleNamespace" in n or "list" in n for n in Reading.notes() if n.startswith("not verified"))


def test_past_the_probe_s_whole_budget_nothing_more_is_read_and_that_is_said(monkeypatch) -> None:
    """A game too big to read many times over within `check`'s minute: the states read after the budget are not
    verified, and the note says so, with the type."""
    monkeypatch.setattr(Reading, "nodes", PROBE_NODES - 3)
    Reading.unread.clear()
    form = canonical(types.SimpleNamespace(cells=[[1], [2], [3], [4]]))
    assert isinstance(form["cells"][3], Unread)
    assert any("past the probe's budget" in n for n in Reading.notes())


def test_an_object_with_no_readable_state_is_noted_with_its_type() -> None:
    Reading.unread.clear()
    form = canonical(types.SimpleNamespace(stream=(i for i in range(3))))
    assert isinstance(form["stream"], Unread)
    assert any("generator" in n for n in Reading.notes())


MOVES = ("stay", "go")


class Lean:
    """A wrapper that keeps the positions in an engine the probe cannot read (a closure) and whose step returns
    (rewards, done): the step is known by what it returns."""

    def __init__(self, seed: int = 0) -> None:
        positions = [0, 0]
        self.pending: dict[int, str] = {}

        def advance(moves: dict[int, str]) -> list[float]:
            for agent, move in moves.items():
                positions[agent] += move == "go"
            return [float(p) for p in positions]
        self._engine = advance

    def set_action(self, agent_id: int, move: str) -> None:
        if agent_id not in (0, 1) or move not in MOVES:
            raise ValueError(f"bad agent or move: {agent_id!r}, {move!r}")
        self.pending[agent_id] = move

    def step(self) -> tuple[list[float], bool]:
        return self._engine(self.pending), False  # the choices stay as they were: only the engine moved


@pytest.fixture
def lean_module():
    module = types.ModuleType("probe_lean_game")
    module.MOVES, module.Lean = MOVES, Lean
    Lean.__module__ = module.__name__
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_a_step_whose_state_is_hidden_is_learned_from_the_rewards_it_returns(lean_module) -> None:
    play = learn_play(Lean, start_recipe(Lean, {"seed": None}))
    assert (play.setter, play.stepper) == ("set_action", "step")
    assert any("step() taken by what it returns" in note for note in play.notes)
