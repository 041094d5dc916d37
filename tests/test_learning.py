"""GRPO learns the game: after a few GRPO updates the tiny agent scores more on Cleanup boards it never trained on
than the warm start it began from (the lr-0 control: at learning rate 0 the weights never change). Both play the
same held-out boards greedily (`benchmarks/held_out.py`), so neither sampling nor board luck decides: the warm
start's most likely call earns nothing in 5 turns, and the trained agent's, `collect_nearest_apple`, 1.3-1.8
apples. `benchmarks/learning_bench.py` measures the effect over seeds and both example games.

The game is the config's own at 8 x 6 cells instead of 10 x 8: the warm start's noisy play then eats an apple in
30 % of its agent-episodes of 5 turns instead of 12 %, so every update has episodes that rank above the others
for apples, not only for fewer invalid actions (at 10 x 8 a seed could see no apple in 3 updates running and
learn only to avoid the penalty). An invalid action costs 0.3 in training instead of the config's 0.1: on one
agent build of five seeds, while it learnt to call `collect_nearest_apple` the policy drifted into giving it
another helper's arguments (`"args": {"coord_x": ...}`, 91 % of greedy calls invalid), and the larger penalty
ranks such episodes below the valid ones. No reference model
(beta 0): nothing pulls back to the warm start, and its forward passes are saved. The held-out boards are
scored with the config's own penalty.

The margin sweep of benchmarks/README.md is this test on more seeds (each its own boards):
    LEARNING_TEST_SEEDS="0 1 2 3 4" python -m pytest -q -n 0 -s tests/test_learning.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import copy_generated_set

from orchestrator.base.execution import execute
from orchestrator.training.logformat import parse_log
from orchestrator.tiny.agent import local_tiny_agent

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from held_out import SEED_SPACING, HeldOut  # noqa: E402

UPDATES = 6
MARGIN = 0.45  # held-out reward per agent-episode, trained over the warm start; half the smallest of 3 builds x 5 seeds
SEEDS = [int(seed) for seed in os.environ.get("LEARNING_TEST_SEEDS", "0").split()]
BOARD = {"env_width": 8, "env_height": 6}
# the learning benchmark's settings (benchmarks/README.md: 8 episodes per group, 5 turns, lr 3e-4), the rate held
# after its warm-up instead of decayed over 6 updates: the updates that find the first apples come late on some seeds
SETTINGS = ["--group_size", "8", "--max_env_steps", "5", "--max_thinking_tokens", "40", "--max_action_tokens", "40",
            "--learning_rate", "3e-4", "--lr_scheduler_type", "constant_with_warmup", "--beta", "0",
            "--invalid_action_penalty", "-0.3", "--bf16", "false",
            "--gradient_checkpointing", "false", "--eval_episodes", "1", "--eval_interval", "1000",
            "--sample_log_interval", "1000000", "--save_interval", "0",
            *[arg for field, value in BOARD.items() for arg in (f"--{field}", str(value))]]


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_raises_the_held_out_reward_of_the_tiny_agent(tmp_path: Path, seed: int):
    folder = copy_generated_set(tmp_path / "generated")
    model = local_tiny_agent(ROOT, folder)
    game_seed = seed * SEED_SPACING  # trains on boards game_seed .. game_seed + UPDATES - 1
    log_dir = tmp_path / "grpo"
    result = execute(["bash", "launch_training.sh", "--model_name", model, "--episodes", str(8 * UPDATES),
                      "--seed", str(game_seed), "--log_dir", str(log_dir), "--output_dir", str(log_dir / "outputs"),
                      *SETTINGS], folder, timeout_s=900, env={"PYTHON": sys.executable})
    assert result.ok, result.stderr[-3000:]
    assert sum(r.kind == "train" for r in parse_log((log_dir / "train.logs").read_text())) == UPDATES

    warm, trained = HeldOut("cleanup", folder, [model, str(log_dir / "outputs" / "final")], game_seed, boards=16,
                            per_board=1, turns=5, greedy=True, fields=BOARD).run()
    print(f"seed {seed}: held-out reward per agent-episode (16 boards of 8 x 6, greedy): "
          f"warm start {warm['reward']:.3f}, "
          f"after {UPDATES} GRPO updates {trained['reward']:.3f}, margin {trained['reward'] - warm['reward']:.3f}; "
          f"collect_nearest_apple {warm['helpers']['collect_nearest_apple']:.0%} -> "
          f"{trained['helpers']['collect_nearest_apple']:.0%} of calls; invalid-action rate "
          f"{warm['invalid_rate']:.3f} -> {trained['invalid_rate']:.3f}")
    assert trained["reward"] >= warm["reward"] + MARGIN
    assert trained["invalid_rate"] <= warm["invalid_rate"] + 0.1
