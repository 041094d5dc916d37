"""Cleanup: a small multi-agent social-dilemma grid game (pure Python standard library).

A simplified version of DeepMind's Sequential Social Dilemma "Cleanup" (Melting Pot
``clean_up``). Agents earn reward only by eating apples in the orchard, but apples
only grow while the river is clean, and cleaning the river earns nothing. Every agent
is tempted to eat while others clean: if nobody cleans, the river silts up and
apples stop growing for everyone.

Coordinates
-----------
A cell is ``(x, y)``: ``x`` is the column (0..width-1, left to right), ``y`` is the
row (0..height-1, top to bottom); ``(0, 0)`` is the top-left cell. ``UP`` decreases
``y`` and ``DOWN`` increases it (see ``MOVES``). All cell lists in this module are
sorted by ``(x, y)``.

Layout (fixed by the constructor)
---------------------------------
* River: the leftmost ``river_width`` columns (``x < river_width``). Each river cell
  is either clean or dirty ("waste").
* Orchard: the rightmost ``orchard_width`` columns (``x >= width - orchard_width``).
  Each orchard cell holds at most one apple.
* Ground: the columns in between (at least one). Agents start there.
All cells, including river and orchard cells, are walkable.

Episode start (``reset``)
-------------------------
Agents are placed on distinct, randomly chosen ground cells and face ``"LEFT"``
(towards the river). ``round(initial_dirt_fraction * river cells)`` random river
cells are dirty, and each orchard cell holds an apple with probability
``initial_apple_fraction``. The constructor already calls ``reset(seed)``, so a new
env is ready to step; calling ``reset()`` again starts a fresh episode from the
continuing RNG stream, ``reset(seed)`` replays the episode of that seed.

Actions
-------
``ACTIONS = ("UP", "DOWN", "LEFT", "RIGHT", "STAY", "CLEAN")``. Action strings are
case-insensitive and stripped (``" clean "`` is fine). Agent ids are the ints
``0..num_agents-1``. Actions reach a step in one of two ways:

* ``set_action(agent_id, action)`` chooses one agent's action for the next step (a
  later call for the same agent replaces the earlier one; ``pending_actions`` shows
  the choices so far), then ``step()`` plays all chosen actions at once. This is how
  high-level helpers act: each one sets its agent's action and returns.
* ``step({agent_id: action})`` plays the given dict instead of the pending choices.

Either way agents without an action STAY, and every step clears the pending choices.

Order of events within one ``step`` (all agents act simultaneously)
-------------------------------------------------------------------
1. Moves. A move action sets the agent's facing to that direction, even if the
   move is blocked. A move off the grid is blocked. Collisions are resolved
   deterministically: (a) if two or more agents target the same cell, none of them
   moves; (b) an agent cannot enter a cell held by an agent that ends up not moving
   (applied repeatedly until nothing changes, so a blocked agent blocks the whole
   queue behind it); (c) two agents trying to swap cells both stay. An agent may
   follow another agent that leaves its cell, and longer rotations (e.g. four
   agents circling a 2x2 block) do move. See ``resolve_moves``.
2. CLEAN beams. An agent that chose CLEAN cleans its own cell and the next
   ``clean_beam_length`` cells in its facing direction (the beam stops at the grid
   edge and passes through agents): every dirty river cell on the beam becomes
   clean. Beams are applied in agent-id order, so a cell on two beams is credited
   to the lower id.
3. Apples. An agent standing on an apple eats it: +1 reward, the apple is removed.
4. Waste. With probability ``waste_spawn_prob`` one uniformly random clean river
   cell becomes dirty (nothing happens if the river is fully dirty).
5. Regrowth. With ``d`` = dirty river cells / river cells (after step 4), every
   orchard cell with no apple and no agent grows an apple with probability
   ``p = apple_regrowth_max * clip((depletion_threshold - d) / depletion_threshold, 0, 1)``
   (see ``apple_regrowth_probability``). For ``d >= depletion_threshold`` no apple
   grows at all.
6. The step counter increases by one; the episode is done when it equals
   ``max_steps``. Stepping a finished episode raises ``ValueError``.

Return values
-------------
``step(actions) -> (observations, rewards, done, info)`` where

* ``observations``: ``{agent_id: observation}`` for every agent (see below).
* ``rewards``: ``{agent_id: float}`` for every agent (apples eaten this step).
* ``done``: ``True`` once ``max_steps`` steps have been played.
* ``info``: ``{"step": int, "dirt_fraction": float, "regrowth_prob": float,
  "apples_collected": {id: int}, "cells_cleaned": {id: int},
  "apples_on_map": int, "blocked": {id: bool}}``; ``regrowth_prob`` is the ``p``
  used in event 5 and ``blocked`` is True for an agent whose move did not happen.

An observation is a JSON-serialisable dict describing the whole grid (full
observability) from one agent's point of view::

    {"agent_id": int, "position": (x, y), "facing": "UP"|"DOWN"|"LEFT"|"RIGHT",
     "step": int, "max_steps": int, "width": int, "height": int,
     "agents": {id: (x, y) for every agent}, "apples": [(x, y), ...] sorted,
     "dirt": [(x, y), ...] sorted dirty river cells,
     "river_columns": (0, river_width - 1),
     "orchard_columns": (width - orchard_width, width - 1),
     "dirt_fraction": float, "regrowth_prob": float,
     "total_reward": float}   # this agent's reward so far this episode

Rendering
---------
``render()`` returns one line per row ``y = 0..height-1``, one character per cell,
followed by one status line (step, dirt fraction, regrowth probability, scores)::

    ~  clean river cell        #  dirty river cell
    .  ground                  ,  orchard cell without apple
    @  apple                   0-7  agent id (drawn over anything else)

Determinism and saving
----------------------
All randomness comes from one ``random.Random`` owned by the env, and agents and
cells are always visited in a fixed order. The same seed and the same actions give
exactly the same observations, rewards, infos and renders. ``get_state()`` returns
a JSON-serialisable snapshot (config, step count, agents, dirt, apples, scores and
RNG state); ``set_state()`` restores it on an env with the same config; ``clone()``
returns an independent copy whose future matches the original's under the same
actions.

Example
-------
>>> env = CleanupEnv(seed=0)
>>> obs = env.reset(seed=0)
>>> obs, rewards, done, info = env.step({0: "LEFT", 1: "clean"})
>>> sorted(rewards)
[0, 1]
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

ACTIONS: tuple[str, ...] = ("UP", "DOWN", "LEFT", "RIGHT", "STAY", "CLEAN")
MOVES: dict[str, tuple[int, int]] = {"UP": (0, -1), "DOWN": (0, 1), "LEFT": (-1, 0), "RIGHT": (1, 0)}
INITIAL_FACING = "LEFT"
MAX_AGENTS = 8
MIN_SIDE, MAX_SIDE = 3, 64

Position = tuple[int, int]
Observation = dict[str, Any]


def normalize_action(action: object) -> str:
    """Return the canonical action name (e.g. ``" clean "`` -> ``"CLEAN"``); ValueError if unknown."""
    name = action.strip().upper() if isinstance(action, str) else None
    if name not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; valid actions are {', '.join(ACTIONS)} (case-insensitive)")
    return name


def apple_regrowth_probability(dirt_fraction: float, apple_regrowth_max: float, depletion_threshold: float) -> float:
    """Per-cell apple regrowth probability for a river whose dirty fraction is ``dirt_fraction``."""
    scale = (depletion_threshold - dirt_fraction) / depletion_threshold
    return apple_regrowth_max * min(1.0, max(0.0, scale))


def resolve_moves(starts: list[Position], targets: list[Position]) -> list[Position]:
    """Apply the collision rules to simultaneous moves and return each agent's final cell.

    ``starts[i]`` is agent ``i``'s current cell and ``targets[i]`` the cell it tries to
    enter (equal to ``starts[i]`` when it does not move). Start cells must be distinct.
    """
    n = len(starts)
    wants = [targets[i] != starts[i] for i in range(n)]
    moving = list(wants)
    claims = Counter(targets[i] for i in range(n) if wants[i])
    index_at = {cell: i for i, cell in enumerate(starts)}
    for i in range(n):
        other = index_at.get(targets[i])
        swapping = other is not None and wants[other] and targets[other] == starts[i]
        if wants[i] and (claims[targets[i]] > 1 or swapping):
            moving[i] = False
    changed = True
    while changed:
        held = {starts[i] for i in range(n) if not moving[i]}
        changed = False
        for i in range(n):
            if moving[i] and targets[i] in held:
                moving[i] = False
                changed = True
    return [targets[i] if moving[i] else starts[i] for i in range(n)]


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    allowed = f"{low} <= {name} <= {high}" if high is not None else f"{name} >= {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be an int with {allowed}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name}={value} is out of range; expected {allowed}")


def _check_fraction(name: str, value: object, *, allow_zero: bool = True) -> None:
    allowed = f"{'0 <=' if allow_zero else '0 <'} {name} <= 1"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r} must be a number with {allowed}")
    if not (0.0 <= value <= 1.0) or (value == 0.0 and not allow_zero):
        raise ValueError(f"{name}={value} is out of range; expected {allowed}")


class CleanupEnv:
    """The Cleanup game; see the module docstring for the rules, coordinates and API."""

    def __init__(
        self,
        width: int = 10,
        height: int = 8,
        num_agents: int = 2,
        max_steps: int = 50,
        river_width: int = 3,
        orchard_width: int = 4,
        clean_beam_length: int = 3,
        waste_spawn_prob: float = 0.5,
        apple_regrowth_max: float = 0.2,
        depletion_threshold: float = 0.4,
        initial_dirt_fraction: float = 0.3,
        initial_apple_fraction: float = 0.15,
        seed: int | None = None,
    ) -> None:
        _check_int("width", width, MIN_SIDE, MAX_SIDE)
        _check_int("height", height, MIN_SIDE, MAX_SIDE)
        _check_int("num_agents", num_agents, 1, MAX_AGENTS)
        _check_int("max_steps", max_steps, 1)
        _check_int("river_width", river_width, 1)
        _check_int("orchard_width", orchard_width, 1)
        _check_int("clean_beam_length", clean_beam_length, 1)
        for name, value in (
            ("waste_spawn_prob", waste_spawn_prob),
            ("apple_regrowth_max", apple_regrowth_max),
            ("initial_dirt_fraction", initial_dirt_fraction),
            ("initial_apple_fraction", initial_apple_fraction),
        ):
            _check_fraction(name, value)
        _check_fraction("depletion_threshold", depletion_threshold, allow_zero=False)
        if river_width + orchard_width > width - 1:
            raise ValueError(
                f"river_width + orchard_width = {river_width + orchard_width} is out of range; "
                f"expected <= width - 1 = {width - 1} (at least one ground column)"
            )
        ground_cells = (width - river_width - orchard_width) * height
        if num_agents > ground_cells:
            raise ValueError(f"num_agents={num_agents} is out of range; expected <= {ground_cells} (the number of ground cells)")

        self.width = width
        self.height = height
        self.num_agents = num_agents
        self.max_steps = max_steps
        self.river_width = river_width
        self.orchard_width = orchard_width
        self.clean_beam_length = clean_beam_length
        self.waste_spawn_prob = float(waste_spawn_prob)
        self.apple_regrowth_max = float(apple_regrowth_max)
        self.depletion_threshold = float(depletion_threshold)
        self.initial_dirt_fraction = float(initial_dirt_fraction)
        self.initial_apple_fraction = float(initial_apple_fraction)

        self._river_cells = self._column_cells(0, river_width)
        self._ground_cells = self._column_cells(river_width, width - orchard_width)
        self._orchard_cells = self._column_cells(width - orchard_width, width)
        self._rng = random.Random(seed)
        self._step_count = 0
        self._positions: list[Position] = []
        self._facing: list[str] = []
        self._dirt: set[Position] = set()
        self._apples: set[Position] = set()
        self._total_rewards: list[float] = []
        self._pending: dict[int, str] = {}
        self.reset()

    # ------------------------------------------------------------------ geometry

    def _column_cells(self, first_column: int, end_column: int) -> tuple[Position, ...]:
        return tuple((x, y) for x in range(first_column, end_column) for y in range(self.height))

    def in_bounds(self, x: int, y: int) -> bool:
        """True if ``(x, y)`` is on the grid."""
        return 0 <= x < self.width and 0 <= y < self.height

    def is_river(self, x: int, y: int) -> bool:
        """True if ``(x, y)`` is a river cell (clean or dirty)."""
        return 0 <= x < self.river_width and 0 <= y < self.height

    def is_orchard(self, x: int, y: int) -> bool:
        """True if ``(x, y)`` is an orchard cell (with or without apple)."""
        return self.width - self.orchard_width <= x < self.width and 0 <= y < self.height

    def beam_cells(self, agent_id: int) -> list[Position]:
        """Cells a CLEAN by this agent would cover now: its own cell, then up to ``clean_beam_length`` ahead."""
        self._check_agent_id(agent_id)
        x, y = self._positions[agent_id]
        dx, dy = MOVES[self._facing[agent_id]]
        cells = [(x, y)]
        for distance in range(1, self.clean_beam_length + 1):
            cell = (x + dx * distance, y + dy * distance)
            if not self.in_bounds(*cell):
                break
            cells.append(cell)
        return cells

    # ---------------------------------------------------------- read-only state

    @property
    def config(self) -> dict[str, Any]:
        """Constructor arguments (without ``seed``); ``CleanupEnv(**env.config)`` builds the same game."""
        return {
            "width": self.width,
            "height": self.height,
            "num_agents": self.num_agents,
            "max_steps": self.max_steps,
            "river_width": self.river_width,
            "orchard_width": self.orchard_width,
            "clean_beam_length": self.clean_beam_length,
            "waste_spawn_prob": self.waste_spawn_prob,
            "apple_regrowth_max": self.apple_regrowth_max,
            "depletion_threshold": self.depletion_threshold,
            "initial_dirt_fraction": self.initial_dirt_fraction,
            "initial_apple_fraction": self.initial_apple_fraction,
        }

    @property
    def step_count(self) -> int:
        """Steps played in the current episode."""
        return self._step_count

    @property
    def done(self) -> bool:
        """True once ``max_steps`` steps have been played; call ``reset()`` to continue."""
        return self._step_count >= self.max_steps

    @property
    def dirt_fraction(self) -> float:
        """Dirty river cells / all river cells, in [0, 1]."""
        return len(self._dirt) / len(self._river_cells)

    @property
    def regrowth_probability(self) -> float:
        """Per-cell apple regrowth probability for the current river."""
        return apple_regrowth_probability(self.dirt_fraction, self.apple_regrowth_max, self.depletion_threshold)

    # ------------------------------------------------------------------ episode

    def reset(self, seed: int | None = None) -> dict[int, Observation]:
        """Start a new episode (reseeding the RNG first if ``seed`` is given); return all observations."""
        if seed is not None:
            self._rng.seed(seed)
        self._step_count = 0
        self._positions = self._rng.sample(self._ground_cells, self.num_agents)
        self._facing = [INITIAL_FACING] * self.num_agents
        dirty_count = round(self.initial_dirt_fraction * len(self._river_cells))
        self._dirt = set(self._rng.sample(self._river_cells, dirty_count))
        self._apples = {cell for cell in self._orchard_cells if self._rng.random() < self.initial_apple_fraction}
        self._total_rewards = [0.0] * self.num_agents
        self._pending = {}
        return self._all_observations()

    def set_action(self, agent_id: int, action: str) -> None:
        """Choose ``agent_id``'s action for the next ``step()``; ValueError for an unknown id or action."""
        self._check_agent_id(agent_id)
        self._pending[agent_id] = normalize_action(action)

    @property
    def pending_actions(self) -> dict[int, str]:
        """The actions chosen with ``set_action`` since the last step, by agent id."""
        return dict(self._pending)

    def step(self, actions: Mapping[int, str] | None = None) -> tuple[dict[int, Observation], dict[int, float], bool,
                                                                     dict[str, Any]]:
        """Play one simultaneous step of ``actions`` (default: the pending ``set_action`` choices);
        return ``(observations, rewards, done, info)``."""
        if self.done:
            raise ValueError(f"episode is done (step {self._step_count} of max_steps={self.max_steps}); call reset() first")
        chosen = self._parse_actions(self._pending if actions is None else actions)
        self._pending = {}
        blocked = self._apply_moves(chosen)
        cleaned = self._apply_clean_beams(chosen)
        collected = self._collect_apples()
        self._spawn_waste()
        regrowth_prob = self.regrowth_probability
        self._regrow_apples(regrowth_prob)
        self._step_count += 1

        rewards = {i: float(collected[i]) for i in range(self.num_agents)}
        for i, reward in rewards.items():
            self._total_rewards[i] += reward
        info = {
            "step": self._step_count,
            "dirt_fraction": self.dirt_fraction,
            "regrowth_prob": regrowth_prob,
            "apples_collected": dict(enumerate(collected)),
            "cells_cleaned": dict(enumerate(cleaned)),
            "apples_on_map": len(self._apples),
            "blocked": dict(enumerate(blocked)),
        }
        return self._all_observations(), rewards, self.done, info

    def _check_agent_id(self, agent_id: object) -> None:
        if isinstance(agent_id, bool) or not isinstance(agent_id, int) or not 0 <= agent_id < self.num_agents:
            raise ValueError(f"agent id {agent_id!r} is invalid; expected an int in range(0, {self.num_agents})")

    def _parse_actions(self, actions: Mapping[int, str]) -> list[str]:
        if not isinstance(actions, Mapping):
            raise ValueError(f"actions must be a dict {{agent_id: action}}, got {type(actions).__name__}")
        chosen = ["STAY"] * self.num_agents
        for agent_id, action in actions.items():
            self._check_agent_id(agent_id)
            chosen[agent_id] = normalize_action(action)
        return chosen

    def _apply_moves(self, chosen: list[str]) -> list[bool]:
        """Update facings and positions (event 1); return which agents had their move blocked."""
        targets = list(self._positions)
        for i, action in enumerate(chosen):
            if action in MOVES:
                self._facing[i] = action
                dx, dy = MOVES[action]
                x, y = self._positions[i]
                if self.in_bounds(x + dx, y + dy):
                    targets[i] = (x + dx, y + dy)
        starts = self._positions
        self._positions = resolve_moves(starts, targets)
        return [chosen[i] in MOVES and self._positions[i] == starts[i] for i in range(self.num_agents)]

    def _apply_clean_beams(self, chosen: list[str]) -> list[int]:
        """Clean dirty cells on each CLEAN beam (event 2); return cells cleaned per agent."""
        cleaned = [0] * self.num_agents
        for i, action in enumerate(chosen):
            if action != "CLEAN":
                continue
            for cell in self.beam_cells(i):
                if cell in self._dirt:
                    self._dirt.remove(cell)
                    cleaned[i] += 1
        return cleaned

    def _collect_apples(self) -> list[int]:
        """Remove apples under agents (event 3); return apples eaten per agent."""
        collected = [0] * self.num_agents
        for i, cell in enumerate(self._positions):
            if cell in self._apples:
                self._apples.remove(cell)
                collected[i] = 1
        return collected

    def _spawn_waste(self) -> None:
        """With probability ``waste_spawn_prob`` dirty one random clean river cell (event 4)."""
        if self._rng.random() < self.waste_spawn_prob:
            clean_cells = [cell for cell in self._river_cells if cell not in self._dirt]
            if clean_cells:
                self._dirt.add(self._rng.choice(clean_cells))

    def _regrow_apples(self, probability: float) -> None:
        """Grow apples on free orchard cells with the given probability each (event 5)."""
        if probability <= 0.0:
            return
        occupied = set(self._positions)
        for cell in self._orchard_cells:
            if cell not in self._apples and cell not in occupied and self._rng.random() < probability:
                self._apples.add(cell)

    # ------------------------------------------------------------- observations

    def get_observation(self, agent_id: int) -> Observation:
        """The current observation of one agent (same format as in ``step``/``reset``)."""
        self._check_agent_id(agent_id)
        return self._observation(agent_id, sorted(self._apples), sorted(self._dirt))

    def _all_observations(self) -> dict[int, Observation]:
        apples, dirt = sorted(self._apples), sorted(self._dirt)
        return {i: self._observation(i, apples, dirt) for i in range(self.num_agents)}

    def _observation(self, agent_id: int, apples: list[Position], dirt: list[Position]) -> Observation:
        return {
            "agent_id": agent_id,
            "position": self._positions[agent_id],
            "facing": self._facing[agent_id],
            "step": self._step_count,
            "max_steps": self.max_steps,
            "width": self.width,
            "height": self.height,
            "agents": dict(enumerate(self._positions)),
            "apples": list(apples),
            "dirt": list(dirt),
            "river_columns": (0, self.river_width - 1),
            "orchard_columns": (self.width - self.orchard_width, self.width - 1),
            "dirt_fraction": self.dirt_fraction,
            "regrowth_prob": self.regrowth_probability,
            "total_reward": self._total_rewards[agent_id],
        }

    def render(self) -> str:
        """The grid as text (legend in the module docstring) plus a status line."""
        rows = [[self._terrain_char((x, y)) for x in range(self.width)] for y in range(self.height)]
        for i, (x, y) in enumerate(self._positions):
            rows[y][x] = str(i)
        scores = " ".join(f"{i}:{reward:g}" for i, reward in enumerate(self._total_rewards))
        status = (
            f"step {self._step_count}/{self.max_steps} | dirt {self.dirt_fraction:.2f} | "
            f"regrowth {self.regrowth_probability:.3f} | scores {scores}"
        )
        return "\n".join(["".join(row) for row in rows] + [status])

    def _terrain_char(self, cell: Position) -> str:
        if self.is_river(*cell):
            return "#" if cell in self._dirt else "~"
        if self.is_orchard(*cell):
            return "@" if cell in self._apples else ","
        return "."

    # ---------------------------------------------------------- save / restore

    def get_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of everything that determines the future."""
        version, internal, gauss_next = self._rng.getstate()
        return {
            "config": self.config,
            "step": self._step_count,
            "positions": [list(cell) for cell in self._positions],
            "facing": list(self._facing),
            "dirt": [list(cell) for cell in sorted(self._dirt)],
            "apples": [list(cell) for cell in sorted(self._apples)],
            "total_rewards": list(self._total_rewards),
            "rng_state": [version, list(internal), gauss_next],
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a ``get_state()`` snapshot (also after a JSON round trip); the config must match."""
        if state.get("config") != self.config:
            raise ValueError(f"state config {state.get('config')!r} does not match this env's config {self.config!r}")
        try:
            step = int(state["step"])
            positions = [(int(x), int(y)) for x, y in state["positions"]]
            facing = [str(direction) for direction in state["facing"]]
            dirt = {(int(x), int(y)) for x, y in state["dirt"]}
            apples = {(int(x), int(y)) for x, y in state["apples"]}
            total_rewards = [float(reward) for reward in state["total_rewards"]]
            version, internal, gauss_next = state["rng_state"]
            rng = random.Random()
            rng.setstate((version, tuple(internal), gauss_next))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"malformed state: {error!r}") from error
        self._check_restored(step, positions, facing, dirt, apples, total_rewards)
        self._step_count = step
        self._positions = positions
        self._facing = facing
        self._dirt = dirt
        self._apples = apples
        self._total_rewards = total_rewards
        self._rng = rng

    def _check_restored(
        self,
        step: int,
        positions: list[Position],
        facing: list[str],
        dirt: set[Position],
        apples: set[Position],
        total_rewards: list[float],
    ) -> None:
        problems = []
        if not 0 <= step <= self.max_steps:
            problems.append(f"step={step} not in 0..{self.max_steps}")
        if len(positions) != self.num_agents or len(set(positions)) != len(positions):
            problems.append(f"positions must be {self.num_agents} distinct cells")
        if not all(self.in_bounds(*cell) for cell in positions):
            problems.append("positions must be on the grid")
        if len(facing) != self.num_agents or not all(direction in MOVES for direction in facing):
            problems.append(f"facing must be {self.num_agents} of {', '.join(MOVES)}")
        if not all(self.is_river(*cell) for cell in dirt):
            problems.append("dirt must lie in the river")
        if not all(self.is_orchard(*cell) for cell in apples):
            problems.append("apples must lie in the orchard")
        if len(total_rewards) != self.num_agents:
            problems.append(f"total_rewards must have {self.num_agents} entries")
        if problems:
            raise ValueError(f"invalid state: {'; '.join(problems)}")

    def clone(self) -> CleanupEnv:
        """An independent deep copy (including the RNG), so both envs have the same future."""
        twin = copy.copy(self)
        twin._rng = random.Random()
        twin._rng.setstate(self._rng.getstate())
        twin._positions = list(self._positions)
        twin._facing = list(self._facing)
        twin._dirt = set(self._dirt)
        twin._apples = set(self._apples)
        twin._total_rewards = list(self._total_rewards)
        twin._pending = dict(self._pending)
        return twin
