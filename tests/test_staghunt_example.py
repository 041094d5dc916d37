"""The second example triple (examples/staghunt/): the Stag Hunt game, its reference generated set,
and its reference train.py launched as its launcher writes it (its whole formal run, logs and samples
included, is the Stag Hunt demo's: tests/test_iteration.py).

The example's modules share their names with the Cleanup example's (env_move, helpers, train, ...),
so they are imported under a private sys.modules swap (see `staghunt`) and never left behind.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "staghunt"
SOT = EXAMPLE / "source_of_truth"
GENERATED = EXAMPLE / "reference_generated"
GENERIC = "# === GENERIC — DO NOT MODIFY ==="
CUSTOMIZE = "# === CUSTOMIZE ==="
MODULE_NAMES = ("env_move", "grpo_config", "helpers", "prompt_template", "train")


def _import_isolated(names: tuple[str, ...]) -> SimpleNamespace:
    """Import `names` from the example's folders without touching other tests' modules of the same name."""
    saved = {name: sys.modules.pop(name) for name in MODULE_NAMES if name in sys.modules}
    saved_path = list(sys.path)
    sys.path[:0] = [str(SOT), str(GENERATED)]
    try:
        return SimpleNamespace(**{name: importlib.import_module(name) for name in names})
    finally:
        for name in MODULE_NAMES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        sys.path[:] = saved_path


@pytest.fixture(scope="module")
def staghunt() -> SimpleNamespace:
    """env_move, grpo_config, helpers and prompt_template of the example (no torch)."""
    return _import_isolated(("env_move", "grpo_config", "helpers", "prompt_template"))


@pytest.fixture(scope="module")
def train_module() -> SimpleNamespace:
    """The reference train.py (imports torch, transformers and accelerate) with its siblings."""
    return _import_isolated(MODULE_NAMES)


def game_at(env_move, hunters, stags=(), hares=(), **kwargs):
    """A game whose pieces stand where the test says (through snapshot/restore)."""
    kwargs.setdefault("num_hunters", len(hunters))
    game = env_move.StagHuntGame(num_stags=len(stags), num_hares=len(hares), **kwargs)
    snap = game.snapshot()
    snap.update(hunters=[list(p) for p in hunters], stags=[list(p) for p in stags], hares=[list(p) for p in hares])
    game.restore(snap)
    return game


# ---------------------------------------------------------------- game rules
def test_a_stag_is_caught_when_two_hunters_next_to_it_hunt_in_the_same_turn(staghunt):
    game = game_at(staghunt.env_move, hunters=[(3, 2), (3, 4)], stags=[(3, 3)], hares=[(0, 0)])
    game.declare(0, "HUNT")
    game.declare(1, "hunt ")  # case-insensitive, stripped
    result = game.advance()
    assert result.rewards == [5.0, 5.0]
    assert any("caught the stag at (3, 3)" in e for e in result.events)
    stag = game.observe(0)["stags"][0]
    assert all(abs(stag[0] - h[0]) + abs(stag[1] - h[1]) >= 2 for h in game.observe(0)["hunters"])
    assert game.scores == [5.0, 5.0] and game.turn == 1


def test_a_lone_hunt_on_a_stag_fails_costs_a_penalty_and_the_stag_flees(staghunt):
    game = game_at(staghunt.env_move, hunters=[(3, 2), (3, 4)], stags=[(3, 3)], hares=[(0, 0)])
    game.declare(0, "HUNT")  # hunter 1 declares nothing: it WAITs
    result = game.advance()
    assert result.rewards == [-0.5, 0.0]
    assert any("alone" in e and "fled" in e for e in result.events)
    assert game.observe(0)["stags"][0] != (3, 3)


def test_hunts_in_consecutive_turns_do_not_add_up(staghunt):
    game = game_at(staghunt.env_move, hunters=[(3, 2), (3, 4)], stags=[(3, 3)], hares=[(0, 0)], stag_move_prob=0.0)
    game.declare(0, "HUNT")
    first = game.advance()
    game.declare(1, "HUNT")
    second = game.advance()
    assert first.rewards == [-0.5, 0.0] and second.rewards[1] <= 0.0  # the stag had already fled


def test_a_hare_is_caught_by_one_hunter_and_shared_by_two(staghunt):
    game = game_at(staghunt.env_move, hunters=[(5, 5), (0, 6)], stags=[(0, 0)], hares=[(5, 6)])
    game.declare(0, "HUNT")
    assert game.advance().rewards == [1.0, 0.0]
    assert game.observe(0)["hares"][0] != (5, 6)  # respawned away from the hunters

    shared = game_at(staghunt.env_move, hunters=[(5, 5), (4, 6)], stags=[(0, 0)], hares=[(5, 6)])
    shared.declare(0, "HUNT")
    shared.declare(1, "HUNT")
    assert shared.advance().rewards == [0.5, 0.5]


def test_a_hunt_next_to_a_stag_and_a_hare_attacks_the_stag(staghunt):
    game = game_at(staghunt.env_move, hunters=[(3, 3), (6, 6)], stags=[(3, 4)], hares=[(3, 2)])
    game.declare(0, "HUNT")
    result = game.advance()
    assert result.rewards == [-0.5, 0.0] and game.observe(0)["hares"] == [(3, 2)]


def test_moves_are_blocked_by_walls_and_animals_but_hunters_may_share_a_cell(staghunt):
    game = game_at(staghunt.env_move, hunters=[(0, 0), (1, 1), (1, 0)], stags=[(2, 1)], hares=[(6, 6)],
                   stag_move_prob=0.0)
    game.declare(0, "N")  # wall
    game.declare(1, "S")  # into the stag
    game.declare(2, "N")  # onto hunter 0's cell
    result = game.advance()
    assert game.observe(0)["hunters"] == [(0, 0), (1, 1), (0, 0)]
    assert len(result.events) == 2 and "*" in game.render()
    game.declare(1, "e")
    game.advance()
    assert game.observe(1)["position"] == (1, 2)


def test_the_game_finishes_at_the_horizon(staghunt):
    game = staghunt.env_move.StagHuntGame(horizon=2, seed=3)
    assert not game.advance().finished
    last = game.advance()
    assert last.finished and game.finished and game.observe(0)["turns_left"] == 0
    with pytest.raises(ValueError, match="finished"):
        game.advance()


def _play_random(env_move, seed: int, turns: int = 12) -> list:
    import random

    game = env_move.StagHuntGame(seed=seed, num_hunters=3)
    moves = random.Random(99)
    trace = [game.render()]
    for _ in range(turns):
        for h in range(game.num_hunters):
            game.declare(h, moves.choice(env_move.MOVES))
        result = game.advance()
        trace.append((result.rewards, result.events, game.render()))
    return trace


def test_same_seed_same_moves_same_game_and_snapshot_restore_replays(staghunt):
    env_move = staghunt.env_move
    assert _play_random(env_move, 5) == _play_random(env_move, 5)
    assert _play_random(env_move, 5) != _play_random(env_move, 6)
    game = env_move.StagHuntGame(seed=1)
    for _ in range(3):
        game.declare(0, "S")
        game.advance()
    snap = json.loads(json.dumps(game.snapshot()))  # JSON-serialisable
    later = []
    for replay in range(2):
        if replay:
            game.restore(snap)
        for _ in range(10):
            game.declare(0, "HUNT")
            game.declare(1, "W")
            later.append((game.advance().rewards, game.render()))
    assert later[:10] == later[10:]


@pytest.mark.parametrize("make", [
    lambda m: m.StagHuntGame(grid_size=2),
    lambda m: m.StagHuntGame(num_hunters=5),
    lambda m: m.StagHuntGame(horizon=0),
    lambda m: m.StagHuntGame(num_hunters=True),
    lambda m: m.StagHuntGame(grid_size=4, num_hunters=4, num_hares=6),
    lambda m: m.StagHuntGame(stag_move_prob=1.5),
    lambda m: m.StagHuntGame().declare(2, "N"),
    lambda m: m.StagHuntGame().declare(0, "JUMP"),
    lambda m: m.StagHuntGame().declare(0, 3),
    lambda m: m.StagHuntGame().observe(-1),
    lambda m: m.StagHuntGame(num_hunters=3).restore(m.StagHuntGame().snapshot()),
])
def test_bad_input_is_a_one_line_value_error(staghunt, make):
    with pytest.raises(ValueError) as info:
        make(staghunt.env_move)
    assert str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- the dilemma, from scripted policies
def _bfs_step(env_move, obs, goals) -> str:
    start, size = tuple(obs["position"]), obs["grid_size"]
    if start in goals:
        return "WAIT"
    blocked = set(obs["hares"]) | set(obs["stags"])
    first = {start: "WAIT"}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for name, (dr, dc) in env_move.DELTAS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in blocked and nxt not in first:
                first[nxt] = name if cell == start else first[cell]
                if nxt in goals:
                    return first[nxt]
                queue.append(nxt)
    return "WAIT"


def _next_to(cell, animals) -> bool:
    return any(abs(cell[0] - a[0]) + abs(cell[1] - a[1]) == 1 for a in animals)


def hare_policy(env_move, obs) -> str:
    """Hunt the nearest hare alone, never from a cell next to a stag."""
    here, size = obs["position"], obs["grid_size"]
    if _next_to(here, obs["hares"]) and not _next_to(here, obs["stags"]):
        return "HUNT"
    goals = {n for hare in obs["hares"] for n in env_move.neighbours(hare, size) if not _next_to(n, obs["stags"])}
    return _bfs_step(env_move, obs, goals)


def stag_policy(env_move, obs, wait_for_partner: bool) -> str:
    """Go next to the nearest stag; HUNT there (at once, or once another hunter is next to it too)."""
    here = obs["position"]
    stag = min(obs["stags"], key=lambda s: env_move.manhattan(here, s))
    if env_move.manhattan(here, stag) == 1:
        partners = [p for h, p in enumerate(obs["hunters"]) if h != obs["hunter"] and env_move.manhattan(p, stag) == 1]
        return "HUNT" if partners or not wait_for_partner else "WAIT"
    return _bfs_step(env_move, obs, set(env_move.neighbours(stag, obs["grid_size"])))


def mean_returns(env_move, policies, seeds=range(30)) -> list[float]:
    totals = []
    for seed in seeds:
        game = env_move.StagHuntGame(seed=seed)  # the default game: 7x7, 2 hunters, horizon 30
        while not game.finished:
            for h, policy in enumerate(policies):
                game.declare(h, policy(env_move, game.observe(h)))
            game.advance()
        totals.append(game.scores)
    return [round(statistics.mean(t[h] for t in totals), 2) for h in range(len(policies))]


def test_the_default_game_is_a_stag_hunt_dilemma(staghunt):
    m = staghunt.env_move
    coordinated = lambda env_move, obs: stag_policy(env_move, obs, wait_for_partner=True)  # noqa: E731
    reckless = lambda env_move, obs: stag_policy(env_move, obs, wait_for_partner=False)  # noqa: E731
    both_stag = mean_returns(m, [coordinated, coordinated])
    both_hare = mean_returns(m, [hare_policy, hare_policy])
    lone_stag, hare_partner = mean_returns(m, [reckless, hare_policy])
    patient_lone_stag, _ = mean_returns(m, [coordinated, hare_policy])
    # measured (seeds 0-29): both stag 24.33 each; both hare 4.35 / 4.15; a lone stag hunter -2.70 while its
    # hare-chasing partner gets 6.83; a lone stag hunter who waits for a partner that never comes -0.18
    assert min(both_stag) > 3 * max(both_hare)  # coordinating on the stag pays clearly more ...
    assert lone_stag < 0 < min(both_hare) and lone_stag < hare_partner  # ... but going for it alone pays less
    assert patient_lone_stag < min(both_hare)


# ---------------------------------------------------------------- helpers
def helper_functions(helpers) -> dict:
    return {name: fn for name, fn in vars(helpers).items()
            if inspect.isfunction(fn) and fn.__module__ == helpers.__name__ and not name.startswith("_")
            and name != "observation_to_text"}


def sample_args(name: str, game, hunter: int) -> list[dict]:
    if name == "move":
        return [{"direction": d} for d in ("N", "S", "E", "W")]
    if name == "move_to":
        taken = set(game.observe(hunter)["hares"]) | set(game.observe(hunter)["stags"])
        return [{"row": r, "col": c} for r, c in ((0, 0), (3, 3), (6, 6), (2, 5)) if (r, c) not in taken]
    return [{}]


def test_every_helper_takes_env_and_agent_id_first_and_returns_bool_after_queuing_a_legal_move(staghunt):
    helpers, env_move = staghunt.helpers, staghunt.env_move
    found = helper_functions(helpers)
    assert {"move_to", "approach_stag", "chase_nearest_hare", "hunt", "wait", "move"} <= set(found)
    for name, fn in found.items():
        params = list(inspect.signature(fn).parameters)
        assert params[:2] == ["env", "agent_id"], name
    for seed in range(6):
        game = env_move.StagHuntGame(seed=seed, num_hunters=3)
        for _ in range(seed):  # a few random-ish turns first
            game.declare(seed % 3, "HUNT")
            game.advance()
        for name, fn in found.items():
            for hunter in range(game.num_hunters):
                for args in sample_args(name, game, hunter):
                    before = game.snapshot()
                    result = fn(game, hunter, **args)
                    assert isinstance(result, bool), (name, args)
                    assert game.pending_move(hunter) in env_move.MOVES, (name, args)
                    game.restore(before)


def test_helpers_reach_their_targets(staghunt):
    helpers, env_move = staghunt.helpers, staghunt.env_move
    game = game_at(env_move, hunters=[(0, 0), (6, 6)], stags=[(3, 3)], hares=[(6, 0)], stag_move_prob=0.0)
    done = [False, False]
    for _ in range(8):
        done = [helpers.approach_stag(game, h) for h in range(2)]
        if all(done):
            break
        game.advance()
    assert all(done)
    game.advance()
    assert all(env_move.manhattan(p, (3, 3)) == 1 for p in game.observe(0)["hunters"])
    assert helpers.hunt(game, 0) is True and helpers.hunt(game, 1) is True
    assert game.advance().rewards == [5.0, 5.0]

    chaser = game_at(env_move, hunters=[(0, 0), (0, 6)], stags=[(0, 3)], hares=[(6, 0)])
    for _ in range(8):
        if helpers.chase_nearest_hare(chaser, 0):
            break
        chaser.advance()
    assert chaser.advance().rewards[0] == 1.0

    walker = game_at(env_move, hunters=[(0, 0), (6, 6)], stags=[(3, 3)], hares=[(5, 5)], stag_move_prob=0.0)
    steps = 0
    while not helpers.move_to(walker, 0, row=4, col=2):
        walker.advance()
        steps += 1
    walker.advance()
    assert walker.observe(0)["position"] == (4, 2) and steps == 5
    with pytest.raises(ValueError):
        helpers.move_to(walker, 0, row=3, col=3)  # the stag's cell
    with pytest.raises(ValueError):
        helpers.move(walker, 0, direction="UP")
    assert walker.pending_move(0) is None  # a helper that raises queues nothing


def test_observation_text_gives_coordinates(staghunt):
    game = game_at(staghunt.env_move, hunters=[(2, 3), (6, 6)], stags=[(4, 4)], hares=[(0, 1)])
    text = staghunt.helpers.observation_to_text(game, 0)
    assert "You are hunter 0 at (2,3)" in text
    for cell in ("(4,4)", "(0,1)", "(6,6)"):
        assert cell in text
    assert "(row, col)" in text


def test_no_helper_calls_another_helper_and_helpers_import_only_stdlib_and_env_move(staghunt):
    source = (GENERATED / "helpers.py").read_text()
    tree = ast.parse(source)
    public = set(helper_functions(staghunt.helpers)) | {"observation_to_text"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in public:
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert not used & (public - {node.name}), f"{node.name} refers to {used & public}"
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_"):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert not used & public, f"{node.name} refers to a public helper"
        if isinstance(node, ast.Assign):  # no aliases of helpers at module level
            assert not {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & public
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules <= set(sys.stdlib_module_names) | {"env_move", "__future__"}


# ---------------------------------------------------------------- prompts
def test_prompt_builders_return_chat_messages_and_name_only_helpers(staghunt):
    pt, helpers = staghunt.prompt_template, staghunt.helpers
    game = staghunt.env_move.StagHuntGame(seed=2)
    obs = helpers.observation_to_text(game, 1)
    thinking = pt.create_thinking_prompt(obs, 1)
    action = pt.create_single_stage_prompt(obs, "I will go for the stag with hunter 0.", 1)
    for messages in (thinking, action):
        assert isinstance(messages, list) and messages
        assert all(set(m) == {"role", "content"} and m["role"] in ("system", "user", "assistant")
                   and isinstance(m["content"], str) and m["content"] for m in messages)
        assert obs in "\n".join(m["content"] for m in messages)
    action_text = "\n".join(m["content"] for m in action)
    assert "I will go for the stag with hunter 0." in action_text and '"agent_id": 1' in action_text
    names = set(helper_functions(helpers))
    assert set(pt.HELPER_CALLS) == names
    everything = "\n".join(m["content"] for m in thinking + action)
    mentioned = set(re.findall(r'"action": "(\w+)"', everything)) | set(re.findall(r"^- (\w+) args", everything, re.M))
    assert mentioned and mentioned <= names


# ---------------------------------------------------------------- train.py against the template
def marker_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(text before the first marker, [(marker line, section text up to the next marker line)])."""
    preamble, sections = [], []
    for line in text.splitlines(keepends=True):
        if line.strip() in (GENERIC, CUSTOMIZE):
            sections.append((line, ""))
        elif sections:
            sections[-1] = (sections[-1][0], sections[-1][1] + line)
        else:
            preamble.append(line)
    return "".join(preamble), sections


def test_train_keeps_every_generic_section_of_the_template_byte_for_byte():
    template_pre, template = marker_sections((SOT / "grpo_template.py").read_text())
    train_pre, train = marker_sections((GENERATED / "train.py").read_text())
    assert train_pre == template_pre
    assert [marker for marker, _ in train] == [marker for marker, _ in template]
    assert [body for marker, body in train if GENERIC in marker] == [body for marker, body in template
                                                                      if GENERIC in marker]
    assert any(marker.startswith("    ") for marker, _ in template)  # one section inside a class body
    filled = [body for marker, body in train if CUSTOMIZE in marker]
    assert all("NotImplementedError" not in body for body in filled)


def test_template_has_only_start_markers_and_a_placeholder_in_every_customize_section():
    text = (SOT / "grpo_template.py").read_text()
    assert "END GENERIC" not in text and "END CUSTOMIZE" not in text and "# HOLE" not in text
    _, sections = marker_sections(text)
    customize = [body for marker, body in sections if CUSTOMIZE in marker]
    assert len(customize) == 4
    assert all("NotImplementedError" in body and body.lstrip().startswith("#") for body in customize)
    assert "HfArgumentParser(GRPOConfig).parse_args_into_dataclasses()[0]" in text


def test_config_validates_with_one_line_errors_naming_the_field(staghunt):
    GRPOConfig = staghunt.grpo_config.GRPOConfig
    assert GRPOConfig().num_generations >= 2
    for field_name, value in (("num_generations", 1), ("max_steps", 0), ("temperature", 0.0), ("beta", -1.0),
                              ("num_hunters", 5), ("invalid_move_penalty", 0.5)):
        with pytest.raises(ValueError, match=field_name) as info:
            GRPOConfig(**{field_name: value})
        assert "\n" not in str(info.value)


def test_actions_parse_dispatch_and_fall_back_to_wait(train_module):
    train, env_move = train_module.train, train_module.env_move
    game = env_move.StagHuntGame(seed=0)
    call = train.parse_action('Sure.\n```json\n{"action": "move", "agent_id": 1, "args": {"direction": "E"}}\n```', 1)
    assert call == {"action": "move", "agent_id": 1, "args": {"direction": "E"}}
    assert isinstance(train.dispatch_action(game, call), bool) and game.pending_move(1) == "E"
    for bad in ("no json here", '{"action": "fly", "agent_id": 0, "args": {}}',
                '{"action": "wait", "agent_id": 1, "args": {}}', '{"action": "wait", "agent_id": 0, "args": [1]}'):
        with pytest.raises(ValueError):
            train.parse_action(bad, 0)
    outcome = train.resolve_action(game, 0, '{"action": "move_to", "agent_id": 0, "args": {"x": 1}}')
    assert not outcome.valid and "TypeError" in outcome.error and game.pending_move(0) == "WAIT"
    outcome = train.resolve_action(game, 0, '{"action": "hunt", "agent_id": 0}')
    assert outcome.valid and outcome.call["args"] == {} and game.pending_move(0) == "HUNT"


def test_grpo_math_group_advantages_and_token_loss(train_module):
    import torch

    train = train_module.train
    returns = torch.tensor([[1.0, 5.0], [3.0, 5.0]])  # (G=2, H=2): hunter 1 has no signal
    adv = train.group_advantages(returns)
    assert torch.allclose(adv[:, 0], torch.tensor([-1.0, 1.0]) / (2 ** 0.5 + 1e-4))  # unbiased std sqrt(2)
    assert torch.equal(adv[:, 1], torch.zeros(2))
    logps = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.25]]))
    loss, kl, clipped = train.grpo_token_loss(logps, logps.detach(), logps.clone(), torch.tensor([1.0, -2.0]), 0.2, 0.1)
    assert torch.allclose(loss, torch.tensor([[-1.0, -1.0], [2.0, 2.0]])) and kl.abs().max() == 0
    assert clipped.sum() == 0
    _, kl, clipped = train.grpo_token_loss(logps, logps - 1.0, logps - 0.5, torch.tensor([1.0, 1.0]), 0.2, 0.1)
    assert (kl > 0).all() and clipped.sum() == 4  # ratio e > 1.2 with positive advantages


def test_one_update_with_signal_changes_every_parameter(train_module, tmp_path):
    """optimisation_step on hand-made samples with +-1 advantages (a random model gives none)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_scheduler

    from orchestrator.tiny.model import local_tiny_model

    train, GRPOConfig = train_module.train, train_module.grpo_config.GRPOConfig
    path = local_tiny_model(ROOT)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = GRPOConfig(model_name_or_path=path, learning_rate=1e-3, per_device_train_batch_size=2, beta=0.0,
                        output_dir=str(tmp_path))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    accelerator = SimpleNamespace(device=torch.device("cpu"), no_sync=lambda model: contextlib.nullcontext(),
                                  backward=lambda loss: loss.backward(),
                                  clip_grad_norm_=torch.nn.utils.clip_grad_norm_)
    state = train.TrainState(config, accelerator, model, None, AutoTokenizer.from_pretrained(path), optimizer,
                             get_scheduler("constant", optimizer))
    samples = [train.Sample([5, 6, 7, 8], [9, 10, 11], 0, 0, advantage=1.0),
               train.Sample([5, 6], [12, 13, 14, 15], 1, 0, advantage=-1.0),
               train.Sample([7, 8, 9], [16], 0, 1, advantage=0.5)]
    stats = train.optimisation_step(state, samples)
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0 and stats["learning_rate"] == 1e-3
    for name, param in model.named_parameters():
        assert not torch.equal(param, before[name]), f"Parameter {name} has not changed."


# ---------------------------------------------------------------- launcher
@pytest.mark.parametrize("gpus, cuda_visible, cpu_processes, expected", [
    (0, None, None, "--cpu --num_processes 1"),
    (0, None, "2", "--multi_gpu --num_processes 2 --main_process_port 29500"),
    (1, None, "2", "--num_processes 1 --main_process_port 29500 --num_machines"),
    (4, None, None, "--num_processes 4 --main_process_port 29500 --multi_gpu"),
    (4, "2,3", None, "--num_processes 2 --main_process_port 29500 --multi_gpu"),
])
def test_launcher_always_uses_accelerate_one_process_per_gpu_or_the_cpu(tmp_path, gpus, cuda_visible, cpu_processes,
                                                                       expected):
    shutil.copy2(GENERATED / "launch_training.sh", tmp_path / "launch_training.sh")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    lines = "".join(f'echo "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})"\n' for i in range(gpus))
    (fake_bin / "nvidia-smi").write_text("#!/usr/bin/env bash\n" + (lines or "exit 9\n"))
    (fake_bin / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "PYTHON": "echo"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("CPU_PROCESSES", None)
    if cuda_visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible
    if cpu_processes is not None:
        env["CPU_PROCESSES"] = cpu_processes
    proc = subprocess.run(["bash", str(tmp_path / "launch_training.sh"), "--max_steps", "3", "--output_dir", "a b"],
                          cwd="/", env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("-m accelerate.commands.launch ") and expected in proc.stdout
    assert proc.stdout.rstrip().endswith("train.py --max_steps 3 --output_dir a b")
    text = (GENERATED / "launch_training.sh").read_text()
    assert "set -euo pipefail" in text and "#SBATCH --gres=gpu" in text
    assert not re.search(r"^[^#]*\|\s*head\b", text, re.M)  # SIGPIPE under pipefail
