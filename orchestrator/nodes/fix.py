"""fix: the failing check's evidence goes to the LLM, which answers with SEARCH/REPLACE edits.

Edits to protected files are refused before anything touches disk, and so are new config fields;
a malformed answer or a SEARCH block that does not match is sent back once with the exact error
(and the file's real lines near the failed anchor). Every attempt is committed, then the graph
goes back to `rules`, so every check re-runs cheapest first.

When the same failure (by fingerprint) comes back after a fix, or the last fix changed nothing, the
fix escalates: every generated file in full, the list of what was tried, a larger answer budget.

helper_readme.md is not a file the fix may edit: an edit of helpers.py renders it again in the same
commit (orchestrator/rules/helper_docs.py), and an answer that edits it is refused, pointing at the docstrings.

Protected text is put back by code, never asked for again: an edit of train.py that also changed GENERIC
sections keeps its CUSTOMIZE lines and gets the template's GENERIC sections back (orchestrator.llm.protected),
and lines an edit changed only in form (quotes, spaces) keep their old text (orchestrator.llm.meaning); the
next fix's prompt says what was put back. Edits come as SEARCH/REPLACE blocks or as a unified diff.

On a server with a short context the prompt is fitted (orchestrator.llm.fitting): train.py's GENERIC sections
summarised, the read-only files and, when escalated, the files the evidence does not name left out, the other
files outlined, then the evidence and the earlier attempts abridged.
"""

from __future__ import annotations

from dataclasses import replace

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.llm.asking import abridge, ask
from orchestrator.llm.edits import EDIT_FORMAT, apply_edits, check_protected, parse_edits
from orchestrator.llm.fitting import forms
from orchestrator.llm.protected import restore_generic
from orchestrator.rules.helper_docs import HELPERS_FILE, stale_docs
from orchestrator.rules import GENERATED_FILES, HELPER_README, PROTECTED_FILES, check_config
from orchestrator.run.limits import ensure_budget
from orchestrator.llm.prompts import file_blocks, render
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count

EDITABLE = (*(name for name in GENERATED_FILES if name != HELPER_README), "grpo_config.py")
EDIT_CHARS = 1500  # of an earlier edit, shown again under "already tried"
REFUSAL_CHARS = 800
SMALLER_EVIDENCE = ((6000, 600), (2000, 200))  # (evidence, each earlier edit) characters of the smaller prompts
TRAIN, TEMPLATE = "train.py", "grpo_template.py"


def previous_fixes(state: RunState, check: str) -> list[dict]:
    return [a for a in state.get("attempts") or [] if a["node"] == "fix" and a.get("check") == check]


def should_escalate(evidence: dict, tried: list[dict]) -> bool:
    if not tried:
        return False
    last = tried[-1]
    return last.get("fingerprint") == evidence["fingerprint"] or not last.get("changed", True)


def make_parser(ctx: RunContext, current: dict[str, str | None], restored: list[str]):
    """The parser of a fix's answer; what it put back of train.py's GENERIC sections goes into `restored`."""
    source_config = (ctx.source_of_truth / "grpo_config.py").read_text()
    template = (ctx.source_of_truth / TEMPLATE).read_text()

    def parse(text: str) -> dict[str, str]:
        edits = parse_edits(text)
        refused = check_protected([e.path for e in edits], PROTECTED_FILES)
        if refused:
            raise ValueError(f"refused: {', '.join(refused)} must never be edited; fix the generated files instead")
        names = [e.path.rsplit("/", 1)[-1] for e in edits]
        if HELPER_README in names:
            raise ValueError(f"refused: {HELPER_README} is rendered from {HELPERS_FILE} by code and never edited; "
                             f"change a helper's documentation in its docstring in {HELPERS_FILE} instead")
        unknown = sorted({n for n in names if n not in EDITABLE})
        if unknown:
            raise ValueError(f"refused: {', '.join(unknown)} is not a file you may edit ({', '.join(EDITABLE)})")
        edits = [replace(e, path=n) for e, n in zip(edits, names)]
        result = apply_edits(edits, {n: current.get(n) for n in names})
        if result.error:
            raise ValueError(result.error)
        contents = dict(result.new_contents)
        if TRAIN in contents:
            contents[TRAIN], restored[:] = restore_generic(contents[TRAIN], template)
        if "grpo_config.py" in contents:
            violations = check_config(contents["grpo_config.py"], source_config)
            if violations:
                raise ValueError(f"refused: {violations[0].message}")
        return contents
    return parse


def fix(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    evidence = state["evidence"]
    ensure_budget(state, ctx.limits, "fix")
    tried = previous_fixes(state, evidence["check"])
    escalated = should_escalate(evidence, tried)
    current = {name: ctx.workspace.read(f"{GENERATED_DIR}/{name}") for name in EDITABLE}
    # the files the evidence names (train.py when it names none); every file only when escalated
    named = [n for n in evidence.get("files", []) if current.get(n) is not None] or ["train.py"]
    shown = [n for n in EDITABLE if current[n] is not None] if escalated else named
    # a protected file the evidence names is shown too, marked read-only, so the model can restore from it
    read_only = [n for n in PROTECTED_FILES if n in evidence["text"] or n in evidence.get("files", [])]
    blocks = {n: current[n] or "" for n in shown}
    blocks |= {f"{n} (read-only: never edit)": (ctx.source_of_truth / n).read_text() for n in read_only}

    def prompt(evidence_chars: int | None = None, edit_chars: int | None = None) -> list[dict]:
        text = render("fix", ctx.prompts_dir, check=evidence["check"], kind=evidence.get("kind", ""),
                      summary=evidence["summary"],
                      evidence=abridge(evidence["text"], evidence_chars) if evidence_chars else evidence["text"],
                      tried=[{**t, "edit": abridge(t.get("edit", ""), edit_chars)} if edit_chars else t for t in tried],
                      escalated=escalated, read_only=read_only, editable=list(EDITABLE), edit_format=EDIT_FORMAT)
        return [{"role": "user", "content": text}]

    ctx.on_event(f"fix: asking for an edit ({evidence['check']}: {evidence['summary'][:120]})"
                 + (" [escalated]" if escalated else ""))
    restored: list[str] = []
    answer = ask(ctx.llm, prompt(), make_parser(ctx, current, restored), system=render("system", ctx.prompts_dir),
                 tag="fix", cache_prefix=file_blocks(blocks), max_tokens=32000 if escalated else 16000,
                 forms=lambda: forms(prompt(), file_blocks(blocks), whole=shown,
                                     droppable=[*read_only, *(n for n in shown if n not in named)],
                                     smaller_messages=[(prompt(chars, edit), f"the evidence abridged to {chars} "
                                                                             f"characters")
                                                       for chars, edit in SMALLER_EVIDENCE]))
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    attempt = attempt_count(state, "fix") + 1
    record = {"node": "fix", "attempt": attempt, "check": evidence["check"], "kind": evidence.get("kind", ""),
              "fingerprint": evidence["fingerprint"], "summary": evidence["summary"],
              "evidence_text": evidence["text"], "tokens": tokens, "cost_usd": answer.cost_usd, "escalated": escalated}
    if answer.parsed is None:
        outcome, changed_files, written = f"unusable edit: {answer.error.splitlines()[0][:200]}", [], {}
        record |= {"refusal": abridge(answer.error, REFUSAL_CHARS)}
        restored = []
    else:
        edited = {n: text for n, text in answer.parsed.items() if text != current.get(n)}
        changed_files = list(edited)
        written = {**edited, **stale_docs(edited, lambda n: ctx.workspace.read(f"{GENERATED_DIR}/{n}"))}
        for name, text in written.items():
            ctx.workspace.write(f"{GENERATED_DIR}/{name}", text)
        outcome = f"edited {', '.join(changed_files)}" if changed_files else "the edit changed nothing"
    changed = bool(changed_files)
    rendered = [n for n in written if n not in changed_files]
    record |= {"edit": abridge(answer.last_text, EDIT_CHARS)}
    if restored:  # said to the model in the next fix's prompt, under "already tried"
        record["put_back"] = (f"the edit also changed {', '.join(restored)} of {TRAIN}; those lines were put back "
                              f"from {TEMPLATE} by code (GENERIC text is never edited, and never needs retyping)")
    # every attempt is a commit, an unusable or empty one too, so `history` shows all of them
    sha = ctx.workspace.commit([f"{GENERATED_DIR}/{n}" for n in written], node="fix", attempt=attempt,
                               outcome=f"{evidence['check']} {outcome}", tokens=tokens,
                               body=f"Evidence: {evidence['summary']}"
                                    + (f"\nRendered again from the edit: {', '.join(rendered)}" if rendered else ""),
                               allow_empty=True)
    ctx.log.record(Event(ctx.run_id, "fix", "llm_edit", f"{evidence['check']} failed: {evidence['summary']}",
                         outcome + (f"; rendered {', '.join(rendered)} again" if rendered else "")
                         + (f"; {record['put_back']}" if restored else "")
                         + (f"; commit {sha}" if sha else ""), tokens=tokens, cost_usd=answer.cost_usd,
                         extra={"sha": sha, "escalated": escalated, "request_ids": answer.request_ids,
                                **({"fitted": answer.notes} if answer.notes else {})}))
    ctx.on_event(f"fix: {outcome}")
    return {"ledger": {"fix": row}, "attempts": [{**record, "outcome": outcome, "sha": sha, "changed": changed}]}
