"""The verdict between two arms over seeds (orchestrator.ideas.verdict), on constructed arms.

Constructed from numpy's PCG64 generator with fixed seeds, so every value and verdict here is the same on every
machine. What is asserted is the statistic's honesty: two arms drawn from one distribution (same code, different
seeds) are "within noise" at the stated rate, and a real difference is called on the metric's own side.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.ideas.verdict import (LEVEL, RESAMPLES, VERDICT_METRICS, Arm, Comparison, SeedRun, compare,
                                        interval, window_of)

UPDATES = 8
DRAWS = 2000  # same-distribution pairs of arms per case: the false-call rate is measured to +-0.005 (one s.e.)


def arm(run_id: str, seeds: list[int], values: dict[str, list[list[float]]]) -> Arm:
    """An arm whose seed k logs values[metric][k] at updates 1..len."""
    return Arm(run_id, tuple(SeedRun(seed, {metric: list(enumerate(rows[k], 1)) for metric, rows in values.items()})
                             for k, seed in enumerate(seeds)))


def drawn(rng: np.random.Generator, seeds: int, shift: float = 0.0) -> list[list[float]]:
    """Per seed, UPDATES rewards: a seed's own level (its boards, its learning) plus per-update noise."""
    return [list(rng.normal(shift + rng.normal(0, 1), 0.5, UPDATES)) for _ in range(seeds)]


def percentile_interval(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """The plain percentile bootstrap over paired seeds: what the verdict does not use, and why."""
    d = b - a
    means = d[rng.integers(0, len(d), (RESAMPLES, len(d)))].mean(axis=1)
    return float(np.quantile(means, (1 - LEVEL) / 2)), float(np.quantile(means, (1 + LEVEL) / 2))


@pytest.mark.parametrize("paired", [True, False])
def test_arms_of_the_same_code_on_other_seeds_are_within_noise_at_the_stated_rate(paired: bool):
    rng = np.random.default_rng(20261128)
    calls = 0
    for _ in range(DRAWS):
        a, b = np.array([np.mean(s[-2:]) for s in drawn(rng, 3)]), np.array([np.mean(s[-2:]) for s in drawn(rng, 3)])
        _, low, high = interval(a, b, paired)
        calls += not low <= 0 <= high
    # the stated level is 95%: a false call 1 time in 20 (+- 0.005); the bound leaves 3 standard errors
    assert calls / DRAWS <= (1 - LEVEL) + 3 * math.sqrt(0.05 * 0.95 / DRAWS)


def test_the_percentile_bootstrap_would_call_seed_noise_a_difference_one_time_in_four():
    rng = np.random.default_rng(20261128)
    calls = 0
    for _ in range(DRAWS):
        a, b = np.array([np.mean(s[-2:]) for s in drawn(rng, 3)]), np.array([np.mean(s[-2:]) for s in drawn(rng, 3)])
        low, high = percentile_interval(a, b, rng)
        calls += not low <= 0 <= high
    assert calls / DRAWS > 0.15  # 3 seeds: its interval is the seeds' range, so any 3 same-signed differences count


def test_one_constructed_pair_of_same_code_arms_is_within_noise_on_every_metric():
    rng = np.random.default_rng(7)
    values = lambda: {"reward": drawn(rng, 3), "invalid_action_rate": [list(rng.uniform(0.1, 0.2, UPDATES))
                                                                         for _ in range(3)],
                      "completion_length": [list(rng.normal(20, 0.5, UPDATES)) for _ in range(3)],
                      "kl": [[0.0] * UPDATES for _ in range(3)]}
    result = compare(arm("parent", [1, 2, 3], values()), arm("child", [4, 5, 6], values()))
    assert [m.verdict for m in result.metrics] == ["within noise"] * len(VERDICT_METRICS), [m.line for m in
                                                                                           result.metrics]
    assert all(not m.paired and m.seeds == (3, 3) and m.window == (7, 8) for m in result.metrics)


def test_the_verdict_takes_the_metric_s_side():
    ones = lambda level: [[level] * UPDATES, [level + 0.01] * UPDATES, [level - 0.01] * UPDATES]
    parent = arm("parent", [1, 2, 3], {"reward": ones(0.2), "invalid_action_rate": ones(0.3),
                                       "completion_length": ones(20), "kl": ones(0.01)})
    child = arm("child", [1, 2, 3], {"reward": ones(0.1), "invalid_action_rate": ones(0.1),
                                     "completion_length": ones(25), "kl": ones(0.001)})
    verdicts = {m.metric: m.verdict for m in compare(parent, child).metrics}
    assert verdicts == {"reward": "worse", "invalid_action_rate": "better", "completion_length": "higher",
                        "kl": "lower"}
    again = {m.metric: m.verdict for m in compare(child, parent).metrics}
    assert again == {"reward": "better", "invalid_action_rate": "worse", "completion_length": "lower", "kl": "higher"}


def test_the_final_window_is_the_last_quarter_of_the_updates():
    assert [window_of(n) for n in (1, 3, 4, 8, 10, 100)] == [1, 1, 1, 2, 3, 25]
    early_gain = [[0.0] * 6 + [1.0, 1.0]] * 2 + [[0.0] * 6 + [1.2, 1.2]]
    flat = [[1.0] * 6 + [0.0, 0.0]] * 2 + [[1.0] * 6 + [0.1, 0.1]]
    (reward,) = compare(arm("p", [1, 2, 3], {"reward": flat}), arm("c", [1, 2, 3], {"reward": early_gain}),
                        VERDICT_METRICS[:1]).metrics
    assert reward.window == (7, 8) and reward.verdict == "better"
    assert reward.parent_mean == pytest.approx(0.1 / 3) and reward.child_mean == pytest.approx(3.2 / 3)


def test_what_cannot_be_compared_says_why():
    parent = arm("p", [1], {"reward": [[0.0] * UPDATES]})
    child = arm("c", [1], {"reward": [[1.0] * UPDATES]})
    verdicts = {m.metric: m for m in compare(parent, child).metrics}
    assert verdicts["reward"].verdict == "too few seeds" and verdicts["reward"].difference == 1.0
    assert verdicts["kl"].verdict == "not logged" and verdicts["kl"].line == "KL to the reference: not logged"
    stopped = Arm("c", (SeedRun(1, {"reward": [(1, 1.0)]}, status="stopped (nan_loss)"),))
    result = compare(parent, stopped)
    assert result.excluded == ["c seed 1: stopped (nan_loss)"] and result.metrics[0].verdict == "not logged"
    assert Comparison.from_dict(result.to_dict()) == result
