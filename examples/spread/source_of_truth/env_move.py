"""Spread: cooperative navigation in a continuous 2-D world, for 2-4 agents.

A thin wrapper over PettingZoo's Multi-Particle Environment ``simple_spread`` (package ``mpe2``,
Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments"), as
most multi-agent researchers write one: the library's parallel API underneath, numpy
observations, real-valued positions, a ``reset(seed)`` that draws a new seed from the OS when
given none, a per-agent ``submit`` and one ``step()`` that plays every submitted action at once.

The world
---------
``num_agents`` agents and as many landmarks are placed uniformly at random in the square
``[-1, 1] x [-1, 1]`` at every reset. Positions are ``(x, y)`` floats: ``x`` grows to the right,
``y`` grows upwards. An agent is a disc of radius 0.15 with momentum: an action applies a force for
one physics step (dt 0.1, damping 0.25), so an agent keeps drifting after it stops pushing.

The dilemma
-----------
Every landmark should be covered by some agent: the team's reward each turn is minus the sum, over
landmarks, of the distance from the landmark to its closest agent. Each agent also pays -1 for every
other agent it overlaps. An agent is paid ``local_ratio`` x its own collision penalty plus
``(1 - local_ratio)`` x the team reward. Each agent's nearest landmark is often another agent's nearest
too: all rushing to it collides and leaves the others uncovered, while someone has to take the far one.
Who goes where must be agreed without words, turn after turn.

Actions
-------
MPE's discrete actions, as ints: ``NO_OP`` (0), ``LEFT`` (1, -x), ``RIGHT`` (2, +x), ``DOWN`` (3,
-y), ``UP`` (4, +y); ``ACTION_NAMES[a]`` names action ``a``. ``submit(agent_id, action)`` records an
agent's action for the current turn (submitting again replaces it); ``step()`` plays all of them,
agents that submitted nothing play ``NO_OP``, and clears the submissions.

API
---
``SpreadGame(num_agents=3, max_cycles=25, local_ratio=0.5)``; call ``reset(seed)`` before playing.

* ``reset(seed=None) -> dict[int, np.ndarray]``: a new episode; the same seed replays the same
  start; ``None`` draws a seed from the OS.
* ``submit(agent_id, action)``; ``pending_actions`` (``{agent_id: action}`` submitted this turn).
* ``step() -> (observations, rewards, done, info)``: ``observations`` and ``rewards`` keyed by agent
  id, ``done`` once ``max_cycles`` turns were played, ``info`` with the turn and the team reward.
* ``position(agent_id)``, ``velocity(agent_id)``: ``np.ndarray`` of shape (2,);
  ``landmarks()``: the landmark positions, in a fixed order; ``observation(agent_id)``: MPE's
  observation vector (own velocity, own position, landmarks and other agents relative to it).
* ``turn``, ``done``, ``num_agents``, ``render() -> str``.

Bad input (an unknown agent, an action outside 0-4, playing before ``reset``) raises ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpe2 import simple_spread_v3

NO_OP, LEFT, RIGHT, DOWN, UP = range(5)
ACTION_NAMES = ("no_op", "left", "right", "down", "up")
AGENT_RADIUS = 0.15  # MPE's agent size in simple_spread
WORLD_LIMIT = 1.0  # starts are drawn in [-WORLD_LIMIT, WORLD_LIMIT]^2 (agents may drift past it)


class SpreadGame:
    """The simple_spread world behind integer agent ids and one step for all agents."""

    def __init__(self, num_agents: int = 3, max_cycles: int = 25, local_ratio: float = 0.5) -> None:
        if not isinstance(num_agents, int) or not 2 <= num_agents <= 4:
            raise ValueError(f"num_agents must be an int in 2..4, got {num_agents!r}")
        if not isinstance(max_cycles, int) or max_cycles < 1:
            raise ValueError(f"max_cycles must be an int >= 1, got {max_cycles!r}")
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError(f"local_ratio must be in [0, 1], got {local_ratio!r}")
        self.num_agents = num_agents
        self.max_cycles = max_cycles
        self.local_ratio = local_ratio
        self._env = simple_spread_v3.parallel_env(N=num_agents, local_ratio=local_ratio, max_cycles=max_cycles,
                                                  continuous_actions=False, dynamic_rescaling=False)
        self._names = list(self._env.possible_agents)  # agent id i is the library's self._names[i]
        self._pending: dict[int, int] = {}
        self._observations: dict[int, np.ndarray] = {}
        self.turn = 0
        self.done = True  # until reset

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int | None = None) -> dict[int, np.ndarray]:
        observations, _ = self._env.reset(seed=seed)
        self._observations = {i: np.asarray(observations[name]) for i, name in enumerate(self._names)}
        self._pending = {}
        self.turn = 0
        self.done = False
        return dict(self._observations)

    def submit(self, agent_id: int, action: int) -> None:
        self._check_agent(agent_id)
        if isinstance(action, bool) or not isinstance(action, (int, np.integer)) or not 0 <= action < len(ACTION_NAMES):
            raise ValueError(f"action must be an int in 0..{len(ACTION_NAMES) - 1} ({', '.join(ACTION_NAMES)}), "
                             f"got {action!r}")
        if self.done:
            raise ValueError("the episode is over (or not started): call reset(seed) first")
        self._pending[agent_id] = int(action)

    @property
    def pending_actions(self) -> dict[int, int]:
        return dict(self._pending)

    def step(self) -> tuple[dict[int, np.ndarray], dict[int, float], bool, dict[str, Any]]:
        if self.done:
            raise ValueError("the episode is over (or not started): call reset(seed) first")
        actions = {name: self._pending.get(i, NO_OP) for i, name in enumerate(self._names)}
        observations, rewards, terminations, truncations, _ = self._env.step(actions)
        self._observations = {i: np.asarray(observations[name]) for i, name in enumerate(self._names)}
        self._pending = {}
        self.turn += 1
        self.done = self.turn >= self.max_cycles or any(terminations.values()) or any(truncations.values())
        info = {"turn": self.turn, "team_reward": round(self._team_reward(), 4)}
        return dict(self._observations), {i: float(rewards[name]) for i, name in enumerate(self._names)}, \
            self.done, info

    # ------------------------------------------------------------------ what the agents see
    def position(self, agent_id: int) -> np.ndarray:
        self._check_agent(agent_id)
        return self._world().agents[agent_id].state.p_pos.copy()

    def velocity(self, agent_id: int) -> np.ndarray:
        self._check_agent(agent_id)
        return self._world().agents[agent_id].state.p_vel.copy()

    def landmarks(self) -> list[np.ndarray]:
        return [landmark.state.p_pos.copy() for landmark in self._world().landmarks]

    def observation(self, agent_id: int) -> np.ndarray:
        self._check_agent(agent_id)
        if not self._observations:
            raise ValueError("no observation before reset(seed)")
        return self._observations[agent_id].copy()

    def render(self) -> str:
        lines = [f"turn {self.turn}/{self.max_cycles}" + (" (done)" if self.done else "")]
        if self._observations:
            lines += [f"agent {i} at {_fmt(self.position(i))} moving {_fmt(self.velocity(i))}"
                      for i in range(self.num_agents)]
            lines += [f"landmark {k} at {_fmt(p)}" for k, p in enumerate(self.landmarks())]
        return "\n".join(lines)

    # ------------------------------------------------------------------ internals
    def _world(self) -> Any:
        return self._env.unwrapped.world

    def _team_reward(self) -> float:
        return float(self._env.unwrapped.scenario.global_reward(self._world()))

    def _check_agent(self, agent_id: object) -> None:
        if isinstance(agent_id, bool) or not isinstance(agent_id, (int, np.integer)) \
                or not 0 <= agent_id < self.num_agents:
            raise ValueError(f"agent_id must be an int in 0..{self.num_agents - 1}, got {agent_id!r}")


def _fmt(point: np.ndarray) -> str:
    return f"({point[0]:+.2f}, {point[1]:+.2f})"
