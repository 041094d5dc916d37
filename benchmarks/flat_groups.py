"""How often the demo's formal run has updates without a gradient: its settings (`demo.FORMAL_BY_ROLE`) trained
from the tiny agent on many config seeds, each seed a stand-in for another CPU's sampled tokens.

    python benchmarks/flat_groups.py [--games cleanup staghunt] [--seeds 0 1 2 ...] [--results FILE] [--report]

An update has a gradient only when some agent role's returns differ within a group (all equal, every advantage is
0). Per seed: one run of the demo's formal settings through the example's launch script, one process, and per update
its logged reward spread (`reward_std`) and share of flat groups. The report gives, per game, how many updates were
flat, how many runs had two or more flat updates of their three (what the demo's test refuses), and how many runs
logged one reward for every update. Every finished seed is one JSON line of the results file, so a sweep that stops
goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from held_out import game_roles  # noqa: E402
from learning_bench import generated_folder  # noqa: E402
from learning_run import train  # noqa: E402

from orchestrator.demo import FORMAL_BY_ROLE  # noqa: E402
from orchestrator.sources.roles import deliver  # noqa: E402
from orchestrator.tiny.agent import local_tiny_agent  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "flat-groups.jsonl"
GRADIENT = 1e-4  # the demo test's "has a gradient"


def run_seed(game: str, folder: Path, model: str, seed: int, work: Path) -> dict[str, Any]:
    roles = game_roles(game, folder)
    values = roles.to_fields({**FORMAL_BY_ROLE, "model": model, "random_seed": seed, "log_folder": str(work),
                              "output_folder": str(work / "outputs"), "sample_every": 1_000_000,
                              "eval_every": 1_000_000})
    series = train(folder, deliver(roles, values, folder / "grpo_config.py"), work)
    norms = series.get("grad_norm") or series.get("gradNorm") or []
    return {"game": game, "seed": seed, "reward": series.get("reward_mean") or series.get("reward", []),
            "reward_std": series.get("reward_std", []), "grad_norm": norms}


def report(rows: list[dict[str, Any]]) -> None:
    for game in dict.fromkeys(r["game"] for r in rows):
        runs = [r for r in rows if r["game"] == game]
        flat = [sum(n <= GRADIENT for n in r["grad_norm"]) for r in runs]
        updates = sum(len(r["grad_norm"]) for r in runs)
        refused = sum(f >= 2 for f in flat)
        one_reward = sum(len(set(r["reward"])) <= 1 for r in runs)
        print(f"{game}: {len(runs)} seeds; {sum(flat)} of {updates} updates without a gradient (grad norm <= "
              f"{GRADIENT:g}); runs with 2+ such updates: {refused}; runs logging one reward for every update: "
              f"{one_reward}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["cleanup", "staghunt"])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(1, 31)))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="only print the report of the results file")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.results.read_text().splitlines()] if args.results.is_file() else []
    if not args.report:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        done = {(r["game"], r["seed"]) for r in rows}
        with tempfile.TemporaryDirectory() as tmp:
            for game in args.games:
                folder = generated_folder(game, Path(tmp) / game)
                model = local_tiny_agent(ROOT, folder)
                for seed in args.seeds:
                    if (game, seed) in done:
                        continue
                    row = run_seed(game, folder, model, seed, Path(tmp) / f"{game}-{seed}")
                    rows.append(row)
                    with args.results.open("a") as out:
                        out.write(json.dumps(row) + "\n")
                    print(f"{game} seed {seed}: grad norms {', '.join(f'{n:.2g}' for n in row['grad_norm'])}",
                          flush=True)
    report([r for r in rows if r["game"] in args.games and r["seed"] in args.seeds])


if __name__ == "__main__":
    main()
