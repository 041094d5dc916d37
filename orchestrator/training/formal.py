"""The formal run's config: the LLM proposes values, the orchestrator checks them against the memory
arithmetic in sizing.py and refuses impossible ones before anything launches.

The accepted values reach train.py the way the config's roles mapping says (`--field value` flags, or
values written into the generated grpo_config.py); every vetted value is passed, not only the ones
that differ from the defaults, so nothing hard-coded elsewhere can silently win over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.sources.config_file import ConfigFile, default_sources
from orchestrator.llm.json_answer import json_object
from orchestrator.training.machine import ProbeResult
from orchestrator.sources.roles import ConfigRoles
from orchestrator.training.sizing import (MemoryEstimate, ModelShape, check_proposal, estimate_memory, shape_of,
                                          training_ram)

DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"


@dataclass(frozen=True)
class FormalSpec:
    model: str = ""  # "" = DEFAULT_MODEL on a GPU machine, the tiny local model on a CPU-only one
    pinned: dict[str, Any] = field(default_factory=dict)  # values that win over the LLM's (e.g. a short demo)
    use_slurm: bool = False  # sbatch the launch script when SLURM is present
    timeout_s: float | None = None  # wall-clock cap for one formal run
    hang_seconds: float = 1800.0  # no new update for this long -> stopped as hung
    sbatch_options: tuple[str, ...] = ()  # the researcher's --sbatch-option KEY=VALUE, as sbatch's --KEY=VALUE
    max_jobs: int = 20  # SLURM jobs one process follows in a formal run's chain (time limits, preemptions, ...)
    poll_s: float | None = None  # between two looks at the formal job (None: 2 s for a local job, 30 s for SLURM)
    plan: dict[str, Any] = field(default_factory=dict)  # a whole plan, given (a child run trains with its parent's)
    plan_config: str = ""  # the grpo_config.py text the given plan was made for


# a given plan's training length and seed are kept whatever the config's defaults say now
KEPT_ROLES = ("updates_total", "episodes_total", "random_seed")
OWN_ROLES = ("output_folder", "log_folder", "resume_from")  # each attempt's own: never taken from a given plan


def given_values(spec: FormalSpec, config_text: str, roles: ConfigRoles) -> dict[str, Any]:
    """The values of the plan `spec` gives, for the config as it is now: a field whose default was changed since
    the plan was made (an idea's edit, a fix) keeps its new value, except the training length and the seed; the
    folders an attempt writes to are its own."""
    changed = {name for name, text in default_sources(config_text).items()
               if default_sources(spec.plan_config).get(name) != text} if spec.plan_config else set()
    changed |= {roles.field_of(role) for role in OWN_ROLES} - {None}
    kept = {roles.field_of(role) for role in KEPT_ROLES} - {None}
    return {name: value for name, value in spec.plan.items() if name not in changed or name in kept}


def parse_proposal(text: str) -> dict[str, Any]:
    return json_object(text, "field -> value")


def vet(proposal: dict[str, Any], config: ConfigFile, roles: ConfigRoles, model: str,
        machine: ProbeResult, use_slurm: bool = False) -> dict[str, Any]:
    """The proposal merged with the defaults, or ValueError with the problems and the arithmetic (against the
    SLURM nodes' memory when the run goes through SLURM)."""
    base = config.defaults
    problems = check_proposal(proposal, base, set(base), config_cls=config)
    if problems:
        raise ValueError("refused: " + "; ".join(problems))
    merged = {**base, **proposal, **roles.to_fields({"model": model})}
    shape = shape_of(model)
    if shape is not None:
        estimate = _estimate(shape, roles.read(merged), machine, use_slurm)
        if not estimate.fits:
            raise ValueError(f"refused: these values do not fit in memory\n{estimate.explanation}")
    return merged


def memory_text(config: dict[str, Any], roles: ConfigRoles, model: str, machine: ProbeResult,
                use_slurm: bool = False) -> str:
    shape = shape_of(model)
    if shape is None:
        return f"(no shape known for {model}: no estimate)"
    return _estimate(shape, roles.read(config), machine, use_slurm).explanation


def _estimate(shape: ModelShape, values: dict[str, Any], machine: ProbeResult, use_slurm: bool) -> MemoryEstimate:
    ram_gib, source = training_ram(machine, use_slurm)
    return estimate_memory(shape, values, machine.gpus, system_ram_gib=ram_gib, ram_source=source)


TRUNCATION_LIMIT = 0.5  # fraction of completions cut at their token cap
UNPARSEABLE_LIMIT = 0.5  # invalid-action rate over the last quarter of updates
MAX_NEW_TOKENS_CAP = 4096


def is_stand_in(model: str) -> bool:
    """The tiny local model, whose outputs are noise: small-issue rules do not apply to it."""
    return (Path(model) / "tiny_model.json").exists()


def token_cap_raise(trends: dict[str, float], config: dict[str, Any], roles: ConfigRoles) -> dict[str, int]:
    """Outputs mostly truncated at their cap: double the caps' fields (bounded); {} when fine or capless."""
    if trends.get("completion_clipped_ratio_mean", 0.0) <= TRUNCATION_LIMIT:
        return {}
    caps = {name for role in ("thinking_cap", "action_cap") if (name := roles.field_of(role))}
    raised = {name: min(2 * config[name], MAX_NEW_TOKENS_CAP) for name in sorted(caps)}
    return {k: v for k, v in raised.items() if v != config[k]}


def mostly_unparseable(trends: dict[str, float]) -> bool:
    return trends.get("invalid_action_rate_last_quarter", 0.0) > UNPARSEABLE_LIMIT
