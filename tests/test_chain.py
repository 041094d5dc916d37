"""A formal run across its SLURM jobs (orchestrator.training.chain): what follows each ending the cluster causes, the chain's
record, and the restarts marked on its log. Fake jobs and a fake sinfo/scontrol; the real cluster's endings are in
tests/test_slurm_endings.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path


from orchestrator.training.chain import Chain, Plan, Resubmit, Situation, Stop, follow_up, restarts, run_chain
from orchestrator.training.logformat import parse_log
from orchestrator.training.machine import SlurmCluster, parse_slurm_nodes
from orchestrator.sources.roles import ConfigRoles
from orchestrator.training.sizing import NodeRequest
from orchestrator.training.job import JobResult, Restart

LOG = parse_log("start updates=6\ntrain update=1 loss=1\ntrain update=2 loss=1\ntrain update=3 loss=1\n"
                "start updates=6 resumed_at=2\ntrain update=3 loss=0.5\ntrain update=4 loss=0.5\n")
CLUSTER = SlurmCluster(parse_slurm_nodes("node1|debug*|2|8000|(null)|idle\nnode2|debug*|2|8000|(null)|idle\n").nodes,
                       "debug")
ROLES = ConfigRoles({"micro_batch": "micro_batch_size", "accumulation_steps": "gradient_accumulation_steps",
                     "resume_from": "resume_from"}, "cli")


def ended(failure_class: str | None, status: str = "failed", job_id: str = "41", nodes: str = "node1",
          records=LOG[:4], restarts_=()) -> JobResult:
    return JobResult(status, None, [], list(records), "", "", 60.0, job_id, failure_class, nodes, tuple(restarts_))


def situation(**changes) -> Situation:
    base = Situation(resumable=True, jobs=1, max_jobs=20, checkpoint=2, earlier_checkpoint=None,
                     request=NodeRequest(memory_mb=2000), cluster=CLUSTER,
                     values={"micro_batch_size": 8, "gradient_accumulation_steps": 1}, roles=ROLES, plan=Plan(),
                     resume="python -m orchestrator resume r1")
    return replace(base, **changes)


def sinfo(states: dict[str, str]):
    """scontrol show hostnames and sinfo -N -n ... -o '%N %T', as a cluster with these node states answers."""
    def run(cmd: list[str]) -> tuple[int, str, str]:
        if cmd[:3] == ["scontrol", "show", "hostnames"]:
            return 0, "\n".join(n for n in states if n in cmd[3] or cmd[3] == "node[1-2]") + "\n", ""
        if cmd[0] == "sinfo":
            names = cmd[cmd.index("-n") + 1].split(",")
            return 0, "".join(f"{n} {states[n]}\n" for n in names), ""
        raise AssertionError(cmd)
    return run


NO_COMMANDS = sinfo({})


def test_a_time_limit_chains_the_next_job_from_the_newest_checkpoint():
    step = follow_up(ended("time_limit"), situation(), NO_COMMANDS)
    assert step == Resubmit(Plan(), "SLURM job 41 reached its time limit at update 3; the next job goes on from the "
                                    "checkpoint at update 2")


def test_a_second_time_limit_in_a_row_without_a_newer_checkpoint_or_no_resume_support_stops_the_run():
    once = follow_up(ended("time_limit"), situation(earlier_checkpoint=2, stalled=1), NO_COMMANDS)
    assert isinstance(once, Resubmit)  # a first job may pay for caches: one is let pass
    stuck = follow_up(ended("time_limit"), situation(earlier_checkpoint=2, stalled=2), NO_COMMANDS)
    assert isinstance(stuck, Stop) and stuck.status == "environment"
    assert "like the job before it saved no newer checkpoint (the newest: update 2)" in stuck.reason
    assert stuck.reason.endswith("then `python -m orchestrator resume r1`")
    unresumable = follow_up(ended("time_limit"), situation(resumable=False), NO_COMMANDS)
    assert unresumable.status == "environment" and "cannot resume" in unresumable.reason
    assert "--sbatch-option partition=" in unresumable.reason


def test_a_preemption_goes_on_from_the_checkpoint_and_without_resume_support_from_update_0():
    assert follow_up(ended("preempted"), situation(), NO_COMMANDS).note.endswith(
        "was preempted at update 3; the next job goes on from the checkpoint at update 2")
    assert follow_up(ended("preempted"), situation(resumable=False), NO_COMMANDS).note.endswith(
        "starts again at update 0 (the config has no resume field)")


def test_a_lost_node_is_excluded_from_the_next_job():
    step = follow_up(ended("node_fail", nodes="node1"), situation(plan=Plan(("--exclude=node9",))),
                     sinfo({"node1": "idle"}))
    assert step.plan.options == ("--exclude=node1,node9",)
    assert step.note == ("SLURM job 41 lost a node at update 3 (node1); the next job goes on from the checkpoint at "
                         "update 2, excluding node1, node9")


def test_of_a_two_node_job_the_node_sinfo_calls_down_is_excluded_and_none_that_would_leave_too_few():
    two = situation(request=NodeRequest(nodes=2))
    step = follow_up(ended("node_fail", nodes="node[1-2]"), two, sinfo({"node1": "idle", "node2": "down*"}))
    assert step.plan.options == () and "excluding it would leave 1 of the 2 node(s)" in step.note
    one = situation(request=NodeRequest(nodes=1))
    step = follow_up(ended("node_fail", nodes="node[1-2]"), one, sinfo({"node1": "idle", "node2": "down*"}))
    assert step.plan.options == ("--exclude=node2",)


def test_host_memory_doubles_the_request_within_the_nodes_then_halves_the_micro_batch():
    step = follow_up(ended("oom"), situation(), NO_COMMANDS)
    assert step.plan.options == ("--mem=4000M",) and "asks for 4000 MB instead of 2000 MB" in step.note
    step = follow_up(ended("oom"), situation(request=NodeRequest(memory_mb=8000)), NO_COMMANDS)
    assert step.plan == Plan((), {"micro_batch_size": 4, "gradient_accumulation_steps": 2})
    assert "micro_batch_size 8 -> 4 and gradient_accumulation_steps 1 -> 2" in step.note
    floor = follow_up(ended("oom"), situation(request=NodeRequest(memory_mb=8000), values={"micro_batch_size": 1}),
                      NO_COMMANDS)
    assert floor.status == "environment" and "cannot shrink further" in floor.reason


def test_a_cancel_from_outside_stops_the_run_cancelled_and_other_endings_are_not_the_chain_s():
    stop = follow_up(ended("cancelled"), situation(), NO_COMMANDS)
    assert stop == Stop("cancelled", "SLURM job 41 was cancelled from outside the orchestrator (scancel) at update 3; "
                                     "`python -m orchestrator resume r1` starts the next job, which goes on from the "
                                     "checkpoint at update 2")
    for result in (ended(None, "finished"), ended("failed"), ended(None, "stopped"), ended("nccl")):
        assert follow_up(result, situation(), NO_COMMANDS) is None


def test_the_chain_is_bounded():
    stop = follow_up(ended("preempted"), situation(jobs=3, max_jobs=3), NO_COMMANDS)
    assert stop.status == "environment" and "--max-jobs 3" in stop.reason


class FakeJob:
    """A job whose run writes its record (as training_job does) and returns the next of `results`."""

    def __init__(self, record: Path, result: JobResult, started: list[Plan], plan: Plan) -> None:
        self.record, self.result = record, result
        started.append(plan)

    def run(self) -> JobResult:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.record.write_text(json.dumps({"slurm_job_id": self.result.slurm_job_id, "status": self.result.status}))
        return self.result


def test_run_chain_follows_time_limits_to_the_end_and_records_every_job(tmp_path: Path):
    results = [ended("time_limit", job_id="41", records=LOG[:4]),
               ended("time_limit", job_id="42", records=LOG[4:6]),
               ended(None, "finished", job_id="43", records=LOG[6:])]
    record, started, steps = tmp_path / "jobs" / "formal-1.json", [], []
    newest = {1: (None, 2), 2: (2, 3), 3: (3, 4)}  # the newest checkpoint before and after each job
    chain = Chain(tmp_path / "formal-1" / "jobs.json")
    (tmp_path / "formal-1").mkdir()
    end = run_chain(chain, lambda plan: FakeJob(record, results[len(started)], started, plan), record,
                    first_cause="start", first_note="", outputs=tmp_path / "formal-1",
                    situation=lambda result, plan, jobs, before: situation(
                        jobs=jobs, earlier_checkpoint=newest[jobs][0], checkpoint=newest[jobs][1], plan=plan),
                    run=NO_COMMANDS, on_step=steps.append)
    assert end.stop is None and end.result.slurm_job_id == "43" and len(started) == 3
    saved = Chain(tmp_path / "formal-1" / "jobs.json").segments
    assert [(s.cause, s.job_id, s.status, s.failure_class) for s in saved] == [
        ("start", "41", "failed", "time_limit"), ("time_limit", "42", "failed", "time_limit"),
        ("time_limit", "43", "finished", None)]
    assert len(steps) == 2 and "reached its time limit" in steps[0]
    assert record.exists()  # the last job's record stays: a resume takes its ending, it starts nothing


def test_a_resumed_chain_neither_adopts_a_job_it_took_up_nor_repeats_the_one_that_ended(tmp_path: Path):
    record, started = tmp_path / "formal-1.json", []
    chain = Chain(tmp_path / "jobs.json")
    chain.begin("start")
    chain.ended(ended("cancelled", job_id="41"))
    record.write_text(json.dumps({"slurm_job_id": "41", "status": "failed"}))  # killed before it was removed
    end = run_chain(Chain(tmp_path / "jobs.json"), lambda plan: FakeJob(record, ended(None, "finished", job_id="42"),
                                                                          started, plan),
                    record, first_cause="start", first_note="", outputs=tmp_path,
                    situation=lambda r, p, j, b: situation(), run=NO_COMMANDS, on_step=lambda line: None)
    assert end.result.slurm_job_id == "42" and len(started) == 1
    assert [(s.cause, s.job_id) for s in Chain(tmp_path / "jobs.json").segments] == [("start", "41"),
                                                                                      ("cancelled", "42")]


def test_a_requeued_job_is_one_segment_per_run_and_each_restart_is_marked_where_it_went_on():
    chain = Chain(Path("/nonexistent/jobs.json"))
    chain.save = lambda: None  # kept in memory
    chain.begin("start")
    chain.ended(ended(None, "finished", records=LOG, restarts_=[Restart("requeued", 4)]))
    assert [(s.cause, s.first_record, s.status) for s in chain.segments] == [("start", 0, "requeued"),
                                                                           ("requeued", 4, "finished")]
    assert restarts(chain.segments, LOG) == [(2, "requeued (job 41)")]


def test_after_a_fix_the_next_attempt_goes_on_from_the_last_checkpoint_before_the_anomaly(tmp_path: Path):
    from types import SimpleNamespace

    from orchestrator.nodes.train import restart_point

    earlier = tmp_path / "formal-1" / "outputs"
    for update in (2, 4, 6):
        (earlier / f"checkpoint-{update}").mkdir(parents=True)
        (earlier / f"checkpoint-{update}" / "training_state.pt").write_bytes(b"state")
    ctx = SimpleNamespace(run_dir=tmp_path)
    nan_at_5 = {"attempts": [{"node": "formal_train", "attempt": 1,
                              "anomaly": {"kind": "nan_loss", "summary": "", "update": 5}},
                             {"node": "fix", "attempt": 1}]}
    cause, note = restart_point(nan_at_5, ctx, tmp_path / "formal-2", 2, resumable=True)
    assert (cause, note) == ("fix", "formal-2 goes on from formal-1's checkpoint-4 (update 4), the last checkpoint "
                                    "before the anomaly at update 5")
    assert (tmp_path / "formal-2/outputs/checkpoint-4").resolve() == (earlier / "checkpoint-4").resolve()
    assert restart_point(nan_at_5, ctx, tmp_path / "formal-3", 3, resumable=False)[1].endswith("begins at update 0")
    mismatch = {"attempts": [{"node": "formal_train", "attempt": 1,
                              "anomaly": {"kind": "config_mismatch", "summary": "", "update": None}}]}
    assert restart_point(mismatch, ctx, tmp_path / "formal-4", 2, resumable=True) == ("start", "")
    assert not (tmp_path / "formal-4").exists()


def test_run_chain_lets_one_job_without_progress_pass_and_stops_at_the_second_in_a_row(tmp_path: Path):
    record, started, steps = tmp_path / "formal-1.json", [], []
    results = [ended("time_limit", job_id=str(41 + i)) for i in range(3)]
    newest = {1: (None, None), 2: (None, 2), 3: (2, 2), 4: (2, 2)}  # job 1 saves nothing, job 2 one, 3 and 4 none
    results.append(ended("time_limit", job_id="44"))
    end = run_chain(Chain(tmp_path / "jobs.json"), lambda plan: FakeJob(record, results[len(started)], started, plan),
                    record, first_cause="start", first_note="", outputs=tmp_path,
                    situation=lambda result, plan, jobs, before: situation(
                        jobs=jobs, earlier_checkpoint=newest[jobs][0], checkpoint=newest[jobs][1], plan=plan),
                    run=NO_COMMANDS, on_step=steps.append)
    assert len(started) == 4 and end.stop.status == "environment" and "like the job before it" in end.stop.reason
