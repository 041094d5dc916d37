"""formal_train: size the config to the GPUs, launch, watch train.logs, stop on a serious anomaly.

The LLM proposes values; impossible ones are refused by the memory arithmetic before launching, and a
launch that would not run them is refused too: launch_training.sh is run first with recorders for this
machine's GPUs (rules/recorded_launch.py), and when train.py would get another value than the plan's, or
another process count, nothing starts. The job runs as a child process group (or a SLURM job) that this
node owns. A serious anomaly becomes evidence for `fix`, after which every check re-runs and the formal
run restarts, within the fix budget. A job whose saved config differs from the vetted plan is such an
anomaly (`config_mismatch`), with the launch script in the evidence, whatever its training curves say.

Formal attempt N owns `runs/RUN/formal-N/`, a folder no other run or attempt writes to: the job runs in
`code/` (a copy of generated/, so what the template writes beside train.py never lands untracked in the
workspace), the config's log and output folders are `logs/` and `outputs/`, and its train.logs is found
wherever below the folder the template writes it (`checks.find_log`, the runtime check's search), live,
while it trains. Once it ended, the logs, the job's output tails and the reproducibility manifest lie at the
top of that folder: what `status`, the page, the curves and the review read. A copy of them is committed in
the workspace's `training/formal-N/` whatever the outcome, as the attempt's record in git.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.llm.asking import Answer, ask
from orchestrator.training.chain import CANCELLED, CHAIN_FILE, Chain, ChainEnd, Plan, Situation, restarts, run_chain
from orchestrator.training.checkpoints import latest_update, link_restart_point
from orchestrator.checks import LOG_NAME, SAMPLE_LOG_NAME, copy_code, find_log, fingerprint
from orchestrator.base.execution import tail
from orchestrator.faults import DISK_FAULTS, Cause, cause_of
from orchestrator.sources.config_file import ConfigFile, read_config, value_kind
from orchestrator.training.formal import (DEFAULT_MODEL, given_values, is_stand_in, memory_text, mostly_unparseable,
                                          parse_proposal, token_cap_raise, vet)
from orchestrator.run.limits import Cancelled, MachineFault, ensure_budget
from orchestrator.training.manifest import record_job_config, record_jobs, saved_job_config, write_manifest
from orchestrator.training.logformat import LogFormat, event_files, read_log
from orchestrator.training.monitor import MonitorConfig, Progress, progress, summarize_trends
from orchestrator.training.plots import PLOTS_DIR, STOP_MARK, write_curves
from orchestrator.nodes.checks import fixes_for
from orchestrator.training.machine import ProbeResult
from orchestrator.rules.recorded_launch import NAME as LAUNCH_SCRIPT, check_recorded_launch
from orchestrator.tiny.agent import TINY_AGENT, playing_model
from orchestrator.llm.prompts import file_blocks, render
from orchestrator.sources.roles import CLI, ConfigRoles, deliver
from orchestrator.run.runs import FORMAL_JOB
from orchestrator.base.files import to_disk
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count
from orchestrator.training.pace import Pace, estimate_seconds
from orchestrator.training.sizing import node_request, over_limits, sbatch_options, shape_of
from orchestrator.training.slurm_site import clock, describe_options, effective_options, env_options
from orchestrator.training.job import JobResult, make_job, runner_in

TRAINING_DIR = "training"  # the workspace folder that holds each formal attempt's committed record
CODE, LOGS, OUTPUTS = "code", "logs", "outputs"  # inside the attempt's folder: where it runs, logs and saves
MANIFEST = "manifest.json"
RECORD_FILES = (LOG_NAME, SAMPLE_LOG_NAME, "job.stdout", "job.stderr", MANIFEST)  # the top of an attempt's folder
STOPPED = ("stopped", "hung", "timeout")  # job statuses where we ended the run, not the run itself


def formal_model(ctx: RunContext, machine: ProbeResult) -> str:
    if ctx.formal.model and ctx.formal.model != TINY_AGENT:
        return ctx.formal.model
    if machine.gpus and not ctx.formal.model:
        return DEFAULT_MODEL
    model, _, note = playing_model(ctx.project_root, ctx.generated)
    if note:
        ctx.log.record(Event(ctx.run_id, "formal_train", "model", "no GPU: the tiny agent plays", note))
    return model


def plan(ctx: RunContext, machine: ProbeResult, model: str, config_file: ConfigFile, roles: ConfigRoles,
         adjustments: dict):
    use_slurm = ctx.formal.use_slurm and machine.slurm
    if ctx.formal.plan:  # given whole (a child run trains with its parent's plan): vetted like a proposal, no LLM
        given = given_values(ctx.formal, ctx.workspace.read(f"{GENERATED_DIR}/grpo_config.py") or "", roles)
        try:
            return Answer(vet({**given, **adjustments, **ctx.formal.pinned}, config_file, roles, model, machine,
                              use_slurm))
        except ValueError as exc:
            return Answer(None, error=f"the given plan: {exc}")
    current = {**config_file.defaults, **roles.to_fields({"model": model})}
    site = site_options(ctx.generated, ctx.formal.sbatch_options, ()) if use_slurm else {}
    summary = machine.summary() + (f"\nsbatch options (the job's): {describe_options(site)}" if use_slurm else "")
    prompt = render("plan_formal", ctx.prompts_dir, probe_summary=summary, model=model, current=current,
                    estimate=memory_text(current, roles, model, machine, use_slurm), pinned=ctx.formal.pinned,
                    roles=roles.describe())
    grpo_config = ctx.workspace.read(f"{GENERATED_DIR}/grpo_config.py") or ""
    return ask(ctx.llm, [{"role": "user", "content": prompt}],
               lambda text: vet({**parse_proposal(text), **adjustments, **ctx.formal.pinned}, config_file, roles, model,
                                machine, use_slurm),
               system=render("system", ctx.prompts_dir), tag="formal_train",
               cache_prefix=file_blocks({"grpo_config.py": grpo_config}), max_tokens=4000)


def describe(progress: Progress, planned_updates: int | None = None, prefix: str = "formal_train: ") -> str:
    """The progress line; the total is the log's, else the plan's, else left out."""
    total = progress.total_updates or planned_updates
    eta = f", ETA {progress.eta_seconds:.0f} s" if progress.eta_seconds is not None else ""
    episode = f" episode {progress.episode}" if progress.episode is not None else ""
    values = "".join(f" {name} {value:.4g}" for name, value in (("reward", progress.reward_mean), ("loss", progress.loss))
                     if value is not None)
    where = "no update yet" if progress.update is None else f"update {progress.update}{f'/{total}' if total else ''}"
    return f"{prefix}{where}{episode}{values}{eta}"


def evidence_of(result: JobResult, log_tail: str) -> dict:
    anomaly = result.anomalies[0] if result.anomalies else None
    kind = anomaly.kind if anomaly else (result.failure_class or result.status)
    summary = anomaly.message if anomaly else f"the formal run ended {result.status} (exit {result.returncode})"
    text = "\n\n".join(part for part in (anomaly.evidence if anomaly else "", f"stderr tail:\n{tail(result.stderr_tail, 3000)}",
                                         f"train.logs tail:\n{log_tail}") if part)
    return {"check": "formal_train", "kind": kind, "summary": summary, "text": text, "files": ["train.py"],
            "fingerprint": fingerprint(f"formal_train\n{kind}\n{anomaly.evidence if anomaly else result.stderr_tail}")}


def exited_after_done(result: JobResult) -> bool:
    """The job failed only because a process died at exit after train.logs said done (monitor's
    exit_after_done), with no serious anomaly."""
    return (result.status == "failed" and not any(a.serious for a in result.anomalies)
            and any(a.kind == "exit_after_done" for a in result.anomalies))


def stop_marks(result: JobResult) -> dict:
    """Where the formal run went wrong, for its curves and its attempt record: the update of the first anomaly,
    the last update a run we stopped logged, and both as (update, label) marks."""
    anomaly = result.anomalies[0] if result.anomalies else None
    stopped_at = progress(result.records).update if result.status in STOPPED else None
    marks = [(anomaly.update, anomaly.kind)] if anomaly is not None and anomaly.update is not None else []
    marks += [(stopped_at, STOP_MARK)] if stopped_at is not None else []
    return {"marks": marks, "stopped_at": stopped_at, "anomaly_update": anomaly.update if anomaly else None}


def launch_text(folder: Path) -> str:
    script = folder / LAUNCH_SCRIPT
    return f"{LAUNCH_SCRIPT}:\n{script.read_text() if script.is_file() else '(missing)'}"


def launch_refusal(folder: Path, args: list[str], gpus: int) -> dict | None:
    """Evidence when launch_training.sh, run with recorders for this machine's GPUs, would not start train.py
    with the plan's values (and one process per GPU); None when it would."""
    violations = check_recorded_launch(folder, args, (gpus,), expect_processes=gpus > 0)
    if not violations:
        return None
    shown = "\n".join(str(v) for v in violations)
    summary = f"refused before launch: the recorded launch would not run the plan: {violations[0].message[:300]}"
    return {"check": "formal_train", "kind": "launch_overrides_plan", "summary": summary,
            "text": f"{shown}\n\nThe orchestrator's command: bash {LAUNCH_SCRIPT} {' '.join(args)}\n\n"
                    f"{launch_text(folder)}",
            "files": [LAUNCH_SCRIPT], "fingerprint": fingerprint(f"formal_train\nlaunch\n{shown}")}


def mismatch_evidence(folder: Path, differs: dict, args: list[str]) -> dict:
    """A job that ran with values other than the vetted plan: a serious anomaly, whatever its curves say."""
    shown = ", ".join(f"{k}: planned {planned!r}, ran {ran!r}" for k, (planned, ran) in differs.items())
    return {"check": "formal_train", "kind": "config_mismatch",
            "summary": f"the job ran with values other than the vetted plan ({shown}); something between the "
                       f"plan and train.py overrode them",
            "text": f"The job's saved config differs from the plan: {shown}.\nThe orchestrator's command: bash "
                    f"{LAUNCH_SCRIPT} {' '.join(args)}\nLook for values written after \"$@\", in variables, arrays or "
                    f"heredocs of the launch script, or set by train.py's code.\n\n{launch_text(folder)}",
            "files": [LAUNCH_SCRIPT, "train.py"], "fingerprint": fingerprint(f"formal_train\nconfig_mismatch\n{shown}")}


def small_issue_fix(state: RunState, ctx: RunContext, model: str, config: dict, roles: ConfigRoles, log_dir: Path,
                    log_format: LogFormat) -> dict:
    """Small issues of a finished run are fixed directly, each once: truncated outputs raise the token
    caps and restart; mostly unparseable actions go to fix as a prompt-format problem."""
    if is_stand_in(model):
        return {"evidence": None}
    trends = summarize_trends(read_log(log_dir / LOG_NAME, log_format))
    raised = token_cap_raise(trends, config, roles)
    if raised and not state.get("adjustments"):
        ctx.log.record(Event(ctx.run_id, "formal_train", "adjust", "outputs were mostly cut at their token cap",
                             f"raising {raised} and restarting the formal run"))
        return {"evidence": None, "adjustments": raised, "restart_formal": True}
    tried = any(a.get("check") == "formal_train" and a.get("kind") == "unparseable_actions"
                for a in state.get("attempts") or [])
    if mostly_unparseable(trends) and not tried:
        samples = (log_dir / SAMPLE_LOG_NAME).read_text() if (log_dir / SAMPLE_LOG_NAME).exists() else ""
        lines = [line for line in samples.splitlines() if "action" in line.lower() or "unparseable" in line.lower()]
        text = "\n".join(lines[-40:]) or "(no sampled episode)"
        summary = (f"{trends['invalid_action_rate_last_quarter']:.0%} of actions were unparseable or invalid in the "
                   "last quarter of the run: fix the action prompt format or the parser")
        return {"evidence": {"check": "formal_train", "kind": "unparseable_actions", "summary": summary, "text": text,
                             "files": ["prompt_template.py", "train.py"], "fingerprint": fingerprint(summary)}}
    return {"evidence": None}


def delivered_values(config: dict, roles: ConfigRoles, defaults: dict) -> dict:
    """What reaches train.py of a vetted config: every scalar value (a flag or a default written into
    grpo_config.py), so nothing hard-coded elsewhere silently wins over the plan; a config file gets only what
    differs from its defaults."""
    if roles.delivery == CLI:
        return {k: v for k, v in config.items() if value_kind(v) != "other"}
    return {k: v for k, v in config.items() if v != defaults.get(k)}


def disk_cause(result: JobResult) -> Cause | None:
    """Why a job failed when its saves met a full or read-only disk (the machine's fault, not the code's); None
    when they did not."""
    disk = cause_of(f"{result.stderr_tail}\n{result.stdout_tail}") if result.status == "failed" else None
    return disk if disk is not None and disk.machine and disk.fault in DISK_FAULTS else None


def collect_logs(folder: Path) -> None:
    """train.logs and Sample_EP.logs copied to the top of the attempt's folder from wherever below it the
    template wrote them."""
    for name in (LOG_NAME, SAMPLE_LOG_NAME):
        found = find_log(folder, name)
        if found.is_file() and found != folder / name:
            shutil.copyfile(found, folder / name)


def record_in_workspace(folder: Path, target: Path) -> None:
    """The attempt's record (RECORD_FILES and the TensorBoard event files below its folder) copied into the
    workspace folder its commit holds, replacing what an earlier run's attempt of the same number left there."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in RECORD_FILES:
        if (folder / name).is_file():
            shutil.copyfile(folder / name, target / name)
    for events in event_files(folder):
        copy = target / events.relative_to(folder)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(events, copy)


def formal_train(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    ensure_budget(state, ctx.limits, "formal_train")
    machine = ProbeResult.from_dict(state["probe"])
    model = formal_model(ctx, machine)
    config_file = read_config(ctx.generated / "grpo_config.py")
    roles = ConfigRoles.from_dict(state["roles"])
    log_format = LogFormat.from_dict(state.get("log_format"))
    answer = plan(ctx, machine, model, config_file, roles, state.get("adjustments") or {})
    row = answer.ledger_row()
    attempt = attempt_count(state, "formal_train") + 1
    spend = {"ledger": {"formal_train": row}, "restart_formal": False}
    if answer.parsed is None:
        reason = f"formal_train: no feasible config was proposed: {answer.error.splitlines()[0][:300]}"
        ctx.log.record(Event(ctx.run_id, "formal_train", "plan", "size the formal run to the GPUs", reason,
                             tokens=int(row["tokens"]), cost_usd=answer.cost_usd))
        return {**spend, "status": "blocked", "exit_reason": reason}
    config = answer.parsed
    defaults = config_file.defaults
    overrides = {k: v for k, v in config.items() if v != defaults.get(k)}
    job_name = FORMAL_JOB.format(attempt)
    folder = ctx.run_dir / job_name
    rel_dir = f"{TRAINING_DIR}/{job_name}"
    record = ctx.run_dir / "jobs" / f"{job_name}.json"
    # a recorded job may still be running (a resume adopts it), or the chain of its jobs goes on: its folder stays
    fresh = not record.exists() and not (folder / CHAIN_FILE).exists()
    if fresh:
        shutil.rmtree(folder, ignore_errors=True)
    elif not record.exists():  # it goes on after a stop: the copies at the top come again when it ends, and until
        for name in (LOG_NAME, SAMPLE_LOG_NAME):  # then the search for the live log must not find them
            (folder / name).unlink(missing_ok=True)
    (folder / LOGS).mkdir(parents=True, exist_ok=True)
    resumable = roles.field_of("resume_from") is not None
    config = {**config, **roles.to_fields({"output_folder": str(folder / OUTPUTS), "log_folder": str(folder / LOGS),
                                           "resume_from": "latest"})}
    first_cause, first_note = restart_point(state, ctx, folder, attempt, resumable) if fresh else ("start", "")
    delivered = delivered_values(config, roles, defaults)
    args = deliver(roles, delivered, ctx.generated / "grpo_config.py")
    code = folder / CODE
    if not code.is_dir():  # a recorded job's code stays as it was when the job started
        copy_code(ctx.generated, code)
    use_slurm = ctx.formal.use_slurm and machine.slurm
    chain = Chain(folder / CHAIN_FILE)
    site = site_options(code, ctx.formal.sbatch_options, chain.plan.options) if use_slurm else {}
    write_manifest(folder / MANIFEST, run_id=ctx.run_id, config=config, model_id=model, probe=state["probe"],
                   source_of_truth=ctx.source_of_truth, seeds={"random_seed": roles.read(config).get("random_seed")},
                   request_ids=answer.request_ids, workspace_sha=ctx.workspace.head_sha(),
                   slurm={"sbatch_options": {k: {"value": v, "source": s} for k, (v, s) in site.items()}}
                   if use_slurm else None)
    changed = [rel_dir] + ([f"{GENERATED_DIR}/grpo_config.py"] if roles.delivery != CLI else [])
    refusal = launch_refusal(code, args, len(machine.gpus))
    if refusal is not None:
        ctx.log.record(Event(ctx.run_id, "formal_train", "refused", "the launch must run the vetted plan",
                             refusal["summary"], tokens=int(row["tokens"]), cost_usd=answer.cost_usd))
        ctx.on_event(f"formal_train: {refusal['summary']}")
        record_in_workspace(folder, ctx.workspace.path(rel_dir))
        sha = ctx.workspace.commit(changed, node="formal_train", attempt=attempt, outcome="refused before launch",
                                   tokens=int(row["tokens"]), body=refusal["summary"], allow_empty=True)
        return {**spend, **with_budget(state, ctx, refusal),
                "attempts": [{"node": "formal_train", "attempt": attempt, "outcome": "refused before launch",
                              "sha": sha, "tokens": int(row["tokens"]), "cost_usd": answer.cost_usd,
                              "anomaly": {"kind": refusal["kind"], "summary": refusal["summary"], "update": None}}]}
    if not resumable and attempt_count(state, "formal_train") == 0:
        said = ("the config has no resume field (role resume_from): a job restarted after a time limit, a "
                "preemption, a lost node or a fix begins at update 0")
        ctx.log.record(Event(ctx.run_id, "formal_train", "resume", "said once, before the first formal launch", said))
        ctx.on_event(f"formal_train: {said}")
    if use_slurm:
        within_limits(state, ctx, machine, code, site, config, roles, model, resumable)
    ctx.log.record(Event(ctx.run_id, "formal_train", "launch", "the formal run, sized to this machine",
                         f"{'sbatch' if use_slurm else 'bash'} launch_training.sh {' '.join(args)}"
                         + (f"; sbatch options: {describe_options(site)}" if use_slurm else ""),
                         tokens=int(row["tokens"]), cost_usd=answer.cost_usd, extra={"overrides": overrides}))
    ctx.on_event(f"formal_train: launching with {overrides or 'the default config'} on {model}"
                 + (f"; sbatch options {describe_options(site)}" if use_slurm else ""))
    if first_note:
        ctx.log.record(Event(ctx.run_id, "formal_train", "restart_point", "a fix restarts from the last sound "
                             "checkpoint, not from update 0", first_note))
        ctx.on_event(f"formal_train: {first_note}")
    job = JobSpec(config, delivered, args, roles, log_format, record, resumable)
    end = follow_jobs(ctx, machine, chain, folder, code, job, first_cause=first_cause, first_note=first_note)
    result = end.result
    for name, text in (("job.stdout", result.stdout_tail), ("job.stderr", result.stderr_tail)):
        (folder / name).write_text(text)
    collect_logs(folder)
    if end.stop is not None:  # the attempt goes on after `resume`: its record and commit come when it ends
        stopped = {"check": "formal_train", "kind": end.stop.status, "summary": end.stop.reason,
                   "text": end.stop.reason}
        raise (Cancelled(end.stop.reason) if end.stop.status == CANCELLED else MachineFault(end.stop.reason, stopped))
    disk = disk_cause(result)
    if disk is not None:
        record.unlink(missing_ok=True)  # `resume` starts the next job, from the last checkpoint it saved
        reason = (f"the formal job failed on the machine, not the code: {disk.remedy}; then "
                  f"`python -m orchestrator resume {ctx.run_id}` goes on from its last checkpoint")
        raise MachineFault(reason, {"check": "formal_train", "kind": disk.fault, "summary": disk.remedy,
                                    "text": tail(result.stderr_tail, 3000)})
    config = {**config, **chain.plan.changes}
    plots_dir = ctx.run_dir / PLOTS_DIR / job_name
    where = stop_marks(result)
    restarted = restarts(chain.segments, read_log(folder / LOG_NAME, log_format))
    record_jobs(folder / MANIFEST, [asdict(s) for s in chain.segments])
    curves = write_curves(folder / LOG_NAME, plots_dir, job_name, log_format, marks=where["marks"], restarts=restarted)
    drawn = curves.reason or f"{len(curves.files)} curves in {plots_dir}"
    ctx.log.record(Event(ctx.run_id, "formal_train", "curves", "learning you can see: a PNG per metric", drawn))
    ctx.on_event(f"formal_train: {drawn}")
    mismatch = None
    saved = saved_job_config(folder, set(config))
    if saved is not None:
        differs = record_job_config(folder / MANIFEST, config, *saved)
        if differs:
            mismatch = mismatch_evidence(ctx.generated, differs, args)
            ctx.log.record(Event(ctx.run_id, "formal_train", "config_mismatch",
                                 "the job must run with the vetted plan: a serious anomaly", mismatch["summary"]))
            ctx.on_event(f"formal_train: SERIOUS {mismatch['summary']}")
    if exited_after_done(result):  # trained to the end; a process died at exit: nothing for fix to repair
        result = replace(result, status="finished")
    outcome = result.status + (f" ({result.anomalies[0].kind})" if result.anomalies else
                               " (config_mismatch)" if mismatch else "")
    record_in_workspace(folder, ctx.workspace.path(rel_dir))
    sha = ctx.workspace.commit(changed, node="formal_train", attempt=attempt, outcome=outcome, tokens=int(row["tokens"]),
                               body=f"model {model}; overrides {overrides}; {len(result.records)} log records")
    ctx.log.record(Event(ctx.run_id, "formal_train", "watch", "monitor train.logs until the run ends or misbehaves",
                         f"{outcome} after {result.seconds:.0f} s; commit {sha}", extra={"sha": sha}))
    ctx.on_event(f"formal_train: {outcome} after {result.seconds:.0f} s")
    record_row = {"node": "formal_train", "attempt": attempt, "outcome": outcome, "sha": sha,
                  "tokens": int(row["tokens"]), "cost_usd": answer.cost_usd, "stopped_at": where["stopped_at"],
                  "jobs": [{"job_id": s.job_id, "cause": s.cause, "status": s.status} for s in chain.segments],
                  "restarts": restarted, **({"sbatch": describe_options(site)} if use_slurm else {})}
    update = {**spend, "formal_log_dir": to_disk(str(folder), ctx.project_root), "attempts": [record_row]}
    if result.status == "finished" and mismatch is None:
        return {**update, **small_issue_fix(state, ctx, model, config, roles, folder, log_format)}
    log_text = (folder / LOG_NAME).read_text() if (folder / LOG_NAME).exists() else ""
    evidence = mismatch if result.status == "finished" else evidence_of(result, tail(log_text, 3000))
    record_row["anomaly"] = {"kind": evidence["kind"], "summary": evidence["summary"],
                             "update": None if mismatch else where["anomaly_update"]}
    return {**update, **with_budget(state, ctx, evidence)}


@dataclass(frozen=True)
class JobSpec:
    """What a formal job is launched with: the vetted config, the values delivered to train.py (and the launch
    script's arguments they became), how its config and logs are read, its record (runs/RUN/jobs/NAME.json)."""

    config: dict
    delivered: dict
    args: list[str]
    roles: ConfigRoles
    log_format: LogFormat
    record: Path
    resumable: bool


def follow_jobs(ctx: RunContext, machine: ProbeResult, chain: Chain, folder: Path, code: Path, job: JobSpec, *,
                first_cause: str = "start", first_note: str = "", node: str = "formal_train",
                label: str = "") -> ChainEnd:
    """The formal run's chain of jobs (one job, or the next ones after a cluster's endings: time limits, requeues,
    lost nodes), launched from `code` into `folder` and watched until one ends in a way that is not the cluster's.
    Progress lines are `NODE: [LABEL ]update k/N ...`."""
    use_slurm = ctx.formal.use_slurm and machine.slurm
    planned = job.roles.read(job.config).get("updates_total")
    prefix = f"{node}: {label} " if label else f"{node}: "

    def start(plan: Plan):
        job_args = (deliver(job.roles, {**job.delivered, **plan.changes}, code / "grpo_config.py") if plan.changes
                    else job.args)
        return make_job(code / LAUNCH_SCRIPT, job_args, use_slurm=use_slurm, log_path=folder / LOG_NAME,
                        locate_log=lambda: find_log(folder),
                        locate_samples=lambda: find_log(folder, SAMPLE_LOG_NAME), timeout_s=ctx.formal.timeout_s,
                        poll_s=ctx.formal.poll_s,
                        monitor=replace(MonitorConfig(), hang_seconds=ctx.formal.hang_seconds),
                        on_progress=lambda p: ctx.on_event(describe(p, planned, prefix)),
                        record=job.record, log_format=job.log_format, cluster=machine.cluster(),
                        sbatch_options=[*ctx.formal.sbatch_options, *plan.options])

    def situation(result: JobResult, plan: Plan, jobs: int, before: int | None) -> Situation:
        request = node_request((code / LAUNCH_SCRIPT).read_text(),
                               [*env_options(os.environ), *ctx.formal.sbatch_options, *plan.options])
        return Situation(job.resumable, jobs, ctx.formal.max_jobs, latest_update(folder), before, request,
                         machine.cluster(), {**job.config, **plan.changes}, job.roles, plan,
                         f"python -m orchestrator resume {ctx.run_id}")

    def on_step(line: str) -> None:
        ctx.log.record(Event(ctx.run_id, node, "resubmit" if chain.running else "cluster_ending",
                             "the cluster ended the job: no fix is paid for", line))
        ctx.on_event(prefix + line)

    return run_chain(chain, start, job.record, first_cause=first_cause, first_note=first_note, outputs=folder,
                     situation=situation, run=runner_in(code), on_step=on_step)


def restart_point(state: RunState, ctx: RunContext, folder: Path, attempt: int, resumable: bool) -> tuple[str, str]:
    """(cause, note) of an attempt's first job. After a fix of a serious anomaly at update k, the newest checkpoint
    the stopped attempt saved before k is linked into this attempt's folder, where `resume_from latest` finds it:
    the restart begins there, not at update 0."""
    earlier = [a for a in state.get("attempts") or [] if a["node"] == "formal_train"]
    anomaly = (earlier[-1].get("anomaly") or {}) if earlier else {}
    if anomaly.get("update") is None or anomaly.get("kind") == "config_mismatch":
        return "start", ""
    before, name = anomaly["update"], FORMAL_JOB.format(earlier[-1]["attempt"])
    if not resumable:
        return "fix", f"the config has no resume field: formal-{attempt} begins at update 0"
    linked = link_restart_point(ctx.run_dir / name, folder, before)
    if linked is None:
        return "fix", f"{name} saved no checkpoint before the anomaly at update {before}: formal-{attempt} begins at 0"
    update, link = linked
    return "fix", (f"formal-{attempt} goes on from {name}'s {link.name} (update {update}), the last checkpoint "
                   f"before the anomaly at update {before}")


def site_options(code: Path, given: tuple[str, ...] | list[str], added: tuple[str, ...]) -> dict:
    """The formal job's sbatch options, each with its value and where it came from (slurm_site)."""
    script = code / LAUNCH_SCRIPT
    return effective_options(sbatch_options(script.read_text()) if script.is_file() else [], os.environ, given, added)


def within_limits(state: RunState, ctx: RunContext, machine: ProbeResult, code: Path, site: dict, config: dict,
                  roles: ConfigRoles, model: str, resumable: bool) -> None:
    """Before sbatch: the request within its partition's limits and, for a template that cannot resume, the plan's
    estimated time within the job's time limit; else the run stops `environment` with the numbers."""
    cluster = machine.cluster()
    if cluster is None:
        return
    request = node_request((code / LAUNCH_SCRIPT).read_text(), [f"--{k}={v}" if v else f"--{k}" for k, (v, _) in
                                                                 site.items()])
    problem = over_limits(request, cluster)
    limits = cluster.limits(request.partitions[0] if request.partitions else None)
    pace = Pace.from_dict(state.get("check_pace"))
    if problem is None and not resumable and limits is not None and pace is not None:
        limit = limits.time_limit_s(request.time_s)
        estimate = estimate_seconds(pace, roles.read(config), shape_of(pace.model), shape_of(model))
        if limit is not None and estimate is not None and estimate[0] > limit:
            problem = (f"the formal run is estimated at {clock(estimate[0])} ({estimate[0]:.0f} s: {estimate[1]}), "
                       f"longer than its job may run in partition {limits.name}, {clock(limit)} ({limit} s), and the "
                       "config has no resume field, so a job ended by its time limit would start again at update 0. "
                       "Choose a partition with a longer MaxTime (--sbatch-option partition=...), train for fewer "
                       "updates (--formal-set), or give the config a resume field")
    if problem is not None:
        reason = f"formal_train refused before sbatch: {problem}; then `python -m orchestrator resume {ctx.run_id}`"
        ctx.log.record(Event(ctx.run_id, "formal_train", "environment", "the plan must fit the partition's limits",
                             reason, extra={"sbatch_options": describe_options(site)}))
        ctx.on_event(f"formal_train: sbatch options {describe_options(site)}")
        raise MachineFault(reason, {"check": "formal_train", "kind": "environment", "summary": reason,
                                    "text": f"{limits.describe() if limits else ''}\n{request.describe()}"})


def with_budget(state: RunState, ctx: RunContext, evidence: dict) -> dict:
    """The evidence for fix, or a blocked run once the formal run's fix budget is spent."""
    used = fixes_for(state, "formal_train")
    if used >= ctx.limits.max_attempts_per_check:
        return {"evidence": evidence, "status": "blocked",
                "exit_reason": f"formal_train still failing after {used} fixes: {evidence['summary']}"}
    return {"evidence": evidence}
