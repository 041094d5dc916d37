"""Tests for source_of_truth/env_move.py (the Cleanup social-dilemma grid game)."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

SOURCE_DIR = Path(__file__).resolve().parents[1] / "source_of_truth"
sys.path.insert(0, str(SOURCE_DIR))

from env_move import ACTIONS, MOVES, CleanupEnv, apple_regrowth_probability  # noqa: E402


def random_actions(env: CleanupEnv, rng: random.Random) -> dict[int, str]:
    return {i: rng.choice(ACTIONS) for i in range(env.num_agents)}


def rollout(env: CleanupEnv, steps: int, action_seed: int = 123) -> list[tuple]:
    """Play random actions (resetting when done) and record everything the env returns."""
    rng = random.Random(action_seed)
    trace = []
    for _ in range(steps):
        if env.done:
            env.reset()
        obs, rewards, done, info = env.step(random_actions(env, rng))
        trace.append((json.dumps(obs), rewards, done, json.dumps(info), env.render()))
    return trace


def arrange(
    env: CleanupEnv,
    positions: Sequence[tuple[int, int]],
    facing: list[str] | None = None,
    dirt: Sequence[tuple[int, int]] = (),
    apples: Sequence[tuple[int, int]] = (),
) -> None:
    """Put the env into a hand-made situation through get_state/set_state."""
    state = env.get_state()
    state["positions"] = [list(p) for p in positions]
    state["facing"] = facing or ["LEFT"] * env.num_agents
    state["dirt"] = [list(c) for c in dirt]
    state["apples"] = [list(c) for c in apples]
    env.set_state(state)


def quiet_env(**overrides) -> CleanupEnv:
    """An env without randomness in the dynamics (no waste, no regrowth)."""
    params = dict(width=10, height=8, num_agents=2, waste_spawn_prob=0.0, apple_regrowth_max=0.0, seed=0)
    params.update(overrides)
    return CleanupEnv(**params)


def positions(env: CleanupEnv) -> list[tuple[int, int]]:
    return [env.get_observation(i)["position"] for i in range(env.num_agents)]


# ---------------------------------------------------------------- determinism


def test_same_seed_and_actions_give_identical_trajectories():
    first = CleanupEnv(num_agents=3, max_steps=30, seed=7)
    second = CleanupEnv(num_agents=3, max_steps=30, seed=7)
    assert first.render() == second.render()
    assert rollout(first, 100) == rollout(second, 100)


def test_different_seeds_give_different_episodes():
    renders = {CleanupEnv(seed=seed).render() for seed in range(5)}
    assert len(renders) == 5


def test_reset_with_seed_replays_the_episode():
    env = CleanupEnv(seed=3)
    start = env.reset(seed=11)
    trace = rollout(env, 40)
    assert env.reset(seed=11) == start
    assert rollout(env, 40) == trace


def test_clone_reproduces_the_future_and_is_independent():
    env = CleanupEnv(num_agents=4, width=12, height=9, seed=5)
    rollout(env, 17)
    twin = env.clone()
    assert rollout(twin, 60, action_seed=9) == rollout(env, 60, action_seed=9)
    before = env.render()
    twin.step({0: "RIGHT"})
    assert env.render() == before


def test_get_state_set_state_json_round_trip_reproduces_the_future():
    env = CleanupEnv(num_agents=3, seed=2)
    rollout(env, 23)
    saved = json.loads(json.dumps(env.get_state()))
    expected = rollout(env, 60, action_seed=4)
    restored = CleanupEnv(num_agents=3, seed=999)
    restored.set_state(saved)
    assert rollout(restored, 60, action_seed=4) == expected


def test_set_state_rejects_a_different_config():
    state = CleanupEnv(width=10, seed=0).get_state()
    with pytest.raises(ValueError, match="config"):
        CleanupEnv(width=11, seed=0).set_state(state)


# ----------------------------------------------------------------- movement


def test_initial_state_follows_the_rules():
    env = CleanupEnv(width=12, height=10, num_agents=8, initial_dirt_fraction=0.3, seed=1)
    obs = env.get_observation(0)
    cells = list(obs["agents"].values())
    assert len(set(cells)) == 8
    assert all(3 <= x < 8 for x, _ in cells)
    assert all(env.get_observation(i)["facing"] == "LEFT" for i in range(8))
    assert len(obs["dirt"]) == round(0.3 * 30)
    assert all(env.is_orchard(*cell) for cell in obs["apples"])


def test_move_updates_position_and_facing():
    env = quiet_env()
    arrange(env, [(4, 3), (4, 6)])
    obs, _, _, info = env.step({0: "UP", 1: "RIGHT"})
    assert (obs[0]["position"], obs[0]["facing"]) == ((4, 2), "UP")
    assert (obs[1]["position"], obs[1]["facing"]) == ((5, 6), "RIGHT")
    assert info["blocked"] == {0: False, 1: False}


def test_move_off_the_grid_is_blocked_but_turns_the_agent():
    env = quiet_env()
    arrange(env, [(0, 0), (4, 4)])
    obs, _, _, info = env.step({0: "UP"})
    assert (obs[0]["position"], obs[0]["facing"]) == ((0, 0), "UP")
    assert info["blocked"][0] is True


def test_agents_targeting_the_same_cell_both_stay():
    env = quiet_env()
    arrange(env, [(3, 2), (5, 2)])
    obs, _, _, info = env.step({0: "RIGHT", 1: "LEFT"})
    assert positions(env) == [(3, 2), (5, 2)]
    assert info["blocked"] == {0: True, 1: True}
    assert (obs[0]["facing"], obs[1]["facing"]) == ("RIGHT", "LEFT")


def test_chain_into_a_staying_agent_blocks_the_whole_queue():
    env = quiet_env(num_agents=3)
    arrange(env, [(3, 2), (4, 2), (5, 2)])
    _, _, _, info = env.step({0: "RIGHT", 1: "RIGHT", 2: "STAY"})
    assert positions(env) == [(3, 2), (4, 2), (5, 2)]
    assert info["blocked"] == {0: True, 1: True, 2: False}


def test_agent_may_follow_an_agent_that_moves_away():
    env = quiet_env(num_agents=3)
    arrange(env, [(3, 2), (4, 2), (5, 2)])
    env.step({0: "RIGHT", 1: "RIGHT", 2: "RIGHT"})
    assert positions(env) == [(4, 2), (5, 2), (6, 2)]


def test_swapping_agents_both_stay():
    env = quiet_env()
    arrange(env, [(4, 2), (5, 2)])
    _, _, _, info = env.step({0: "RIGHT", 1: "LEFT"})
    assert positions(env) == [(4, 2), (5, 2)]
    assert info["blocked"] == {0: True, 1: True}


def test_missing_agents_stay():
    env = quiet_env(num_agents=3)
    before = positions(env)
    _, rewards, _, info = env.step({})
    assert positions(env) == before
    assert rewards == {0: 0.0, 1: 0.0, 2: 0.0}
    assert info["blocked"] == {0: False, 1: False, 2: False}


def test_actions_are_case_insensitive_and_stripped():
    envs = [quiet_env() for _ in range(3)]
    for env, action in zip(envs, ["RIGHT", "right", "  Right "]):
        env.step({0: action, 1: " clean"})
    assert len({env.render() for env in envs}) == 1


# ------------------------------------------------------------ cleaning, apples


def test_clean_beam_covers_own_cell_and_beam_length_ahead_only():
    env = quiet_env(width=12, river_width=6, orchard_width=4, clean_beam_length=2)
    river = [(x, y) for x in range(6) for y in range(8)]
    arrange(env, [(3, 2), (7, 7)], facing=["LEFT", "LEFT"], dirt=river)
    obs, _, _, info = env.step({0: "CLEAN"})
    cleaned = set(river) - set(map(tuple, obs[0]["dirt"]))
    assert cleaned == {(3, 2), (2, 2), (1, 2)}
    assert info["cells_cleaned"] == {0: 3, 1: 0}


def test_clean_beam_uses_facing_after_the_move_and_stops_at_the_edge():
    env = quiet_env(clean_beam_length=5)
    river = [(x, y) for x in range(3) for y in range(8)]
    arrange(env, [(1, 4), (5, 5)], facing=["RIGHT", "LEFT"], dirt=river)
    env.step({0: "UP"})
    obs, _, _, info = env.step({0: "CLEAN"})
    cleaned = set(river) - set(map(tuple, obs[0]["dirt"]))
    assert cleaned == {(1, 3), (1, 2), (1, 1), (1, 0)}
    assert info["cells_cleaned"][0] == 4


def test_beam_passes_through_agents():
    env = quiet_env()
    river = [(x, y) for x in range(3) for y in range(8)]
    arrange(env, [(3, 1), (2, 1)], dirt=river)
    obs, _, _, _ = env.step({0: "CLEAN"})
    assert not {(2, 1), (1, 1), (0, 1)} & set(map(tuple, obs[0]["dirt"]))


def test_apple_collection_rewards_exactly_that_agent():
    env = quiet_env()
    arrange(env, [(5, 3), (5, 6)], apples=[(6, 3), (9, 0)])
    obs, rewards, _, info = env.step({0: "RIGHT", 1: "RIGHT"})
    assert rewards == {0: 1.0, 1: 0.0}
    assert obs[0]["apples"] == [(9, 0)]
    assert info["apples_collected"] == {0: 1, 1: 0}
    assert info["apples_on_map"] == 1
    assert (obs[0]["total_reward"], obs[1]["total_reward"]) == (1.0, 0.0)


# ------------------------------------------------------------- waste, regrowth


def test_regrowth_probability_formula():
    assert apple_regrowth_probability(0.0, 0.05, 0.4) == pytest.approx(0.05)
    assert apple_regrowth_probability(0.2, 0.05, 0.4) == pytest.approx(0.025)
    assert apple_regrowth_probability(0.4, 0.05, 0.4) == 0.0
    assert apple_regrowth_probability(0.9, 0.05, 0.4) == 0.0


def test_env_regrowth_probability_uses_river_dirt_fraction():
    env = CleanupEnv(width=10, height=10, river_width=3, apple_regrowth_max=0.05, depletion_threshold=0.4, seed=0)
    arrange(env, positions(env), dirt=[(0, y) for y in range(6)])
    assert env.dirt_fraction == pytest.approx(0.2)
    assert env.regrowth_probability == pytest.approx(0.025)
    assert env.get_observation(0)["regrowth_prob"] == pytest.approx(0.025)


def test_no_regrowth_when_river_is_too_dirty():
    env = quiet_env(apple_regrowth_max=1.0, max_steps=300)
    arrange(env, [(4, 0), (4, 7)], dirt=[(x, y) for x in range(3) for y in range(8)])
    for _ in range(300):
        obs, _, _, info = env.step({})
        assert obs[0]["apples"] == [] and info["regrowth_prob"] == 0.0


def test_clean_river_regrows_free_orchard_cells_only():
    env = quiet_env(apple_regrowth_max=1.0)
    arrange(env, [(6, 0), (4, 7)])
    obs, rewards, _, _ = env.step({})
    assert len(obs[0]["apples"]) == 4 * 8 - 1
    assert (6, 0) not in obs[0]["apples"]
    assert rewards == {0: 0.0, 1: 0.0}


def test_waste_spawns_at_most_one_dirty_cell_per_step():
    env = quiet_env(waste_spawn_prob=1.0, initial_dirt_fraction=0.0, max_steps=40)
    counts = [len(env.get_observation(0)["dirt"])]
    for _ in range(30):
        obs, _, _, _ = env.step({})
        counts.append(len(obs[0]["dirt"]))
    assert counts == list(range(25)) + [24] * 6


# ----------------------------------------------------------------- episode end


def test_done_exactly_at_max_steps_and_step_after_done_raises():
    env = CleanupEnv(max_steps=5, seed=0)
    dones = [env.step({})[2] for _ in range(5)]
    assert dones == [False, False, False, False, True]
    with pytest.raises(ValueError, match="reset"):
        env.step({})
    env.reset()
    assert env.step({})[3]["step"] == 1


# ------------------------------------------------------------------ validation


def test_unknown_action_raises_and_lists_valid_actions():
    with pytest.raises(ValueError, match="UP, DOWN, LEFT, RIGHT, STAY, CLEAN"):
        CleanupEnv(seed=0).step({0: "JUMP"})


@pytest.mark.parametrize("agent_id", [-1, 2, "0", True, 1.0])
def test_bad_agent_id_raises(agent_id):
    env = CleanupEnv(seed=0)
    with pytest.raises(ValueError, match="agent id"):
        env.step({agent_id: "STAY"})


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"width": 2}, "width"),
        ({"width": 65}, "width"),
        ({"height": 2}, "height"),
        ({"num_agents": 0}, "num_agents"),
        ({"num_agents": 9}, "num_agents"),
        ({"width": 8, "height": 3, "river_width": 3, "orchard_width": 4, "num_agents": 4}, "num_agents"),
        ({"river_width": 3, "orchard_width": 7}, "river_width \\+ orchard_width"),
        ({"river_width": 0}, "river_width"),
        ({"max_steps": 0}, "max_steps"),
        ({"clean_beam_length": 0}, "clean_beam_length"),
        ({"waste_spawn_prob": 1.5}, "waste_spawn_prob"),
        ({"depletion_threshold": 0.0}, "depletion_threshold"),
    ],
)
def test_invalid_config_raises(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CleanupEnv(**kwargs)


# ---------------------------------------------------------- format, purity


def test_observation_is_json_serialisable_and_complete():
    obs = CleanupEnv(seed=0).get_observation(1)
    json.dumps(obs)
    assert obs["agent_id"] == 1
    assert obs["river_columns"] == (0, 2) and obs["orchard_columns"] == (6, 9)
    assert obs["apples"] == sorted(obs["apples"]) and obs["dirt"] == sorted(obs["dirt"])
    assert set(MOVES) == {"UP", "DOWN", "LEFT", "RIGHT"} and MOVES["UP"] == (0, -1)


def test_render_draws_the_grid_with_the_legend_characters():
    env = quiet_env()
    arrange(env, [(4, 1), (9, 7)], dirt=[(0, 0)], apples=[(6, 0)])
    lines = env.render().splitlines()
    assert lines[:2] == ["#~~...@,,,", "~~~.0.,,,,"]
    assert lines[7] == "~~~...,,,1"
    assert lines[8].startswith("step 0/50")


def test_module_uses_only_the_standard_library():
    tree = ast.parse((SOURCE_DIR / "env_move.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
    code = f"import sys; sys.path.insert(0, {str(SOURCE_DIR)!r}); import env_move; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_set_action_queues_until_step_and_step_clears_it():
    env, twin = CleanupEnv(seed=3), CleanupEnv(seed=3)
    env.set_action(0, " left ")
    env.set_action(1, "UP")
    env.set_action(1, "clean")  # a later choice replaces an earlier one
    assert env.pending_actions == {0: "LEFT", 1: "CLEAN"}
    assert env.step() == twin.step({0: "LEFT", 1: "CLEAN"})
    assert env.pending_actions == {}
    assert env.step() == twin.step({})  # nobody chose: everyone stays


def test_explicit_actions_win_over_pending_ones_and_bad_choices_raise():
    env, twin = CleanupEnv(seed=4), CleanupEnv(seed=4)
    env.set_action(0, "RIGHT")
    assert env.step({0: "DOWN"}) == twin.step({0: "DOWN"})
    with pytest.raises(ValueError, match="unknown|invalid"):
        env.set_action(0, "FLY")
    with pytest.raises(ValueError, match="agent id"):
        env.set_action(7, "UP")


# -------------------------------------------------------------- social dilemma


def test_default_game_is_a_social_dilemma_at_the_training_horizon():
    """One cleaner + one harvester out-eat two greedy harvesters in total, yet the cleaner eats nothing."""
    sys.path.insert(0, str(SOURCE_DIR.parent / "benchmarks"))
    from cleanup_dilemma import STRATEGIES, play
    from grpo_config import GRPOConfig

    horizon = GRPOConfig().max_env_steps
    seeds = range(8)
    nobody = [play(STRATEGIES["nobody cleans"], seed)[horizon - 1] for seed in seeds]
    cleaning = [play(STRATEGIES["one cleaner + one harvester"], seed)[horizon - 1] for seed in seeds]
    nobody_totals, cleaning_totals = [sum(apples) for apples in nobody], [sum(apples) for apples in cleaning]
    assert sum(cleaning_totals) >= 1.3 * sum(nobody_totals)
    assert sum(c > n for c, n in zip(cleaning_totals, nobody_totals)) >= 6
    # the dilemma: the cleaner would have eaten more as a greedy harvester
    assert all(cleaner == 0 for cleaner, _ in cleaning) and sum(nobody_totals) > 0
