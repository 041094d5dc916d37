"""The log's metric roles (orchestrator/training/metric_roles.py), learned once the runtime check's real train.logs
exists: the stored mapping while train.py's logging code is unchanged and it still fits the log, else the first
guess, and the LLM asked only for the roles the guess left empty, and only when the log holds keys that could fill
them. An answered mapping is committed as the workspace's `metric_roles.json` (its own attempt, like a learned log
format) and reused for free; the first guess alone costs nothing and is made again from the log each time. Either
is kept in the run state, merged into the log format every reader uses, and the detectors left off without a
reward or an invalid-action rate are said before the formal run (claude.logs, the run's events, `status`, the
page).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from orchestrator.base.actionlog import Event
from orchestrator.llm import LLMError
from orchestrator.llm.asking import ask
from orchestrator.llm.json_answer import json_object
from orchestrator.llm.prompts import render
from orchestrator.run.limits import ensure_budget
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count
from orchestrator.training.logformat import LogFormat, logging_code_hash, read_log
from orchestrator.training.metric_roles import (METRIC_ROLES_FILE, ROLES, MetricRoles, candidates, first_guess,
                                                still_valid, validate_answer)

NODE = "metric_roles"
REASON = "the monitor judges the reward and the invalid-action rate under the names train.py logs them"


def _shown(values: list[float]) -> str:
    return f"{values[0]:.4g} ... {values[-1]:.4g} ({len(values)} updates)" if len(values) > 1 else f"{values[0]:.4g}"


def learn_metric_roles(state: RunState, ctx: RunContext, log_path: Path, log_format: LogFormat
                       ) -> tuple[LogFormat, dict]:
    """The log format with the metric roles merged in, and the state update (the roles; an answer's spend)."""
    records = read_log(log_path, log_format)
    code_hash = logging_code_hash(ctx.workspace.read(f"{GENERATED_DIR}/train.py") or "")
    stored = ctx.workspace.read(METRIC_ROLES_FILE)
    roles, update, outcome = None, {}, ""
    if stored:
        try:
            kept = MetricRoles.from_dict(json.loads(stored))
        except (ValueError, TypeError):
            kept = None
        if kept is not None and kept.code_hash == code_hash and still_valid(kept, records):
            roles, outcome = kept, f"reused {METRIC_ROLES_FILE}: {kept.describe()}"
    if roles is None:
        roles = replace(first_guess(records), code_hash=code_hash)
        open_keys = candidates(records, roles)
        if roles.missing() and open_keys:
            roles, update = _ask(state, ctx, records, roles, open_keys)
        elif roles.missing():
            roles = replace(roles, notes=[f"not asked: every key of train.logs is known ({', '.join(roles.missing())} "
                                          f"not among them)"])
        outcome = roles.describe()
    ctx.log.record(Event(ctx.run_id, NODE, "metric_roles", REASON, outcome))
    for off in roles.off():
        ctx.log.record(Event(ctx.run_id, NODE, "detector_off", "said before the formal run starts", off))
        ctx.on_event(f"metric_roles: {off}")
    keys = {**roles.format_keys(), **log_format.keys}
    return replace(log_format, keys=keys), {**update, "metric_roles": roles.to_dict()}


def _ask(state: RunState, ctx: RunContext, records, roles: MetricRoles, open_keys: dict[str, list[float]]
         ) -> tuple[MetricRoles, dict]:
    missing = {role: ROLES[role][1] for role in roles.missing()}
    ensure_budget(state, ctx.limits, NODE)
    prompt = render(NODE, ctx.prompts_dir, keys={k: _shown(v) for k, v in open_keys.items()}, roles=missing)
    ctx.on_event(f"metric_roles: asking which keys hold {', '.join(missing)}")
    try:
        answer = ask(ctx.llm, [{"role": "user", "content": prompt}],
                     lambda text: validate_answer(json_object(text, "the metric roles"), records, roles),
                     system=render("system", ctx.prompts_dir), tag=NODE, max_tokens=1000)
    except LLMError as exc:  # the run goes on with the guess; what stays off is said
        ctx.log.record(Event(ctx.run_id, NODE, "llm_metric_roles", REASON, f"no answer: {exc}"))
        return replace(roles, notes=[f"no answer: {str(exc)[:200]}"]), {}
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    attempt = attempt_count(state, NODE) + 1
    learned = answer.parsed or replace(roles, notes=[f"unusable answer: {answer.error.splitlines()[0][:200]}"])
    learned = replace(learned, code_hash=roles.code_hash)
    ctx.workspace.write(METRIC_ROLES_FILE, json.dumps(learned.to_dict(), indent=2) + "\n")
    outcome = ("learned: " if answer.parsed else "malformed; kept the guess: ") + learned.describe()
    sha = ctx.workspace.commit([METRIC_ROLES_FILE], node=NODE, attempt=attempt, outcome=outcome, tokens=tokens,
                               body=answer.error, allow_empty=True)
    ctx.log.record(Event(ctx.run_id, NODE, "llm_metric_roles", REASON, f"{outcome}; commit {sha}", tokens=tokens,
                         cost_usd=answer.cost_usd, extra={"sha": sha}))
    return learned, {"ledger": {NODE: row}, "attempts": [{"node": NODE, "attempt": attempt, "outcome": outcome,
                                                        "sha": sha, "tokens": tokens, "cost_usd": answer.cost_usd}]}
