"""GRPO learns the game: the tiny agent trained for a dozen updates scores more on held-out games than the same warm
start left untouched (learning rate 0), on the same seeds. `benchmarks/learning_bench.py` measures the effect over
several seeds and both example games; this test asserts its direction on one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import copy_generated_set

from orchestrator.execution import execute
from orchestrator.logformat import parse_log
from orchestrator.tiny_agent import local_tiny_agent

ROOT = Path(__file__).resolve().parents[1]
UPDATES = 12
# the learning benchmark's settings (benchmarks/README.md): 8 episodes per group, 5 turns, lr 3e-4
SETTINGS = ["--group_size", "8", "--max_env_steps", "5", "--max_thinking_tokens", "40", "--max_action_tokens", "40",
            "--bf16", "false", "--gradient_checkpointing", "false", "--eval_episodes", "8", "--eval_interval", "1000",
            "--sample_log_interval", "1000000", "--save_interval", "0", "--seed", "0"]


def final_eval(folder: Path, model: str, learning_rate: float, updates: int, log_dir: Path) -> dict[str, float]:
    """Train through the launch script, then the template's evaluation on its fixed held-out seeds."""
    result = execute(["bash", "launch_training.sh", "--model_name", model, "--episodes", str(8 * updates),
                      "--learning_rate", str(learning_rate), "--log_dir", str(log_dir),
                      "--output_dir", str(log_dir / "outputs"), *SETTINGS],
                     folder, timeout_s=900, env={"PYTHON": sys.executable})
    assert result.ok, result.stderr[-3000:]
    records = parse_log((log_dir / "train.logs").read_text())
    assert sum(r.kind == "train" for r in records) == updates
    return [r for r in records if r.kind == "eval"][-1].values


@pytest.mark.slow
@pytest.mark.tiny_agent("cleanup")
def test_grpo_raises_the_held_out_reward_of_the_tiny_agent(tmp_path: Path):
    folder = copy_generated_set(tmp_path / "generated")
    model = local_tiny_agent(ROOT, folder)
    untouched = final_eval(folder, model, 0.0, 1, tmp_path / "control")  # lr 0: the warm start, evaluated
    trained = final_eval(folder, model, 3e-4, UPDATES, tmp_path / "grpo")
    print(f"held-out reward per agent: warm start {untouched['eval_reward_mean']:.3f}, "
          f"after {UPDATES} GRPO updates {trained['eval_reward_mean']:.3f}; invalid-action rate "
          f"{untouched['eval_invalid_action_rate']:.3f} -> {trained['eval_invalid_action_rate']:.3f}")
    assert trained["eval_reward_mean"] >= untouched["eval_reward_mean"] + 0.25
    assert trained["eval_invalid_action_rate"] <= untouched["eval_invalid_action_rate"] + 0.1
