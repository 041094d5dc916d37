"""The environment of a SLURM job, for the checks that must see what the formal launch will see: the recorded
launch (rules/recorded_launch.py) and the runtime check's short run, which runs as the batch script of a one-node
job of the planned kind (orchestrator/checks.py), so code that behaves otherwise under SLURM (a patch gated on
`SLURM_JOB_ID`, an agent count read from `SLURM_NTASKS`) shows in the checks.

`srun` runs its command as the job's first task; `scontrol` answers for the job's nodes; `sinfo`, `squeue`,
`module` and the like answer nothing and succeed. On this machine the
job's one node is `localhost`, so a script that reads the node list for its main address reaches this machine.
"""

from __future__ import annotations

import os
from pathlib import Path

JOB_ID = "4242"
LOCAL_NODE = "localhost"
QUIET_PROGRAMS = ("module", "ml", "sbatch", "sinfo", "squeue", "scancel", "sacct", "sstat")  # nothing to do here

SRUN = """#!/usr/bin/env bash
# runs its command as the job's first task (node 0), once srun's own options are passed over
while [ $# -gt 0 ]; do
    case "$1" in
        --) shift; break ;;
        --*=*|-[A-Za-z]?*) shift ;;
        -*) if [ $# -gt 1 ] && ! command -v "$2" >/dev/null 2>&1 && [ ! -e "$2" ]; then shift 2; else shift; fi ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || exit 0
export SLURM_NODEID=0 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_STEP_ID=0
exec "$@"
"""

QUIET = "#!/usr/bin/env bash\nexit 0\n"
LOCAL_SCONTROL = """#!/usr/bin/env bash
# answers like scontrol for the one-node job of the runtime check, whose node is this machine
case "${1:-} ${2:-}" in
    "show hostname"*) echo "${SLURMD_NODENAME:-localhost}" ;;
    "show job"*) echo "JobId=${SLURM_JOB_ID:-0} JobName=grpo NumNodes=1 NodeList=${SLURMD_NODENAME:-localhost}" ;;
    "show node"*) echo "NodeName=${SLURMD_NODENAME:-localhost} CPUTot=${SLURM_CPUS_ON_NODE:-1}" ;;
esac
exit 0
"""


def slurm_environment(nodes: int, gpus: int, submit_dir: Path, node: str = "node1", cpus: int = 8) -> dict[str, str]:
    """What SLURM sets for the batch script of a job of `nodes` nodes (one task each, `gpus` GPUs and `cpus` CPUs
    each), as its first node (`node`; the others node2, ...) sees it."""
    nodelist = node if nodes == 1 else f"node[1-{nodes}]"
    per_node = (lambda value: str(value)) if nodes == 1 else (lambda value: f"{value}(x{nodes})")
    env = {"SLURM_JOB_ID": JOB_ID, "SLURM_JOBID": JOB_ID, "SLURM_JOB_NAME": "grpo", "SLURM_JOB_PARTITION": "gpu",
           "SLURM_CLUSTER_NAME": "recorded", "SLURM_SUBMIT_DIR": str(submit_dir), "SLURM_SUBMIT_HOST": "login1",
           "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NODELIST": nodelist,
           "SLURM_JOB_NODELIST": nodelist, "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
           "SLURMD_NODENAME": node, "SLURM_TOPOLOGY_ADDR": node, "SLURM_NTASKS": str(nodes),
           "SLURM_NPROCS": str(nodes), "SLURM_NTASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": per_node(1),
           "SLURM_CPUS_ON_NODE": str(cpus), "SLURM_CPUS_PER_TASK": str(cpus),
           "SLURM_JOB_CPUS_PER_NODE": per_node(cpus),
           "SLURM_MEM_PER_NODE": "65536"}
    if gpus:
        env |= {"SLURM_GPUS_ON_NODE": str(gpus), "SLURM_GPUS_PER_NODE": str(gpus),
                "SLURM_JOB_GPUS": ",".join(map(str, range(gpus)))}
    return env


def local_job(bin_dir: Path, submit_dir: Path, gpus: int) -> dict[str, str]:
    """The variables of a one-node SLURM job on this machine whose batch script runs in `submit_dir`, and a PATH
    with `srun` and `scontrol` answering for it (written to `bin_dir`); where this process already runs in a SLURM
    job, its own variables win (the launch will run under them)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("srun", SRUN), ("scontrol", LOCAL_SCONTROL), *((q, QUIET) for q in QUIET_PROGRAMS)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**job_variables(submit_dir, gpus), "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}


def job_variables(submit_dir: Path, gpus: int = 0) -> dict[str, str]:
    """slurm_environment of a one-node job on this machine, but for the variables this process already has."""
    env = slurm_environment(1, gpus, submit_dir, node=LOCAL_NODE, cpus=os.cpu_count() or 1)
    return {k: v for k, v in env.items() if k not in os.environ}
