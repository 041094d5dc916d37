"""The reference generated set trains on the tiny model through launch_training.sh, as a real run would."""

import math
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.base.execution import execute
from orchestrator.training.logformat import parse_log

TRAIN_KEYS = {"update", "episode", "loss", "policy_loss", "kl", "reward_mean", "reward_std", "frac_reward_zero_std",
              "lr", "grad_norm", "clip_ratio", "completion_mean_length", "completion_clipped_ratio",
              "invalid_action_rate", "num_tokens", "step_time"}

SMOKE_ARGS = ["--episodes", "4", "--group_size", "2", "--max_env_steps", "2", "--max_thinking_tokens", "8",
              "--max_action_tokens", "8", "--micro_batch_size", "8", "--eval_interval", "1", "--eval_episodes", "2",
              "--sample_log_interval", "2", "--save_interval", "0", "--output_dir", "outputs"]


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value), ...] from every TensorBoard event file under log_dir (TFRecord frames of Event protos:
    8-byte length, 4-byte CRC, the proto, 4-byte CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(log_dir.rglob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)
            event = Event.FromString(data[offset + 12: offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def logged_values(train_logs: str, kind: str) -> list[dict[str, float]]:
    """The key=value pairs of each `kind` line of train.logs, as written (no renaming)."""
    lines = [line.split()[2:] for line in train_logs.splitlines() if line.split()[1] == kind]
    return [{key: float(value) for key, value in (pair.split("=", 1) for pair in pairs)} for pairs in lines]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path_factory.mktemp("run") / "generated")
    result = execute(["bash", "launch_training.sh", "--model_name", str(tiny_model_dir), *SMOKE_ARGS,
                      "--report_to", "tensorboard"], folder, timeout_s=300, env={"PYTHON": sys.executable})
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


def test_report_to_tensorboard_logs_every_train_and_eval_value_under_the_log_dir(trained: Path):
    scalars = read_scalars(trained / "grpo")
    text = (trained / "train.logs").read_text()
    for kind in ("train", "eval"):
        lines = logged_values(text, kind)
        assert [line["update"] for line in lines] == [1, 2]
        for key in set(lines[0]) - {"update"}:
            tag = f"{kind}/{key.removeprefix(kind + '_')}"
            assert [step for step, _ in scalars[tag]] == [1, 2], tag
            assert [value for _, value in scalars[tag]] == pytest.approx([line[key] for line in lines], rel=1e-4,
                                                                          abs=1e-6), tag
    assert "train/reward_mean" in scalars and "eval/reward_mean" in scalars


def test_report_to_without_the_tracker_package_fails_at_start_naming_the_pip_install(tmp_path: Path):
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path / "generated")
    # None in sys.modules makes both packages unfindable; a run that got past the check would fail on the model
    code = ("import sys; sys.modules['tensorboardX'] = sys.modules['tensorboard'] = None; import train; "
            "train.main(['--report_to', 'tensorboard', '--model_name', 'no/such-model'])")
    result = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "report_to=tensorboard needs the tensorboardX package: pip install tensorboardX")
