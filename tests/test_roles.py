"""The config's roles: validated against the real dataclass, guessed from names, delivered to train.py
as flags or as values written into grpo_config.py (for a template that parses no command line)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import SOURCE_OF_TRUTH, file_answer, write_transcript

from orchestrator.checks import RuntimeCheckSpec
from orchestrator.sources.config_file import field_help, read_config, set_values
from orchestrator.demo import example, first_guess, recorded_roles
from orchestrator.sources.roles import (CONFIG_FILE, ConfigRoles, corrections, deliver, parses_command_line,
                                        suggest_roles, validate_roles)
from orchestrator.runner import start_run

EXPECTED = {  # role -> field, as a reader of each example's template would map them
    "cleanup": {"model": "model_name", "episodes_total": "episodes", "updates_total": None,
                "group_generations": "group_size", "episode_turns": "max_env_steps", "agent_count": "num_agents",
                "thinking_cap": "max_thinking_tokens", "action_cap": "max_action_tokens",
                "micro_batch": "micro_batch_size", "log_folder": "log_dir", "output_folder": "output_dir",
                "sample_every": "sample_log_interval", "kl_coef": "beta", "precision": "bf16",
                "resume_from": "resume_from"},
    "staghunt": {"model": "model_name_or_path", "episodes_total": None, "updates_total": "max_steps",
                 "group_generations": "num_generations", "episode_turns": "horizon", "agent_count": "num_hunters",
                 "thinking_cap": "max_completion_length", "action_cap": "max_completion_length",
                 "micro_batch": "per_device_train_batch_size", "log_folder": None, "output_folder": "output_dir",
                 "sample_every": "sample_every", "kl_coef": "beta", "precision": "bf16",
                 "resume_from": "resume_from"},
    "spread": {"model": "policy_model", "episodes_total": None, "updates_total": "train_iterations",
               "group_generations": "rollouts_per_group", "episode_turns": "episode_length", "agent_count": "n_agents",
               "thinking_cap": "max_new_tokens_think", "action_cap": "max_new_tokens_act",
               "micro_batch": "minibatch_size", "log_folder": None, "output_folder": "output_dir",
               "sample_every": "sample_every_episodes", "kl_coef": "kl_beta", "precision": "use_bf16",
               "resume_from": "resume_from"},
}


def kinds_of(name: str) -> dict:
    return read_config(example(name).source_of_truth / "grpo_config.py").kinds


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_recorded_mapping_of_each_example_validates(name: str) -> None:
    roles = validate_roles(recorded_roles(example(name)), kinds_of(name), cli_possible=True)
    assert {role: roles.field_of(role) for role in EXPECTED[name]} == EXPECTED[name]
    assert roles.delivery == "cli"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_first_guess_gets_the_sizes_and_caps_right(name: str) -> None:
    ex = example(name)
    text = (ex.source_of_truth / "grpo_config.py").read_text()
    guess = suggest_roles(kinds_of(name), field_help(text), cli_possible=True)["roles"]
    for role in ("model", "group_generations", "episode_turns", "thinking_cap", "action_cap", "micro_batch",
                 "resume_from"):
        assert guess[role] == EXPECTED[name][role], role


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_answer_with_the_guess_s_mistakes_only_maps_every_role(tmp_path: Path, name: str) -> None:
    """The model names only what the first guess got wrong; the committed mapping is the whole one."""
    ex = example(name)
    short = corrections(recorded_roles(ex), first_guess(ex))
    assert len(short["roles"]) < len(EXPECTED[name]) / 2, short  # the guess is mostly right on both examples
    project = tmp_path / "project"
    shutil.copytree(ex.source_of_truth, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    replies = [{"tag": "map_roles", "text": f"```json\n{json.dumps(short)}\n```"}]
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", replies), run_id="r1", until="map_roles")
    assert outcome.status == "done", outcome.reason
    committed = json.loads((project / "workspace/config_roles.json").read_text())
    assert committed["roles"] == validate_roles(recorded_roles(ex), kinds_of(name), cli_possible=True).fields
    assert {role: committed["roles"][role] for role in EXPECTED[name]} == EXPECTED[name]


def test_a_correction_naming_a_field_the_config_lacks_is_refused_like_a_whole_answer(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    bad = {"tag": "map_roles", "text": '```json\n{"roles": {"agent_count": "num_players"}}\n```'}
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", [bad, bad]), run_id="r1",
                        until="map_roles")
    assert outcome.status == "blocked"
    assert "agent_count: 'num_players' is not a GRPOConfig field" in outcome.reason


def test_a_wrong_mapping_is_refused_with_every_problem() -> None:
    kinds = kinds_of("cleanup")
    answer = {"roles": {"model": "model_path", "group_generations": "bf16", "speed": "seed",
                        "micro_batch": "episodes", "episodes_total": "episodes"}, "delivery": "cli"}
    with pytest.raises(ValueError) as error:
        validate_roles(answer, kinds, cli_possible=True)
    message = str(error.value)
    assert "'model_path' is not a GRPOConfig field" in message and "holds a bool" in message
    assert "'speed' is not a role" in message and "given to several roles" in message


def test_cli_delivery_needs_a_template_that_parses_flags() -> None:
    with pytest.raises(ValueError, match="use 'config_file'"):
        validate_roles({"roles": {}, "delivery": "cli"}, kinds_of("cleanup"), cli_possible=False)


def test_detecting_command_line_parsing() -> None:
    staghunt = example("staghunt").source_of_truth
    assert parses_command_line((staghunt / "grpo_template.py").read_text())
    assert not parses_command_line("def main():\n    train(GRPOConfig())\n")


def test_set_values_rewrites_plain_and_field_defaults_only() -> None:
    text = ('from dataclasses import dataclass, field\n\n@dataclass\nclass GRPOConfig:\n'
            '    lr: float = 1e-6  # the learning rate\n'
            '    name: str = field(default="big/model", metadata={"help": "Hub id — or path."})\n'
            '    steps: int = 10\n')
    out = set_values(text, {"name": "/tmp/tiny", "steps": 2})
    assert "name: str = field(default='/tmp/tiny', metadata={\"help\": \"Hub id — or path.\"})" in out
    assert "steps: int = 2\n" in out and "lr: float = 1e-6  # the learning rate" in out
    with pytest.raises(ValueError, match="not a GRPOConfig field"):
        set_values(text, {"nope": 1})


def test_deliver_as_flags_or_into_the_config(tmp_path: Path) -> None:
    config = tmp_path / "grpo_config.py"
    shutil.copy(SOURCE_OF_TRUTH / "grpo_config.py", config)
    flags = ConfigRoles({}, "cli")
    assert deliver(flags, {"episodes": 4, "bf16": False}, config) == ["--episodes", "4", "--bf16", "false"]
    assert config.read_text() == (SOURCE_OF_TRUTH / "grpo_config.py").read_text()
    assert deliver(ConfigRoles({}, CONFIG_FILE), {"episodes": 4, "bf16": False}, config) == []
    values = read_config(config).defaults
    assert values["episodes"] == 4 and values["bf16"] is False


def _without_command_line(folder: Path) -> None:
    """The Cleanup triple turned into one whose template parses no flags: values must go into the config."""
    config = folder / "grpo_config.py"
    if config.exists():
        text = config.read_text()
        text = text[:text.index("    @classmethod\n    def from_args")].rstrip() + "\n"
        text = text.replace("import argparse\n", "").replace(
            "Override any value from the command line without adding fields:", "Values are set in this file:")
        config.write_text(re.sub(r"\n\s*python train\.py --episodes[^\n]*\n", "\n", text))
    for name in ("grpo_template.py", "train.py"):
        path = folder / name
        if path.exists():
            path.write_text(path.read_text().replace(
                "    train(GRPOConfig.from_args(sys.argv[1:] if argv is None else argv))", "    train(GRPOConfig())"))


@pytest.mark.slow
def test_a_template_without_flags_gets_its_short_run_through_the_config(tmp_path: Path, tiny_model_dir: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    _without_command_line(project / "source_of_truth")
    reference = tmp_path / "reference"
    shutil.copytree(example("cleanup").reference, reference)
    _without_command_line(reference)
    assert not parses_command_line(*(p.read_text() for p in (project / "source_of_truth").glob("*.py")))
    guess = suggest_roles(read_config(project / "source_of_truth" / "grpo_config.py").kinds,
                          cli_possible=False)
    replies = [{"tag": "map_roles", "text": f"```json\n{json.dumps(guess)}\n```"}] + [
        {"tag": tag, "text": file_answer(*names, folder=reference)}
        for tag, names in (("generate_helpers", ("helpers.py",)),
                           ("generate_prompts", ("prompt_template.py",)), ("generate_train", ("train.py",)),
                           ("generate_launch", ("launch_training.sh",)))]
    spec = RuntimeCheckSpec(model=str(tiny_model_dir), real_model=False, episodes=2, group=2, turns=2, token_cap=4,
                            cpu_processes=1)
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", replies), run_id="r1",
                        runtime_check=spec, until="runtime_check")
    assert outcome.status == "done", outcome.reason
    assert outcome.state["roles"]["delivery"] == CONFIG_FILE
    check_dir = project / "runs/r1/runtime_check"
    written = read_config(check_dir / "code/grpo_config.py").defaults
    assert written["model_name"] == str(tiny_model_dir) and written["episodes"] == 2 and written["max_env_steps"] == 2
    start = (check_dir / "logs/train.logs").read_text().splitlines()[0]
    assert "episodes=2" in start and "group_size=2" in start
    # the workspace's copy keeps the researcher's values: the short run's values went into the check's copy only
    workspace_config = (project / "workspace/generated/grpo_config.py").read_text()
    assert workspace_config == (project / "source_of_truth/grpo_config.py").read_text()


@pytest.mark.parametrize(("dropped", "reason"), [
    (("model",), "model: no field is mapped"),
    (("episodes_total", "updates_total"), "episodes_total, updates_total: neither is mapped"),
])
def test_a_mapping_without_the_model_or_a_training_length_is_refused(dropped: tuple[str, ...], reason: str) -> None:
    answer = recorded_roles(example("cleanup"))
    answer = {**answer, "roles": {**answer["roles"], **{role: None for role in dropped}}}
    with pytest.raises(ValueError, match=reason):
        validate_roles(answer, kinds_of("cleanup"), cli_possible=True)


@pytest.mark.parametrize(("name", "other_games_words"), [("cleanup", ("stag", "hare", "hunter")),
                                                         ("staghunt", ("apple", "river", "clean"))])
def test_the_demo_plays_back_each_examples_own_review(name: str, other_games_words: tuple[str, ...]) -> None:
    from orchestrator.demo import transcript

    review = next(r["text"] for r in transcript(example(name))["replies"] if r["tag"] == "review")
    assert review.count("\n## ") >= 3
    assert not re.search(rf"\b({'|'.join(other_games_words)})s?\b", review, re.I)
