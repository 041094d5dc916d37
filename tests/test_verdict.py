"""The verdict between two arms over seeds (orchestrator.ideas.verdict), on constructed arms.

Constructed from numpy's PCG64 generator with fixed seeds (benchmarks/verdict_calibration.py draws them), so every
value and verdict here is the same on every machine; the tiny agent's arms are recorded runs (below). What is
asserted is the statistic's honesty: two arms drawn from one distribution (same code, different seeds) are "within
noise" at the stated rate, and a real difference is called on the metric's own side.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestrator.ideas.arms import seed_run
from orchestrator.ideas.verdict import LEVEL, VERDICT_METRICS, Arm, Comparison, SeedRun, compare, window_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from verdict_calibration import UPDATES, drawn, false_calls  # noqa: E402

DRAWS = 2000  # same-distribution pairs of arms per case: the false-call rate is measured to +-0.005 (one s.e.)


def arm(run_id: str, seeds: list[int], values: dict[str, list[list[float]]]) -> Arm:
    """An arm whose seed k logs values[metric][k] at updates 1..len."""
    return Arm(run_id, tuple(SeedRun(seed, {metric: list(enumerate(rows[k], 1)) for metric, rows in values.items()})
                             for k, seed in enumerate(seeds)))


@pytest.mark.parametrize("paired", [True, False])
def test_arms_of_the_same_code_on_other_seeds_are_within_noise_at_the_stated_rate(paired: bool):
    # the stated level is 95%: a false call 1 time in 20 (+- 0.005); the bound leaves 3 standard errors
    assert false_calls(DRAWS, 3, paired=paired) <= (1 - LEVEL) + 3 * math.sqrt(0.05 * 0.95 / DRAWS)


def test_the_percentile_bootstrap_would_call_seed_noise_a_difference_one_time_in_four():
    # 3 seeds: its interval is the seeds' range, so any 3 same-signed paired differences are called
    assert false_calls(DRAWS, 3, percentile=True) > 0.15


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


# ---------------------------------------------------------------- the tiny agent: GRPO against learning rate 0

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
TRAIN_KEYS = ("reward_mean", "invalid_action_rate", "completion_mean_length", "kl")


def recorded(name: str) -> dict[int, dict[str, list[float]]]:
    """seed -> the train.logs series of a recorded Cleanup run (benchmarks/results/NAME)."""
    rows = [json.loads(line) for line in (RESULTS / name).read_text().splitlines() if line.strip()]
    return {r["seed"]: r["train"] for r in rows if r["game"] == "cleanup"}


def logged_arm(folder: Path, run_id: str, runs: dict[int, dict[str, list[float]]]) -> Arm:
    """Each recorded run written as the Cleanup template logs it (`TIME train key=value ...`), then read back as
    the verdict reads any run: by the monitor's reading of its train.logs (orchestrator.ideas.arms.seed_run)."""
    seed_runs = []
    for seed, train in sorted(runs.items()):
        path = folder / run_id / f"seed-{seed}"
        path.mkdir(parents=True)
        lines = [f"2026-11-28T00:00:00 start updates={len(train['reward_mean'])}"]
        lines += [f"2026-11-28T00:00:{u:02d} train update={u} " + " ".join(f"{key}={train[key][u - 1]:.6g}"
                                                                          for key in TRAIN_KEYS)
                  for u in range(1, len(train["reward_mean"]) + 1)]
        (path / "train.logs").write_text("\n".join(lines) + "\n")
        seed_runs.append(seed_run(seed, path, {}))
    return Arm(run_id, tuple(seed_runs))


def test_an_arm_at_learning_rate_0_is_worse_in_reward_than_the_learning_arm_on_the_tiny_agent(tmp_path: Path):
    """The learning benchmark's recorded setting (benchmarks/learning_run.py, RECIPES_8X6["cleanup"]: 8 GRPO updates
    of groups of 6 of the tiny agent on Cleanup, lr 3e-4): the learning arm is the sweep's 20 recorded runs (seeds
    100-119, benchmarks/results/learning-sweep-8x6.jsonl), the lr-0 arm the same recipe at learning rate 0 on the same
    seeds (benchmarks/results/verdict-lr0.jsonl, recorded by benchmarks/verdict_arms.py). Recorded, not trained here:
    one training per arm and seed, none at test time, so the verdict is the same on every CPU; what it tests is the
    verdict on real curves of the tiny agent, read back through train.logs as the monitor reads them.

    How many seeds: per seed, the final window's reward (updates 7-8) is 0.755 lower at learning rate 0, with a
    spread of 0.38 over seeds (the learning runs' speeds, the boards' sampling noise): about 2 spreads. The verdict
    needs t above Student's quantile: at 3 seeds (4.30) a fresh set says "worse" about half the time, at 10 (2.26) it
    fails 1 time in 5,000, at 20 (2.09, here t = 8.9) 1 time in 10 billion (the noncentral t of 20 seeds whose
    differences have this mean and spread): a wrong verdict on a recording of these 20 seeds on another CPU is
    vanishingly unlikely. `python benchmarks/verdict_arms.py --report` prints the verdict on the first 3, 5, 10 and
    20 seeds (within noise on 3; worse on 5, 10 and 20), and records the lr-0 arm again on any machine.
    """
    learning, lr0 = recorded("learning-sweep-8x6.jsonl"), recorded("verdict-lr0.jsonl")
    assert sorted(learning) == sorted(lr0) == list(range(100, 120))
    result = compare(logged_arm(tmp_path, "learning", learning), logged_arm(tmp_path, "lr0", lr0))
    verdicts = {m.metric: m for m in result.metrics}
    assert verdicts["reward"].verdict == "worse", verdicts["reward"].line
    assert verdicts["reward"].paired and verdicts["reward"].seeds == (20, 20) and verdicts["reward"].window == (7, 8)
    assert verdicts["kl"].verdict == "lower"  # at learning rate 0 the policy is its reference: KL 0 at every update


def test_two_arms_of_the_learning_run_on_other_seeds_are_within_noise_on_every_metric(tmp_path: Path):
    """Same code, different seeds: the sweep's learning runs of seeds 100-109 against those of 110-119 (real runs of
    the tiny agent, recorded; the split fixed by the seeds' order)."""
    learning = recorded("learning-sweep-8x6.jsonl")
    first = logged_arm(tmp_path, "first", {s: t for s, t in learning.items() if s < 110})
    second = logged_arm(tmp_path, "second", {s: t for s, t in learning.items() if s >= 110})
    result = compare(first, second)
    assert [m.verdict for m in result.metrics] == ["within noise"] * 4, [m.line for m in result.metrics]
    assert all(not m.paired and m.seeds == (10, 10) for m in result.metrics)
