"""Learning as a distribution over seeds nobody picked: `learning_run.measure` on SEEDS for each example game.

    python benchmarks/learning_sweep.py [--games cleanup staghunt] [--seeds 100 101 ...]
                                        [--results benchmarks/results/learning-sweep.jsonl] [--report]

SEEDS (100-119) were fixed here before any of them was run; the team's earlier runs used seeds 0-4. Per seed
and game: one GRPO run of the game's recipe (`learning_run.RECIPES`) from the tiny agent's warm start, then the
warm start (the lr-0 control: its weights are what an lr-0 run ends with) and the trained model on the seed's
held-out boards, sampled (the learning test's statistic) and greedy. Every finished seed is appended to the
results file as one JSON line, so a sweep that stops goes on where it stopped; `--report` only prints.

The report, per game: GRPO minus the control, sampled and greedy, as median, 10th and 5th percentile and worst
seed; how many seeds reach the learning test's threshold; the CPU seconds of a seed; and what the worst seeds
did: the helper their greedy play settled on and their invalid-action rates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learning_bench import generated_folder  # noqa: E402
from held_out import MODES  # noqa: E402
from learning_run import (FORMAT_RISE, LEARNING_THRESHOLD, RECIPES, SeedResult, learning_statistic,  # noqa: E402
                          learning_test_runs, measure, score)

from orchestrator.tiny.agent import local_tiny_agent  # noqa: E402

SEEDS = tuple(range(100, 120))
RESULTS = ROOT / "benchmarks" / "results" / "learning-sweep.jsonl"
WORST_SHOWN = 3


def as_row(result: SeedResult) -> dict[str, Any]:
    return {"game": result.game, "seed": result.seed, "gains": {mode: result.gain_of(mode) for mode in result.scored},
            "scored": result.scored, "train": result.train, "cpu_s": result.cpu_s}


def load(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the sorted values (numpy's default)."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def settled_on(result: dict[str, Any]) -> str:
    """The helper with the largest share of the trained model's valid greedy calls, with that share."""
    helpers = result["scored"]["greedy"][1]["helpers"]
    name = max(helpers, key=helpers.get)
    return f"{name} {helpers[name]:.0%}"


def spread_line(label: str, values: list[tuple[float, int]]) -> str:
    gains = [v for v, _ in values]
    worst, seed = min(values)
    return (f"| {label} | {statistics.median(gains):+.3f} | {percentile(gains, 0.10):+.3f} | "
            f"{percentile(gains, 0.05):+.3f} | {worst:+.3f} (seed {seed}) | {statistics.fmean(gains):+.3f} |")


def report(rows: list[dict[str, Any]], threshold: float = LEARNING_THRESHOLD) -> None:
    for game in dict.fromkeys(r["game"] for r in rows):
        runs = sorted((r for r in rows if r["game"] == game), key=lambda r: r["seed"])
        print(f"\n{game}: {len(runs)} seeds ({runs[0]['seed']}-{runs[-1]['seed']}), GRPO minus the lr-0 control "
              "(the warm start) on held-out boards, reward per agent-episode")
        print("| | median | 10th percentile | 5th percentile | worst seed | mean |")
        print("|---|---|---|---|---|---|")
        for mode in MODES:
            print(spread_line(mode, [(r["gains"][mode], r["seed"]) for r in runs]))
        print(spread_line("sampled + greedy", [(learning_statistic(r["gains"]), r["seed"]) for r in runs]))
        by_seed = {r["seed"]: r for r in runs}
        tests = [(sum(learning_statistic(by_seed[s]["gains"]) for s in learning_test_runs(k)), k)
                 for k in sorted({seed // 2 for seed in by_seed}) if all(s in by_seed for s in learning_test_runs(k))]
        if tests:
            print(spread_line("the test's: two runs summed", tests))
        rises = {r["seed"]: r["scored"]["sampled"][1]["invalid_rate"] - r["scored"]["sampled"][0]["invalid_rate"]
                 for r in runs}
        passing = sum(value >= threshold and all(rises[s] <= FORMAT_RISE for s in learning_test_runs(k))
                      for value, k in tests)
        print(f"the learning test (Cleanup): two runs' sampled + greedy gains summed >= {threshold:g}, each run's "
              f"sampled invalid-action rate up by at most {FORMAT_RISE:g}: {passing} of {len(tests)} test seeds (runs "
              f"2k, 2k + 1); single runs with sampled + greedy >= {threshold:g}: "
              f"{sum(learning_statistic(r['gains']) >= threshold for r in runs)} of {len(runs)}; largest rise "
              f"{max(rises.values()):+.3f}")
        for mode in MODES:
            warm = runs[0]["scored"][mode][0]
            rates = [r["scored"][mode][1]["invalid_rate"] for r in runs]
            print(f"{mode}: warm start reward {warm['reward']:+.3f}, invalid-action rate {warm['invalid_rate']:.3f}; "
                  f"trained invalid-action rate median {statistics.median(rates):.3f}, highest {max(rates):.3f}")
        cpu = [sum(r["cpu_s"].values()) for r in runs]
        train_cpu = [r["cpu_s"]["train"] for r in runs]
        print(f"CPU per seed (process time, children included): median {statistics.median(cpu):.0f} s (training "
              f"{statistics.median(train_cpu):.0f} s), range {min(cpu):.0f}-{max(cpu):.0f} s; the warm start's scoring "
              "once per game besides")
        print("worst seeds: seed, sampled gain, greedy gain, the trained model's greedy calls, its invalid-action rate "
              "sampled / greedy")
        for r in sorted(runs, key=lambda r: r["gains"]["sampled"])[:WORST_SHOWN]:
            print(f"  {r['seed']}: {r['gains']['sampled']:+.3f}, {r['gains']['greedy']:+.3f}, {settled_on(r)}, "
                  f"{r['scored']['sampled'][1]['invalid_rate']:.3f} / {r['scored']['greedy'][1]['invalid_rate']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["cleanup", "staghunt"])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="only print the report of the results file")
    args = parser.parse_args()
    if not args.report:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        done = {(r["game"], r["seed"]) for r in load(args.results)}
        with tempfile.TemporaryDirectory() as tmp:
            for game in args.games:
                folder = generated_folder(game, Path(tmp) / game)
                model = local_tiny_agent(ROOT, folder)
                warm = {mode: found[0] for mode, found in score(game, folder, [model], RECIPES[game], MODES).items()}
                for seed in args.seeds:
                    if (game, seed) in done:
                        continue
                    result = measure(game, folder, model, seed, Path(tmp) / "runs", modes=MODES, warm=warm)
                    with args.results.open("a") as out:
                        out.write(json.dumps(as_row(result)) + "\n")
                    print(f"{game} seed {seed}: " + ", ".join(f"{m} {result.gain_of(m):+.3f}" for m in MODES)
                          + f", CPU {sum(result.cpu_s.values()):.0f} s", flush=True)
    report([r for r in load(args.results) if r["game"] in args.games and r["seed"] in args.seeds])


if __name__ == "__main__":
    main()
