"""Training configuration for GRPO on the Stag Hunt game, in TRL's `GRPOConfig` vocabulary.

Parsed by `transformers.HfArgumentParser`, so every field is a command-line flag of train.py:

    python train.py --model_name_or_path /path/to/model --max_steps 2 --num_generations 4 --bf16 false

Units: `max_steps` counts optimiser updates (each update plays `gradient_accumulation_steps` groups of
`num_generations` episodes per process, then takes ONE optimiser step); `horizon` counts game turns
(every hunter acts once per turn, with two generations: thinking, then action); `sample_every`
counts episodes; `save_steps` and `logging_steps` count updates.
"""

from dataclasses import dataclass, field


@dataclass
class GRPOConfig:
    # --- model ---
    model_name_or_path: str = field(default="Qwen/Qwen3-4B-Instruct-2507", metadata={
        "help": "Hub id or local folder of the policy (and of the frozen reference when beta > 0)."})
    seed: int = field(default=0, metadata={
        "help": "Seeds torch and the games; the k-th group of the run plays game seed `seed + k`."})

    # --- game ---
    num_hunters: int = field(default=2, metadata={"help": "Hunters in the Stag Hunt game (1-4)."})
    grid_size: int = field(default=7, metadata={"help": "Side of the square grid (4-15)."})
    horizon: int = field(default=30, metadata={"help": "Turns per episode; every hunter acts once per turn."})

    # --- rollouts ---
    num_generations: int = field(default=8, metadata={
        "help": "Group size G: episodes played from the same game seed; advantages compare them."})
    max_completion_length: int = field(default=256, metadata={
        "help": "New-token cap of every generation, the thinking stage and the action stage alike."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of both stages (> 0)."})
    invalid_move_penalty: float = field(default=-0.1, metadata={
        "help": "Reward added to a hunter for each turn whose action could not be parsed or run "
                "(the hunter then WAITs)."})

    # --- optimisation ---
    max_steps: int = field(default=500, metadata={
        "help": "Optimiser updates in the run (not episodes); each update plays fresh groups."})
    learning_rate: float = field(default=1e-6, metadata={"help": "Peak AdamW learning rate."})
    lr_scheduler_type: str = field(default="cosine", metadata={
        "help": "transformers scheduler name: constant, constant_with_warmup, linear, cosine, ..."})
    warmup_ratio: float = field(default=0.05, metadata={"help": "Fraction of max_steps spent warming up the lr."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    beta: float = field(default=0.0, metadata={
        "help": "KL coefficient to the frozen reference (k3 estimator); 0 loads no reference model."})
    epsilon: float = field(default=0.2, metadata={"help": "Clip range of the policy ratio: [1 - eps, 1 + eps]."})
    per_device_train_batch_size: int = field(default=8, metadata={
        "help": "Sequences (one prompt + one completion each) per forward/backward pass."})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "Groups of num_generations episodes played per process and accumulated into one update."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping threshold (global L2 norm)."})
    bf16: bool = field(default=True, metadata={
        "help": "bf16 mixed precision on GPU: fp32 master weights, bf16 autocast, a bf16 frozen reference "
                "(ignored on CPU)."})
    gradient_checkpointing: bool = field(default=True, metadata={
        "help": "Recompute activations in the backward pass to save memory."})

    # --- logs and checkpoints ---
    output_dir: str = field(default="outputs", metadata={
        "help": "Folder of train.logs, Sample_EP.logs, checkpoints and the final model."})
    logging_steps: int = field(default=1, metadata={"help": "Updates between two lines of train.logs."})
    sample_every: int = field(default=10, metadata={
        "help": "Episodes between two full episodes written to Sample_EP.logs."})
    save_steps: int = field(default=100, metadata={"help": "Updates between checkpoints; 0 saves only the final model."})
    resume_from: str = field(default="", metadata={
        "help": "\"latest\": resume from the newest checkpoint-N in output_dir (a fresh start while there is "
                "none); a checkpoint folder: from that one; \"\": start afresh."})

    def __post_init__(self) -> None:
        for name in ("num_hunters", "grid_size", "horizon", "max_completion_length", "max_steps",
                     "per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps", "sample_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 for group-relative advantages, got {self.num_generations}")
        if not 1 <= self.num_hunters <= 4:
            raise ValueError(f"num_hunters must be between 1 and 4, got {self.num_hunters}")
        if not 4 <= self.grid_size <= 15:
            raise ValueError(f"grid_size must be between 4 and 15, got {self.grid_size}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (GRPO compares sampled episodes), got {self.temperature}")
        if not 0.0 <= self.warmup_ratio <= 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        for name in ("learning_rate", "weight_decay", "beta", "epsilon", "max_grad_norm", "save_steps", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.invalid_move_penalty > 0:
            raise ValueError(f"invalid_move_penalty must be <= 0 (it is added to the reward), "
                             f"got {self.invalid_move_penalty}")
