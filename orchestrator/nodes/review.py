"""review: Sample_EP.logs and train.logs trends -> future_improvements.md (ideas only, never applied)."""

from __future__ import annotations

from pathlib import Path

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.ideas.catalog import IDEAS_FILE
from orchestrator.llm.asking import ask
from orchestrator.llm.edits import WHOLE_FILE_FORMAT, parse_files
from orchestrator.base.execution import tail
from orchestrator.run.limits import ensure_budget
from orchestrator.training.logformat import LogFormat, read_log
from orchestrator.training.monitor import summarize_trends
from orchestrator.llm.prompts import file_blocks, render
from orchestrator.base.files import from_disk
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count

SAMPLE_CHARS = 12000


def parse_ideas(text: str) -> str:
    files = {block.path.rsplit("/", 1)[-1]: block.content for block in parse_files(text)}
    content = files.get(IDEAS_FILE, "")
    if "## " not in content or "Evidence:" not in content:
        raise ValueError(f"{IDEAS_FILE} must hold ideas as `## title` sections, each with an `Evidence:` line")
    return content


def review(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    ensure_budget(state, ctx.limits, "review")
    log_dir = Path(from_disk(state["formal_log_dir"], ctx.project_root))
    samples = (log_dir / "Sample_EP.logs").read_text() if (log_dir / "Sample_EP.logs").exists() else ""
    prompt = render("review", ctx.prompts_dir, trends=summarize_trends(read_log(log_dir / "train.logs", LogFormat.from_dict(state.get("log_format")))),
                    samples=tail(samples, SAMPLE_CHARS) or "(no sampled episode was logged)",
                    file_format=WHOLE_FILE_FORMAT)
    readme = ctx.workspace.read(f"{GENERATED_DIR}/helper_readme.md") or ""
    ctx.on_event("review: asking for ideas from Sample_EP.logs and the reward trends")
    answer = ask(ctx.llm, [{"role": "user", "content": prompt}], parse_ideas, system=render("system", ctx.prompts_dir),
                 tag="review", cache_prefix=file_blocks({"helper_readme.md": readme}))
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    attempt = attempt_count(state, "review") + 1
    if answer.parsed is None:
        outcome, paths = f"no usable ideas: {answer.error[:200]}", []
    else:
        ctx.workspace.write(IDEAS_FILE, answer.parsed)
        (ctx.run_dir / IDEAS_FILE).write_text(answer.parsed)
        ideas = answer.parsed.count("\n## ") + answer.parsed.startswith("## ")
        outcome, paths = f"{ideas} ideas written, none applied", [IDEAS_FILE]
    # every attempt is a commit, an empty one when the answer gave nothing usable
    sha = ctx.workspace.commit(paths, node="review", attempt=attempt, outcome=outcome, tokens=tokens, allow_empty=True)
    ctx.log.record(Event(ctx.run_id, "review", "llm_review", "ideas from the formal run's samples, for the researcher",
                         outcome, tokens=tokens, cost_usd=answer.cost_usd, extra={"sha": sha}))
    ctx.on_event(f"review: {outcome}")
    return {"ledger": {"review": row}, "attempts": [{"node": "review", "attempt": attempt, "outcome": outcome,
                                                     "sha": sha, "tokens": tokens, "cost_usd": answer.cost_usd}]}
