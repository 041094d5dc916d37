"""GRPO learns the game: after a few GRPO updates the tiny agent scores more on Cleanup boards it never trained on
than the warm start it began from (the lr-0 control: at learning rate 0 the weights never change).

Two runs of the learning sweep (its seeds 2k and 2k + 1 for the test's seed k), measured by the sweep's own function
(`benchmarks/learning_run.py`, `measure_seeds`): each 12 GRPO updates of the Cleanup recipe (groups of 4 five-turn
episodes, one board per update, on the config's game at 8 x 6 cells, lr 3e-4 held after its warm-up, the config's KL
to the warm start, an invalid action at -0.3 in training) on its own boards, then the warm start and both trained
models play the same 32 held-out boards, twice each sampled at the config's temperature from the same generator
state and once greedily, scored with the config's own penalty. A run's statistic is its sampled gain plus its greedy
gain (reward per agent-episode, trained minus warm start): the sampled gain moves with how much of the policy's
probability moved to the calls that pay but carries the boards' sampling noise, the greedy gain is noiseless but
moves only when the most likely call flips; a run that learned has one of them large, a run that did not has both
near 0, whatever tokens the CPU samples. The test asserts the two runs' statistics summed, because one run can fail
to learn (with 8 updates of 6, seed 5003 on an AMD EPYC: -0.321).

The threshold (`learning_run.LEARNING_THRESHOLD`, 0.5) lies above every control's pair of runs (one update: at most
+0.024; coin, negated, noise: below 0) and below every held-out seed's pair (the first 8 primes above 9000, a rule
written down before they ran: +1.808 to +4.566 on an AMD EPYC, the same on an Intel Xeon; +5.190 and +4.986 under
ATEN_CPU_CAPABILITY=default). One run in three may still not learn; the test fails only when both do
(benchmarks/README.md, "Learning over 20 seeds").
Each run's sampled invalid-action rate may rise by at most 0.3 over the warm start's (`learning_run.FORMAT_RISE`).
    python benchmarks/learning_sweep.py --games cleanup
    python benchmarks/learning_controls.py
This test on other seeds (each its own training boards):
    LEARNING_TEST_SEEDS="9001 9007" python -m pytest -q -n 0 -s tests/test_learning.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import copy_generated_set

from orchestrator.tiny.agent import local_tiny_agent

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from held_out import MODES  # noqa: E402
from learning_run import FORMAT_RISE, LEARNING_THRESHOLD, RECIPES, learning_test_runs, measure_seeds  # noqa: E402

SEEDS = [int(seed) for seed in os.environ.get("LEARNING_TEST_SEEDS", "50").split()]  # runs 100 and 101


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_raises_the_held_out_reward_of_the_tiny_agent(tmp_path: Path, seed: int):
    folder = copy_generated_set(tmp_path / "generated")
    model = local_tiny_agent(ROOT, folder)
    runs = measure_seeds("cleanup", folder, model, learning_test_runs(seed), tmp_path, modes=MODES)
    for run in runs:
        (warm, trained), (warm_greedy, trained_greedy) = run.scored["sampled"], run.scored["greedy"]
        print(f"seed {seed}, run {run.seed}: held-out reward per agent-episode, warm start -> after "
              f"{RECIPES['cleanup'].updates} GRPO updates: sampled {warm['reward']:.3f} -> {trained['reward']:.3f} "
              f"({run.gain_of('sampled'):+.3f}), greedy {warm_greedy['reward']:.3f} -> {trained_greedy['reward']:.3f} "
              f"({run.gain_of('greedy'):+.3f}); statistic {run.statistic:+.3f}; collect_nearest_apple "
              f"{warm['helpers']['collect_nearest_apple']:.0%} -> {trained['helpers']['collect_nearest_apple']:.0%} "
              f"of sampled calls; sampled invalid-action rate {warm['invalid_rate']:.3f} -> "
              f"{trained['invalid_rate']:.3f}")
    print(f"seed {seed}: the two runs' statistics summed {sum(run.statistic for run in runs):+.3f}")
    assert all(len(run.train["reward_mean"]) == RECIPES["cleanup"].updates for run in runs)
    assert sum(run.statistic for run in runs) >= LEARNING_THRESHOLD
    assert all(run.invalid_rise <= FORMAT_RISE for run in runs)
