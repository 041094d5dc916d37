"""apply_idea: a child run's one idea (orchestrator.ideas), implemented by SEARCH/REPLACE edits of the generated files.

The child's workspace branch starts at its parent's final commit, so the generation steps find their outputs and
skip; this node asks once for the edits that implement the idea, under the fix node's rules for an answer (its
parser: protected files and new config fields refused before anything touches disk, a SEARCH that does not match
sent back once with the file's real lines), writes and commits them, and the checks run after it as after a fix,
with the fix loop behind them. An answer that stays unusable, or that changes nothing, ends the run `blocked`: a
comparison of the same code would say nothing.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.ideas.catalog import Idea
from orchestrator.llm.asking import ask
from orchestrator.llm.edits import EDIT_FORMAT
from orchestrator.llm.fitting import forms
from orchestrator.llm.prompts import file_blocks, render
from orchestrator.nodes.fix import EDIT_CHARS, EDITABLE, abridge, make_parser
from orchestrator.rules.helper_docs import stale_docs
from orchestrator.run.limits import ensure_budget
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count

NODE = "apply_idea"
REASON = "a child run tries one idea of its parent's review: the edits that implement it, checked like a fix"


def applied(state: RunState) -> bool:
    return any(a["node"] == NODE for a in state.get("attempts") or [])


def apply_idea(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    idea = Idea.from_dict(state["idea"])
    ensure_budget(state, ctx.limits, NODE)
    current = {name: ctx.workspace.read(f"{GENERATED_DIR}/{name}") for name in EDITABLE}
    prompt = render(NODE, ctx.prompts_dir, title=idea.title, text=idea.text, editable=list(EDITABLE),
                    edit_format=EDIT_FORMAT)
    ctx.on_event(f"{NODE}: asking for the edits of {idea.label}")
    messages = [{"role": "user", "content": prompt}]
    blocks = file_blocks({n: text for n, text in current.items() if text is not None})
    restored: list[str] = []  # train.py's GENERIC lines the edit changed, put back by code
    answer = ask(ctx.llm, messages, make_parser(ctx, current, restored), system=render("system", ctx.prompts_dir),
                 tag=NODE, cache_prefix=blocks,  # on a short context: fitted, never outlining a file it may edit
                 forms=lambda: forms(messages, blocks, whole=[n for n, text in current.items() if text is not None]))
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    attempt = attempt_count(state, NODE) + 1
    edited = {n: text for n, text in (answer.parsed or {}).items() if text != current.get(n)}
    written = {**edited, **stale_docs(edited, lambda n: ctx.workspace.read(f"{GENERATED_DIR}/{n}"))}
    for name, text in written.items():
        ctx.workspace.write(f"{GENERATED_DIR}/{name}", text)
    if answer.parsed is None:
        outcome = f"unusable edit: {answer.error.splitlines()[0][:200]}"
    else:
        outcome = f"edited {', '.join(edited)}" if edited else "the edit changed nothing"
        if restored:
            outcome += f" (it also changed {', '.join(restored)} of train.py, put back from the template)"
    sha = ctx.workspace.commit([f"{GENERATED_DIR}/{n}" for n in written], node=NODE, attempt=attempt,
                               outcome=outcome, tokens=tokens, body=f"{idea.label}\n\n{idea.text}", allow_empty=True)
    ctx.log.record(Event(ctx.run_id, NODE, "llm_edit", REASON, f"{idea.label}: {outcome}; commit {sha}",
                         tokens=tokens, cost_usd=answer.cost_usd,
                         extra={"sha": sha, "request_ids": answer.request_ids,
                                **({"fitted": answer.notes} if answer.notes else {})}))
    ctx.on_event(f"{NODE}: {outcome}")
    record = {"node": NODE, "attempt": attempt, "outcome": outcome, "sha": sha, "tokens": tokens,
              "cost_usd": answer.cost_usd, "summary": idea.label, "edit": abridge(answer.last_text, EDIT_CHARS)}
    update: dict = {"ledger": {NODE: row}, "attempts": [record]}
    if not edited:
        update |= {"status": "blocked", "exit_reason": f"{NODE}: {idea.label} was not applied: {outcome}"}
    return update
