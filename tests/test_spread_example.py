"""The third example triple (examples/spread/): Spread, a thin wrapper over mpe2's simple_spread (continuous
positions, momentum, `reset(seed)` before play, per-agent `submit`, one `step()`), its reference generated set,
its CSV train.logs as the orchestrator reads them, and one slow runtime check of the reference set.

The example's modules share their names with the other examples' (env_move, helpers, train, ...), so they are
imported under a private sys.modules swap (see `_import_isolated`) and never left behind.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from orchestrator.sources.template import CUSTOMIZE, GENERIC, read_sections

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "spread"
SOT = EXAMPLE / "source_of_truth"
GENERATED = EXAMPLE / "reference_generated"
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
def spread() -> SimpleNamespace:
    """env_move, grpo_config, helpers and prompt_template of the example (no torch)."""
    return _import_isolated(("env_move", "grpo_config", "helpers", "prompt_template"))


@pytest.fixture(scope="module")
def train_module() -> SimpleNamespace:
    """The reference train.py (imports torch, transformers and accelerate) with its siblings."""
    return _import_isolated(MODULE_NAMES)


def started(env_move, seed: int = 0, **kwargs):
    game = env_move.SpreadGame(**kwargs)
    game.reset(seed=seed)
    return game


def world(game) -> tuple:
    """Everything that moves, as plain numbers: agent positions and velocities, landmarks, the turn."""
    return (tuple(tuple(game.position(i)) + tuple(game.velocity(i)) for i in range(game.num_agents)),
            tuple(tuple(p) for p in game.landmarks()), game.turn)


# ---------------------------------------------------------------- the game
def test_reset_then_submit_then_one_step_for_all(spread):
    m = spread.env_move
    game = m.SpreadGame(num_agents=3, max_cycles=2)
    observations = game.reset(seed=4)
    assert sorted(observations) == [0, 1, 2] and all(o.shape == (18,) for o in observations.values())
    game.submit(0, m.LEFT)
    game.submit(0, m.UP)  # submitting again replaces
    game.submit(2, np.int64(m.RIGHT))
    assert game.pending_actions == {0: m.UP, 2: m.RIGHT}
    observations, rewards, done, info = game.step()
    assert game.pending_actions == {} and not done and info["turn"] == game.turn == 1
    assert sorted(rewards) == [0, 1, 2] and all(isinstance(r, float) for r in rewards.values())
    assert info["team_reward"] < 0
    # a push shows in the velocity now (0.5 along its axis); agent 1 submitted nothing and played NO_OP
    assert np.allclose(game.velocity(0), [0.0, 0.5]) and np.allclose(game.velocity(2), [0.5, 0.0])
    assert np.allclose(game.velocity(1), [0.0, 0.0])
    assert np.allclose(observations[0][:4], [*game.velocity(0), *game.position(0)])
    assert game.step()[2] and game.done and "(done)" in game.render()
    with pytest.raises(ValueError, match="reset"):
        game.step()


def test_the_same_seed_replays_the_same_world_and_no_seed_draws_a_new_one(spread):
    m = spread.env_move

    def play(seed):
        game = started(m, seed)
        trace = [world(game)]
        for turn in range(6):
            for agent in range(game.num_agents):
                game.submit(agent, (turn + agent) % 5)
            trace.append((game.step()[1], world(game)))
        return trace

    assert play(3) == play(3)
    assert play(3)[0] != play(4)[0]
    unseeded = [world(started(m, None)) for _ in range(2)]
    assert unseeded[0] != unseeded[1]


def test_momentum_as_the_helpers_rely_on_it(spread):
    """helpers.py steers by the resting point p + 0.4 v + 0.2 d of a push d made now and never again."""
    m, helpers = spread.env_move, spread.helpers
    game = started(m, 1, num_agents=2, max_cycles=60)
    for action in (m.RIGHT, m.RIGHT, m.UP):
        game.submit(0, action)
        game.step()
    here, velocity = game.position(0), game.velocity(0)
    predicted = helpers._rest_point(here, velocity, m.LEFT)
    game.submit(0, m.LEFT)
    game.step()
    assert np.allclose(game.position(0), here + 0.1 * velocity)  # the push is not in this turn's move
    for _ in range(40):
        game.step()
    assert np.linalg.norm(game.velocity(0)) < 1e-4
    assert np.linalg.norm(game.position(0) - predicted) < 1e-3


@pytest.mark.parametrize("make", [
    lambda m: m.SpreadGame(num_agents=5),
    lambda m: m.SpreadGame(num_agents=True),
    lambda m: m.SpreadGame(max_cycles=0),
    lambda m: m.SpreadGame(local_ratio=1.5),
    lambda m: m.SpreadGame().submit(0, m.UP),  # before reset
    lambda m: m.SpreadGame().step(),
    lambda m: m.SpreadGame().observation(0),
    lambda m: started(m).submit(3, m.UP),
    lambda m: started(m).submit(0, 5),
    lambda m: started(m).submit(0, True),
    lambda m: started(m).submit(0, "up"),
    lambda m: started(m).position(-1),
])
def test_bad_input_is_a_one_line_value_error(spread, make):
    with pytest.raises(ValueError) as info:
        make(spread.env_move)
    assert str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- the dilemma, from scripted policies
PUSHES = {0: (0.0, 0.0), 1: (-1.0, 0.0), 2: (1.0, 0.0), 3: (0.0, -1.0), 4: (0.0, 1.0)}


def steer(game, agent: int, target) -> int:
    """The push whose resting point (p + 0.4 v + 0.2 d) is closest to `target`."""
    rest = game.position(agent) + 0.4 * game.velocity(agent)
    return min(PUSHES, key=lambda a: np.linalg.norm(rest + 0.2 * np.array(PUSHES[a]) - target))


def nearest_landmark(game, agent: int):
    return min(game.landmarks(), key=lambda landmark: np.linalg.norm(landmark - game.position(agent)))


def stay(game, split):
    return [0] * game.num_agents


def rush_to_nearest(game, split):
    return [steer(game, agent, nearest_landmark(game, agent)) for agent in range(game.num_agents)]


def keep_the_split(game, split):
    return [steer(game, agent, game.landmarks()[split[agent]]) for agent in range(game.num_agents)]


def agent_0_rushes(game, split):
    return [steer(game, 0, nearest_landmark(game, 0)), *keep_the_split(game, split)[1:]]


def one_to_one_split(game) -> tuple[int, ...]:
    """The pairing of agents with landmarks of the smallest total distance, at the start."""
    landmarks = game.landmarks()
    return min(itertools.permutations(range(game.num_agents)),
               key=lambda pairing: sum(np.linalg.norm(game.position(a) - landmarks[k]) for a, k in enumerate(pairing)))


def measure(env_move, policy, seeds=range(10)) -> dict:
    """Per episode of the default world (3 agents, 25 turns), means over the seeds: the team reward (the sum of
    info["team_reward"]), collisions (agent pairs overlapping, counted every turn), each agent's return."""
    team, collisions, returns = [], [], []
    for seed in seeds:
        game = started(env_move, seed)
        split = one_to_one_split(game)
        total, hits, agent_returns = 0.0, 0, np.zeros(game.num_agents)
        while not game.done:
            for agent, action in enumerate(policy(game, split)):
                game.submit(agent, action)
            _, rewards, _, info = game.step()
            total += info["team_reward"]
            agent_returns += [rewards[a] for a in range(game.num_agents)]
            hits += sum(bool(np.linalg.norm(game.position(a) - game.position(b)) < 2 * env_move.AGENT_RADIUS)
                        for a, b in itertools.combinations(range(game.num_agents), 2))
        team.append(total)
        collisions.append(hits)
        returns.append(agent_returns)
    return {"team": statistics.mean(team), "collisions": statistics.mean(collisions),
            "returns": np.mean(returns, axis=0)}


def test_the_default_world_pays_a_one_to_one_split_and_punishes_a_rush_to_the_nearest_landmark(spread):
    m = spread.env_move
    idle, rush, split, one_rushes = (measure(m, p) for p in (stay, rush_to_nearest, keep_the_split, agent_0_rushes))
    # measured (seeds 0-9): team reward per episode -51.4 staying, -31.5 all rushing (8.0 collisions), -21.2 when
    # agent 0 alone rushes (3.2), -17.4 keeping the split (1.5); mean return per agent -25.7 / -18.4 / -11.6 / -9.2
    # (agent 0: -12.0 rushing alone, -9.4 keeping the split)
    assert idle["team"] < rush["team"] < one_rushes["team"] < split["team"]
    assert split["collisions"] < one_rushes["collisions"] < rush["collisions"]
    # nobody gains by rushing: with local_ratio 0.5 the team term dominates every agent's own return
    assert one_rushes["returns"][0] < split["returns"][0] and max(rush["returns"]) < min(split["returns"])


# ---------------------------------------------------------------- helpers
def helper_functions(helpers) -> dict:
    return {name: fn for name, fn in vars(helpers).items()
            if inspect.isfunction(fn) and fn.__module__ == helpers.__name__ and not name.startswith("_")
            and name != "observation_to_text"}


SAMPLE_ARGS = {"move_toward": [{"x": 0.5, "y": -0.25}, {"x": "-1", "y": 2}], "go_to_landmark": [{"landmark": 2}],
               "push": [{"direction": d} for d in ("left", "UP", "no_op")]}


def test_every_helper_takes_env_and_agent_id_and_only_submits_a_legal_action_for_that_agent(spread):
    helpers, m = spread.helpers, spread.env_move
    found = helper_functions(helpers)
    assert set(found) == {"move_toward", "go_to_landmark", "go_to_nearest_landmark", "cover_assigned_landmark",
                          "avoid_nearest_agent", "brake", "push"}
    for name, fn in found.items():
        assert list(inspect.signature(fn).parameters)[:2] == ["env", "agent_id"], name
    for seed in range(3):
        game = started(m, seed)
        for turn in range(seed * 3):  # a few turns of motion first
            game.submit(turn % 3, 1 + turn % 4)
            game.step()
        before = world(game)
        for name, fn in found.items():
            for agent in range(game.num_agents):
                for args in SAMPLE_ARGS.get(name, [{}]):
                    pending = game.pending_actions
                    result = fn(game, agent, **args)
                    assert isinstance(result, bool), (name, args)
                    after = game.pending_actions
                    assert after[agent] in range(len(m.ACTION_NAMES)), (name, args)
                    assert {k: v for k, v in after.items() if k != agent} == \
                        {k: v for k, v in pending.items() if k != agent}, (name, args)
        assert world(game) == before  # helpers choose actions; only step() moves the world


@pytest.mark.parametrize("name, args", [("move_toward", {"x": "east", "y": 0}), ("move_toward", {"x": True, "y": 0}),
                                        ("move_toward", {"x": float("nan"), "y": 0}), ("go_to_landmark", {"landmark": 3}),
                                        ("go_to_landmark", {"landmark": 0.5}), ("push", {"direction": "north"})])
def test_a_helper_refuses_bad_arguments_before_submitting(spread, name, args):
    game = started(spread.env_move, 0)
    with pytest.raises(ValueError):
        getattr(spread.helpers, name)(game, 0, **args)
    assert game.pending_actions == {}


def play_until_done(game, act, turns: int) -> list[bool]:
    """`act(game, agent) -> bool` for every agent each turn, until all report done or `turns` ran out."""
    results = []
    for _ in range(turns):
        results = [act(game, agent) for agent in range(game.num_agents)]
        if all(results):
            break
        game.step()
    return results


def test_helpers_reach_their_targets(spread):
    helpers, m = spread.helpers, spread.env_move
    game = started(m, 5, max_cycles=60)
    target = game.landmarks()[1]
    assert play_until_done(game, lambda g, a: helpers.go_to_landmark(g, a, landmark=1) if a == 0
                           else helpers.brake(g, a), 40) == [True, True, True]
    assert np.linalg.norm(game.position(0) - target) < 0.15

    game = started(m, 6, max_cycles=60)
    assert play_until_done(game, lambda g, a: helpers.move_toward(g, a, x=-0.5 + 0.5 * a, y=0.8), 40) == [True] * 3
    assert all(np.linalg.norm(game.position(a) - [-0.5 + 0.5 * a, 0.8]) < 0.15 for a in range(3))
    assert play_until_done(game, helpers.brake, 10) == [True] * 3

    game = started(m, 7, max_cycles=60)
    assert play_until_done(game, helpers.cover_assigned_landmark, 40) == [True] * 3
    covering = [min(range(3), key=lambda k: np.linalg.norm(game.landmarks()[k] - game.position(a))) for a in range(3)]
    assert sorted(covering) == [0, 1, 2]  # one agent on each landmark


def test_observation_text_gives_decimal_coordinates_of_everything(spread):
    helpers, m = spread.helpers, spread.env_move
    game = started(m, 2)
    for _ in range(2):
        game.submit(1, m.RIGHT)
        game.step()
    text = helpers.observation_to_text(game, 1)
    fmt = lambda p: f"({p[0]:+.2f}, {p[1]:+.2f})"  # noqa: E731
    assert text.startswith(f"You are agent 1 at {fmt(game.position(1))}, moving {fmt(game.velocity(1))}")
    assert "Turn 3 of 25" in text and "(x, y)" in text
    for k, landmark in enumerate(game.landmarks()):
        assert f"landmark {k} at {fmt(landmark)}" in text
    for agent in (0, 2):
        assert f"agent {agent} at {fmt(game.position(agent))}" in text
    with pytest.raises(ValueError):
        helpers.observation_to_text(game, 3)


def test_no_helper_calls_another_helper_and_helpers_import_only_stdlib_numpy_and_env_move(spread):
    source = (GENERATED / "helpers.py").read_text()
    tree = ast.parse(source)
    public = set(helper_functions(spread.helpers)) | {"observation_to_text"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            allowed = public - {node.name} if node.name in public else public
            assert not used & allowed, f"{node.name} refers to {used & allowed}"
        if isinstance(node, ast.Assign):  # no aliases of helpers at module level
            assert not {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & public
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules <= set(sys.stdlib_module_names) | {"env_move", "numpy", "__future__"}


# ---------------------------------------------------------------- prompts
def test_prompt_builders_return_chat_messages_and_name_only_helpers(spread):
    pt, helpers = spread.prompt_template, spread.helpers
    obs = helpers.observation_to_text(started(spread.env_move, 2), 2)
    thinking = pt.create_thinking_prompt(obs, 2)
    action = pt.create_single_stage_prompt(obs, "I take landmark 1; agent 0 is closer to landmark 2.", 2)
    for messages in (thinking, action):
        assert isinstance(messages, list) and messages
        assert all(set(m) == {"role", "content"} and m["role"] in ("system", "user", "assistant")
                   and isinstance(m["content"], str) and m["content"] for m in messages)
        assert obs in "\n".join(m["content"] for m in messages)
    action_text = "\n".join(m["content"] for m in action)
    assert "I take landmark 1; agent 0 is closer to landmark 2." in action_text and '"agent_id": 2' in action_text
    names = set(helper_functions(helpers))
    assert set(pt.HELPER_CALLS) == names
    everything = "\n".join(m["content"] for m in thinking + action)
    mentioned = set(re.findall(r'"action": "(\w+)"', everything)) | set(re.findall(r"^- (\w+) args", everything, re.M))
    assert mentioned == names


# ---------------------------------------------------------------- the template, train.py and the config
def test_train_keeps_every_generic_section_of_the_template_byte_for_byte():
    template = read_sections((SOT / "grpo_template.py").read_text())
    train = read_sections((GENERATED / "train.py").read_text())
    assert [s.marker for s in train] == [s.marker for s in template]
    assert [s.text for s in train if s.kind == GENERIC] == [s.text for s in template if s.kind == GENERIC]
    assert [s.kind for s in template] == [GENERIC, CUSTOMIZE, GENERIC, CUSTOMIZE, GENERIC]
    assert all("NotImplementedError" in s.text and s.text.lstrip().startswith("#") for s in template
               if s.kind == CUSTOMIZE)
    assert all("NotImplementedError" not in s.text for s in train if s.kind == CUSTOMIZE)
    text = (SOT / "grpo_template.py").read_text()
    assert "END GENERIC" not in text and "END CUSTOMIZE" not in text


def test_config_is_frozen_has_no_log_folder_and_validates_with_one_line_errors(spread):
    GRPOConfig = spread.grpo_config.GRPOConfig
    config = GRPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.train_iterations = 3
    assert not [f.name for f in dataclasses.fields(GRPOConfig) if "log" in f.name]
    for name, value in (("rollouts_per_group", 1), ("train_iterations", 0), ("n_agents", 5), ("kl_beta", -1.0),
                        ("generation_backend", "vllm"), ("run_name", "a/b"), ("invalid_call_penalty", 0.5)):
        with pytest.raises(ValueError, match=name) as info:
            GRPOConfig(**{name: value})
        assert "\n" not in str(info.value)


def test_the_orchestrator_s_flags_reach_train_py_s_config(train_module):
    from orchestrator.sources.roles import to_args

    train, GRPOConfig = train_module.train, train_module.grpo_config.GRPOConfig
    values = {"policy_model": "/models/tiny", "train_iterations": 2, "rollouts_per_group": 4, "use_bf16": False,
              "sampling_temperature": 0.5, "output_dir": "out dir", "grad_checkpointing": True}
    assert train.parse_config(to_args(values)) == GRPOConfig(**values)
    assert train.parse_config(["--episode_length=3", "--use_bf16", "no"]) == GRPOConfig(episode_length=3,
                                                                                        use_bf16=False)
    assert train.run_folder(GRPOConfig(output_dir="out", run_name="r7")) == Path("out/r7")
    with pytest.raises(SystemExit):
        train.parse_config(["--episodes", "4"])  # not a field of this config


def test_calls_are_read_run_and_fall_back_to_no_op(train_module):
    train, m = train_module.train, train_module.env_move
    game = train.new_game(train_module.grpo_config.GRPOConfig(n_agents=2, episode_length=4), 0)
    assert game.num_agents == 2 and game.max_cycles == 4 and not game.done
    call = train.read_call('Plan.\n```json\n{"action": "push", "agent_id": "1", "args": {"direction": "up"}}\n```', 1)
    assert call == {"action": "push", "agent_id": 1, "args": {"direction": "up"}}
    assert train.run_call(game, call) is True and game.pending_actions == {1: m.UP}
    for bad in ("no json here", '{"action": "fly", "agent_id": 0, "args": {}}',
                '{"action": "brake", "agent_id": 1, "args": {}}', '{"action": "brake", "agent_id": 0, "args": [1]}'):
        with pytest.raises(ValueError):
            train.read_call(bad, 0)
    outcome = train.resolve_action(game, 0, '{"action": "move_toward", "agent_id": 0, "args": {"x": 1}}')
    assert not outcome.valid and "TypeError" in outcome.error and game.pending_actions[0] == m.NO_OP
    outcome = train.resolve_action(game, 0, '{"action": "go_to_nearest_landmark", "agent_id": 0}')
    assert outcome.valid and outcome.call["args"] == {} and outcome.action == game.pending_actions[0]


def test_train_logs_is_a_csv_the_orchestrator_reads_with_evaluations_apart(train_module, tmp_path):
    from orchestrator.training.logformat import read_log, sample_problems
    from orchestrator.training.monitor import progress

    train, GRPOConfig = train_module.train, train_module.grpo_config.GRPOConfig
    config = GRPOConfig(output_dir=str(tmp_path), run_name="run")
    logs = train.RunLogs(config, SimpleNamespace(is_main_process=True))
    for update in (1, 2):
        logs.row("train", update=update, total_updates=2, episode=8 * update, loss=0.125 * update, kl=0.0,
                 gradNorm=1.5 * update, lr=1e-6, reward_mean=-30.0 + update, reward_std=2.0)
    logs.row("eval", update=2, total_updates=2, episode=16, reward_mean=-12.5, reward_std=1.0, invalid_action_rate=0.25)
    logs.row("done", update=2, total_updates=2, episode=16)
    text = (tmp_path / "run" / "train.logs").read_text()
    assert text.startswith("phase,update,total_updates,episode,loss,")
    records = read_log(tmp_path / "run" / "train.logs")
    assert [r.kind for r in records] == ["start", "train", "train", "eval", "done"]
    trains = [r for r in records if r.kind == "train"]
    assert [r.values["update"] for r in trains] == [1, 2] and [r.values["grad_norm"] for r in trains] == [1.5, 3.0]
    assert [r.values["reward_mean"] for r in trains] == [-29.0, -28.0] and all(r.time for r in trains)
    assert records[3].values["eval_reward_mean"] == -12.5 and sample_problems(records) == []
    assert progress(records).update == 2 and progress(records).total_updates == 2


# ---------------------------------------------------------------- launcher
@pytest.mark.parametrize("gpus, cuda_visible, cpu_processes, expected", [
    (0, None, None, "--cpu --num_processes 1"),
    (0, None, "2", "--multi_gpu --num_processes 2 --main_process_port 29500"),
    (2, None, "2", "--num_processes 2 --main_process_port 29500 --multi_gpu --num_machines"),
    (4, "1,3", None, "--num_processes 2 --main_process_port 29500 --multi_gpu"),
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
    env.update({k: v for k, v in (("CUDA_VISIBLE_DEVICES", cuda_visible), ("CPU_PROCESSES", cpu_processes)) if v})
    proc = subprocess.run(["bash", str(tmp_path / "launch_training.sh"), "--train_iterations", "3", "--run_name", "a b"],
                          cwd="/", env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("-m accelerate.commands.launch ") and expected in proc.stdout
    assert proc.stdout.rstrip().endswith("train.py --train_iterations 3 --run_name a b")


# ---------------------------------------------------------------- the runtime check, as the orchestrator runs it
@pytest.mark.slow
def test_the_reference_set_passes_a_runtime_check_and_its_csv_log_is_read_right(tmp_path):
    from orchestrator.checks import RuntimeCheckSpec, find_log, run_runtime_check
    from orchestrator.sources.config_file import read_config
    from orchestrator.demo import example, recorded_roles
    from orchestrator.training.logformat import read_log
    from orchestrator.training.monitor import progress
    from orchestrator.sources.roles import validate_roles
    from orchestrator.tiny.model import local_tiny_model

    folder = tmp_path / "generated"
    folder.mkdir()
    for src in [*SOT.glob("*.py"), *GENERATED.iterdir()]:
        shutil.copy2(src, folder / src.name)
    ex = example("spread")
    roles = validate_roles(recorded_roles(ex), read_config(SOT / "grpo_config.py").kinds,
                           cli_possible=True)
    model = local_tiny_model(ROOT)
    spec = RuntimeCheckSpec(model=model, real_model=False, episodes=4, turns=1, cpu_processes=1)
    result = run_runtime_check(folder, spec, roles, tmp_path / "check")
    assert result.passed, result.summary + "\n" + result.evidence
    assert result.summary.startswith("2 updates")
    run = tmp_path / "check" / "logs" / "outputs" / "spread-grpo"  # output_dir/run_name: no log folder role
    assert find_log(tmp_path / "check" / "logs") == run / "train.logs"
    records = read_log(run / "train.logs")
    assert [r.kind for r in records] == ["start", "train", "train", "eval", "done"]
    assert [r.values["update"] for r in records if r.kind == "train"] == [1, 2]
    assert progress(records).total_updates == 2
    sample = (run / "Sample_EP.logs").read_text()
    assert sample.startswith("===== episode 1 (update 1, seed 7)") and "--- start ---" in sample
    for field in ("prompt:", "thinking:", "action output:", "parsed call:", "helper result:", "reward:"):
        assert f"[agent 2] {field}" in sample, field
    saved = json.loads((run / "final" / "grpo_config.json").read_text())  # what train.py really ran with
    assert {k: saved[k] for k in ("policy_model", "train_iterations", "rollouts_per_group", "episode_length",
                                  "max_new_tokens_think", "max_new_tokens_act", "grad_checkpointing")} == \
        {"policy_model": model, "train_iterations": 2, "rollouts_per_group": 2, "episode_length": 1,
         "max_new_tokens_think": 40, "max_new_tokens_act": 40, "grad_checkpointing": False}
