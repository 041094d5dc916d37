"""Files a run writes: whole or not at all, and paths stored relative to the project root so that a copied
project resumes into itself."""

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
