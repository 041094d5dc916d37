"""Memory sizing against the measured H100 anchor, model shapes, and proposal checks."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from safetensors import safe_open

from orchestrator.demo import example, recorded_roles
from orchestrator.training.machine import GPU, ProbeResult, SlurmCluster, SlurmNode
from orchestrator.sources.roles import validate_roles
from orchestrator.training.sizing import (GIB, ModelShape, NodeRequest, check_proposal, estimate_memory, node_request,
                                 shape_from_config, shape_of, training_ram, unmet)
from orchestrator.tiny.model import qwen3_config_for
from source_of_truth.grpo_config import GRPOConfig

QWEN3_4B = "Qwen/Qwen3-4B-Instruct-2507"
H100 = GPU(0, "NVIDIA H100 80GB HBM3", 81559)
BASE = GRPOConfig().to_dict()
KNOWN = {f.name for f in dataclasses.fields(GRPOConfig)}


ROLES = validate_roles(recorded_roles(example("cleanup")), {k: type(v).__name__ for k, v in BASE.items()},
                       cli_possible=True)


def config(**changes) -> dict:
    return {**BASE, **changes}


def values(**changes) -> dict:
    """The Cleanup config's values by role, as estimate_memory reads them."""
    return ROLES.read(config(**changes))


def gb(gib: float) -> float:
    return gib * GIB / 1e9


def test_anchor_4b_with_reference_and_checkpointing_matches_the_h100_measurement() -> None:
    # measured: 49 GB peak for micro-batch 8 x 728 tokens on one H100
    estimate = estimate_memory(shape_of(QWEN3_4B), values(micro_batch_size=8, beta=0.04, bf16=True,
                                                          gradient_checkpointing=True), [H100], seq_len=728)
    assert 35 <= gb(estimate.total_gib) <= 65
    assert estimate.fits and estimate.per_gpu_gib == estimate.total_gib
    assert estimate.reference_gib == estimate.weights_gib == pytest.approx(4.022e9 * 2 / GIB, rel=1e-3)
    assert estimate.optimizer_gib == pytest.approx(2 * estimate.weights_gib)
    for term in ("weights", "reference", "optimizer", "gradients", "activations", "logits", "kv cache", "total"):
        assert term in estimate.explanation
    assert f"{estimate.total_gib:.2f} GiB" in estimate.explanation


def test_large_micro_batch_without_checkpointing_does_not_fit_one_80gb_gpu() -> None:
    estimate = estimate_memory(shape_of(QWEN3_4B), values(micro_batch_size=64, gradient_checkpointing=False),
                               [H100], seq_len=4096)
    assert not estimate.fits
    assert estimate.per_gpu_gib > estimate.available_gib == pytest.approx(0.9 * 81559 / 1024)
    assert "does NOT fit" in estimate.explanation and "without gradient checkpointing" in estimate.explanation


def test_beta_zero_drops_the_reference_model() -> None:
    shape = shape_of(QWEN3_4B)
    with_ref = estimate_memory(shape, values(beta=0.04), [H100])
    without = estimate_memory(shape, values(beta=0.0), [H100])
    assert without.reference_gib == 0
    assert with_ref.total_gib - without.total_gib == pytest.approx(with_ref.weights_gib)
    assert "no reference model" in without.explanation


def test_default_sequence_length_is_prompt_budget_plus_generation_caps() -> None:
    estimate = estimate_memory(shape_of(QWEN3_4B), values(max_thinking_tokens=256, max_action_tokens=48), [H100])
    assert "seq 1328" in estimate.explanation and "assumed" not in estimate.explanation


def test_roles_the_config_lacks_are_assumed_and_said() -> None:
    estimate = estimate_memory(shape_of(QWEN3_4B), {"micro_batch": 4}, [H100])
    assert "seq 2048" in estimate.explanation  # 1024 prompt + 512 + 512 assumed
    assert "assumed      the config has no field for precision (taken as True), thinking_cap (taken as 512)" in \
        estimate.explanation


def test_data_parallel_keeps_a_full_copy_on_the_smallest_gpu() -> None:
    gpus = [H100, GPU(1, "NVIDIA A100-SXM4-40GB", 40960)]
    estimate = estimate_memory(shape_of(QWEN3_4B), values(), gpus, seq_len=728)
    assert estimate.per_gpu_gib == estimate.total_gib
    assert estimate.available_gib == pytest.approx(0.9 * 40)
    assert not estimate.fits
    assert "without ZeRO" in estimate.explanation and "A100" in estimate.explanation


def test_no_gpu_runs_the_tiny_model_in_fp32_against_system_ram(tiny_model_dir: Path) -> None:
    shape = shape_of(str(tiny_model_dir))
    estimate = estimate_memory(shape, values(bf16=True), [], system_ram_gib=16.0)
    assert estimate.fits
    assert estimate.weights_gib == pytest.approx(shape.num_params * 4 / GIB)  # fp32 on CPU, whatever bf16 says
    assert estimate.available_gib == pytest.approx(0.9 * 16.0)
    assert "no GPU" in estimate.explanation


def test_a_slurm_run_without_gpu_is_sized_to_the_smallest_node() -> None:
    machine = ProbeResult(gpus=[], cuda_version=None, driver_version=None, torch_version="2.13",
                          torch_cuda_available=False, slurm=True, slurm_partitions=["cpu"], slurm_info=None,
                          cpu_count=8, memory_total_gib=512.0, hostname="login", platform="Linux",
                          slurm_nodes=[SlurmNode("c1", ("cpu",), 64, 65536, 0, "idle"),
                                       SlurmNode("c2", ("cpu",), 64, 32768, 0, "idle")])
    assert training_ram(machine, use_slurm=True) == (32.0, "the smallest SLURM node, c2")
    assert training_ram(machine, use_slurm=False) == (512.0, "system RAM")  # a run on the login machine
    estimate = estimate_memory(shape_of(QWEN3_4B), values(), [], system_ram_gib=32.0, ram_source="the smallest "
                               "SLURM node, c2")
    assert not estimate.fits and "no GPU: the smallest SLURM node, c2 32.0 GiB" in estimate.explanation


@pytest.mark.parametrize("header, options, expected", [
    ("#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2\n#SBATCH --mem=8G\n", [],
     NodeRequest(1, 2, 8192, 0, ())),
    ("#SBATCH --nodes=1 --cpus-per-task=2 --mem=8G\n", ["--nodes=2", "--cpus-per-task=1", "--mem=2048M"],
     NodeRequest(2, 1, 2048, 0, ())),
    ("#SBATCH -N 2-4 -c4 --ntasks-per-node=2 --gres=gpu:a100:4 -p gpu,big\n", [], NodeRequest(2, 8, None, 4,
                                                                                                ("gpu", "big"))),
    ("#SBATCH --nodes=2 --ntasks=6 --mem-per-cpu=1G --gpus=4\n", [], NodeRequest(2, 3, 3072, 2, ())),
    ("#SBATCH --mem=0\necho go\n#SBATCH --nodes=9\n", [], NodeRequest(1, 1, None, 0, ())),  # after a command: ignored
])
def test_a_jobs_node_request_is_its_header_then_sbatchs_options(header, options, expected) -> None:
    assert node_request("#!/usr/bin/env bash\n" + header, options) == expected


def test_a_request_is_met_by_enough_nodes_of_its_partition() -> None:
    cluster = SlurmCluster([SlurmNode("g1", ("gpu",), 32, 256000, 4, "idle"), SlurmNode("g2", ("gpu",), 32, 256000, 4,
                                                                                        "mixed"),
                            SlurmNode("c1", ("cpu",), 128, 512000, 0, "idle")], "cpu")
    assert unmet(NodeRequest(2, 16, 200000, 4, ("gpu",)), cluster) is None
    refused = unmet(NodeRequest(2, 16, 200000, 4), cluster)  # the default partition has no GPU
    assert refused.startswith("the job asks for 2 node(s) with 16 CPUs, 200000 MB and 4 GPU(s) each, and 0 of the "
                              "1 node(s) of partition cpu can take that: c1 cpus=128 mem=512000MB gpus=0 (idle).")
    assert "2 node(s) in partition gpu" in unmet(NodeRequest(2, 64, None, 0, ("gpu",)), cluster)


def test_shape_of_a_local_tiny_model(tiny_model_dir: Path) -> None:
    shape = shape_of(str(tiny_model_dir))
    with safe_open(tiny_model_dir / "model.safetensors", "pt") as weights:
        stored = sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    # tied embeddings are stored, and counted, once
    assert shape == ModelShape(num_params=stored, hidden_size=64, num_layers=2, vocab_size=shape.vocab_size,
                               num_kv_heads=2, head_dim=16)
    assert shape.vocab_size >= 1024


def test_shape_of_known_hub_id_without_local_copy() -> None:
    shape = shape_of(QWEN3_4B)
    assert shape == ModelShape(num_params=shape.num_params, hidden_size=2560, num_layers=36, vocab_size=151936,
                               num_kv_heads=8, head_dim=128)
    assert shape.num_params == pytest.approx(4.02e9, rel=1e-3)
    # the table agrees with counting the real Qwen3-4B architecture
    assert shape_from_config(qwen3_config_for("qwen3-4b")) == shape
    assert shape_of("nobody/no-such-model") is None


def test_check_proposal_accepts_a_value_only_change() -> None:
    proposal = {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "learning_rate": 5e-7, "beta": 0,
                "bf16": False, "lr_scheduler_type": "linear"}
    assert check_proposal(proposal, BASE, KNOWN, config_cls=GRPOConfig) == []


def test_check_proposal_rejects_new_fields_wrong_types_and_invalid_values() -> None:
    problems = check_proposal({"use_vllm": True, "micro_batch_size": "8", "group_size": 2.5, "bf16": 1,
                               "gradient_checkpointing": "yes"}, BASE, KNOWN, config_cls=GRPOConfig)
    assert len(problems) == 5
    assert any(p.startswith("use_vllm:") and "never adds new fields" in p for p in problems)
    assert any(p.startswith("micro_batch_size: expected int") for p in problems)
    assert any(p.startswith("group_size: expected int") for p in problems)
    assert any(p.startswith("bf16: expected bool") for p in problems)
    assert any(p.startswith("gradient_checkpointing: expected bool") for p in problems)

    assert check_proposal({"micro_batch_size": True}, BASE, KNOWN) == ["micro_batch_size: expected int, got bool True"]
    invalid = check_proposal({"group_size": 1, "top_p": 0.5}, BASE, KNOWN, config_cls=GRPOConfig)
    assert len(invalid) == 1 and "group_size must be >= 2" in invalid[0]
    assert check_proposal({"group_size": 1}, BASE, KNOWN) == []  # without config_cls only names and types
