"""Does the GRPO loop learn? The tiny agent trained with GRPO against the same run with a zero learning rate.

For each example game (its source of truth plus its reference generated set) and each seed, two runs of
`launch_training.sh` from the same warm start (the tiny agent built for that game): GRPO at --lr, and the
same number of updates at learning rate 0 (same sampling, same games, no weight change). Per update it
reads reward mean and invalid-action rate from train.logs, prints a table of first and last quarters, the
effect (GRPO's change minus the control's) and the last quarter's gap (GRPO minus control, the same games)
with their spread across seeds, and plots the curves.

    python benchmarks/learning_bench.py [--games cleanup staghunt] [--seeds 0 1 2] [--updates 30] [--group 8]
                                        [--turns 5] [--lr 3e-4] [--agents N] [--jobs 2] [--save RUNS.json]
                                        [--plot benchmarks/results/learning.png]

Values reach train.py through each example's roles mapping (its own field names); the learning rate is
the config's `learning_rate` field (both examples have one).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.config_file import field_kinds, load_config_class  # noqa: E402
from orchestrator.demo import example, recorded_roles  # noqa: E402
from orchestrator.logformat import parse_log  # noqa: E402
from orchestrator.roles import deliver, parses_command_line, validate_roles  # noqa: E402
from orchestrator.tiny_agent import local_tiny_agent  # noqa: E402

METRICS = ("reward_mean", "invalid_action_rate")
SMOOTHING = 5


def generated_folder(game: str, dest: Path) -> Path:
    ex = example(game)
    dest.mkdir(parents=True)
    for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
        shutil.copy2(src, dest / src.name)
    return dest


def run_values(game: str, folder: Path, *, model: str, seed: int, lr: float, updates: int, group: int, turns: int,
               log_dir: Path, agents: int | None = None) -> list[str]:
    ex = example(game)
    config_path = folder / "grpo_config.py"
    config_cls = load_config_class(config_path)
    kinds = field_kinds(config_cls)
    roles = validate_roles(recorded_roles(ex), kinds, cli_possible=parses_command_line(
        (folder / "grpo_template.py").read_text(), config_path.read_text()))
    if "learning_rate" not in kinds:
        raise SystemExit(f"{game}: the config has no learning_rate field; this benchmark sets the rate through it")
    values = roles.to_fields({
        "model": model, "episodes_total": updates * group, "updates_total": updates, "group_generations": group,
        "episode_turns": turns, "thinking_cap": 40, "action_cap": 40, "random_seed": seed, "precision": False,
        "checkpointing": False, "eval_every": 1_000_000, "save_every": 1_000_000, "sample_every": 1_000_000,
        "log_folder": str(log_dir), "output_folder": str(log_dir / "outputs"),
        **({"agent_count": agents} if agents else {})})
    values["learning_rate"] = lr
    return deliver(roles, values, config_path)


def one_run(game: str, folder: Path, cli: list[str], log_dir: Path) -> dict[str, list[float]]:
    """One training run through the example's launch script; every train.logs metric per update."""
    env = {**os.environ, "PYTHON": sys.executable, "CPU_PROCESSES": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "launch_training.sh", *cli], cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{game} ({log_dir.name}): training failed:\n{done.stderr[-3000:]}")
    log = next(iter(sorted(log_dir.rglob("train.logs"), key=lambda p: len(p.parts))))
    updates = [r for r in parse_log(log.read_text()) if r.kind == "train"]
    return {m: [r.values[m] for r in updates if m in r.values] for m in sorted({k for r in updates for k in r.values})}


def quarter_means(series: list[float]) -> tuple[float, float]:
    quarter = max(1, len(series) // 4)
    return statistics.fmean(series[:quarter]), statistics.fmean(series[-quarter:])


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):+.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def report(results: dict, args: argparse.Namespace) -> None:
    print(f"\n{args.updates} updates, group {args.group}, {args.turns} turns, {args.agents or 'default'} agents, "
          f"lr {args.lr:g} vs 0, "
          f"seeds {' '.join(map(str, args.seeds))}; mean ± std across seeds")
    print(f"{'game':9} {'metric':20} {'arm':5} {'first quarter':>15} {'last quarter':>15} {'change':>15}")
    for game, arms in results.items():
        for metric in METRICS:
            changes = {}
            for arm in ("grpo", "lr=0"):
                firsts, lasts = zip(*(quarter_means(run[metric]) for run in arms[arm]))
                changes[arm] = [b - a for a, b in zip(firsts, lasts)]
                print(f"{game:9} {metric:20} {arm:5} {spread(list(firsts)):>15} {spread(list(lasts)):>15} "
                      f"{spread(changes[arm]):>15}")
            effect = [g - c for g, c in zip(changes["grpo"], changes["lr=0"])]
            gap = [quarter_means(g[metric])[1] - quarter_means(c[metric])[1]
                   for g, c in zip(arms["grpo"], arms["lr=0"])]
            for name, values in (("effect (GRPO change - control change)", effect),
                                 ("last quarter, GRPO - control", gap)):
                pooled = statistics.stdev(values) if len(values) > 1 else float("nan")
                print(f"{game:9} {metric:20} {name}: {spread(values)}"
                      f"  (mean/std = {statistics.fmean(values) / pooled if pooled else float('nan'):.2f})")


def smoothed(series: list[float]) -> list[float]:
    """Mean of the last SMOOTHING updates (fewer at the start): each update plays other games, so single updates
    swing with the games drawn."""
    return [statistics.fmean(series[max(0, i - SMOOTHING + 1): i + 1]) for i in range(len(series))]


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), len(METRICS), figsize=(10, 3.4 * len(results)), squeeze=False)
    for row, (game, arms) in enumerate(results.items()):
        for col, metric in enumerate(METRICS):
            ax = axes[row][col]
            for arm, colour in (("grpo", "tab:blue"), ("lr=0", "tab:gray")):
                runs = [smoothed(run[metric]) for run in arms[arm]]
                width = min(len(r) for r in runs)
                mean = [statistics.fmean(r[i] for r in runs) for i in range(width)]
                low = [min(r[i] for r in runs) for i in range(width)]
                high = [max(r[i] for r in runs) for i in range(width)]
                steps = range(1, width + 1)
                ax.plot(steps, mean, color=colour, label=f"{arm} (mean of {len(runs)} seeds)")
                ax.fill_between(steps, low, high, color=colour, alpha=0.2)
            ax.set_title(f"{game}: {metric} ({SMOOTHING}-update mean)")
            ax.set_xlabel("update")
            ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["cleanup", "staghunt"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--agents", type=int, default=None, help="agents per game (default: the config's)")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at once (one thread each)")
    parser.add_argument("--save", type=Path, default=None, help="write every run's per-update metrics as JSON")
    parser.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "results" / "learning.png")
    args = parser.parse_args()
    results: dict[str, dict[str, list[dict[str, list[float]]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for game in args.games:
            folder = generated_folder(game, work / game)
            model = local_tiny_agent(ROOT, folder)
            runs = []  # the values are read from the config in this process, one run at a time
            for seed in args.seeds:
                for arm, lr in (("grpo", args.lr), ("lr=0", 0.0)):
                    log_dir = work / f"{game}-seed{seed}-lr{lr:g}"
                    cli = run_values(game, folder, model=model, seed=seed, lr=lr, updates=args.updates,
                                     group=args.group, turns=args.turns, log_dir=log_dir, agents=args.agents)
                    runs.append((arm, seed, cli, log_dir))

            def timed(arm: str, seed: int, cli: list[str], log_dir: Path, game=game, folder=folder):
                started = time.monotonic()
                series = one_run(game, folder, cli, log_dir)
                print(f"{game} seed {seed} {arm}: {time.monotonic() - started:.0f} s", flush=True)
                return series

            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                series = list(pool.map(lambda run: timed(*run), runs))
            results[game] = {arm: [s for run, s in zip(runs, series) if run[0] == arm] for arm in ("grpo", "lr=0")}
    if args.save:
        args.save.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))
    report(results, args)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
