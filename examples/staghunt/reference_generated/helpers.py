"""High-level actions for LLM hunters in the Stag Hunt game (env_move.StagHuntGame).

Positions are (row, col): row 0 is the top row, col 0 the left column; N lowers the row, S raises it,
E raises the col, W lowers it. "Next to" means one of the four orthogonal neighbours.

`observation_to_text(env, agent_id)` describes what one hunter sees, with (row, col) coordinates.
Every other public function is an action helper, called from the JSON form
{"action": NAME, "agent_id": I, "args": {...}} as NAME(env, agent_id, **args). A helper works out
ONE low-level move for this turn (N, S, E, W, WAIT or HUNT), queues it with env.declare(agent_id,
move), and returns a bool: whether its task is completed (each docstring says exactly when). A
helper raises ValueError for arguments it cannot use, before it queues anything.

Helpers never call one another; the shared geometry lives in the private functions at the bottom.

Game facts the helpers rely on: all hunters' moves are resolved together when the turn advances. A
stag is caught only when at least two hunters next to it HUNT in the same turn (+5 each); a hunter
attacking it alone gets -0.5 and the stag runs away. A hare is caught by any hunter next to it that
HUNTs (+1, split between its attackers). Nobody can step onto an animal.
"""

from __future__ import annotations

from collections import deque

from env_move import DELTAS, StagHuntGame

Cell = tuple[int, int]


def observation_to_text(env: StagHuntGame, agent_id: int) -> str:
    """What hunter `agent_id` sees this turn, in words, with every position as (row, col)."""
    obs = env.observe(agent_id)
    here = tuple(obs["position"])
    size = obs["grid_size"]
    stags = [tuple(p) for p in obs["stags"]]
    hares = [tuple(p) for p in obs["hares"]]
    lines = [
        f"You are hunter {agent_id} at {_fmt(here)}. Turn {obs['turn'] + 1} of {obs['horizon']} "
        f"({obs['turns_left']} left, counting this one).",
        f"The grid is {size}x{size}: positions are (row, col), row 0 is the top, col 0 is the left; "
        "N lowers the row, S raises it, E raises the col, W lowers it.",
    ]
    others = [(h, tuple(p)) for h, p in enumerate(obs["hunters"]) if h != agent_id]
    if others:
        lines.append("Other hunters: " + "; ".join(
            f"hunter {h} at {_fmt(p)} ({_distance(here, p)} steps from you"
            + (", next to a stag" if _next_to_any(p, stags) else "") + ")" for h, p in others) + ".")
    lines.append(_describe_animals("stag", stags, here))
    lines.append(_describe_animals("hare", hares, here))
    adjacent_stags = [s for s in stags if _distance(here, s) == 1]
    adjacent_hares = [s for s in hares if _distance(here, s) == 1]
    if adjacent_stags:
        partners = [h for h, p in others if any(_distance(p, s) == 1 for s in adjacent_stags)]
        lines.append(f"You are next to the stag at {_fmt(adjacent_stags[0])}: a HUNT now attacks it. "
                     + (f"Hunter(s) {', '.join(map(str, partners))} are next to it too: if they hunt this turn "
                        "as well, the stag is caught." if partners
                        else "No other hunter is next to it: hunting it alone fails and scares it away."))
    elif adjacent_hares:
        lines.append(f"You are next to the hare at {_fmt(adjacent_hares[0])}: a HUNT now catches it.")
    scores = ", ".join(f"hunter {h}: {s:+g}" for h, s in enumerate(obs["scores"]))
    lines.append(f"Scores so far: {scores}.")
    if obs["last_events"]:
        lines.append("Last turn: " + "; ".join(obs["last_events"]) + ".")
    lines.append("Map (digits = hunters, S = stag, h = hare, . = empty, * = several hunters):")
    lines.append("\n".join(env.render().splitlines()[:-1]))
    return "\n".join(lines)


def move(env: StagHuntGame, agent_id: int, direction: str) -> bool:
    """Step one cell N, S, E or W.

    True when the step can happen: it stays inside the grid and does not run into an animal.
    False when it cannot (the move is still queued; the hunter will stay in place)."""
    step = str(direction).strip().upper()
    if step not in DELTAS:
        raise ValueError(f"direction must be one of N, S, E, W; got {direction!r}")
    obs = env.observe(agent_id)
    dr, dc = DELTAS[step]
    here = tuple(obs["position"])
    target = (here[0] + dr, here[1] + dc)
    env.declare(agent_id, step)
    return _inside(target, obs["grid_size"]) and target not in _animal_cells(obs)


def move_to(env: StagHuntGame, agent_id: int, row: int, col: int) -> bool:
    """Take one step along a shortest path (around animals) towards the cell (row, col).

    True when the hunter is on (row, col) after this turn's move (already there: it WAITs).
    False while it is still on the way, or when no path exists (it then WAITs)."""
    obs = env.observe(agent_id)
    target = (_as_int("row", row), _as_int("col", col))
    size = obs["grid_size"]
    if not _inside(target, size):
        raise ValueError(f"({target[0]},{target[1]}) is outside the {size}x{size} grid")
    if target in _animal_cells(obs):
        raise ValueError(f"({target[0]},{target[1]}) holds an animal; hunters cannot stand there, "
                         "stand next to it and HUNT")
    step, distance = _first_step(obs, {target})
    env.declare(agent_id, step)
    return distance is not None and distance <= 1


def chase_nearest_hare(env: StagHuntGame, agent_id: int) -> bool:
    """Hunt the nearest hare: HUNT when one is adjacent, else step towards the nearest free cell next
    to a hare. Cells next to a stag are avoided, because there a HUNT attacks the stag instead.

    True when a HUNT on an adjacent hare is queued: the hare is caught this turn (shared if other
    hunters attack it too). False while approaching, or when no hare can be reached (it WAITs)."""
    obs = env.observe(agent_id)
    here = tuple(obs["position"])
    stags = [tuple(p) for p in obs["stags"]]
    hares = [tuple(p) for p in obs["hares"]]
    if _next_to_any(here, hares) and not _next_to_any(here, stags):
        env.declare(agent_id, "HUNT")
        return True
    size = obs["grid_size"]
    goals = {cell for hare in hares for cell in _neighbours(hare, size) if not _next_to_any(cell, stags)}
    step, _ = _first_step(obs, goals - _animal_cells(obs))
    env.declare(agent_id, step)
    return False


def approach_stag(env: StagHuntGame, agent_id: int) -> bool:
    """Step towards the nearest free cell next to the nearest stag (it does not attack).

    True when the hunter stands next to a stag after this turn's move, if the stag does not wander
    (already next to it: it WAITs there). False while still on the way, or with no stag reachable."""
    obs = env.observe(agent_id)
    size = obs["grid_size"]
    goals = {cell for stag in obs["stags"] for cell in _neighbours(tuple(stag), size)} - _animal_cells(obs)
    step, distance = _first_step(obs, goals)
    env.declare(agent_id, step)
    return distance is not None and distance <= 1


def hunt(env: StagHuntGame, agent_id: int) -> bool:
    """Attack an adjacent animal this turn: the stag if one is adjacent (caught only if another hunter
    next to it attacks in the same turn), otherwise a hare (always caught).

    True when an animal is adjacent, so the attack happens. False when none is (the HUNT is wasted)."""
    obs = env.observe(agent_id)
    env.declare(agent_id, "HUNT")
    return _next_to_any(tuple(obs["position"]), _animal_cells(obs))


def wait(env: StagHuntGame, agent_id: int) -> bool:
    """Stay on the current cell this turn (for example next to the stag, waiting for a partner).

    Always True."""
    env.declare(agent_id, "WAIT")
    return True


# ---------------------------------------------------------------- private shared logic
def _fmt(cell: Cell) -> str:
    return f"({cell[0]},{cell[1]})"


def _describe_animals(kind: str, cells: list[Cell], here: Cell) -> str:
    """"Stags (1): (4,4) 3 steps away." with the nearest first."""
    if not cells:
        return f"{kind.capitalize()}s: none."
    ordered = sorted(cells, key=lambda c: (_distance(here, c), c))
    shown = ", ".join(f"{_fmt(c)} {_distance(here, c)} steps away" for c in ordered)
    return f"{kind.capitalize()}s ({len(cells)}, nearest first): {shown}."


def _distance(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _inside(cell: Cell, size: int) -> bool:
    return 0 <= cell[0] < size and 0 <= cell[1] < size


def _neighbours(cell: Cell, size: int) -> list[Cell]:
    out = []
    for dr, dc in DELTAS.values():
        nxt = (cell[0] + dr, cell[1] + dc)
        if _inside(nxt, size):
            out.append(nxt)
    return out


def _next_to_any(cell: Cell, animals) -> bool:
    return any(_distance(cell, tuple(a)) == 1 for a in animals)


def _animal_cells(obs: dict) -> set[Cell]:
    return {tuple(p) for p in obs["hares"]} | {tuple(p) for p in obs["stags"]}


def _as_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number != int(number):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(number)


def _first_step(obs: dict, goals: set[Cell]) -> tuple[str, int | None]:
    """The first move of a shortest path (breadth-first, around animals, hunters do not block) from
    the hunter to the nearest goal cell, and that path's length; ("WAIT", 0) on a goal and
    ("WAIT", None) when no goal is reachable. Ties go to the first direction in N, S, E, W order."""
    start = tuple(obs["position"])
    if start in goals:
        return "WAIT", 0
    size, blocked = obs["grid_size"], _animal_cells(obs)
    first: dict[Cell, tuple[str, int]] = {start: ("WAIT", 0)}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for name, (dr, dc) in DELTAS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if not _inside(nxt, size) or nxt in blocked or nxt in first:
                continue
            move_name = name if cell == start else first[cell][0]
            first[nxt] = (move_name, first[cell][1] + 1)
            if nxt in goals:
                return first[nxt]
            queue.append(nxt)
    return "WAIT", None
