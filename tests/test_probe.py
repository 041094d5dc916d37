"""Tests for orchestrator.training.machine, with faked nvidia-smi/sinfo and on this machine."""

from __future__ import annotations

import shutil
import sys

import pytest

from orchestrator.base.execution import run_command
from orchestrator.training.machine import GPU, SINFO_NODES, SINFO_TIMEOUT_S, ProbeResult, SlurmNode, probe
from orchestrator.training.slurm_site import PartitionLimits

GPU_CSV = (
    "0, NVIDIA H100 80GB HBM3, 81559, 81016, 550.54.15\n"
    "1, NVIDIA H100 80GB HBM3, 81559, 40200, 550.54.15\n"
)
BANNER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""
SINFO = """\
gpu01|gpu*|64|512000|gpu:h100:4(S:0-1)|idle
gpu02|gpu*|64|512000|gpu:h100:4(S:0-1)|mixed
cpu01|cpu|128|256000|(null)|idle
gpu02|cpu|64|512000|gpu:h100:4(S:0-1)|mixed
"""
PARTITIONS = """\
PartitionName=gpu AllowGroups=ALL Default=YES DefaultTime=01:00:00 MaxNodes=2 MaxTime=2-00:00:00 MinNodes=0 \
MaxCPUsPerNode=UNLIMITED Nodes=gpu[01-02] MaxMemPerNode=UNLIMITED OverTimeLimit=NONE State=UP TotalNodes=2
PartitionName=cpu AllowGroups=ALL Default=NO DefaultTime=NONE MaxNodes=UNLIMITED MaxTime=04:00:00 MinNodes=0 \
MaxCPUsPerNode=64 Nodes=cpu01,gpu02 MaxMemPerNode=128000 OverTimeLimit=NONE State=UP TotalNodes=2
"""


def fake_runner(outputs: dict[str, str]):
    def run(cmd: list[str]) -> tuple[int, str, str]:
        key = " ".join(cmd)
        return (0, outputs[key], "") if key in outputs else (127, "", f"{cmd[0]}: command not found")

    return run


GPU_QUERY = "nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version --format=csv,noheader,nounits"
CLUSTER = fake_runner(
    {
        GPU_QUERY: GPU_CSV,
        "nvidia-smi": BANNER,
        "sinfo -h -N -o %N|%P|%c|%m|%G|%T": SINFO,
        "scontrol show partition -o": PARTITIONS,
    }
)


def test_fake_cluster_is_parsed() -> None:
    result = probe(CLUSTER)
    assert result.gpus == [
        GPU(0, "NVIDIA H100 80GB HBM3", 81559, 81016),
        GPU(1, "NVIDIA H100 80GB HBM3", 81559, 40200),
    ]
    assert (result.cuda_version, result.driver_version) == ("12.4", "550.54.15")
    assert result.slurm and result.slurm_partitions == ["gpu", "cpu"]
    assert result.slurm_nodes == [SlurmNode("gpu01", ("gpu",), 64, 512000, 4, "idle"),
                                  SlurmNode("gpu02", ("gpu", "cpu"), 64, 512000, 4, "mixed"),
                                  SlurmNode("cpu01", ("cpu",), 128, 256000, 0, "idle")]
    assert result.cluster().default_partition == "gpu"
    assert result.cluster().limits(None) == PartitionLimits("gpu", max_time_s=172800, default_time_s=3600, max_nodes=2)
    assert result.cluster().limits("cpu") == PartitionLimits("cpu", max_time_s=14400, max_mem_per_node_mb=128000,
                                                             max_cpus_per_node=64)
    summary = result.summary()
    assert "GPUs: 2 x NVIDIA H100 80GB HBM3 (81559 MiB each)" in summary
    assert ("SLURM: partitions gpu, cpu; 2 node(s) of 64 CPUs, 512000 MB, 4 GPU(s); 1 node(s) of 128 CPUs, "
            "256000 MB, 0 GPU(s); gpu MaxTime 2-00:00:00; cpu MaxTime 04:00:00") in summary


def test_slurm_is_asked_once_and_a_silent_controller_is_not_slurm() -> None:
    """A client whose controller does not answer: one sinfo, cut short (run_command's 124), and no SLURM."""
    asked: list[list[str]] = []

    def run(cmd: list[str]) -> tuple[int, str, str]:
        asked.append(cmd)
        return (124, "", "sinfo: timed out") if cmd[0] == "sinfo" else (127, "", "not found")

    result = probe(run)
    assert [cmd for cmd in asked if cmd[0] == "sinfo"] == [SINFO_NODES]
    assert not result.slurm and result.slurm_nodes == [] and result.cluster() is None
    assert "SLURM: not available (sinfo failed: timed out)" in result.summary()


def test_the_probe_cuts_sinfo_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default runner gives sinfo SINFO_TIMEOUT_S, not the 10 s of other commands."""
    timeouts = {}

    def run_command(cmd, *, timeout_s=10.0, **_):
        timeouts[cmd[0]] = timeout_s
        return 127, "", f"{cmd[0]}: command not found"

    monkeypatch.setattr("orchestrator.training.machine.run_command", run_command)
    probe()
    assert timeouts["sinfo"] == SINFO_TIMEOUT_S <= 5


def test_round_trip_through_dict() -> None:
    result = probe(CLUSTER)
    assert ProbeResult.from_dict(result.to_dict()) == result


def test_nothing_installed_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    result = probe(fake_runner({}))
    assert result.gpus == []
    assert (result.cuda_version, result.driver_version, result.torch_version) == (None, None, None)
    assert not result.torch_cuda_available
    assert (result.slurm, result.slurm_partitions, result.slurm_info) == (False, [], None)
    assert "GPUs: none (CPU only)" in result.summary()
    assert result.cpu_count >= 1 and result.memory_total_gib > 0


def test_missing_binary_gives_127() -> None:
    code, _, err = run_command(["definitely-not-a-binary-xyz"])
    assert code == 127 and "not found" in err


def test_this_machine() -> None:
    """Runs the real probe; on the CPU-only dev machine that means no GPU."""
    import torch

    has_gpu = shutil.which("nvidia-smi") is not None or torch.cuda.is_available()
    result = probe()
    assert bool(result.gpus) == has_gpu
    assert result.torch_cuda_available == torch.cuda.is_available()
    if not has_gpu:
        assert result.summary().splitlines()[1] == "GPUs: none (CPU only)"
    assert result.hostname and result.platform and result.cpu_count >= 1


def test_a_run_probes_once(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A node that runs again (a resume) takes the run's probe; only a run without one probes."""
    from types import SimpleNamespace

    from orchestrator.nodes import generate

    monkeypatch.setattr(generate, "probe", lambda: probe(CLUSTER))
    ctx = SimpleNamespace(run_dir=tmp_path / "run")
    first = generate.run_probe({}, ctx)
    assert (tmp_path / "run" / "probe.json").exists()
    monkeypatch.setattr(generate, "probe", lambda: pytest.fail("probed twice in one run"))
    assert generate.run_probe({"probe": first.to_dict()}, ctx) == first
