"""One seed of the learning measurement: GRPO from the tiny agent's warm start, then the trained model and the
warm start on the same held-out boards.

The learning test (`tests/test_learning.py`, Cleanup, one seed) and the sweep (`learning_sweep.py`, both example
games, 20 seeds) both call `measure`, so the test's statistic is the sweep's, measured the same way.

Training: `launch_training.sh` of the example's generated set, one process, values through the example's roles
mapping (its own field names) plus the recipe's settings of the game's own fields. Seed k trains on game seeds
k * SEED_SPACING + update, so seeds share no board.

Scoring (`held_out.py`): the same held-out boards for every seed, game seeds 10,000,000 + i (HELD_OUT_SEED 0), which
no run trains on (seed k < 1,000 trains below 10,000,000), played by the warm start and by the trained model from
the same sampling generator state. The lr-0 control is the warm start: at learning rate 0 the weights never change,
so its play on these boards is the warm start's, token for token (a sweep scores it once per game). `sampled` plays
each board `per_board` times at the config's temperature (the statistic the test asserts: GRPO's sampled reward
minus the warm start's, per agent-episode); `greedy` plays each board once at temperature 0 (or near it, where the
config refuses 0).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from held_out import HELD_OUT_BASE, SEED_SPACING, HeldOut, game_roles

from orchestrator.sources.config_file import read_config
from orchestrator.training.logformat import parse_log
from orchestrator.sources.roles import deliver

HELD_OUT_SEED = 0  # boards 10,000,000 + i, the same for every seed
# The learning test's statistic: the sampled and the greedy gain together (their sum) of each of two runs, summed.
# The sampled gain moves with how much probability moved to the calls that pay but carries the boards' sampling
# noise; the greedy gain is noiseless but moves only when the most likely call flips. A run that learned has one of
# them large, a run that did not has both near 0. Two runs, because one run can fail to learn (with 8 updates of 6,
# seed 5003 on an AMD EPYC: sampled -0.321, greedy 0): the test fails only when both do. The threshold lies above
# every control's pair of runs (at most +0.024) and below every held-out seed's pair (at least +1.808);
# benchmarks/README.md, "Learning over 20 seeds", has the held-out seeds' rule, their runs and the controls
LEARNING_THRESHOLD = 0.5
# a gain is not learning if the action format was lost for it: the trained model's sampled invalid-action rate may
# rise at most this much over the warm start's (real runs: at most +0.117; a run that loses its format climbs 0.06
# to 0.80 in 6 updates: benchmarks/README.md, "Lost action formats")
FORMAT_RISE = 0.3
TRAIN_TIMEOUT_S = float(os.environ.get("LEARNING_TRAIN_TIMEOUT_S", "1800"))  # longer on a busy machine


@dataclass(frozen=True)
class Recipe:
    """How one seed is trained and scored. `game` holds the game's own config fields as both training and scoring
    set them (the board); `training` the fields only the training sets (its optimiser, its penalty)."""

    updates: int
    group: int
    turns: int
    cap: int  # new-token cap of each stage
    lr: float
    game: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    boards: int = 16
    per_board: int = 2  # sampled episodes per board


RECIPES: dict[str, Recipe] = {
    # the learning test's: 8 x 6 cells (an apple in 30 % of the warm start's agent-episodes of 5 turns, 12 % at
    # 10 x 8), an invalid action at -0.3 in training, the rate held after its warm-up, the config's KL to the warm
    # start (beta 0.04); 32 held-out boards: with 16 the one-update control reached the sweep's 5th percentile.
    # 12 updates of groups of 4 (48 episodes, as 8 of 6 were): the template trains one board per update, and 8 boards
    # left some seeds with no board an apple is near enough to learn from (seeds 5003, 14002, 14003 did not learn
    # with 8 of 6 on an AMD EPYC; with 12 of 4 they did). benchmarks/README.md, "Learning over 20 seeds"
    "cleanup": Recipe(updates=12, group=4, turns=5, cap=40, lr=3e-4, game={"env_width": 8, "env_height": 6},
                      training={"lr_scheduler_type": "constant_with_warmup", "beta": 0.04,
                                "invalid_action_penalty": -0.3, "eval_episodes": 1}, boards=32),
    # Stag Hunt's template takes one optimiser step per update: 8 steps at 1e-3, its config's beta (0); a 5 x 5 grid
    # (hares within reach in 5 turns: at 7 x 7 the sampled gain after 8 updates was +0.01 on seed 100); 8 held-out
    # boards (its config plays at least 2 games per board, and its generation is the slower one)
    "staghunt": Recipe(updates=8, group=6, turns=5, cap=40, lr=1e-3, game={"grid_size": 5},
                       training={"lr_scheduler_type": "constant", "warmup_ratio": 0.0}, boards=8),
}
# The recorded 20-seed sweep (results/learning-sweep-8x6.jsonl) and the verdict's lr-0 arm (results/verdict-lr0.jsonl)
# ran Cleanup's earlier recipe, 8 updates of groups of 6: they keep it, so that they resume and pair as recorded
RECIPES_8X6: dict[str, Recipe] = {**RECIPES, "cleanup": replace(RECIPES["cleanup"], updates=8, group=6)}


@dataclass(frozen=True)
class SeedResult:
    game: str
    seed: int
    train: dict[str, list[float]]  # every train.logs metric per update
    scored: dict[str, tuple[dict[str, Any], ...]]  # mode -> held_out.py's results: warm start, trained
    cpu_s: dict[str, float]  # CPU seconds of the training and of the scoring, children included

    def gain_of(self, mode: str) -> float:
        """Held-out reward per agent-episode, trained minus warm start (the lr-0 control)."""
        warm, trained = self.scored[mode]
        return trained["reward"] - warm["reward"]

    @property
    def gain(self) -> float:
        """The sampled gain."""
        return self.gain_of("sampled")

    @property
    def statistic(self) -> float:
        """The statistic the learning test asserts: the sampled and the greedy gain summed."""
        return learning_statistic({mode: self.gain_of(mode) for mode in self.scored})

    @property
    def invalid_rise(self) -> float:
        """The trained model's sampled invalid-action rate minus the warm start's."""
        warm, trained = self.scored["sampled"]
        return trained["invalid_rate"] - warm["invalid_rate"]


def learning_statistic(gains: dict[str, float]) -> float:
    """The learning test's statistic from the gains by mode (both modes needed)."""
    return gains["sampled"] + gains["greedy"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def training_args(game: str, folder: Path, recipe: Recipe, *, model: str, game_seed: int, log_dir: Path,
                  lr: float | None = None, updates: int | None = None) -> list[str]:
    """The launch script's arguments for this recipe (or the config file written, for a config-file delivery)."""
    config_path = folder / "grpo_config.py"
    roles = game_roles(game, folder)
    updates = recipe.updates if updates is None else updates
    values = roles.to_fields({
        "model": model, "episodes_total": updates * recipe.group, "updates_total": updates,
        "group_generations": recipe.group, "episode_turns": recipe.turns, "thinking_cap": recipe.cap,
        "action_cap": recipe.cap, "random_seed": game_seed, "precision": False, "checkpointing": False,
        "eval_every": 1_000_000, "save_every": 0, "sample_every": 1_000_000, "log_folder": str(log_dir),
        "output_folder": str(log_dir / "outputs")})
    values.update({"learning_rate": recipe.lr if lr is None else lr, **recipe.game, **recipe.training})
    unknown = set(values) - set(read_config(config_path).kinds)
    if unknown:
        raise ValueError(f"{game}: the config has no field {', '.join(sorted(unknown))}")
    return deliver(roles, values, config_path)


def train(folder: Path, cli: list[str], log_dir: Path) -> dict[str, list[float]]:
    """One training run through the set's launch script, one process and one thread; every train.logs metric
    per update."""
    env = {**os.environ, "PYTHON": sys.executable, "CPU_PROCESSES": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "launch_training.sh", *cli], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=TRAIN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"training {log_dir.name} failed:\n{done.stderr[-3000:]}")
    log = min(log_dir.rglob("train.logs"), key=lambda p: len(p.parts))
    updates = [r for r in parse_log(log.read_text()) if r.kind == "train"]
    return {m: [float(r.values[m]) for r in updates if m in r.values]
            for m in sorted({k for r in updates for k, v in r.values.items() if isinstance(v, float)})}


def final_model(log_dir: Path) -> Path:
    """The run's final model: `final` below its output folder."""
    return min((p for p in (log_dir / "outputs").rglob("final") if p.is_dir()), key=lambda p: len(p.parts))


def score(game: str, folder: Path, models: list[str], recipe: Recipe,
          modes: tuple[str, ...] = ("sampled",)) -> dict[str, list[dict[str, Any]]]:
    """held_out.py's results on the held-out boards, mode -> one result per model (in one interpreter)."""
    spec = HeldOut(game, folder, models, HELD_OUT_SEED, boards=recipe.boards, per_board=recipe.per_board,
                   turns=recipe.turns, cap=recipe.cap, modes=modes, fields=recipe.game)
    found = spec.run()
    return {mode: [r for r in found if r["mode"] == mode] for mode in modes}


def measure(game: str, folder: Path, model: str, seed: int, work: Path, *, recipe: Recipe | None = None,
            modes: tuple[str, ...] = ("sampled",), warm: dict[str, dict[str, Any]] | None = None,
            lr: float | None = None, updates: int | None = None) -> SeedResult:
    """Train seed `seed` from `model` (the warm start) in `work`, then score the trained model and the warm start
    on the held-out boards; `warm` (mode -> result) is the warm start's score when already known."""
    [result] = measure_seeds(game, folder, model, [seed], work, recipe=recipe, modes=modes, warm=warm, lr=lr,
                             updates=updates)
    return result


def measure_seeds(game: str, folder: Path, model: str, seeds: Sequence[int], work: Path, *,
                  recipe: Recipe | None = None, modes: tuple[str, ...] = ("sampled",),
                  warm: dict[str, dict[str, Any]] | None = None, lr: float | None = None,
                  updates: int | None = None) -> list[SeedResult]:
    """`measure` of several seeds, each trained in turn, all scored in one interpreter beside the warm start."""
    recipe = recipe or RECIPES[game]
    runs = []
    cpu, started = {}, _children_cpu()
    for seed in seeds:
        log_dir = work / f"{game}-seed{seed}"
        cli = training_args(game, folder, recipe, model=model, game_seed=training_boards(seed, recipe)[0],
                            log_dir=log_dir, lr=lr, updates=updates)
        runs.append((seed, train(folder, cli, log_dir), log_dir))
    cpu["train"] = (_children_cpu() - started) / len(seeds)
    started = _children_cpu()
    scored = score(game, folder, ([] if warm else [model]) + [str(final_model(log_dir)) for _, _, log_dir in runs],
                   recipe, modes)
    cpu["score"] = (_children_cpu() - started) / len(seeds)
    warm = warm or {mode: found[0] for mode, found in scored.items()}
    trained = {mode: found[-len(seeds):] for mode, found in scored.items()}
    return [SeedResult(game, seed, series, {mode: (warm[mode], trained[mode][i]) for mode in scored}, dict(cpu))
            for i, (seed, series, _) in enumerate(runs)]


def training_boards(seed: int, recipe: Recipe) -> range:
    """The game seeds seed `seed` trains on (one per update), never a held-out board."""
    boards = range(seed * SEED_SPACING, seed * SEED_SPACING + recipe.updates)
    held_out = range(HELD_OUT_BASE + HELD_OUT_SEED, HELD_OUT_BASE + HELD_OUT_SEED + recipe.boards)
    if boards.start < held_out.stop and held_out.start < boards.stop:
        raise ValueError(f"seed {seed} would train on held-out boards {held_out.start}-{held_out.stop - 1}")
    return boards


def learning_test_runs(seed: int) -> tuple[int, int]:
    """The runs of the learning test's seed k: the sweep's seeds 2k and 2k + 1 (each its own training boards)."""
    return 2 * seed, 2 * seed + 1
