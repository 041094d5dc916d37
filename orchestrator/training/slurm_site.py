"""A SLURM site's options and limits: what sbatch is given besides the script, and what the chosen partition allows.

Options come from three places, and sbatch itself ranks them so: the script's `#SBATCH` lines, then SLURM's own
input variables in the environment (`SBATCH_ACCOUNT`, `SBATCH_PARTITION`, `SBATCH_QOS`, `SBATCH_TIMELIMIT`, ...),
then options on sbatch's command line: the researcher's `--sbatch-option KEY=VALUE` (`run` and `resume`), then
the orchestrator's own (`--exclude` after a node failure, `--mem` after the host ran out of memory). Each wins over
the ones before. `effective_options` says which value each option has and where it came from, for the plan, the
launch line, the manifest and the page.

A partition's limits come from `scontrol show partition -o` (asked once by the probe, with sinfo): MaxTime,
DefaultTime, MaxNodes, MaxMemPerNode, MaxCPUsPerNode. `partition_problem` refuses a request that exceeds them, with
both numbers, before anything is submitted: a job asking more time than MaxTime would wait in the queue forever.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# SLURM's input variables that sbatch reads as options (man sbatch, INPUT ENVIRONMENT VARIABLES)
ENV_OPTIONS = {
    "SBATCH_ACCOUNT": "account", "SBATCH_PARTITION": "partition", "SBATCH_QOS": "qos", "SBATCH_TIMELIMIT": "time",
    "SBATCH_CONSTRAINT": "constraint", "SBATCH_RESERVATION": "reservation", "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu", "SBATCH_GPUS": "gpus", "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GRES": "gres", "SBATCH_EXCLUSIVE": "exclusive", "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_REQUEUE": "requeue", "SBATCH_JOB_NAME": "job-name", "SBATCH_WCKEY": "wckey",
}
_FLAG_OPTIONS = {"exclusive", "no-requeue", "requeue"}  # options without a value
_KEY = re.compile(r"[a-z][a-z0-9-]*")
UNLIMITED = None  # a limit SLURM calls UNLIMITED or INFINITE


def option_flag(pair: str) -> str:
    """`KEY=VALUE` (or `KEY` for a flag such as no-requeue) as sbatch's long option `--KEY=VALUE`; ValueError with
    what to write otherwise."""
    key, sep, value = pair.strip().removeprefix("--").partition("=")
    if not _KEY.fullmatch(key):
        raise ValueError(f"--sbatch-option takes KEY=VALUE with KEY an sbatch long option (account, partition, qos, "
                         f"time, constraint, mem, ...), got {pair!r}")
    if sep and not value:
        raise ValueError(f"--sbatch-option {pair!r}: give a value after '=' (or leave '=' out for a flag)")
    return f"--{key}={value}" if sep else f"--{key}"


def env_options(env: Mapping[str, str]) -> list[str]:
    """The sbatch options SLURM's input variables in `env` stand for, as `--KEY=VALUE`."""
    found = []
    for variable, key in ENV_OPTIONS.items():
        value = env.get(variable)
        if value is None or value == "":
            continue
        found.append(f"--{key}" if key in _FLAG_OPTIONS else f"--{key}={value}")
    return found


def option_pairs(options: Sequence[str]) -> list[tuple[str, str]]:
    """(key, value) of each `--KEY=VALUE` or `--KEY` ("" for a flag), in order."""
    pairs = []
    for option in options:
        key, _, value = option.removeprefix("--").partition("=")
        pairs.append((key, value))
    return pairs


def effective_options(script_options: Sequence[str], env: Mapping[str, str], given: Sequence[str],
                      added: Sequence[str] = ()) -> dict[str, tuple[str, str]]:
    """Each option's value and where it came from (`#SBATCH`, the variable's name, `--sbatch-option`, `orchestrator`),
    the later source winning, as sbatch ranks them."""
    found: dict[str, tuple[str, str]] = {}
    for key, value in option_pairs([o for o in script_options if o.startswith("--")]):
        found[key] = (value, "#SBATCH")
    by_key = {key: variable for variable, key in ENV_OPTIONS.items()}
    for key, value in option_pairs(env_options(env)):
        found[key] = (value, by_key[key])
    for key, value in option_pairs(given):
        found[key] = (value, "--sbatch-option")
    for key, value in option_pairs(added):
        found[key] = (value, "orchestrator")
    return found


def describe_options(options: Mapping[str, tuple[str, str]]) -> str:
    """`--partition=short (--sbatch-option), --time=2:00:00 (SBATCH_TIMELIMIT), ...`, or '(none)'."""
    return ", ".join(f"--{key}{'=' + value if value else ''} ({source})"
                     for key, (value, source) in options.items()) or "(none)"


# ---------------------------------------------------------------- time limits


def slurm_seconds(text: str) -> int | None:
    """A SLURM time ("minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes",
    "days-hours:minutes:seconds", UNLIMITED or INFINITE) in seconds; None for no limit. ValueError otherwise."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return UNLIMITED
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise ValueError(f"{text!r} is not a SLURM time (MINUTES, HH:MM:SS, D-HH:MM:SS, ...)")
    days, first, second, third = match.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        return ((int(days) * 24 + int(first)) * 60 + int(second or 0)) * 60 + int(third or 0)
    if third is not None:  # hours:minutes:seconds
        return (int(first) * 60 + int(second)) * 60 + int(third)
    if second is not None:  # minutes:seconds
        return int(first) * 60 + int(second)
    return int(first) * 60  # minutes


def clock(seconds: float | None) -> str:
    """Seconds as SLURM writes a time: D-HH:MM:SS or HH:MM:SS; UNLIMITED for None."""
    if seconds is None:
        return "UNLIMITED"
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# ---------------------------------------------------------------- partitions


@dataclass(frozen=True)
class PartitionLimits:
    name: str
    max_time_s: int | None = None  # None: UNLIMITED
    default_time_s: int | None = None  # a job without --time gets this (None: the MaxTime)
    max_nodes: int | None = None
    max_mem_per_node_mb: int | None = None
    max_cpus_per_node: int | None = None

    def describe(self) -> str:
        return (f"partition {self.name}: MaxTime {clock(self.max_time_s)}, MaxNodes "
                f"{self.max_nodes if self.max_nodes is not None else 'UNLIMITED'}, MaxMemPerNode "
                f"{f'{self.max_mem_per_node_mb} MB' if self.max_mem_per_node_mb is not None else 'UNLIMITED'}, "
                f"MaxCPUsPerNode {self.max_cpus_per_node if self.max_cpus_per_node is not None else 'UNLIMITED'}")

    def time_limit_s(self, requested_s: int | None) -> int | None:
        """How long a job of this partition may run: its own --time, else DefaultTime, else MaxTime."""
        if requested_s is not None:
            return requested_s
        return self.default_time_s if self.default_time_s is not None else self.max_time_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _limit(text: str | None) -> int | None:
    if text is None or not text.isdigit():
        return None  # UNLIMITED, or absent
    return int(text)


def _time(text: str | None) -> int | None:
    try:
        return slurm_seconds(text) if text else None
    except ValueError:
        return None


def parse_partitions(text: str) -> dict[str, PartitionLimits]:
    """`scontrol show partition -o`'s answer: one line per partition, Key=value fields."""
    partitions = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"\b(\w+)=(\S*)", line))
        name = fields.get("PartitionName")
        if not name:
            continue
        partitions[name] = PartitionLimits(
            name, max_time_s=_time(fields.get("MaxTime")), default_time_s=_time(fields.get("DefaultTime")),
            max_nodes=_limit(fields.get("MaxNodes")), max_mem_per_node_mb=_limit(fields.get("MaxMemPerNode")),
            max_cpus_per_node=_limit(fields.get("MaxCPUsPerNode")))
    return partitions
