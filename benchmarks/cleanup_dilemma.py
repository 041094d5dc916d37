"""Is Cleanup a social dilemma at its training horizon? Scripted policies on the game's defaults.

Run from the repository root: ``python benchmarks/cleanup_dilemma.py``. Two agents on the training
config's grid (``GRPOConfig``: num_agents, env_width, env_height), the game's other defaults, seeds 0-19.
Strategies:

* nobody cleans: both agents are greedy harvesters;
* one cleaner + one harvester: agent 0 only cleans, agent 1 harvests;
* split time: the agents take shifts of ``SHIFT`` turns, one cleaning while the other harvests.

A harvester walks to the nearest apple not claimed by a lower-id harvester (to the orchard when there is
none). A cleaner fires CLEAN when its beam covers dirt and otherwise walks to the nearest dirty cell.
The policies ignore the horizon, so one 100-turn episode per seed gives the totals at every horizon.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parents[1] / "source_of_truth"
sys.path.insert(0, str(SOURCE_DIR))

from env_move import CleanupEnv  # noqa: E402
from grpo_config import GRPOConfig  # noqa: E402

SEEDS = range(20)
LONGEST = 100
SWEEP = (5, 10, 15, 20, 30, 50)
SHIFT = 10

Position = tuple[int, int]
Roles = Callable[[int], tuple[str, str]]  # turn -> role ("clean" or "harvest") of agents 0 and 1

STRATEGIES: dict[str, Roles] = {
    "nobody cleans": lambda turn: ("harvest", "harvest"),
    "one cleaner + one harvester": lambda turn: ("clean", "harvest"),
    "split time": lambda turn: ("clean", "harvest") if (turn // SHIFT) % 2 == 0 else ("harvest", "clean"),
}


def distance(a: Position, b: Position) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def step_towards(here: Position, target: Position, y_first: bool) -> str:
    """The move that brings ``here`` one cell closer to ``target`` (STAY when there)."""
    dx, dy = target[0] - here[0], target[1] - here[1]
    horizontal = "RIGHT" if dx > 0 else "LEFT"
    vertical = "DOWN" if dy > 0 else "UP"
    order = [(dy, vertical), (dx, horizontal)] if y_first else [(dx, horizontal), (dy, vertical)]
    return next((move for delta, move in order if delta), "STAY")


def harvest_action(env: CleanupEnv, here: Position, apples: set[Position], y_first: bool) -> str:
    """Walk to the nearest unclaimed apple (claiming it), else into the orchard; ``apples`` loses the claim."""
    if apples:
        target = min(apples, key=lambda cell: (distance(here, cell), cell))
        apples.discard(target)
    else:
        target = (env.width - env.orchard_width, here[1])
    return step_towards(here, target, y_first)


def clean_action(env: CleanupEnv, agent_id: int, here: Position, dirt: list[Position], y_first: bool) -> str:
    """CLEAN when the beam covers dirt, else walk to the nearest dirty cell (into the river when none)."""
    if set(env.beam_cells(agent_id)) & set(dirt):
        return "CLEAN"
    if not dirt:
        return step_towards(here, (env.river_width - 1, here[1]), y_first)
    return step_towards(here, min(dirt, key=lambda cell: (distance(here, cell), cell)), y_first)


def play(roles: Roles, seed: int) -> list[tuple[int, int]]:
    """Apples eaten by agents 0 and 1, cumulative after each of ``LONGEST`` turns."""
    config = GRPOConfig()
    env = CleanupEnv(width=config.env_width, height=config.env_height, num_agents=2, max_steps=LONGEST, seed=seed)
    totals, cumulative = [0, 0], []
    blocked = {0: False, 1: False}
    for turn in range(LONGEST):
        obs = env.get_observation(0)
        unclaimed = {tuple(cell) for cell in obs["apples"]}
        actions = {}
        for agent_id, role in enumerate(roles(turn)):
            here = tuple(obs["agents"][agent_id])
            # a blocked agent tries the other axis first, so two agents cannot block each other forever
            if role == "harvest":
                actions[agent_id] = harvest_action(env, here, unclaimed, blocked[agent_id])
            else:
                actions[agent_id] = clean_action(env, agent_id, here, obs["dirt"], blocked[agent_id])
        _, rewards, _, info = env.step(actions)
        blocked = info["blocked"]
        totals = [totals[i] + int(rewards[i]) for i in range(2)]
        cumulative.append((totals[0], totals[1]))
    return cumulative


def mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):5.2f} ± {statistics.stdev(values):4.2f}"


def main() -> None:
    horizon = GRPOConfig().max_env_steps
    env = CleanupEnv()
    game = {k: v for k, v in env.config.items() if k not in ("width", "height", "num_agents", "max_steps")}
    print(f"game defaults: {game}")
    print(f"2 agents, {GRPOConfig().env_width}x{GRPOConfig().env_height} grid, seeds {SEEDS[0]}-{SEEDS[-1]}, "
          f"default horizon {horizon} turns (GRPOConfig.max_env_steps)\n")
    runs = {name: [play(roles, seed) for seed in SEEDS] for name, roles in STRATEGIES.items()}

    def totals(name: str, turns: int) -> list[int]:
        return [sum(run[turns - 1]) for run in runs[name]]

    print("| strategy | total apples (mean ± std) | agent 0 mean | agent 1 mean |")
    print("|---|---|---|---|")
    for name, per_seed in runs.items():
        agent_means = [statistics.mean(run[horizon - 1][i] for run in per_seed) for i in range(2)]
        print(f"| {name} | {mean_std(totals(name, horizon))} | {agent_means[0]:5.2f} | {agent_means[1]:5.2f} |")

    nobody, cleaning = totals("nobody cleans", horizon), totals("one cleaner + one harvester", horizon)
    wins = sum(c > n for c, n in zip(cleaning, nobody))
    ties = sum(c == n for c, n in zip(cleaning, nobody))
    print(f"\nratio one cleaner / nobody cleans (mean totals): {statistics.mean(cleaning) / statistics.mean(nobody):.2f}")
    print(f"seeds favouring cleaning: {wins}/{len(SEEDS)} ({ties} ties)")
    gains = [statistics.mean(totals("one cleaner + one harvester", t)) - statistics.mean(totals("nobody cleans", t))
             for t in range(1, LONGEST + 1)]
    pays = next((t for t in range(1, LONGEST + 1) if all(g > 0 for g in gains[t - 1:])), None)
    print(f"cleaning pays (mean total higher at every horizon from here to {LONGEST}): "
          f"{f'from {pays} turns' if pays else 'never'}")
    print("\n| horizon (turns) | " + " | ".join(str(t) for t in SWEEP) + " |")
    print("|---|" + "---|" * len(SWEEP))
    print("| one cleaner − nobody (mean total apples) | " + " | ".join(f"{gains[t - 1]:+.2f}" for t in SWEEP) + " |")


if __name__ == "__main__":
    main()
