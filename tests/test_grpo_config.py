import sys
from dataclasses import fields
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source_of_truth"))
from grpo_config import GRPOConfig  # noqa: E402


def test_defaults_name_the_real_model():
    assert GRPOConfig().model_name == "Qwen/Qwen3-4B-Instruct-2507"
    assert GRPOConfig().sample_log_interval == 10


def test_command_line_overrides_values_with_their_types():
    config = GRPOConfig.from_args(["--episodes", "16", "--beta", "0", "--bf16", "false", "--model_name", "/m"])
    assert (config.episodes, config.beta, config.bf16, config.model_name) == (16, 0.0, False, "/m")


def test_unknown_field_is_rejected(capsys):
    with pytest.raises(SystemExit):
        GRPOConfig.from_args(["--not_a_field", "1"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_bad_bool_is_rejected():
    with pytest.raises(SystemExit):
        GRPOConfig.from_args(["--bf16", "maybe"])


@pytest.mark.parametrize("field,value", [("group_size", 1), ("top_p", 0.0), ("episodes", 0), ("beta", -1.0),
                                         ("report_to", "tensorboardX"), ("report_to", "")])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        GRPOConfig(**{field: value})


def test_report_to_defaults_to_none_and_takes_each_tracker_from_the_command_line():
    assert GRPOConfig().report_to == "none"
    for tracker in ("none", "tensorboard", "wandb"):
        assert GRPOConfig.from_args(["--report_to", tracker]).report_to == tracker


def test_every_field_has_a_comment():
    source = (Path(__file__).resolve().parents[1] / "source_of_truth" / "grpo_config.py").read_text()
    for f in fields(GRPOConfig):
        line = next(line for line in source.splitlines() if line.strip().startswith(f"{f.name}:"))
        assert "#" in line, f"field {f.name} has no comment"


def test_json_round_trip():
    config = GRPOConfig(episodes=3)
    import json

    assert GRPOConfig(**json.loads(config.to_json())) == config
