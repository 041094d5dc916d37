"""What a policy does on boards a run never trained on: the example's own train.py plays them and we count.

    python benchmarks/held_out.py GAME FOLDER MODEL [MODEL ...] --seed S [--boards 16] [--per-board 2]
                                  [--turns 5] [--cap 40] [--modes sampled greedy] [--agents N]
                                  [--field NAME=JSON ...]

GAME is cleanup or staghunt; FOLDER a generated set of that game (its source of truth plus train.py and the
other generated files); each MODEL a folder from_pretrained can load (a run's checkpoints, the warm start),
all played on the same boards. Board i is game seed `10_000_000 + S + i`, the Cleanup template's own
evaluation seeds. A run of seed S trains on boards S, S + 1, ... (one per update, both templates), far below
them; with seeds spaced apart (S = k * SEED_SPACING for seed k, in `learning_bench.py`) no run trains on
another's boards or on any held-out board. Each mode plays every model on the boards: `sampled` plays each board
`--per-board` times at the config's temperature, `greedy` once at temperature 0 (GREEDY_TEMPERATURE where the
config refuses 0, as Stag Hunt's does: the most likely token but for near-ties).
`--field` sets any other config field as the run trained with it (e.g. `env_width=8`: the same game size).

Prints one JSON object per mode and model (modes outermost), a line each, with its `mode`, every count per
agent-episode: `reward` (the training return:
game reward plus the invalid-action penalties), `invalid_rate`, `helpers` (each helper's share of the valid
actions), and the game's behaviour. Cleanup: `apples` eaten, river `cleaned` cells, `dirt_end` (the river's
dirty fraction when the episode ends). Stag Hunt: `stags` (stags caught; both hunters of a catch count it),
`hares`, `lone_stag` (attacks on a stag alone, which fail).

It runs in its own interpreter: each example's train.py, helpers and env_move share their module names. It
counts by wrapping three names of the reference train.py (`HELPERS`, and `make_env` or `make_game`), which
both examples' reference sets define.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.sources.config_file import read_config# noqa: E402
from orchestrator.demo import example, recorded_roles  # noqa: E402
from orchestrator.sources.roles import ConfigRoles, parses_command_line, validate_roles  # noqa: E402

HELD_OUT_BASE = 10_000_000  # the Cleanup template's evaluation seeds start here
SEED_SPACING = 10_000  # runs of seed k train on game seeds k * SEED_SPACING + update: no two share a board
EVALUATION_TIMEOUT_S = 1800.0
MODES = ("sampled", "greedy")
GREEDY_TEMPERATURE = 1e-3  # where the config refuses 0
STAG_EVENT = re.compile(r"hunters? ([\d, ]+) (caught the stag|attacked the stag|caught the hare)")
STAG_COUNTS = {"caught the stag": "stags", "attacked the stag": "lone_stag", "caught the hare": "hares"}


def held_out_boards(seed: int, boards: int) -> list[int]:
    return [HELD_OUT_BASE + seed + i for i in range(boards)]


def count_helpers(train: Any, counts: collections.Counter) -> None:
    """Count each helper call that returned (a valid action), as `helper:NAME`."""
    def counted(name: str, helper: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            done = helper(*args, **kwargs)
            counts[f"helper:{name}"] += 1
            return done
        return call

    for name, helper in list(train.HELPERS.items()):
        train.HELPERS[name] = counted(name, helper)


def count_cleanup(train: Any, counts: collections.Counter) -> None:
    """Apples eaten, river cells cleaned, and the dirt fraction summed over the episodes' last steps."""
    make_env = train.make_env

    def counting_env(config: Any) -> Any:
        env = make_env(config)
        step = env.step

        def counted_step(*args: Any, **kwargs: Any):
            result = step(*args, **kwargs)
            info = result[3]
            counts["apples"] += sum(info["apples_collected"].values())
            counts["cleaned"] += sum(info["cells_cleaned"].values())
            if result[2]:
                # once per agent, so that per agent-episode it is the mean over episodes
                counts["dirt_end"] += info["dirt_fraction"] * env.num_agents
            return result

        env.step = counted_step
        return env

    train.make_env = counting_env


def count_staghunt(train: Any, counts: collections.Counter) -> None:
    """Hunter shares of stag catches, hare catches and lone stag attacks, from the game's events."""
    make_game = train.make_game

    def counting_game(config: Any, seed: int) -> Any:
        game = make_game(config, seed)
        advance = game.advance

        def counted_advance():
            result = advance()
            for event in result.events:
                if match := STAG_EVENT.match(event):
                    counts[STAG_COUNTS[match.group(2)]] += len(match.group(1).split(","))
            return result

        game.advance = counted_advance
        return game

    train.make_game = counting_game


def play_cleanup(train: Any, config: Any, model: Any, tokenizer: Any, boards: list[int],
                 per_board: int) -> tuple[list[list[float]], int, int]:
    """(returns per episode and agent, actions, invalid actions): all episodes batched together."""
    seeds = [board for board in boards for _ in range(per_board)]
    rollout = train.play_episodes(train.make_engine(model, tokenizer, config), tokenizer, config, seeds)
    return rollout.returns, rollout.num_actions, rollout.num_invalid


def play_staghunt(train: Any, config: Any, model: Any, tokenizer: Any, boards: list[int],
                  per_board: int) -> tuple[list[list[float]], int, int]:
    """The same, one group of `per_board` games (the config's group size) per board."""
    prompts = train.HunterPrompts(tokenizer)
    rollouts = [train.play_group(model, tokenizer, prompts, config, board, False) for board in boards]
    return ([r for rollout in rollouts for r in rollout.returns], sum(r.num_actions for r in rollouts),
            sum(r.num_invalid for r in rollouts))


def game_roles(game: str, folder: Path) -> ConfigRoles:
    """The example's roles mapping (its config's field names for the generic roles), checked on its config."""
    config_path = folder / "grpo_config.py"
    return validate_roles(recorded_roles(example(game)), read_config(config_path).kinds,
                          cli_possible=parses_command_line((folder / "grpo_template.py").read_text(),
                                                           config_path.read_text()))


# game -> (what it counts besides helpers, how the counts are installed, how a model plays the boards)
GAMES = {"cleanup": (("apples", "cleaned", "dirt_end"), count_cleanup, play_cleanup),
         "staghunt": (("stags", "hares", "lone_stag"), count_staghunt, play_staghunt)}


@dataclasses.dataclass
class HeldOut:
    game: str
    folder: Path
    models: list[str]
    seed: int
    boards: int = 16
    per_board: int = 2
    turns: int = 5
    cap: int = 40
    modes: tuple[str, ...] = ("sampled",)
    agents: int | None = None  # None: the config's
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)  # other config fields the run trained with

    def command(self) -> list[str]:
        """This evaluation as a command line of this script."""
        return [sys.executable, str(Path(__file__).resolve()), self.game, str(self.folder), *self.models,
                "--seed", str(self.seed), "--boards", str(self.boards), "--per-board", str(self.per_board),
                "--turns", str(self.turns), "--cap", str(self.cap), "--modes", *self.modes,
                *(["--agents", str(self.agents)] if self.agents else []),
                *[arg for name, value in self.fields.items() for arg in ("--field", f"{name}={json.dumps(value)}")]]

    def run(self) -> list[dict[str, Any]]:
        """This evaluation in a fresh interpreter: one result per mode and model, modes outermost."""
        done = subprocess.run(self.command(), capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                              timeout=EVALUATION_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"held-out evaluation of {self.game} failed:\n{done.stderr[-3000:]}")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def evaluate(spec: HeldOut) -> Iterator[dict[str, Any]]:
    """Play the held-out boards in this interpreter (its sys.path then holds the game's folder), model by model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(spec.folder))
    train = importlib.import_module("train")
    behaviour, install, play = GAMES[spec.game]
    counts: collections.Counter = collections.Counter()
    count_helpers(train, counts)
    install(train, counts)
    roles = game_roles(spec.game, spec.folder)
    for mode in spec.modes:
        per_board = spec.per_board if mode == "sampled" else 1
        for name in spec.models:
            config = mode_config(train.GRPOConfig, roles, spec, name, mode, per_board)
            torch.manual_seed(spec.seed)  # every model samples from the same generator state
            counts.clear()
            tokenizer = AutoTokenizer.from_pretrained(name)
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).eval()
            with torch.no_grad():
                returns, actions, invalid = play(train, config, model, tokenizer,
                                                 held_out_boards(spec.seed, spec.boards), per_board)
            yield {"mode": mode, **results(train, counts, behaviour, name, returns, actions, invalid)}


def mode_config(config_class: type, roles: ConfigRoles, spec: HeldOut, name: str, mode: str, per_board: int) -> Any:
    """The config a model plays the boards with: the run's settings by role (groups of at least 2, as every GRPO
    config asks; only Stag Hunt plays them), the spec's fields, and for `greedy` temperature 0 (both examples'
    sampling field), or GREEDY_TEMPERATURE where the config refuses 0."""
    values = roles.to_fields({"model": name, "episode_turns": spec.turns, "thinking_cap": spec.cap,
                              "action_cap": spec.cap, "group_generations": max(per_board, 2),
                              **({"agent_count": spec.agents} if spec.agents else {})})
    values.update(spec.fields)
    if mode == "sampled":
        return config_class(**values)
    try:
        return config_class(**{**values, "temperature": 0.0})
    except ValueError:
        return config_class(**{**values, "temperature": GREEDY_TEMPERATURE})


def results(train: Any, counts: collections.Counter, behaviour: tuple[str, ...], name: str,
            returns: list[list[float]], actions: int, invalid: int) -> dict[str, Any]:
    """What one model did on the boards, per agent-episode."""
    agent_episodes = sum(len(r) for r in returns)
    calls = sum(counts[f"helper:{h}"] for h in train.HELPERS)
    return {"model": name, "reward": sum(map(sum, returns)) / agent_episodes, "invalid_rate": invalid / max(actions, 1),
            **{key: counts[key] / agent_episodes for key in behaviour},
            "helpers": {h: counts[f"helper:{h}"] / max(calls, 1) for h in sorted(train.HELPERS)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("game", choices=sorted(GAMES))
    parser.add_argument("folder", type=Path)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--seed", type=int, required=True, help="the run's seed: boards 10_000_000 + seed + i")
    parser.add_argument("--boards", type=int, default=16)
    parser.add_argument("--per-board", type=int, default=2, help="episodes per board")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--cap", type=int, default=40, help="new-token cap of each generation stage")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["sampled"])
    parser.add_argument("--agents", type=int, default=None, help="agents per game (default: the config's)")
    parser.add_argument("--field", action="append", default=[], metavar="NAME=JSON",
                        help="another config field, as the run set it (e.g. env_width=8); repeatable")
    args = parser.parse_args()
    fields = {name: json.loads(value) for name, _, value in (f.partition("=") for f in args.field)}
    spec = HeldOut(args.game, args.folder.resolve(), args.models, args.seed, args.boards, args.per_board, args.turns,
                   args.cap, tuple(args.modes), args.agents, fields)
    for result in evaluate(spec):
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
