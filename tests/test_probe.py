"""Tests for orchestrator.probe, with faked nvidia-smi/sinfo and on this machine."""

from __future__ import annotations

import shutil
import sys

import pytest

from orchestrator.execution import run_command
from orchestrator.probe import GPU, ProbeResult, probe

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
PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST
gpu*         up 2-00:00:00      4   idle gpu[01-04]
cpu          up   infinite     10    mix cpu[01-10]
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
        "sinfo --version": "slurm 23.11.4\n",
        "sinfo -h -o %P": "gpu*\ncpu\n",
        "sinfo": SINFO,
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
    assert result.slurm_info == SINFO.strip()
    summary = result.summary()
    assert "GPUs: 2 x NVIDIA H100 80GB HBM3 (81559 MiB each)" in summary
    assert "SLURM: partitions gpu, cpu" in summary


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
