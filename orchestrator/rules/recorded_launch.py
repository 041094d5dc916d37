"""The launch script by running it: `bash launch_training.sh ARGS` on a copy of the folder, with the GPU
tools answering for N GPUs and `python`, `accelerate`, `torchrun`, `srun` and `deepspeed` replaced by
recorders, so what train.py would be started with is read off the recorded command, whatever the script
hides in variables, arrays, heredocs or functions.

Rules (Step 4 of the brief, "a SLURM job script that uses accelerate launch for training of train.py",
and "Set configs for train.py via grpo_config.py or cmd parameters": the orchestrator's values):
- launch-recorded-failed: with 1 and 2 GPUs the script reaches a command that runs train.py.
- launch-process-count: a process count the script gives the launcher (--num_processes,
  --nproc_per_node) is the number of GPUs the machine has.
- launch-drops-args, launch-overrides-args: each `--field value` the orchestrator passes reaches train.py,
  and is the last value train.py gets for that field (hyphenated spellings count: parsers accept both).
- launch-writes-config: the script changes no file of the folder (grpo_config.py above all) while it runs.
"""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.rules.violation import Violation

NAME = "launch_training.sh"
GPU_COUNTS = (1, 2)
RECORDED_PROGRAMS = ("python", "python3", "accelerate", "torchrun", "srun", "deepspeed", "mpirun")
PROCESS_FLAGS = ("num_processes", "nproc_per_node")

RECORDER = """#!/usr/bin/env bash
# records the command it stands in for; answers the usual GPU questions asked through python -c
if [ "${1:-}" = "-c" ]; then
    case "${2:-}" in
        *device_count*) echo "${RECORDED_GPUS}"; exit 0 ;;
        *is_available*) if [ "${RECORDED_GPUS}" -gt 0 ]; then echo True; else echo False; fi; exit 0 ;;
    esac
    exec "${REAL_PYTHON}" "$@"
fi
n=$(ls "${RECORD_DIR}" | wc -l)
printf '%s\\0' "$(basename "$0")" "$@" > "${RECORD_DIR}/${n}.cmd"
exit 0
"""

NVIDIA_SMI = """#!/usr/bin/env bash
# answers like nvidia-smi on a machine with RECORDED_GPUS GPUs
query="" units=" MiB"
for arg in "$@"; do
    case "$arg" in
        --query-gpu=*) query="${arg#--query-gpu=}" ;;
        --format=*nounits*) units="" ;;
    esac
done
for ((i = 0; i < RECORDED_GPUS; i++)); do
    if [ -z "$query" ]; then
        echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-00000000000$i)"
        continue
    fi
    line=""
    IFS=',' read -r -a fields <<< "$query"
    for f in "${fields[@]}"; do
        case "${f// /}" in
            name) v="NVIDIA H100 80GB HBM3" ;;
            index) v="$i" ;;
            count) v="${RECORDED_GPUS}" ;;
            uuid) v="GPU-00000000-0000-0000-0000-00000000000$i" ;;
            memory.total) v="81559${units}" ;;
            memory.free) v="81000${units}" ;;
            memory.used) v="559${units}" ;;
            driver_version) v="550.54.15" ;;
            *) v="0" ;;
        esac
        line="${line:+$line, }$v"
    done
    echo "$line"
done
"""


@dataclass(frozen=True)
class RecordedLaunch:
    gpus: int
    commands: list[list[str]]  # each recorded command: the program's name, then its arguments
    returncode: int | None  # None: the script ran past its time
    stderr: str
    changed: list[str] = field(default_factory=list)  # files of the folder the script changed

    def train_command(self) -> tuple[list[str], list[str]] | None:
        """(launcher part, train.py's arguments) of the command that runs train.py; None when none does."""
        for command in self.commands:
            for i, arg in enumerate(command):
                if os.path.basename(arg) == "train.py":
                    return command[:i], command[i + 1:]
        return None


def record_launch(folder: Path, args: list[str], gpus: int, timeout_s: float = 30.0) -> RecordedLaunch:
    """Run the folder's launch script on a copy, for `gpus` GPUs, with the recorders in place."""
    with tempfile.TemporaryDirectory(prefix="recorded-launch-") as tmp:
        work, tools, records = Path(tmp) / "code", Path(tmp) / "bin", Path(tmp) / "records"
        for path in (work, tools, records):
            path.mkdir()
        for source in Path(folder).iterdir():
            if source.is_file() and not source.name.endswith(".logs"):
                shutil.copy2(source, work / source.name)
        for program in RECORDED_PROGRAMS:
            _tool(tools / program, RECORDER)
        _tool(tools / "nvidia-smi", NVIDIA_SMI)
        for quiet in ("module", "ml"):  # environment modules on a cluster: nothing to load here
            _tool(tools / quiet, "#!/usr/bin/env bash\nexit 0\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")
               and k not in ("CUDA_VISIBLE_DEVICES", "CPU_PROCESSES", "GRPO_PER_NODE")}
        env |= {"PATH": f"{tools}{os.pathsep}{env.get('PATH', '')}", "PYTHON": str(tools / "python"),
                "RECORDED_GPUS": str(gpus), "RECORD_DIR": str(records), "REAL_PYTHON": sys.executable}
        if gpus:  # as a scheduler's GPU allocation sets it
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(gpus)))
        before = {p.name: p.read_bytes() for p in work.iterdir()}
        proc = subprocess.Popen(["bash", NAME, *args], cwd=work, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
            returncode: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            returncode = None
        commands = [(records / name).read_bytes().decode(errors="replace").split("\0")[:-1]
                    for name in sorted(os.listdir(records), key=lambda n: int(n.split(".")[0]))]
        changed = sorted(name for name, data in before.items()
                         if not (work / name).is_file() or (work / name).read_bytes() != data)
        return RecordedLaunch(gpus, commands, returncode, stderr.decode(errors="replace")[-2000:], changed)


def _tool(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def flag_pairs(tokens: list[str]) -> list[tuple[str, str | None]]:
    """`--field value`, `--field=value` and bare `--flag` as (field, value), in order; `--a-b` is `a_b`."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and len(token) > 2:
            name, equals, value = token[2:].partition("=")
            name = name.replace("-", "_")
            if equals:
                pairs.append((name, value))
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                pairs.append((name, tokens[i + 1]))
                i += 1
            else:
                pairs.append((name, None))
        i += 1
    return pairs


def same_value(a: str | None, b: str | None) -> bool:
    if a == b:
        return True
    if a is None or b is None:
        return False
    if a.lower() in ("true", "false") or b.lower() in ("true", "false"):
        return a.lower() == b.lower()
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def judge(launch: RecordedLaunch, args: list[str], expect_processes: bool = True) -> list[Violation]:
    """What is wrong with one recorded launch, for the orchestrator's `args`."""
    found = []
    where = f"with {launch.gpus} GPU(s)"
    command = launch.train_command()
    if command is None:
        shown = "; ".join(" ".join(c) for c in launch.commands) or "nothing"
        exit_text = "ran past its time" if launch.returncode is None else f"exited {launch.returncode}"
        found.append(Violation("launch-recorded-failed", NAME, None,
                               f"{where} (nvidia-smi answering, python and accelerate recorded), `bash {NAME} ...` "
                               f"{exit_text} without starting train.py (it ran: {shown[:300]}); stderr: "
                               f"{launch.stderr.strip()[-300:] or '(empty)'}"))
        return found
    launcher, train_args = command
    counts = [v for k, v in flag_pairs(launcher) if k in PROCESS_FLAGS]
    if expect_processes and counts and counts[-1] != str(launch.gpus):
        found.append(Violation("launch-process-count", NAME, None,
                               f"{where} the recorded launch starts {counts[-1]} process(es) "
                               f"({' '.join(launcher)[-200:]}); one process per GPU: count the GPUs at run time "
                               f"(nvidia-smi -L) and pass that number"))
    got = flag_pairs(train_args)
    for name, value in flag_pairs(args):
        values = [v for k, v in got if k == name]
        if not values:
            found.append(Violation("launch-drops-args", NAME, None,
                                   f"{where} train.py never gets the orchestrator's --{name} {value} (it got: "
                                   f"{' '.join(train_args)[:200] or 'no argument'}); pass \"$@\" to train.py"))
            break
        if not same_value(values[-1], value):
            found.append(Violation("launch-overrides-args", NAME, None,
                                   f"{where} train.py gets --{name} {values[-1]} after the orchestrator's "
                                   f"--{name} {value}, so the script's value wins; the orchestrator's values must be "
                                   f"the last (or only) ones: put nothing after \"$@\" and hard-code no training "
                                   f"value, in a variable, an array or a heredoc either"))
    for name in launch.changed:
        found.append(Violation("launch-writes-config", NAME, None,
                               f"{where} the script changed {name} while it ran; values reach train.py as the "
                               f"orchestrator passes them (arguments, or grpo_config.py written before the launch): "
                               f"the script writes no file"))
    return found


def check_recorded_launch(folder: Path, args: list[str], gpu_counts: tuple[int, ...] = GPU_COUNTS,
                          expect_processes: bool = True) -> list[Violation]:
    """judge() for each GPU count; each rule once, with the first GPU count that shows it."""
    if not (Path(folder) / NAME).is_file():
        return []
    found: dict[str, Violation] = {}
    for gpus in gpu_counts:
        for violation in judge(record_launch(folder, args, gpus), args, expect_processes and gpus > 0):
            found.setdefault(violation.rule, violation)
    return list(found.values())


def probe_args(config_text: str) -> list[str]:
    """`--field value` for every field of GRPOConfig with a literal default, each value changed from the
    default (so a value the script hard-codes cannot pass for the orchestrator's)."""
    args: list[str] = []
    classes = [n for n in ast.parse(config_text).body if isinstance(n, ast.ClassDef) and n.name == "GRPOConfig"]
    for node in classes[-1].body if classes else []:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            continue
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field":
            value = next((k.value for k in value.keywords if k.arg == "default"), None)
        try:
            default = ast.literal_eval(value) if value is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        changed = {bool: lambda v: str(not v).lower(), int: lambda v: str(v + 17), float: lambda v: repr(v + 0.125),
                   str: lambda v: f"{v}-probe"}.get(type(default))
        if changed is not None:
            args += [f"--{node.target.id}", changed(default)]
    return args
