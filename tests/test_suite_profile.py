"""benchmarks/suite_profile.py sees every interpreter that ends without atexit's help: the probe's `os._exit`, a
training process stopped by SIGTERM; and sorts interpreters by what they are."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite_profile import SITECUSTOMIZE, kind_of  # noqa: E402

ENDINGS = {
    "exit": "pass",
    "_exit": "import os; os._exit(3)",
    "sigterm": "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
}


def test_each_way_an_interpreter_ends_leaves_one_record_with_its_cpu(tmp_path: Path):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = tmp_path / "interpreters.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SUITE_PROFILE_OUT": str(out),
           "PYTEST_CURRENT_TEST": "tests/test_x.py::test_y (call)"}
    codes = {how: subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode
             for how, code in ENDINGS.items()}
    assert codes == {"exit": 0, "_exit": 3, "sigterm": -signal.SIGTERM}  # the endings themselves unchanged
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["how"] for r in records] == list(ENDINGS)
    assert all(r["cpu"] > 0 and r["test"] == "tests/test_x.py::test_y (call)" for r in records)


def test_interpreters_are_sorted_by_what_they_run():
    def record(*argv: str, pid: int = 10) -> dict:
        return {"pid": pid, "argv": list(argv)}

    launcher = "/venv/lib/python3.11/site-packages/accelerate/commands/launch.py"
    assert kind_of(record("train.py", "--episodes", "4"), set()) == "training"
    assert kind_of(record("/work/orchestrator/rules/probe/__main__.py", "/tmp/g"), set()) == "probe"
    assert kind_of(record(launcher, "--cpu"), set()) == "launcher"
    assert kind_of(record("/work/orchestrator/__main__.py", "resume", "r1"), set()) == "orchestrator command"
    assert kind_of(record("-c", pid=7), {7}) == "pytest (controller, workers)"
    assert kind_of(record("-c", pid=8), {7}) == "other"
