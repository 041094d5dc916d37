"""The fourth example triple (examples/crossing/): Crossing, OpenSpiel's C++ `pathfinding` game behind Gymnasium's
wrapper chain; its dilemma; the probe on it (the reference set passes `check`, which prints the probe's notes; a
helper that plays on the engine's state, a game swapped for another variant and a dispatch that maps unknown
actions to a default are flagged); and its offline demo, run once and asserted many ways: it ends `done`, the
researcher's `avg_return` and `format_err` are the reward and the invalid-action rate in `status` and on the page,
and the manifest names the packages the game imports.

The example's modules share their names with the other examples' (env_move, helpers, ...), so they are imported
under a private sys.modules swap and never left behind.
"""

from __future__ import annotations

import copy
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SOURCE_OF_TRUTH, edit_file, example_generated

from orchestrator.rules import check_folder, errors
from orchestrator.rules.dynamic import probe_folder

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "crossing"
SOT = EXAMPLE / "source_of_truth"
MODULE_NAMES = ("env_move", "grpo_config", "helpers", "prompt_template")


@pytest.fixture(scope="module")
def crossing() -> SimpleNamespace:
    """env_move and helpers of the example, imported apart from the other examples' modules of the same name."""
    saved = {name: sys.modules.pop(name) for name in MODULE_NAMES if name in sys.modules}
    saved_path = list(sys.path)
    sys.path[:0] = [str(SOT), str(EXAMPLE / "reference_generated")]
    try:
        return SimpleNamespace(**{name: importlib.import_module(name) for name in ("env_move", "helpers")})
    finally:
        for name in MODULE_NAMES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        sys.path[:] = saved_path


# ---------------------------------------------------------------- the game and its dilemma

def advance(game, agent: int) -> str:
    (x, y), goal = game.positions()[agent], game.goal(agent)
    if (x, y) == goal:
        return "STAY"
    return "DOWN" if y == 0 else "LEFT" if goal[0] < x else "RIGHT"


def blocked(game, agent: int) -> bool:
    """The other agent stands between this one and its goal, not yet arrived."""
    (x, _), (other, _) = game.positions()[agent], game.positions()[1 - agent]
    return (other - x) * (game.goal(agent)[0] - x) > 0 and not game.arrived(1 - agent)


def never_yields(game, agent: int) -> str:
    return advance(game, agent)


def yields_under_the_bay(game, agent: int) -> str:
    """Up into the bay when blocked right below it, wait there until the way is free."""
    here, bay = game.positions()[agent], game.bay
    if here == bay:
        return "STAY" if blocked(game, agent) else "DOWN"
    return "UP" if here[0] == bay[0] and blocked(game, agent) else advance(game, agent)


def waits_first(game, agent: int) -> str:
    return "STAY" if game.turn == 0 else yields_under_the_bay(game, agent)


def episode(env_move, policies, seed: int) -> list[float]:
    game = env_move.Crossing(seed=seed)
    while not game.done:
        for agent, policy in enumerate(policies):
            game.choose(agent, policy(game, agent))
        game.step()
    return game.returns


def test_choose_then_one_step_for_both_and_bad_input_is_one_line(crossing):
    m = crossing.env_move
    game = m.Crossing(seed=0)
    assert game.positions() == [(7, 1), (1, 1)] and game.bay == (4, 0)
    game.choose(0, "LEFT")
    game.choose(0, "UP")  # choosing again replaces
    assert game.pending == {0: "UP"}
    rewards, done = game.step()
    assert rewards == [-1.0, -1.0] and not done and game.pending == {} and game.positions() == [(7, 1), (1, 1)]
    for bad in ((2, "LEFT"), (0, "JUMP")):
        with pytest.raises(ValueError, match="must be"):
            game.choose(*bad)


def test_the_board_lives_in_a_cpp_state_behind_gymnasium_s_wrappers_and_copies_play_on_alike(crossing):
    m = crossing.env_move
    game = m.Crossing(seed=3)
    assert type(game.env).__module__.startswith("gymnasium.wrappers") and type(game.env.unwrapped).__name__ == "CrossingEnv"
    assert type(game.env.unwrapped.state).__name__ == "State"  # pyspiel's, in C++
    for _ in range(3):  # the agents meet: a chance node decides who gets the middle cell
        game.choose(0, "LEFT"), game.choose(1, "RIGHT"), game.step()
    twin = copy.deepcopy(game)
    for g in (game, twin):
        for _ in range(4):
            g.choose(0, "UP"), g.choose(1, "RIGHT"), g.step()
    assert twin.positions() == game.positions() and twin.returns == game.returns
    assert twin.env.unwrapped.state.serialize() == game.env.unwrapped.state.serialize()


def test_whoever_yields_loses_a_little_and_if_nobody_does_both_lose_much(crossing):
    m, seeds = crossing.env_move, range(10)
    assert all(episode(m, (never_yields, never_yields), s) == [-16.0, -16.0] for s in seeds)
    # the one that reached the cell below the bay makes way: it arrives one turn after the other
    assert all(sorted(episode(m, (yields_under_the_bay, yields_under_the_bay), s)) == [7.0, 8.0] for s in seeds)
    # an agent that hangs back a turn lets the other reach the bay first, and be the one that yields
    assert all(episode(m, (waits_first, yields_under_the_bay), s) == [8.0, 7.0] for s in seeds)
    # if both hang back, both pay for it
    assert all(sum(episode(m, (waits_first, waits_first), s)) == 13.0 for s in seeds)
    # one that yields facing one that never does: a deadlock whenever the stubborn one got the cell below the bay
    mixed = [episode(m, (yields_under_the_bay, never_yields), s) for s in seeds]
    assert {tuple(r) for r in mixed} == {(7.0, 8.0), (-16.0, -16.0)}


def test_helpers_choose_only_their_own_agent_s_move_and_say_whether_it_completed(crossing):
    m, helpers = crossing.env_move, crossing.helpers
    game = m.Crossing(seed=0)
    assert helpers.advance(game, 0) is False and game.pending == {0: "LEFT"}
    assert helpers.yield_in_bay(game, 1) is False and game.pending == {0: "LEFT", 1: "RIGHT"}
    assert helpers.move(game, 1, "up") is False and game.pending[1] == "UP"  # a wall above (1, 1)
    assert helpers.wait(game, 0) is True and game.pending[0] == "STAY"
    with pytest.raises(ValueError, match="direction"):
        helpers.move(game, 0, "north")
    text = helpers.observation_to_text(game, 0)
    assert "You are agent 0 at (7, 1); your goal is (0, 1)" in text and "(4, 0)" in text


# ---------------------------------------------------------------- the probe: the valid set and its must-flag mutants

def test_check_passes_the_reference_set_and_prints_the_probe_s_notes(tmp_path: Path):
    folder, source = example_generated(tmp_path, "crossing")
    result = subprocess.run([sys.executable, "-m", "orchestrator", "check", str(folder), "--source-of-truth",
                             str(source)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0 and "all checks pass" in result.stdout, result.stdout + result.stderr
    assert "probe note: game: make_env() -> Crossing, actions set with choose, played with step()" in result.stdout
    assert "pyspiel.State by serialize()" in result.stdout


ENGINE_HELPER = '''

def dash(env: Crossing, agent_id: int) -> bool:
    """Move one cell towards the goal at once, straight on the engine."""
    joint = [0, 0]
    joint[agent_id] = 1 if agent_id == 0 else 3
    env.env.unwrapped.state.apply_actions(joint)
    return True
'''
MAKE_ENV = '''    return env_move.Crossing(corridor_length=config.corridor_length, max_turns=config.max_env_steps,
                             seed=config.seed)
'''
SWAPPED_VARIANT = '''    game = env_move.Crossing(corridor_length=config.corridor_length, max_turns=config.max_env_steps,
                             seed=config.seed)
    engine = game.env.unwrapped
    engine.game = pyspiel.load_game("pathfinding", {**engine.game.get_parameters(), "group_reward": 50.0})
    engine.state = engine.game.new_initial_state()
    return game
'''
STRICT_DISPATCH = '''    if name not in HELPERS:
        raise ValueError(f"unknown action {name!r}; valid: {sorted(HELPERS)}")
    if not isinstance(args, dict):
        raise ValueError(f"args must be a JSON object, got {args!r}")
    return HELPERS[name](env, call["agent_id"], **args)'''
DEFAULT_DISPATCH = '''    if not isinstance(args, dict):
        raise ValueError(f"args must be a JSON object, got {args!r}")
    return HELPERS.get(name, HELPERS["wait"])(env, call["agent_id"], **args)'''


def engine_helper(folder: Path) -> None:
    edit_file(folder, "helpers.py", lambda t: t + ENGINE_HELPER)
    edit_file(folder, "prompt_template.py", lambda t: t.replace(
        '    "wait": "{} - stay where you are",\n', '    "wait": "{} - stay where you are",\n    "dash": "{} - rush",\n'))


def swapped_variant(folder: Path) -> None:
    edit_file(folder, "train.py", lambda t: t.replace(MAKE_ENV, SWAPPED_VARIANT).replace(
        "import env_move\n", "import env_move\nimport pyspiel\n", 1))


def default_dispatch(folder: Path) -> None:
    edit_file(folder, "train.py", lambda t: t.replace(STRICT_DISPATCH, DEFAULT_DISPATCH))


@pytest.mark.parametrize("mutate, rule, shown", [
    (engine_helper, "helper-advances-game", "dash(game, 0) on a real game state (turn 0) changed env.env.env.env.state"),
    (swapped_variant, "game-behaviour-changed", "group_reward=50.0"),
    (default_dispatch, "dispatch-accepts-raw-action", "ran wait() instead"),
])
def test_what_acts_on_the_cpp_state_behind_the_wrappers_is_flagged(tmp_path: Path, mutate, rule: str, shown: str):
    folder, source = example_generated(tmp_path, "crossing")
    mutate(folder)
    assert not errors(check_folder(folder, source))  # the text breaks no rule: what it does is found by running it
    found = probe_folder(folder, source_of_truth=source).violations
    assert sorted({v.rule for v in found}) == [rule], [str(v) for v in found]
    assert shown in found[0].message


# ---------------------------------------------------------------- the offline demo, once

@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    project = tmp_path_factory.mktemp("crossing-demo") / "project"
    shutil.copytree(SOURCE_OF_TRUTH, project / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "orchestrator", "demo", "--example", "crossing", "--project-root",
                             str(project)], capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [run_dir] = (project / "runs").glob("demo-crossing-*")
    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", run_dir.name, "--project-root",
                             str(project)], capture_output=True, text=True, timeout=120)
    return SimpleNamespace(project=project, run_dir=run_dir, status=status.stdout,
                           state=json.loads((run_dir / "state.json").read_text()))


@pytest.mark.slow
@pytest.mark.tiny_agent("crossing")
def test_the_demo_ends_done_and_status_and_the_page_show_its_reward_and_invalid_rate(demo):
    assert demo.state["status"] == "done", demo.status
    roles = demo.state["metric_roles"]
    assert roles["keys"]["reward"] == "avg_return" and roles["sources"]["reward"] == "first guess"
    assert roles["keys"]["invalid_rate"] == "format_err" and roles["sources"]["invalid_rate"] == "LLM"
    assert roles["off"] == []
    assert "metric roles: reward <- avg_return (first guess)" in demo.status
    latest = next(line for line in demo.status.splitlines() if "formal run formal-1, update" in line)
    assert "reward " in latest and "invalid_action_rate " in latest, demo.status
    assert "probe: state read through pyspiel.Game by serialize(), pyspiel.State by serialize()" in demo.status
    page = (demo.run_dir / "report.html").read_text()
    assert "invalid_rate &lt;- format_err (LLM)" in page and 'id="probe-notes"' in page
    assert {"reward", "invalid_action_rate"} <= {p.stem for p in (demo.run_dir / "plots" / "formal-1").glob("*.png")}


@pytest.mark.slow
@pytest.mark.tiny_agent("crossing")
def test_the_demo_commits_the_learned_metric_roles_and_its_manifest_names_the_game_s_packages(demo):
    import git

    subjects = git.Repo(demo.project / "workspace").git.log(f"run/{demo.run_dir.name}", "--format=%s").splitlines()
    assert any(s.startswith("metric_roles attempt 1: learned:") for s in subjects)
    stored = json.loads(git.Repo(demo.project / "workspace").git.show(f"run/{demo.run_dir.name}:metric_roles.json"))
    assert stored["keys"]["invalid_rate"] == "format_err"
    manifest = json.loads((demo.run_dir / "formal-1" / "manifest.json").read_text())
    assert {"open-spiel", "gymnasium", "numpy"} <= set(manifest["game_packages"])
