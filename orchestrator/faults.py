"""Where a failure's cause lies: in the code, or in the machine it ran on. Asked wherever a check fails,
before any fix is paid for (orchestrator.checks), and of an error the orchestrator itself meets (runner).

A fix edits generated files; it cannot set a variable, install a package, free a disk or give git a name.
`cause_of` reads a failed process's output and answers `code`, or `environment` with one line that says what
to set or install. Two kinds of machine fault:

- a state of the machine that no edit cures (a full disk, a read-only file system, a GPU driver that does not
  match torch's CUDA build, git without an identity): the machine's, wherever the traceback points;
- a fault the code can cause as well (an environment variable it reads, a port it binds, a path it may not
  open): the machine's only when no traceback frame is in the generated or the researcher's files (the
  launcher failed before the script ran, or a library on its own). A missing module is judged by who imports
  it: the code's when a generated file does and the researcher's files do not (the model chose it), else the
  machine's (the researcher's code needs it, or no file of the run names it: a launcher, a plugin, a broken
  install).

A fault of the second kind that is the code's goes to the fix with the machine's part stated (`Cause.fact`).
Only what says why a process failed is read (exception lines, a shell's or git's own error lines), never a
warning: torch warns "address already in use" about IPv6 on healthy machines.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from orchestrator.base.execution import TRACEBACK_HEAD, unprefixed
from orchestrator.rules import FOLDER_FILES, GENERATED_FILES, SOURCE_FILES

CODE, ENVIRONMENT = "code", "environment"


@dataclass(frozen=True)
class Cause:
    """Where a failure comes from: the code (a question for the fix) or the machine (a line for the user)."""

    origin: str  # CODE or ENVIRONMENT
    fault: str = ""  # the machine fault found: no_space, read_only, driver_mismatch, git_identity, missing_module, ...
    remedy: str = ""  # ENVIRONMENT: one line, what to set or install
    fact: str = ""  # CODE: the machine's part in it, for the fix's evidence ('' when the machine plays none)

    @property
    def machine(self) -> bool:
        return self.origin == ENVIRONMENT


_WARNING = re.compile(r"Warning\b|^\[?W\d{4} |^\[W ")
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+', re.M)
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]([^/\\]+)")


def failure_lines(text: str) -> list[str]:
    """The lines that say why a process failed: each exception line, and a shell's, git's or a launcher's own
    error lines; not traceback frames or their code (indented), not warnings."""
    return [line for line in unprefixed(text).splitlines()
            if line.strip() and not line[0].isspace() and line.strip() != TRACEBACK_HEAD
            and not _WARNING.search(line)]


def own_frames(text: str) -> list[str]:
    """Traceback frames in the generated or the researcher's files (their paths), not in installed packages."""
    return [path for path in _FRAME.findall(unprefixed(text))
            if PurePath(path).name in FOLDER_FILES and not _INSTALLED.search(path)]


def _package_of(path: str) -> str:
    found = _INSTALLED.search(path)
    return found.group(1).removesuffix(".py") if found else PurePath(path).name


def _path_in(line: str) -> str:
    """The path an error line names (`[Errno 28] ...: '/x/y'`, `touch: cannot touch '/x/y': ...`), or ''."""
    found = (re.search(r":\s*'([^']+)'\s*$", line) or re.search(r"'(/[^']+)'", line)
             or re.search(r"(?<![\w.])(/[^\s:']+)", line))
    return found.group(1) if found else ""


def _first(pattern: re.Pattern[str], lines: Iterable[str]) -> str:
    return next((line for line in lines if pattern.search(line)), "")


# --- states of the machine that no edit cures --------------------------------------------------------------

_NO_SPACE = re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]|"
                       r"database or disk is full")
_READ_ONLY = re.compile(r"Read-only file system|\[Errno 30\]")
_DRIVER_TOO_OLD = re.compile(r"NVIDIA driver on your system is too old|CUDA driver version is insufficient|"
                             r"cudaErrorInsufficientDriver|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")
_DRIVER_LIBRARY = re.compile(r"Driver/library version mismatch|couldn't communicate with the NVIDIA driver")
_GIT_IDENTITY = re.compile(r"Author identity unknown|Please tell me who you are|unable to auto-detect email address|"
                           r"empty ident name")


def _no_space(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    line = _first(_NO_SPACE, lines)
    if not line:
        return ""
    path = _path_in(line)
    if path:
        return (f"the disk holding {path} is full (or over its quota): free space there (`df -h "
                f"{PurePath(path).parent}` shows what is left)")
    return "a disk this run writes to is full (or over its quota): free space there (`df -h` shows which)"


def _read_only(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    line = _first(_READ_ONLY, lines)
    if not line:
        return ""
    path = _path_in(line) or "a folder this run writes to"
    return f"{path} is on a read-only file system: remount it writable, or move the project to a writable disk"


def _driver_mismatch(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    if _first(_DRIVER_LIBRARY, lines):
        return ("the NVIDIA kernel module and its libraries differ (a driver updated without a reboot): reboot, or "
                "reload the nvidia module; `nvidia-smi` must answer")
    if _first(_DRIVER_TOO_OLD, lines):
        return ("the NVIDIA driver is older than torch's CUDA build needs: install the torch build for this driver "
                "(`nvidia-smi` shows the CUDA version it supports; see pytorch.org) or update the driver")
    return ""


def _git_identity(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    if not _first(_GIT_IDENTITY, lines):
        return ""
    return ('git has no identity for this user: `git config --global user.name "Your Name"` and '
            '`git config --global user.email you@example.com`')


# --- faults the code can cause as well ---------------------------------------------------------------------

_GOMP = re.compile(r"Invalid value for environment variable (\w+)")
_UNREADABLE = re.compile(r"^\w*Error: (invalid literal for int\(\) with base \d+|could not convert string to float): "
                         r"'(.*)'$")
_QUOTED_NAME = re.compile(r"""["']([A-Z][A-Z0-9_]{2,})["']""")
_PORT_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use|errno: 98\b|\bport\b.{0,60}\b(?:in use|utiliz)")
_PORT = re.compile(r"\bport\W{0,3}(\d{2,5})\b")
_NO_PERMISSION = re.compile(r"Permission denied|\[Errno 13\]")


def _bad_variable(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    """An environment variable whose value its reader could not parse (`OMP_NUM_THREADS=` read by a launcher)."""
    names = [name for line in lines for name in _GOMP.findall(line)]
    unreadable = next((m for m in map(_UNREADABLE.search, lines) if m), None)
    if unreadable:
        names += [name for name in _QUOTED_NAME.findall(unprefixed(text)) if environ.get(name) == unreadable.group(2)]
    name = next((n for n in dict.fromkeys(names) if n in environ), "")
    if not name:
        return ""
    frames = _FRAME.findall(unprefixed(text))
    reader = _package_of(frames[-1]) if unreadable and frames else "OpenMP (libgomp)"
    value = "empty" if not environ[name] else f"{environ[name]!r}"
    return (f"the environment variable {name} is set but {value}, which {reader} cannot read as a number: "
            f"`export {name}=1` or `unset {name}`")


def _port_in_use(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    line = _first(_PORT_IN_USE, lines)
    if not line:
        return ""
    port = _PORT.search(line)
    if port:
        number = port.group(1)
        return (f"port {number} is held by another process: stop it (`ss -ltnp | grep :{number}` names it), or give "
                f"the launch another port")
    return "a port the launch needs is held by another process (`ss -ltnp` lists them): stop it"


def _no_permission(lines: list[str], text: str, environ: Mapping[str, str]) -> str:
    line = _first(_NO_PERMISSION, lines)
    if not line:
        return ""
    found = _path_in(line)
    what = found or "a path this run uses"
    return (f"this user may not write or open {what}: give it access (`ls -ld "
            f"{PurePath(found).parent if found else '.'}` shows the owner and mode)")


_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def _imports(folder: Path | None, names: Iterable[str]) -> set[str]:
    """The absolute module names the files `names` in `folder` import (Python), or start with `-m` (shell)."""
    found: set[str] = set()
    for name in names:
        path = folder / name if folder is not None else None
        if path is None or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if not name.endswith(".py"):
            found |= set(re.findall(r"(?:-m|\bimport)\s+([A-Za-z_][\w.]*)", text))
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def _names(imports: set[str], module: str) -> bool:
    return any(m == module or module.startswith(f"{m}.") or m.startswith(f"{module}.") for m in imports)


def _local(folder: Path | None, top: str) -> bool:
    """A module of the run's own folder (or one of its files' names): a missing one is the code's to fix."""
    stems = {PurePath(name).stem for name in FOLDER_FILES}
    return top in stems or (folder is not None and ((folder / f"{top}.py").exists() or (folder / top).is_dir()))


def _missing_module(lines: list[str], text: str, folder: Path | None) -> Cause | None:
    line = _first(_NO_MODULE, lines)
    if not line:
        return None
    module = _NO_MODULE.search(line).group(1)
    top = module.split(".")[0]
    if _local(folder, top):
        return Cause(CODE)
    generated = _imports(folder, (n for n in GENERATED_FILES if n not in SOURCE_FILES))
    researcher = [n for n in SOURCE_FILES if _names(_imports(folder, [n]), module)]
    python = sys.executable
    if _names(generated, module) and not researcher:
        return Cause(CODE, "missing_module", fact=(
            f"`{module}` is not installed (for {python}), and only generated code imports it: use what is "
            f"installed (the researcher's files show what they use), or do without it"))
    if module != top and importlib.util.find_spec(top) is not None:
        return Cause(ENVIRONMENT, "missing_module", f"the installed `{top}` has no `{module}` (too old for this "
                                                    f"code?): `{python} -m pip install -U {top}`")
    needs = (f"{', '.join(researcher)} import(s) it" if researcher
             else "an installed package imports it, no file of the run")
    return Cause(ENVIRONMENT, "missing_module", f"the module `{module}` is missing ({needs}): install the package "
                                                f"that provides it (`{python} -m pip install {top}` for most)")


Detector = Callable[[list[str], str, Mapping[str, str]], str]
ANYWHERE: tuple[tuple[str, Detector], ...] = (
    ("no_space", _no_space), ("read_only", _read_only), ("driver_mismatch", _driver_mismatch),
    ("git_identity", _git_identity))
WITHOUT_OWN_FRAMES: tuple[tuple[str, Detector], ...] = (
    ("bad_variable", _bad_variable), ("port_in_use", _port_in_use), ("no_permission", _no_permission))


def cause_of(output: str, folder: Path | None = None, environ: Mapping[str, str] | None = None) -> Cause:
    """Where the failure that `output` (a process's stderr, or a traceback) reports comes from. `folder` holds
    the run's generated and researcher's files (whose imports decide a missing module's case); `environ` is the
    environment the process inherited (default: this one's)."""
    environ = os.environ if environ is None else environ
    lines = failure_lines(output)
    for fault, detect in ANYWHERE:
        remedy = detect(lines, output, environ)
        if remedy:
            return Cause(ENVIRONMENT, fault, remedy)
    missing = _missing_module(lines, output, folder)
    if missing is not None:
        return missing
    own = bool(own_frames(output))
    for fault, detect in WITHOUT_OWN_FRAMES:
        remedy = detect(lines, output, environ)
        if remedy:
            return Cause(CODE, fault, fact=remedy) if own else Cause(ENVIRONMENT, fault, remedy)
    return Cause(CODE)


DISK_FAULTS = ("no_space", "read_only")


def disk_fault(exc: BaseException, folders: Iterable[Path] = ()) -> str:
    """The one-line remedy when `exc` (or an error it came from) is a full disk, a quota reached or a read-only file
    system, whatever raised it (a book's write, git, SQLite), naming the folder: the one its error names, else the
    first of `folders` that is on a file system in that state. '' when it is none of these."""
    text = "".join(traceback.format_exception(exc))
    lines = failure_lines(text)
    cause = cause_of(text)
    said = cause.machine and cause.fault in DISK_FAULTS
    if said and _path_in(_first(_NO_SPACE if cause.fault == "no_space" else _READ_ONLY, lines)):
        return cause.remedy
    for folder in folders:
        try:
            found = os.statvfs(folder)
        except OSError:
            continue
        if found.f_flag & os.ST_RDONLY and (not said or cause.fault == "read_only"):
            return _read_only([f"[Errno 30] Read-only file system: '{folder}'"], "", {})
        if found.f_bavail == 0 and (not said or cause.fault == "no_space"):
            return _no_space([f"[Errno 28] No space left on device: '{folder}'"], "", {})
    return cause.remedy if said else ""
