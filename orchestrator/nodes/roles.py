"""map_roles: which of the researcher's GRPOConfig fields play the roles the orchestrator needs.

The LLM is shown a guess made from the field names and answers one small JSON object with the roles the
guess got wrong (its output grows with the guess's mistakes, not with the number of roles); code completes
it with the guess and checks every name and kind against the real dataclass. The mapping is written to the workspace
(`config_roles.json`, committed) and kept in the run state; a later run whose stored mapping still
fits the config reuses it without a call.
"""

from __future__ import annotations

import json

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.llm.asking import ask
from orchestrator.sources.config_file import field_help, read_config
from orchestrator.run.limits import ensure_budget
from orchestrator.llm.prompts import file_blocks, render
from orchestrator.llm.json_answer import json_object
from orchestrator.sources.roles import (ROLES, ConfigRoles, parses_command_line, suggest_roles, validate_roles,
                               with_guess)
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count

ROLES_FILE = "config_roles.json"
REASON = "learn once which config fields hold the model, sizes, token caps and folders, and how values reach train.py"


def map_roles(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    config_text = ctx.workspace.read(f"{GENERATED_DIR}/grpo_config.py") or ""
    template_text = ctx.workspace.read(f"{GENERATED_DIR}/grpo_template.py") or ""
    kinds = read_config(ctx.generated / "grpo_config.py").kinds
    cli_possible = parses_command_line(template_text, config_text)

    stored = ctx.workspace.read(ROLES_FILE)
    if stored is not None:
        try:
            roles = validate_roles(json_object(stored, "the roles"), kinds, cli_possible=cli_possible)
        except ValueError as exc:
            ctx.log.record(Event(ctx.run_id, "map_roles", "discard", "the stored mapping must fit the current config",
                                 f"asking again: {exc}"))
        else:
            ctx.log.record(Event(ctx.run_id, "map_roles", "skip", REASON,
                                 f"skipped: {ROLES_FILE} still fits the config (0 tokens)"))
            ctx.on_event("map_roles: skipped, the stored mapping still fits the config")
            return {"roles": roles.to_dict(), "skipped": ["map_roles"]}

    ensure_budget(state, ctx.limits, "map_roles")
    suggestion = suggest_roles(kinds, field_help(config_text), cli_possible=cli_possible)

    def parse(text: str) -> ConfigRoles:
        return validate_roles(with_guess(json_object(text, "the roles"), suggestion), kinds, cli_possible=cli_possible)

    prompt = render("map_roles", ctx.prompts_dir, roles=ROLES, suggestion=json.dumps(suggestion, indent=2),
                    cli_possible=cli_possible)
    ctx.on_event("map_roles: asking which config fields play which role")
    answer = ask(ctx.llm, [{"role": "user", "content": prompt}], parse, system=render("system", ctx.prompts_dir),
                 tag="map_roles", cache_prefix=file_blocks({"grpo_config.py": config_text,
                                                            "grpo_template.py": template_text}), max_tokens=2000)
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    attempt = attempt_count(state, "map_roles") + 1
    if answer.parsed is None:
        reason = f"map_roles: the LLM's mapping stayed unusable after a re-ask: {answer.error}"
        sha = ctx.workspace.commit([], node="map_roles", attempt=attempt, outcome="malformed", tokens=tokens,
                                   body=reason, allow_empty=True)
        ctx.log.record(Event(ctx.run_id, "map_roles", "llm_map_roles", REASON, f"blocked: {answer.error}",
                             tokens=tokens, cost_usd=answer.cost_usd, extra={"sha": sha}))
        return {"ledger": {"map_roles": row}, "status": "blocked", "exit_reason": reason,
                "attempts": [{"node": "map_roles", "attempt": attempt, "outcome": "malformed", "sha": sha,
                              "tokens": tokens, "cost_usd": answer.cost_usd}]}
    roles = answer.parsed
    ctx.workspace.write(ROLES_FILE, json.dumps({"roles": roles.fields, "delivery": roles.delivery,
                                                "notes": roles.notes}, indent=2) + "\n")
    sha = ctx.workspace.commit([ROLES_FILE], node="map_roles", attempt=attempt, outcome="mapped", tokens=tokens,
                               body=roles.describe())
    absent = ", ".join(roles.absent()) or "none"
    ctx.log.record(Event(ctx.run_id, "map_roles", "llm_map_roles", REASON,
                         f"delivery {roles.delivery}; roles without a field: {absent}; commit {sha}", tokens=tokens,
                         cost_usd=answer.cost_usd, extra={"sha": sha, "roles": roles.fields}))
    ctx.on_event(f"map_roles: values reach train.py by {roles.delivery}; roles without a field: {absent}")
    return {"roles": roles.to_dict(), "ledger": {"map_roles": row},
            "attempts": [{"node": "map_roles", "attempt": attempt, "outcome": "mapped", "sha": sha, "tokens": tokens,
                          "cost_usd": answer.cost_usd}]}
