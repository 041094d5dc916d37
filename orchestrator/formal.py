"""The formal run's config: the LLM proposes values, the orchestrator checks them against the memory
arithmetic in sizing.py and refuses impossible ones before anything launches.

The accepted values reach train.py as `--field value` arguments (recorded in the manifest), so the
config file itself keeps its field names and the run stays reproducible from its arguments.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.probe import ProbeResult
from orchestrator.sizing import check_proposal, estimate_memory, shape_of

DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"


@dataclass(frozen=True)
class FormalSpec:
    model: str = ""  # "" = DEFAULT_MODEL on a GPU machine, the tiny local model on a CPU-only one
    pinned: dict[str, Any] = field(default_factory=dict)  # values that win over the LLM's (e.g. a short demo)
    use_slurm: bool = False  # sbatch the launch script when SLURM is present
    timeout_s: float | None = None  # wall-clock cap for one formal run
    hang_seconds: float = 1800.0  # no new update for this long -> stopped as hung


def load_config_class(path: Path) -> type:
    """GRPOConfig from a grpo_config.py (a plain dataclass module from the source of truth)."""
    name = f"_grpo_config_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve string annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module.GRPOConfig


def config_values(config_cls: type) -> dict[str, Any]:
    return dataclasses.asdict(config_cls())


def parse_proposal(text: str) -> dict[str, Any]:
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidate = fenced.group(1) if fenced else text[text.find("{"): text.rfind("}") + 1]
    try:
        proposal = json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the proposal must be one JSON object in a ```json block: {exc}") from exc
    if not isinstance(proposal, dict):
        raise ValueError("the proposal must be a JSON object of field -> value")
    return proposal


def vet(proposal: dict[str, Any], config_cls: type, model: str, machine: ProbeResult) -> dict[str, Any]:
    """The proposal merged with the defaults, or ValueError with the problems and the arithmetic."""
    base = config_values(config_cls)
    problems = check_proposal(proposal, base, set(base), config_cls=config_cls)
    if problems:
        raise ValueError("refused: " + "; ".join(problems))
    merged = {**base, **proposal, "model_name": model}
    shape = shape_of(model)
    if shape is not None:
        estimate = estimate_memory(shape, merged, machine.gpus)
        if not estimate.fits:
            raise ValueError(f"refused: these values do not fit in memory\n{estimate.explanation}")
    return merged


def memory_text(config: dict[str, Any], model: str, machine: ProbeResult) -> str:
    shape = shape_of(model)
    if shape is None:
        return f"(no shape known for {model}: no estimate)"
    return estimate_memory(shape, config, machine.gpus).explanation


def to_args(values: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in values.items():
        args += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return args


TRUNCATION_LIMIT = 0.5  # fraction of completions cut at their token cap
UNPARSEABLE_LIMIT = 0.5  # invalid-action rate over the last quarter of updates
MAX_NEW_TOKENS_CAP = 4096


def is_stand_in(model: str) -> bool:
    """The tiny local model, whose outputs are noise: small-issue rules do not apply to it."""
    return (Path(model) / "tiny_model.json").exists()


def token_cap_raise(trends: dict[str, float], config: dict[str, Any]) -> dict[str, int]:
    """Outputs mostly truncated at max_new_tokens: double both caps (bounded); {} when fine."""
    if trends.get("completion_clipped_ratio_mean", 0.0) <= TRUNCATION_LIMIT:
        return {}
    raised = {k: min(2 * config[k], MAX_NEW_TOKENS_CAP) for k in ("max_thinking_tokens", "max_action_tokens")}
    return {k: v for k, v in raised.items() if v != config[k]}


def mostly_unparseable(trends: dict[str, float]) -> bool:
    return trends.get("invalid_action_rate_last_quarter", 0.0) > UNPARSEABLE_LIMIT
