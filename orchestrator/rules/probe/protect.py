"""The researcher's files kept as they are while generated code runs (the probe, the training check).

An audit hook refuses, and notes, any write to the folder's source-of-truth files (`env_move.py`,
`grpo_config.py`, `grpo_template.py`): an open for writing, a remove, rename, replace, truncate, chmod or utime
of one, whatever code asked for it. The static rule (rules/machinery.py) reads the paths a text spells; this one
sees the paths code builds at run time. The generated file whose frame asked is named when there is one.

- source-file-written: nothing the generated code runs writes a file of the source of truth.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from orchestrator.rules.probe.values import violation

SOURCE_FILES = ("env_move.py", "grpo_config.py", "grpo_template.py")
GENERATED_FILES = ("helpers.py", "prompt_template.py", "train.py")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.remove": (0,), "os.rename": (0, 1), "os.replace": (0, 1), "os.truncate": (0,),
                "os.chmod": (0,), "os.utime": (0,), "os.link": (1,), "os.symlink": (1,), "shutil.move": (0, 1),
                "shutil.copyfile": (1,), "shutil.rmtree": (0,)}


@dataclass
class Guard:
    protected: frozenset[str]  # real paths
    attempts: list[tuple[str, str, str]] = field(default_factory=list)  # (event, file written, generated file)

    def __call__(self, event: str, args: tuple) -> None:
        if event == "open":
            if len(args) < 3 or not self._writes(args[1], args[2]):
                return
            paths = [args[0]]
        elif event in _PATH_EVENTS:
            paths = [args[i] for i in _PATH_EVENTS[event] if i < len(args)]
        else:
            return
        hit = next((p for p in (self._real(p) for p in paths) if p in self.protected), None)
        if hit is None:
            return
        self.attempts.append((event, os.path.basename(hit), asking_file()))
        raise PermissionError(f"{os.path.basename(hit)} is the researcher's file: generated code never writes it")

    @staticmethod
    def _writes(mode: object, flags: object) -> bool:
        return (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))

    @staticmethod
    def _real(path: object) -> str:
        try:
            return os.path.realpath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
        except (TypeError, ValueError):
            return ""

    def violations(self, when: str) -> list[dict]:
        if not self.attempts:
            return []
        event, written, who = self.attempts[0]
        return [violation("source-file-written", who or "train.py",
                          f"{who or 'the generated code'} tried to write {written} ({event}) {when}; {written} is a "
                          f"file of the researcher's source of truth and generated code never writes it (the probe "
                          f"refused the write)")]


def asking_file() -> str:
    """The innermost generated file on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.basename(frame.f_code.co_filename)
        if name in GENERATED_FILES:
            return name
        frame = frame.f_back
    return ""


def protect(folder: str) -> Guard:
    """Refuse, from now on in this process, writes to the source-of-truth files of `folder`."""
    guard = Guard(frozenset(os.path.realpath(os.path.join(folder, name)) for name in SOURCE_FILES))
    sys.addaudithook(guard)
    return guard
