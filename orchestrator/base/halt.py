"""A test hook for killing the orchestrator at an exact moment, not after a guessed sleep.

With ``ORCHESTRATOR_HALT_AT=KIND:KEY[:N]`` and ``ORCHESTRATOR_HALT_FILE`` in the environment, the N-th
(default: first) `halt_point(KIND, KEY)` this process reaches writes that file and blocks, so a test
can poll for the file and send its signal. Points: ``llm_answer:TAG`` and ``commit:NODE`` (journaled),
``checkpoint:NEXT_NODE`` (a checkpoint on disk), ``job_start:FOLDER`` / ``job_end:FOLDER`` (a training
job), ``execute:PROGRAM`` (a check's subprocess started), ``run_json:STATUS`` (run.json written),
``graph_end:STATUS`` (the graph has ended, run.json not yet updated). Unset, as always outside tests, it does nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HALT_AT_ENV = "ORCHESTRATOR_HALT_AT"
HALT_FILE_ENV = "ORCHESTRATOR_HALT_FILE"
HALT_MAX_S = 600.0
_seen: dict[str, int] = {}


def halt_point(kind: str, key: str) -> None:
    wanted = os.environ.get(HALT_AT_ENV)
    if not wanted:
        return
    want_kind, _, rest = wanted.partition(":")
    want_key, _, nth = rest.partition(":")
    if (want_kind, want_key) != (kind, key):
        return
    _seen[wanted] = _seen.get(wanted, 0) + 1
    if _seen[wanted] != int(nth or 1):
        return
    Path(os.environ[HALT_FILE_ENV]).write_text(f"{kind}:{key} pid={os.getpid()}\n")
    deadline = time.monotonic() + HALT_MAX_S
    while time.monotonic() < deadline:  # until the test's signal arrives
        time.sleep(0.05)
    os._exit(99)
