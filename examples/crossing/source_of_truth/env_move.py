"""Crossing: two agents must pass each other in a one-lane corridor that has a single passing bay.

The board is OpenSpiel's C++ `pathfinding` game (`pip install open_spiel`): the whole state is a `pyspiel.State`
(positions, turn, returns), moved with `apply_actions`; when both agents aim at the same cell, a chance node
lets one of them in (drawn from the environment's seeded generator). On top of it, Gymnasium's API:
`CrossingEnv` is a `gymnasium.Env`, made with `gymnasium.make` from its `EnvSpec`, so the game the training
plays is the usual wrapper chain (time limit, order enforcing, the passive checker) around a C++ state.

The board (corridor_length 9): row 0 is wall but for the bay at the middle column, row 1 the corridor.

    ####.####      x is the column (0 = left), y the row (0 = the bay's row, 1 = the corridor)
    .1.....0.      agent 0 starts at (7, 1) and must reach (0, 1); agent 1 starts at (1, 1), goal (8, 1)

Each turn every agent that has not arrived pays -1; arriving pays +10, and once both have arrived each is paid
+5. In the corridor they cannot pass: one must step UP into the bay and wait while the other goes by, losing
two turns. Whoever yields arrives later; if neither does, nobody arrives before the time runs out
(`max_turns` turns: -16 each). A game of chicken: the best answer to a stubborn agent is to yield, the best
answer to a yielding one is to go on.

`Crossing(corridor_length=9, max_turns=16, seed=None)`: `reset(seed)` starts a new episode (None: a seed from
the OS); `choose(agent_id, move)` records an agent's move (one of MOVES; choosing again replaces it);
`step()` plays both agents' moves at once (STAY for an agent that chose nothing) and returns
`(rewards, done)`. `positions()`, `goal(agent_id)`, `bay`, `arrived(agent_id)` and `render()` show the board.
Bad input (an unknown agent, a move not in MOVES, a step after the end) is a one-line ValueError.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pyspiel
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

MOVES = ("STAY", "LEFT", "UP", "RIGHT", "DOWN")  # OpenSpiel pathfinding's actions, in its order
STEP_REWARD, ARRIVAL_REWARD, BOTH_ARRIVED_REWARD = -1.0, 10.0, 5.0
NUM_AGENTS = 2
SPEC_ID = "Crossing-v0"


def corridor(length: int) -> str:
    """The pathfinding grid: lower case a start, upper case its goal (agent 0 is a, agent 1 is b)."""
    bay = length // 2
    walls = "".join("." if x == bay else "*" for x in range(length))
    lane = "Ab" + "." * (length - 4) + "aB"
    return f"{walls}\n{lane}\n"


class CrossingEnv(gymnasium.Env):
    """The corridor as a Gymnasium environment: one joint action (a move index per agent) per step; the
    observation is the agents' (x, y) cells; the reward is the team's, each agent's own is info["rewards"]."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, corridor_length: int = 9, max_turns: int = 16, render_mode: str | None = None) -> None:
        if not 5 <= corridor_length <= 15:
            raise ValueError(f"corridor_length must be 5-15, got {corridor_length!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns!r}")
        self.length, self.max_turns, self.render_mode = corridor_length, max_turns, render_mode
        self.game = pyspiel.load_game("pathfinding", {
            "grid": corridor(corridor_length), "players": NUM_AGENTS, "horizon": max_turns,
            "step_reward": STEP_REWARD, "solve_reward": ARRIVAL_REWARD, "group_reward": BOTH_ARRIVED_REWARD})
        self.state = self.game.new_initial_state()
        self.action_space = spaces.MultiDiscrete([len(MOVES)] * NUM_AGENTS)
        self.observation_space = spaces.Box(0, corridor_length - 1, shape=(NUM_AGENTS, 2), dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = self.game.new_initial_state()
        return self._observation(), {"turn": 0}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.state.is_terminal():
            raise ValueError("the episode is over: reset() first")
        self.state.apply_actions([int(a) for a in action])
        while self.state.is_chance_node():  # two agents aimed at one cell: one of them gets it
            outcomes, chances = zip(*self.state.chance_outcomes())
            self.state.apply_action(int(self.np_random.choice(outcomes, p=chances)))
        rewards = [float(r) for r in self.state.rewards()]
        return self._observation(), float(sum(rewards)), self.state.is_terminal(), False, \
            {"rewards": rewards, "turn": self.state.move_number()}

    def render(self) -> str:
        return str(self.state).rstrip("\n")

    def positions(self) -> list[tuple[int, int]]:
        """Each agent's (x, y), read from the C++ state's board."""
        found: dict[int, tuple[int, int]] = {}
        for y, row in enumerate(str(self.state).splitlines()[:2]):
            for x, cell in enumerate(row):
                if cell.isdigit():
                    found[int(cell)] = (x, y)
        return [found.get(i, self.goal(i)) for i in range(NUM_AGENTS)]

    def goal(self, agent_id: int) -> tuple[int, int]:
        return (0, 1) if agent_id == 0 else (self.length - 1, 1)

    def _observation(self) -> np.ndarray:
        return np.array(self.positions(), dtype=np.int64)


class Crossing:
    """The game the training plays: `choose` each agent's move, then `step()` plays both."""

    num_agents = NUM_AGENTS

    def __init__(self, corridor_length: int = 9, max_turns: int = 16, seed: int | None = None) -> None:
        self.env = gymnasium.make(EnvSpec(SPEC_ID, entry_point=CrossingEnv, max_episode_steps=max_turns,
                                          kwargs={"corridor_length": corridor_length, "max_turns": max_turns}))
        self.max_turns = max_turns
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        self.env.reset(seed=seed)
        self.chosen: dict[int, str] = {}
        self.turn, self.done, self.returns = 0, False, [0.0] * NUM_AGENTS

    def choose(self, agent_id: int, move: str) -> None:
        if agent_id not in range(NUM_AGENTS):
            raise ValueError(f"agent_id must be 0 or 1, got {agent_id!r}")
        if move not in MOVES:
            raise ValueError(f"move must be one of {', '.join(MOVES)}, got {move!r}")
        if self.done:
            raise ValueError("the episode is over: reset() first")
        self.chosen[agent_id] = move

    @property
    def pending(self) -> dict[int, str]:
        return dict(self.chosen)

    def step(self) -> tuple[list[float], bool]:
        if self.done:
            raise ValueError("the episode is over: reset() first")
        joint = [MOVES.index(self.chosen.get(agent, "STAY")) for agent in range(NUM_AGENTS)]
        _, _, terminated, truncated, info = self.env.step(joint)
        self.chosen, self.turn = {}, self.turn + 1
        self.done = bool(terminated or truncated)
        self.returns = [total + reward for total, reward in zip(self.returns, info["rewards"])]
        return list(info["rewards"]), self.done

    def positions(self) -> list[tuple[int, int]]:
        return self.env.unwrapped.positions()

    def goal(self, agent_id: int) -> tuple[int, int]:
        return self.env.unwrapped.goal(agent_id)

    @property
    def bay(self) -> tuple[int, int]:
        return self.env.unwrapped.length // 2, 0

    @property
    def length(self) -> int:
        return self.env.unwrapped.length

    def arrived(self, agent_id: int) -> bool:
        return self.positions()[agent_id] == self.goal(agent_id)

    def render(self) -> str:
        return self.env.unwrapped.render() + ("\n(done)" if self.done else "")
