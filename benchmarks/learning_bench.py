"""Does the GRPO loop learn? The tiny agent trained with GRPO against the same run with a zero learning rate.

For each example game (its source of truth plus its reference generated set) and each seed, two runs of
`launch_training.sh` from the same warm start (the tiny agent built for that game): GRPO at --lr, and the
same number of updates at learning rate 0 (same sampling, same games, no weight change). Seed k trains on
game seeds k * 10_000 + update (the templates play `seed + group`), so seeds share no board and their spread
is over independent games. Per update it reads reward mean and invalid-action rate from train.logs; then
`held_out.py` plays boards no run trains on with the GRPO arm's checkpoints (every --eval-every updates) and
both arms' final models, at the training horizon and at the config's own, and counts what the agents did
(helper mix; Cleanup: apples, cleaning, river dirt; Stag Hunt: stags, hares, lone stag attacks). It prints the
training table (first and last quarters, the effect and the last quarter's gap) and the held-out table, mean
± std over seeds, and plots both.

    python benchmarks/learning_bench.py [--games cleanup staghunt] [--seeds 0 1 2] [--updates 30] [--group 8]
                                        [--turns 5] [--lr 3e-4] [--agents N] [--jobs 2] [--eval-every 5]
                                        [--boards 16] [--per-board 2] [--save RUNS.json]
                                        [--plot benchmarks/results/learning.png]

Values reach train.py through each example's roles mapping (its own field names); the learning rate is
the config's `learning_rate` field (both examples have one). The lr-0 arm's weights never change, so its
held-out values are the warm start's.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from held_out import SEED_SPACING, HeldOut, game_roles  # noqa: E402

from orchestrator.sources.config_file import read_config# noqa: E402
from orchestrator.demo import example  # noqa: E402
from orchestrator.training.logformat import parse_log  # noqa: E402
from orchestrator.sources.roles import deliver  # noqa: E402
from orchestrator.tiny.agent import local_tiny_agent  # noqa: E402

METRICS = ("reward_mean", "invalid_action_rate")
SMOOTHING = 5
ARMS = ("grpo", "lr=0")
BEHAVIOUR = {"cleanup": (("apples", "apples eaten"), ("cleaned", "river cells cleaned"),
                         ("dirt_end", "river dirt at the end (fraction)")),
             "staghunt": (("stags", "stags caught (hunter shares)"), ("hares", "hares caught"),
                          ("lone_stag", "lone stag attacks (failed)"))}


def generated_folder(game: str, dest: Path) -> Path:
    ex = example(game)
    dest.mkdir(parents=True)
    for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
        shutil.copy2(src, dest / src.name)
    return dest


def config_turns(game: str, folder: Path) -> int:
    """The config's own episode length (its default), the horizon the researcher chose."""
    name = game_roles(game, folder).field_of("episode_turns")
    return read_config(folder / "grpo_config.py").defaults[name]


def run_values(game: str, folder: Path, *, model: str, seed: int, lr: float, updates: int, group: int, turns: int,
               log_dir: Path, save_every: int, agents: int | None = None) -> list[str]:
    config_path = folder / "grpo_config.py"
    roles = game_roles(game, folder)
    if "learning_rate" not in read_config(config_path).kinds:
        raise SystemExit(f"{game}: the config has no learning_rate field; this benchmark sets the rate through it")
    values = roles.to_fields({
        "model": model, "episodes_total": updates * group, "updates_total": updates, "group_generations": group,
        "episode_turns": turns, "thinking_cap": 40, "action_cap": 40, "random_seed": seed, "precision": False,
        "checkpointing": False, "eval_every": 1_000_000, "save_every": save_every, "sample_every": 1_000_000,
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


def held_out(game: str, folder: Path, arm: str, seed: int, log_dir: Path, args: argparse.Namespace,
             long_turns: int) -> dict[str, Any]:
    """The run's models on held-out boards: {"curve": [(update, result)], "final": {turns: result}}. The GRPO
    arm's curve has its checkpoints and final model at the training horizon; the control's, its final only."""
    outputs = log_dir / "outputs"
    models = {args.updates: str(outputs / "final")}
    if arm == "grpo":
        models = {update: str(outputs / f"checkpoint-{update}")
                  for update in range(args.eval_every, args.updates, args.eval_every)} | models
    spec = HeldOut(game, folder, list(models.values()), seed, args.boards, args.per_board, args.turns,
                   agents=args.agents)
    curve = list(zip(models, spec.run()))
    final = {args.turns: curve[-1][1]}
    if long_turns != args.turns:
        final[long_turns] = HeldOut(game, folder, [models[args.updates]], seed, args.boards, args.per_board,
                                    long_turns, agents=args.agents).run()[0]
    return {"curve": curve, "final": final}


def quarter_means(series: list[float]) -> tuple[float, float]:
    quarter = max(1, len(series) // 4)
    return statistics.fmean(series[:quarter]), statistics.fmean(series[-quarter:])


def spread(values: list[float], digits: int = 3, sign: str = "+") -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):{sign}.{digits}f} ± {std:.{digits}f}"


def report_training(results: dict, args: argparse.Namespace) -> None:
    print(f"\n{args.updates} updates, group {args.group}, {args.turns} turns, {args.agents or 'default'} agents, "
          f"lr {args.lr:g} vs 0, seeds {' '.join(map(str, args.seeds))} (game seeds seed * {SEED_SPACING} + "
          f"update); training rollouts, mean ± std across seeds")
    print(f"{'game':9} {'metric':20} {'arm':5} {'first quarter':>15} {'last quarter':>15} {'change':>15}")
    for game, arms in results.items():
        for metric in METRICS:
            changes = {}
            for arm in ARMS:
                firsts, lasts = zip(*(quarter_means(run["train"][metric]) for run in arms[arm]))
                changes[arm] = [b - a for a, b in zip(firsts, lasts)]
                print(f"{game:9} {metric:20} {arm:5} {spread(list(firsts)):>15} {spread(list(lasts)):>15} "
                      f"{spread(changes[arm]):>15}")
            effect = [g - c for g, c in zip(changes["grpo"], changes["lr=0"])]
            gap = [quarter_means(g["train"][metric])[1] - quarter_means(c["train"][metric])[1]
                   for g, c in zip(arms["grpo"], arms["lr=0"])]
            for name, values in (("effect (GRPO change - control change)", effect),
                                 ("last quarter, GRPO - control", gap)):
                pooled = statistics.stdev(values) if len(values) > 1 else float("nan")
                print(f"{game:9} {metric:20} {name}: {spread(values)}"
                      f"  (mean/std = {statistics.fmean(values) / pooled if pooled else float('nan'):.2f})")


def held_out_row(label: str, arms: dict, columns: list[tuple[str, int]], value, digits: int = 2,
                 sign: str = "") -> str:
    cells = [spread([value(run["held_out"]["final"][turns]) for run in arms[arm]], digits, sign)
             for arm, turns in columns]
    return f"| {label} | " + " | ".join(cells) + " |"


def report_held_out(results: dict, args: argparse.Namespace) -> None:
    """One markdown table per game: per agent-episode on held-out boards, each arm's final model, at the
    training horizon and the config's own, mean ± std across seeds."""
    for game, arms in results.items():
        horizons = list(arms["grpo"][0]["held_out"]["final"])
        columns = [(arm, turns) for turns in horizons for arm in ARMS]
        print(f"\n{game}: held-out boards ({args.boards} x {args.per_board} episodes per seed, never trained on), "
              f"final models, per agent-episode, mean ± std over {len(args.seeds)} seeds")
        print("| | " + " | ".join(f"{arm}, {turns} turns" for arm, turns in columns) + " |")
        print("|---" * (len(columns) + 1) + "|")
        print(held_out_row("reward", arms, columns, lambda r: r["reward"], sign="+"))
        print(held_out_row("invalid-action rate", arms, columns, lambda r: r["invalid_rate"]))
        for key, label in BEHAVIOUR[game]:
            print(held_out_row(label, arms, columns, lambda r, key=key: r[key]))
        for helper in arms["grpo"][0]["held_out"]["final"][horizons[0]]["helpers"]:
            print(held_out_row(f"% of calls: {helper}", arms, columns,
                               lambda r, helper=helper: 100 * r["helpers"][helper], 0))
        for turns in horizons:
            gaps = [g["held_out"]["final"][turns]["reward"] - c["held_out"]["final"][turns]["reward"]
                    for g, c in zip(arms["grpo"], arms["lr=0"])]
            print(f"reward gap GRPO - lr 0 at {turns} turns: {spread(gaps, 2)} "
                  f"(per seed {', '.join(f'{gap:+.2f}' for gap in gaps)})")


def smoothed(series: list[float]) -> list[float]:
    """Mean of the last SMOOTHING updates (fewer at the start): each update plays other games, so single updates
    swing with the games drawn."""
    return [statistics.fmean(series[max(0, i - SMOOTHING + 1): i + 1]) for i in range(len(series))]


def band(ax, steps: list[int], runs: list[list[float]], colour: str, label: str, **style) -> None:
    """Mean over seeds as a line, min..max as a band."""
    columns = list(zip(*runs))
    ax.plot(steps, [statistics.fmean(c) for c in columns], color=colour, label=label, **style)
    ax.fill_between(steps, [min(c) for c in columns], [max(c) for c in columns], color=colour, alpha=0.2)


def plot(results: dict, path: Path) -> None:
    """Per game: training and held-out reward, the invalid-action rate, and the GRPO checkpoints' helper mix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 3, figsize=(15, 3.6 * len(results)), squeeze=False)
    for row, (game, arms) in enumerate(results.items()):
        for col, metric in enumerate(METRICS):
            ax = axes[row][col]
            for arm, colour in (("grpo", "tab:blue"), ("lr=0", "tab:gray")):
                runs = [smoothed(run["train"][metric]) for run in arms[arm]]
                width = min(len(r) for r in runs)
                band(ax, list(range(1, width + 1)), [r[:width] for r in runs], colour,
                     f"{arm}, training ({SMOOTHING}-update mean, {len(runs)} seeds)")
            held = "reward" if metric == "reward_mean" else "invalid_rate"
            control = [run["held_out"]["curve"][-1][1][held] for run in arms["lr=0"]]
            steps = [0] + [update for update, _ in arms["grpo"][0]["held_out"]["curve"]]
            band(ax, steps, [[c] + [r[held] for _, r in run["held_out"]["curve"]]
                             for c, run in zip(control, arms["grpo"])], "tab:orange",
                 "grpo, held-out boards", marker="o")
            ax.axhline(statistics.fmean(control), color="tab:gray", linestyle="--", label="lr=0, held-out boards")
            ax.set_title(f"{game}: {metric}")
            ax.set_xlabel("update")
            ax.legend(fontsize=7)
        ax = axes[row][2]
        curve = arms["grpo"][0]["held_out"]["curve"]
        steps = [0] + [update for update, _ in curve]
        for helper in curve[0][1]["helpers"]:
            shares = [[run["held_out"]["curve"][-1][1]["helpers"][helper] for run in arms["lr=0"]][i:i + 1]
                      + [r["helpers"][helper] for _, r in run["held_out"]["curve"]]
                      for i, run in enumerate(arms["grpo"])]
            ax.plot(steps, [100 * statistics.fmean(c) for c in zip(*shares)], marker="o", label=helper)
        ax.set_title(f"{game}: GRPO's helper mix, held-out (% of calls)")
        ax.set_xlabel("update")
        ax.legend(fontsize=7)
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
    parser.add_argument("--eval-every", type=int, default=5, help="updates between held-out GRPO checkpoints")
    parser.add_argument("--boards", type=int, default=16, help="held-out boards per seed")
    parser.add_argument("--per-board", type=int, default=2, help="held-out episodes per board")
    parser.add_argument("--save", type=Path, default=None, help="write every run's metrics and held-out results")
    parser.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "results" / "learning.png")
    args = parser.parse_args()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for game in args.games:
            folder = generated_folder(game, work / game)
            model = local_tiny_agent(ROOT, folder)
            long_turns = config_turns(game, folder)
            runs = []  # the values are read from the config in this process, one run at a time
            for seed in args.seeds:
                for arm, lr in (("grpo", args.lr), ("lr=0", 0.0)):
                    log_dir = work / f"{game}-seed{seed}-lr{lr:g}"
                    cli = run_values(game, folder, model=model, seed=seed * SEED_SPACING, lr=lr,
                                     updates=args.updates, group=args.group, turns=args.turns, log_dir=log_dir,
                                     save_every=args.eval_every if arm == "grpo" else 1_000_000)
                    runs.append((arm, seed, cli, log_dir))

            def measured(arm: str, seed: int, cli: list[str], log_dir: Path, game=game, folder=folder,
                         long_turns=long_turns) -> dict[str, Any]:
                started = time.monotonic()
                series = one_run(game, folder, cli, log_dir)
                trained = time.monotonic()
                held = held_out(game, folder, arm, seed * SEED_SPACING, log_dir, args, long_turns)
                print(f"{game} seed {seed} {arm}: training {trained - started:.0f} s, held-out "
                      f"{time.monotonic() - trained:.0f} s", flush=True)
                return {"seed": seed, "train": series, "held_out": held}

            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                measured_runs = list(pool.map(lambda run: measured(*run), runs))
            results[game] = {arm: [m for run, m in zip(runs, measured_runs) if run[0] == arm] for arm in ARMS}
    if args.save:
        args.save.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))
    report_training(results, args)
    report_held_out(results, args)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
