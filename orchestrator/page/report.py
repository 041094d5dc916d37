"""`runs/RUN_ID/report.html`: one self-contained page with the whole run, for a browser.

What the page shows, and where it comes from (all of it on disk, so the runner and `python -m
orchestrator report` write the same page):

* the status line, the next node, spend per node against the caps: `run_summary` (run.json,
  state.json, the journal's paid answers not yet checkpointed; `crashed` when no process holds the run);
* the pipeline with the path taken and the node the run is at: orchestrator.page.pipeline, the path
  from the nodes named in `events.jsonl`, in order;
* every attempt (state.json): its outcome, tokens and cost, the evidence its fix was shown, a refused
  answer's reason, the model's answer, and the coloured diff of its commit (orchestrator.page.diffs);
* the tree of runs it belongs to (parent -> children, the idea each tried: orchestrator.ideas.lineage), with links
  to the comparison pages that name it;
* each formal attempt's curves (orchestrator.training.plots' PNGs, inlined), with the anomaly that stopped it;
  while a formal job runs, its curves are drawn from its live train.logs; a formal run that took several SLURM
  jobs lists them (orchestrator.training.chain: each job's cause and ending, the update each went on from);

Everything taken from the LLM, the logs or the researcher's files reaches the HTML through Jinja2's
autoescaping, so an answer holding `<script>` is shown as text. While the run is running the page
reloads itself (keeping open sections and the scroll position); a page of an ended run does not.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from orchestrator.base.actionlog import ActionLog
from orchestrator.base.files import write_atomic
from orchestrator.ideas.lineage import tree_lines
from orchestrator.page.compare import compare_pages, compared_runs, write_compare_page
from orchestrator.page.diffs import CommitDiff, commit_diff
from orchestrator.page.pipeline import END, START, Pipeline, highlight_css, path_taken, pipeline_svg
from orchestrator.training.plots import PLOT_METRICS, PLOTS_DIR, write_curves
from orchestrator.run.runs import (FORMAL_JOB, answered_by_text, job_log, jobs_line, metric_roles_line, read_state,
                                   run_summary)

PAGE_NAME = "report.html"
REFRESH_S = 15
PREVIEW_LINES = 8  # the end of a long evidence text (the exception, the lines it points at), shown unexpanded
OPEN_DIFF_LINES = 40  # diffs up to this many changed lines are shown open
ENDED = ("done", "blocked", "failed", "budget", "environment", "cancelled")
_TEMPLATE = Path(__file__).with_name("report.html.j2")


@dataclass
class AttemptView:
    index: int
    record: Mapping[str, Any]
    tone: str  # good | bad | warn | live
    diff: CommitDiff | None = None
    curves: list[tuple[str, str]] = field(default_factory=list)  # (metric, data: URI of its PNG)
    curves_note: str = ""

    @property
    def evidence_preview(self) -> str:
        return "\n".join(str(self.record.get("evidence_text") or "").splitlines()[-PREVIEW_LINES:])

    @property
    def evidence_is_long(self) -> bool:
        return len(str(self.record.get("evidence_text") or "").splitlines()) > PREVIEW_LINES


def tone_of(outcome: str) -> str:
    text = outcome.lower()
    if re.search(r"fail|unusable|malformed|refused|stopped|hung|timeout|blocked|error", text):
        return "bad"
    if "changed nothing" in text or "(" in text:
        return "warn"
    return "good"


def _png_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _curves(folder: Path) -> list[tuple[str, str]]:
    order = list(PLOT_METRICS)
    pngs = sorted(folder.glob("*.png"), key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.stem))
    return [(p.stem, _png_uri(p)) for p in pngs]


def _live_job(run_dir: Path, formal_attempts: int) -> tuple[str, Path] | None:
    """(folder name, train.logs) of a formal job that is running now and has no attempt record yet."""
    record = run_dir / "jobs" / f"{FORMAL_JOB.format(formal_attempts + 1)}.json"
    try:
        running = json.loads(record.read_text()).get("status") == "running"
    except (OSError, ValueError, AttributeError):
        return None
    log_path = job_log(record) if running else None
    return (record.stem, log_path) if log_path is not None else None


def _attempt_views(project_root: Path, run_dir: Path, attempts: list[Mapping[str, Any]],
                   live: bool) -> list[AttemptView]:
    workspace = str(project_root / "workspace")
    views = []
    for index, record in enumerate(attempts, 1):
        view = AttemptView(index, record, tone_of(str(record.get("outcome", ""))))
        if record.get("sha"):
            view.diff = commit_diff(workspace, record["sha"])
        if record.get("node") == "formal_train":
            view.curves = _curves(run_dir / PLOTS_DIR / FORMAL_JOB.format(record.get("attempt")))
            view.curves_note = "" if view.curves else "no curves were drawn for this attempt (see claude.logs)"
        views.append(view)
    formal = sum(1 for a in attempts if a.get("node") == "formal_train")
    job = _live_job(run_dir, formal) if live else None
    if job is not None:
        name, log_path = job
        drawn = write_curves(log_path, run_dir / PLOTS_DIR / name, name)
        views.append(AttemptView(len(attempts) + 1, {"node": "formal_train", "attempt": formal + 1,
                                                     "outcome": "training now"}, "live",
                                 curves=_curves(run_dir / PLOTS_DIR / name) if drawn.files else [],
                                 curves_note=drawn.reason))
    return views


def _cost_rows(ledger: Mapping[str, Mapping[str, Any]],
               answered_by: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    top = max((float(row.get("cost_usd", 0.0)) for row in ledger.values()), default=0.0) or 1.0
    return [{"node": node, "calls": int(row.get("calls", 0)), "tokens": int(row.get("tokens", 0)),
             "cost": float(row.get("cost_usd", 0.0)), "share": 100.0 * float(row.get("cost_usd", 0.0)) / top,
             "by": answered_by_text(answered_by.get(node, {}), row)}
            for node, row in ledger.items()]


def _caps(summary: Mapping[str, Any]) -> list[str]:
    limits = summary.get("limits") or {}
    caps = []
    if limits.get("max_cost_usd") is not None:
        cap = float(limits["max_cost_usd"])
        caps.append(f"${summary['cost_usd']:.4f} of the ${cap:g} cap"
                    + (f" ({100 * summary['cost_usd'] / cap:.0f}%)" if cap else ""))
    if limits.get("max_tokens") is not None:
        cap = int(limits["max_tokens"])
        caps.append(f"{summary['tokens']} of the {cap} token cap" + (f" ({100 * summary['tokens'] / cap:.0f}%)"
                                                                    if cap else ""))
    if limits.get("max_attempts_per_check") is not None:
        caps.append(f"fixes per failing check: at most {limits['max_attempts_per_check']}")
    return caps or ["no cost or token cap"]


@functools.lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATE.parent), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    return env.get_template(_TEMPLATE.name)


def render_page(project_root: Path, run_id: str, pipeline: Pipeline | None) -> str:
    """The page of run `run_id` as HTML text."""
    project_root = Path(project_root).resolve()
    summary = run_summary(project_root, run_id)
    summary["jobs_line"] = jobs_line(summary["jobs"]) if summary["jobs"] else ""
    run_dir = project_root / "runs" / run_id
    state = read_state(run_dir) or {}
    status = summary["status"]
    running = status == "running"
    views = _attempt_views(project_root, run_dir, list(state.get("attempts") or []), live=running)
    svg, svg_note, css = "", "", ""
    if pipeline is not None:
        svg, svg_note = pipeline_svg(pipeline)
        nodes = [e.node for e in ActionLog(run_dir / "claude.logs", run_dir).events()]
        path = path_taken([START, *nodes, *([END] if status in ENDED else [])], pipeline)
        current = [] if status in ENDED else list(summary["next"])
        css = highlight_css(path, current, pipeline)
    evidence = state.get("last_evidence") or {}
    return _template().render(
        run_id=run_id, summary=summary, status=status, running=running, refresh_s=REFRESH_S if running else 0,
        attempts=views, cost_rows=_cost_rows(summary["ledger"], summary["answered_by"]), caps=_caps(summary),
        svg=Markup(svg), svg_note=svg_note, highlight=Markup(css), skipped=state.get("skipped") or [],
        evidence=evidence if status not in ("done", "running") else {},
        tree=tree_lines(project_root, run_id), compare_pages=compare_pages(run_dir.parent, run_id),
        updated=_as_of(state, running), open_diff_lines=OPEN_DIFF_LINES,
        metric_roles_line=metric_roles_line(summary["metric_roles"]) if summary["metric_roles"] else "")


def _as_of(state: Mapping[str, Any], running: bool) -> str:
    """When what the page shows was true: now for a running run (its page is live), else when its state was
    last written, so the page of an ended run depends on the run alone, however often it is rewritten."""
    if running or not state.get("updated"):
        return time.strftime("%Y-%m-%d %H:%M:%S")
    return str(state["updated"]).replace("T", " ")


def write_page(project_root: Path, run_id: str, pipeline: Pipeline | None) -> Path:
    """Render the page and replace `runs/RUN_ID/report.html` with it atomically; its path. The comparison pages
    that name the run (orchestrator.page.compare) are written again with it, so they show how it stands."""
    root = Path(project_root).resolve()
    path = root / "runs" / run_id / PAGE_NAME
    write_atomic(path, render_page(project_root, run_id, pipeline))
    for name in compare_pages(root / "runs", run_id):
        write_compare_page(root, compared_runs(name))
    return path
