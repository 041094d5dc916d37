"""How often the verdict calls seed noise a difference: pairs of arms drawn from one distribution (same code,
other seeds), the verdict's interval (orchestrator.ideas.verdict) against a plain percentile bootstrap.

    python benchmarks/verdict_calibration.py [--draws 2000]

Each arm's seed logs UPDATES values: the seed's own level (its boards, its learning speed: N(0, 1)) plus per-update
noise (N(0, 0.5)); the final window is the last two updates, as the verdict takes it for 8 updates. Drawn from
numpy's PCG64 generator with a fixed seed: the same numbers on every machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.ideas.verdict import LEVEL, RESAMPLES, interval  # noqa: E402

UPDATES = 8
GENERATOR_SEED = 20261128


def drawn(rng: np.random.Generator, seeds: int, shift: float = 0.0) -> list[list[float]]:
    """Per seed, UPDATES values: the seed's own level plus per-update noise."""
    return [list(rng.normal(shift + rng.normal(0, 1), 0.5, UPDATES)) for _ in range(seeds)]


def percentile_interval(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """The plain percentile bootstrap of the paired differences' mean: what the verdict does not use."""
    d = b - a
    means = d[rng.integers(0, len(d), (RESAMPLES, len(d)))].mean(axis=1)
    return float(np.quantile(means, (1 - LEVEL) / 2)), float(np.quantile(means, (1 + LEVEL) / 2))


def false_calls(draws: int, seeds: int, *, paired: bool = True, percentile: bool = False) -> float:
    """The share of `draws` same-code pairs of arms whose interval excludes 0 (a "better"/"worse" of pure noise)."""
    rng = np.random.default_rng(GENERATOR_SEED)
    calls = 0
    for _ in range(draws):
        a, b = (np.array([np.mean(s[-2:]) for s in drawn(rng, seeds)]) for _ in range(2))
        low, high = percentile_interval(a, b, rng) if percentile else interval(a, b, paired)[1:]
        calls += not low <= 0 <= high
    return calls / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()
    print(f"same-code pairs of arms called different, of {args.draws} (stated level {LEVEL:.0%}: "
          f"{1 - LEVEL:.0%} expected)")
    for seeds in (3, 5, 10):
        print(f"  {seeds} seeds: the verdict paired {false_calls(args.draws, seeds):.1%}, unpaired "
              f"{false_calls(args.draws, seeds, paired=False):.1%}; a percentile bootstrap "
              f"{false_calls(args.draws, seeds, percentile=True):.1%}")


if __name__ == "__main__":
    main()
