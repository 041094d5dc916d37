"""Candidate Cleanup recipes for the learning test, on the runs that failed to learn: which learns reliably.

    python benchmarks/learning_recipes.py RECIPE --seeds 5003 14002
                                          [--results benchmarks/results/learning-recipes.jsonl]
    python benchmarks/learning_recipes.py --report

Each candidate is the 8-updates-of-6 recipe the test used (`learning_run.RECIPES_8X6`) with one thing changed; each
seed is one run measured as the test measures it (`learning_run.measure_seeds`: training, then the warm start and the
trained model on the held-out boards, sampled and greedy), appended to the results file as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from held_out import MODES  # noqa: E402
from learning_bench import generated_folder  # noqa: E402
from learning_run import RECIPES_8X6, measure_seeds  # noqa: E402

from orchestrator.tiny.agent import local_tiny_agent  # noqa: E402

GAME = "cleanup"
BASE = RECIPES_8X6[GAME]
CANDIDATES = {
    "8x6": BASE,
    "accumulate4": replace(BASE, training={**BASE.training, "gradient_accumulation_steps": 4}, lr=6e-4),
    "lr1e-3": replace(BASE, lr=1e-3),
    "12x4": replace(BASE, updates=12, group=4),  # the same 48 episodes on 12 boards: the test's recipe now
}
RESULTS = ROOT / "benchmarks" / "results" / "learning-recipes.jsonl"


def report(rows: list[dict]) -> None:
    print("| recipe | seed | sampled | greedy | statistic | sampled invalid-action rate rise |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        gains = row["gains"]
        print(f"| {row['recipe']} | {row['seed']} | {gains['sampled']:+.3f} | {gains['greedy']:+.3f} | "
              f"{gains['sampled'] + gains['greedy']:+.3f} | {row['rise']:+.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", choices=sorted(CANDIDATES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[5003, 14002])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="only print the report of the results file")
    args = parser.parse_args()
    if not args.report:
        if args.recipe is None:
            parser.error("name a recipe, or --report")
        with tempfile.TemporaryDirectory() as tmp:
            folder = generated_folder(GAME, Path(tmp) / GAME)
            model = local_tiny_agent(ROOT, folder)
            for seed in args.seeds:
                [run] = measure_seeds(GAME, folder, model, [seed], Path(tmp) / args.recipe,
                                      recipe=CANDIDATES[args.recipe], modes=MODES)
                row = {"recipe": args.recipe, "seed": seed, "gains": {m: run.gain_of(m) for m in MODES},
                       "rise": run.invalid_rise, "reward_mean": run.train["reward_mean"], "cpu": run.cpu_s}
                with args.results.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    report([json.loads(line) for line in args.results.read_text().splitlines() if line.strip()])


if __name__ == "__main__":
    main()
