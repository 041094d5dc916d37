"""Learning curves of a formal run: one PNG per metric against the update number, and the report's
"Curves" section linking them.

`train.logs` is read in the run's log format (orchestrator.training.logformat: the first guess, a learned
format, or the TensorBoard event files beside it), the latest run's train lines. A metric is
found under the monitor's canonical name first, then by a pattern over the logged key, since each
researcher's template spells its metrics its own way (``clip_frac_high``, ``response_length_mean``,
``invalid_parse_rate``, ...). A non-finite value (nan, inf) gets a red dashed vertical line at its
update; marks given by the caller (the anomaly that stopped a formal run, the update it stopped at) are
vertical lines too, and so is every restart of a run that went on across jobs (a time limit, a requeue, ...:
orchestrator.training.chain), labelled with its cause and job id, at the update it went on from. matplotlib is imported only when drawing, and a missing matplotlib or an empty log gives a
one-line reason instead of an error: curves never fail a run.

Files: ``runs/RUN_ID/plots/formal-N/METRIC.png``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.training.logformat import LogFormat, LogRecord, read_log
from orchestrator.training.monitor import current_run

PLOTS_DIR = "plots"

# plotted name -> (the monitor's canonical name, a pattern over other logged keys, lower-cased)
PLOT_METRICS: dict[str, tuple[str, str]] = {
    "reward": ("reward_mean", r"(^|/)(train_)?rewards?(_mean|/mean)?$"),
    "loss": ("loss", r"(^|/)(policy_|pg_|actor_)?loss$"),
    "kl": ("kl", r"(^|/)kl(_mean|_div\w*)?$"),
    "grad_norm": ("grad_norm", r"grad_?norm(_mean|_total)?$"),
    "clip_fraction": ("clip_ratio", r"clip_?frac"),
    "invalid_action_rate": ("invalid_action_rate", r"(^|/)invalid"),
    "completion_length": ("completion_mean_length", r"(completion|response)_?len"),
}


STOP_MARK = "stopped"  # the label of the mark at the update a stopped run ended on: black dash-dot
_MARK_STYLES = {STOP_MARK: {"color": "black", "linestyle": "-."}}
_ANOMALY_STYLE = {"color": "darkorange", "linestyle": ":"}  # any other mark: an anomaly where it was found
_RESTART_STYLE = {"color": "tab:blue", "linestyle": "--", "alpha": 0.6}  # a job that went on from a checkpoint


@dataclass(frozen=True)
class Curves:
    files: list[Path]  # the PNGs written, in PLOT_METRICS order
    reason: str = ""  # why none were written


def metric_value(record: LogRecord, metric: str) -> float | None:
    """The value of a PLOT_METRICS metric in one record, or None when it is not logged there."""
    canonical, pattern = PLOT_METRICS[metric]
    value = record.values.get(canonical)
    if isinstance(value, float):
        return value
    for key, value in record.values.items():
        if isinstance(value, float) and re.search(pattern, key.lower()):
            return value
    return None


def metric_series(records: list[LogRecord]) -> dict[str, list[tuple[int, float]]]:
    """(update, value) per metric over the latest run's train lines (each numbered by the reader, a line
    without a number of its own as the next update); non-finite values kept."""
    series: dict[str, list[tuple[int, float]]] = {}
    for record in (r for r in current_run(records) if r.kind == "train"):
        update = int(record.values["update"])
        for metric in PLOT_METRICS:
            value = metric_value(record, metric)
            if value is not None:
                series.setdefault(metric, []).append((update, value))
    return series


def log_series(log_path: Path, log_format: LogFormat | None = None) -> dict[str, list[tuple[int, float]]]:
    """metric_series of the train.logs at `log_path` (or the event files beside it); {} when there is none."""
    return metric_series(read_log(log_path, log_format))


def latest_metrics(log_path: Path, log_format: LogFormat | None = None) -> dict[str, float]:
    """The update number and the last value of each metric in a train.logs; {} when it has no train line."""
    series = log_series(log_path, log_format)
    if not series:
        return {}
    latest = {metric: points[-1][1] for metric, points in series.items()}
    return {"update": float(max(points[-1][0] for points in series.values())), **latest}


def write_curves(log_path: Path, out_dir: Path, title: str, log_format: LogFormat | None = None,
                 marks: Sequence[tuple[int, str]] = (), restarts: Sequence[tuple[int, str]] = ()) -> Curves:
    """One PNG per metric present in the log at `log_path` (or the event files beside it), into `out_dir`; each
    (update, label) of `marks` (an anomaly, the update a stopped run ended on) and of `restarts` (a job that went
    on from its checkpoint at that update: its cause and job id) is a vertical line at that update on every
    curve."""
    series = log_series(log_path, log_format)
    if not series:
        return Curves([], f"no curves: {log_path} holds no train line with a known metric"
                          if log_path.is_file() else f"no curves: {log_path} does not exist")
    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return Curves([], "no curves: matplotlib is not installed (pip install matplotlib)")
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for metric, points in series.items():
        figure = Figure(figsize=(6, 3.5), layout="constrained")
        axes = figure.subplots()
        # a nan breaks the line there, so no segment pretends to know the value at a bad update
        axes.plot([u for u, _ in points], [v if math.isfinite(v) else math.nan for _, v in points], marker="o",
                  markersize=3, label=metric)
        bad = [u for u, v in points if not math.isfinite(v)]
        for i, update in enumerate(bad):
            axes.axvline(update, color="red", linestyle="--", linewidth=1, label="nan / inf" if i == 0 else None)
        for update, label in marks:
            axes.axvline(update, linewidth=1.2, label=f"{label} ({update})", **_MARK_STYLES.get(label, _ANOMALY_STYLE))
        for update, label in restarts:
            axes.axvline(update, linewidth=1.0, label=f"restart: {label} from {update}", **_RESTART_STYLE)
        axes.set(title=f"{title}: {metric}", xlabel="update", ylabel=metric)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
        path = out_dir / f"{metric}.png"
        figure.savefig(path, dpi=100)
        files.append(path)
    return Curves(files)


def curves_section(run_dir: Path) -> list[str]:
    """The report's "Curves" section: the run's PNGs as links relative to report.md (in `run_dir`),
    grouped by formal attempt."""
    lines = ["", "## Curves", ""]
    folders = sorted((p for p in (run_dir / PLOTS_DIR).glob("*") if p.is_dir()),
                     key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
    order = list(PLOT_METRICS)
    drawn = False
    for folder in folders:
        pngs = sorted(folder.glob("*.png"), key=lambda p: (order.index(p.stem) if p.stem in order else len(order),
                                                            p.stem))
        if pngs:
            drawn = True
            lines += [f"### {folder.name}", ""]
            lines += [f"![{p.stem}]({p.relative_to(run_dir).as_posix()})" for p in pngs] + [""]
    if not drawn:
        lines.append("No formal training run has been plotted.")
    return lines
