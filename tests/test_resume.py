"""Exact resume in each example template: a run resumed from its checkpoint at update 1 ends with the parameters of
the run that was never interrupted, logs updates 2 and 3 with the very same values, and continues train.logs with
the next update number.

Both runs happen in one interpreter per example (the imports are paid once): the uninterrupted one saves a
checkpoint every update; the resumed one starts in a second folder that holds what a job killed during update 2
leaves (checkpoint-1, and train.logs up to update 1), with `--resume_from latest`, as a job resubmitted after a time
limit does. The comparison can fail only if the parameters move, so every update has a gradient by construction:
the returns handed to the template's own `group_advantages` carry a scripted spread (0, 1, 2, ... down the group),
the same in both runs, so the advantages are never all zero whatever tokens this CPU samples. A resume that lost
the generator state, the optimiser's moments or the schedule's step still samples, scores or steps differently."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, example_generated, scripted_spread

from orchestrator.training.logformat import read_log
from orchestrator.training.monitor import current_run
from orchestrator.tiny.agent import local_tiny_agent


@dataclass(frozen=True)
class Example:
    model: str  # the flag naming the model
    args: tuple[str, ...]  # three updates, a checkpoint after each
    run: str  # the run's folder below --output_dir: train.logs and the checkpoints


EXAMPLES = {
    "cleanup": Example("--model_name", (
        "--episodes", "9", "--group_size", "3", "--max_env_steps", "1", "--max_thinking_tokens", "4",
        "--max_action_tokens", "40", "--beta", "0.04", "--learning_rate", "1e-3", "--warmup_steps", "1",
        "--gradient_checkpointing", "false", "--eval_interval", "2", "--eval_episodes", "1",
        "--sample_log_interval", "2", "--save_interval", "1"), "."),
    "staghunt": Example("--model_name_or_path", (
        "--max_steps", "3", "--num_generations", "3", "--horizon", "2", "--grid_size", "4", "--max_completion_length",
        "24", "--beta", "0.04", "--learning_rate", "1e-3", "--warmup_ratio", "0", "--gradient_checkpointing", "false",
        "--sample_every", "2", "--save_steps", "1"), "."),
    "spread": Example("--policy_model", (
        "--train_iterations", "3", "--rollouts_per_group", "3", "--n_agents", "2", "--episode_length", "1",
        "--max_new_tokens_think", "4", "--max_new_tokens_act", "40", "--kl_beta", "0.04", "--adam_lr", "1e-3",
        "--lr_warmup_steps", "1",
        "--grad_checkpointing", "false", "--eval_every_iters", "2", "--eval_rollouts", "1",
        "--sample_every_episodes", "2", "--checkpoint_every_iters", "1", "--run_name", "run"), "run"),
}

# the uninterrupted run into A; B gets A's checkpoint-1 and train.logs up to update 1; the resumed run into B
BOTH_RUNS = """import json, shutil, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from orchestrator.training.logformat import parse_log
import train
""" + scripted_spread("train") + """args_a, args_b, run_a, run_b = json.loads(sys.argv[2]), json.loads(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
sys.argv = sys.argv[:1]
sys.argv[1:] = args_a
train.main()
shutil.copytree(run_a / "checkpoint-1", run_b / "checkpoint-1")
text = (run_a / "train.logs").read_text()
second = next(r for r in parse_log(text) if r.kind == "train" and r.values["update"] == 2.0)
(run_b / "train.logs").write_text("".join(text.splitlines(keepends=True)[: second.line_no - 1]))
sys.argv[1:] = args_b
train.main()
"""


def checksum(folder: Path) -> str:
    """sha256 over a saved model's tensors, by name."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(folder / "model.safetensors").items()):
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def train_lines(log: Path) -> list[dict]:
    return [r.values for r in current_run(read_log(log)) if r.kind == "train"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.tiny_agent(name)) for name in EXAMPLES])
def test_a_resumed_run_ends_with_the_parameters_of_an_uninterrupted_one(name: str, tmp_path: Path):
    example = EXAMPLES[name]
    folder, _ = example_generated(tmp_path, name)
    agent = local_tiny_agent(ROOT, folder)
    a, b = tmp_path / "a", tmp_path / "b"
    run_a, run_b = a / example.run, b / example.run
    run_b.mkdir(parents=True)
    logs = {"cleanup": lambda out: ["--log_dir", str(out)]}.get(name, lambda out: [])
    args_a = [example.model, agent, *example.args, "--output_dir", str(a), *logs(a)]
    args_b = [example.model, agent, *example.args, "--output_dir", str(b), *logs(b), "--resume_from", "latest"]
    both = subprocess.run([sys.executable, "-c", BOTH_RUNS, str(ROOT), json.dumps(args_a), json.dumps(args_b),
                           str(run_a), str(run_b)], cwd=folder, capture_output=True, text=True, timeout=600)
    assert both.returncode == 0, both.stderr[-3000:]

    uninterrupted, resumed = checksum(run_a / "final"), checksum(run_b / "final")
    print(f"{name}: initial {checksum(Path(agent))[:16]}, uninterrupted {uninterrupted[:16]}, resumed {resumed[:16]}")
    assert resumed == uninterrupted != checksum(Path(agent))
    # every update once, the resumed ones with the uninterrupted run's very values (loss, reward, lr, ...)
    ran, continued = train_lines(run_a / "train.logs"), train_lines(run_b / "train.logs")
    assert [line["update"] for line in continued] == [1.0, 2.0, 3.0]
    timeless = [{k: v for k, v in line.items() if k not in ("step_time", "time")} for line in (*ran, *continued)]
    assert timeless[3:] == timeless[:3]
    assert any(line["grad_norm"] > 0 for line in ran)
    assert not (run_b / "checkpoint-1.partial").exists() and (run_b / "checkpoint-2" / "training_state.pt").is_file()
