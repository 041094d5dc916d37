"""Stag Hunt: a gridworld coordination dilemma for 1-4 hunters (pure Python standard library).

After the Stag Hunt of Melting Pot (``stag_hunt_in_the_matrix``) and Peysakhovich & Lerer,
"Prosocial learning agents solve generalized Stag Hunts better than selfish ones" (2018).
Hares are small and safe: one hunter catches one alone. A stag is large and dangerous: it is
caught only when at least two hunters attack it in the SAME turn, and a hunter who attacks it
alone is hurt and the stag runs away. Hunting stags together pays far more than hunting hares,
but only if the partner shows up; chasing hares pays a little whatever the partner does.

Coordinates
-----------
A cell is ``(row, col)``: ``row`` 0..grid_size-1 from top to bottom, ``col`` 0..grid_size-1
from left to right; ``(0, 0)`` is the top-left corner. ``"N"`` decreases the row, ``"S"``
increases it, ``"E"`` increases the column, ``"W"`` decreases it (see ``DELTAS``). "Adjacent"
means one of the four orthogonal neighbours (Manhattan distance 1); diagonals are not adjacent.

Pieces
------
* Hunters ``0..num_hunters-1``. Several hunters may stand on the same cell.
* Hares (``num_hares``, default 2) and stags (``num_stags``, default 1). Prey never share a
  cell with anything: hunters cannot step onto prey, prey never step onto hunters or prey.

Moves
-----
``MOVES = ("N", "S", "E", "W", "WAIT", "HUNT")``. A turn has two phases:

1. ``declare(hunter, move)`` queues that hunter's move for the current turn (move names are
   case-insensitive and stripped; declaring again replaces the earlier move).
2. ``advance()`` resolves every declared move at once; hunters with no declared move WAIT.
   It returns a ``TurnResult(rewards, finished, events)`` and clears the declarations.

Order of events inside ``advance()``
------------------------------------
1. Movement. Each N/S/E/W hunter moves one cell. A move off the grid or onto a prey cell is
   blocked (the hunter stays; an event says so). Hunters never block each other.
2. Hunting. A HUNT attacks one adjacent animal: an adjacent stag if there is one (the lowest
   stag index), otherwise an adjacent hare (lowest index); with nothing adjacent it does nothing.
   * Stag: if at least ``STAG_PARTY`` (= 2) hunters attack the same stag this turn, it is
     caught and EVERY attacker gets ``stag_reward`` (default +5). An attack by a single hunter
     fails: that hunter gets ``-failed_hunt_penalty`` (default -0.5) and the stag flees (it is
     moved like a respawn, step 3).
   * Hare: caught by any number of attackers; ``hare_reward`` (default +1) is split equally.
3. Respawn. Every caught animal, and every stag that fled, reappears on a random free cell at
   Manhattan distance >= 3 from every hunter when one exists (else >= 2, else any free cell).
4. Wandering. Every stag that was not moved in step 3 takes, with probability
   ``stag_move_prob`` (default 0.3), one step in a random direction onto a free cell (it stays
   when it draws a blocked direction). Hares never move on their own.
5. The turn counter increases; the game is finished when it reaches ``horizon``.
   ``declare`` and ``advance`` on a finished game raise ``ValueError``.

API
---
``StagHuntGame(grid_size=7, num_hunters=2, horizon=30, seed=0, *, num_hares=2, num_stags=1,
hare_reward=1.0, stag_reward=5.0, failed_hunt_penalty=0.5, stag_move_prob=0.3)``; a new game
is ready to play (there is no reset: build a new game, the same seed replays the same start).

* ``observe(hunter) -> dict``: full observability from one hunter's point of view::

      {"hunter": int, "position": (row, col), "turn": int, "horizon": int, "turns_left": int,
       "grid_size": int, "hunters": [(row, col), ...] (index = hunter id, self included),
       "hares": [(row, col), ...], "stags": [(row, col), ...], "score": float,
       "scores": [float, ...], "pending_move": str | None, "last_events": [str, ...]}

* ``declare(hunter, move)``, ``advance() -> TurnResult``, ``pending_move(hunter) -> str | None``.
* Properties: ``grid_size``, ``num_hunters``, ``horizon``, ``turn``, ``finished``, ``scores``.
* ``render() -> str``: a column header, one line per row (``.`` empty, ``h`` hare, ``S`` stag,
  a digit for a hunter, ``*`` for two or more hunters on one cell; hunters are drawn over
  nothing else since prey cells hold no hunter), then one status line (turn and scores).
* ``snapshot() -> dict`` (JSON-serialisable, RNG state included) and ``restore(snapshot)`` on a
  game built with the same arguments: the restored game replays exactly.

Determinism: all randomness comes from one ``random.Random(seed)`` owned by the game, and
hunters, prey and cells are always visited in a fixed order, so the same seed and the same
moves give the same observations, rewards, events and renders.

Bad input (unknown move, hunter id out of range, bad constructor argument, snapshot of another
configuration) raises ``ValueError`` with a one-line message.

>>> game = StagHuntGame(seed=0)
>>> game.declare(0, "E")
>>> result = game.advance()
>>> len(result.rewards), result.finished
(2, False)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

MOVES: tuple[str, ...] = ("N", "S", "E", "W", "WAIT", "HUNT")
DELTAS: dict[str, tuple[int, int]] = {"N": (-1, 0), "S": (1, 0), "E": (0, 1), "W": (0, -1)}
STAG_PARTY = 2  # attackers needed in one turn to catch a stag
MAX_HUNTERS = 4
MIN_GRID, MAX_GRID = 4, 15

Cell = tuple[int, int]


@dataclass
class TurnResult:
    """What one ``advance()`` did: per-hunter rewards of this turn, whether the game is over, and
    human-readable events in the order they happened."""

    rewards: list[float]
    finished: bool
    events: list[str] = field(default_factory=list)


def manhattan(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def neighbours(cell: Cell, grid_size: int) -> list[Cell]:
    """The in-grid orthogonal neighbours of ``cell``, in N, S, E, W order."""
    out = []
    for dr, dc in DELTAS.values():
        r, c = cell[0] + dr, cell[1] + dc
        if 0 <= r < grid_size and 0 <= c < grid_size:
            out.append((r, c))
    return out


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    allowed = f"{low} <= {name} <= {high}" if high is not None else f"{name} >= {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be an int with {allowed}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name}={value} is out of range; expected {allowed}")


def _check_number(name: str, value: object, low: float, high: float | None = None) -> None:
    allowed = f"{low} <= {name} <= {high}" if high is not None else f"{name} >= {low}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}={value!r} must be a number with {allowed}")
    if not value >= low or (high is not None and value > high):
        raise ValueError(f"{name}={value} is out of range; expected {allowed}")


class StagHuntGame:
    """The Stag Hunt gridworld; see the module docstring for rules, coordinates and API."""

    def __init__(self, grid_size: int = 7, num_hunters: int = 2, horizon: int = 30, seed: int = 0, *,
                 num_hares: int = 2, num_stags: int = 1, hare_reward: float = 1.0, stag_reward: float = 5.0,
                 failed_hunt_penalty: float = 0.5, stag_move_prob: float = 0.3) -> None:
        _check_int("grid_size", grid_size, MIN_GRID, MAX_GRID)
        _check_int("num_hunters", num_hunters, 1, MAX_HUNTERS)
        _check_int("horizon", horizon, 1)
        _check_int("seed", seed, 0)
        _check_int("num_hares", num_hares, 0)
        _check_int("num_stags", num_stags, 0)
        for name, value in (("hare_reward", hare_reward), ("stag_reward", stag_reward),
                            ("failed_hunt_penalty", failed_hunt_penalty)):
            _check_number(name, value, 0.0)
        _check_number("stag_move_prob", stag_move_prob, 0.0, 1.0)
        if num_hunters + num_hares + num_stags > grid_size * grid_size // 2:
            raise ValueError(f"{num_hunters} hunters + {num_hares} hares + {num_stags} stags do not fit a "
                             f"{grid_size}x{grid_size} grid (at most {grid_size * grid_size // 2} pieces)")
        self._grid_size, self._num_hunters, self._horizon = grid_size, num_hunters, horizon
        self.hare_reward, self.stag_reward = float(hare_reward), float(stag_reward)
        self.failed_hunt_penalty, self.stag_move_prob = float(failed_hunt_penalty), float(stag_move_prob)
        self._settings = {"grid_size": grid_size, "num_hunters": num_hunters, "horizon": horizon,
                          "num_hares": num_hares, "num_stags": num_stags, "hare_reward": self.hare_reward,
                          "stag_reward": self.stag_reward, "failed_hunt_penalty": self.failed_hunt_penalty,
                          "stag_move_prob": self.stag_move_prob}
        self._rng = random.Random(seed)
        self._turn = 0
        self._scores = [0.0] * num_hunters
        self._declared: dict[int, str] = {}
        self._last_events: list[str] = []
        cells = [(r, c) for r in range(grid_size) for c in range(grid_size)]
        self._hunters: list[Cell] = self._rng.sample(cells, num_hunters)
        self._hares: list[Cell] = []
        self._stags: list[Cell] = []
        for _ in range(num_stags):
            self._stags.append(self._spawn_cell())
        for _ in range(num_hares):
            self._hares.append(self._spawn_cell())

    # ------------------------------------------------------------------ properties
    @property
    def grid_size(self) -> int:
        return self._grid_size

    @property
    def num_hunters(self) -> int:
        return self._num_hunters

    @property
    def horizon(self) -> int:
        return self._horizon

    @property
    def turn(self) -> int:
        """Turns already played (0 before the first ``advance``)."""
        return self._turn

    @property
    def finished(self) -> bool:
        return self._turn >= self._horizon

    @property
    def scores(self) -> list[float]:
        """Each hunter's total reward so far."""
        return list(self._scores)

    # ------------------------------------------------------------------ playing
    def observe(self, hunter: int) -> dict[str, Any]:
        self._check_hunter(hunter)
        return {
            "hunter": hunter, "position": self._hunters[hunter], "turn": self._turn, "horizon": self._horizon,
            "turns_left": self._horizon - self._turn, "grid_size": self._grid_size,
            "hunters": list(self._hunters), "hares": list(self._hares), "stags": list(self._stags),
            "score": self._scores[hunter], "scores": list(self._scores),
            "pending_move": self._declared.get(hunter), "last_events": list(self._last_events),
        }

    def declare(self, hunter: int, move: str) -> None:
        """Queue ``move`` (one of MOVES, case-insensitive) for ``hunter`` in the current turn."""
        self._check_hunter(hunter)
        name = move.strip().upper() if isinstance(move, str) else None
        if name not in MOVES:
            raise ValueError(f"unknown move {move!r}; valid moves are {', '.join(MOVES)}")
        if self.finished:
            raise ValueError(f"the game is finished (turn {self._turn} of {self._horizon}); no more moves")
        self._declared[hunter] = name

    def pending_move(self, hunter: int) -> str | None:
        """The move queued for ``hunter`` this turn, or None (it will WAIT)."""
        self._check_hunter(hunter)
        return self._declared.get(hunter)

    def advance(self) -> TurnResult:
        """Resolve this turn's declared moves simultaneously (see the module docstring)."""
        if self.finished:
            raise ValueError(f"the game is finished (turn {self._turn} of {self._horizon}); build a new game")
        moves = [self._declared.get(h, "WAIT") for h in range(self._num_hunters)]
        self._declared = {}
        rewards = [0.0] * self._num_hunters
        events: list[str] = []

        # 1. movement
        prey = set(self._hares) | set(self._stags)
        for h, move in enumerate(moves):
            if move not in DELTAS:
                continue
            r, c = self._hunters[h]
            dr, dc = DELTAS[move]
            target = (r + dr, c + dc)
            if not (0 <= target[0] < self._grid_size and 0 <= target[1] < self._grid_size):
                events.append(f"hunter {h} moved {move} into the wall at {(r, c)} and stayed")
            elif target in prey:
                events.append(f"hunter {h} moved {move} into the animal at {target} and stayed")
            else:
                self._hunters[h] = target

        # 2. hunting
        attacks: dict[tuple[str, int], list[int]] = {}
        for h, move in enumerate(moves):
            if move != "HUNT":
                continue
            target = self._hunt_target(self._hunters[h])
            if target is None:
                events.append(f"hunter {h} hunted at {self._hunters[h]} but no animal is adjacent")
            else:
                attacks.setdefault(target, []).append(h)
        caught_stags, caught_hares, fled_stags = [], [], []
        for (kind, index), party in sorted(attacks.items()):
            names = ", ".join(str(h) for h in party)
            if kind == "stag":
                cell = self._stags[index]
                if len(party) >= STAG_PARTY:
                    for h in party:
                        rewards[h] += self.stag_reward
                    caught_stags.append(index)
                    events.append(f"hunters {names} caught the stag at {cell}: +{self.stag_reward:g} each")
                else:
                    rewards[party[0]] -= self.failed_hunt_penalty
                    fled_stags.append(index)
                    events.append(f"hunter {names} attacked the stag at {cell} alone: the hunt failed "
                                  f"(-{self.failed_hunt_penalty:g}) and the stag fled")
            else:
                cell = self._hares[index]
                share = self.hare_reward / len(party)
                for h in party:
                    rewards[h] += share
                caught_hares.append(index)
                who = f"hunter {names}" if len(party) == 1 else f"hunters {names}"
                events.append(f"{who} caught the hare at {cell}: +{share:g}" + (" each" if len(party) > 1 else ""))

        # 3. respawn (caught or fled), in a fixed order: stags by index, then hares by index
        moved_stags = set()
        for index in sorted(caught_stags + fled_stags):
            self._stags[index] = None  # type: ignore[call-overload]  # frees the cell for the draw
            self._stags[index] = self._spawn_cell()
            moved_stags.add(index)
            events.append(f"a stag appeared at {self._stags[index]}")
        for index in sorted(caught_hares):
            self._hares[index] = None  # type: ignore[call-overload]
            self._hares[index] = self._spawn_cell()
            events.append(f"a hare appeared at {self._hares[index]}")

        # 4. wandering stags
        for index, cell in enumerate(self._stags):
            if index in moved_stags or self._rng.random() >= self.stag_move_prob:
                continue
            dr, dc = DELTAS[self._rng.choice(("N", "S", "E", "W"))]
            target = (cell[0] + dr, cell[1] + dc)
            if target in self._free_cells():
                self._stags[index] = target

        # 5. bookkeeping
        for h in range(self._num_hunters):
            self._scores[h] += rewards[h]
        self._turn += 1
        self._last_events = events
        return TurnResult(rewards=rewards, finished=self.finished, events=list(events))

    # ------------------------------------------------------------------ text and state
    def render(self) -> str:
        n = self._grid_size
        board = [["." for _ in range(n)] for _ in range(n)]
        for r, c in self._hares:
            board[r][c] = "h"
        for r, c in self._stags:
            board[r][c] = "S"
        for h, (r, c) in enumerate(self._hunters):
            board[r][c] = "*" if board[r][c].isdigit() or board[r][c] == "*" else str(h)
        lines = ["   " + " ".join(str(c % 10) for c in range(n))]
        lines += [f"{r:>2} " + " ".join(row) for r, row in enumerate(board)]
        scores = " ".join(f"{h}={s:+g}" for h, s in enumerate(self._scores))
        lines.append(f"turn {self._turn}/{self._horizon} | scores {scores}")
        return "\n".join(lines)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable copy of the whole state, RNG included."""
        version, internal, gauss = self._rng.getstate()
        return {"settings": dict(self._settings), "turn": self._turn, "scores": list(self._scores),
                "hunters": [list(p) for p in self._hunters], "hares": [list(p) for p in self._hares],
                "stags": [list(p) for p in self._stags], "declared": {str(k): v for k, v in self._declared.items()},
                "last_events": list(self._last_events), "rng": [version, list(internal), gauss]}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Return to ``snapshot`` (taken from a game built with the same arguments)."""
        if not isinstance(snapshot, dict) or snapshot.get("settings") != self._settings:
            raise ValueError("snapshot was taken from a game with other settings (or is not a snapshot)")
        self._turn = int(snapshot["turn"])
        self._scores = [float(s) for s in snapshot["scores"]]
        self._hunters = [tuple(p) for p in snapshot["hunters"]]  # type: ignore[misc]
        self._hares = [tuple(p) for p in snapshot["hares"]]  # type: ignore[misc]
        self._stags = [tuple(p) for p in snapshot["stags"]]  # type: ignore[misc]
        self._declared = {int(k): v for k, v in snapshot["declared"].items()}
        self._last_events = list(snapshot["last_events"])
        version, internal, gauss = snapshot["rng"]
        self._rng.setstate((version, tuple(internal), gauss))

    # ------------------------------------------------------------------ internals
    def _check_hunter(self, hunter: object) -> None:
        if isinstance(hunter, bool) or not isinstance(hunter, int) or not 0 <= hunter < self._num_hunters:
            raise ValueError(f"hunter {hunter!r} does not exist; hunters are 0..{self._num_hunters - 1}")

    def _hunt_target(self, cell: Cell) -> tuple[str, int] | None:
        for kind, animals in (("stag", self._stags), ("hare", self._hares)):
            for index, where in enumerate(animals):
                if manhattan(cell, where) == 1:
                    return kind, index
        return None

    def _free_cells(self) -> list[Cell]:
        """Cells holding no hunter and no animal, row-major."""
        taken = set(self._hunters) | {p for p in self._hares if p is not None} | {p for p in self._stags if p is not None}
        return [(r, c) for r in range(self._grid_size) for c in range(self._grid_size) if (r, c) not in taken]

    def _spawn_cell(self) -> Cell:
        free = self._free_cells()
        for distance in (3, 2):
            far = [cell for cell in free if all(manhattan(cell, h) >= distance for h in self._hunters)]
            if far:
                return self._rng.choice(far)
        return self._rng.choice(free)
