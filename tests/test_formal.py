"""The formal run's config: proposals parsed and vetted by the memory arithmetic; small-issue rules; a launch
that would not run the plan is refused, a job that ran other values is a serious anomaly; the formal run in a
folder of its own, its log found and watched live wherever the template writes it."""

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import git
import pytest
from conftest import REFERENCE, SOURCE_OF_TRUTH, example_generated

from orchestrator.sources.config_file import read_config
from orchestrator.demo import example, recorded_roles
from orchestrator.training.formal import (DEFAULT_MODEL, FormalSpec, is_stand_in, mostly_unparseable,
                                 parse_proposal, token_cap_raise, vet)
from orchestrator.graph import after_formal_train
from orchestrator.nodes.finish import finish
from orchestrator.nodes.train import launch_refusal, mismatch_evidence
from orchestrator.training.machine import GPU, ProbeResult, SlurmNode
from orchestrator.sources.roles import ConfigRoles, to_args, validate_roles

H100 = ProbeResult(gpus=[GPU(0, "NVIDIA H100 80GB HBM3", 81559)], cuda_version="12.4", driver_version="550",
                   torch_version="2.13", torch_cuda_available=True, slurm=False, slurm_partitions=[], slurm_info=None,
                   cpu_count=16, memory_total_gib=128.0, hostname="gpu", platform="Linux")


@pytest.fixture(scope="module")
def config_cls():
    return read_config(SOURCE_OF_TRUTH / "grpo_config.py")


@pytest.fixture(scope="module")
def roles(config_cls) -> ConfigRoles:
    return validate_roles(recorded_roles(example("cleanup")), config_cls.kinds, cli_possible=True)


def test_proposal_is_read_from_a_json_block():
    assert parse_proposal('Here:\n```json\n{"episodes": 400, "bf16": true}\n```\nbecause...') == \
        {"episodes": 400, "bf16": True}


def test_a_proposal_without_json_is_an_error_for_the_model():
    with pytest.raises(ValueError, match="one JSON object"):
        parse_proposal("I suggest more episodes.")


def test_a_value_only_proposal_that_fits_is_accepted(config_cls, roles):
    merged = vet({"episodes": 400, "micro_batch_size": 8}, config_cls, roles, DEFAULT_MODEL, H100)
    assert merged["episodes"] == 400 and merged["model_name"] == DEFAULT_MODEL


def test_a_new_field_is_refused(config_cls, roles):
    with pytest.raises(ValueError, match="never adds new fields"):
        vet({"num_epochs": 3}, config_cls, roles, DEFAULT_MODEL, H100)


def test_a_config_that_cannot_fit_is_refused_with_the_arithmetic(config_cls, roles):
    huge = {"micro_batch_size": 64, "max_thinking_tokens": 4096, "gradient_checkpointing": False}
    with pytest.raises(ValueError, match="do not fit in memory") as err:
        vet(huge, config_cls, roles, DEFAULT_MODEL, H100)
    assert "GiB" in str(err.value)


def test_a_cpu_run_through_slurm_is_sized_to_the_nodes_not_this_machine(config_cls, roles, tiny_model_dir):
    """The tiny model fits this machine's RAM; a cluster whose nodes have 64 MB each cannot hold it."""
    cluster = dataclasses.replace(H100, gpus=[], slurm=True, slurm_partitions=["p"],
                                  slurm_nodes=[SlurmNode("n1", ("p",), 2, 64, 0, "idle")])
    vet({}, config_cls, roles, str(tiny_model_dir), cluster)
    with pytest.raises(ValueError, match="no GPU: the smallest SLURM node, n1 0.1 GiB"):
        vet({}, config_cls, roles, str(tiny_model_dir), cluster, use_slurm=True)


def test_config_values_come_from_the_dataclass(config_cls):
    assert config_cls.defaults["model_name"] == DEFAULT_MODEL


def test_arguments_use_the_config_parser_spelling():
    assert to_args({"bf16": False, "episodes": 8}) == ["--bf16", "false", "--episodes", "8"]


def test_truncated_outputs_double_the_token_caps(roles):
    config = {"max_thinking_tokens": 256, "max_action_tokens": 48}
    assert token_cap_raise({"completion_clipped_ratio_mean": 0.8}, config, roles) == \
        {"max_thinking_tokens": 512, "max_action_tokens": 96}
    assert token_cap_raise({"completion_clipped_ratio_mean": 0.1}, config, roles) == {}


def test_one_shared_cap_is_raised_once():
    shared = ConfigRoles({"thinking_cap": "max_completion_length", "action_cap": "max_completion_length"}, "cli")
    assert token_cap_raise({"completion_clipped_ratio_mean": 0.9}, {"max_completion_length": 3000}, shared) == \
        {"max_completion_length": 4096}
    capless = ConfigRoles({}, "cli")
    assert token_cap_raise({"completion_clipped_ratio_mean": 0.9}, {}, capless) == {}


def test_mostly_unparseable_actions_are_a_small_issue():
    assert mostly_unparseable({"invalid_action_rate_last_quarter": 0.9})
    assert not mostly_unparseable({"invalid_action_rate_last_quarter": 0.1})


def test_the_tiny_model_is_a_stand_in(tiny_model_dir: Path):
    assert is_stand_in(str(tiny_model_dir)) and not is_stand_in(DEFAULT_MODEL)


@pytest.mark.parametrize("state,route", [
    ({"restart_formal": True}, "formal_train"),
    ({"evidence": {"check": "formal_train"}}, "fix"),
    ({}, "review"),
    ({"until": "formal_train"}, "finish"),
    ({"status": "blocked", "restart_formal": True}, "finish"),
])
def test_after_the_formal_run(state, route):
    assert after_formal_train(state) == route


def hidden_cap(folder: Path) -> None:
    """A thinking cap hidden from the static launch rule: a bash array expanded after "$@"."""
    script = folder / "launch_training.sh"
    text = script.read_text().replace("set -euo pipefail", "set -euo pipefail\nEXTRA=(--max_thinking_tokens 8)", 1)
    script.write_text(text.replace('train.py "$@"', 'train.py "$@" "${EXTRA[@]}"'))


def test_a_launch_that_would_not_run_the_plan_is_refused_before_it_starts(tmp_path: Path):
    folder, _ = example_generated(tmp_path, "cleanup")
    plan = ["--max_thinking_tokens", "16", "--episodes", "8"]
    assert launch_refusal(folder, plan, gpus=0) is None and launch_refusal(folder, plan, gpus=2) is None
    hidden_cap(folder)
    for gpus in (0, 2):
        evidence = launch_refusal(folder, plan, gpus=gpus)
        assert evidence["kind"] == "launch_overrides_plan" and evidence["files"] == ["launch_training.sh"]
        assert "--max_thinking_tokens 8 after the orchestrator's --max_thinking_tokens 16" in evidence["summary"]
        assert "EXTRA=(--max_thinking_tokens 8)" in evidence["text"]  # the launch script itself is in the evidence


def test_a_job_that_ran_other_values_than_the_plan_is_a_serious_anomaly_in_the_report(tmp_path: Path):
    folder, _ = example_generated(tmp_path, "cleanup")
    hidden_cap(folder)
    evidence = mismatch_evidence(folder, {"max_thinking_tokens": [16, 8]}, ["--max_thinking_tokens", "16"])
    assert evidence["kind"] == "config_mismatch" and "planned 16, ran 8" in evidence["summary"]
    assert "EXTRA=(--max_thinking_tokens 8)" in evidence["text"]
    assert after_formal_train({"evidence": evidence}) == "fix"
    events = []
    ctx = SimpleNamespace(run_id="r1", run_dir=tmp_path / "run", log=SimpleNamespace(record=events.append),
                          on_event=lambda line: None)
    attempts = [{"node": "formal_train", "attempt": 1, "outcome": "finished (config_mismatch)", "sha": "abc",
                 "tokens": 10, "anomaly": {"kind": evidence["kind"], "summary": evidence["summary"]}},
                {"node": "formal_train", "attempt": 2, "outcome": "finished", "sha": "def", "tokens": 10}]
    finish({"attempts": attempts, "status": "running"}, SimpleNamespace(context=ctx))
    report = (tmp_path / "run" / "report.md").read_text()
    assert "formal_train attempt 1: **config_mismatch**" in report and "planned 16, ran 8" in report


# ---------------------------------------------------------------- the formal run's own folder, its log found live

NESTED_CONFIG = '''from dataclasses import dataclass


@dataclass
class GRPOConfig:
    model_name: str = "none"  # the policy model
    total_updates: int = 100  # optimiser updates
    output_dir: str = "outputs"  # train.logs, Sample_EP.logs and the final model, in output_dir/run_name
    run_name: str = "grpo"  # this run's sub-folder of output_dir
    seed: int = 0  # random seed
'''

# a researcher's template as it often is: everything in OUTPUT_DIR/RUN_NAME, a tracker's files beside train.py;
# after update 1 it waits until the orchestrator has shown that update, which only a live monitor can do
NESTED_TRAIN = '''import os
import sys
import time
from dataclasses import fields
from pathlib import Path

from grpo_config import GRPOConfig

kinds = {f.name: type(f.default) for f in fields(GRPOConfig)}
config = GRPOConfig(**{k[2:]: kinds[k[2:]](v) for k, v in zip(sys.argv[1::2], sys.argv[2::2])})
run = Path(config.output_dir) / config.run_name
run.mkdir(parents=True, exist_ok=True)


def line(kind, **values):
    with open(run / "train.logs", "a") as fh:
        fh.write(kind + " " + " ".join(f"{k}={v}" for k, v in values.items()) + "\\n")


line("start", updates=config.total_updates)
for update in range(1, config.total_updates + 1):
    line("train", update=update, loss=1 / (update + 1), grad_norm=0.5, reward_mean=0.25 * update)
    deadline = time.monotonic() + 60
    while update == 1 and not os.path.exists(os.environ["SHOWN_UPDATE_1"]):
        if time.monotonic() > deadline:
            sys.exit("update 1 was not shown while the job ran")
        time.sleep(0.05)
(run / "Sample_EP.logs").write_text("episode 1: agent 0 waits\\n")
(run / "final_model").mkdir()
(run / "final_model" / "model.safetensors").write_bytes(bytes(64))
Path("wandb").mkdir(exist_ok=True)
Path("wandb", "debug.log").write_text("a tracker's file, beside train.py\\n")
line("done", updates=config.total_updates)
'''

CPU = ProbeResult(gpus=[], cuda_version=None, driver_version=None, torch_version="2.13", torch_cuda_available=False,
                  slurm=False, slurm_partitions=[], slurm_info=None, cpu_count=2, memory_total_gib=8.0,
                  hostname="cpu", platform="Linux")


def test_the_formal_run_shows_live_progress_from_a_log_in_a_config_named_folder_and_leaves_the_workspace_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from orchestrator.base.actionlog import ActionLog
    from orchestrator.llm import ReplayLLM
    from orchestrator.nodes.train import formal_train
    from orchestrator.run.runs import latest_formal_metrics
    from orchestrator.run.state import RunContext
    from orchestrator.base.workspace import Workspace

    root = tmp_path / "project"
    source = root / "source_of_truth"
    source.mkdir(parents=True)
    (source / "grpo_config.py").write_text(NESTED_CONFIG)
    workspace = Workspace.open(root / "workspace")
    workspace.checkout_run_branch("r1")
    for name, text in (("grpo_config.py", NESTED_CONFIG), ("train.py", NESTED_TRAIN),
                       ("launch_training.sh", (REFERENCE / "launch_training.sh").read_text())):
        workspace.write(f"generated/{name}", text)
    workspace.commit(["generated"], node="generate_train", attempt=1, outcome="ok", tokens=0)
    shown = root / "shown-update-1"
    monkeypatch.setenv("SHOWN_UPDATE_1", str(shown))
    lines: list[str] = []

    def on_event(line: str) -> None:
        lines.append(line)
        if line.startswith("formal_train: update 1/3"):
            shown.touch()

    run_dir = root / "runs" / "r1"
    ctx = RunContext(run_id="r1", project_root=root, source_of_truth=source, run_dir=run_dir, workspace=workspace,
                     llm=ReplayLLM(['```json\n{"total_updates": 3}\n```']),
                     log=ActionLog(root / "claude.logs", run_dir), formal=FormalSpec(model=str(tmp_path / "model")),
                     on_event=on_event)
    roles = validate_roles({"roles": {"model": "model_name", "updates_total": "total_updates",
                                      "output_folder": "output_dir", "random_seed": "seed"}, "delivery": "cli"},
                           read_config(source / "grpo_config.py").kinds, cli_possible=True)
    state = {"probe": CPU.to_dict(), "roles": roles.to_dict(), "attempts": [], "ledger": {}}
    update = formal_train(state, SimpleNamespace(context=ctx))

    assert update["attempts"][0]["outcome"] == "finished", "\n".join(lines)
    assert [line.split(" reward")[0] for line in lines if line.startswith("formal_train: update")] == [
        "formal_train: update 1/3", "formal_train: update 3/3"]
    # the job ran in the run's own folder; the record names the log where the template wrote it, relative
    folder = run_dir / "formal-1"
    record = json.loads((run_dir / "jobs/formal-1.json").read_text())
    assert record["log_path"] == "./runs/r1/formal-1/outputs/grpo/train.logs" and record["cwd"].startswith("./runs/r1/")
    assert update["formal_log_dir"] == "./runs/r1/formal-1"
    assert (folder / "train.logs").read_text() == (folder / "outputs/grpo/train.logs").read_text()
    assert (folder / "Sample_EP.logs").is_file() and (folder / "code/wandb/debug.log").is_file()
    assert latest_formal_metrics(run_dir, update["formal_log_dir"])["update"] == 3
    # nothing the job wrote is left untracked in the workspace; its logs are committed as the attempt's record
    repo = git.Repo(root / "workspace")
    assert repo.git.status("--porcelain", "--untracked-files=all") == ""
    assert sorted(repo.git.ls_files("training").splitlines()) == [
        f"training/formal-1/{name}" for name in ("Sample_EP.logs", "job.stderr", "job.stdout", "manifest.json",
                                                 "train.logs")]
    assert not list((root / "workspace").rglob("*.safetensors")) and not (root / "workspace/generated/wandb").exists()
