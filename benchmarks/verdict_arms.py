"""The lr-0 arm of the verdict's test: the learning benchmark's Cleanup recipe at learning rate 0, per seed, and
the verdict of that arm against the learning arm (the sweep's GRPO runs of the same seeds) on the first K seeds.

    python benchmarks/verdict_arms.py [--seeds 100 101 ...] [--results benchmarks/results/verdict-lr0.jsonl]
    python benchmarks/verdict_arms.py --report            # only the verdicts, from the results files

Each seed trains `learning_run.RECIPES_8X6["cleanup"]` (the recorded sweep's: 8 updates of 6) from the tiny agent's
warm start with the learning rate set to 0, on the same game seeds as the sweep's GRPO run of that seed
(`learning_sweep.py`: seed k plays game seeds k * SEED_SPACING + update), and its train.logs series are appended to
the results file as one JSON line (the sweep's `train` field, same keys), so the two arms pair seed by seed. A
stopped recording goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from held_out import SEED_SPACING  # noqa: E402
from learning_bench import generated_folder  # noqa: E402
from learning_run import RECIPES_8X6 as RECIPES, train, training_args  # noqa: E402
from learning_sweep import SEEDS, load  # noqa: E402

from orchestrator.ideas.verdict import Arm, SeedRun, compare  # noqa: E402
from orchestrator.tiny.agent import local_tiny_agent  # noqa: E402

GAME = "cleanup"
RESULTS = ROOT / "benchmarks" / "results" / "verdict-lr0.jsonl"
SWEEP = ROOT / "benchmarks" / "results" / "learning-sweep-8x6.jsonl"  # the learning arm, recorded
REPORTED = (3, 5, 10, 20)  # the first K seeds of both arms
# the verdict's metrics (orchestrator.ideas.verdict) and the train.logs keys that hold them in the Cleanup template
METRIC_KEYS = {"reward": "reward_mean", "invalid_action_rate": "invalid_action_rate",
               "completion_length": "completion_mean_length", "kl": "kl"}


def arm(name: str, rows: list[dict]) -> Arm:
    """An arm of the recorded seed runs, their series under the verdict's names."""
    return Arm(name, tuple(SeedRun(r["seed"], {metric: list(enumerate(r["train"][key], 1))
                                               for metric, key in METRIC_KEYS.items() if key in r["train"]})
                           for r in sorted(rows, key=lambda r: r["seed"])))


def report(lr0_rows: list[dict], learning_rows: list[dict]) -> None:
    seeds = sorted({r["seed"] for r in lr0_rows} & {r["seed"] for r in learning_rows})
    print(f"the learning arm (lr {RECIPES[GAME].lr:g}, the sweep's GRPO runs) against the lr-0 arm, "
          f"{GAME}, {RECIPES[GAME].updates} updates; {len(seeds)} seeds recorded in both")
    for count in (k for k in REPORTED if k <= len(seeds)):
        chosen = set(seeds[:count])
        result = compare(arm("learning", [r for r in learning_rows if r["seed"] in chosen]),
                         arm("lr 0", [r for r in lr0_rows if r["seed"] in chosen]))
        print(f"first {count} seeds:")
        for metric in result.metrics:
            print(f"  {metric.line}")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record(seeds: list[int], results: Path) -> None:
    done = {r["seed"] for r in load(results)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = generated_folder(GAME, Path(tmp) / GAME)
        model = local_tiny_agent(ROOT, folder)
        for seed in (s for s in seeds if s not in done):
            log_dir = Path(tmp) / "runs" / f"{GAME}-lr0-seed{seed}"
            cli = training_args(GAME, folder, RECIPES[GAME], model=model, game_seed=seed * SEED_SPACING,
                                log_dir=log_dir, lr=0.0)
            started = _cpu()
            series = train(folder, cli, log_dir)
            row = {"game": GAME, "arm": "lr0", "seed": seed, "train": series, "cpu_s": {"train": _cpu() - started}}
            with results.open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(f"{GAME} lr 0 seed {seed}: reward {[round(v, 3) for v in series['reward_mean']]}, "
                  f"CPU {row['cpu_s']['train']:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="only print the verdicts of the results files")
    args = parser.parse_args()
    if not args.report:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        record(args.seeds, args.results)
    report(load(args.results), [r for r in load(SWEEP) if r["game"] == GAME])


if __name__ == "__main__":
    main()
