"""The launch script by running it: `bash launch_training.sh ARGS` on a copy of the folder, with the GPU
tools answering for N GPUs, `python`, `accelerate`, `torchrun` and `deepspeed` replaced by recorders and
`srun` running its command as the job's first task, so what starts train.py, and with what, is read off
the recorded command, whatever the script hides in variables, arrays, heredocs, functions or branches.
It runs five times: with no GPU, 1 and 2 GPUs and no scheduler (SLURM's variables cleared, as a direct
`bash launch_training.sh` sees it), then as the batch script of a one-node and of a two-node SLURM job
(SLURM_JOB_ID, SLURM_NNODES, SLURM_JOB_NODELIST, SLURM_GPUS_ON_NODE, ... set, `scontrol` answering).

Files: the script may write files of its own (an accelerate config in a temporary folder, say) and read
them back, as it would on the cluster; an accelerate config file a launcher is given (`--config_file`)
is kept as it was when the launcher started, and what it says counts. It may not change a file the
folder holds (grpo_config.py above all).

Rules (Step 4 of the brief, "a SLURM job script that uses accelerate launch for training of train.py",
and "Set configs for train.py via grpo_config.py or cmd parameters": the orchestrator's values):
- launch-recorded-failed: in every run the script reaches a command that runs train.py.
- launch-without-accelerate: in every run, what actually starts train.py is `accelerate launch` (any
  spelling: `python -m accelerate.commands.launch`, `accelerate-launch`), or a launcher the template
  itself documents (`torchrun ... train.py` in grpo_template.py); an `accelerate launch` on a branch that
  never runs does not count.
- launch-process-count: the process count the launcher gets (--num_processes, --nproc_per_node, or the
  num_processes of its --config_file) is one per GPU: the GPUs of the machine, times the machines the
  launcher is told of in a multi-node job.
- launch-drops-args, launch-overrides-args: each `--field value` the orchestrator passes reaches train.py,
  and is the last value train.py gets for that field (hyphenated spellings count: parsers accept both).
- launch-args-differ: train.py gets the same arguments in every run: what reaches it (the model, the
  orchestrator's values) does not depend on the GPUs or on SLURM (the orchestrator sizes values for the
  machine and passes them).
- launch-writes-config: the script changes no file of the folder while it runs.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.rules.violation import Violation
from orchestrator.training.slurm_job import QUIET, QUIET_PROGRAMS, SRUN, slurm_environment

NAME = "launch_training.sh"
GPU_COUNTS = (0, 1, 2)  # 0: the CPU path, which the runtime check takes
SLURM_NODES = (1, 2)  # the SLURM jobs recorded, by node count; each node has the most GPUs of GPU_COUNTS
RECORDED_PROGRAMS = ("python", "python3", "accelerate", "accelerate-launch", "torchrun", "deepspeed", "mpirun")
PROCESS_FLAGS = ("num_processes", "nproc_per_node")
ACCELERATE = re.compile(r"(^|\s)accelerate\s+launch(\s|$)|(^|\s)accelerate-launch(\s|$)|accelerate\.commands\.launch"
                        r"|accelerate_cli\s+launch")
DOCUMENTED_LAUNCHERS = {"torchrun": re.compile(r"(^|\s)torchrun(\s|$)|torch\.distributed\.run"),
                        "deepspeed": re.compile(r"(^|\s)deepspeed(\s|$)")}

RECORDER = """#!/usr/bin/env bash
# records the command it stands in for; answers the usual GPU questions asked through python -c
if [ "${1:-}" = "-c" ]; then
    case "${2:-}" in
        *device_count*) echo "${RECORDED_GPUS}"; exit 0 ;;
        *is_available*) if [ "${RECORDED_GPUS}" -gt 0 ]; then echo True; else echo False; fi; exit 0 ;;
    esac
    exec "${REAL_PYTHON}" "$@"
fi
n=$(find "${RECORD_DIR}" -name '*.cmd' | wc -l)
printf '%s\\0' "$(basename "$0")" "$@" > "${RECORD_DIR}/${n}.cmd"
# an accelerate config file the launcher is given, as it is now (a temporary one may be gone after the launch)
previous=""
for arg in "$@"; do
    case "${previous}" in --config_file|--config-file) cp -- "${arg}" "${RECORD_DIR}/${n}.config" 2>/dev/null ;; esac
    case "${arg}" in --config_file=*|--config-file=*) cp -- "${arg#*=}" "${RECORD_DIR}/${n}.config" 2>/dev/null ;; esac
    previous="${arg}"
done
exit 0
"""

SCONTROL = """#!/usr/bin/env bash
# answers like scontrol for the recorded job: RECORDED_NODES nodes node1..nodeN, RECORDED_GPUS GPUs each
nodes="${RECORDED_NODES:-1}"
case "${1:-} ${2:-}" in
    "show hostname"*) for ((i = 1; i <= nodes; i++)); do echo "node$i"; done ;;
    "show job"*) gpus=$((nodes * RECORDED_GPUS))
                 echo "JobId=${SLURM_JOB_ID:-0} JobName=grpo NumNodes=${nodes} TRES=node=${nodes},gres/gpu=${gpus}" ;;
    "show node"*) for ((i = 1; i <= nodes; i++)); do echo "NodeName=node$i CPUTot=8 Gres=gpu:${RECORDED_GPUS}"; done ;;
esac
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
    gpus: int  # per node
    commands: list[list[str]]  # each recorded command: the program's name, then its arguments
    returncode: int | None  # None: the script ran past its time
    stderr: str
    changed: list[str] = field(default_factory=list)  # files of the folder the script changed
    nodes: int = 0  # the SLURM job's nodes; 0: run directly, no scheduler
    configs: dict[int, str] = field(default_factory=dict)  # command index -> its --config_file, as it was then

    @property
    def where(self) -> str:
        if not self.nodes:
            return f"with {self.gpus} GPU(s)"
        return f"as a SLURM job of {self.nodes} node(s) with {self.gpus} GPU(s) each"

    def train_command(self) -> tuple[list[str], list[str]] | None:
        """(launcher part, train.py's arguments) of the command that runs train.py; None when none does."""
        found = self._train_call()
        return None if found is None else found[1:]

    def train_config(self) -> str | None:
        """The text of the config file given to the launcher that runs train.py, if any."""
        found = self._train_call()
        return None if found is None else self.configs.get(found[0])

    def _train_call(self) -> tuple[int, list[str], list[str]] | None:
        for index, command in enumerate(self.commands):
            for i, arg in enumerate(command):
                if os.path.basename(arg) == "train.py":
                    return index, command[:i], command[i + 1:]
        return None


def record_launch(folder: Path, args: list[str], gpus: int, timeout_s: float = 30.0,
                  nodes: int = 0) -> RecordedLaunch:
    """Run the folder's launch script on a copy, for `gpus` GPUs (per node), with the recorders in place: as
    the batch script of a SLURM job of `nodes` nodes, or (0) run directly."""
    with tempfile.TemporaryDirectory(prefix="recorded-launch-") as tmp:
        work, tools, records = Path(tmp) / "code", Path(tmp) / "bin", Path(tmp) / "records"
        for path in (work, tools, records):
            path.mkdir()
        for source in Path(folder).iterdir():
            if source.is_file() and not source.name.endswith(".logs"):
                shutil.copy2(source, work / source.name)
        for program in RECORDED_PROGRAMS:
            _tool(tools / program, RECORDER)
        for name, text in (("nvidia-smi", NVIDIA_SMI), ("srun", SRUN), ("scontrol", SCONTROL)):
            _tool(tools / name, text)
        for quiet in QUIET_PROGRAMS:
            _tool(tools / quiet, QUIET)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_"))
               and k not in ("CUDA_VISIBLE_DEVICES", "CPU_PROCESSES", "GRPO_PER_NODE")}
        env |= {"PATH": f"{tools}{os.pathsep}{env.get('PATH', '')}", "PYTHON": str(tools / "python"),
                "RECORDED_GPUS": str(gpus), "RECORDED_NODES": str(max(nodes, 1)), "RECORD_DIR": str(records),
                "REAL_PYTHON": sys.executable}
        if gpus:  # as a scheduler's GPU allocation sets it
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(gpus)))
        if nodes:
            env |= slurm_environment(nodes, gpus, work)
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
        numbered = sorted(os.listdir(records), key=lambda n: int(n.split(".")[0]))
        commands = [(records / name).read_bytes().decode(errors="replace").split("\0")[:-1]
                    for name in numbered if name.endswith(".cmd")]
        configs = {int(name.split(".")[0]): (records / name).read_bytes().decode(errors="replace")
                   for name in numbered if name.endswith(".config")}
        changed = sorted(name for name, data in before.items()
                         if not (work / name).is_file() or (work / name).read_bytes() != data)
        return RecordedLaunch(gpus, commands, returncode, stderr.decode(errors="replace")[-2000:], changed, nodes,
                              configs)


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


def judge(launch: RecordedLaunch, args: list[str], expect_processes: bool = True,
          launchers: tuple[re.Pattern, ...] = (ACCELERATE,)) -> list[Violation]:
    """What is wrong with one recorded launch, for the orchestrator's `args`; `launchers`: what may start
    train.py (accelerate launch, and what the template documents)."""
    found = []
    where = launch.where
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
    started_by = " ".join(os.path.basename(token) for token in launcher)
    if not any(pattern.search(started_by) for pattern in launchers):
        found.append(Violation("launch-without-accelerate", NAME, None,
                               f"{where} what actually starts train.py is `{started_by[:200] or 'train.py itself'}`, "
                               f"not `accelerate launch`; start train.py with accelerate launch on every path the "
                               f"script takes (one that never runs does not count), --cpu where there is no GPU"))
    problem = process_count_problem(launch, launcher) if expect_processes else None
    if problem:
        found.append(Violation("launch-process-count", NAME, None,
                               f"{where} {problem} ({' '.join(launcher)[-200:]}); count the GPUs at run time "
                               f"(nvidia-smi -L), times the nodes on several nodes, and pass that number"))
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
                               f"the script changes no file of the folder (its own temporary files are fine)"))
    return found


def process_count_problem(launch: RecordedLaunch, launcher: list[str]) -> str | None:
    """How the process count the launcher gets differs from one per GPU, or None. The command line wins over
    the --config_file (as in accelerate); accelerate's --num_processes counts every machine's processes, so
    on a multi-node job it is the GPUs times the machines the launcher is told of (at most the job's nodes:
    a one-node launcher in a two-node job is the script's choice)."""
    flags = dict(flag_pairs(launcher))
    config = launch.train_config() or ""
    machines = flags.get("num_machines") or config_value(config, "num_machines") or "1"
    machines_used = min(int(machines), max(launch.nodes, 1)) if machines.isdigit() else 1
    for name, expected in (("num_processes", launch.gpus * machines_used), ("nproc_per_node", launch.gpus)):
        given, source = flags.get(name), f"the launcher gets --{name}"
        if given is None and name == "num_processes":
            given, source = config_value(config, name), f"the launcher's --config_file says {name}:"
        if given is not None and given != str(expected):
            return f"{source} {given}, where one process per GPU is {expected}"
    return None


def config_value(text: str, key: str) -> str | None:
    """`key: value` (YAML) or `"key": value` (JSON) of an accelerate config file's text, the last one."""
    found = re.findall(rf"""(?:^|[\s{{,])["']?{key}["']?\s*:\s*["']?([^\s,"'#}}]+)""", text, re.M)
    return found[-1] if found else None


def documented_launchers(template_text: str) -> tuple[re.Pattern, ...]:
    """accelerate launch, and the launchers the template's own text names as what starts training."""
    return (ACCELERATE, *(pattern for pattern in DOCUMENTED_LAUNCHERS.values() if pattern.search(template_text)))


def differing_args(launches: list[RecordedLaunch]) -> list[Violation]:
    """launch-args-differ: the first pair of runs whose train.py arguments differ."""
    started = [(launch, command[1]) for launch in launches if (command := launch.train_command()) is not None]
    for launch, train_args in started[1:]:
        first, first_args = started[0]
        if train_args != first_args:
            return [Violation("launch-args-differ", NAME, None,
                              f"train.py's arguments depend on the machine: {launch.where}, "
                              f"{_difference(first_args, train_args)}, unlike {first.where}; what reaches train.py "
                              f"(the model, the orchestrator's values) must not depend on the GPUs or on SLURM: the "
                              f"orchestrator sizes the values for the machine and passes them, so pass \"$@\" and "
                              f"nothing that changes with the machine")]
    return []


def _difference(before: list[str], after: list[str]) -> str:
    """What `after` has that `before` lacks, and the reverse, as flags; the order where only that differs."""
    old, new = flag_pairs(before), flag_pairs(after)
    added, dropped = [p for p in new if p not in old], [p for p in old if p not in new]
    parts = ([f"it gets {_flags(added)}"] if added else []) + ([f"it lacks {_flags(dropped)}"] if dropped else [])
    return ", ".join(parts) or f"the same arguments in another order ({' '.join(after)[:200]})"


def _flags(pairs: list[tuple[str, str | None]]) -> str:
    return " ".join(f"--{k}" + ("" if v is None else f" {v}") for k, v in pairs)[:200]


def check_recorded_launch(folder: Path, args: list[str], gpu_counts: tuple[int, ...] = GPU_COUNTS,
                          expect_processes: bool = True, slurm_nodes: tuple[int, ...] = SLURM_NODES) -> list[Violation]:
    """judge() for each GPU count run directly, then for each SLURM job (of `slurm_nodes` nodes, each with the
    most GPUs of `gpu_counts`), and the runs compared; each rule once, with the first run that shows it."""
    folder = Path(folder)
    if not (folder / NAME).is_file():
        return []
    template = folder / "grpo_template.py"
    launchers = documented_launchers(template.read_text(errors="replace") if template.is_file() else "")
    launches = [record_launch(folder, args, gpus) for gpus in gpu_counts]
    launches += [record_launch(folder, args, max(gpu_counts), nodes=nodes) for nodes in slurm_nodes]
    found: dict[str, Violation] = {}
    for launch in launches:
        for violation in judge(launch, args, expect_processes and launch.gpus > 0, launchers):
            found.setdefault(violation.rule, violation)
    for violation in differing_args(launches):
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
