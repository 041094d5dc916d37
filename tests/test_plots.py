"""Learning curves: one valid PNG per metric a train.logs holds (nan marked), metric names mapped by
pattern, a reason instead of an error when nothing can be drawn, and the report's Curves section."""

import builtins
import math
import re
from pathlib import Path

import pytest

from orchestrator.training.logformat import parse_log
from orchestrator.training.plots import STOP_MARK, curves_section, latest_metrics, metric_series, write_curves

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# the Cleanup template's key=value lines: a relaunch appends a second start line, whose updates are plotted
LOG = """2026-11-23T09:40:00 start updates=9
2026-11-23T09:40:01 train update=1 reward_mean=9.0 loss=9.0
2026-11-23T09:41:00 start updates=4
2026-11-23T09:41:01 train update=1 episode=2 loss=0.5 kl=0.01 gradNorm=1.5 clip_ratio=0 reward_mean=-0.3
2026-11-23T09:41:02 eval update=1 eval_reward_mean=0.2
2026-11-23T09:41:03 train update=2 episode=4 loss=nan kl=0.02 gradNorm=inf clip_ratio=0.1 reward_mean=-0.2
2026-11-23T09:41:04 train update=3 episode=6 loss=0.4 kl=0.03 gradNorm=1.1 clip_ratio=0.05 reward_mean=-0.15
"""


def test_a_png_per_metric_present_with_nan_kept(tmp_path: Path):
    log = tmp_path / "train.logs"
    log.write_text(LOG)
    curves = write_curves(log, tmp_path / "plots" / "formal-1", "formal-1")
    assert curves.reason == ""
    assert [p.stem for p in curves.files] == ["reward", "loss", "kl", "grad_norm", "clip_fraction"]
    for path in curves.files:
        assert path.read_bytes().startswith(PNG_SIGNATURE) and path.stat().st_size > 2000
    series = metric_series(parse_log(LOG))
    assert series["reward"] == [(1, -0.3), (2, -0.2), (3, -0.15)]  # the latest run only
    assert math.isnan(series["loss"][1][1]) and math.isinf(series["grad_norm"][1][1])


def test_the_nan_line_is_drawn_in_red(tmp_path: Path):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn = []
    real = Figure.savefig

    def spy(self, *args, **kwargs):
        drawn.append([(line.get_color(), line.get_linestyle(), list(line.get_xdata()), list(line.get_ydata()))
                      for line in self.axes[0].get_lines()])
        return real(self, *args, **kwargs)

    log = tmp_path / "train.logs"
    log.write_text(LOG)
    Figure.savefig = spy
    try:
        write_curves(log, tmp_path / "out", "formal-1")
    finally:
        Figure.savefig = real
    reward, loss = drawn[0], drawn[1]
    assert not any(color == "red" for color, *_ in reward)
    assert [(color, style, x) for color, style, x, _ in loss if color == "red"] == [("red", "--", [2, 2])]
    curve = loss[0][3]  # the line breaks at the nan instead of joining its neighbours
    assert curve[0] == 0.5 and math.isnan(curve[1]) and curve[2] == 0.4


def test_an_anomaly_and_the_stop_are_marked_on_every_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn = []
    real = Figure.savefig

    def spy(self, *args, **kwargs):
        drawn.append({line.get_label(): (line.get_color(), line.get_linestyle(), list(line.get_xdata()))
                      for line in self.axes[0].get_lines()})
        return real(self, *args, **kwargs)

    log = tmp_path / "train.logs"
    log.write_text(LOG)
    monkeypatch.setattr(Figure, "savefig", spy)
    write_curves(log, tmp_path / "out", "formal-1", marks=[(2, "grad_norm_explosion"), (3, STOP_MARK)])
    assert len(drawn) == 5
    for lines in drawn:
        assert lines["grad_norm_explosion (2)"] == ("darkorange", ":", [2, 2])
        assert lines["stopped (3)"] == ("black", "-.", [3, 3])


def test_other_spellings_are_found_by_pattern(tmp_path: Path):
    log = tmp_path / "train.logs"
    log.write_text('{"step": 1, "train/rewards": 0.5, "clip_frac_high": 0.2, "invalid_parse_rate": 0.9, '
                   '"response_length_mean": 31.0, "actor/pg_loss": 0.1, "kl_coef": 0.04}\n'
                   '{"step": 2, "train/rewards": 0.7, "clip_frac_high": 0.1, "invalid_parse_rate": 0.5, '
                   '"response_length_mean": 28.0, "actor/pg_loss": 0.2, "kl_coef": 0.04}\n')
    latest = latest_metrics(log)
    assert latest == {"update": 2.0, "reward": 0.7, "loss": 0.2, "clip_fraction": 0.1, "invalid_action_rate": 0.5,
                      "completion_length": 28.0}  # kl_coef is a setting, not the kl


def test_empty_log_and_missing_matplotlib_give_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "train.logs"
    log.write_text("Traceback (most recent call last):\n")
    assert write_curves(log, tmp_path / "out", "x").reason.startswith("no curves: ")
    assert write_curves(tmp_path / "missing.logs", tmp_path / "out", "x").files == []
    log.write_text(LOG)
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    curves = write_curves(log, tmp_path / "out", "x")
    assert curves.files == [] and "matplotlib is not installed" in curves.reason
    assert not (tmp_path / "out").exists()


def test_curves_section_links_resolve(tmp_path: Path):
    run_dir = tmp_path / "run"
    assert curves_section(run_dir)[-1] == "No formal training run has been plotted."
    log = tmp_path / "train.logs"
    log.write_text(LOG)
    for n in (10, 2):
        write_curves(log, run_dir / "plots" / f"formal-{n}", f"formal-{n}")
    section = "\n".join(curves_section(run_dir))
    assert section.index("### formal-2") < section.index("### formal-10")
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", section)
    assert len(links) == 10 and all((run_dir / link).is_file() for link in links)
    assert links[0] == "plots/formal-2/reward.png"
