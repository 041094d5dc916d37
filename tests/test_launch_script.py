"""The reference launch_training.sh on fake machines: no GPU, one node of GPUs, two SLURM nodes (of GPUs or CPUs),
ZeRO-3.

Fake `nvidia-smi`, `scontrol` and `srun` go first on PATH; a fake PYTHON records the command it gets."""

import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import REFERENCE


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def machine(tmp_path: Path):
    bin_dir, work = tmp_path / "bin", tmp_path / "generated"
    bin_dir.mkdir()
    work.mkdir()
    (work / "launch_training.sh").write_text((REFERENCE / "launch_training.sh").read_text())
    _tool(bin_dir, "python-fake", f'echo "rank=${{SLURM_NODEID:-}} $*" >> {tmp_path}/launched')
    _tool(bin_dir, "scontrol", 'printf "node01\\nnode02\\n"')
    # srun: drop its own options, run the command as node 1 of the job
    _tool(bin_dir, "srun", f'echo "srun $*" >> {tmp_path}/launched; while [[ "$1" == --* ]]; do shift; done; '
                           'SLURM_NODEID=1 "$@"')

    def launch(gpus: int, env: dict | None = None) -> list[str]:
        listing = "".join(f"GPU {i}: NVIDIA H100 (UUID: GPU-{i})\\n" for i in range(gpus))
        _tool(bin_dir, "nvidia-smi", f'printf "{listing}"' if gpus else "exit 9")
        full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python-fake"),
                    **(env or {})}
        for key in ("SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_SUBMIT_DIR", "GRPO_PER_NODE"):
            if key not in (env or {}):
                full_env.pop(key, None)
        subprocess.run(["bash", "launch_training.sh", "--episodes", "3"], cwd=work, env=full_env, check=True,
                       timeout=60)
        return (tmp_path / "launched").read_text().splitlines()
    return launch


def test_without_a_gpu_it_still_uses_accelerate_with_one_cpu_process(machine):
    [line] = machine(0)
    assert "-m accelerate.commands.launch --cpu --num_processes 1" in line and line.endswith("train.py --episodes 3")


def test_one_node_gets_one_process_per_gpu(machine):
    [line] = machine(4)
    assert "-m accelerate.commands.launch --num_processes 4 --num_machines 1 --machine_rank 0" in line
    assert "--main_process_ip 127.0.0.1" in line and line.endswith("train.py --episodes 3")
    assert "--use_deepspeed" not in line


def test_two_slurm_nodes_get_one_launcher_each_with_its_rank(machine):
    lines = machine(8, {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[01-02]"})
    assert lines[0].startswith("srun --nodes=2 --ntasks-per-node=1")
    assert "--num_processes 16 --num_machines 2 --machine_rank 1 --main_process_ip node01" in lines[1]


def test_two_slurm_nodes_without_a_gpu_make_one_gloo_group_across_them(machine):
    lines = machine(0, {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[01-02]"})
    assert lines[0].startswith("srun --nodes=2 --ntasks-per-node=1")
    assert ("-m accelerate.commands.launch --multi_gpu --num_processes 2 --num_machines 2 --machine_rank 1 "
            "--main_process_ip node01") in lines[1]


def test_deepspeed_zero3_is_opt_in(machine):
    [line] = machine(2, {"USE_DEEPSPEED": "1"})
    assert "--use_deepspeed --zero_stage 3" in line and line.endswith("train.py --episodes 3")
