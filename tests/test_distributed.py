"""Two real training processes on CPU (a gloo group through `accelerate launch`), on the tiny model:
the reference train.py through launch_training.sh, and the template's Trainer on fixed samples, whose
data-parallel gradient must equal the single-process gradient of the same samples (the global token
mean), with parameters identical on every rank and unequal sample counts that do not hang."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from orchestrator.base.execution import execute
from orchestrator.training.logformat import parse_log

pytestmark = pytest.mark.slow

# one optimiser step of plain SGD at lr 1 and no clipping: a parameter's change is minus its gradient
HARNESS = textwrap.dedent('''
    import sys
    from pathlib import Path

    import torch
    from accelerate import Accelerator

    import train as T
    from grpo_config import GRPOConfig

    model, out, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    config = GRPOConfig(model_name=model, micro_batch_size=int(sys.argv[4]), gradient_accumulation_steps=1,
                        beta=0.0, num_iterations=1, bf16=False, gradient_checkpointing=False, max_grad_norm=1e9,
                        temperature=1.0)
    accelerator = Accelerator()
    tokenizer, net, _ = T.load_models(config, accelerator, config.model_name)
    optimizer = torch.optim.SGD(net.parameters(), lr=1.0)
    net, optimizer = accelerator.prepare(net, optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    trainer = T.Trainer(config, accelerator, net, None, tokenizer, optimizer, scheduler)

    def sample(i):  # prompts and completions of different lengths, advantages of both signs
        g = torch.Generator().manual_seed(i)
        prompt = torch.randint(3, 200, (5 + i % 3,), generator=g).tolist()
        completion = torch.randint(3, 200, (2 + i % 4,), generator=g).tolist()
        return T.Sample(prompt, completion, episode=i, agent_id=0, advantage=(-1.0) ** i * (0.5 + i / 10))

    rank, world = accelerator.process_index, accelerator.num_processes
    if mode == "split":  # rank r takes samples r, r + world, ...
        samples = [sample(i) for i in range(4) if i % world == rank]
    elif mode == "unequal":  # rank 0 three samples, rank 1 one: rank 1 pads with zero-weight steps
        samples = [sample(i) for i in ([0, 1, 2] if rank == 0 else [3])]
    else:
        samples = [sample(i) for i in range(4)]
    before = [p.detach().clone() for p in accelerator.unwrap_model(net).parameters()]
    stats = trainer.train_on_rollout(samples)
    after = list(accelerator.unwrap_model(net).parameters())
    torch.save({"delta": torch.cat([(b - a.detach()).flatten() for a, b in zip(after, before)]),
                "steps": stats["optimizer_steps"]}, out / f"{mode}-{world}-rank{rank}.pt")
''')


def launch(folder: Path, processes: int, *args: str, timeout_s: float = 300) -> None:
    env = {"PYTHON": sys.executable, "CPU_PROCESSES": str(processes), "MAIN_PORT": str(29500 + os.getpid() % 400)}
    result = execute(["bash", "launch_training.sh", *args], folder, timeout_s=timeout_s, env=env)
    assert result.ok, result.stderr[-4000:]


def accelerate(folder: Path, processes: int, script: str, *args: str) -> None:
    cpu = (["--cpu", "--num_processes", "1"] if processes == 1 else
           ["--multi_gpu", "--num_processes", str(processes), "--main_process_port", str(29900 + os.getpid() % 90)])
    env = {"ACCELERATE_USE_CPU": "true"} if processes > 1 else {}
    result = execute([sys.executable, "-m", "accelerate.commands.launch", *cpu, "--num_machines", "1",
                      "--mixed_precision", "no", "--dynamo_backend", "no", script, *args], folder, timeout_s=300,
                     env=env)
    assert result.ok, result.stderr[-4000:]


@pytest.fixture(scope="module")
def harness(tmp_path_factory, tiny_model_dir):
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path_factory.mktemp("dist") / "generated")
    (folder / "harness.py").write_text(HARNESS)
    out = folder / "out"
    out.mkdir()
    return folder, out, str(tiny_model_dir)


def test_two_processes_train_once_and_log_once(tmp_path: Path, tiny_model_dir: Path) -> None:
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path / "generated")
    launch(folder, 2, "--model_name", str(tiny_model_dir), "--episodes", "8", "--group_size", "2",
           "--max_env_steps", "2", "--max_thinking_tokens", "8", "--max_action_tokens", "8", "--eval_interval",
           "1000", "--sample_log_interval", "4", "--save_interval", "0", "--output_dir", "outputs")
    records = parse_log((folder / "train.logs").read_text())
    assert [r.kind for r in records] == ["start", "train", "train", "eval", "done"]  # written once, by rank 0
    assert records[0].values["processes"] == 2.0 and records[0].values["updates"] == 2.0
    assert [r.values["episode"] for r in records if r.kind == "train"] == [4.0, 8.0]  # 2 groups of 2 per update
    assert len(list((folder / "outputs").iterdir())) == 1 and (folder / "outputs/final/grpo_config.json").exists()


def test_the_data_parallel_gradient_is_the_single_process_gradient(harness) -> None:
    folder, out, model = harness
    accelerate(folder, 2, "harness.py", model, str(out), "split", "8")
    accelerate(folder, 1, "harness.py", model, str(out), "whole", "8")
    rank0, rank1 = (torch.load(out / f"split-2-rank{r}.pt") for r in (0, 1))
    whole = torch.load(out / "whole-1-rank0.pt")
    assert torch.equal(rank0["delta"], rank1["delta"])  # identical parameters on every rank
    assert whole["delta"].abs().max() > 0
    difference = (rank0["delta"] - whole["delta"]).abs().max().item()
    assert difference <= 1e-5 * whole["delta"].abs().max().item(), difference


def test_unequal_sample_counts_do_not_hang_and_keep_the_ranks_equal(harness) -> None:
    folder, out, model = harness
    accelerate(folder, 2, "harness.py", model, str(out), "unequal", "1")
    rank0, rank1 = (torch.load(out / f"unequal-2-rank{r}.pt") for r in (0, 1))
    assert rank0["steps"] == rank1["steps"] == 3.0  # rank 1 ran two zero-weight steps to match
    assert torch.equal(rank0["delta"], rank1["delta"])
