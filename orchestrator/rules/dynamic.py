"""The dynamic layer: `probe/contract.py` runs the generated modules on a real game in a fresh
interpreter (never in the orchestrator's process), and its answer becomes import evidence or
violations of the contract."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.execution import ExecutionResult, execute
from orchestrator.rules.static import Violation

PROBE = Path(__file__).with_name("probe") / "contract.py"


@dataclass(frozen=True)
class ProbeAnswer:
    result: ExecutionResult
    import_failed: str = ""  # the first generated module that did not import
    traceback: str = ""
    violations: list[Violation] = field(default_factory=list)
    note: str = ""


def probe_folder(folder: Path, timeout_s: float = 300.0) -> ProbeAnswer:
    """Run the probe on `folder`; a probe that dies without answering is reported as an import failure."""
    result = execute([sys.executable, str(PROBE), str(folder.resolve())], folder, timeout_s=timeout_s)
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        return ProbeAnswer(result, import_failed="(probe)", traceback=result.stderr or result.stdout)
    if answer.get("import_failed"):
        return ProbeAnswer(result, import_failed=answer["import_failed"], traceback=answer.get("traceback", ""))
    violations = [Violation(v["rule"], v["file"], None, v["message"]) for v in answer.get("violations", [])]
    return ProbeAnswer(result, violations=violations, note=answer.get("note", ""))
