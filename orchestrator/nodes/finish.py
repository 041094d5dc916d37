"""The last node of every run: its final status and a short report in runs/RUN_ID/report.md."""

from __future__ import annotations

from langgraph.runtime import Runtime

from orchestrator.base.actionlog import Event
from orchestrator.training.plots import curves_section
from orchestrator.run.runs import evidence_lines, spent
from orchestrator.run.state import RunContext, RunState


def finish(state: RunState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    status = state.get("status") if state.get("status") not in (None, "running") else "done"
    reason = state.get("exit_reason") or "every step finished"
    tokens, cost = spent(state)
    lines = [f"# Run {ctx.run_id}: {status}", "", f"Reason: {reason}", "",
             f"Tokens: {tokens}, cost: ${cost:.4f}, skipped steps: {', '.join(state.get('skipped') or []) or 'none'}",
             "", "| node | attempt | outcome | commit | tokens |", "|---|---|---|---|---|"]
    lines += [f"| {a['node']} | {a['attempt']} | {a['outcome']} | {(a.get('sha') or '-')[:10]} | {a['tokens']} |"
              for a in state.get("attempts") or []]
    anomalies = [a for a in state.get("attempts") or [] if a.get("anomaly")]
    if anomalies:
        lines += ["", "## Formal runs stopped, refused or not run as planned", ""]
        lines += [f"- formal_train attempt {a['attempt']}: **{a['anomaly']['kind']}**: {a['anomaly']['summary']}"
                  for a in anomalies]
    if status != "done":
        lines += evidence_lines(state.get("evidence"))
    lines += curves_section(ctx.run_dir)
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    (ctx.run_dir / "report.md").write_text("\n".join(lines) + "\n")
    ctx.log.record(Event(ctx.run_id, "finish", "report", "every run ends with a status and a report",
                         f"{status}: {reason}", extra={"report": str(ctx.run_dir / "report.md")}))
    ctx.on_event(f"finish: {status} ({reason})")
    return {"status": status, "exit_reason": reason}
