"""Helpers for LLM agents playing the Cleanup game (env_move.CleanupEnv).

Coordinates are (x, y): x is the column (0 = left), y the row (0 = top); UP lowers y.

`observation_to_text(env, agent_id)` describes what one agent sees, with coordinates. Every other
public function is an action helper `NAME(env, agent_id, **args) -> bool`, called from the JSON form
{"action": NAME, "agent_id": I, "args": {...}}. A helper chooses the agent's ONE low-level action
(UP, DOWN, LEFT, RIGHT, STAY or CLEAN) for this turn with `env.set_action` (all agents then move at
once with `env.step()`) and returns whether its task is completed by this turn's action: the target
reached, the apple eaten, the beam fired on dirt. Bad arguments raise ValueError.
Helpers never call one another; shared geometry lives in the private functions at the bottom.

Game facts the helpers rely on: an agent eats an apple by stepping onto it (+1). Apples grow only in
the orchard, and stop growing once 40 % of the river is dirty: the regrowth chance falls linearly from
0.2 at a clean river to 0 at that threshold. Dirt appears in the river over time; the cleaning beam
removes it on the agent's own cell and the `env.clean_beam_length` cells it faces. Moves are
simultaneous: two agents aiming for the same cell both stay.
"""

from __future__ import annotations

from env_move import MOVES, CleanupEnv

Position = tuple[int, int]


def observation_to_text(env: CleanupEnv, agent_id: int) -> str:
    """Agent `agent_id`'s position and facing, the turn, the river and orchard columns, the other agents,
    apples and dirty river cells (nearest first), the apple regrowth chance, its reward so far, the map."""
    obs = env.get_observation(agent_id)
    x, y = obs["position"]
    lo_river, hi_river = obs["river_columns"]
    lo_orchard, hi_orchard = obs["orchard_columns"]
    others = [f"agent {i} at {tuple(p)}" for i, p in sorted(obs["agents"].items()) if int(i) != agent_id]
    apples = [tuple(p) for p in obs["apples"]]
    dirt = [tuple(p) for p in obs["dirt"]]
    lines = [
        f"You are agent {agent_id} at ({x}, {y}), facing {obs['facing']}. Turn {obs['step'] + 1} of {obs['max_steps']}.",
        f"Grid {obs['width']} x {obs['height']}: x is the column (0 = left), y is the row (0 = top); UP lowers y.",
        f"River: columns {lo_river}-{hi_river}. Orchard: columns {lo_orchard}-{hi_orchard}.",
        "Other agents: " + (", ".join(others) if others else "none") + ".",
        f"Apples ({len(apples)}): " + _list_positions(apples, (x, y)),
        f"Dirty river cells ({len(dirt)}, {obs['dirt_fraction']:.0%} of the river): " + _list_positions(dirt, (x, y)),
        f"Apple regrowth chance per empty orchard cell this turn: {obs['regrowth_prob']:.3f} (zero once dirt reaches 40%).",
        f"Your reward so far: {obs['total_reward']:.1f}.",
        "Map (~ clean river, # dirt, . ground, , empty orchard, @ apple, digits = agents):",
        "\n".join(env.render().splitlines()[: obs["height"]]),
    ]
    return "\n".join(lines)


def move(env: CleanupEnv, agent_id: int, direction: str) -> bool:
    """One step UP, DOWN, LEFT or RIGHT (also turns the agent that way); True when the cell is free now."""
    step = str(direction).strip().upper()
    if step not in MOVES:
        raise ValueError(f"direction must be one of {sorted(MOVES)}, got {direction!r}")
    obs = env.get_observation(agent_id)
    target = _neighbour(tuple(obs["position"]), step)
    env.set_action(agent_id, step)
    return _on_grid(obs, target) and target not in _occupied(obs, agent_id)


def move_to(env: CleanupEnv, agent_id: int, coord_x: int, coord_y: int) -> bool:
    """One step along a shortest path towards (coord_x, coord_y); True once this step reaches it."""
    obs = env.get_observation(agent_id)
    here, target = tuple(obs["position"]), (int(coord_x), int(coord_y))
    if not _on_grid(obs, target):
        raise ValueError(f"target {target} is outside the {obs['width']} x {obs['height']} grid")
    step = _step_towards(here, target, _occupied(obs, agent_id))
    env.set_action(agent_id, step)
    return _arrives(here, step, target)


def collect_nearest_apple(env: CleanupEnv, agent_id: int) -> bool:
    """One step towards the nearest apple (ties: smallest y, then x); True when this step eats it.
    With no apple on the map the agent stays and the task cannot complete (False)."""
    obs = env.get_observation(agent_id)
    here = tuple(obs["position"])
    apples = [tuple(p) for p in obs["apples"]]
    if not apples:
        env.set_action(agent_id, "STAY")
        return False
    target = _nearest(here, apples)
    step = _step_towards(here, target, _occupied(obs, agent_id))
    env.set_action(agent_id, step)
    return _arrives(here, step, target)


def clean_nearest_dirt(env: CleanupEnv, agent_id: int) -> bool:
    """CLEAN when dirt lies under or ahead of the agent (True), else one step to line up with the
    nearest dirt (False); STAY and False when the river is clean."""
    obs = env.get_observation(agent_id)
    here = tuple(obs["position"])
    dirt = [tuple(p) for p in obs["dirt"]]
    if not dirt:
        env.set_action(agent_id, "STAY")
        return False
    if _dirt_in_beam(here, obs["facing"], env.clean_beam_length, dirt):
        env.set_action(agent_id, "CLEAN")
        return True
    env.set_action(agent_id, _step_towards(here, _nearest(here, dirt), _occupied(obs, agent_id)))
    return False


def clean(env: CleanupEnv, agent_id: int) -> bool:
    """Fire the cleaning beam in the direction the agent faces; True when it hits dirt."""
    obs = env.get_observation(agent_id)
    env.set_action(agent_id, "CLEAN")
    return _dirt_in_beam(tuple(obs["position"]), obs["facing"], env.clean_beam_length,
                         [tuple(p) for p in obs["dirt"]])


def stay(env: CleanupEnv, agent_id: int) -> bool:
    """Do nothing this turn (always completed)."""
    env.set_action(agent_id, "STAY")
    return True


def _list_positions(cells: list[Position], here: Position, limit: int = 12) -> str:
    if not cells:
        return "none."
    ordered = sorted(cells, key=lambda c: (_distance(here, c), c[1], c[0]))
    shown = ", ".join(f"({cx}, {cy})" for cx, cy in ordered[:limit])
    more = f" and {len(cells) - limit} more" if len(cells) > limit else ""
    return f"{shown}{more} (nearest first)."


def _distance(a: Position, b: Position) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _nearest(here: Position, cells: list[Position]) -> Position:
    return min(cells, key=lambda c: (_distance(here, c), c[1], c[0]))


def _occupied(obs: dict, agent_id: int) -> set[Position]:
    return {tuple(p) for i, p in obs["agents"].items() if int(i) != agent_id}


def _on_grid(obs: dict, cell: Position) -> bool:
    return 0 <= cell[0] < obs["width"] and 0 <= cell[1] < obs["height"]


def _neighbour(here: Position, step: str) -> Position:
    dx, dy = MOVES.get(step, (0, 0))
    return here[0] + dx, here[1] + dy


def _arrives(here: Position, step: str, target: Position) -> bool:
    return _neighbour(here, step) == target


def _dirt_in_beam(here: Position, facing: str, length: int, dirt: list[Position]) -> bool:
    beam = [here] + [(here[0] + MOVES[facing][0] * k, here[1] + MOVES[facing][1] * k) for k in range(1, length + 1)]
    return any(cell in dirt for cell in beam)


def _step_towards(here: Position, target: Position, occupied: set[Position]) -> str:
    """The move that shortens the distance, preferring the longer axis and free cells."""
    if here == target:
        return "STAY"
    dx, dy = target[0] - here[0], target[1] - here[1]
    horizontal = ("RIGHT" if dx > 0 else "LEFT") if dx else None
    vertical = ("DOWN" if dy > 0 else "UP") if dy else None
    options = [m for m in ((horizontal, vertical) if abs(dx) >= abs(dy) else (vertical, horizontal)) if m]
    for name in options:
        if _neighbour(here, name) not in occupied:
            return name
    return options[0]
