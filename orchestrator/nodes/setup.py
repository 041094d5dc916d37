"""Step 0: the workspace repository, the run's branch, the source of truth copied into generated/."""

from __future__ import annotations

from langgraph.runtime import Runtime

from orchestrator.ideas.lineage import Lineage
from orchestrator.run.state import GENERATED_DIR, SOURCE_FILES, RunContext, RunState, attempt_count

# grpo_config.py values may be tuned by a run, so an existing copy is kept; the others are always restored
ALWAYS_RESTORED = ("env_move.py", "grpo_template.py")


def setup(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    with ctx.log.action(ctx.run_id, "setup", "prepare_workspace",
                        "Step 0: each run works on its own branch of the workspace repository") as entry:
        ctx.workspace.checkout_run_branch(ctx.run_id, fresh=ctx.fresh)
        copied = []
        for name in SOURCE_FILES:
            rel = f"{GENERATED_DIR}/{name}"
            if name in ALWAYS_RESTORED or name in ctx.source_changed or ctx.workspace.read(rel) is None:
                ctx.workspace.copy_in(ctx.source_of_truth / name, rel)
                copied.append(name)
        attempt = attempt_count(state, "setup") + 1
        sha = ctx.workspace.commit([f"{GENERATED_DIR}/{n}" for n in SOURCE_FILES], node="setup", attempt=attempt,
                                   outcome="source of truth copied", tokens=0)
        entry["result"] = f"branch run/{ctx.run_id}; copied {', '.join(copied) or 'nothing (up to date)'}"
        entry["extra"] = {"sha": sha}
    ctx.on_event(f"setup: workspace branch run/{ctx.run_id} ready")
    attempts = ([{"node": "setup", "attempt": attempt, "outcome": "ok", "sha": sha, "tokens": 0, "cost_usd": 0.0}]
                if sha else [])
    lineage = Lineage.load(ctx.run_dir)  # a child run: the idea it tries (orchestrator.ideas)
    return {"run_id": ctx.run_id, "status": "running", "attempts": attempts,
            **({"idea": lineage.idea.to_dict()} if lineage else {})}
