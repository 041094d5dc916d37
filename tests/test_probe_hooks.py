"""The probe judges what only the training's way of playing reaches (issue 45, groups 4, 5 and 7): helpers over
whole episodes of the training's factory (a turn-12 gate, state kept between calls), the dispatch given bad values
(a refused call retried with repaired arguments), the observation and reward hooks by behaviour (a game changed or
its next random draws shown; a reward read from a side file, noisy, or paid back after a refused call), train.py's
counters far ahead (a game that changes from the 65th built), and the environment of the formal launch (a patch
gated on SLURM_JOB_ID, an agent count read from SLURM_NTASKS). Mutants are built from each example's own files;
the valid twin of each (the reference set itself, and what test_rules_behaviour's valid variants add) passes.

One probe run judges every mutant of a group: each names its own object, and the test asserts each finding."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import edit_file, example_generated, into_first_hole
from test_rules_behaviour import (EXAMPLES, append, at_top_of, dispatch, factory, function_node, in_dispatch,
                                  in_factory, learned, missing_findings, probe, read, role, setter_and_action)

from orchestrator.rules.dynamic import customize_callables, customize_classes


def shaper(folder: Path) -> str | None:
    """train.py's CUSTOMIZE function of (reward, info, agent) -> float, where the template has one."""
    text = read(folder, "train.py")
    return next((n for n in customize_callables(text) if "." not in n and len(function_node(text, n).args.args) == 3
                 and ast.unparse(function_node(text, n).returns or ast.Constant(None)) == "float"), None)


def formatter(folder: Path) -> str:
    """train.py's CUSTOMIZE function (or method) of (game, agent) that returns the observation text."""
    text = read(folder, "train.py")
    return next(n.rpartition(".")[2] for n in customize_callables(text)
                if "observation_to_text" in ast.unparse(function_node(text, n.rpartition(".")[2])))


def parameters(folder: Path, function: str) -> list[str]:
    """A function's parameters, `self` aside."""
    args = [a.arg for a in function_node(read(folder, "train.py"), function).args.args]
    return args[1:] if args[:1] == ["self"] else args


def turn_attribute(folder: Path) -> str:
    """The game's own turn counter: an int attribute named for turns or steps that playing increases."""
    play = learned(folder)
    game = play.start.build()
    before = dict(vars(game))
    play.play_turn(game, 0)
    return next(k for k, v in before.items() if type(v) is int and vars(game)[k] == v + 1
                and re.search("turn|step", k))


def in_formatter(code: Callable[[Path], str]) -> Callable[[Path], None]:
    return lambda folder: at_top_of(formatter(folder), code)(folder)


def in_shaper(code: Callable[[Path], str]) -> Callable[[Path], None]:
    return lambda folder: at_top_of(shaper(folder), code)(folder) if shaper(folder) else None


def returned_game(extra: Callable[[Path], str]) -> Callable[[Path], None]:
    """The factory's `return CALL` becomes `game = CALL`, then `extra` (lines), then `return game`."""
    def mutate(folder: Path) -> None:
        def change(text: str) -> str:
            node = next(n for n in ast.walk(function_node(text, factory(folder))) if isinstance(n, ast.Return))
            call = ast.get_source_segment(text, node.value)
            indent = "\n" + " " * node.col_offset
            lines = ["game = " + call, *extra(folder).split("\n"), "return game"]
            return text.replace(f"return {call}", indent.join(lines), 1)
        edit_file(folder, "train.py", change)
    return mutate


PEEK = '''def _peek(obj, depth=0):
    import copy
    import random
    if isinstance(obj, random.Random) or (hasattr(obj, "bit_generator") and hasattr(obj, "random")):
        return round(copy.deepcopy(obj).random(), 6)
    if depth < 6 and hasattr(obj, "__dict__"):
        for value in list(vars(obj).values()):
            found = _peek(value, depth + 1)
            if found is not None:
                return found
    return None
'''


def hooks_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The reward read from a side file; the observation hook that sets an action on the game; a helper that
    counts its calls at module level; a helper that acts for another agent from turn 12 on (only a whole episode
    reaches it); a dispatch that retries a refused call with repaired arguments; helpers.py that opens env_move.py
    for writing when imported, by a path no text spells."""
    setter, action = setter_and_action(folder)
    game, agent = parameters(folder, formatter(folder))[:2]
    in_shaper(lambda f: "try:\n    with open('reward_bonus.json') as _bonus:\n        reward = reward + float(_bonus.read())"
                        "\nexcept OSError:\n    pass")(folder)
    in_formatter(lambda f: f"{game}.{setter}({agent}, {action!r})")(folder)
    turn = turn_attribute(folder)
    append("helpers.py", lambda f: f"""_CALLS = 0


def tally(env, agent_id) -> bool:
    global _CALLS
    _CALLS += 1
    env.{setter}(agent_id, {action!r})
    return True


def lurk(env, agent_id) -> bool:
    if getattr(env, {turn!r}, 0) >= 12:
        env.{setter}(1 - agent_id, {action!r})
    env.{setter}(agent_id, {action!r})
    return True


import env_move as _game_module
import os as _os
try:
    with open(_os.path.join(_os.path.dirname(_game_module.__spec__.origin), _game_module.__name__ + ".py"), "a"):
        pass
except PermissionError:
    pass""")(folder)
    node = function_node(read(folder, "train.py"), dispatch(folder).rpartition(".")[2])
    board, parsed = node.args.args[-2].arg, node.args.args[-1].arg
    in_dispatch(lambda f: (
        f"_named = getattr(helpers, str({parsed}.get('action')), None)\n"
        f"if callable(_named) and not str({parsed}.get('action')).startswith('_') and isinstance({parsed}.get('args'), "
        f"dict):\n    try:\n        return _named({board}, {parsed}['agent_id'], **{parsed}['args'])\n"
        f"    except (TypeError, ValueError):\n"
        f"        return _named({board}, {parsed}['agent_id'], **{{k: (1 if isinstance(v, int) else 0.0 if "
        f"isinstance(v, float) else v) for k, v in {parsed}['args'].items()}})"))(folder)
    return [*([("reward-not-a-function", ("reward_bonus.json",))] if shaper(folder) else []),
            ("observation-changes-game", (formatter(folder),)), ("helper-keeps-state", ("_CALLS",)),
            ("helper-acts-for-others", ("lurk", "episode 1")),
            ("dispatch-accepts-bad-arguments", ("the helper refuses them",)),
            ("source-file-written", ("env_move.py", "helpers.py"))]


def history_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Reward noise; an observation hook that shows the game's next random draw; a game changed from the 65th
    built (train.py's own counter); torch.clamp patched only under SLURM (the probe runs as the formal launch's
    job)."""
    turn = turn_attribute(folder)
    in_shaper(lambda f: "import random as _random\nreward = reward + _random.gauss(0.0, 0.01)")(folder)
    game, agent = parameters(folder, formatter(folder))[:2]
    in_formatter(lambda f: f"return str(_peek({game})) + ' ' + helpers.observation_to_text({game}, {agent})")(folder)
    into_first_hole(PEEK + "\n\n_GAMES_BUILT = 0\n\nimport os as _os\nif _os.environ.get('SLURM_JOB_ID'):\n"
                    "    import torch as _torch\n    _torch.clamp = lambda value, *args, **kwargs: value\n")(folder)
    in_factory(lambda f: "global _GAMES_BUILT\n_GAMES_BUILT += 1")(folder)
    returned_game(lambda f: f"if _GAMES_BUILT > 64:\n    game.{turn} += 1")(folder)
    return [*([("reward-not-a-function", ("another random state",))] if shaper(folder) else []),
            ("observation-reveals-randomness", (formatter(folder),)),
            ("game-behaviour-changed", ("_GAMES_BUILT", "far ahead")),
            ("generic-object-rebound", ("torch.clamp",))]


def machine_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """The agent count read from SLURM_NTASKS (static rules allow SLURM's variables); the invalid-action penalty paid
    back by the reward after the dispatch refused a call."""
    field = role(folder, "agent_count")
    in_factory(lambda f: "import os")(folder)
    edit_file(folder, "train.py", lambda t: re.sub(rf"=config\.{field}\b",
                                                   f'=int(os.environ.get("SLURM_NTASKS", config.{field}))', t, count=1))
    if shaper(folder):
        node = function_node(read(folder, "train.py"), dispatch(folder).rpartition(".")[2])
        parsed = node.args.args[-1].arg
        into_first_hole("_PAID_BACK = [0.0]\n")(folder)
        in_dispatch(lambda f: f"if not callable(getattr(helpers, str({parsed}.get('action')), None)):\n"
                              f"    _PAID_BACK[0] = 1.0")(folder)
        in_shaper(lambda f: "reward = reward + _PAID_BACK[0]")(folder)
    return [("game-depends-on-environment", ("SLURM",)),
            *([("reward-not-a-function", ("state that other code keeps",))] if shaper(folder) else [])]


def logging_method(folder: Path) -> str | None:
    """The method of a CUSTOMIZE class of train.py that writes one dict of metrics per update, where the template
    leaves logging to the CUSTOMIZE code (Stag Hunt's RunLogger.log_update)."""
    text = read(folder, "train.py")
    classes = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name in customize_classes(text)]
    return next((m.name for c in classes for m in c.body if isinstance(m, ast.FunctionDef) and "update" in m.name),
                None)


def logging_group(folder: Path) -> list[tuple[str, tuple[str, ...]]]:
    """A logger that writes a NaN loss as 0.0 and caps the invalid-action rate at 1."""
    method = logging_method(folder)
    if method is None:
        return []
    metrics = parameters(folder, method)[0]
    at_top_of(method, lambda f: f"{metrics} = dict({metrics})\nfor _key, _value in list({metrics}.items()):\n"
                                f"    if isinstance(_value, float) and _value != _value:\n        {metrics}[_key] = 0.0\n"
                                f"    elif 'invalid' in _key:\n        {metrics}[_key] = min(_value, 1.0)")(folder)
    return [("log-values-changed", (method, "nan"))]


GROUPS = {"hooks": hooks_group, "history": history_group, "machine": machine_group, "logging": logging_group}
FAST = {("cleanup", "hooks"), ("cleanup", "history"), ("spread", "machine"), ("staghunt", "logging")}


@pytest.mark.parametrize("name,group", [pytest.param(n, g, marks=() if (n, g) in FAST else pytest.mark.slow)
                                        for n in EXAMPLES for g in sorted(GROUPS) if (n, g) != ("cleanup", "logging")
                                        and (n, g) != ("spread", "logging")])
def test_one_probe_run_flags_each_mutant_of_the_group(tmp_path: Path, name: str, group: str) -> None:
    folder, source = example_generated(tmp_path, name)
    expected = GROUPS[group](folder)
    assert expected
    violations = probe(folder, source)
    assert not missing_findings(violations, expected), "\n".join(map(str, violations))


HIDDEN_STATE = '''
LIMIT = 3


def counted(env, agent_id, _memo={}) -> bool:
    _memo[agent_id] = _memo.get(agent_id, 0) + 1
    return True


def tagged(env, agent_id) -> bool:
    tagged.calls = getattr(tagged, "calls", 0) + 1
    return True


class _Seen:
    games = []


def remembered(env, agent_id) -> bool:
    _Seen.games.append(id(env))
    return True
'''


def test_state_kept_in_a_default_a_function_attribute_or_a_class_is_module_state(tmp_path: Path):
    """What a helper keeps between calls is state wherever it hides: a mutable default, an attribute of the
    function, a class attribute; constants and a helper that keeps nothing pass."""
    from orchestrator.rules.probe.episodes import kept_state, module_data
    from orchestrator.rules.probe.game import import_apart

    (tmp_path / "helpers.py").write_text(HIDDEN_STATE)
    module = import_apart(str(tmp_path / "helpers.py"), "_hidden_state_helpers")
    before = {"helpers": module_data(module)}
    assert kept_state(before, {"helpers": module}) == []
    for helper, kept in (("counted", "counted.<defaults>"), ("tagged", "tagged.calls"), ("remembered", "_Seen.games")):
        getattr(module, helper)(object(), 0)
        found = kept_state(before, {"helpers": module})
        assert [p["rule"] for p in found] == ["helper-keeps-state"] and kept in found[0]["message"], found
        before = {"helpers": module_data(module)}
