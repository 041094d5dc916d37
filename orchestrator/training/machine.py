"""Probe this machine: GPUs, CUDA, SLURM, CPUs and memory.

Everything is best effort: a missing ``nvidia-smi``, ``sinfo`` or ``torch`` just
means "not there", and a machine without GPUs is a valid answer, never an error.
Commands go through an injectable runner so tests can fake their output.

SLURM is asked once, with a short timeout: a client whose controller does not answer makes
``sinfo`` wait about 10 s, and the answer (the nodes and their sizes, and each partition's limits from
``scontrol show partition``: MaxTime, MaxNodes, MaxMemPerNode, ...) is the run's, kept in ``probe.json``
and the run state, not asked again.
"""

from __future__ import annotations

import csv
import functools
import os
import platform
import re
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from orchestrator.base.execution import run_command
from orchestrator.training.slurm_site import PartitionLimits, clock, parse_partitions

Runner = Callable[[list[str]], tuple[int, str, str]]

_GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,memory.free,driver_version",
    "--format=csv,noheader,nounits",
]
_SINFO_LINES = 10
SINFO_TIMEOUT_S = 5.0  # a controller that does not answer in this long counts as no SLURM
# one line per node and partition: name|partition (default marked *)|CPUs|memory MB|gres|state
SINFO_NODES = ["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G|%T"]
PARTITIONS = ["scontrol", "show", "partition", "-o"]  # each partition's limits, one line each


@dataclass
class GPU:
    index: int
    name: str
    memory_total_mib: int
    memory_free_mib: int | None = None


@dataclass(frozen=True)
class SlurmNode:
    name: str
    partitions: tuple[str, ...]  # the default partition first when the node is in it
    cpus: int
    memory_mb: int
    gpus: int
    state: str

    def describe(self) -> str:
        return f"{self.name} cpus={self.cpus} mem={self.memory_mb}MB gpus={self.gpus} ({self.state})"


def _gres_gpus(gres: str) -> int:
    """GPUs in a gres string: "gpu:4", "gpu:a100:4(S:0-1)", "gpu:2,shard:8"; 0 for "(null)"."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) > 1 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


@dataclass(frozen=True)
class SlurmCluster:
    nodes: list[SlurmNode]
    default_partition: str | None  # None when no partition is marked default
    partitions: tuple[PartitionLimits, ...] = ()  # each partition's limits, where scontrol said them

    def describe(self) -> str:
        return "; ".join(node.describe() for node in self.nodes) or "no nodes"

    def limits(self, partition: str | None) -> PartitionLimits | None:
        """The limits of `partition` (None: the default one), where known."""
        name = partition or self.default_partition
        return next((p for p in self.partitions if p.name == name), None)


def parse_slurm_nodes(text: str) -> SlurmCluster:
    """``SINFO_NODES``'s answer."""
    rows: dict[str, dict[str, Any]] = {}
    default = None
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 6:
            continue
        name, partition, cpus, memory, gres, state = cells
        if partition.endswith("*"):
            partition = default = partition[:-1]
        row = rows.setdefault(name, {"partitions": [], "cpus": _int_or_none(cpus) or 0,
                                     "memory_mb": _int_or_none(memory) or 0, "gpus": _gres_gpus(gres),
                                     "state": state.rstrip("*~#!%$@^-")})
        row["partitions"].append(partition)
    nodes = [SlurmNode(name, tuple(sorted(dict.fromkeys(row.pop("partitions")), key=lambda p: p != default)), **row)
             for name, row in rows.items()]
    return SlurmCluster(nodes, default)


def slurm_cluster(run: Runner) -> SlurmCluster | str:
    """The cluster's nodes and default partition, from one ``sinfo``, and its partitions' limits from one
    ``scontrol show partition`` (none when it fails); or why there are no nodes (a message)."""
    code, out, err = run(SINFO_NODES)
    if code != 0:
        reason = "timed out" if code == 124 else (err.strip().splitlines() or [f"exit code {code}"])[-1]
        return f"sinfo failed: {reason}"
    cluster = parse_slurm_nodes(out)
    code, out, _ = run(PARTITIONS)
    limits = tuple(parse_partitions(out).values()) if code == 0 else ()
    return SlurmCluster(cluster.nodes, cluster.default_partition, limits)


@dataclass
class ProbeResult:
    gpus: list[GPU]
    cuda_version: str | None
    driver_version: str | None
    torch_version: str | None
    torch_cuda_available: bool
    slurm: bool
    slurm_partitions: list[str]  # the default partition first
    slurm_info: str | None  # the first lines of `sinfo`
    cpu_count: int
    memory_total_gib: float
    hostname: str
    platform: str
    slurm_nodes: list[SlurmNode] = field(default_factory=list)
    slurm_partition_limits: list[PartitionLimits] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["gpus"] = [GPU(**gpu) for gpu in data.get("gpus", [])]
        values["slurm_nodes"] = [SlurmNode(**{**node, "partitions": tuple(node["partitions"])})
                                 for node in data.get("slurm_nodes", [])]
        values["slurm_partition_limits"] = [PartitionLimits(**limits)
                                            for limits in data.get("slurm_partition_limits", [])]
        return cls(**values)

    def cluster(self) -> SlurmCluster | None:
        """The SLURM nodes the probe saw; None when it saw none."""
        if not self.slurm_nodes:
            return None
        return SlurmCluster(self.slurm_nodes, self.slurm_partitions[0] if self.slurm_partitions else None,
                            tuple(self.slurm_partition_limits))

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
            sizes = Counter((n.cpus, n.memory_mb, n.gpus) for n in self.slurm_nodes)
            slurm += "".join(f"; {count} node(s) of {cpus} CPUs, {mb} MB, {gpus} GPU(s)"
                             for (cpus, mb, gpus), count in sizes.items())
            slurm += "".join(f"; {p.name} MaxTime {clock(p.max_time_s)}" for p in self.slurm_partition_limits)
        else:
            slurm = f"SLURM: not available{f' ({self.slurm_info})' if self.slurm_info else ''}"
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


def _slurm(run: Runner) -> tuple[bool, list[str], str | None, SlurmCluster | None]:
    """SLURM usable (a controller answered), its partitions (default first), what sinfo said, the cluster."""
    found = slurm_cluster(run)
    if isinstance(found, str):
        missing = "command not found" in found
        return False, [], None if missing else found, None
    partitions = sorted(dict.fromkeys(p for node in found.nodes for p in node.partitions),
                        key=lambda p: p != found.default_partition)
    info = "\n".join(f"{node.describe()} partitions={','.join(node.partitions)}" for node in found.nodes[:_SINFO_LINES])
    return True, partitions, info or None, found


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
    gpus, driver, cuda = _nvidia_smi(run or run_command)
    torch_version, torch_cuda, torch_available = _torch()
    if not gpus and torch_available:
        gpus = _torch_gpus()
    slurm, partitions, info, cluster = _slurm(run or functools.partial(run_command, timeout_s=SINFO_TIMEOUT_S))
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
        slurm_nodes=cluster.nodes if cluster else [],
        slurm_partition_limits=list(cluster.partitions) if cluster else [],
    )
