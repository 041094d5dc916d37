"""The training's CUSTOMIZE hooks around the game, judged by behaviour: the observation it shows an agent and the
reward it trains on ("Use observation_to_text from helpers.py in format_observation"; "the training reward of one
agent for one game step, from the game's reward and info").

- observation-changes-game: the training's observation function (the CUSTOMIZE function of (game, agent) that
  returns text) leaves the game as it found it; what observation_to_text itself changes and what the game's own
  queries change (a game that caches what it shows) aside.
- observation-reveals-randomness: neither it nor observation_to_text shows a draw of the game's random generator
  that has not happened: on two copies of one state whose random generators (the game's own, and Python's,
  numpy's and torch's global ones) are in other states, the text is the same. A copy of the game's generator
  drawn ahead ("the next apple grows at (3,4)") shows the future to the agent.
- reward-not-a-function: the shaped reward (the CUSTOMIZE function of (reward, info, agent) that returns a
  number) is a function of the game's reward and info: the same arguments give the same number whatever was
  called before (no state kept between calls, none that other code sets: a refused call's penalty paid back),
  under any random state (no noise), and it opens no file (no bonus read from the side). Judged on the rewards
  and infos the game's own steps return and on a few made ones.
"""

from __future__ import annotations

import os
import random
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.rules.probe.effects import Board, Callee, find, flat
from orchestrator.rules.probe.game import is_reset_like, public_methods
from orchestrator.rules.probe.replicas import state
from orchestrator.rules.probe.values import (ProbeTimeout, attributes, call, canonical, covered, differences, guarded,
                                             rng_state, seed_everything, short, show_path, violation)

RESEED = 987_654
OTHER_SEED = 1  # the probe's calls run under seed 0
MOST_OBJECTS = 2000
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


# ---------------------------------------------------------------- random generators

def generators(game: Any) -> list[Any]:
    """The random generators a game holds (Python's, numpy's, torch's), found through its attributes."""
    found, queue, seen = [], [game], set()
    while queue and len(seen) < MOST_OBJECTS:
        value = queue.pop(0)
        if id(value) in seen or value is None or isinstance(value, (bool, int, float, str, bytes, type,
                                                                   types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(value))
        if isinstance(value, random.Random) or rng_state(value) is not None:
            found.append(value)
            continue
        if isinstance(value, dict):
            queue += list(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            queue += list(value)
        else:
            queue += list((attributes(value) or {}).values())
    return found


def reseed(generator: Any) -> bool:
    """Put a generator in another state (RESEED); False when it cannot be."""
    try:
        if isinstance(generator, random.Random):
            generator.seed(RESEED)
        elif hasattr(generator, "bit_generator"):  # numpy's Generator
            generator.bit_generator.state = type(generator.bit_generator)(RESEED).state
        elif hasattr(generator, "manual_seed"):  # torch's Generator
            generator.manual_seed(RESEED)
        elif hasattr(generator, "seed"):  # numpy's RandomState
            generator.seed(RESEED)
        else:
            return False
    except Exception:  # a generator of a kind not known here: not varied
        return False
    return True


def call_seeded(function: Callable, *args: Any, seed: int) -> tuple[Any, BaseException | None]:
    """values.call, with the global random generators seeded `seed` instead of 0."""
    try:
        with guarded():
            seed_everything(seed)
            return function(*args), None
    except (Exception, ProbeTimeout, SystemExit) as exc:
        return None, exc


# ---------------------------------------------------------------- the observation

def check_observation_hook(candidates: list[Callee], board: Board, observe: Callable, agents: list[int]) -> list[dict]:
    index = len(board.positions) - 1
    formatter = find(candidates, 2, lambda: (board.copy(index), agents[0]), lambda r: isinstance(r, str))
    problems = []
    if formatter is not None:
        for agent in agents:
            game = board.copy(index)
            before = state(game)
            call(formatter.function, game, agent)
            allowed = board.footprint(index, agent).reads + queried(board, index)
            changed = [p for p in differences(before, state(game)) if not covered(p, allowed)]
            if changed:
                problems.append(violation("observation-changes-game", "train.py",
                                          f"{formatter.label}(game, {agent}) changed the game it shows "
                                          f"({', '.join(show_path(p) for p in changed[:3])}); what an agent sees is "
                                          f"read from the game, never written to it (nor drawn from its random "
                                          f"generator)"))
                break
    shown = [(formatter.label, formatter.function, "train.py")] if formatter is not None else []
    for label, function, file in shown + [("observation_to_text", observe, "helpers.py")]:
        revealed = reveals(function, board, index, agents)
        if revealed:
            problems.append(violation("observation-reveals-randomness", file,
                                      f"{label}(game, {revealed[0]}) shows random draws that have not happened: on "
                                      f"the same board with {revealed[1]} in another state it returns "
                                      f"{short(revealed[3], 120)} instead of {short(revealed[2], 120)}; an agent sees "
                                      f"the game as it is, never what its random generator will do next"))
            break
    return problems


def queried(board: Board, index: int) -> list[tuple]:
    """What the game's own queries change (a `render()` that keeps what it drew): its public methods without
    arguments, its step and its resets aside."""
    play, paths = board.play, []
    for name, (_, required) in public_methods(play.cls).items():
        if required == 0 and name != play.stepper and not is_reset_like(name):
            game = board.copy(index)
            before = state(game)
            if call(getattr(game, name), seconds=2.0)[1] is None:
                paths += differences(before, state(game))
    return paths


def reveals(function: Callable, board: Board, index: int, agents: list[int]) -> tuple[int, str, str, str] | None:
    """(agent, which generator, text, other text) where `function`'s text depends on a random state."""
    for agent in agents:
        plain, error = call(function, board.copy(index), agent)
        if error is not None or not isinstance(plain, str):
            return None
        other = board.copy(index)
        if any([reseed(g) for g in generators(other)]):
            varied, error = call(function, other, agent)
            if error is None and isinstance(varied, str) and flat(varied) != flat(plain):
                return agent, "the game's random generator", plain, varied
        varied, error = call_seeded(function, board.copy(index), agent, seed=OTHER_SEED)
        if error is None and isinstance(varied, str) and flat(varied) != flat(plain):
            return agent, "the global random generators (Python's, numpy's, torch's)", plain, varied
    return None


# ---------------------------------------------------------------- the reward

def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) or (
        hasattr(value, "item") and getattr(value, "shape", None) == () and not isinstance(value, type))


@dataclass
class FileOpens:
    """Files opened while a hook runs (code an import loads aside)."""
    active: bool = False
    opened: list[str] = field(default_factory=list)
    installed: bool = False

    def __call__(self, event: str, args: tuple) -> None:
        if self.active and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if not path.endswith(CODE_SUFFIXES) and not path.startswith(("/proc/", "/dev/", "/sys/")):
                self.opened.append(path)

    def install(self) -> None:
        if not self.installed:
            sys.addaudithook(self)
            self.installed = True


OPENS = FileOpens()


def reward_inputs(board: Board) -> list[tuple[Any, dict, int]]:
    """(reward, info, agent): from the game's own steps where they return (observations, rewards, done, info),
    and a few made ones."""
    play, found = board.play, []
    for position in range(len(board.positions)):
        game = board.copy(position)
        result, error = play.play_turn(game, board.positions[position].turn) if play.stepper else (None, None)
        if error is None and isinstance(result, tuple) and len(result) >= 4 and isinstance(result[3], dict):
            rewards, info = result[1], result[3]
            for agent in play.agents:
                reward = rewards.get(agent) if isinstance(rewards, dict) else rewards[agent] if isinstance(
                    rewards, (list, tuple)) and agent < len(rewards) else rewards
                if is_number(reward):
                    found.append((reward, info, agent))
    made = [(1.0, {}, play.agents[0]), (-0.5, {"events": ["probe"]}, play.agents[-1]), (0.0, {}, play.agents[0])]
    return found[:6] + made


def find_shaper(candidates: list[Callee], inputs: list[tuple[Any, dict, int]]) -> Callee | None:
    for candidate in (c for c in candidates if c.arity == 3):
        result, error = call(candidate.function, *inputs[-1])
        if error is None and is_number(result):
            return candidate
    return None


def outputs(function: Callable, inputs: list[tuple[Any, dict, int]], seed: int = 0) -> list[Any]:
    found = []
    for reward, info, agent in inputs:
        result, error = call_seeded(function, reward, dict(info), agent, seed=seed)
        found.append(canonical(result) if error is None else f"<raises {type(error).__name__}>")
    return found


@dataclass
class RewardCheck:
    """reward-not-a-function, from the probe's first calls (`start`) to its end (`finish`)."""
    shaper: Callee | None
    inputs: list[tuple[Any, dict, int]]
    first: list[Any] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)

    def start(self) -> None:
        if self.shaper is None:
            return
        OPENS.install()
        OPENS.active, OPENS.opened = True, []
        try:
            self.first = outputs(self.shaper.function, self.inputs)
            again = outputs(self.shaper.function, list(reversed(self.inputs)))[::-1]
        finally:
            OPENS.active = False
        if OPENS.opened:
            self.report(f"opens {OPENS.opened[0]} while it runs: a reward read from a file is none of the game's")
        elif again != self.first:
            self.report(self.changed(again, "when called again with the same arguments (it keeps state between calls)"))
        else:
            noisy = outputs(self.shaper.function, self.inputs, seed=OTHER_SEED)
            if noisy != self.first:
                self.report(self.changed(noisy, "under another random state (it adds randomness of its own)"))

    def finish(self) -> list[dict]:
        if self.shaper is not None and not self.problems:
            later = outputs(self.shaper.function, self.inputs)
            if later != self.first:
                self.report(self.changed(later, "after the probe ran the training's other functions (a refused call, "
                                                "a dispatch, whole episodes): it reads state that other code keeps"))
        return self.problems

    def changed(self, now: list[Any], when: str) -> str:
        index = next(i for i, (a, b) in enumerate(zip(self.first, now)) if a != b)
        reward, info, agent = self.inputs[index]
        return (f"returns {short(now[index])} instead of {short(self.first[index])} for ({reward!r}, "
                f"{short(info, 80)}, {agent}) {when}")

    def report(self, detail: str) -> None:
        self.problems.append(violation("reward-not-a-function", "train.py",
                                       f"{self.shaper.label}(reward, info, agent) is not a function of the game's "
                                       f"reward and info: it {detail}; shape the reward from its arguments only (no "
                                       f"file, no randomness, nothing kept between calls)"))
