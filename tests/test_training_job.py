"""Launching and watching training jobs: real child processes for the local job (healthy, NaN, crash,
hang, timeout), a faked sbatch/scontrol/squeue/sacct/scancel for the SLURM job.

No test waits for real time to pass: children report through train.logs, and the hang and timeout
tests advance an injected clock by minutes per poll."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.training.monitor import MonitorConfig, Progress
from orchestrator.training.machine import parse_slurm_nodes
from orchestrator.base.execution import launcher_failures
from orchestrator.training.job import SlurmJob, TrainingJob, make_job

POLL_S = 0.05

CHILD_PRELUDE = '''\
import os, signal, subprocess, sys, time

def _fmt(value):
    return f"{value:.6g}" if isinstance(value, float) else str(value).replace(" ", "_")

def line(kind, **values):
    """RunLogs.line of grpo_template.py."""
    fields = " ".join(f"{k}={_fmt(v)}" for k, v in values.items())
    with open(LOG, "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {kind} {fields}\\n")
    print(f"{kind} {fields}", flush=True)

def train(update, loss=0.01):
    line("train", update=update, episode=8 * update, loss=loss, kl=0.001, grad_norm=0.5, reward_mean=0.1,
         reward_std=0.3, frac_reward_zero_std=0.0, step_time=1.5)

def block():
    while True:
        time.sleep(600)
'''


def write_child(folder: Path, body: str, log: str = "train.logs") -> Path:
    script = folder / "child.py"
    script.write_text(CHILD_PRELUDE + f"LOG = {log!r}\n" + textwrap.dedent(body))
    return script


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


class FakeClock:
    """Starts now; each sleep moves it `step_s` on once `ready()`, and really sleeps the poll before."""

    def __init__(self, step_s: float, ready: Callable[[], bool] = lambda: True) -> None:
        self.now, self.step_s, self.ready = datetime.now(), step_s, ready

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        if self.ready():
            self.now += timedelta(seconds=self.step_s)
        else:
            time.sleep(seconds)


def has_train_line(log: Path) -> Callable[[], bool]:
    return lambda: log.exists() and " train " in log.read_text()


def local_job(tmp_path: Path, script: Path, **kwargs) -> TrainingJob:
    return TrainingJob([sys.executable, str(script)], tmp_path, tmp_path / "train.logs", poll_s=POLL_S, **kwargs)


# ---------------------------------------------------------------- local jobs


def test_nan_loss_stops_the_whole_process_group(tmp_path: Path) -> None:
    # the worker outlives the leader's SIGTERM, as a worker of `accelerate launch` may: it needs the SIGKILL
    script = write_child(tmp_path, """
        worker = subprocess.Popen([sys.executable, "-c", "import pathlib, signal, time; "
                                   "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                   "pathlib.Path('worker.ready').touch(); time.sleep(600)"])
        while not os.path.exists("worker.ready"):
            time.sleep(0.01)
        with open("pids.txt", "w") as fh:
            fh.write(f"{os.getpid()} {worker.pid}")
        print("loading model", file=sys.stderr, flush=True)
        line("start", model="tiny", updates=10, episodes=80)
        train(1)
        train(2)
        train(3, loss=float("nan"))
        block()
    """)
    started = time.monotonic()
    job = local_job(tmp_path, script, stop_grace_s=0.3)
    result = job.run()

    assert time.monotonic() - started < 10
    assert result.status == "stopped" and result.returncode == -15
    assert result.anomalies[0].kind == "nan_loss" and result.anomalies[0].update == 3
    assert [r.values["update"] for r in result.records if r.kind == "train"] == [1, 2, 3]
    pids = [int(p) for p in (tmp_path / "pids.txt").read_text().split()]
    assert pids[0] == job.pid
    assert not any(alive(pid) for pid in pids)
    assert "train update=3" in (tmp_path / "job.stdout").read_text()
    assert "loading model" in (tmp_path / "job.stderr").read_text()
    assert "loading model" in result.stderr_tail


def test_an_invalid_action_rate_that_climbs_stops_the_run_with_the_outputs_that_failed(tmp_path: Path) -> None:
    # the rates of a run whose policy lost its action format (test_monitor's CLIMB); Sample_EP.logs in a folder of
    # its own
    samples = tmp_path / "outputs" / "Sample_EP.logs"
    script = write_child(tmp_path, f"""
        line("start", model="tiny", updates=20, episodes=160)
        os.makedirs("outputs", exist_ok=True)
        with open({str(samples)!r}, "w") as fh:
            fh.write('[agent 1] action output: {{"action": "clean_nearest_appl\\n'
                     '[agent 1] parsed call: null\\n'
                     '[agent 1] helper result: completed=False, played STAY (unparseable: no JSON object)\\n')
        for update, rate in enumerate((0.0625, 0.2625, 0.6, 0.5375, 0.65, 0.8, 0.6125), start=1):
            line("train", update=update, episode=8 * update, loss=0.01, grad_norm=0.5, reward_mean=0.1,
                 invalid_action_rate=rate)
        block()
    """)
    job = local_job(tmp_path, script, stop_grace_s=0.3)
    job.locate_samples = lambda: samples
    result = job.run()

    assert result.status == "stopped" and result.returncode == -15
    anomaly = result.anomalies[0]
    assert (anomaly.kind, anomaly.update, anomaly.serious) == ("invalid_action_rise", 6, True)
    assert "it rose at update 4: 0.5375, update 5: 0.65, update 6: 0.8" in anomaly.message
    assert '[agent 1] action output: {"action": "clean_nearest_appl' in anomaly.evidence
    assert "(unparseable: no JSON object)" in anomaly.evidence
    assert [r.values["update"] for r in result.records if r.kind == "train"] == [1, 2, 3, 4, 5, 6, 7]
    assert job.pid is not None and not alive(job.pid)


def test_healthy_job_finishes_and_reports_progress(tmp_path: Path) -> None:
    # an earlier run's lines in the appended log are not this job's: its NaN must not stop the new one
    (tmp_path / "train.logs").write_text("2026-01-01T00:00:00 start updates=9\n"
                                         "2026-01-01T00:00:01 train update=1 loss=nan\n")
    script = write_child(tmp_path, """
        line("start", model="tiny", updates=3, episodes=24)
        for update in (1, 2, 3):
            train(update)
        line("done", updates=3, episodes=24)
    """)
    seen: list[Progress] = []
    out = tmp_path / "evidence"
    result = local_job(tmp_path, script, on_progress=seen.append, output_dir=out).run()

    assert result.status == "finished" and result.returncode == 0
    assert len([r for r in result.records if r.kind == "train"]) == 3
    assert [r.kind for r in result.records] == ["start", "train", "train", "train", "done"]
    assert not [a for a in result.anomalies if a.serious]
    assert seen and seen[-1].update == 3 and seen[-1].total_updates == 3
    assert "done updates=3" in (out / "job.stdout").read_text() and (out / "job.stderr").exists()


def test_crash_fails_with_its_cause(tmp_path: Path) -> None:
    script = write_child(tmp_path, """
        line("start", model="tiny", updates=3, episodes=24)
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    """)
    result = local_job(tmp_path, script).run()

    assert result.status == "failed" and result.returncode == 1
    assert result.anomalies[0].kind == "cuda_oom"
    assert "Tried to allocate 2.00 GiB" in result.anomalies[0].message
    assert "Traceback" in result.stderr_tail
    assert result.failure_class is None


def test_a_rank_killed_by_a_signal_after_done_is_told_apart_from_a_crash(tmp_path: Path) -> None:
    """train.logs said done, then the launcher reported rank 1 dead of SIGSEGV (its real report, captured):
    the job failed, but not in the code; formal_train takes it as finished instead of paying for a fix."""
    from orchestrator.nodes.train import exited_after_done

    stderr = Path(__file__).parent / "fixtures" / "launcher_segv_stderr.txt"
    script = write_child(tmp_path, f"""
        line("start", model="tiny", updates=2, episodes=8)
        train(1)
        train(2)
        line("done", updates=2, episodes=8)
        sys.stderr.write(open({str(stderr)!r}).read())
        sys.exit(1)
    """)
    result = local_job(tmp_path, script).run()

    assert result.status == "failed" and not [a for a in result.anomalies if a.serious], result.anomalies
    [after] = [a for a in result.anomalies if a.kind == "exit_after_done"]
    assert "rank 1 (local_rank: 1) on localhost: exit code -11 (Signal 11 (SIGSEGV)" in after.message + after.evidence
    assert exited_after_done(result)


def test_hung_child_is_killed_within_seconds(tmp_path: Path) -> None:
    log = tmp_path / "train.logs"
    script = write_child(tmp_path, """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        line("start", model="tiny", updates=10, episodes=80)
        train(1)
        block()
    """)
    clock = FakeClock(60.0, ready=has_train_line(log))
    started = time.monotonic()
    job = local_job(tmp_path, script, clock=clock, sleep=clock.sleep, stop_grace_s=0.2)
    result = job.run()

    assert time.monotonic() - started < 10
    assert result.status == "hung"
    assert result.anomalies[0].kind == "hung" and result.anomalies[0].update == 1
    assert result.returncode == -9
    assert result.seconds >= MonitorConfig().hang_seconds
    assert job.pid is not None and not alive(job.pid)


def test_overall_timeout_stops_the_job(tmp_path: Path) -> None:
    log = tmp_path / "train.logs"
    script = write_child(tmp_path, """
        line("start", model="tiny", updates=10, episodes=80)
        train(1)
        block()
    """)
    clock = FakeClock(60.0, ready=has_train_line(log))
    job = local_job(tmp_path, script, clock=clock, sleep=clock.sleep, timeout_s=300)
    result = job.run()

    assert result.status == "timeout"
    assert not [a for a in result.anomalies if a.serious]
    assert job.pid is not None and not alive(job.pid)


def test_command_that_cannot_start_fails(tmp_path: Path) -> None:
    result = TrainingJob([str(tmp_path / "missing")], tmp_path, tmp_path / "train.logs", poll_s=POLL_S).run()
    assert result.status == "failed" and result.returncode == 127
    assert "cannot start" in result.stderr_tail


def test_make_job_runs_the_launch_script_with_this_python(tmp_path: Path) -> None:
    write_child(tmp_path, """
        os.makedirs(os.path.dirname(LOG), exist_ok=True)
        line("start", model="tiny", updates=1, episodes=8)
        train(1)
        line("done", updates=1, episodes=8)
    """, log=str(tmp_path / "logs" / "train.logs"))
    launch = tmp_path / "launch_training.sh"
    launch.write_text('#!/usr/bin/env bash\nset -euo pipefail\ncd "$(dirname "$0")"\n'
                      'exec "${PYTHON:-python}" child.py "$@"\n')

    job = make_job(launch, ["--log_dir", "logs"], use_slurm=False, log_path=tmp_path / "logs" / "train.logs",
                   poll_s=POLL_S)
    assert isinstance(job, TrainingJob)
    assert job.command[:2] == ["bash", str(launch.resolve())] and job.env["PYTHON"]
    assert job.log_path == tmp_path.resolve() / "logs" / "train.logs"
    result = job.run()
    assert result.status == "finished", result.stderr_tail
    assert [r.kind for r in result.records] == ["start", "train", "done"]


# ---------------------------------------------------------------- SLURM, faked

JOB_ID = "4242"


class FakeSlurm:
    """sbatch/scontrol/squeue/sacct/scancel; squeue answers `states` in turn (None: gone from the queue),
    and `appends[i]` lines are written to train.logs when the i-th squeue call is answered."""

    def __init__(self, tmp_path: Path, states: list[str | None], *, sacct: str | None = "COMPLETED|0:0|None",
                 test_only: tuple[int, str, str] = (0, "", "sbatch: Job 4242 to start at 2026-11-23T09:40:15"),
                 appends: dict[int, list[str]] | None = None, output: str = "", step_s: float = 30.0,
                 scontrol_end: str | None = None, sinfo: str = "node1|debug*|2|3900|(null)|idle\n") -> None:
        self.clock = FakeClock(step_s)  # train.logs lines carry its time, as a real job's carry the real time
        self.log, self.output = tmp_path / "train.logs", tmp_path / f"out-{JOB_ID}.txt"
        self.output.write_text(output)
        self.states, self.sacct, self.test_only = states, sacct, test_only
        self.appends, self.squeue_calls = appends or {}, 0
        self.scontrol_end = scontrol_end  # "STATE|EXIT|REASON" scontrol reports once the job is gone
        self.sinfo = sinfo  # the nodes, as `sinfo -N -o %N|%P|%c|%m|%G|%T` lists them
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str]) -> tuple[int, str, str]:
        self.calls.append(cmd)
        tool = cmd[0]
        if tool == "sbatch":
            return self.test_only if "--test-only" in cmd else (0, f"{JOB_ID};cluster\n", "")
        if tool == "scontrol":
            end = self.scontrol_end or "RUNNING|0:0|None"
            state, code, reason = end.split("|")
            return 0, (f"JobId={JOB_ID} JobName=grpo JobState={state} Reason={reason} ExitCode={code} "
                       f"ReqNodeList=(null) ExcNodeList=(null) NodeList=node1 "
                       f"StdErr={self.output} StdIn=/dev/null StdOut={self.output}\n"), ""
        if tool == "squeue":
            lines = self.appends.get(self.squeue_calls, [])
            with self.log.open("a") as fh:
                fh.writelines(f"{self.clock():%Y-%m-%dT%H:%M:%S} {line}\n" for line in lines)
            self.squeue_calls += 1
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return (0, f"{state}\n", "") if state else (1, "", "slurm_load_jobs error: Invalid job id specified")
        if tool == "sacct":
            if self.sacct is None:  # no slurmdbd: what a cluster without accounting answers
                return 1, "", "Slurm accounting storage is disabled"
            return 0, f"{self.sacct}\n{JOB_ID}.batch|{self.sacct.split('|', 1)[1]}\n", ""
        if tool == "scancel":
            return 0, "", ""
        if tool == "sinfo":
            return 0, self.sinfo, ""
        raise AssertionError(f"unexpected command {cmd}")

    def called(self, tool: str) -> list[list[str]]:
        return [c for c in self.calls if c[0] == tool]


def slurm_job(tmp_path: Path, fake: FakeSlurm) -> SlurmJob:
    return SlurmJob(tmp_path / "launch_training.sh", ["--episodes", "24"], tmp_path, tmp_path / "train.logs",
                    run=fake, poll_s=30.0, clock=fake.clock, sleep=fake.clock.sleep)


TRAIN = "train update={u} episode={e} loss=0.01 kl=0.001 grad_norm=0.5 reward_mean=0.1 step_time=1.5"


def test_sbatch_test_only_failure_fails_without_submitting(tmp_path: Path) -> None:
    message = "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    fake = FakeSlurm(tmp_path, ["RUNNING"], test_only=(1, "", message))
    result = slurm_job(tmp_path, fake).run()

    assert result.status == "failed" and result.slurm_job_id is None and result.failure_class == "failed"
    assert "Requested node configuration is not available" in result.stderr_tail
    assert "node1 cpus=2 mem=3900MB" in result.stderr_tail
    assert result.anomalies[0].kind == "sbatch_refused"
    assert [c[1] for c in fake.called("sbatch")] == ["--test-only"]


@pytest.mark.parametrize("options, asked", [
    (["--nodes=3"], "3 node(s) with 2 CPUs, 8192 MB and 0 GPU(s) each, and 2 of the 2 node(s) of partition debug"),
    (["--mem=16G"], "2 node(s) with 2 CPUs, 16384 MB and 0 GPU(s) each, and 1 of the 2 node(s) of partition debug"),
])
def test_a_request_no_node_set_can_meet_is_refused_before_sbatch(tmp_path: Path, options, asked) -> None:
    """Two nodes, one of 16 GB: 3 nodes, or 2 of 16 GB each, are refused with every node's size; sbatch is never
    asked, and sinfo once."""
    (tmp_path / "launch_training.sh").write_text("#!/usr/bin/env bash\n#SBATCH --nodes=2 --cpus-per-task=2\n"
                                                 "#SBATCH --mem=8G\nsrun true\n")
    fake = FakeSlurm(tmp_path, ["RUNNING"], sinfo="big|debug*|2|16384|(null)|idle\nsmall|debug*|2|8192|(null)|idle\n")
    job = slurm_job(tmp_path, fake)
    job.sbatch_options = options
    result = job.run()

    assert result.status == "failed" and result.slurm_job_id is None and not fake.called("sbatch")
    message = result.anomalies[0].message
    assert message.startswith(f"not submitted: the job asks for {asked} can take that: big cpus=2 mem=16384MB "
                              "gpus=0 (idle); small cpus=2 mem=8192MB gpus=0 (idle). Lower #SBATCH --nodes")
    assert len(fake.called("sinfo")) == 1


def test_the_probes_nodes_spare_sinfo(tmp_path: Path) -> None:
    (tmp_path / "launch_training.sh").write_text("#!/usr/bin/env bash\n#SBATCH --nodes=2\nsrun true\n")
    fake = FakeSlurm(tmp_path, ["RUNNING", None])
    job = SlurmJob(tmp_path / "launch_training.sh", [], tmp_path, tmp_path / "train.logs", run=fake,
                   clock=fake.clock, sleep=fake.clock.sleep, cluster=parse_slurm_nodes("n1|p*|4|100|(null)|idle\n"))
    result = job.run()
    assert result.slurm_job_id is None and "1 of the 1 node(s) of partition p" in result.anomalies[0].message
    assert not fake.called("sinfo") and not fake.called("sbatch")


def test_completed_job_finishes_and_queue_time_is_not_a_hang(tmp_path: Path) -> None:
    # 4 polls pending at 10 minutes each: 40 minutes in the queue, longer than hang_seconds (30 minutes)
    states = ["PENDING"] * 4 + ["RUNNING", "RUNNING", None]
    appends = {4: ["start updates=2 episodes=16", TRAIN.format(u=1, e=8)],
               5: [TRAIN.format(u=2, e=16), "done updates=2 episodes=16"]}
    fake = FakeSlurm(tmp_path, states, appends=appends, output="train update=1 ...\n", step_s=600.0)
    seen: list[Progress] = []
    job = slurm_job(tmp_path, fake)
    job.on_progress = seen.append
    result = job.run()

    assert result.status == "finished" and result.returncode == 0 and result.failure_class is None
    assert result.slurm_job_id == JOB_ID
    assert [r.kind for r in result.records] == ["start", "train", "train", "done"]
    assert seen[-1].update == 2
    assert "train update=1" in result.stdout_tail
    submit = fake.called("sbatch")
    assert [c[1] for c in submit] == ["--test-only", "--parsable"]
    assert submit[1][2:] == [str(tmp_path / "launch_training.sh"), "--episodes", "24"]
    assert not fake.called("scancel")


@pytest.mark.parametrize("sacct, output, failure_class, returncode", [
    ("OUT_OF_MEMORY|0:125|OutOfMemory", "", "oom", -125),
    ("TIMEOUT|0:15|TimeLimit", "", "time_limit", -15),
    ("PREEMPTED|0:15|None", "", "preempted", -15),
    ("NODE_FAIL|1:0|NodeFail", "", "node_fail", 1),
    ("FAILED|1:0|NonZeroExitCode", "[rank1]: torch.distributed.DistBackendError: NCCL error in: ...\n", "nccl", 1),
    ("FAILED|1:0|NonZeroExitCode", "Traceback (most recent call last):\nValueError: bad\n", "failed", 1),
    ("CANCELLED by 1000|0:15|None", "", "cancelled", -15),
])
def test_slurm_failures_are_classified(tmp_path: Path, sacct: str, output: str, failure_class: str,
                                       returncode: int) -> None:
    fake = FakeSlurm(tmp_path, ["RUNNING", None], sacct=sacct, output=output)
    result = slurm_job(tmp_path, fake).run()

    assert result.status == "failed"
    assert result.failure_class == failure_class and result.returncode == returncode
    assert result.anomalies[0].kind == "slurm_" + sacct.split("|")[0].split()[0].lower()
    assert fake.called("sacct")[0][:3] == ["sacct", "-j", JOB_ID]
    assert not fake.called("scancel")


def test_a_requeued_job_is_followed_through_its_rerun_under_the_same_id(tmp_path: Path) -> None:
    """`scontrol requeue` (or a preemption that requeues): the job goes back to the queue and runs its script again,
    resumed; it is one job, submitted once, its restart noted with where its log went on from, its end its own."""
    states = ["RUNNING 0", "RUNNING 0", "PENDING 1", "PENDING 1", "RUNNING 1", None]  # squeue's state, restart count
    appends = {0: ["start updates=3", TRAIN.format(u=1, e=8)], 1: [TRAIN.format(u=2, e=16)],
               4: ["start updates=3 resumed_at=1", TRAIN.format(u=2, e=16), TRAIN.format(u=3, e=24),
                   "done updates=3"]}
    fake = FakeSlurm(tmp_path, states, appends=appends, sacct=None, scontrol_end="COMPLETED|0:0|None")
    result = slurm_job(tmp_path, fake).run()

    assert result.status == "finished" and len(fake.called("sbatch")) == 2  # --test-only, then the one submission
    assert [(r.cause, r.first_record) for r in result.restarts] == [("requeued", 3)]
    assert [r.values["update"] for r in result.records if r.kind == "train"] == [1, 2, 2, 3]
    assert not any(a.serious for a in result.anomalies)
    assert result.nodes == "node1" and not fake.called("scancel")


def launcher_report(time: str, host: str, rank: int, exitcode: str, traceback: str) -> str:
    """torch.distributed.run's report of a failed worker, as each node's launcher prints it."""
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "======================================================\ntrain.py FAILED\n"
            "------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n"
            "------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n"
            f"  time      : {time}\n  host      : {host}\n  rank      : {rank} (local_rank: 0)\n"
            f"  exitcode  : {exitcode}\n  error_file: <N/A>\n  traceback : {traceback}\n"
            "======================================================\n")


KILLED_RANK_OUTPUT = (  # two nodes: rank 1 was SIGKILLed; rank 0 lost its peer in the same second
    launcher_report("2026-11-25_18:18:56", "node1", 0, "1 (pid: 28325)",
                    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    + "[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.203.77.12]:2218\n"
    + launcher_report("2026-11-25_18:18:56", "node2", 1, "-9 (pid: 28326)  (SIGKILL)",
                      "Signal 9 (SIGKILL) received by PID 28326")
    + "srun: error: node2: task 1: Exited with exit code 1\nsrun: error: node1: task 0: Exited with exit code 1\n")


def test_a_killed_rank_is_named_as_the_first_failure(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path, ["RUNNING", None], sacct=None, scontrol_end="FAILED|1:0|NonZeroExitCode",
                     output=KILLED_RANK_OUTPUT)
    result = slurm_job(tmp_path, fake).run()

    assert result.status == "failed" and result.failure_class == "killed"
    first = result.anomalies[0]
    assert first.kind == "slurm_failed"
    assert ("failed first: rank 1 (local_rank: 0) on node2: exit code -9 (Signal 9 (SIGKILL) received by PID 28326)"
            in first.message)
    assert "OOM killer" in first.message and "host      : node2" in first.evidence


def test_the_first_failure_is_the_earliest_report() -> None:
    output = (launcher_report("2026-11-25_18:19:02", "node1", 0, "1 (pid: 7)", "RuntimeError: peer gone")
              + launcher_report("2026-11-25_18:18:59", "node2", 1, "1 (pid: 8)", "ValueError: bad action"))
    found = launcher_failures(output)[0]
    assert (found.host, found.rank, found.exitcode, found.detail) == ("node2", "1 (local_rank: 0)", 1,
                                                                      "ValueError: bad action")
    assert launcher_failures("Traceback (most recent call last):\nValueError: x\n") == []


def test_slurm_anomaly_cancels_the_job(tmp_path: Path) -> None:
    appends = {1: ["start updates=9 episodes=72", TRAIN.format(u=1, e=8), TRAIN.format(u=2, e=16).replace(
        "loss=0.01", "loss=nan")]}
    fake = FakeSlurm(tmp_path, ["RUNNING"], appends=appends)
    result = slurm_job(tmp_path, fake).run()

    assert result.status == "stopped" and result.anomalies[0].kind == "nan_loss"
    assert fake.called("scancel") == [["scancel", JOB_ID]]


def test_silent_running_slurm_job_is_hung_and_cancelled(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path, ["RUNNING"], appends={0: ["start updates=9 episodes=72"]}, step_s=300.0)
    result = slurm_job(tmp_path, fake).run()

    assert result.status == "hung" and result.anomalies[0].kind == "hung"
    assert fake.called("scancel") == [["scancel", JOB_ID]]


def test_a_log_written_into_a_folder_named_from_the_config_is_found_and_watched_live(tmp_path: Path) -> None:
    """The template writes OUTPUT/RUN_NAME/train.logs: the search runs again at each poll until the log exists,
    progress shows while the job runs (it goes on only once update 1 was seen), and the record names the log
    where it is, relative to the project root."""
    from orchestrator.checks import find_log

    run_dir = tmp_path / "project" / "runs" / "r1"
    folder = run_dir / "formal-1"
    folder.mkdir(parents=True)
    script = write_child(folder, """
        os.makedirs("outputs/run-7")
        line("start", model="tiny", updates=2, episodes=16)
        train(1)
        deadline = time.monotonic() + 30
        while not os.path.exists("seen-1"):
            if time.monotonic() > deadline:
                sys.exit("update 1 was not seen while the job ran")
            time.sleep(0.01)
        train(2)
        line("done", updates=2, episodes=16)
    """, log="outputs/run-7/train.logs")
    seen: list[float] = []

    def on_progress(now: Progress) -> None:
        seen.append(now.update)
        (folder / "seen-1").touch()

    job = TrainingJob([sys.executable, str(script)], folder, folder / "train.logs", poll_s=POLL_S,
                      on_progress=on_progress, record=run_dir / "jobs" / "formal-1.json")
    job.locate_log = lambda: find_log(folder)
    result = job.run()

    assert result.status == "finished", result.stderr_tail
    assert seen == [1, 2] and [r.values["update"] for r in result.records if r.kind == "train"] == [1, 2]
    record = json.loads((run_dir / "jobs" / "formal-1.json").read_text())
    assert record["log_path"] == "./runs/r1/formal-1/outputs/run-7/train.logs"
    assert record["cwd"] == "./runs/r1/formal-1" and record["stdout"] == "./runs/r1/jobs/formal-1.stdout"


# ---------------------------------------------------------------- job records: adopted, never duplicated


def test_a_recorded_live_job_is_adopted_not_started_twice(tmp_path: Path) -> None:
    """A job started by an earlier (killed) process: a new watch with the same record follows that job."""
    script = write_child(tmp_path, """
        open("started.txt", "a").write("x")
        line("start", model="tiny", updates=2, episodes=16)
        while not os.path.exists("go"):
            time.sleep(0.01)
        train(1); train(2)
        line("done", updates=2, episodes=16)
    """)
    record = tmp_path / "jobs" / "formal-1.json"
    earlier = local_job(tmp_path, script, record=record)
    assert earlier._start() is None  # what the killed process did: start it and write the record
    earlier._save_record(**earlier._describe(), first_record=0, log_path=str(earlier.log_path), status="running")

    later = local_job(tmp_path, script, record=record)
    (tmp_path / "go").touch()
    result = later.run()

    assert result.status == "finished" and result.returncode == 0
    assert [r.kind for r in result.records] == ["start", "train", "train", "done"]
    assert (tmp_path / "started.txt").read_text() == "x"  # one job, not two
    saved = json.loads(record.read_text())
    assert saved["status"] == "finished" and saved["pgid"] == earlier.pid


def test_a_copied_record_of_a_job_still_running_in_the_original_is_not_adopted(tmp_path: Path) -> None:
    """A project copied while its job runs: the copy's record names the original's live process, which works for the
    original's run folder; the copy starts its own job and leaves the original's alone."""
    script = write_child(tmp_path, """
        open("started.txt", "a").write("x")
        line("start", model="tiny", updates=1, episodes=8)
        while not os.path.exists("go"):
            time.sleep(0.01)
        train(1)
        line("done", updates=1, episodes=8)
    """)
    original, copy = tmp_path / "original" / "runs" / "r1", tmp_path / "copy" / "runs" / "r1"
    for run_dir in (original, copy):
        run_dir.mkdir(parents=True)
        shutil.copy(script, run_dir / "child.py")
    earlier = TrainingJob([sys.executable, "child.py"], original, original / "train.logs", poll_s=POLL_S,
                          record=original / "jobs" / "formal-1.json")
    assert earlier._start() is None
    earlier._save_record(**earlier._describe(), first_record=0, log_path=str(earlier.log_path), status="running")
    shutil.copytree(original / "jobs", copy / "jobs")
    (copy / "go").touch()
    try:
        result = TrainingJob([sys.executable, "child.py"], copy, copy / "train.logs", poll_s=POLL_S,
                             record=copy / "jobs" / "formal-1.json").run()
        assert result.status == "finished" and (copy / "started.txt").read_text() == "x"  # its own job
        assert alive(earlier.pid)  # the original's job is neither adopted nor stopped
        assert json.loads((copy / "jobs" / "formal-1.json").read_text())["pgid"] != earlier.pid
    finally:
        (original / "go").touch()
        earlier._proc.wait(timeout=60)


def test_a_recorded_job_that_ended_unwatched_is_not_run_again(tmp_path: Path) -> None:
    script = write_child(tmp_path, """
        open("started.txt", "a").write("x")
        line("start", model="tiny", updates=1, episodes=8)
        train(1)
        line("done", updates=1, episodes=8)
    """)
    record = tmp_path / "jobs" / "formal-1.json"
    earlier = local_job(tmp_path, script, record=record)
    earlier._start()
    earlier._save_record(**earlier._describe(), first_record=0, log_path=str(earlier.log_path), status="running")
    earlier._proc.wait()  # it ends while nobody watches; the wrapper leaves its exit code beside the record

    result = local_job(tmp_path, script, record=record).run()

    assert result.status == "finished" and result.returncode == 0
    assert (tmp_path / "started.txt").read_text() == "x"


def test_a_recorded_slurm_job_is_watched_again_without_sbatch(tmp_path: Path) -> None:
    record = tmp_path / "jobs" / "formal-1.json"
    record.parent.mkdir()
    record.write_text(json.dumps({"slurm_job_id": JOB_ID, "status": "running", "first_record": 0}))
    fake = FakeSlurm(tmp_path, ["RUNNING", None], appends={0: ["start updates=1 episodes=8", TRAIN.format(u=1, e=8),
                                                               "done updates=1 episodes=8"]})
    job = slurm_job(tmp_path, fake)
    job.record = record
    result = job.run()

    assert result.status == "finished" and result.slurm_job_id == JOB_ID
    assert not fake.called("sbatch")
    assert json.loads(record.read_text())["status"] == "finished"


def test_a_copied_record_of_a_slurm_job_of_the_original_folder_is_not_watched(tmp_path: Path) -> None:
    """The cluster says the recorded job works in another folder (the project was copied while it ran): this folder
    submits its own job and leaves that one alone."""
    record = tmp_path / "jobs" / "formal-1.json"
    record.parent.mkdir()
    record.write_text(json.dumps({"slurm_job_id": "99", "status": "running", "first_record": 0}))
    fake = FakeSlurm(tmp_path, ["RUNNING", None], appends={0: ["start updates=1 episodes=8", TRAIN.format(u=1, e=8),
                                                               "done updates=1 episodes=8"]})
    answer = fake.__call__

    def elsewhere(cmd: list[str]) -> tuple[int, str, str]:
        code, out, err = answer(cmd)
        return (code, out.replace("JobId=", "WorkDir=/original/runs/r1/formal-1/code JobId="), err) if (
            cmd[:3] == ["scontrol", "show", "job"] and cmd[-1] == "99") else (code, out, err)
    job = slurm_job(tmp_path, fake)
    job._run, job.record = elsewhere, record
    result = job.run()

    assert result.status == "finished" and result.slurm_job_id == JOB_ID and fake.called("sbatch")
    assert not [c for c in fake.called("scancel") if "99" in c]


@pytest.mark.parametrize("end, status, anomaly", [
    ("COMPLETED|0:0|None", "finished", None),
    ("FAILED|3:0|NonZeroExitCode", "failed", "slurm_failed"),
    ("CANCELLED|0:15|None", "failed", "slurm_cancelled"),
    ("TIMEOUT|0:15|TimeLimit", "failed", "slurm_timeout"),
])
def test_without_accounting_the_end_state_comes_from_scontrol(tmp_path: Path, end: str, status: str, anomaly):
    fake = FakeSlurm(tmp_path, ["RUNNING", None], sacct=None, scontrol_end=end,
                     appends={0: ["start updates=1", TRAIN.format(u=1, e=8)]})
    result = slurm_job(tmp_path, fake).run()
    assert result.status == status
    assert [a.kind for a in result.anomalies][:1] == ([anomaly] if anomaly else [])
    if end.startswith("TIMEOUT"):
        assert result.failure_class == "time_limit" and "raise #SBATCH --time" in result.anomalies[0].message
