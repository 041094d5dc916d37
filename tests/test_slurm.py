"""A real SLURM (Debian's slurm-wlm and munge, the two-node cluster of scripts/slurm_local.sh), one node per job:
the reference launch script goes through sbatch --test-only, sbatch and squeue; without slurmdbd the end state
comes from scontrol; a serious anomaly in train.logs stops the job with scancel; a request no node can meet is
refused before submission. Skipped where SLURM is not installed (tests/slurm_cluster.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import slurm_cluster

from orchestrator.training.monitor import MonitorConfig
from orchestrator.training.job import SlurmJob, make_job

pytestmark = [pytest.mark.slow, *slurm_cluster.requires_cluster]


@pytest.fixture(scope="module")
def cluster() -> None:
    slurm_cluster.start()


def scontrol(job: SlurmJob) -> dict[str, str]:
    return slurm_cluster.scontrol_job(job.slurm_job_id)


def node_size() -> tuple[int, int]:
    """CPUs and memory (MB) of the local cluster's node."""
    cpus, mem = subprocess.run(["sinfo", "-h", "-N", "-o", "%c %m"], capture_output=True, text=True,
                               check=True).stdout.split()[:2]
    return int(cpus), int(mem)


def test_a_short_run_of_the_reference_set_completes_under_sbatch(cluster, tmp_path: Path, tiny_model_dir: Path):
    """The reference header asks for the node it was generated on; sized here to whatever node CI has."""
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path / "generated")
    args = ["--model_name", str(tiny_model_dir), "--episodes", "2", "--group_size", "2", "--max_env_steps", "2",
            "--max_thinking_tokens", "8", "--max_action_tokens", "8", "--eval_interval", "1000", "--save_interval",
            "0", "--log_dir", str(folder / "logs"), "--output_dir", str(folder / "outputs")]
    job = make_job(folder / "launch_training.sh", args, use_slurm=True, log_path=folder / "logs" / "train.logs",
                   poll_s=0.5, timeout_s=600, env={"PYTHON": sys.executable},
                   sbatch_options=["--cpus-per-task=1", f"--mem={min(2048, node_size()[1])}M"])
    result = job.run()
    assert result.status == "finished", (result.stderr_tail, result.stdout_tail)
    state = scontrol(job)
    assert state["JobState"] == "COMPLETED" and state["ExitCode"] == "0:0"
    assert [r.kind for r in result.records] == ["start", "train", "eval", "done"]
    print(f"SLURM job {job.slurm_job_id}: submitted {state['SubmitTime']}, started {state['StartTime']}, "
          f"ended {state['EndTime']} {state['JobState']}")


def test_a_request_no_node_can_meet_is_refused_with_the_nodes_sizes(cluster, tmp_path: Path):
    cpus, mem = node_size()
    script = fake_training(tmp_path, "true")
    job = make_job(script, [], use_slurm=True, log_path=tmp_path / "train.logs", poll_s=0.5, timeout_s=60,
                   sbatch_options=[f"--cpus-per-task={cpus + 1}"])
    result = job.run()
    assert result.status == "failed" and job.slurm_job_id is None
    message = result.anomalies[0].message
    assert message.startswith(f"not submitted: the job asks for 1 node(s) with {cpus + 1} CPUs")
    assert f"node1 cpus={cpus} mem={mem}MB" in message and f"node2 cpus={cpus} mem={mem}MB" in message
    assert "--cpus-per-task" in message


def test_sbatch_itself_refuses_what_the_check_before_it_does_not_know(cluster, tmp_path: Path):
    """A feature no node has is sbatch's to refuse (--test-only): nothing is submitted."""
    script = fake_training(tmp_path, "true")
    job = make_job(script, [], use_slurm=True, log_path=tmp_path / "train.logs", poll_s=0.5, timeout_s=60,
                   sbatch_options=["--constraint=no-such-feature"])
    result = job.run()
    assert result.status == "failed" and job.slurm_job_id is None
    message = result.anomalies[0].message
    assert message.startswith("sbatch --test-only failed") and "Invalid feature specification" in message


def fake_training(tmp_path: Path, body: str) -> Path:
    """A job script that writes train.logs lines itself (real sbatch, no model), then does `body`."""
    script = tmp_path / "launch_training.sh"
    log = tmp_path / "train.logs"
    script.write_text(f"#!/usr/bin/env bash\n#SBATCH --job-name=fake\n#SBATCH --output={tmp_path}/slurm-%j.out\n"
                      f"echo 'start updates=3' >> {log}\necho 'train update=1 loss=0.5 grad_norm=1' >> {log}\n"
                      f"{body}\n")
    return script


def test_a_serious_anomaly_is_stopped_with_scancel(cluster, tmp_path: Path):
    script = fake_training(tmp_path, f"echo 'train update=2 loss=nan grad_norm=1' >> {tmp_path}/train.logs\n"
                                     "sleep 300")
    job = make_job(script, [], use_slurm=True, log_path=tmp_path / "train.logs", poll_s=0.5, timeout_s=120,
                   monitor=MonitorConfig())
    result = job.run()
    assert result.status == "stopped" and result.anomalies[0].kind == "nan_loss"
    assert scontrol(job)["JobState"] == "CANCELLED"


def test_a_failed_job_is_classified_from_scontrol_without_accounting(cluster, tmp_path: Path):
    script = fake_training(tmp_path, "echo 'Traceback (most recent call last):' >&2\nexit 3")
    job = make_job(script, [], use_slurm=True, log_path=tmp_path / "train.logs", poll_s=0.5, timeout_s=120)
    result = job.run()
    assert result.status == "failed"
    assert scontrol(job)["JobState"] == "FAILED" and result.returncode == 3
    assert any("ended FAILED" in a.message for a in result.anomalies)


def test_the_job_runs_with_this_interpreter_and_the_given_environment(cluster, tmp_path: Path, monkeypatch):
    """sbatch hands the submitter's environment on: PYTHON must name this interpreter even when the venv is not
    activated (PATH's python would lack the training stack), and the job's own variables must arrive."""
    monkeypatch.delenv("PYTHON", raising=False)
    seen = tmp_path / "seen.txt"
    script = fake_training(tmp_path, f"echo \"$PYTHON $JOB_MARKER\" > {seen}\n"
                                     f"echo 'done updates=1' >> {tmp_path}/train.logs")
    job = make_job(script, [], use_slurm=True, log_path=tmp_path / "train.logs", poll_s=0.5, timeout_s=120,
                   env={"JOB_MARKER": "from-make-job"})
    assert job.run().status == "finished"
    assert seen.read_text().split() == [sys.executable, "from-make-job"]
