"""rules, import_check, runtime_check: run a check, log it, leave evidence for fix or clear it.

A check that fails once its fix budget is spent ends the run `blocked`, with the evidence in the report.
A check that fails because of the machine (kind `environment`) ends the run `environment` at once, with
the line that says what to set or install; no fix is asked for, and `resume` runs the check again.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.checks import (CheckResult, RuntimeCheckSpec, judge_short_run, launch_probe_args, run_guards,
                                 run_import_check, short_run, unset_roles_note)
from orchestrator.sources.config_file import read_config
from orchestrator.faults import ENVIRONMENT
from orchestrator.run.limits import MachineFault
from orchestrator.llm import LLMError
from orchestrator.training.logformat import LogFormat, read_log
from orchestrator.nodes.logformat import known_format, learn_log_format, unread_log
from orchestrator.nodes.metric_roles import learn_metric_roles
from orchestrator.training.pace import WORK_ROLES, Pace, seconds_per_update
from orchestrator.sources.roles import CLI, ConfigRoles
from orchestrator.run.state import RunContext, RunState
from orchestrator.tiny.agent import TINY_AGENT, playing_model

REASONS = {
    "rules": "the seed's rules, checked by code after every generation and fix",
    "import_check": "Phase 1: each generated module must import in a fresh interpreter",
    "runtime_check": "Phase 2: launch_training.sh on a few episodes must log finite updates",
}


def fixes_for(state: RunState, check: str) -> int:
    return sum(1 for a in state.get("attempts") or [] if a["node"] == "fix" and a.get("check") == check)


def record_check(state: RunState, ctx: RunContext, result: CheckResult) -> dict:
    outcome = "passed" if result.passed else f"failed ({result.kind}): {result.summary}"
    ctx.log.record(Event(ctx.run_id, result.check, "check", REASONS[result.check], outcome,
                         extra={"seconds": round(result.seconds, 2), "fingerprint": "" if result.passed else result.fingerprint}))
    ctx.on_event(f"{result.check}: {outcome} ({result.seconds:.1f} s)")
    if result.passed:
        return {"evidence": None}
    if result.kind == ENVIRONMENT:
        stop_for_the_machine(ctx, result)
    update: dict = {"evidence": result.to_evidence()}
    used = fixes_for(state, result.check)
    if used >= ctx.limits.max_attempts_per_check:
        update |= {"status": "blocked",
                   "exit_reason": f"{result.check} still failing after {used} fix attempts: {result.summary}"}
    elif stubborn(state, result.check, result.fingerprint):
        update |= {"status": "blocked",
                   "exit_reason": f"{result.check}: the same failure survived {STUBBORN_ESCALATIONS} escalated fixes "
                                  f"(every file shown, what was tried listed); stopping early: {result.summary}"}
    return update


def stop_for_the_machine(ctx: RunContext, result: CheckResult) -> None:
    """The check failed because of the machine: no fix is asked for; the run stops with the check still next."""
    resume = f"once it is done, `python -m orchestrator resume {ctx.run_id}` runs {result.check} again"
    ctx.log.record(Event(ctx.run_id, result.check, ENVIRONMENT, "the failure's cause is the machine, not the "
                         "code: a fix cannot repair it, so none is paid for", f"{result.summary}; {resume}"))
    raise MachineFault(f"{result.summary}; {resume}", result.to_evidence())


STUBBORN_ESCALATIONS = 2  # escalated fixes that left the very same failure: more would only cost tokens


def stubborn(state: RunState, check: str, fingerprint: str) -> bool:
    """The failure with this fingerprint came back after STUBBORN_ESCALATIONS escalated fixes."""
    same = [a for a in state.get("attempts") or [] if a["node"] == "fix" and a.get("check") == check
            and a.get("escalated") and a.get("fingerprint") == fingerprint]
    return len(same) >= STUBBORN_ESCALATIONS


def rules(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    cli = ConfigRoles.from_dict(state["roles"]).delivery == CLI if state.get("roles") else None
    return record_check(state, ctx, run_guards(ctx.generated, ctx.source_of_truth,
                                               launch_args=launch_probe_args(ctx.generated, cli)))


def import_check(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    result = run_import_check(ctx.generated, source_of_truth=ctx.source_of_truth)
    for note in result.notes:
        ctx.log.record(Event(ctx.run_id, "import_check", "probe_note", "what the probe did with the game, and what "
                             "it could not verify", note))
    return {**record_check(state, ctx, result), "probe_notes": result.notes}


LEARNABLE = ("no_updates", "unreadable_log")  # the log may be fine but written in a format the guess cannot read


def runtime_check(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    spec = ctx.runtime_check
    if spec.model in ("", TINY_AGENT):
        model, plays, note = playing_model(ctx.project_root, ctx.generated)
        spec = replace(spec, model=model, plays=plays)
        ctx.log.record(Event(ctx.run_id, "runtime_check", "model",
                             "a model that writes helper calls, so the helpers really run in the short run",
                             note or f"the tiny agent {Path(model).name}"))
    roles = ConfigRoles.from_dict(state["roles"])
    note = unset_roles_note(roles)
    if note:
        ctx.log.record(Event(ctx.run_id, "runtime_check", "shrink", "a short run needs small values", note))
    gpus = len((state.get("probe") or {}).get("gpus") or [])
    run = short_run(ctx.generated, spec, roles, ctx.run_dir / "runtime_check", gpus, ctx.source_of_truth)
    log_format = known_format(ctx)
    result = judge_short_run(run, spec, log_format)
    learned: dict = {}
    if result.kind in LEARNABLE and not log_format.learned:
        found, result = result.summary, replace(result, summary=unread_log(run.log_path, result.summary))
        ctx.log.record(Event(ctx.run_id, "runtime_check", "first_guess", FIRST_GUESS_REASON, result.summary))
        try:
            described, learned = learn_log_format(state, ctx, run.log_path, found)
        except LLMError as exc:  # the run stops on what the guess found; a resume runs this check again
            raise LLMError(f"runtime_check: {result.summary}; no log-format answer: {exc}") from exc
        if described is not None:
            log_format = described
            result = judge_short_run(run, spec, log_format)
    pace = check_pace(run.log_path, log_format, spec, roles, ctx.generated) if result.passed else None
    if result.passed:
        log_format, metric_update = learn_metric_roles(state, ctx, run.log_path, log_format)
        for key in ("ledger", "attempts"):  # a log format and the metric roles both answered in this check
            if key in learned and key in metric_update:
                metric_update[key] = (learned[key] | metric_update[key] if key == "ledger"
                                      else learned[key] + metric_update[key])
        learned = {**learned, **metric_update}
    return {**record_check(state, ctx, result), **learned, "log_format": log_format.to_dict(),
            **({"check_pace": pace.to_dict()} if pace else {})}


def check_pace(log_path: Path, log_format: LogFormat, spec: RuntimeCheckSpec, roles: ConfigRoles,
               generated: Path) -> Pace | None:
    """The short run's seconds per update and its values by role (orchestrator.training.pace): what a formal run's time is
    estimated from."""
    seconds = seconds_per_update(read_log(log_path, log_format))
    if seconds is None:
        return None
    try:
        defaults = roles.read(read_config(generated / "grpo_config.py").defaults)
    except Exception:  # a config that does not load has failed the check already
        defaults = {}
    values = {**defaults, **spec.role_values(log_path.parent)}
    return Pace(seconds, {role: values.get(role) for role in WORK_ROLES}, spec.model)


FIRST_GUESS_REASON = "train.logs is read by the first guess for free; one LLM answer describes a format it cannot read"


CHECK_NODES: dict[str, Callable[[RunState, Runtime[RunContext]], dict]] = {
    "rules": rules, "import_check": import_check, "runtime_check": runtime_check}
