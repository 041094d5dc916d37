"""Two nodes for real: one job trains the Cleanup reference set across the local cluster's two nodes
(scripts/slurm_local.sh: each slurmd in its own network and UTS namespace), one process per node in one gloo
group, on the tiny agent, submitted and watched by the orchestrator (make_job, squeue, scontrol).

- The orchestrator is killed right after it submitted the job; a second one adopts it (no second sbatch) and
  follows it to its end. Both ranks, one per node, end with the same parameters, changed by training; the
  loss and gradient norm are those of one process on both ranks' samples; one rank alone writes the logs.
- A node's training process killed mid-run fails the job within seconds, classified with that rank's report.
- A serious anomaly cancels the job; nothing of it is left on either node.

The job's train.py runs the reference train.py (as grpo_train.py) and writes, per rank, its host, its parameters'
checksums before and after training, and the samples and statistics of its first update; the returns it hands
to the group advantages carry a scripted spread, so training changes the parameters on any CPU.
Skipped without root, slurm-wlm, munge or iproute2 (tests/slurm_cluster.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import slurm_cluster
from conftest import ROOT, example_generated, scripted_spread

from orchestrator.training.monitor import MonitorConfig, Progress
from orchestrator.tiny.agent import local_tiny_agent
from orchestrator.training.job import make_job, runner_in

pytestmark = [pytest.mark.slow, pytest.mark.tiny_agent("cleanup"), *slurm_cluster.requires_cluster]

TWO_NODES = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=2048M"]
# one update of 2 ranks x a group of 4 episodes of 2 turns: 32 samples per rank, one micro-batch, one optimiser step
SHORT = ["--episodes", "8", "--group_size", "4", "--max_env_steps", "2", "--max_thinking_tokens", "24",
         "--max_action_tokens", "24", "--beta", "0", "--learning_rate", "1e-4", "--warmup_steps", "0",
         "--micro_batch_size", "64", "--gradient_checkpointing", "false", "--eval_interval", "1000",
         "--eval_episodes", "1", "--sample_log_interval", "4", "--save_interval", "0", "--output_dir", "outputs"]
# the faults: ten quick updates (no learning asked of them), time to fail mid-run
QUICK = ["--episodes", "40", "--group_size", "2", "--max_env_steps", "1", "--max_thinking_tokens", "8",
         "--max_action_tokens", "8", "--beta", "0", "--gradient_checkpointing", "false", "--eval_interval", "1000",
         "--eval_episodes", "1", "--sample_log_interval", "1000", "--save_interval", "0", "--output_dir", "outputs"]
HALT_WAIT_S = 120.0

WATCHED_TRAIN = '''"""The reference train.py (grpo_train.py), watched for the two-node test."""
import dataclasses
import hashlib
import json
import socket
from pathlib import Path

import grpo_train as T

''' + scripted_spread("T") + '''
seen = {}
build_trainer, train_on_rollout = T.build_trainer, T.Trainer.train_on_rollout


def checksum(trainer):
    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.accelerator.unwrap_model(trainer.model).state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def watched_build_trainer(*args):
    trainer = build_trainer(*args)
    seen.update(trainer=trainer, before=checksum(trainer))
    return trainer


def watched_train_on_rollout(self, samples):
    stats = train_on_rollout(self, samples)
    seen.setdefault("first_update", {"samples": [dataclasses.asdict(s) for s in samples], "stats": stats})
    return stats


T.build_trainer, T.Trainer.train_on_rollout = watched_build_trainer, watched_train_on_rollout
T.main()
trainer = seen["trainer"]
Path(f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(
    {"host": socket.gethostname(), "before": seen["before"], "after": checksum(trainer), **seen["first_update"]}))
'''

ORCHESTRATOR = '''import json, sys
from pathlib import Path
from orchestrator.training.job import make_job
folder, record, args, options = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
make_job(folder / "launch_training.sh", args, use_slurm=True, log_path=folder / "train.logs", poll_s=0.5,
         record=record, sbatch_options=options).run()
'''


@pytest.fixture(scope="module")
def cluster() -> None:
    slurm_cluster.start()


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder, _ = example_generated(tmp_path_factory.mktemp("agent"), "cleanup")
    return local_tiny_agent(ROOT, folder)


def training_set(tmp_path: Path) -> Path:
    """The Cleanup reference set, its train.py watched."""
    folder, _ = example_generated(tmp_path, "cleanup")
    (folder / "train.py").rename(folder / "grpo_train.py")
    (folder / "train.py").write_text(WATCHED_TRAIN)
    return folder


def ranks(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


class Recorder:
    """The orchestrator's SLURM commands, run for real and remembered."""

    def __init__(self, folder: Path) -> None:
        self.run, self.commands = runner_in(folder, env={"PYTHON": sys.executable}), []

    def __call__(self, cmd: list[str]) -> tuple[int, str, str]:
        self.commands.append(cmd[0])
        return self.run(cmd)


@pytest.fixture(scope="module")
def adopted_run(cluster, agent: str, tmp_path_factory: pytest.TempPathFactory):
    """Submitted by an orchestrator killed right after sbatch; adopted and followed to its end by a second one."""
    folder = training_set(tmp_path_factory.mktemp("two-nodes"))
    args = ["--model_name", agent, *SHORT]
    record, marker = folder / "jobs" / "formal-1.json", folder / "halted"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCHESTRATOR_HALT_AT": "job_start:formal-1",
           "ORCHESTRATOR_HALT_FILE": str(marker)}
    first = subprocess.Popen([sys.executable, "-c", ORCHESTRATOR, str(folder), str(record), json.dumps(args),
                              json.dumps(TWO_NODES)], cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + HALT_WAIT_S
    while not marker.exists():
        assert first.poll() is None, f"the first orchestrator ended (rc {first.returncode}) before submitting"
        assert time.monotonic() < deadline, "the first orchestrator did not submit in time"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    submitted = json.loads(record.read_text())["slurm_job_id"]

    commands, progress = Recorder(folder), []
    started = time.monotonic()
    job = make_job(folder / "launch_training.sh", args, use_slurm=True, log_path=folder / "train.logs", poll_s=0.5,
                   timeout_s=600, record=record, sbatch_options=TWO_NODES, run=commands, on_progress=progress.append)
    result = job.run()
    print(f"two-node job {job.slurm_job_id}: adopted and followed for {time.monotonic() - started:.1f} s")
    return folder, submitted, job, result, commands.commands, progress


def test_an_orchestrator_killed_after_sbatch_is_followed_by_the_next_one_to_the_end(adopted_run):
    folder, submitted, job, result, commands, progress = adopted_run
    assert job.slurm_job_id == submitted and "sbatch" not in commands  # adopted, not submitted again
    assert {"squeue", "scontrol"} <= set(commands)
    assert result.status == "finished", (result.anomalies, result.stderr_tail[-3000:])
    assert [p.update for p in progress] == [1]
    state = slurm_cluster.scontrol_job(job.slurm_job_id)
    print(" ".join(f"{key}={state[key]}" for key in ("JobId", "JobState", "ExitCode", "NumNodes", "NodeList")))
    assert (state["JobState"], state["ExitCode"], state["NumNodes"], state["NodeList"]) == \
        ("COMPLETED", "0:0", "2", "node[1-2]")
    assert json.loads((folder / "jobs" / "formal-1.json").read_text())["status"] == "finished"


def test_one_rank_per_node_and_both_end_with_the_same_trained_parameters(adopted_run):
    folder = adopted_run[0]
    rank0, rank1 = ranks(folder)
    for rank, found in enumerate((rank0, rank1)):
        print(f"rank {rank} on {found['host']}: parameters {found['before'][:16]} -> {found['after'][:16]}")
    assert (rank0["host"], rank1["host"]) == ("node1", "node2")
    assert rank0["before"] == rank1["before"] != rank0["after"] == rank1["after"]


def test_the_loss_is_the_single_process_loss_of_both_ranks_samples(adopted_run, agent: str, reference_train):
    """The global token mean: what two ranks logged is what one process computes on all their samples."""
    from accelerate import Accelerator

    folder, result = adopted_run[0], adopted_run[3]
    rank0, rank1 = ranks(folder)
    assert len(rank0["samples"]) == len(rank1["samples"]) == 32
    two_nodes = {key: (rank0["stats"][key] + rank1["stats"][key]) / 2 for key in ("loss", "gradNorm")}
    [logged] = [r.values for r in result.records if r.kind == "train"]
    assert logged["loss"] == pytest.approx(two_nodes["loss"], rel=1e-5)  # train.logs: 6 significant digits

    T = reference_train
    config = T.GRPOConfig.from_args(["--model_name", agent, *SHORT])
    trainer = T.build_trainer(config, Accelerator(), 1)
    one = trainer.train_on_rollout([T.Sample(**s) for s in rank0["samples"] + rank1["samples"]])
    print(f"loss: two nodes {two_nodes['loss']!r}, one process {one['loss']!r}; gradNorm: two nodes "
          f"{two_nodes['gradNorm']!r}, one process {one['gradNorm']!r}")
    assert one["loss"] != 0 and one["gradNorm"] > 0
    assert two_nodes["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-7)
    assert two_nodes["gradNorm"] == pytest.approx(one["gradNorm"], rel=1e-5)


def test_one_rank_alone_writes_train_logs_and_sample_ep_logs(adopted_run):
    folder, result = adopted_run[0], adopted_run[3]
    assert [r.kind for r in result.records] == ["start", "train", "eval", "done"]
    assert (folder / "train.logs").read_text().count(" start ") == 1
    assert result.records[0].values["processes"] == 2.0
    assert (folder / "Sample_EP.logs").read_text().count("===== episode ") == 1


def rank_workers(job_id: str, rank: str) -> list[tuple[int, str | None]]:
    """The training process of `rank` (not its launcher): (pid, node)."""
    return [(pid, node) for pid, node, command, environ in slurm_cluster.job_processes(job_id)
            if environ.get("RANK") == rank and "train.py" in command and "accelerate" not in command]


def test_a_node_losing_its_training_process_fails_the_job_with_that_ranks_report(cluster, agent: str,
                                                                                  tmp_path: Path):
    folder = training_set(tmp_path)
    killed: list[tuple[int, str | None, float]] = []

    def kill_rank_1(progress: Progress) -> None:
        if not killed:
            [(pid, node)] = rank_workers(job.slurm_job_id, "1")
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, node, time.monotonic()))

    job = make_job(folder / "launch_training.sh", ["--model_name", agent, *QUICK], use_slurm=True,
                   log_path=folder / "train.logs", poll_s=0.5, timeout_s=600, sbatch_options=TWO_NODES,
                   monitor=MonitorConfig(hang_seconds=120), on_progress=kill_rank_1)
    result = job.run()
    pid, node, at = killed[0]
    print(f"killed rank 1 (pid {pid}) on {node}; {result.status} ({result.failure_class}) "
          f"{time.monotonic() - at:.1f} s later: {result.anomalies[0].message}")
    assert node == "node2"
    assert result.status == "failed" and result.failure_class == "killed"
    assert (f"failed first: rank 1 (local_rank: 0) on node2: exit code -9 (Signal 9 (SIGKILL) received by PID {pid})"
            in result.anomalies[0].message)
    assert "host      : node2" in result.anomalies[0].evidence
    assert time.monotonic() - at < 60  # it ended by itself, long before the monitor would call it hung
    assert slurm_cluster.scontrol_job(job.slurm_job_id)["JobState"] == "FAILED"
    assert slurm_cluster.leftovers(job.slurm_job_id) == []


def test_a_serious_anomaly_cancels_the_job_on_both_nodes_and_leaves_nothing(cluster, agent: str, tmp_path: Path):
    folder = training_set(tmp_path)
    running: set[str | None] = set()

    def note_nodes(progress: Progress) -> None:
        running.update(node for _, node, _, _ in slurm_cluster.job_processes(job.slurm_job_id))

    # a monitor for which any KL is a blow-up: the first update's line is a serious anomaly
    job = make_job(folder / "launch_training.sh", ["--model_name", agent, *QUICK], use_slurm=True,
                   log_path=folder / "train.logs", poll_s=0.5, timeout_s=600, sbatch_options=TWO_NODES,
                   monitor=MonitorConfig(kl_max=-1.0), on_progress=note_nodes)
    result = job.run()
    left = slurm_cluster.leftovers(job.slurm_job_id)
    print(f"job {job.slurm_job_id} ran on {sorted(running)}; {result.status} ({result.anomalies[0].kind}); "
          f"left after scancel: {left}")
    assert running == {"node1", "node2"}
    assert result.status == "stopped" and result.anomalies[0].kind == "kl_blowup"
    assert slurm_cluster.scontrol_job(job.slurm_job_id)["JobState"] == "CANCELLED"
    assert left == []
