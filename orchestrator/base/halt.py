"""A test hook for stopping the orchestrator at an exact moment, not after a guessed sleep.

With ``ORCHESTRATOR_HALT_AT=KIND:KEY[:N][,KIND:KEY[:N]...]`` and ``ORCHESTRATOR_HALT_FILE`` in the environment,
the N-th (default: first) `halt_point(KIND, KEY)` of each listed point this process reaches writes that file
(``KIND:KEY pid=PID``, replacing what an earlier point wrote) and blocks, so a test can poll for the file and
send its signal, or change the machine (fill a disk) and remove the file: the process then goes on. Points:
``llm_answer:TAG`` and ``commit:NODE`` (journaled), ``writes:NODE`` (a node's writes saved, its checkpoint not
yet), ``checkpoint:NEXT_NODE`` (a checkpoint on disk), ``job_start:FOLDER`` / ``job_end:FOLDER`` (a training
job), ``execute:PROGRAM`` (a check's subprocess started), ``run_json:STATUS`` (run.json written),
``graph_end:STATUS`` (the graph has ended, run.json not yet updated), ``stop:STATUS`` (the run is stopping,
its books not yet written). Unset, as always outside tests, it does nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HALT_AT_ENV = "ORCHESTRATOR_HALT_AT"
HALT_FILE_ENV = "ORCHESTRATOR_HALT_FILE"
HALT_MAX_S = 600.0
_seen: dict[str, int] = {}


def halting(kind: str) -> bool:
    """Whether a point of `kind` is asked for: a hook that costs work to find its key asks first."""
    return any(point.startswith(f"{kind}:") for point in os.environ.get(HALT_AT_ENV, "").split(","))


def halt_point(kind: str, key: str) -> None:
    wanted = os.environ.get(HALT_AT_ENV)
    if not wanted:
        return
    for point in wanted.split(","):
        want_kind, _, rest = point.partition(":")
        want_key, _, nth = rest.partition(":")
        if (want_kind, want_key) != (kind, key):
            continue
        _seen[point] = _seen.get(point, 0) + 1
        if _seen[point] == int(nth or 1):
            _halt(Path(os.environ[HALT_FILE_ENV]), f"{kind}:{key} pid={os.getpid()}\n")


def _halt(marker: Path, text: str) -> None:
    """Write the marker whole, then wait until the test removes it (go on) or signals this process."""
    staged = marker.with_name(f".{marker.name}.{os.getpid()}")
    staged.write_text(text)
    os.replace(staged, marker)
    deadline = time.monotonic() + HALT_MAX_S
    while time.monotonic() < deadline:
        if not marker.exists():
            return
        time.sleep(0.05)
    os._exit(99)
