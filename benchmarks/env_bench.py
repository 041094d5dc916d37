"""Throughput of source_of_truth/env_move.py: env steps/s, clone()/s and get_state()+set_state()/s.

Run from the repository root: ``python benchmarks/env_bench.py``. Random legal actions
from a fixed seed; each measurement follows a short warm-up and uses time.perf_counter.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source_of_truth"))

from env_move import ACTIONS, CleanupEnv  # noqa: E402

SEED = 0
WARMUP = 200
STEPS = 5000
COPIES = 5000
CONFIGS = {
    "2 agents 10x8": dict(width=10, height=8, num_agents=2),
    "8 agents 25x18": dict(width=25, height=18, num_agents=8),
}


def rate(operation: Callable[[], object], count: int) -> float:
    """Calls per second of ``operation`` over ``count`` calls after a warm-up."""
    for _ in range(WARMUP):
        operation()
    start = time.perf_counter()
    for _ in range(count):
        operation()
    return count / (time.perf_counter() - start)


def stepper(env: CleanupEnv) -> Callable[[], object]:
    """One env step with random actions, resetting at the end of an episode."""
    rng = random.Random(SEED)

    def step() -> object:
        if env.done:
            env.reset()
        return env.step({i: rng.choice(ACTIONS) for i in range(env.num_agents)})

    return step


def main() -> None:
    print(f"python {sys.version.split()[0]}, {STEPS} steps / {COPIES} copies per measurement, seed {SEED}")
    for name, params in CONFIGS.items():
        env = CleanupEnv(max_steps=100, seed=SEED, **params)
        steps = rate(stepper(env), STEPS)
        clones = rate(env.clone, COPIES)
        round_trips = rate(lambda: env.set_state(env.get_state()), COPIES)
        json_trips = rate(lambda: env.set_state(json.loads(json.dumps(env.get_state()))), COPIES)
        print(
            f"{name:>15}: step {steps:9,.0f}/s | clone {clones:9,.0f}/s | "
            f"get_state+set_state {round_trips:9,.0f}/s | with JSON round trip {json_trips:8,.0f}/s"
        )


if __name__ == "__main__":
    main()
