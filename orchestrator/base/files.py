"""Files a run writes: whole or not at all, and paths stored relative to the project root so that a copied
project resumes into itself.

A record appended to a log (claude.logs, events.jsonl, the journal) is whole or absent: a write that fails
(a full disk) is cut off again, and a record written after a line a kill cut short starts on a line of its own,
never glued to the cut one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_REL = "./"  # a path stored relative to the project root


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def append_whole(path: Path, text: str, *, sync: bool = False) -> None:
    """Append `text` (one or more whole lines) to `path`: all of it or, when the write fails (ENOSPC, EDQUOT, ...),
    none of it; with `sync`, on disk before this returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # the end of a record a kill cut short
            data = b"\n" + data
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            if sync:
                os.fsync(fd)
        except BaseException as exc:
            os.ftruncate(fd, size)  # frees what the partial write took
            if isinstance(exc, OSError) and exc.filename is None:  # say which file could not take it
                raise OSError(exc.errno, exc.strerror, str(path)) from exc
            raise
    finally:
        os.close(fd)


def to_disk(value: str, root: Path) -> str:
    """An absolute path inside `root` as "./REL"; anything else (model ids, outside paths) unchanged."""
    if not value or not Path(value).is_absolute():
        return value
    try:
        return _REL + Path(value).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return value


def from_disk(value: str, root: Path) -> str:
    """A path as `to_disk` stored it, absolute again under `root`; anything else unchanged."""
    return str(root / value[len(_REL):]) if isinstance(value, str) and value.startswith(_REL) else value


def project_root_of(run_dir: Path) -> Path:
    """The project root that holds a run's folder (PROJECT/runs/RUN_ID): what the paths stored in it are
    relative to."""
    return Path(run_dir).parent.parent


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file at `path`; None when it is missing, damaged or holds no object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def same_place(planned: object, found: object, root: Path) -> bool:
    """Whether `found`, an absolute path a job wrote down, is the absolute path `planned` (inside `root`) in another
    copy of the project: the same path below its own project root (a project copied or moved after the job ran)."""
    if not (isinstance(planned, str) and isinstance(found, str) and planned.startswith("/") and found.startswith("/")):
        return False
    try:
        below = Path(planned).resolve().relative_to(Path(root).resolve()).parts
    except ValueError:
        return False
    parts = Path(found).parts
    return bool(below) and len(parts) > len(below) and parts[-len(below):] == below
