"""The verdict between two arms (a parent run and a child that tried one idea), each trained on several seeds.

Per seed and metric, the mean over the final window: the last quarter of the updates (at least one), the same
updates in every seed. The difference is the child arm's mean over its seeds minus the parent arm's. Its 95%
interval is the difference +- Student's t quantile times the bootstrap standard error over seeds: the seeds are
resampled with replacement RESAMPLES times (in pairs when both arms ran the same seeds, so that each seed's boards
and generator cancel out), the standard deviation of the resampled differences is corrected by K/(K-1) for K seeds,
and t has K-1 degrees of freedom (the smaller arm's when the arms are not paired). "better" or "worse" only when
the interval excludes 0, by the metric's side (a higher reward, a lower invalid-action rate); a metric with no
better side (KL, lengths) is "higher" or "lower"; anything else is "within noise".

Why t and not the percentile bootstrap: the percentile interval of K resampled seeds can never be wider than the
seeds' range, so at 3 seeds it calls 1 difference of pure seed noise in 4 "better" or "worse"; with t's quantile
(4.30 at 2 degrees of freedom) that is 1 in 20, the stated level (tests/test_verdict.py measures both). The price
is honesty about few seeds: at 3 seeds a difference is called only when it stands well clear of the seeds' spread.

The series come from the monitor's reading of each seed's train.logs (orchestrator.ideas.arms), under the names
the curves use (orchestrator.training.plots.PLOT_METRICS).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
WINDOW_FRACTION = 0.25  # the final window: this fraction of the updates, at least one
BOOTSTRAP_SEED = 0  # the resampling is the same on every machine: the verdict depends on the seeds' values only
# Student's t, 97.5% quantile, by degrees of freedom 1..30 (the two-sided 95% interval); beyond, Cornish-Fisher
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964

Series = Sequence[tuple[int, float]]  # (update, value), as orchestrator.training.plots reads them


@dataclass(frozen=True)
class Metric:
    name: str  # the monitor's name for it (orchestrator.training.plots.PLOT_METRICS)
    label: str
    better: int  # +1: higher is better; -1: lower is better; 0: neither side is better


VERDICT_METRICS = (
    Metric("reward", "reward", +1),
    Metric("invalid_action_rate", "invalid-action rate", -1),
    Metric("completion_length", "completion length", 0),
    Metric("kl", "KL to the reference", 0),
)

STATISTIC = (f"per seed, the mean over the final window (the last {WINDOW_FRACTION:.0%} of the updates, at least "
             f"one); the difference of the arms' means over seeds (child minus parent, or run minus baseline), with a "
             f"{LEVEL:.0%} interval: the difference +- Student's t quantile x the bootstrap standard error "
             f"({RESAMPLES:,} resamples of the seeds, in pairs when both arms ran the same seeds, corrected by "
             f"K/(K-1); K-1 degrees of freedom, the smaller arm's when unpaired). 'better' or 'worse' only when the "
             f"interval excludes 0 (a lower invalid-action rate is better; KL and lengths have no better side: "
             f"'higher' or 'lower'); otherwise 'within noise'")


@dataclass(frozen=True)
class SeedRun:
    seed: int
    series: Mapping[str, Series]  # metric -> (update, value)
    source: str = ""  # where it was read: the seed run's folder
    status: str = "finished"  # a seed run that did not finish is shown, never compared


@dataclass(frozen=True)
class Arm:
    run_id: str
    runs: tuple[SeedRun, ...]

    @property
    def finished(self) -> list[SeedRun]:
        return [r for r in self.runs if r.status == "finished"]


@dataclass(frozen=True)
class MetricVerdict:
    metric: str
    label: str
    verdict: str  # better | worse | higher | lower | within noise | too few seeds | not logged
    parent_mean: float | None = None
    child_mean: float | None = None
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    seeds: tuple[int, int] = (0, 0)  # seeds compared in the parent's arm, in the child's
    paired: bool = False
    window: tuple[int, int] | None = None  # the final window's first and last update

    @property
    def line(self) -> str:
        """One line: `reward: better: +0.42 (95% interval +0.10 to +0.74), 3 paired seeds, updates 7-8`: the
        difference is the second arm's (the child's) mean minus the first's (the parent's)."""
        if self.difference is None:
            return f"{self.label}: {self.verdict}"
        interval = (f" ({LEVEL:.0%} interval {self.low:+.4g} to {self.high:+.4g})" if self.low is not None else "")
        seeds = f"{self.seeds[0]} paired seeds" if self.paired else f"{self.seeds[0]} vs {self.seeds[1]} seeds"
        window = f", updates {self.window[0]}-{self.window[1]}" if self.window else ""
        return f"{self.label}: {self.verdict}: {self.difference:+.4g}{interval}, {seeds}{window}"


@dataclass(frozen=True)
class Comparison:
    parent: str
    child: str
    metrics: list[MetricVerdict] = field(default_factory=list)
    statistic: str = STATISTIC
    excluded: list[str] = field(default_factory=list)  # seed runs left out, and why

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        metrics = [MetricVerdict(**{**m, "seeds": tuple(m.get("seeds") or (0, 0)),
                                    "window": tuple(m["window"]) if m.get("window") else None})
                   for m in data.get("metrics") or []]
        return cls(str(data["parent"]), str(data["child"]), metrics, str(data.get("statistic") or STATISTIC),
                   list(data.get("excluded") or []))


def t_quantile(df: int) -> float:
    """Student's t 97.5% quantile for `df` degrees of freedom (at least 1)."""
    if df <= len(_T975):
        return _T975[max(df, 1) - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def window_of(updates: int) -> int:
    """How many of the last updates the final window holds."""
    return max(1, math.ceil(updates * WINDOW_FRACTION))


def window_mean(series: Series, first: int, last: int) -> float | None:
    """The mean of the finite values logged at updates first..last; None when there is none."""
    values = [v for u, v in series if first <= u <= last and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def interval(parent: Sequence[float], child: Sequence[float], paired: bool, resamples: int = RESAMPLES,
             seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(difference, low, high): child's mean minus parent's, and its interval (module docstring). Paired values are
    in the same seed order."""
    a, b = np.asarray(parent, dtype=float), np.asarray(child, dtype=float)
    rng = np.random.default_rng(seed)
    difference = float(b.mean() - a.mean())
    if paired:
        d = b - a
        k = len(d)
        spread = d[rng.integers(0, k, (resamples, k))].mean(axis=1).std() * math.sqrt(k / (k - 1))
        df = k - 1
    else:
        variances = []
        for values in (a, b):
            k = len(values)
            variances.append(values[rng.integers(0, k, (resamples, k))].mean(axis=1).var() * k / (k - 1))
        spread = math.sqrt(sum(variances))
        df = min(len(a), len(b)) - 1
    half = t_quantile(df) * float(spread)
    return difference, difference - half, difference + half


def _word(metric: Metric, low: float, high: float) -> str:
    if low <= 0 <= high:
        return "within noise"
    up = low > 0
    if metric.better == 0:
        return "higher" if up else "lower"
    return "better" if up == (metric.better > 0) else "worse"


def _window_means(arm: Arm, name: str, first: int, last: int) -> dict[int, float]:
    means = {r.seed: window_mean(r.series[name], first, last) for r in arm.finished if r.series.get(name)}
    return {seed: mean for seed, mean in means.items() if mean is not None}


def compare_metric(metric: Metric, parent: Arm, child: Arm, *, resamples: int = RESAMPLES) -> MetricVerdict:
    """The verdict on one metric between the arms' finished seed runs."""
    logged = [r.series[metric.name] for arm in (parent, child) for r in arm.finished if r.series.get(metric.name)]
    if not any(r.series.get(metric.name) for r in parent.finished) or \
            not any(r.series.get(metric.name) for r in child.finished):
        return MetricVerdict(metric.name, metric.label, "not logged")
    last = min(max(u for u, _ in series) for series in logged)
    first = last - window_of(last) + 1
    before, after = _window_means(parent, metric.name, first, last), _window_means(child, metric.name, first, last)
    paired = bool(before) and set(before) == set(after)
    a = [before[seed] for seed in sorted(before)]
    b = [after[seed] for seed in sorted(after)]
    mean = lambda values: sum(values) / len(values) if values else None  # noqa: E731
    counts = (len(a), len(b))
    if min(counts) < 2:
        difference = mean(b) - mean(a) if a and b else None
        return MetricVerdict(metric.name, metric.label, "too few seeds", mean(a), mean(b), difference, None, None,
                             counts, paired, (first, last))
    difference, low, high = interval(a, b, paired, resamples)
    return MetricVerdict(metric.name, metric.label, _word(metric, low, high), mean(a), mean(b), difference, low,
                         high, counts, paired, (first, last))


def compare(parent: Arm, child: Arm, metrics: Sequence[Metric] = VERDICT_METRICS, *,
            resamples: int = RESAMPLES) -> Comparison:
    """The verdict on every metric; seed runs that did not finish are listed as excluded."""
    excluded = [f"{arm.run_id} seed {r.seed}: {r.status}" for arm in (parent, child) for r in arm.runs
                if r.status != "finished"]
    return Comparison(parent.run_id, child.run_id, [compare_metric(m, parent, child, resamples=resamples)
                                                    for m in metrics], STATISTIC, excluded)
