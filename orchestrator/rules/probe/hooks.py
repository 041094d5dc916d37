"""The training's CUSTOMIZE hooks around the game, judged by behaviour: the observation it shows an agent and the
reward it trains on ("Use observation_to_text from helpers.py in format_observation"; "the training reward of one
agent for one game step, from the game's reward and info").

- observation-changes-game: the training's observation function (the CUSTOMIZE function of (game, agent) that
  returns text) leaves the game as it found it; what observation_to_text itself changes and what the game's own
  queries change (a game that caches what it shows) aside.
- observation-reveals-randomness: neither it nor observation_to_text shows a draw of the game's random generator
  that has not happened: on two copies of one state whose random generators (the game's own, and Python's,
  numpy's and torch's global ones) are in other states, the text is the same. A copy of the game's generator
  drawn ahead ("the next apple grows at (3,4)") shows the future to the agent.
- log-values-changed: a logging hook the CUSTOMIZE code writes (a method of a CUSTOMIZE class, or a CUSTOMIZE
  function, taking one dict of metrics) writes the values it is given as they are: given a NaN loss and grad norm
  and out-of-range values (an invalid-action rate of 1.75, a negative KL, a clip ratio above 1), what it writes
  for those keys is NaN (or null) and those numbers, never a 0.0 or a capped rate: the monitor's anomalies are
  read from what it writes. Run with the config's folders in a scratch folder, where alone it may write.
- reward-not-a-function: the shaped reward (the CUSTOMIZE function of (reward, info, agent) that returns a
  number) is a function of the game's reward and info: the same arguments give the same number whatever was
  called before (no state kept between calls, none that other code sets: a refused call's penalty paid back),
  under any random state (no noise), and it opens no file (no bonus read from the side). Judged on the rewards
  and infos the game's own steps return and on a few made ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.rules.probe.effects import Board, Callee, find, flat
from orchestrator.rules.probe.game import is_reset_like, public_methods
from orchestrator.rules.probe.replicas import state
from orchestrator.rules.probe.values import (ProbeTimeout, attributes, call, canonical, covered, differences, guarded,
                                             rng_state, seed_everything, short, show_path, violation)

RESEED = 987_654
OTHER_SEED = 1  # the probe's calls run under seed 0
MOST_OBJECTS = 2000
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


# ---------------------------------------------------------------- random generators

def generators(game: Any) -> list[Any]:
    """The random generators a game holds (Python's, numpy's, torch's), found through its attributes."""
    found, queue, seen = [], [game], set()
    while queue and len(seen) < MOST_OBJECTS:
        value = queue.pop(0)
        if id(value) in seen or value is None or isinstance(value, (bool, int, float, str, bytes, type,
                                                                   types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(value))
        if isinstance(value, random.Random) or rng_state(value) is not None:
            found.append(value)
            continue
        if isinstance(value, dict):
            queue += list(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            queue += list(value)
        else:
            queue += list((attributes(value) or {}).values())
    return found


def reseed(generator: Any) -> bool:
    """Put a generator in another state (RESEED); False when it cannot be."""
    try:
        if isinstance(generator, random.Random):
            generator.seed(RESEED)
        elif hasattr(generator, "bit_generator"):  # numpy's Generator
            generator.bit_generator.state = type(generator.bit_generator)(RESEED).state
        elif hasattr(generator, "manual_seed"):  # torch's Generator
            generator.manual_seed(RESEED)
        elif hasattr(generator, "seed"):  # numpy's RandomState
            generator.seed(RESEED)
        else:
            return False
    except Exception:  # a generator of a kind not known here: not varied
        return False
    return True


def call_seeded(function: Callable, *args: Any, seed: int) -> tuple[Any, BaseException | None]:
    """values.call, with the global random generators seeded `seed` instead of 0."""
    try:
        with guarded():
            seed_everything(seed)
            return function(*args), None
    except (Exception, ProbeTimeout, SystemExit) as exc:
        return None, exc


# ---------------------------------------------------------------- the observation

def check_observation_hook(candidates: list[Callee], board: Board, observe: Callable, agents: list[int]) -> list[dict]:
    index = len(board.positions) - 1
    formatter = find(candidates, 2, lambda: (board.copy(index), agents[0]), lambda r: isinstance(r, str))
    problems = []
    if formatter is not None:
        for agent in agents:
            game = board.copy(index)
            before = state(game)
            call(formatter.function, game, agent)
            allowed = board.footprint(index, agent).reads + queried(board, index)
            changed = [p for p in differences(before, state(game)) if not covered(p, allowed)]
            if changed:
                problems.append(violation("observation-changes-game", "train.py",
                                          f"{formatter.label}(game, {agent}) changed the game it shows "
                                          f"({', '.join(show_path(p) for p in changed[:3])}); what an agent sees is "
                                          f"read from the game, never written to it (nor drawn from its random "
                                          f"generator)"))
                break
    shown = [(formatter.label, formatter.function, "train.py")] if formatter is not None else []
    for label, function, file in shown + [("observation_to_text", observe, "helpers.py")]:
        revealed = reveals(function, board, index, agents)
        if revealed:
            problems.append(violation("observation-reveals-randomness", file,
                                      f"{label}(game, {revealed[0]}) shows random draws that have not happened: on "
                                      f"the same board with {revealed[1]} in another state it returns "
                                      f"{short(revealed[3], 120)} instead of {short(revealed[2], 120)}; an agent sees "
                                      f"the game as it is, never what its random generator will do next"))
            break
    return problems


def queried(board: Board, index: int) -> list[tuple]:
    """What the game's own queries change (a `render()` that keeps what it drew): its public methods without
    arguments, its step and its resets aside."""
    play, paths = board.play, []
    for name, (_, required) in public_methods(play.cls).items():
        if required == 0 and name != play.stepper and not is_reset_like(name):
            game = board.copy(index)
            before = state(game)
            if call(getattr(game, name), seconds=2.0)[1] is None:
                paths += differences(before, state(game))
    return paths


def reveals(function: Callable, board: Board, index: int, agents: list[int]) -> tuple[int, str, str, str] | None:
    """(agent, which generator, text, other text) where `function`'s text depends on a random state."""
    for agent in agents:
        plain, error = call(function, board.copy(index), agent)
        if error is not None or not isinstance(plain, str):
            return None
        other = board.copy(index)
        if any([reseed(g) for g in generators(other)]):
            varied, error = call(function, other, agent)
            if error is None and isinstance(varied, str) and flat(varied) != flat(plain):
                return agent, "the game's random generator", plain, varied
        varied, error = call_seeded(function, board.copy(index), agent, seed=OTHER_SEED)
        if error is None and isinstance(varied, str) and flat(varied) != flat(plain):
            return agent, "the global random generators (Python's, numpy's, torch's)", plain, varied
    return None


# ---------------------------------------------------------------- the reward

def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) or (
        hasattr(value, "item") and getattr(value, "shape", None) == () and not isinstance(value, type))


@dataclass
class FileOpens:
    """Files opened while a hook runs (code an import loads aside)."""
    active: bool = False
    opened: list[str] = field(default_factory=list)
    installed: bool = False

    def __call__(self, event: str, args: tuple) -> None:
        if self.active and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if not path.endswith(CODE_SUFFIXES) and not path.startswith(("/proc/", "/dev/", "/sys/")):
                self.opened.append(path)

    def install(self) -> None:
        if not self.installed:
            sys.addaudithook(self)
            self.installed = True


OPENS = FileOpens()


def reward_inputs(board: Board) -> list[tuple[Any, dict, int]]:
    """(reward, info, agent): from the game's own steps where they return (observations, rewards, done, info),
    and a few made ones."""
    play, found = board.play, []
    for position in range(len(board.positions)):
        game = board.copy(position)
        result, error = play.play_turn(game, board.positions[position].turn) if play.stepper else (None, None)
        if error is None and isinstance(result, tuple) and len(result) >= 4 and isinstance(result[3], dict):
            rewards, info = result[1], result[3]
            for agent in play.agents:
                reward = rewards.get(agent) if isinstance(rewards, dict) else rewards[agent] if isinstance(
                    rewards, (list, tuple)) and agent < len(rewards) else rewards
                if is_number(reward):
                    found.append((reward, info, agent))
    made = [(1.0, {}, play.agents[0]), (-0.5, {"events": ["probe"]}, play.agents[-1]), (0.0, {}, play.agents[0])]
    return found[:6] + made


def find_shaper(candidates: list[Callee], inputs: list[tuple[Any, dict, int]]) -> Callee | None:
    for candidate in (c for c in candidates if c.arity == 3):
        result, error = call(candidate.function, *inputs[-1])
        if error is None and is_number(result):
            return candidate
    return None


def outputs(function: Callable, inputs: list[tuple[Any, dict, int]], seed: int = 0) -> list[Any]:
    found = []
    for reward, info, agent in inputs:
        result, error = call_seeded(function, reward, dict(info), agent, seed=seed)
        found.append(canonical(result) if error is None else f"<raises {type(error).__name__}>")
    return found


@dataclass
class RewardCheck:
    """reward-not-a-function, from the probe's first calls (`start`) to its end (`finish`)."""
    shaper: Callee | None
    inputs: list[tuple[Any, dict, int]]
    first: list[Any] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)

    def start(self) -> None:
        if self.shaper is None:
            return
        OPENS.install()
        OPENS.active, OPENS.opened = True, []
        try:
            self.first = outputs(self.shaper.function, self.inputs)
            again = outputs(self.shaper.function, list(reversed(self.inputs)))[::-1]
        finally:
            OPENS.active = False
        if OPENS.opened:
            self.report(f"opens {OPENS.opened[0]} while it runs: a reward read from a file is none of the game's")
        elif again != self.first:
            self.report(self.changed(again, "when called again with the same arguments (it keeps state between calls)"))
        else:
            noisy = outputs(self.shaper.function, self.inputs, seed=OTHER_SEED)
            if noisy != self.first:
                self.report(self.changed(noisy, "under another random state (it adds randomness of its own)"))

    def finish(self) -> list[dict]:
        if self.shaper is not None and not self.problems:
            later = outputs(self.shaper.function, self.inputs)
            if later != self.first:
                self.report(self.changed(later, "after the probe ran the training's other functions (a refused call, "
                                                "a dispatch, whole episodes): it reads state that other code keeps"))
        return self.problems

    def changed(self, now: list[Any], when: str) -> str:
        index = next(i for i, (a, b) in enumerate(zip(self.first, now)) if a != b)
        reward, info, agent = self.inputs[index]
        return (f"returns {short(now[index])} instead of {short(self.first[index])} for ({reward!r}, "
                f"{short(info, 80)}, {agent}) {when}")

    def report(self, detail: str) -> None:
        self.problems.append(violation("reward-not-a-function", "train.py",
                                       f"{self.shaper.label}(reward, info, agent) is not a function of the game's "
                                       f"reward and info: it {detail}; shape the reward from its arguments only (no "
                                       f"file, no randomness, nothing kept between calls)"))



# ---------------------------------------------------------------- the logging hook

METRICS = {"step": 7, "update": 7, "episodes": 13, "episode": 13, "loss": float("nan"), "grad_norm": float("nan"),
           "gradNorm": float("nan"), "learning_rate": 2.5e-06, "lr": 2.5e-06, "kl": -3.5, "clip_ratio": 1.25,
           "clip_fraction": 1.25, "reward": -123.25, "reward_mean": -123.25, "reward_std": 4.5,
           "frac_reward_zero_std": 0.5, "invalid_action_rate": 1.75, "completion_mean_length": 11.5,
           "completion_clipped_ratio": 0.25, "num_tokens": 99, "step_time": 0.5}
# what a key's name holds -> the value it was given (None: NaN)
EXPECTED = (("loss", None), ("grad", None), ("invalid", 1.75), ("kl", -3.5), ("clip_ratio", 1.25),
            ("clip_fraction", 1.25))
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|NaN|NAN|null|None|inf|-inf|Infinity|-Infinity"
PATH_WORDS = ("dir", "path", "folder", "file", "output", "log")
LOG_SECONDS = 5.0


class Metrics(dict):
    """The metrics a logging hook is given; a key it asks for that is not here reads 0."""

    def __missing__(self, key: Any) -> Any:
        return 0


@dataclass
class Scratch:
    """Writes allowed only below `folder` (and sockets and processes refused), while `active`."""
    folder: str = ""
    active: bool = False
    installed: bool = False

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        refused = event in ("socket.connect", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                            "os.fork", "os.kill")
        if event == "open" and len(args) >= 3 and args[0] is not None and (
                (isinstance(args[1], str) and any(c in args[1] for c in "wax+")) or
                (isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))):
            refused = not self.below(args[0])
        elif event in ("os.remove", "os.rename", "os.replace", "os.mkdir", "os.rmdir", "shutil.rmtree") and args:
            refused = not self.below(args[0])
        if refused:
            raise PermissionError(f"the probe lets a logging hook write only into its scratch folder ({event})")

    def below(self, path: Any) -> bool:
        try:
            return os.path.realpath(os.fsdecode(path)).startswith(self.folder + os.sep)
        except (TypeError, ValueError):
            return False

    def install(self) -> None:
        if not self.installed:
            sys.addaudithook(self)
            self.installed = True


SCRATCH = Scratch()


def scratch_config(config: Any, folder: str) -> Any:
    """A copy of the config whose folder and file fields point into `folder` (its validation not run again)."""
    if not dataclasses.is_dataclass(config):
        return config
    made = object.__new__(type(config))  # not copy.copy: copyreg would note __slotnames__ on the config's class
    for f in dataclasses.fields(config):
        value = getattr(config, f.name, None)
        if isinstance(value, str) and any(word in f.name.lower() for word in PATH_WORDS):
            value = (os.path.join(folder, os.path.basename(value.rstrip("/")) or f.name) if "file" in f.name.lower()
                     else folder)
        object.__setattr__(made, f.name, value)
    return made


def logging_hooks(train: types.ModuleType, classes: list[str], candidates: list[Callee],
                  config: Any) -> list[tuple[str, Callable]]:
    """(label, function of one dict) for each method of a CUSTOMIZE class (made with the config, or with nothing)
    and each CUSTOMIZE function taking one argument."""
    found = []
    for name in classes:
        cls = getattr(train, name, None)
        if not isinstance(cls, type):
            continue
        instance = None
        for args in ((config,), ()):
            instance, error = call(cls, *args)
            if error is None:
                break
        if instance is None:
            continue
        for member, raw in vars(cls).items():
            if isinstance(raw, types.FunctionType) and not member.startswith("_") and required(raw) == 2:
                found.append((f"{name}.{member}", getattr(instance, member)))
    return found + [(c.label, c.function) for c in candidates if c.arity == 1 and "." not in c.label]


def required(function: types.FunctionType) -> int:
    params = inspect.signature(function).parameters.values()
    return sum(1 for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def written(folder: str) -> dict[str, str]:
    texts = {}
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                with open(os.path.join(root, name), errors="replace") as handle:
                    texts[os.path.join(root, name)] = handle.read()
            except OSError:
                continue
    return texts


def check_logging(train: types.ModuleType, classes: list[str], candidates: list[Callee], config: Any) -> list[dict]:
    """log-values-changed, for each logging hook that wrote any of the values it was given."""
    if config is None or not (classes or any(c.arity == 1 for c in candidates)):
        return []
    folder = os.path.realpath(tempfile.mkdtemp(prefix="probe-logs-"))
    here = os.getcwd()
    SCRATCH.install()
    SCRATCH.folder, SCRATCH.active = folder, True
    out = io.StringIO()
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            hooks = logging_hooks(train, classes, candidates, scratch_config(config, folder))
            for label, function in hooks:
                before, shown = written(folder), out.tell()
                seed_everything()
                try:
                    with timed(LOG_SECONDS):
                        function(Metrics(METRICS))
                except (Exception, ProbeTimeout):
                    continue
                after = written(folder)
                text = "\n".join(after[k][len(before.get(k, "")):] for k in after) + out.getvalue()[shown:]
                problem = changed_value(text)
                if problem:
                    return [violation("log-values-changed", "train.py",
                                      f"{label}(metrics) was given {problem[0]} = {problem[1]} and wrote "
                                      f"{problem[2]!r}: a logging hook writes the values it is given as they are (a "
                                      f"NaN as NaN, a rate above 1 as it is), so that the monitor sees what the "
                                      f"training did; do not replace, round away or cap them")]
    finally:
        SCRATCH.active = False
        os.chdir(here)
        shutil.rmtree(folder, ignore_errors=True)
    return []


def changed_value(text: str) -> tuple[str, str, str] | None:
    """(key, the value given, what was written) for the first key written with another value than it was given."""
    for word, expected in EXPECTED:
        pattern = re.compile(rf"""["']?(\w*{word}\w*)["']?\s*[:=]\s*["']?({NUMBER})""", re.I)
        pairs = pattern.findall(text)
        if pairs and not any(as_given(value, expected) for _, value in pairs):
            key, value = pairs[0]
            return key, "nan" if expected is None else repr(expected), value
    return None


def as_given(value: str, expected: float | None) -> bool:
    if expected is None:
        return value.lower() in ("nan", "null", "none")
    try:
        return math.isclose(float(value), expected, rel_tol=0.05)
    except ValueError:
        return False


@contextlib.contextmanager
def timed(seconds: float):
    def stop(signum, frame):
        raise ProbeTimeout("the logging hook did not return in time")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
