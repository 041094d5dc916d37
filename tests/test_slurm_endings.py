"""A formal run survives the shared cluster (scripts/slurm_local.sh's two nodes, real sbatch, scontrol and scancel):
each ending the cluster or the researcher causes is taken up as orchestrator.training.chain says, and none is paid to fix.

One run, shared: the Cleanup example's pipeline (a replayed LLM, the tiny agent) is run once with `--slurm --until
formal_train` and stopped at the checkpoint before formal_train; each test resumes its own copy of that project
with `python -m orchestrator resume` (so each ending is seen as a researcher sees it: the exit code, `status`,
run.json, the ledger, claude.logs), does to the job what a cluster or a researcher does, and waits for the end:

- a partition whose MaxTime (one minute) is shorter than the formal run: at least three chained jobs end it `done`,
  every update read once, with the parameters of a run never interrupted; a job asking more than MaxTime is refused
  before sbatch, with both numbers;
- `scontrol requeue` of the running job: followed through the rerun, which goes on from the checkpoint;
- the job's node set DOWN (a job that does not requeue itself: --no-requeue): the next job goes on from the
  checkpoint on the other node, the failed one excluded;
- an outside `scancel`: the run stops `cancelled` (exit code 5, one line); `resume` asks nothing and goes on from
  the checkpoint.

A formal update here lasts a few seconds more than it computes (tests/slow_update: the AdamW step waits), as a real
model's update lasts minutes: the chain's jobs are long enough for SLURM's time limit while the CPUs stay free. The
chain test runs in the background while the requeue and scancel tests run on the other node. Skipped without root,
slurm-wlm, munge or iproute2 (tests/slurm_cluster.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import slurm_cluster
from conftest import ROOT, SOURCE_OF_TRUTH, reference_replies, write_transcript

from orchestrator.base.files import from_disk
from orchestrator.training.checkpoints import latest_update
from orchestrator.training.logformat import read_log
from orchestrator.training.monitor import current_run
from orchestrator.run.runs import formal_jobs
from orchestrator.tiny.agent import local_tiny_agent

pytestmark = [pytest.mark.slow, pytest.mark.tiny_agent("cleanup"), *slurm_cluster.requires_cluster]

UPDATES = 5
# the formal run, pinned: 5 updates of a group of 3 one-turn episodes, a checkpoint after each
FORMAL_SET = {"episodes": 3 * UPDATES, "group_size": 3, "max_env_steps": 1, "max_thinking_tokens": 4,
              "max_action_tokens": 40, "beta": 0.04, "learning_rate": 0.001, "warmup_steps": 1,
              "gradient_checkpointing": False, "micro_batch_size": 64, "eval_interval": 1000, "eval_episodes": 1,
              "sample_log_interval": 1000, "save_interval": 1}
RUN = "r1"
WAIT_S = 600.0
SLOW = ROOT / "tests" / "slow_update"


def reply(tag: str, text: str) -> dict:
    return {"tag": tag, "text": text, "usage": {"input_tokens": 1000, "output_tokens": 100}}


def orchestrator(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project of a run stopped at the checkpoint before formal_train (its checks passed, on the cluster's
    probe), for each test to copy and resume."""
    slurm_cluster.start()
    project = tmp_path_factory.mktemp("endings") / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    replies = [*reference_replies(), reply("formal_train", f"```json\n{json.dumps({'episodes': 3 * UPDATES})}\n```")]
    transcript = write_transcript(project / "transcript.json", replies)
    agent = local_tiny_agent(ROOT, example_folder(tmp_path_factory.mktemp("agent")))
    pinned = [arg for key, value in FORMAL_SET.items() for arg in ("--formal-set", f"{key}={json.dumps(value)}")]
    halted = project / "halted"
    env = {**os.environ, "ORCHESTRATOR_HALT_AT": "checkpoint:formal_train", "ORCHESTRATOR_HALT_FILE": str(halted)}
    run = subprocess.Popen(orchestrator("run", "--llm", transcript, "--run-id", RUN, "--slurm", "--until",
                                        "formal_train", "--formal-model", agent, "--check-episodes", "2",
                                        "--hang-seconds", "300", "--poll-seconds", "2", *pinned,
                                        "--project-root", str(project)),
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while not halted.exists():
        assert run.poll() is None, f"the run ended (rc {run.returncode}) before formal_train: {run.stdout.read()}"
        assert time.monotonic() < deadline, "the run did not reach formal_train in time"
        time.sleep(0.2)
    os.killpg(run.pid, 9)
    run.wait()
    return project


def example_folder(tmp: Path) -> Path:
    from conftest import example_generated

    folder, _ = example_generated(tmp, "cleanup")
    return folder


@dataclass
class Resumed:
    """A copy of the prepared project, resumed in the background."""

    project: Path
    process: subprocess.Popen
    env: dict[str, str]
    output: list[str] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.project / "runs" / RUN

    def record(self) -> dict:
        try:
            return json.loads((self.run_dir / "jobs" / "formal-1.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait_for_update(self, update: int) -> str:
        """The running job's id once train.logs holds `update` and its checkpoint is saved (0: once it was
        submitted; polled, bounded): the log line comes before the checkpoint, and an ending acted on between the
        two goes on from the update before."""
        deadline = time.monotonic() + WAIT_S
        while True:
            assert self.process.poll() is None, f"resume ended (rc {self.process.returncode}): {self.finish()[1]}"
            assert time.monotonic() < deadline, f"update {update} was not logged in time"
            log = self.run_dir / "formal-1" / "logs" / "train.logs"
            updates = [r.values["update"] for r in read_log(log) if r.kind == "train"] if log.is_file() else []
            saved = latest_update(self.run_dir / "formal-1" / "outputs") or 0
            if self.record().get("status") == "running" and (update == 0 or updates and max(updates) >= update
                                                             and saved >= update):
                return self.record()["slurm_job_id"]
            time.sleep(0.5)

    def finish(self) -> tuple[int, str]:
        out, _ = self.process.communicate(timeout=WAIT_S)
        return self.process.returncode, out

    def status(self) -> str:
        shown = subprocess.run(orchestrator("status", RUN, "--project-root", str(self.project)), cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        return shown.stdout

    def segments(self) -> list[dict]:
        return json.loads((self.run_dir / "formal-1" / "jobs.json").read_text())["segments"]

    def went_on_from(self) -> list[int | None]:
        """The update each job after the first went on from (`status`'s reading of the chain and train.logs)."""
        return [job["from_update"] for job in formal_jobs(self.run_dir)["jobs"][1:]]

    def updates(self) -> list[int]:
        """Every update of the formal run's train.logs as the monitor reads it across its jobs."""
        records = read_log(self.run_dir / "formal-1" / "train.logs")
        return [int(r.values["update"]) for r in current_run(records) if r.kind == "train"]


def resume(prepared: Path, where: Path, *options: str, slow_s: float, env: dict[str, str] | None = None) -> Resumed:
    project = where / "project"
    shutil.copytree(prepared, project, symlinks=True)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SLOW), str(ROOT)]),
                   "TEST_SLOW_UPDATE_S": str(slow_s), **(env or {})}
    args = [arg for option in ("cpus-per-task=1", *options) for arg in ("--sbatch-option", option)]
    process = subprocess.Popen(orchestrator("resume", RUN, *args, "--project-root", str(project)), cwd=ROOT,
                               env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    return Resumed(project, process, environment)


def no_llm_call_for_the_ending(resumed: Resumed) -> None:
    """The journal holds the plan's answer and nothing after it (a resume got it back from there), the ledger counts it
    once, and no event of the run is a fix (events.jsonl: claude.logs' entries, one JSON line each)."""
    state = json.loads((resumed.run_dir / "state.json").read_text())
    assert "fix" not in state["ledger"] and state["ledger"]["formal_train"]["calls"] == 1, state["ledger"]
    answers = [r["tag"] for r in map(json.loads, (resumed.run_dir / "journal.jsonl").read_text().splitlines())
               if r.get("kind") == "llm_answer"]
    assert answers == ["map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch",
                       "formal_train"]
    events = [json.loads(line) for line in (resumed.run_dir / "events.jsonl").read_text().splitlines()]
    assert any((e["node"], e["action"]) == ("formal_train", "launch") for e in events)
    assert not any(e["node"] == "fix" for e in events)


def jobs_of(resumed: Resumed) -> dict[str, dict[str, str]]:
    """`scontrol show job` of each job of the formal run, read when it ended (SLURM forgets a job after MinJobAge)."""
    return {s["job_id"]: slurm_cluster.scontrol_job(s["job_id"]) for s in resumed.segments() if s["job_id"]}


@dataclass
class Ending:
    """A scenario's resumed run, the job it acted on, what it saw, and the error that stopped it, if any."""

    resumed: Resumed | None = None
    job: str = ""
    seen: dict = field(default_factory=dict)
    error: BaseException | None = None

    def checked(self) -> Ending:
        if self.error is not None:
            raise self.error
        return self


def requeued(prepared: Path, where: Path) -> Ending:
    """`scontrol requeue` of the running job after its second update (SLURM holds it for the cluster's credential
    lifetime, then runs it again: 16 s on the local cluster)."""
    resumed = resume(prepared, where, "nodelist=node1", slow_s=2.0)
    job = resumed.wait_for_update(2)
    subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, timeout=30)
    code, out = resumed.finish()
    return Ending(resumed, job, {"code": code, "out": out, "status": resumed.status(), "jobs": jobs_of(resumed)})


def node_lost(prepared: Path, where: Path) -> Ending:
    """The running job's node set DOWN after its second update, for a job that does not requeue itself."""
    resumed = resume(prepared, where, "no-requeue", slow_s=2.0)
    job = resumed.wait_for_update(2)
    node = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True, text=True).stdout.strip()
    try:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=test_slurm_endings"],
                       check=True, capture_output=True, timeout=30)
        code, out = resumed.finish()
    finally:  # ReturnToService=2 brings it back by itself; this says so where it has not yet
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, timeout=30)
    return Ending(resumed, job, {"code": code, "out": out, "node": node, "status": resumed.status(),
                                 "jobs": jobs_of(resumed)})


def cancelled(prepared: Path, where: Path) -> Ending:
    """`scancel` by the researcher after the second update; then `resume`, as they would."""
    resumed = resume(prepared, where, "nodelist=node1", slow_s=2.0)
    job = resumed.wait_for_update(2)
    subprocess.run(["scancel", job], check=True, capture_output=True, timeout=30)
    code, out = resumed.finish()
    seen = {"code": code, "out": out, "status": resumed.status(),
            "run.json": json.loads((resumed.run_dir / "run.json").read_text())["status"]}
    again = subprocess.run(orchestrator("resume", RUN, "--project-root", str(resumed.project)), cwd=ROOT,
                           env=resumed.env, capture_output=True, text=True, timeout=WAIT_S)
    seen.update(resumed_code=again.returncode, resumed_out=again.stdout + again.stderr, resumed_status=resumed.status(),
                jobs=jobs_of(resumed))
    return Ending(resumed, job, seen)


def refused(prepared: Path, where: Path) -> Ending:
    """Partition short (MaxTime one minute, SBATCH_PARTITION) and the script's #SBATCH --time=24:00:00: refused before
    sbatch, with both numbers."""
    resumed = resume(prepared, where, slow_s=0.0, env={"SBATCH_PARTITION": "short"})
    code, out = resumed.finish()
    return Ending(resumed, "", {"code": code, "out": out, "status": resumed.status()})


def chained(prepared: Path, where: Path) -> Ending:
    """Partition short, SBATCH_TIMELIMIT=1: the run goes on through chained jobs to its end. Meanwhile, once the first
    job shows the plan's arguments, the same plan trains without interruption here, through the same launch script."""
    resumed = resume(prepared, where, slow_s=25.0, env={"SBATCH_PARTITION": "short", "SBATCH_TIMELIMIT": "1"})
    resumed.wait_for_update(0)
    folder = resumed.run_dir / "formal-1"
    command = [from_disk(arg, resumed.project) for arg in resumed.record()["command"]]  # "./REL" in the record
    reference = where / "uninterrupted"
    shutil.copytree(folder / "code", reference)
    args = [arg.replace(str(folder / "outputs"), str(reference / "outputs")).replace(
        str(folder / "logs"), str(reference / "logs"))
            for arg in command[command.index(str(folder / "code" / "launch_training.sh")) + 1:]]
    plain = subprocess.run(["bash", "launch_training.sh", *args], cwd=reference, capture_output=True, text=True,
                           timeout=WAIT_S, env={**os.environ, "PYTHON": sys.executable})
    assert plain.returncode == 0, plain.stderr[-3000:]
    code, out = resumed.finish()
    seen = {"code": code, "out": out, "status": resumed.status(), "jobs": jobs_of(resumed)}
    if code == 0:
        seen["checksums"] = (checksum(folder / "outputs" / "final"), checksum(reference / "outputs" / "final"))
    return Ending(resumed, "", seen)


def checksum(folder: Path) -> str:
    """sha256 over a saved model's tensors, by name."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(folder / "model.safetensors").items()):
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def endings(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ending]:
    """Every scenario, each in its own copy of the project: the lost node first, with the refusal that submits nothing
    (a DOWN node ends whatever runs on it); then the chain on the short partition's node while the requeue and the
    cancel run on the other."""
    found: dict[str, Ending] = {}

    def play(name, scenario) -> None:
        try:
            found[name] = scenario(prepared, tmp_path_factory.mktemp(name))
        except BaseException as exc:  # the test of that ending says what went wrong
            found[name] = Ending(error=exc)

    for phase in ((("node_fail", node_lost), ("refused", refused)),
                  (("chain", chained), ("requeue", requeued), ("cancelled", cancelled))):
        together = [threading.Thread(target=play, args=scenario) for scenario in phase]
        for thread in together:
            thread.start()
        for thread in together:
            thread.join(timeout=2 * WAIT_S)
    return found


def test_a_job_asking_more_than_its_partition_s_max_time_is_refused_before_sbatch_with_both_numbers(endings):
    seen = endings["refused"].checked().seen
    print(f"refused: exit {seen['code']}\n{seen['status']}")
    assert seen["code"] == 4
    assert ("formal_train refused before sbatch: the job asks partition short for --time 1-00:00:00 (86400 s) where "
            "its MaxTime is 00:01:00 (60 s)") in " ".join(seen["out"].split()), seen["out"][-2000:]
    assert "--time=24:00:00 (#SBATCH)" in " ".join(seen["out"].split())
    assert "--partition=short (SBATCH_PARTITION)" in " ".join(seen["out"].split())
    assert not (endings["refused"].resumed.run_dir / "jobs" / "formal-1.json").exists()  # nothing was submitted


def test_a_partition_time_limit_is_gone_through_in_chained_jobs_to_the_parameters_of_an_uninterrupted_run(endings):
    ending = endings["chain"].checked()
    seen, resumed = ending.seen, ending.resumed
    print(f"chain: exit {seen['code']}\n{seen['status']}")
    for job, fields in seen["jobs"].items():
        print("scontrol show job", " ".join(f"{k}={fields.get(k)}" for k in (
            "JobId", "JobState", "Reason", "Partition", "TimeLimit", "RunTime", "StartTime", "EndTime", "NodeList")))
    assert seen["code"] == 0, seen["out"][-4000:]
    print(f"parameters: chained {seen['checksums'][0]}, uninterrupted {seen['checksums'][1]}")
    segments = resumed.segments()
    assert len(segments) >= 3
    assert [s["failure_class"] for s in segments] == ["time_limit"] * (len(segments) - 1) + [None]
    assert segments[-1]["status"] == "finished" and len({s["job_id"] for s in segments}) == len(segments)
    assert [seen["jobs"][s["job_id"]]["JobState"] for s in segments] == ["TIMEOUT"] * (len(segments) - 1) + [
        "COMPLETED"]
    assert {(fields["Partition"], fields["TimeLimit"]) for fields in seen["jobs"].values()} == {("short", "00:01:00")}
    assert resumed.updates() == list(range(1, UPDATES + 1))
    went_on = [update for update in resumed.went_on_from() if update is not None]  # None: it only saved the end
    assert went_on and all(update >= 1 for update in went_on)
    assert seen["checksums"][0] == seen["checksums"][1]
    manifest = json.loads((resumed.run_dir / "formal-1" / "manifest.json").read_text())
    assert manifest["slurm"]["sbatch_options"]["partition"] == {"value": "short", "source": "SBATCH_PARTITION"}
    assert manifest["slurm"]["sbatch_options"]["time"] == {"value": "1", "source": "SBATCH_TIMELIMIT"}
    assert [j["job_id"] for j in manifest["jobs"]] == [s["job_id"] for s in segments]
    assert f"formal run formal-1, {len(segments)} job(s)" in seen["status"]
    # the page and the attempt's record: the jobs, where each went on, the options used
    attempt = json.loads((resumed.run_dir / "state.json").read_text())["attempts"][-1]
    marked = [label for _, label in attempt["restarts"]]  # a last job that only saved the final model marks nothing
    assert marked and marked == [f"time_limit (job {s['job_id']})" for s in segments[1:]][:len(marked)]
    page = (resumed.run_dir / "report.html").read_text()
    assert f"formal run formal-1, {len(segments)} job(s)" in page and "--partition=short (SBATCH_PARTITION)" in page
    no_llm_call_for_the_ending(resumed)


def test_a_requeued_job_is_followed_through_and_goes_on_from_its_checkpoint(endings):
    ending = endings["requeue"].checked()
    resumed, job, seen = ending.resumed, ending.job, ending.seen
    print(f"requeue: exit {seen['code']}\n{seen['status']}")
    assert seen["code"] == 0, seen["out"][-4000:]
    assert [(s["cause"], s["job_id"], s["status"]) for s in resumed.segments()] == [
        ("start", job, "requeued"), ("requeued", job, "finished")]
    assert seen["jobs"][job]["Restarts"] == "1" and seen["jobs"][job]["JobState"] == "COMPLETED"
    assert resumed.updates() == list(range(1, UPDATES + 1))
    assert f"2 job(s): {job} start -> requeued; {job} after requeued, from update" in seen["status"]
    no_llm_call_for_the_ending(resumed)


def test_a_lost_node_is_excluded_and_the_next_job_goes_on_from_the_checkpoint(endings):
    ending = endings["node_fail"].checked()
    resumed, job, seen = ending.resumed, ending.job, ending.seen
    print(f"node down ({seen['node']}): exit {seen['code']}\n{seen['status']}")
    assert seen["code"] == 0, seen["out"][-4000:]
    first, second = resumed.segments()
    assert (first["job_id"], first["failure_class"], first["nodes"]) == (job, "node_fail", seen["node"])
    assert second["cause"] == "node_fail" and f"excluding {seen['node']}" in second["note"]
    assert resumed.went_on_from()[0] >= 2
    assert seen["jobs"][job]["JobState"] == "NODE_FAIL"
    state = seen["jobs"][second["job_id"]]
    assert (state["ExcNodeList"], state["JobState"]) == (seen["node"], "COMPLETED") and state["NodeList"] != seen["node"]
    assert resumed.updates() == list(range(1, UPDATES + 1))
    no_llm_call_for_the_ending(resumed)


def test_an_outside_scancel_stops_the_run_cancelled_and_resume_goes_on_asking_nothing(endings):
    ending = endings["cancelled"].checked()
    resumed, job, seen = ending.resumed, ending.job, ending.seen
    print(f"scancel: exit {seen['code']}\n{seen['status']}\nresume: exit {seen['resumed_code']}\n"
          f"{seen['resumed_status']}")
    assert seen["code"] == 5 and seen["run.json"] == "cancelled", seen["out"][-4000:]
    assert f"run r1: cancelled SLURM job {job} was cancelled from outside the orchestrator (scancel)" in \
        " ".join(seen["status"].split())
    assert seen["resumed_code"] == 0, seen["resumed_out"][-4000:]
    first, second = resumed.segments()
    assert (first["job_id"], first["failure_class"]) == (job, "cancelled") and second["cause"] == "cancelled"
    assert resumed.went_on_from()[0] >= 2
    assert resumed.updates() == list(range(1, UPDATES + 1))
    no_llm_call_for_the_ending(resumed)
