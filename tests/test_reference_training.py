"""The reference generated set trains on the tiny model through launch_training.sh, as a real run would."""

import math
import re
import sys
from pathlib import Path

import pytest

from orchestrator.execution import execute
from orchestrator.monitor import parse_log

TRAIN_KEYS = {"update", "episode", "loss", "policy_loss", "kl", "reward_mean", "reward_std", "frac_reward_zero_std",
              "lr", "grad_norm", "clip_ratio", "completion_mean_length", "completion_clipped_ratio",
              "invalid_action_rate", "num_tokens", "step_time"}

SMOKE_ARGS = ["--episodes", "4", "--group_size", "2", "--max_env_steps", "2", "--max_thinking_tokens", "8",
              "--max_action_tokens", "8", "--micro_batch_size", "8", "--eval_interval", "1", "--eval_episodes", "2",
              "--sample_log_interval", "2", "--save_interval", "0", "--output_dir", "outputs"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path_factory.mktemp("run") / "generated")
    result = execute(["bash", "launch_training.sh", "--model_name", str(tiny_model_dir), *SMOKE_ARGS], folder,
                     timeout_s=300, env={"PYTHON": sys.executable})
    assert result.ok, result.stderr[-3000:]
    return folder


def test_train_logs_one_line_per_update_with_every_metric(trained: Path):
    records = parse_log((trained / "train.logs").read_text())
    train_lines = [r for r in records if r.kind == "train"]
    assert [r.values["update"] for r in train_lines] == [1, 2]
    for record in train_lines:
        assert TRAIN_KEYS <= set(record.values)
        assert all(math.isfinite(record.values[k]) for k in ("loss", "grad_norm", "kl"))
    assert [r.kind for r in records] == ["start", "train", "eval", "train", "eval", "done"]


def test_sample_episode_log_shows_every_stage_of_a_turn(trained: Path):
    text = (trained / "Sample_EP.logs").read_text()
    assert len(re.findall(r"^===== episode \d+ \(update \d+, seed \d+\)", text, re.M)) == 2
    for field in ("prompt:", "thinking:", "action output:", "parsed call:", "helper result:", "reward:"):
        assert text.count(f"[agent 0] {field}") == 4, field  # 2 logged episodes x 2 turns
    assert "info: {" in text and "step 2/2" in text  # game state after the last turn


def test_final_checkpoint_stores_model_tokenizer_and_config(trained: Path):
    final = trained / "outputs" / "final"
    assert (final / "model.safetensors").exists() and (final / "tokenizer.json").exists()
    assert '"episodes": 4' in (final / "grpo_config.json").read_text()
