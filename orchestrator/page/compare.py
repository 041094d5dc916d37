"""`runs/compare-A-B.html`: runs side by side, the first as the baseline: one self-contained page for a browser.

What it shows, all read from disk (like the run's page, orchestrator.page.report):

* the tree of runs each belongs to (parent -> children, the idea each tried: orchestrator.ideas.lineage);
* each run's status, idea, seeds, tokens and cost (`run_summary`);
* the verdict of each run against the baseline, metric by metric, with the statistic and the window written out
  (orchestrator.ideas.verdict): a child against its parent compares the arms the child trained on the same seeds;
* the curves of every arm overlaid, one chart per metric: each seed a thin line, the arm's mean over seeds thick;
* the diff of the generated files from the baseline's final commit to each run's (orchestrator.page.diffs).

The charts are inline SVG drawn here (no picture files, nothing fetched); everything from the runs (ideas, file
contents, run ids) reaches the HTML escaped, through Jinja2's autoescaping or markupsafe.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import jinja2
from markupsafe import Markup, escape

from orchestrator.base.files import write_atomic
from orchestrator.ideas.arms import arms_for
from orchestrator.ideas.lineage import Lineage, tree_lines
from orchestrator.ideas.verdict import STATISTIC, VERDICT_METRICS, Arm, Comparison, compare
from orchestrator.page.diffs import CommitDiff, range_diff
from orchestrator.run.runs import RunSettings, SetupError, run_summary

_TEMPLATE = Path(__file__).with_name("compare.html.j2")
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")  # one per arm, in the runs' order
WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 460, 240, 56, 12, 12, 34


@dataclass(frozen=True)
class RunView:
    run_id: str
    summary: dict[str, Any]
    lineage: Lineage | None
    colour: str


@dataclass(frozen=True)
class PairView:
    base: str
    other: str
    comparison: Comparison
    diff: CommitDiff


PREFIX, SEPARATOR, SUFFIX = "compare-", "-vs-", ".html"


def page_name(run_ids: Sequence[str]) -> str:
    return PREFIX + SEPARATOR.join(run_ids) + SUFFIX


def compared_runs(name: str) -> list[str]:
    """The runs a comparison page's name compares, baseline first."""
    return name[len(PREFIX):-len(SUFFIX)].split(SEPARATOR)


def compare_pages(runs_dir: Path, run_id: str) -> list[str]:
    """The names of the comparison pages under `runs_dir` that compare run `run_id`."""
    return sorted(p.name for p in runs_dir.glob(f"{PREFIX}*{SUFFIX}") if run_id in compared_runs(p.name))


def _scale(low: float, high: float, size: float, flip: bool) -> Any:
    span = (high - low) or 1.0
    return lambda v: size - (v - low) / span * size if flip else (v - low) / span * size


def _mean_curve(arm: Arm, metric: str) -> list[tuple[int, float]]:
    """The arm's mean over its finished seeds at every update all of them logged (finite values only)."""
    by_update: dict[int, list[float]] = {}
    runs = [r for r in arm.finished if r.series.get(metric)]
    for run in runs:
        for update, value in run.series[metric]:
            if math.isfinite(value):
                by_update.setdefault(update, []).append(value)
    return [(u, sum(v) / len(v)) for u, v in sorted(by_update.items()) if len(v) == len(runs)]


def _points(series: Sequence[tuple[int, float]], x: Any, y: Any) -> str:
    return " ".join(f"{PAD_LEFT + x(u):.1f},{PAD_TOP + y(v):.1f}" for u, v in series if math.isfinite(v))


def chart(metric: str, label: str, arms: Sequence[tuple[Arm, str]]) -> Markup:
    """One metric's chart: each arm's seeds as thin lines, its mean as a thick one; empty when nothing is logged."""
    values = [(u, v) for arm, _ in arms for r in arm.finished for u, v in r.series.get(metric) or ()
              if math.isfinite(v)]
    if not values:
        return Markup("")
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    (u_low, u_high), (v_low, v_high) = ((min(p[i] for p in values), max(p[i] for p in values)) for i in (0, 1))
    x, y = _scale(u_low, u_high, inner_w, False), _scale(v_low, v_high, inner_h, True)
    parts = [f'<svg class="chart" data-metric="{escape(metric)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">',
             f'<rect x="{PAD_LEFT}" y="{PAD_TOP}" width="{inner_w}" height="{inner_h}" class="frame"/>']
    for value in (v_low, v_high):
        parts.append(f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + y(value) + 4:.1f}" text-anchor="end">{value:.3g}</text>')
    for update in sorted({u_low, u_high}):
        parts.append(f'<text x="{PAD_LEFT + x(update):.1f}" y="{HEIGHT - PAD_BOTTOM + 14}" '
                     f'text-anchor="middle">{update}</text>')
    parts.append(f'<text x="{PAD_LEFT + inner_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">update</text>')
    for index, (arm, colour) in enumerate(arms):
        run = escape(arm.run_id)
        for seed_run in arm.finished:
            points = _points(seed_run.series.get(metric) or (), x, y)
            if points:
                parts.append(f'<polyline class="seed arm-{index}" data-run="{run}" data-seed="{seed_run.seed}" '
                             f'points="{points}" stroke="{colour}"><title>{run} seed {seed_run.seed}</title>'
                             f'</polyline>')
        mean = _points(_mean_curve(arm, metric), x, y)
        if mean:
            parts.append(f'<polyline class="mean arm-{index}" data-run="{run}" points="{mean}" stroke="{colour}">'
                         f'<title>{run}: mean of {len(arm.finished)} seeds</title></polyline>')
    parts.append("</svg>")
    return Markup("".join(parts))


@functools.lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATE.parent), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    return env.get_template(_TEMPLATE.name)


def verdicts(project_root: Path, base: str, other: str) -> Comparison:
    """The verdict of run `other` against run `base` (module docstring)."""
    return compare(*arms_for(Path(project_root).resolve(), base, other))


def render_compare_page(project_root: Path, run_ids: Sequence[str]) -> str:
    """The page comparing `run_ids` (the first is the baseline) as HTML text; SetupError for an unknown run."""
    root = Path(project_root).resolve()
    if len(run_ids) < 2:
        raise SetupError("compare needs two runs or more: python -m orchestrator compare RUN_A RUN_B [...]")
    for run_id in run_ids:
        RunSettings.load(root, run_id)  # an unknown run is bad input, before anything is read
    runs = [RunView(r, run_summary(root, r), Lineage.load(root / "runs" / r), COLOURS[i % len(COLOURS)])
            for i, r in enumerate(run_ids)]
    base, others = run_ids[0], run_ids[1:]
    pairs, arms = [], []
    for other in others:
        base_arm, other_arm = arms_for(root, base, other)
        if not arms:
            arms.append((base_arm, runs[0].colour))
        arms.append((other_arm, runs[run_ids.index(other)].colour))
        pairs.append(PairView(base, other, compare(base_arm, other_arm),
                              range_diff(str(root / "workspace"), f"run/{base}", f"run/{other}", "generated")))
    statuses = {v.run_id: v.summary["status"] for v in runs}
    trees = list(dict.fromkeys("\n".join(tree_lines(root, r, statuses, frozenset(run_ids))) for r in run_ids))
    charts = [(m.label, chart(m.name, m.label, arms)) for m in VERDICT_METRICS]
    return _template().render(runs=runs, pairs=pairs, charts=charts, arms=arms, trees=trees, statistic=STATISTIC,
                              updated=time.strftime("%Y-%m-%d %H:%M:%S"))


def write_compare_page(project_root: Path, run_ids: Sequence[str]) -> Path:
    """Render the page and write `runs/compare-A-vs-B.html` atomically; its path."""
    path = Path(project_root).resolve() / "runs" / page_name(run_ids)
    write_atomic(path, render_compare_page(project_root, run_ids))
    return path
