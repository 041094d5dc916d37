"""Probe this machine: GPUs, CUDA, SLURM, CPUs and memory.

Everything is best effort: a missing ``nvidia-smi``, ``sinfo`` or ``torch`` just
means "not there", and a machine without GPUs is a valid answer, never an error.
Commands go through an injectable runner so tests can fake their output.
"""

from __future__ import annotations

import csv
import os
import platform
import re
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from orchestrator.execution import run_command

Runner = Callable[[list[str]], tuple[int, str, str]]

_GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,memory.free,driver_version",
    "--format=csv,noheader,nounits",
]
_SINFO_LINES = 10


@dataclass
class GPU:
    index: int
    name: str
    memory_total_mib: int
    memory_free_mib: int | None = None


@dataclass
class ProbeResult:
    gpus: list[GPU]
    cuda_version: str | None
    driver_version: str | None
    torch_version: str | None
    torch_cuda_available: bool
    slurm: bool
    slurm_partitions: list[str]
    slurm_info: str | None  # the first lines of `sinfo`
    cpu_count: int
    memory_total_gib: float
    hostname: str
    platform: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["gpus"] = [GPU(**gpu) for gpu in data.get("gpus", [])]
        return cls(**values)

    def summary(self) -> str:
        """A few human-readable lines."""
        if self.gpus:
            groups = Counter((gpu.name, gpu.memory_total_mib) for gpu in self.gpus)
            gpus = ", ".join(f"{n} x {name} ({mib} MiB each)" for (name, mib), n in groups.items())
        else:
            gpus = "none (CPU only)"
        cuda = f"CUDA: {self.cuda_version or 'n/a'}"
        if self.driver_version:
            cuda += f" (driver {self.driver_version})"
        if self.torch_version:
            usable = "yes" if self.torch_cuda_available else "no"
            torch = f"torch {self.torch_version} (CUDA available: {usable})"
        else:
            torch = "torch not installed"
        if self.slurm:
            slurm = f"SLURM: partitions {', '.join(self.slurm_partitions) or '(none)'}"
        else:
            slurm = "SLURM: not available"
        return "\n".join(
            [
                f"Host: {self.hostname} ({self.platform}), {self.cpu_count} CPUs, {self.memory_total_gib:.1f} GiB RAM",
                f"GPUs: {gpus}",
                f"{cuda}; {torch}",
                slurm,
            ]
        )


def _int_or_none(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]" and friends
        return None


def _nvidia_smi(run: Runner) -> tuple[list[GPU], str | None, str | None]:
    """GPUs, driver version and CUDA version as nvidia-smi reports them."""
    code, out, _ = run(_GPU_QUERY)
    if code != 0:
        return [], None, None
    gpus, driver = [], None
    for row in csv.reader(out.splitlines(), skipinitialspace=True):
        if len(row) < 5:
            continue
        index = _int_or_none(row[0])
        gpus.append(
            GPU(
                index=index if index is not None else len(gpus),
                name=row[1].strip(),
                memory_total_mib=_int_or_none(row[2]) or 0,
                memory_free_mib=_int_or_none(row[3]),
            )
        )
        driver = driver or row[4].strip() or None
    code, banner, _ = run(["nvidia-smi"])
    match = re.search(r"CUDA Version:\s*([\d.]+)", banner) if code == 0 else None
    return gpus, driver, match.group(1) if match else None


def _torch() -> tuple[str | None, str | None, bool]:
    """torch's version, its CUDA version and whether it can use CUDA."""
    try:
        import torch
    except Exception:  # absent, or a broken install (missing shared libraries)
        return None, None, False
    return torch.__version__, torch.version.cuda, torch.cuda.is_available()


def _torch_gpus() -> list[GPU]:
    """The GPUs torch sees; only asked when nvidia-smi is missing, as it initialises CUDA."""
    import torch

    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append(GPU(i, props.name, props.total_memory // 2**20))
    return gpus


def _slurm(run: Runner) -> tuple[bool, list[str], str | None]:
    if run(["sinfo", "--version"])[0] != 0:
        return False, [], None
    code, out, _ = run(["sinfo", "-h", "-o", "%P"])
    # The default partition is marked with a trailing "*".
    names = [line.strip().rstrip("*") for line in out.splitlines() if line.strip()] if code == 0 else []
    code, out, _ = run(["sinfo"])
    info = "\n".join(out.strip().splitlines()[:_SINFO_LINES]) if code == 0 and out.strip() else None
    return True, list(dict.fromkeys(names)), info


def _memory_total_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0


def probe(run: Runner | None = None) -> ProbeResult:
    """Describe this machine; ``run`` replaces the command runner (for tests)."""
    run = run or run_command
    gpus, driver, cuda = _nvidia_smi(run)
    torch_version, torch_cuda, torch_available = _torch()
    if not gpus and torch_available:
        gpus = _torch_gpus()
    slurm, partitions, info = _slurm(run)
    return ProbeResult(
        gpus=gpus,
        cuda_version=cuda or torch_cuda,
        driver_version=driver,
        torch_version=torch_version,
        torch_cuda_available=torch_available,
        slurm=slurm,
        slurm_partitions=partitions,
        slurm_info=info,
        cpu_count=os.cpu_count() or 1,
        memory_total_gib=_memory_total_gib(),
        hostname=socket.gethostname(),
        platform=platform.platform(),
    )
