"""Steps 1-4: each generate node asks the LLM for its files, writes them, commits the attempt.

Steps 1, 2 and 4 are answered with whole files. Step 3 is answered with the code of the template's
CUSTOMIZE sections only, and train.py is the template with that code spliced in: its GENERIC sections
and marker lines are the researcher's by construction, and the answer grows with the holes, not with
the template. Step 1 is answered with helpers.py only: helper_readme.md is rendered from it by code
(orchestrator/rules/helper_docs.py) and committed with it. A step whose outputs already exist and pass their
guards is skipped: no tokens are spent (re-runs); a missing or stale readme is rendered again, for free.
Every attempt is a commit, an empty one when the answer stayed malformed.

On a server with a short context (orchestrator.llm.asking) the prompt is fitted: the template's GENERIC
sections summarised, the input a step can do without left out (Step 2: helpers.py beside its rendered readme;
Step 3: the readme beside helpers.py), the other files outlined. A Step 3 answer cut by the room the server
leaves is asked for again one CUSTOMIZE section per request, and train.py is spliced from the parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.llm.asking import Answer, ask
from orchestrator.checks import LOG_NAME
from orchestrator.llm.edits import (SECTIONS_FORMAT, WHOLE_FILE_FORMAT, format_error, parse_section, parse_sections,
                                    read_files)
from orchestrator.llm.fitting import forms
from orchestrator.rules.helper_docs import rendered_docs, stale_docs
from orchestrator.rules import check_folder, errors
from orchestrator.run.limits import ensure_budget
from orchestrator.training.machine import ProbeResult, probe
from orchestrator.llm.prompts import file_blocks, render
from orchestrator.sources.roles import ROLES, ConfigRoles
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count
from orchestrator.sources.template import describe_holes, fill_holes, generic_text, holes, read_template


@dataclass(frozen=True)
class Step:
    node: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]
    reason: str
    fills_template: bool = False  # answered with the template's CUSTOMIZE sections (one output, train.py)
    max_tokens: int = 16000
    droppable: tuple[str, ...] = ()  # inputs the step can do without when the server's context is short


STEPS = (
    Step("generate_helpers", ("helpers.py",), ("env_move.py",),
         "Step 1: helpers.py from the game (helper_readme.md is rendered from its docstrings)"),
    Step("generate_prompts", ("prompt_template.py",), ("helpers.py", "helper_readme.md"),
         "Step 2: prompt_template.py from the helpers and their readme", droppable=("helpers.py",)),
    Step("generate_train", ("train.py",),
         ("env_move.py", "grpo_config.py", "grpo_template.py", "helpers.py", "helper_readme.md", "prompt_template.py"),
         "Step 3: train.py, the template with its CUSTOMIZE holes filled", fills_template=True,
         droppable=("helper_readme.md",)),
    Step("generate_launch", ("launch_training.sh",), ("grpo_config.py",),
         "Step 4: launch_training.sh from a probe of this machine's GPUs and SLURM"),
)


def outputs_pass(ctx: RunContext, step: Step) -> bool:
    if any(ctx.workspace.read(f"{GENERATED_DIR}/{name}") is None for name in step.outputs):
        return False
    return not errors(check_folder(ctx.generated, ctx.source_of_truth, only=step.outputs))


def parse_outputs(step: Step, template_text: str) -> Callable[[str], dict[str, str]]:
    """The step's outputs from an answer; EditFormatError naming every problem of the answer at once."""
    def parse(text: str) -> dict[str, str]:
        if step.fills_template:
            return {step.outputs[0]: parse_sections(text, template_text)}
        strays: list[str] = []  # fences with no FILE: line: a sketch in the prose, a problem only with a file missing
        blocks, problems = read_files(text, strays)
        files = {block.path.rsplit("/", 1)[-1]: block.content for block in blocks}
        missing = [name for name in step.outputs if name not in files]
        if missing:
            problems += strays
            problems.append(f"the answer must contain {', '.join(step.outputs)}; missing {', '.join(missing)}")
        if problems:
            raise format_error(problems, WHOLE_FILE_FORMAT)
        return {name: files[name] for name in step.outputs}
    return parse


def step_variables(state: RunState, ctx: RunContext, step: Step) -> dict[str, object]:
    """What a step's prompt says about this researcher's config and template."""
    roles = ConfigRoles.from_dict(state["roles"])
    if step.node == "generate_train":
        template = ctx.workspace.read(f"{GENERATED_DIR}/grpo_template.py") or ""
        logs = roles.field_of("log_folder") or roles.field_of("output_folder")
        sample = roles.field_of("sample_every")
        return {"roles": roles_text(roles), "logging_in_template": LOG_NAME in generic_text(read_template(template)),
                "sections": describe_holes(template), "sections_format": SECTIONS_FORMAT, "only": None,
                "log_folder": f"the folder of the config's `{logs}` field" if logs else "the working directory",
                "sample_every": f"`config.{sample}`" if sample else "10"}
    if step.node == "generate_launch":
        return {"delivery": roles.delivery}
    return {}


def roles_text(roles: ConfigRoles) -> str:
    """What Step 3 needs of the mapping: each role's field, one a line, and the roles without one on one line."""
    rows = [f"{role:<20} -> {roles.field_of(role)}" for role in ROLES if roles.field_of(role)]
    absent = roles.absent()
    return "\n".join(rows + ([f"{'no field':<20} -> {', '.join(absent)}"] if absent else [])
                     + [f"{'delivery':<20} -> {roles.delivery}"])


def run_probe(state: RunState, ctx: RunContext) -> ProbeResult:
    """This machine, probed once per run: a node that runs again (a resume) reuses the run's answer."""
    if state.get("probe"):
        return ProbeResult.from_dict(state["probe"])
    result = probe()
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    (ctx.run_dir / "probe.json").write_text(json.dumps(result.to_dict(), indent=2))
    return result


def generate(state: RunState, ctx: RunContext, step: Step) -> dict:
    update: dict = {}
    variables = {"file_format": WHOLE_FILE_FORMAT, **step_variables(state, ctx, step)}
    if step.node == "generate_launch":
        machine = run_probe(state, ctx)
        update["probe"] = machine.to_dict()
        variables["probe_summary"] = machine.summary()
    if outputs_pass(ctx, step):
        _record_skip(ctx, step)
        return {**update, "skipped": [step.node], **_render_stale_docs(state, ctx, step)}

    ensure_budget(state, ctx.limits, step.node)
    attempt = attempt_count(state, step.node) + 1
    inputs = {name: ctx.workspace.read(f"{GENERATED_DIR}/{name}") or "" for name in step.inputs}
    ctx.on_event(f"{step.node}: asking the LLM ({step.reason})")
    template = ctx.workspace.read(f"{GENERATED_DIR}/grpo_template.py") or ""
    answer = _ask(ctx, step, variables, inputs, parse_outputs(step, template), can_split=step.fills_template)
    if answer.cut_short:
        ctx.on_event(f"{step.node}: the answer does not fit the server's room; asking one CUSTOMIZE section at a time")
        answer = _by_section(ctx, step, variables, inputs, template, answer)
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    if answer.parsed is None:
        reason = f"{step.node}: the LLM's answer stayed malformed after a re-ask: {answer.error}"
        sha = ctx.workspace.commit([], node=step.node, attempt=attempt, outcome="malformed", tokens=tokens,
                                   body=reason, allow_empty=True)
        ctx.log.record(Event(ctx.run_id, step.node, "llm_generate", step.reason, f"blocked: {answer.error}",
                             tokens=tokens, cost_usd=answer.cost_usd,
                             extra={"sha": sha, **({"fitted": answer.notes} if answer.notes else {})}))
        return {**update, "ledger": {step.node: row}, "status": "blocked", "exit_reason": reason,
                "attempts": [{"node": step.node, "attempt": attempt, "outcome": "malformed", "sha": sha,
                              "tokens": tokens, "cost_usd": answer.cost_usd}]}
    files = {**answer.parsed, **rendered_docs(answer.parsed)}
    for name, text in files.items():
        ctx.workspace.write(f"{GENERATED_DIR}/{name}", text)
    sha = ctx.workspace.commit([f"{GENERATED_DIR}/{name}" for name in files], node=step.node, attempt=attempt,
                               outcome="generated", tokens=tokens,
                               body=f"{step.reason}\nLLM calls: {answer.calls}, cost ${answer.cost_usd:.4f}")
    ctx.log.record(Event(ctx.run_id, step.node, "llm_generate", step.reason,
                         f"wrote {', '.join(files)}; commit {sha}", tokens=tokens, cost_usd=answer.cost_usd,
                         extra={"sha": sha, "request_ids": answer.request_ids, "calls": answer.calls,
                                **({"fitted": answer.notes} if answer.notes else {})}))
    ctx.on_event(f"{step.node}: wrote {', '.join(files)} ({tokens} tokens, ${answer.cost_usd:.4f})")
    return {**update, "ledger": {step.node: row},
            "attempts": [{"node": step.node, "attempt": attempt, "outcome": "generated", "sha": sha,
                          "tokens": tokens, "cost_usd": answer.cost_usd}]}


def _ask(ctx: RunContext, step: Step, variables: dict, inputs: dict[str, str], parse: Callable[[str], object],
         can_split: bool = False) -> Answer:
    messages = [{"role": "user", "content": render(step.node, ctx.prompts_dir, **variables)}]
    return ask(ctx.llm, messages, parse, system=render("system", ctx.prompts_dir), tag=step.node,
               cache_prefix=file_blocks(inputs), max_tokens=step.max_tokens, can_split=can_split,
               forms=lambda: forms(messages, file_blocks(inputs), droppable=step.droppable))


def _by_section(ctx: RunContext, step: Step, variables: dict, inputs: dict[str, str], template: str,
                whole: Answer) -> Answer:
    """Step 3 asked one CUSTOMIZE section per request, after a whole answer the server's room cut: train.py
    from the parts, or the first part's problem. The spend of every request, the cut one's too, is counted."""
    total: Answer = Answer(parsed=None)
    total.add(whole)
    bodies = []
    for number in range(1, len(holes(read_template(template))) + 1):
        part = _ask(ctx, step, {**variables, "only": number}, inputs,
                    lambda text, n=number: parse_section(text, template, n))
        total.add(part)
        total.last_text = part.last_text
        if part.parsed is None:
            total.error = f"CUSTOMIZE {number}, asked for alone: {part.error}"
            return total
        bodies.append(part.parsed)
    total.parsed = {step.outputs[0]: fill_holes(template, bodies)}
    return total


def _record_skip(ctx: RunContext, step: Step) -> None:
    exist = "exists and passes its" if len(step.outputs) == 1 else "exist and pass their"
    ctx.log.record(Event(ctx.run_id, step.node, "skip", step.reason,
                         f"skipped: {', '.join(step.outputs)} already {exist} checks (0 tokens)"))
    ctx.on_event(f"{step.node}: skipped, outputs exist and pass their checks")


def _render_stale_docs(state: RunState, ctx: RunContext, step: Step) -> dict:
    """A skipped step's rendered files that are missing or differ from their rendering (an older run wrote
    them, or helpers.py was edited by hand), written again; a change git does not hold yet is committed as
    an attempt of 0 tokens."""
    outputs = {name: ctx.workspace.read(f"{GENERATED_DIR}/{name}") or "" for name in step.outputs}
    stale = stale_docs(outputs, lambda name: ctx.workspace.read(f"{GENERATED_DIR}/{name}"))
    if not stale:
        return {}
    for name, text in stale.items():
        ctx.workspace.write(f"{GENERATED_DIR}/{name}", text)
    attempt = attempt_count(state, step.node) + 1
    sha = ctx.workspace.commit([f"{GENERATED_DIR}/{name}" for name in stale], node=step.node, attempt=attempt,
                               outcome="rendered", tokens=0, body=f"{', '.join(stale)} rendered again from "
                                                                  f"{', '.join(step.outputs)} (no LLM call)")
    ctx.log.record(Event(ctx.run_id, step.node, "render", "rendered files follow the files they are rendered from",
                         f"rendered {', '.join(stale)} again (0 tokens); "
                         + (f"commit {sha}" if sha else "the last commit already holds that text"),
                         extra={"sha": sha}))
    ctx.on_event(f"{step.node}: rendered {', '.join(stale)} again (0 tokens)")
    if sha is None:
        return {}
    return {"attempts": [{"node": step.node, "attempt": attempt, "outcome": "rendered", "sha": sha, "tokens": 0,
                          "cost_usd": 0.0}]}


def make_node(step: Step) -> Callable[[RunState, Runtime[RunContext]], dict]:
    def node(state: RunState, runtime: Runtime[RunContext]) -> dict:
        return generate(state, runtime.context, step)
    node.__name__ = step.node
    return node
