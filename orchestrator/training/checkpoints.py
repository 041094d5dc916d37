"""A formal attempt's checkpoints, found by name, and the one a restart after a fix begins from.

Whatever the template, a checkpoint is a folder below a formal attempt's folder named for the update it was saved
at (`checkpoint-300`, HF Trainer's convention; `step_300`, `ckpt300`, `global_step300`, `iter-300`), never one still
being written (`checkpoint-300.partial`, `.tmp`): only the template knows what makes one whole, and its own
`resume_from latest` chooses among them. The orchestrator needs the numbers only: has a chained job saved a newer
checkpoint than the one before it, and which checkpoint lies before the update where a serious anomaly showed.

`link_restart_point` makes a new attempt begin where the last one was still sound: the newest checkpoint of the
earlier attempt before update k is linked into the new attempt's folder, at the same place below it, so the
template's `resume_from latest` finds it there and nothing is copied (weights and optimizer states are large).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_NUMBERED = re.compile(r"(?:checkpoint|ckpt|step|global_step|iter|iteration|update|epoch)[-_]?(\d+)", re.I)


def checkpoints(output_folder: Path) -> list[tuple[int, Path]]:
    """(update, folder) of every checkpoint below `output_folder` (links included), oldest first."""
    found = []
    for folder in Path(output_folder).rglob("*") if Path(output_folder).is_dir() else []:
        match = _NUMBERED.fullmatch(folder.name)
        if match and folder.is_dir() and any(folder.iterdir()):
            found.append((int(match.group(1)), folder))
    return sorted(found, key=lambda item: (item[0], str(item[1])))


def latest_update(output_folder: Path) -> int | None:
    """The update of the newest checkpoint below `output_folder`; None when there is none."""
    found = checkpoints(output_folder)
    return found[-1][0] if found else None


def link_restart_point(earlier: Path, later: Path, before_update: int | None) -> tuple[int, Path] | None:
    """Link the newest checkpoint of the output folder `earlier` saved before `before_update` (any, when None) into
    the output folder `later`, at the same place below it; (its update, the link), or None when there is none."""
    found = [(update, folder) for update, folder in checkpoints(earlier)
             if before_update is None or update < before_update]
    if not found:
        return None
    update, folder = found[-1]
    link = Path(later) / folder.relative_to(earlier)
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():  # relative, so that a copy of the project links into itself
        os.symlink(os.path.relpath(folder.resolve(), link.parent.resolve()), link, target_is_directory=True)
    return update, link
