"""How long the machine probe waits on a SLURM client whose controller does not answer.

A slurm.conf in a temporary folder (SLURM_CONF) names a controller port nothing listens on: one raw `sinfo`
waits out the client's own retries; the probe asks `sinfo` once, cut at SINFO_TIMEOUT_S (it asked three
times before, two of them waiting). torch is imported first, so the probe's time is its commands'.
Needs the SLURM client (Debian's slurm-client).

    python benchmarks/probe_bench.py
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def silent_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again: nothing listens on it


def main() -> int:
    if shutil.which("sinfo") is None:
        print("no SLURM client (sinfo) on this machine: nothing to measure")
        return 1
    import torch  # noqa: F401  (the probe imports it; its import time is not the probe's commands')

    from orchestrator.training.machine import SINFO_TIMEOUT_S, probe

    folder = Path(tempfile.mkdtemp(prefix="probe-bench-"))
    conf = folder / "slurm.conf"
    conf.write_text(f"ClusterName=silent\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={silent_port()}\n"
                    "AuthType=auth/none\nNodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n")
    os.environ["SLURM_CONF"] = str(conf)
    started = time.monotonic()
    raw = subprocess.run(["sinfo", "-h", "-N"], capture_output=True, text=True)
    raw_s = time.monotonic() - started
    started = time.monotonic()
    result = probe()
    probe_s = time.monotonic() - started
    shutil.rmtree(folder)
    print(f"one raw sinfo against a silent controller: {raw_s:.1f} s (exit {raw.returncode}: "
          f"{raw.stderr.strip().splitlines()[-1] if raw.stderr.strip() else ''})")
    print(f"probe(): {probe_s:.1f} s (sinfo cut at {SINFO_TIMEOUT_S:g} s); slurm={result.slurm}, "
          f"summary: {result.summary().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
