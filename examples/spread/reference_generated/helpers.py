"""Helpers for LLM agents playing Spread (env_move.SpreadGame: mpe2's simple_spread, a continuous 2-D world).

Positions are (x, y) in world units, written with a sign and two decimals, e.g. (+0.27, -0.46): x grows to
the right, y grows upwards. Every episode starts with the agents and as many landmarks drawn in the square
[-1, +1] x [-1, +1]; agents may drift past it. Distances are straight-line (Euclidean).

`observation_to_text(env, agent_id)` describes what one agent sees, with coordinates. Every other public
function is an action helper `NAME(env, agent_id, **args) -> bool`, called from the JSON form
{"action": NAME, "agent_id": I, "args": {...}}. A helper picks ONE low-level action for this turn (NO_OP,
LEFT, RIGHT, DOWN or UP: the ints 0-4), records it with `env.submit(agent_id, action)` (all agents then move
at once with `env.step()`), and returns whether its task is completed (each docstring says when). Bad
arguments raise ValueError before anything is submitted. Helpers never call one another; the shared
geometry lives in the private functions at the bottom.

Game facts the helpers rely on: an agent is a disc of radius 0.15 with momentum. Each turn its position
moves by 0.1 x its velocity, then the velocity loses a quarter and a push (LEFT, RIGHT, DOWN or UP) adds
0.5 along that axis. So a push shows in the position only from the next turn on, and an agent that stops
pushing coasts on: from velocity v it comes to rest 0.4 x v further (its resting point). A push moves the
resting point by 0.2, so an agent can stop only on a grid of 0.2 around where it started: within about 0.14
of a chosen point, not always within 0.1. The helpers steer by the resting point, which keeps them from
overshooting, and count a target as reached once the agent is within 0.15 of it and no push would bring
its resting point closer. Each turn the team is paid minus the sum, over landmarks, of the distance from
the landmark to its closest agent, and an agent pays 1 for every other agent it overlaps (centres closer
than 0.3). The game counts a landmark as covered when an agent is within 0.1 of it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from env_move import ACTION_NAMES, DOWN, LEFT, NO_OP, RIGHT, UP, SpreadGame

PUSH = {NO_OP: (0.0, 0.0), LEFT: (-1.0, 0.0), RIGHT: (1.0, 0.0), DOWN: (0.0, -1.0), UP: (0.0, 1.0)}
COAST = 0.4  # resting point = position + COAST * velocity (0.1 per turn, the velocity decaying by 0.75)
PUSH_REACH = 0.2  # how far one push moves the resting point: 0.5 of velocity, coasted
COVER_RADIUS = 0.1  # a landmark is covered by an agent this close (MPE's capture radius)
ARRIVED = 0.15  # reached: this close, and no push brings the resting point closer (it moves on a 0.2 grid)
CONTACT = 0.3  # two agents overlap when their centres are closer than this (two radii of 0.15)
AT_REST = 0.05  # speed below which an agent counts as stopped


def observation_to_text(env: SpreadGame, agent_id: int) -> str:
    """Agent `agent_id`'s position, motion and resting point, the turn, every landmark (nearest first, with
    the agent closest to it), every other agent (nearest first, overlaps flagged) and this turn's team score."""
    here, velocity = env.position(agent_id), env.velocity(agent_id)
    agents = [env.position(i) for i in range(env.num_agents)]
    landmarks = env.landmarks()
    lines = [
        f"You are agent {agent_id} at {_fmt(here)}, moving {_fmt(velocity)} (speed {np.linalg.norm(velocity):.2f}); "
        f"if you stop pushing you come to rest at {_fmt(_rest_point(here, velocity, NO_OP))}.",
        f"Turn {env.turn + 1} of {env.max_cycles}. Positions are (x, y): x grows to the right, y grows upwards; "
        "the world starts inside [-1, +1] x [-1, +1].",
        f"Landmarks ({len(landmarks)}), nearest to you first:",
    ]
    for k in sorted(range(len(landmarks)), key=lambda k: _distance(here, landmarks[k])):
        closest = min(range(len(agents)), key=lambda i: _distance(agents[i], landmarks[k]))
        gap = _distance(agents[closest], landmarks[k])
        who = "you" if closest == agent_id else f"agent {closest}"
        state = f"covered by {who}" if gap < COVER_RADIUS else f"closest agent: {who}, {gap:.2f} away"
        lines.append(f"- landmark {k} at {_fmt(landmarks[k])}: {_distance(here, landmarks[k]):.2f} from you; {state}")
    others = sorted((i for i in range(len(agents)) if i != agent_id), key=lambda i: _distance(here, agents[i]))
    lines.append("Other agents, nearest first:")
    for i in others:
        gap = _distance(here, agents[i])
        flag = " - OVERLAPPING you: -1 to each of you every turn this lasts" if gap < CONTACT else ""
        lines.append(f"- agent {i} at {_fmt(agents[i])}, moving {_fmt(env.velocity(i))}, {gap:.2f} from you{flag}")
    team = -sum(min(_distance(a, lm) for a in agents) for lm in landmarks)
    covered = sum(min(_distance(a, lm) for a in agents) < COVER_RADIUS for lm in landmarks)
    lines.append(f"Team score this turn: {team:+.2f} (minus the sum over landmarks of the distance to the closest "
                 f"agent); landmarks covered: {covered} of {len(landmarks)}.")
    return "\n".join(lines)


def move_toward(env: SpreadGame, agent_id: int, x: float, y: float) -> bool:
    """Push towards the point (x, y): the push that brings the agent's resting point closest to it.

    True when the agent is within 0.15 of (x, y) and no push would bring its resting point closer (it stops
    as close as its pushes allow); False while on the way."""
    target = np.array([_as_float("x", x), _as_float("y", y)])
    here, velocity = env.position(agent_id), env.velocity(agent_id)
    action = _steer(here, velocity, target)
    env.submit(agent_id, action)
    return _settles_at(here, velocity, action, target)


def go_to_landmark(env: SpreadGame, agent_id: int, landmark: int) -> bool:
    """Push towards landmark number `landmark` (its number in the observation, 0 to N-1).

    True when the agent is within 0.15 of it and no push would bring its resting point closer (it stops as
    close as its pushes allow); False while on the way."""
    landmarks = env.landmarks()
    target = landmarks[_as_index("landmark", landmark, len(landmarks))]
    here, velocity = env.position(agent_id), env.velocity(agent_id)
    action = _steer(here, velocity, target)
    env.submit(agent_id, action)
    return _settles_at(here, velocity, action, target)


def go_to_nearest_landmark(env: SpreadGame, agent_id: int) -> bool:
    """Push towards the landmark nearest to the agent, whoever else is heading there.

    True when the agent is within 0.15 of it and no push would bring its resting point closer (it stops as
    close as its pushes allow); False while on the way."""
    here, velocity = env.position(agent_id), env.velocity(agent_id)
    target = min(env.landmarks(), key=lambda point: _distance(here, point))
    action = _steer(here, velocity, target)
    env.submit(agent_id, action)
    return _settles_at(here, velocity, action, target)


def cover_assigned_landmark(env: SpreadGame, agent_id: int) -> bool:
    """Push towards this agent's landmark in a one-to-one split that every agent computes alike from the same
    positions: the pairing of agents with landmarks whose total distance is smallest. When every agent uses
    it, each landmark gets its own agent and nobody collides on the way.

    True when the agent is within 0.15 of its landmark and no push would bring its resting point closer;
    False while on the way."""
    agents = [env.position(i) for i in range(env.num_agents)]
    landmarks = env.landmarks()
    target = landmarks[_best_pairing(agents, landmarks)[agent_id]]
    here, velocity = agents[agent_id], env.velocity(agent_id)
    action = _steer(here, velocity, target)
    env.submit(agent_id, action)
    return _settles_at(here, velocity, action, target)


def avoid_nearest_agent(env: SpreadGame, agent_id: int) -> bool:
    """Push away from the nearest other agent, along the axis on which the two are closest.

    True when the agent's resting point after this push is clear of every other agent's current position
    (centres at least 0.3 apart); False while it would still overlap one."""
    here, velocity = env.position(agent_id), env.velocity(agent_id)
    others = [env.position(i) for i in range(env.num_agents) if i != agent_id]
    nearest = min(others, key=lambda point: _distance(here, point))
    away = here - nearest
    if abs(away[0]) >= abs(away[1]):
        action = RIGHT if away[0] >= 0 else LEFT
    else:
        action = UP if away[1] >= 0 else DOWN
    env.submit(agent_id, action)
    rest = _rest_point(here, velocity, action)
    return all(_distance(rest, point) >= CONTACT for point in others)


def brake(env: SpreadGame, agent_id: int) -> bool:
    """Slow down: the push against the agent's motion that leaves it the smallest speed (NO_OP when coasting
    is slowest).

    True when its speed after this turn is below 0.05 (stopped); False while it still moves."""
    velocity = env.velocity(agent_id)
    action = min(PUSH, key=lambda a: np.linalg.norm(_next_velocity(velocity, a)))
    env.submit(agent_id, action)
    return bool(np.linalg.norm(_next_velocity(velocity, action)) < AT_REST)


def push(env: SpreadGame, agent_id: int, direction: str) -> bool:
    """One raw push this turn: "left" (-x), "right" (+x), "down" (-y), "up" (+y), or "no_op" (coast).

    Always True: the push is made."""
    name = str(direction).strip().lower().replace(" ", "_").replace("-", "_")
    if name not in ACTION_NAMES:
        raise ValueError(f"direction must be one of {', '.join(ACTION_NAMES)}; got {direction!r}")
    env.submit(agent_id, ACTION_NAMES.index(name))
    return True


# ---------------------------------------------------------------- private shared geometry
def _fmt(point) -> str:
    return f"({point[0]:+.2f}, {point[1]:+.2f})"


def _distance(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)))


def _next_velocity(velocity: np.ndarray, action: int) -> np.ndarray:
    return 0.75 * velocity + 0.5 * np.array(PUSH[action])


def _rest_point(here: np.ndarray, velocity: np.ndarray, action: int) -> np.ndarray:
    """Where the agent stops if it makes `action` now and never pushes again."""
    return here + COAST * velocity + PUSH_REACH * np.array(PUSH[action])


def _steer(here: np.ndarray, velocity: np.ndarray, target: np.ndarray) -> int:
    """The action whose resting point is closest to `target` (NO_OP first on ties: no needless push)."""
    return min(PUSH, key=lambda a: (round(_distance(_rest_point(here, velocity, a), target), 9), a))


def _settles_at(here: np.ndarray, velocity: np.ndarray, action: int, target: np.ndarray) -> bool:
    """Reached: no push was needed (`_steer` chose NO_OP), and the agent and its resting point are close."""
    rest = _rest_point(here, velocity, action)
    return action == NO_OP and _distance(here, target) < ARRIVED and _distance(rest, target) < ARRIVED


def _best_pairing(agents: list[np.ndarray], landmarks: list[np.ndarray]) -> tuple[int, ...]:
    """landmark index per agent, one-to-one, minimising the total distance (first such pairing on ties)."""
    return min(itertools.permutations(range(len(landmarks)), len(agents)),
               key=lambda pairing: round(sum(_distance(agents[i], landmarks[k]) for i, k in enumerate(pairing)), 9))


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def _as_index(name: str, value: object, count: int) -> int:
    number = _as_float(name, value)
    if number != int(number) or not 0 <= number < count:
        raise ValueError(f"{name} must be an integer from 0 to {count - 1}, got {value!r}")
    return int(number)
