"""Helpers for LLM agents playing the Crossing game (env_move.Crossing).

Coordinates are (x, y): x is the column (0 = left), y the row: y = 1 is the corridor, y = 0 the wall above it,
open only at the passing bay (above the middle cell). Agent 0 walks from the right end to (0, 1), agent 1 from
the left end to the right end; they cannot pass each other in the corridor.

`observation_to_text(env, agent_id)` describes what one agent sees, with coordinates. Every other public
function is an action helper `NAME(env, agent_id, **args) -> bool`, called from the JSON form
{"action": NAME, "agent_id": I, "args": {...}}. A helper chooses the agent's ONE move for this turn (STAY, LEFT,
UP, RIGHT or DOWN) with `env.choose` (both agents then move at once with `env.step()`) and returns whether its
task is completed by this turn's move. Bad arguments raise ValueError.
Helpers never call one another; shared geometry lives in the private functions at the bottom.

Game facts the helpers rely on: each turn before arriving costs -1, arriving pays +10, and once both agents have
arrived each gets +5 more. Moves are simultaneous; when both aim at the same cell, one of them (at random) gets
it. A move into a wall, or into the other agent's cell, leaves the agent where it is.
"""

from __future__ import annotations

from env_move import MOVES, Crossing

Position = tuple[int, int]
STEPS = {"STAY": (0, 0), "LEFT": (-1, 0), "UP": (0, -1), "RIGHT": (1, 0), "DOWN": (0, 1)}


def observation_to_text(env: Crossing, agent_id: int) -> str:
    """Agent `agent_id`'s cell and goal, the other agent's, the bay, the turn, its return so far, the board."""
    here, goal = env.positions()[agent_id], env.goal(agent_id)
    other = 1 - agent_id
    there, their_goal = env.positions()[other], env.goal(other)
    lines = [
        f"You are agent {agent_id} at ({here[0]}, {here[1]}); your goal is ({goal[0]}, {goal[1]})"
        + (" and you have arrived." if here == goal else f", {_distance(here, goal)} moves away."),
        f"Agent {other} is at ({there[0]}, {there[1]}), heading for ({their_goal[0]}, {their_goal[1]})"
        + (" (arrived)." if there == their_goal else "."),
        f"The corridor is y = 1 from x = 0 to x = {env.length - 1}; it is one cell wide, so you cannot pass each "
        f"other in it. The only passing bay is ({env.bay[0]}, {env.bay[1]}), above ({env.bay[0]}, 1).",
        f"Turn {env.turn + 1} of {env.max_turns}. Your return so far: {env.returns[agent_id]:.0f} "
        f"(-1 per turn until you arrive, +10 on arrival, +5 each once both have arrived).",
        "Board (* wall, . free, digits = agents):",
        env.render(),
    ]
    return "\n".join(lines)


def move(env: Crossing, agent_id: int, direction: str) -> bool:
    """One step LEFT, RIGHT, UP or DOWN (or STAY); True when the cell it aims at is free now."""
    step = str(direction).strip().upper()
    if step not in MOVES:
        raise ValueError(f"direction must be one of {', '.join(MOVES)}, got {direction!r}")
    here = env.positions()[agent_id]
    target = _neighbour(here, step)
    env.choose(agent_id, step)
    return _free(env, target, agent_id)


def advance(env: Crossing, agent_id: int) -> bool:
    """One step towards the agent's goal (down out of the bay first); True when this step arrives."""
    here, goal = env.positions()[agent_id], env.goal(agent_id)
    if here == goal:
        env.choose(agent_id, "STAY")
        return True
    step = "DOWN" if here[1] == 0 else ("LEFT" if goal[0] < here[0] else "RIGHT")
    env.choose(agent_id, step)
    return _neighbour(here, step) == goal and _free(env, goal, agent_id)


def yield_in_bay(env: Crossing, agent_id: int) -> bool:
    """Make way: one step towards the bay, up into it from the cell below, or wait in it; True once in the bay
    (waiting there this turn)."""
    here, bay = env.positions()[agent_id], env.bay
    if here == bay:
        env.choose(agent_id, "STAY")
        return True
    if here[0] == bay[0]:
        env.choose(agent_id, "UP")
        return False
    env.choose(agent_id, "LEFT" if bay[0] < here[0] else "RIGHT")
    return False


def wait(env: Crossing, agent_id: int) -> bool:
    """Stay where you are this turn (always completed)."""
    env.choose(agent_id, "STAY")
    return True


def _distance(a: Position, b: Position) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _neighbour(here: Position, step: str) -> Position:
    dx, dy = STEPS[step]
    return here[0] + dx, here[1] + dy


def _free(env: Crossing, cell: Position, agent_id: int) -> bool:
    """A corridor or bay cell the other agent does not hold."""
    open_cell = (cell[1] == 1 and 0 <= cell[0] < env.length) or cell == env.bay
    return open_cell and cell != env.positions()[1 - agent_id]
