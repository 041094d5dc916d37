"""The learning test's controls: runs that must not learn, scored by the test's statistic (sampled + greedy gain).

    python benchmarks/learning_controls.py [--seeds 100 101 102 103] [--controls lr0 one_update coin negated noise]
                                           [--results benchmarks/results/learning-controls.jsonl] [--report]

Each control is the test's seed (`learning_run.measure` on Cleanup) with one thing broken:

- `lr0`: learning rate 0 (the weights never change: its statistic is 0 by construction, measured to show it);
- `one_update`: one GRPO update instead of the recipe's;
- `coin`: every episode's return replaced by a fair coin flip (0 or 1) before the group advantages;
- `negated`: every return negated (GRPO then learns to score less);
- `noise`: no training of its own: the warm start plus, in every weight tensor, Gaussian noise scaled to the norm
  of the change a real GRPO run of the same seed made to that tensor (that run is trained here and reported too).

`coin` and `negated` change one line of the copied train.py (the returns that `assign_advantages` normalises); the
source of truth and the reference set are untouched. The report prints each control's statistic per seed and its
highest value, beside the test's threshold; the test sums two runs (seeds 2k and 2k + 1), so the report sums each
such pair measured, and its highest is the highest pair.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from learning_bench import generated_folder  # noqa: E402
from held_out import MODES  # noqa: E402
from learning_run import LEARNING_THRESHOLD, RECIPES, SeedResult, final_model, learning_statistic, measure, score  # noqa: E402

from orchestrator.tiny.agent import local_tiny_agent  # noqa: E402

GAME = "cleanup"
CONTROLS = ("lr0", "one_update", "coin", "negated", "noise")
RESULTS = ROOT / "benchmarks" / "results" / "learning-controls.jsonl"
RETURNS_LINE = "    returns = torch.tensor(rollout.returns, dtype=torch.float32)  # (G, A)\n"
CHANGED_RETURNS = {
    "coin": "    returns = torch.tensor([[float(random.random() < 0.5) for _ in r] for r in rollout.returns])\n",
    "negated": "    returns = -torch.tensor(rollout.returns, dtype=torch.float32)  # (G, A)\n",
}


def with_returns(folder: Path, control: str, dest: Path) -> Path:
    """A copy of the generated set whose train.py hands `control`'s returns to the group advantages."""
    shutil.copytree(folder, dest)
    train = dest / "train.py"
    text = train.read_text()
    if text.count(RETURNS_LINE) != 1:
        raise SystemExit("train.py: the returns line of assign_advantages was not found once")
    train.write_text(text.replace(RETURNS_LINE, CHANGED_RETURNS[control]))
    return dest


def noisy_model(warm: str, trained: Path, dest: Path, seed: int) -> Path:
    """The warm start plus per-tensor Gaussian noise of the norm of the trained model's change to that tensor."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32)
    changed = AutoModelForCausalLM.from_pretrained(trained, dtype=torch.float32).state_dict()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in model.state_dict().items():
            size = (changed[name] - weight).norm()
            noise = torch.randn(weight.shape, generator=generator)
            weight.add_(noise * size / noise.norm().clamp(min=1e-12))
    model.save_pretrained(dest)
    for kept in Path(warm).iterdir():  # the tokenizer, its chat template, the agent's marker
        if not (dest / kept.name).exists():
            shutil.copy2(kept, dest / kept.name)
    return dest


def gains(result: SeedResult) -> dict[str, Any]:
    """A control's row: its gain in each mode and the trained model's invalid rates."""
    return {"gains": {mode: result.gain_of(mode) for mode in MODES},
            "invalid": {mode: result.scored[mode][1]["invalid_rate"] for mode in MODES}}


def run_control(control: str, folder: Path, model: str, seed: int, work: Path) -> dict[str, Any]:
    if control in CHANGED_RETURNS:
        return gains(measure(GAME, with_returns(folder, control, work / f"set-{control}-{seed}"), model, seed,
                             work / control, modes=MODES))
    if control in ("lr0", "one_update"):
        return gains(measure(GAME, folder, model, seed, work / control, modes=MODES,
                             **({"lr": 0.0} if control == "lr0" else {"updates": 1})))
    real = measure(GAME, folder, model, seed, work / "real", modes=MODES)
    noisy = noisy_model(model, final_model(work / "real" / f"{GAME}-seed{seed}"), work / f"noise-{seed}", seed)
    scored = score(GAME, folder, [model, str(noisy)], RECIPES[GAME], MODES)
    moved = SeedResult(GAME, seed, real.train, {mode: tuple(found) for mode, found in scored.items()}, real.cpu_s)
    return {**gains(moved), "real_gains": {mode: real.gain_of(mode) for mode in MODES}}


def report(rows: list[dict[str, Any]], threshold: float = LEARNING_THRESHOLD) -> None:
    print(f"\n{GAME}: the test's statistic (held-out reward, trained minus warm start, sampled + greedy) under each "
          f"control; the test's threshold {threshold:g}")
    print("| control | seeds | sampled | greedy | sampled + greedy | pairs 2k, 2k + 1 summed (the test's) | highest |")
    print("|---|---|---|---|---|---|---|")
    for control in CONTROLS:
        runs = sorted((r for r in rows if r["control"] == control and "gains" in r), key=lambda r: r["seed"])
        if runs:
            sums = {r["seed"]: learning_statistic(r["gains"]) for r in runs}
            pairs = {seed: sums[seed] + sums[seed + 1] for seed in sums if seed % 2 == 0 and seed + 1 in sums}
            print(f"| {control} | {' '.join(str(r['seed']) for r in runs)} | "
                  + " | ".join(", ".join(f"{r['gains'][mode]:+.3f}" for r in runs) for mode in MODES)
                  + f" | {', '.join(f'{v:+.3f}' for v in sums.values())}"
                  + f" | {', '.join(f'{a}+{a + 1}: {v:+.3f}' for a, v in pairs.items()) or '-'}"
                  + f" | {max(pairs.values()) if pairs else max(sums.values()):+.3f} |")
    real = [r for r in rows if "real_gains" in r]
    if real:
        print("the real runs the noise came from: " + ", ".join(f"{learning_statistic(r['real_gains']):+.3f}"
                                                                  for r in real))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102, 103])
    parser.add_argument("--controls", nargs="+", choices=CONTROLS, default=list(CONTROLS))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="only print the report of the results file")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.results.read_text().splitlines()] if args.results.is_file() else []
    if not args.report:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        done = {(r["control"], r["seed"]) for r in rows}
        with tempfile.TemporaryDirectory() as tmp:
            folder = generated_folder(GAME, Path(tmp) / GAME)
            model = local_tiny_agent(ROOT, folder)
            for control in args.controls:
                for seed in args.seeds:
                    if (control, seed) in done:
                        continue
                    row = {"control": control, "seed": seed,
                           **run_control(control, folder, model, seed, Path(tmp) / f"{control}-{seed}")}
                    rows.append(row)
                    with args.results.open("a") as out:
                        out.write(json.dumps(row) + "\n")
                    print(f"{control} seed {seed}: " + ", ".join(f"{m} {g:+.3f}" for m, g in row["gains"].items())
                          + f", sampled + greedy {learning_statistic(row['gains']):+.3f}", flush=True)
    report([r for r in rows if r["control"] in args.controls and r["seed"] in args.seeds])


if __name__ == "__main__":
    main()
