"""GRPO settings for LLM agents on Spread (mpe2's simple_spread, env_move.SpreadGame).

A frozen dataclass: a run reads it, never writes it. train.py builds it from the command line, one
`--field value` (or `--field=value`) per field to change, bools as true/false:

    python train.py --policy_model /path/to/model --train_iterations 2 --rollouts_per_group 4 --use_bf16 false

Units: `train_iterations` counts GRPO iterations (one group of `rollouts_per_group` episodes per process,
then one pass of optimiser steps over it); `episode_length` counts turns (every agent moves once per turn,
after two generations: think, then act); `sample_every_episodes` counts episodes; the `*_every_iters`
fields count iterations. Logs and checkpoints go to `output_dir/run_name/`.
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATION_BACKENDS = ("auto", "hf", "static")  # accepted values of generation_backend


@dataclass(frozen=True)
class GRPOConfig:
    # policy
    policy_model: str = "Qwen/Qwen3-4B-Instruct-2507"  # hub id or local folder of the policy and the frozen reference
    rng_seed: int = 7  # seeds python and torch; iteration k of the run plays world seed rng_seed + k (per process)

    # world
    n_agents: int = 3  # agents, and as many landmarks, in the simple_spread world (2-4)
    episode_length: int = 25  # turns per episode (MPE's max_cycles); every agent moves once per turn
    local_ratio: float = 0.5  # share of an agent's reward that is its own collision penalty, the rest the team's

    # rollouts
    train_iterations: int = 400  # GRPO iterations in the run: each plays one fresh group per process
    rollouts_per_group: int = 8  # episodes per group, all from the same world seed; advantages compare them
    max_new_tokens_think: int = 192  # new-token cap of the thinking stage of a turn
    max_new_tokens_act: int = 40  # new-token cap of the action stage of a turn (one JSON helper call)
    sampling_temperature: float = 1.0  # temperature of both generation stages (0: greedy)
    nucleus_top_p: float = 1.0  # nucleus sampling threshold of both stages
    generation_backend: str = "auto"  # "hf" (HF generate), "static" (static KV cache) or "auto" (static on CPU)
    invalid_call_penalty: float = -0.5  # added to an agent's return for each turn its call could not be parsed or run

    # optimisation
    adam_lr: float = 1e-6  # peak AdamW learning rate
    lr_schedule: str = "constant_with_warmup"  # transformers scheduler name: constant, linear, cosine, ...
    lr_warmup_steps: int = 5  # optimiser steps of linear warm-up
    adam_weight_decay: float = 0.0  # AdamW weight decay
    kl_beta: float = 0.02  # weight of the k3 KL to the frozen reference; 0 loads no reference model
    clip_eps_low: float = 0.2  # the policy ratio is clipped below at 1 - clip_eps_low
    clip_eps_high: float = 0.28  # and above at 1 + clip_eps_high (clip-higher)
    ppo_epochs: int = 1  # optimisation passes over each iteration's rollouts
    minibatch_size: int = 8  # sequences (prompt + one completion) per forward/backward pass
    grad_accum: int = 1  # minibatches accumulated into one optimiser step
    grad_clip: float = 1.0  # global L2 norm the gradient is clipped to
    use_bf16: bool = True  # bfloat16 weights on a GPU (ignored on a CPU)
    grad_checkpointing: bool = True  # recompute activations in the backward pass to save memory

    # evaluation, logs, checkpoints
    eval_every_iters: int = 20  # iterations between evaluations on held-out world seeds
    eval_rollouts: int = 4  # episodes per evaluation
    sample_every_episodes: int = 40  # episodes between two full episodes written to Sample_EP.logs
    checkpoint_every_iters: int = 100  # iterations between checkpoints (0: only the final model)
    output_dir: str = "runs"  # parent folder of the run's folder
    run_name: str = "spread-grpo"  # the run's folder under output_dir: train.logs, Sample_EP.logs, checkpoints
    resume_from: str = ""  # "latest": the newest checkpoint-N in the run's folder (none yet: afresh), a checkpoint, ""

    def __post_init__(self) -> None:
        at_least_one = ("episode_length", "train_iterations", "max_new_tokens_think", "max_new_tokens_act",
                        "ppo_epochs", "minibatch_size", "grad_accum", "eval_every_iters", "eval_rollouts",
                        "sample_every_episodes")
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.n_agents <= 4:
            raise ValueError(f"n_agents must be between 2 and 4, got {self.n_agents}")
        if self.rollouts_per_group < 2:
            raise ValueError(f"rollouts_per_group must be >= 2 for group-relative advantages, "
                             f"got {self.rollouts_per_group}")
        if not 0.0 <= self.local_ratio <= 1.0:
            raise ValueError(f"local_ratio must be in [0, 1], got {self.local_ratio}")
        if not 0.0 < self.nucleus_top_p <= 1.0:
            raise ValueError(f"nucleus_top_p must be in (0, 1], got {self.nucleus_top_p}")
        if self.generation_backend not in GENERATION_BACKENDS:
            raise ValueError(f"generation_backend must be one of {', '.join(GENERATION_BACKENDS)}, "
                             f"got {self.generation_backend!r}")
        if not self.run_name or "/" in self.run_name:
            raise ValueError(f"run_name must be a folder name (no '/'), got {self.run_name!r}")
        for name in ("sampling_temperature", "adam_lr", "lr_warmup_steps", "adam_weight_decay", "kl_beta",
                     "clip_eps_low", "clip_eps_high", "grad_clip", "checkpoint_every_iters"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.invalid_call_penalty > 0:
            raise ValueError(f"invalid_call_penalty must be <= 0 (it is added to the return), "
                             f"got {self.invalid_call_penalty}")
