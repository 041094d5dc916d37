"""seed_runs: a child run's two arms trained on the same seeds, then the verdict between them.

The child's formal run is the child arm's first seed and the parent's own formal run the parent arm's (the child
trained with the parent's plan and seed: orchestrator.training.formal.given_values). Every other seed trains the
arm's code as its formal attempt launched it (that attempt's `code/`) with the arm's plan, only the seed changed, as
a formal job of its own: the same launch script, job machinery and monitor (orchestrator.nodes.train.follow_jobs),
on a SLURM cluster a job of its own with the formal run's sbatch options. Seed runs go in
`runs/RUN/arms/ARM/seed-S/`. A seed run the monitor stops (a NaN, a hang) is shown and left out of the verdict;
none is sent to fix: the idea's code passed its checks and one formal run. A fault of the machine stops the run
`environment`, and `resume` trains the seeds that have not finished.

Then the verdict (orchestrator.ideas.verdict) is written as `runs/RUN/comparison.json`, the comparison page
(orchestrator.page.compare: a page, like the run's, that the run writes) beside it, and the arms' logs and the
verdict are committed as the node's attempt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.base.execution import tail
from orchestrator.base.files import from_disk, write_atomic
from orchestrator.checks import copy_code
from orchestrator.ideas.arms import CHILD, FINISHED, PARENT, child_arms, read_result, seed_folder, write_result
from orchestrator.ideas.lineage import COMPARISON_FILE, Lineage
from orchestrator.ideas.verdict import Comparison, compare
from orchestrator.nodes.train import (CODE, LOGS, MANIFEST, OUTPUTS, RECORD_FILES, STOPPED, TRAINING_DIR, JobSpec,
                                      collect_logs, delivered_values, disk_cause, exited_after_done, follow_jobs)
from orchestrator.page.compare import write_compare_page
from orchestrator.run.limits import Cancelled, MachineFault
from orchestrator.run.runs import read_state
from orchestrator.run.state import RunContext, RunState, attempt_count
from orchestrator.sources.config_file import read_config
from orchestrator.sources.roles import ConfigRoles, deliver
from orchestrator.training.chain import CANCELLED, CHAIN_FILE, Chain
from orchestrator.training.logformat import LogFormat
from orchestrator.training.machine import ProbeResult
from orchestrator.training.manifest import write_manifest

NODE = "seed_runs"
REASON = "both arms on the same seeds, so the comparison has a spread"


def planned_config(folder: Path) -> dict:
    """The config a formal attempt was planned with (its manifest)."""
    return dict(json.loads((folder / MANIFEST).read_text())["config"])


def outcome_of(result) -> str:
    if result.status == "finished" or exited_after_done(result):
        return FINISHED
    anomaly = result.anomalies[0].kind if result.anomalies else result.failure_class
    return f"{result.status} ({anomaly})" if anomaly else result.status


def train_seed(ctx: RunContext, state: RunState, machine: ProbeResult, roles: ConfigRoles, arm: str, seed: int,
               code_from: Path, planned: dict, log_format: dict) -> str:
    """One seed run of one arm, in its own folder: the arm's code and plan with this seed; how it ended."""
    folder = seed_folder(ctx.run_dir, arm, seed)
    record = ctx.run_dir / "jobs" / f"{arm}-seed-{seed}.json"
    shutil.rmtree(folder, ignore_errors=True)  # a seed run that did not reach its result (a crash) starts again
    record.unlink(missing_ok=True)
    (folder / LOGS).mkdir(parents=True)
    code = copy_code(code_from, folder / CODE)
    config = {**planned, **roles.to_fields({"random_seed": seed, "output_folder": str(folder / OUTPUTS),
                                            "log_folder": str(folder / LOGS), "resume_from": "latest"})}
    delivered = delivered_values(config, roles, read_config(code / "grpo_config.py").defaults)
    args = deliver(roles, delivered, code / "grpo_config.py")
    write_manifest(folder / MANIFEST, run_id=ctx.run_id, config=config, model_id=str(roles.read(config).get("model")),
                   probe=state["probe"], source_of_truth=ctx.source_of_truth, seeds={"random_seed": seed},
                   request_ids=[], workspace_sha=ctx.workspace.head_sha())
    ctx.log.record(Event(ctx.run_id, NODE, "launch", REASON, f"{arm} arm, seed {seed}: bash launch_training.sh "
                         f"{' '.join(args)}"))
    end = follow_jobs(ctx, machine, Chain(folder / CHAIN_FILE), folder, code,
                      JobSpec(config, delivered, args, roles, LogFormat.from_dict(log_format), record,
                              roles.field_of("resume_from") is not None), node=NODE, label=f"{arm} seed {seed}")
    result = end.result
    for name, text in (("job.stdout", result.stdout_tail), ("job.stderr", result.stderr_tail)):
        (folder / name).write_text(text)
    collect_logs(folder)
    if end.stop is not None:
        stopped = {"check": NODE, "kind": end.stop.status, "summary": end.stop.reason, "text": end.stop.reason}
        raise (Cancelled(end.stop.reason) if end.stop.status == CANCELLED else MachineFault(end.stop.reason, stopped))
    disk = disk_cause(result)
    if disk is not None:  # no result is written: `resume` trains this seed again
        raise MachineFault(f"{arm} seed {seed} failed on the machine, not the code: {disk.remedy}; then `python -m "
                           f"orchestrator resume {ctx.run_id}` trains the seeds that have not finished",
                           {"check": NODE, "kind": disk.fault, "summary": disk.remedy,
                            "text": tail(result.stderr_tail, 3000)})
    outcome = outcome_of(result)
    write_result(folder, seed, outcome, seconds=round(result.seconds, 1), updates=len(
        [r for r in result.records if r.kind == "train"]), stopped=result.status in STOPPED)
    ctx.log.record(Event(ctx.run_id, NODE, "watch", REASON, f"{arm} arm, seed {seed}: {outcome} after "
                         f"{result.seconds:.0f} s"))
    ctx.on_event(f"{NODE}: {arm} seed {seed}: {outcome} after {result.seconds:.0f} s")
    return outcome


def record_arms(ctx: RunContext, comparison: Comparison) -> list[str]:
    """The seed runs' records and the verdict copied into the workspace (training/arms/...): the attempt's commit."""
    target = ctx.workspace.path(f"{TRAINING_DIR}/arms")
    shutil.rmtree(target, ignore_errors=True)
    for folder in sorted((ctx.run_dir / "arms").glob("*/seed-*")):
        into = target / folder.parent.name / folder.name
        into.mkdir(parents=True)
        for name in (*RECORD_FILES, "result.json"):
            if (folder / name).is_file():
                shutil.copyfile(folder / name, into / name)
    target.mkdir(parents=True, exist_ok=True)
    (target / COMPARISON_FILE).write_text(json.dumps(comparison.to_dict(), indent=1))
    return [f"{TRAINING_DIR}/arms"]


def seed_runs(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    lineage = Lineage.load(ctx.run_dir)
    if lineage is None:
        raise RuntimeError(f"{NODE} runs in a child run only: {ctx.run_dir / 'idea.json'} is missing")
    machine = ProbeResult.from_dict(state["probe"])
    roles = ConfigRoles.from_dict(state["roles"])
    own = Path(from_disk(state["formal_log_dir"], ctx.project_root))
    parent_state = read_state(ctx.project_root / "runs" / lineage.parent) or {}
    arms = {PARENT: (Path(lineage.parent_formal), lineage.plan, parent_state.get("log_format") or {}),
            CHILD: (own, planned_config(own), state.get("log_format") or {})}
    for arm, (formal, planned, log_format) in arms.items():
        for seed in lineage.seeds[1:]:
            if read_result(seed_folder(ctx.run_dir, arm, seed)) is None:
                train_seed(ctx, state, machine, roles, arm, seed, formal / CODE, planned, log_format)
    comparison = compare(*child_arms(ctx.project_root, ctx.run_id))
    write_atomic(ctx.run_dir / COMPARISON_FILE, json.dumps(comparison.to_dict(), indent=1))
    page = write_compare_page(ctx.project_root, [lineage.parent, ctx.run_id])
    attempt = attempt_count(state, NODE) + 1
    summary = "; ".join(f"{m.label} {m.verdict}" for m in comparison.metrics)
    sha = ctx.workspace.commit(record_arms(ctx, comparison), node=NODE, attempt=attempt, outcome=summary, tokens=0,
                               body="\n".join([m.line for m in comparison.metrics] + comparison.excluded),
                               allow_empty=True)
    for metric in comparison.metrics:
        ctx.on_event(f"{NODE}: {metric.line}")
    ctx.log.record(Event(ctx.run_id, NODE, "verdict", "the idea's effect against seed noise, metric by metric",
                         f"{summary}; page {page}; commit {sha}", extra={"sha": sha}))
    return {"attempts": [{"node": NODE, "attempt": attempt, "outcome": summary, "sha": sha, "tokens": 0,
                          "cost_usd": 0.0}]}
