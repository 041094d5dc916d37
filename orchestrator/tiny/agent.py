"""A tiny agent that plays: the tiny Qwen3 model warm-started by a short supervised phase on synthetic turns.

A random tiny model never writes a parseable action, so no helper runs in a short check and GRPO sees
flat rewards. The tiny agent is trained on turns of the generated set's own game: observation text
(``observation_to_text``) -> the prompt builders' messages -> a brief thinking line -> one JSON helper
call ``{"action", "agent_id", "args"}`` (the brief's format), chosen by a noisy policy: a random action
helper with arguments drawn from the observation's coordinates and the prompts' words, kept when the
helper accepts them on a copy of the game (a ValueError or TypeError is the contract's refusal). It
writes parseable calls most of the time and plays badly, so GRPO has signal and every helper is called.

The folder is cached under ``models/`` by a key of what the agent must know (the game file, the action
helpers' names and parameters, the recipe), so fixes to helper bodies, prompts or train.py reuse it, and
rebuilt deterministically when missing. The generated code runs only in the builder's subprocess:
``python -m orchestrator.tiny.agent GENERATED OUT``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import errno
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from orchestrator.rules.probe.values import coordinate_matches, coordinate_pairs

from orchestrator.rules.exposed import exposed_callables

RECIPE_VERSION = 5  # 5: the game played and copied as the probe learns it; optimiser steps per synthetic turn
MODELS_ENV = "ORCHESTRATOR_MODELS_DIR"  # a shared cache for many project roots (tests)
MARKER_FILE = "tiny_agent.json"
BUILD_TIMEOUT_S = 1200.0
AGENT_BYTES = 4 << 20  # room a build needs: the agent takes about 0.6 MiB, its staging copy as much again
WORDS = re.compile(r"""["']([A-Za-z_][\w-]{0,20})["']|\b([A-Z]{1,8})\b""")
REFUSALS = (ValueError, TypeError, KeyError)
TAIL_TOKENS = 128
# the agent id is copied from far back in a ~600-token prompt, and that copy is only learnt on short contexts
# first: trained on whole prompts from the start, 600 steps named the right agent at chance (24/48 turns);
# after 400 steps on prompt tails, 48/48 on unseen turns of both example games
TAIL_ONLY_STEPS = 400
AGENT_ID_WEIGHT = 10.0  # the id is one token among many random choices: unweighted, it is rarely copied right
AGENT_ID = re.compile(r'(?:agent |"agent_id": )(\d+)')
# optimiser steps per synthetic turn: the same number of passes over the data whatever the game's size (700 steps
# for the 768 turns of 24 episodes x 8 turns x 2 agents; a game of 3 agents has 1,152 turns and needed its 1,050:
# at 700 its action stage wrote no valid call 60 % of the time, benchmarks/README.md), up to MOST_STEPS
STEPS_PER_TURN = 700 / 768
MOST_STEPS = 1600


TINY_AGENT = "tiny-agent"  # a model name meaning: the tiny agent built for the run's generated set


class TinyAgentError(RuntimeError):
    """The builder failed; the message ends with its output's tail."""


def models_dir(project_root: Path) -> Path:
    return Path(os.environ.get(MODELS_ENV) or Path(project_root) / "models")


def _helper_signatures(helpers_source: str) -> list[str]:
    """The callables helpers.py exposes (its action helpers and observation_to_text) with their parameter names,
    read without running the file."""
    try:
        tree = ast.parse(helpers_source)
    except SyntaxError:
        return [hashlib.sha1(helpers_source.encode()).hexdigest()]
    return sorted(f"{name}({', '.join(a.arg for a in helper.args.args + helper.args.kwonlyargs)})"
                  for name, helper in exposed_callables(tree).items())


def agent_key(generated: Path) -> str:
    """What the agent must know: the game, the action helpers' names and parameters, the recipe."""
    generated = Path(generated)
    parts = [f"recipe {RECIPE_VERSION}", (generated / "env_move.py").read_text(),
             *_helper_signatures((generated / "helpers.py").read_text())]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """Held while `out` is built: a second builder of the same agent (another run, a test session's background
    build) waits for the first instead of building it again. The kernel drops it if the holder dies."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _room_for(folder: Path) -> None:
    """OSError (ENOSPC) before a build that the disk holding `folder` has no room for, not after its minute of
    training: a full disk is the machine's to fix, never a reason to play with another model."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < AGENT_BYTES:
        raise OSError(errno.ENOSPC, f"No space left on device for the tiny agent ({free >> 10} KiB free, it takes "
                                    f"about {AGENT_BYTES >> 20} MiB)", str(folder))


def _machine_fault(output: str) -> OSError | None:
    """The builder's failure as the OSError it was, when it was the disk's (full, over quota, read-only)."""
    said = re.compile(r"No space left on device|Disk quota exceeded|Read-only file system|\[Errno (28|30|122)\]")
    line = next((line for line in reversed(output.splitlines()) if said.search(line)), "")
    if not line:
        return None
    code = (errno.EROFS if "Read-only" in line or "Errno 30" in line
            else errno.EDQUOT if "quota" in line or "Errno 122" in line else errno.ENOSPC)
    return OSError(code, f"building the tiny agent failed: {line.strip()}")


def local_tiny_agent(project_root: Path, generated: Path, *, timeout_s: float = BUILD_TIMEOUT_S) -> str:
    """The tiny agent for `generated`'s game and helpers, built (in a subprocess) on first use. A disk that cannot
    hold it raises OSError: the run stops `environment` instead of going on with another model."""
    out = models_dir(project_root) / f"tiny-agent-{agent_key(generated)}"
    if (out / MARKER_FILE).is_file():
        return str(out)
    _room_for(out.parent)
    with _build_lock(out):
        if (out / MARKER_FILE).is_file():  # built by the holder we waited for
            return str(out)
        # built aside and renamed: a build killed half-way never looks finished
        staging = out.with_name(f"{out.name}.building-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        try:
            done = subprocess.run([sys.executable, "-m", "orchestrator.tiny.agent", str(generated), str(staging)],
                                  capture_output=True, text=True, timeout=timeout_s, env=env,
                                  cwd=Path(__file__).resolve().parents[2])
        except subprocess.TimeoutExpired as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise TinyAgentError(f"building the tiny agent took over {timeout_s:.0f} s") from exc
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            fault = _machine_fault(done.stderr or done.stdout)
            if fault is not None:
                raise fault
            raise TinyAgentError(f"building the tiny agent failed (exit {done.returncode}): "
                                 f"{(done.stderr or done.stdout)[-1500:]}")
        shutil.rmtree(out, ignore_errors=True)  # a folder without its marker is no finished agent
        staging.rename(out)
    return str(out)


def playing_model(project_root: Path, generated: Path) -> tuple[str, bool, str]:
    """(model folder, plays, note): the tiny agent; the random tiny model, with the reason, when the generated code
    cannot train it (the runtime check still runs; only its check that actions parse is off). A disk that cannot
    hold it raises OSError (`local_tiny_agent`)."""
    from orchestrator.tiny.model import local_tiny_model

    try:
        return local_tiny_agent(project_root, generated), True, ""
    except TinyAgentError as exc:
        return local_tiny_model(project_root), False, f"{exc}; using the random tiny model instead"


# ---------------------------------------------------------------- the builder's child (generated code runs here)


@dataclass(frozen=True)
class Turn:
    messages: list[dict[str, str]]
    completion: str


def _agent_ids(game: Any, observe: Any, play: Any = None, most: int = 8) -> list[int]:
    """The agents: those the game's setter accepts (the probe's learned play), else 0, 1, ... for as long as
    observation_to_text accepts the id (a game refuses an unknown agent)."""
    if play is not None and 0 < len(play.agents) < most:
        return list(play.agents)
    ids = []
    for agent_id in range(most):
        try:
            observe(game, agent_id)
        except Exception:
            break
        ids.append(agent_id)
    return ids if 0 < len(ids) < most else [0, 1]


def _game_play(env_move: Any) -> Any:
    """How the game is played and copied, as the contract probe learns it (a setter, a step method, a seeded
    reset where the game plays only after one, a way of copying verified on this game); None when the probe
    cannot learn it."""
    from orchestrator.rules.probe.game import choose, default_recipe, learn_play

    recipe = default_recipe(env_move)
    play = learn_play(recipe.cls, recipe) if recipe is not None else None
    if play is not None:
        choose(play)
    return play


def _fresh_game(play: Any, seed: int) -> Any:
    """A new game for this seed: the probe's start with every seed it sets (its constructor's, its reset's)
    replaced by `seed`."""
    from orchestrator.rules.probe.replicas import Call, Recipe

    start = play.start
    reseed = lambda kwargs: {k: seed if "seed" in k.lower() else v for k, v in kwargs.items()}
    return Recipe(start.cls, reseed(start.kwargs), tuple(Call(c.method, c.args, reseed(c.kwargs))
                                                          for c in start.calls)).build()


def _advance(play: Any, game: Any) -> bool:
    """Play the turn the helpers chose (the game's step method); False when the episode is over or the game
    cannot be stepped."""
    if play.stepper is None:
        return False
    result, error = play.step(game)
    if error is not None:
        return False
    ended = result[2] if isinstance(result, tuple) and len(result) >= 3 else None
    for flag in ("done", "finished", "over", "is_done"):
        value = getattr(game, flag, None)
        ended = ended if not isinstance(value, bool) else ended or value
    return ended is not True


def _required_params(function: Any) -> list[Any]:
    import inspect

    return [p for p in list(inspect.signature(function).parameters.values())[2:]
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _coordinates(observation: str) -> list[list[int | float]]:
    """The observation's coordinate pairs, each number as written: an int where the text has no fraction."""
    return [[int(v) if v.is_integer() and "." not in m.group(0) else v for v in pair]
            for m, pair in zip(coordinate_matches(observation), coordinate_pairs(observation))]


def _sample_args(function: Any, observation: str, words: list[str], rng: random.Random) -> dict[str, Any]:
    params = _required_params(function)
    pairs = _coordinates(observation) or [[0, 0]]
    numbers = list(rng.choice(pairs))
    args = {}
    for p in params:
        annotation = str(p.annotation).lower()
        if "int" in annotation or "float" in annotation:
            number = numbers.pop(0) if numbers else rng.randint(0, 4)
            args[p.name] = int(round(number)) if "int" in annotation else number
        elif "bool" in annotation:
            args[p.name] = rng.random() < 0.5
        else:
            args[p.name] = rng.choice(words) if words else 0
    return args


def _noisy_call(game: Any, agent_id: int, observation: str, table: dict[str, Any], words: list[str],
                rng: random.Random, replica: Callable[[Any], Any] = copy.deepcopy) -> tuple[str, dict[str, Any]]:
    """A random helper call the helper accepts on a copy of the game (its refusals are ValueError/TypeError/
    KeyError; any other exception is the helper's own bug, and the call is kept so the agent makes it)."""
    names = sorted(table)
    for _ in range(12):
        name = rng.choice(names)
        args = _sample_args(table[name], observation, words, rng)
        try:
            table[name](replica(game), agent_id, **args)
        except REFUSALS:
            continue
        except Exception:  # the helper's bug: a call the agent should still make
            pass
        return name, args
    name = min(names, key=lambda n: len(_required_params(table[n])))
    return name, {}


def _thinking(observation: str, agent_id: int, name: str, args: dict[str, Any]) -> str:
    """Names the agent, the helper and its arguments: the action stage copies them from here."""
    where = coordinate_matches(observation)
    spelled = ", ".join(f"{k}={v}" for k, v in args.items())
    return f"I am agent {agent_id}{f' at {where[0].group(0)}' if where else ''}. Plan: {name}({spelled})."


def synthetic_turns(generated: Path, *, episodes: int, turns: int, seed: int) -> list[Turn]:
    """Turns of the noisy policy on the generated set's own game, through its own prompt builders."""
    sys.path.insert(0, str(generated))
    for stale in ("env_move", "grpo_config", "helpers", "prompt_template"):
        sys.modules.pop(stale, None)  # another folder's modules of the same names
    import env_move  # the generated folder's, resolved through sys.path
    import helpers
    import prompt_template
    from orchestrator.rules.exposed import OBSERVATION_HELPER, action_helpers

    table = action_helpers(helpers)
    observe = getattr(helpers, OBSERVATION_HELPER)
    play = _game_play(env_move)
    if play is None:
        raise TinyAgentError("the game's setter could not be learned (no method takes an agent id and an action)")
    # a game that only its recipe reproduces is tried on its start: acceptance of a call rarely needs the turn
    replica = (lambda game: play.copier.copy(game, play.start)) if play.copier is not None else copy.deepcopy
    rng = random.Random(seed)
    rendered = ""
    samples: list[Turn] = []
    for episode in range(episodes):
        game = _fresh_game(play, seed * 100_003 + episode)
        for _ in range(turns):
            for agent_id in _agent_ids(game, observe, play):
                observation = observe(game, agent_id)
                thinking_messages = prompt_template.create_thinking_prompt(observation, agent_id)
                if not rendered:
                    rendered = "\n".join(m["content"] for m in thinking_messages)
                words = sorted({a or b for a, b in WORDS.findall(rendered + "\n" + observation)})
                name, args = _noisy_call(game, agent_id, observation, table, words, rng, replica)
                thinking = _thinking(observation, agent_id, name, args)
                action = json.dumps({"action": name, "agent_id": agent_id, "args": args})
                samples.append(Turn(thinking_messages, thinking))
                samples.append(Turn(prompt_template.create_single_stage_prompt(observation, thinking, agent_id),
                                    action))
                try:
                    table[name](game, agent_id, **args)
                except Exception:  # the synthetic game goes on; the agent still learned the call
                    pass
            if not _advance(play, game):
                break
    return samples


def train_agent(out_dir: Path, samples: list[Turn], *, seed: int, steps: int, batch: int = 8,
                lr: float = 5e-3, vocab_size: int = 1024) -> dict[str, float]:
    """A tiny Qwen3 and a tokenizer trained on the samples' text; loss on the completions only."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchestrator.tiny.model import build_tiny_model

    corpus = [m["content"] for s in samples[:200] for m in s.messages] + [s.completion for s in samples]
    build_tiny_model(out_dir, seed=seed, corpus=corpus, vocab_size=vocab_size)
    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir)
    rows = []
    for s in samples:
        prompt = tok.apply_chat_template(s.messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        completion = tok(s.completion + tok.eos_token, add_special_tokens=False, return_offsets_mapping=True)
        spans = [m.span(1) for m in AGENT_ID.finditer(s.completion)]
        weights = [AGENT_ID_WEIGHT if any(a < end and start < b for a, b in spans) else 1.0
                   for start, end in completion["offset_mapping"]]
        rows.append((prompt_ids + completion["input_ids"], len(prompt_ids), weights))
    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / 20) * max(0.05, 1 - step / steps))
    model.train()
    first = last = float("nan")
    for step in range(steps):
        # most steps see only the prompt's tail (the format and the id's copy are learnt there, at a fraction of
        # the cost); after the tail-only phase, every fourth sees whole prompts, as the agent will
        whole = step >= TAIL_ONLY_STEPS and step % 4 == 0
        chosen = [rows[rng.randrange(len(rows))] for _ in range(batch if whole else 2 * batch)]
        if not whole:
            chosen = [(ids[max(0, start - TAIL_TOKENS):], min(start, TAIL_TOKENS), w) for ids, start, w in chosen]
        width = max(len(ids) for ids, _, _ in chosen)
        input_ids = torch.full((len(chosen), width), tok.pad_token_id)
        weight = torch.zeros((len(chosen), width))
        mask = torch.zeros((len(chosen), width), dtype=torch.long)
        for i, (ids, prompt_len, w) in enumerate(chosen):
            input_ids[i, :len(ids)] = torch.tensor(ids)
            weight[i, prompt_len:len(ids)] = torch.tensor(w)
            mask[i, :len(ids)] = 1
        # the vocabulary projection only where the loss looks (the completions): most positions are prompt
        hidden = model.get_decoder()(input_ids=input_ids, attention_mask=mask).last_hidden_state[:, :-1]
        scored = weight[:, 1:] > 0
        logits = model.get_output_embeddings()(hidden[scored]).float()
        token_loss = torch.nn.functional.cross_entropy(logits, input_ids[:, 1:][scored], reduction="none")
        loss = (token_loss * weight[:, 1:][scored]).sum() / weight[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        first = loss.item() if step == 0 else first
        last = loss.item()
    model.save_pretrained(out_dir)
    return {"first_loss": first, "last_loss": last}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the tiny agent for a generated folder into OUT.")
    parser.add_argument("generated", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--steps", type=int, help="default: STEPS_PER_TURN per synthetic turn, at most MOST_STEPS")
    args = parser.parse_args(argv)
    started = time.monotonic()
    samples = synthetic_turns(args.generated.resolve(), episodes=args.episodes, turns=args.turns, seed=args.seed)
    steps = args.steps or min(MOST_STEPS, round(STEPS_PER_TURN * len(samples)))
    losses = train_agent(args.out, samples, seed=args.seed, steps=steps)
    marker = {"recipe": RECIPE_VERSION, "seed": args.seed, "samples": len(samples), "steps": steps,
              **losses, "seconds": round(time.monotonic() - started, 1)}
    (args.out / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
    print(json.dumps(marker))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
