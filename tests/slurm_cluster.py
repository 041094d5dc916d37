"""The SLURM tests' cluster: scripts/slurm_local.sh's two nodes, each slurmd in its own network and UTS namespace.

Every SLURM test file starts it through `start()`; the script keeps a cluster that is already up, so the files
(and xdist workers) share one, and `.ci/run` stops it at exit. What a job left running is found by the
processes' environment (SLURM_JOB_ID) and by slurmstepd's name, on each node by its network namespace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODES = 2
_NEEDED = {"slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "munged": "munge", "ip": "iproute2",
           "nsenter": "util-linux", "unshare": "util-linux"}
_MISSING = sorted({package for program, package in _NEEDED.items() if shutil.which(program) is None})

requires_cluster = [
    pytest.mark.skipif(bool(_MISSING), reason=f"the local SLURM cluster needs {', '.join(_MISSING)}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the local cluster's daemons and namespaces need root"),
]


def start() -> None:
    started = subprocess.run(["bash", str(ROOT / "scripts/slurm_local.sh"), "start", str(NODES)],
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr


def scontrol_job(job_id: str) -> dict[str, str]:
    """`scontrol show job` of a job once it has left COMPLETING (bounded wait): every Key=value field."""
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        fields = dict(re.findall(r"\b(\w+)=(\S*)", out))
        if fields.get("JobState") not in ("COMPLETING", "RUNNING", "PENDING") or time.monotonic() > deadline:
            return fields
        time.sleep(0.2)


def node_of(pid: int) -> str | None:
    """The cluster node whose network namespace holds `pid`; None outside the cluster."""
    try:
        namespace = os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None
    for k in range(1, NODES + 1):
        with_node = Path(f"/run/netns/slurm-node{k}")
        if with_node.exists() and with_node.stat().st_ino == namespace:
            return f"node{k}"
    return None


def job_processes(job_id: str) -> list[tuple[int, str | None, str, dict[str, str]]]:
    """The live processes of a job: (pid, node, command line, environment), its slurmstepds included."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.joinpath("stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X"):
                continue
            command = proc.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            environ = dict(item.split("=", 1) for item in
                           proc.joinpath("environ").read_bytes().decode(errors="replace").split("\0") if "=" in item)
        except (OSError, IndexError):
            continue  # gone meanwhile
        if environ.get("SLURM_JOB_ID") == job_id or command.startswith(f"slurmstepd: [{job_id}."):
            found.append((int(proc.name), node_of(int(proc.name)), command, environ))
    return found


def leftovers(job_id: str, within_s: float = 15.0) -> list[tuple[int, str | None, str, dict[str, str]]]:
    """The job's processes still alive `within_s` after it ended ([] as soon as there are none)."""
    deadline = time.monotonic() + within_s
    while (found := job_processes(job_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found
