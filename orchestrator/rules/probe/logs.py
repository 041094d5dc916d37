"""The training's CUSTOMIZE logging hook, judged by behaviour ("train.logs contains training statistics like loss,
eval, lr, gradNorm"; the monitor reads its anomalies from what is written there).

- log-values-changed: a logging hook the CUSTOMIZE code writes (a method of a CUSTOMIZE class, or a CUSTOMIZE
  function, taking one dict of metrics) writes the values it is given as they are: given a NaN loss and grad norm
  and out-of-range values (an invalid-action rate of 1.75, a negative KL, a clip ratio above 1), what it writes
  for those keys is NaN (or null) and those numbers, never a 0.0 or a capped rate. It runs with the config's
  folders in a scratch folder, where alone it may write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from orchestrator.rules.probe.effects import Callee
from orchestrator.rules.probe.values import ProbeTimeout, call, seed_everything, violation

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
def timed(seconds: float) -> Iterator[None]:
    def stop(signum, frame):
        raise ProbeTimeout("the logging hook did not return in time")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
