"""Training configuration for GRPO on the Crossing game (two agents, one corridor, one passing bay).

Every knob the training template (`grpo_template.py`) reads, and nothing it does not. A run may
change values (the orchestrator sizes them to the GPUs), never the set of field names.

Override any value from the command line without adding fields:

    python train.py --episodes 16 --group_size 4 --bf16 false --model_name /path/to/model

Units: "episodes" count game episodes (one group is `group_size` episodes), "updates" count
optimiser updates on one rollout batch, "turns" count game steps (every agent acts once per turn).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Sequence

REPORT_TO = ("none", "tensorboard", "wandb")  # accepted values of GRPOConfig.report_to


@dataclass
class GRPOConfig:
    # --- model ---
    model_name: str = "Qwen/Qwen3-4B-Instruct-2507"  # hub id or local folder loadable by from_pretrained
    seed: int = 42  # seeds torch, python and the game; group k uses game seed `seed + k`

    # --- game ---
    num_agents: int = 2  # agents in the corridor (the game has two: one at each end)
    corridor_length: int = 9  # corridor cells, both ends included (5-15); the bay is above the middle one
    max_env_steps: int = 16  # turns per episode; every agent acts once per turn

    # --- rollouts ---
    episodes: int = 2000  # training episodes in total, across all processes
    group_size: int = 8  # G: episodes per group, all started from the same seed
    max_thinking_tokens: int = 256  # new-token cap for the thinking stage of a turn
    max_action_tokens: int = 48  # new-token cap for the action stage of a turn
    temperature: float = 1.0  # sampling temperature for both stages
    top_p: float = 1.0  # nucleus sampling threshold for both stages
    rollout_engine: str = "auto"  # "hf" (HF generate), "static" (static KV cache) or "auto" (static on CPU, hf on GPU)
    invalid_action_penalty: float = -0.1  # reward added for each unparseable or invalid action

    # --- optimisation ---
    learning_rate: float = 1e-6  # peak AdamW learning rate
    lr_scheduler_type: str = "cosine"  # transformers scheduler name: constant, linear, cosine, ...
    warmup_steps: int = 10  # optimiser steps of linear warm-up
    weight_decay: float = 0.0  # AdamW weight decay
    beta: float = 0.04  # KL coefficient to the frozen reference; 0 loads no reference model
    epsilon_low: float = 0.2  # clip range below 1 for the policy ratio
    epsilon_high: float = 0.28  # clip range above 1 for the policy ratio (DAPO clip-higher)
    num_iterations: int = 1  # optimisation passes over each rollout batch
    micro_batch_size: int = 8  # sequences per forward/backward pass
    gradient_accumulation_steps: int = 1  # micro-batches accumulated into one optimiser step
    max_grad_norm: float = 1.0  # gradient clipping threshold (global L2 norm)
    bf16: bool = True  # bfloat16 weights and autocast on GPU (ignored on CPU)
    gradient_checkpointing: bool = True  # trade compute for activation memory

    # --- evaluation, logging, checkpoints ---
    eval_interval: int = 10  # updates between evaluations
    eval_episodes: int = 4  # episodes per evaluation (fixed held-out seeds)
    sample_log_interval: int = 10  # episodes between full episodes written to Sample_EP.logs
    save_interval: int = 50  # updates between checkpoints (0 disables)
    output_dir: str = "outputs"  # checkpoints and the final model
    resume_from: str = ""  # "latest": the newest checkpoint-N in output_dir (none yet: afresh), a checkpoint folder, ""
    log_dir: str = "."  # folder of train.logs and Sample_EP.logs
    report_to: str = "none"  # also send train.logs' metrics to "tensorboard" or "wandb" (under log_dir/grpo), or "none"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError, naming the field, for values no run can use."""
        positive = ("num_agents", "corridor_length", "max_env_steps", "episodes", "group_size",
                    "max_thinking_tokens", "max_action_tokens", "num_iterations", "micro_batch_size",
                    "gradient_accumulation_steps", "eval_episodes", "sample_log_interval", "eval_interval")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for group-relative advantages, got {self.group_size}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.report_to not in REPORT_TO:
            raise ValueError(f"report_to must be one of {', '.join(REPORT_TO)}, got {self.report_to!r}")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        for name in ("beta", "epsilon_low", "epsilon_high", "learning_rate", "max_grad_norm", "warmup_steps",
                     "save_interval", "weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None) -> "GRPOConfig":
        """Defaults overridden by `--field value` pairs; unknown fields are an error."""
        parser = argparse.ArgumentParser(description="GRPO training on the Cleanup game")
        for f in fields(cls):
            parser.add_argument(f"--{f.name}", type=_parser_for(f.type), default=f.default,
                                metavar=str(f.type).upper(), help=f"default: {f.default!r}")
        return cls(**vars(parser.parse_args(argv)))


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def _parser_for(annotation: Any):
    name = annotation if isinstance(annotation, str) else annotation.__name__
    return {"bool": _parse_bool, "int": int, "float": float, "str": str}[name]
