"""Rules for the generated launch_training.sh (Step 4 of the brief: "a SLURM job script that uses
`accelerate launch` for training of train.py")."""

from __future__ import annotations

import re
import subprocess

from orchestrator.rules.violation import Violation

NAME = "launch_training.sh"
_ACCELERATE = re.compile(r"accelerate\s+launch|accelerate\.commands\.launch")
_PROCESSES = re.compile(r"--num_processes[ =]+(\d+)")


def check_launch(text: str) -> list[Violation]:
    """bash -n parses it; #SBATCH directives; accelerate launch; no hard-coded process count above one
    (one CPU process is the only literal). What train.py gets is judged by the recorded launch
    (rules/recorded_launch.py): site defaults before "$@" are fine when the orchestrator's values come last."""
    found = []
    try:
        syntax = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        syntax = subprocess.CompletedProcess([], 0, "", "")
        found.append(Violation("launch-syntax", NAME, None, f"could not run bash -n: {exc}", "warning"))
    if syntax.returncode != 0:
        first = (syntax.stderr.strip().splitlines() or ["a syntax error"])[0]
        line = re.search(r"line (\d+)", first)
        found.append(Violation("launch-syntax", NAME, int(line.group(1)) if line else None,
                               f"bash -n: {first}; fix the shell syntax"))
    if not re.search(r"^#SBATCH\s+--?\w", text, re.M):
        found.append(Violation("launch-without-sbatch", NAME, None,
                               "no #SBATCH directive: the brief asks for a SLURM job script (job name, nodes, GPUs, "
                               "CPUs, memory, time) that also runs with plain bash"))
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if not _ACCELERATE.search(code):
        found.append(Violation("launch-without-accelerate", NAME, None,
                               "train.py is not started with `accelerate launch` (or `python -m "
                               "accelerate.commands.launch`); use it on every path, with --cpu when there is no GPU"))
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        for match in _PROCESSES.finditer(line):
            if int(match.group(1)) > 1:
                found.append(Violation("launch-hardcoded-processes", NAME, number,
                                       f"--num_processes {match.group(1)} is hard-coded; count the GPUs at run time "
                                       f"(nvidia-smi -L) and take the node count from SLURM"))
    return found
