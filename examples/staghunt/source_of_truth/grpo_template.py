"""GRPO training of an LLM that plays every hunter of the Stag Hunt game (env_move.StagHuntGame).

How to use this template: copy it to train.py and fill every CUSTOMIZE section; every GENERIC
section (its marker line says DO NOT MODIFY) stays byte-identical, marker lines included. A section
starts at its marker line and runs until the next marker line (the last one to the end of the
file); one CUSTOMIZE section sits inside the body of the class HunterPrompts, with indented markers.

One update (one of `max_steps`), on every process:
    1. Rollout. `gradient_accumulation_steps` groups; a group is `num_generations` (G) games built
       from the same seed. Each turn, every hunter of every live game of the group gets two
       generations: a thinking stage, then an action stage that sees the thinking and must answer
       with ONE JSON helper call {"action": NAME, "agent_id": I, "args": {...}}. Each stage is ONE
       batched `model.generate` over all (game, hunter) pairs, capped at `max_completion_length`
       new tokens. The call is parsed and dispatched to a helper, which queues the hunter's move
       with `game.declare`; then `game.advance()` resolves all hunters at once. An action that
       cannot be parsed or run queues WAIT instead and adds `invalid_move_penalty` to the reward;
       it never stops the episode.
    2. Advantages, per hunter role: a hunter's episode return R is compared with the same hunter
       in the other G - 1 games of its group, A = (R - mean) / (std + 1e-4) (unbiased std, as in
       TRL). Every token that hunter generated in that game gets A.
    3. Loss, per generated token: -min(rho * A, clip(rho, 1 - epsilon, 1 + epsilon) * A) plus
       beta * k3-KL to a frozen reference, k3 = exp(ref - logp) - (ref - logp) - 1 (no reference
       model is loaded when beta == 0). Aggregated as a token mean over every generated token of
       the update on this process ("token-mean"/DAPO aggregation, no per-sequence length bias).
       Micro-batches of `per_device_train_batch_size` sequences are accumulated, the gradient is
       clipped to `max_grad_norm`, and AdamW takes ONE step; the lr follows `lr_scheduler_type`
       with `warmup_ratio` of `max_steps` as warm-up.
Token-in / token-out: the loss is computed on exactly the token ids generate() returned, with a
mask that is 1 on generated tokens only (prompt and observation tokens are 0); decoded text is
never re-tokenised for training.

With one optimiser step per rollout, pi_old is pi_theta detached: the ratio is 1 and the clip does
not act (it would with several passes), so with beta == 0 the loss is -mean(A) over tokens and
often near 0. That is expected.

Multi-GPU: `accelerate launch --num_processes N train.py --field value ...`. Each process plays its
own groups (seeds differ by process), DDP averages the gradients, and every process takes exactly
one optimiser step per update. Metrics are averaged over processes before they are logged.

Precision: `bf16` is mixed precision as in TRL: fp32 master weights and optimiser state, bf16 autocast
in every forward pass (generation included); the frozen reference is stored in bf16. In pure bf16
weights an AdamW step of the size of `learning_rate` would be rounded away.

Logs: the main process hands the metrics of every `logging_steps`-th update and one full episode
(the first of the run, then one every `sample_every` episodes) to `RunLogger`, which writes
`train.logs` and `Sample_EP.logs` into `output_dir`.

Checkpoints and resume: every `save_steps` updates, `output_dir/checkpoint-N` holds the weights, the tokenizer
and the config, and what an exact resume needs: the optimizer and scheduler states, the step and episode
counters and every process's random generators (written whole or not at all). `--resume_from latest` continues
from the newest one (a fresh start while there is none), `--resume_from FOLDER` from that one: the next update is
N + 1, RunLogger's `start` gets `resumed_at` N (0 for a fresh start), and on the same machine and process count
the parameters at the end are those of a run never interrupted.
"""

# === GENERIC — DO NOT MODIFY ===
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser, get_scheduler

from grpo_config import GRPOConfig

Messages = list[dict[str, str]]
ADVANTAGE_EPS = 1e-4  # added to the group std, as TRL
ACTION_ERRORS = (ValueError, KeyError, TypeError)  # what a bad action may raise; anything else is a bug

# === CUSTOMIZE ===
# Imports and the game. Import the game module (env_move), the helpers (helpers) and the prompt
# builders (prompt_template) used by the sections below. Then write `make_game(config, seed)`:
# a new env_move.StagHuntGame sized from the config (grid_size, num_hunters, horizon) and
# started from `seed`.
def make_game(config: GRPOConfig, seed: int) -> Any:
    raise NotImplementedError("CUSTOMIZE make_game")


# === GENERIC — DO NOT MODIFY ===
class HunterPrompts:
    """What the model is shown for one hunter's turn: observation text, then the token ids of the
    thinking-stage and action-stage prompts (the chat template of the model's tokenizer)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    # === CUSTOMIZE ===
    # The prompt builder methods. `format_observation(game, hunter)` returns what that hunter
    # sees as text (use helpers.observation_to_text). `thinking_messages(observation, hunter)`
    # returns the stage-1 chat messages that ask for reasoning (use
    # prompt_template.create_thinking_prompt); `action_messages(observation, thinking, hunter)`
    # returns the stage-2 messages that ask for ONE JSON action given that reasoning (use
    # prompt_template.create_single_stage_prompt). Messages are [{"role": ..., "content": ...}].
    def format_observation(self, game: Any, hunter: int) -> str:
        raise NotImplementedError("CUSTOMIZE format_observation")

    def thinking_messages(self, observation: str, hunter: int) -> Messages:
        raise NotImplementedError("CUSTOMIZE thinking_messages")

    def action_messages(self, observation: str, thinking: str, hunter: int) -> Messages:
        raise NotImplementedError("CUSTOMIZE action_messages")

    # === GENERIC — DO NOT MODIFY ===
    def prompt_ids(self, messages: Messages) -> list[int]:
        """Chat messages -> prompt token ids, ending with the assistant turn's opening."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------- generation
@dataclass
class Completion:
    ids: list[int]  # generated ids, ending with EOS unless truncated
    truncated: bool  # hit max_completion_length without EOS


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts -> (B, T) left-padded ids and (B, T) attention mask."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros_like(input_ids)  # (B, T)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[row, width - len(prompt):] = 1
    return input_ids, attention_mask


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    """Generate in eval mode: in train mode HF turns the KV cache off under gradient checkpointing."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def generate_completions(model: torch.nn.Module, tokenizer: Any, prompts: list[list[int]],
                         config: GRPOConfig) -> list[Completion]:
    """ONE batched, sampled `generate` call over all prompts of a stage."""
    device = next(model.parameters()).device
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    input_ids, attention_mask = left_pad(prompts, pad_id)  # (B, T)
    with eval_mode(model):
        out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                             max_new_tokens=config.max_completion_length, do_sample=True,
                             temperature=config.temperature, top_p=1.0, top_k=0, use_cache=True,
                             pad_token_id=pad_id, eos_token_id=eos_id)  # (B, T + N')
    completions = []
    for row in out[:, input_ids.shape[1]:].cpu().tolist():  # (B, N') with N' <= max_completion_length
        if eos_id in row:
            completions.append(Completion(row[: row.index(eos_id) + 1], truncated=False))
        else:
            completions.append(Completion(row[: config.max_completion_length], truncated=True))
    return completions


# === CUSTOMIZE ===
# Actions. `parse_action(text, hunter) -> dict` finds the JSON call
# {"action": NAME, "agent_id": I, "args": {...}} in the action-stage output of `hunter` and
# raises ValueError when there is none or it is malformed. `dispatch_action(game, call) -> bool`
# runs the helper named by call["action"] from helpers.py as NAME(game, agent_id, **args); the
# helper queues the hunter's move with game.declare and returns whether its task is completed
# (raise ValueError for an unknown helper; a bad argument raises TypeError or ValueError).
# `fallback_action(game, hunter)` queues the move played after any failure: WAIT.
def parse_action(text: str, hunter: int) -> dict:
    raise NotImplementedError("CUSTOMIZE parse_action")


def dispatch_action(game: Any, call: dict) -> bool:
    raise NotImplementedError("CUSTOMIZE dispatch_action")


def fallback_action(game: Any, hunter: int) -> None:
    raise NotImplementedError("CUSTOMIZE fallback_action")


# === GENERIC — DO NOT MODIFY ===
# ---------------------------------------------------------------- rollouts
@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    episode: int  # game index within its group
    hunter: int
    advantage: float = 0.0


@dataclass
class ActionOutcome:
    call: dict | None  # the parsed call, None when unparseable
    result: bool | None  # what the helper returned, None when it did not run to the end
    valid: bool
    error: str = ""


@dataclass
class GroupRollout:
    seed: int
    returns: list[list[float]]  # [episode][hunter] sum of rewards, penalties included
    samples: list[Sample] = field(default_factory=list)
    num_actions: int = 0
    num_invalid: int = 0
    num_truncated: int = 0
    transcript: dict | None = None  # game 0 of the group, when recorded


def resolve_action(game: Any, hunter: int, text: str) -> ActionOutcome:
    """Parse and run one action output; on any bad action queue the fallback instead."""
    call = None
    try:
        call = parse_action(text, hunter)
        result = dispatch_action(game, call)
        if not isinstance(result, bool):
            raise TypeError(f"helper {call.get('action')!r} returned {type(result).__name__}, not bool")
        return ActionOutcome(call, result, True)
    except ACTION_ERRORS as exc:
        fallback_action(game, hunter)
        return ActionOutcome(call, None, False, f"{type(exc).__name__}: {exc}")


def play_group(model: torch.nn.Module, tokenizer: Any, prompts: HunterPrompts, config: GRPOConfig,
               seed: int, record: bool) -> GroupRollout:
    """G games from `seed`, all (game, hunter) pairs batched together in each generation stage."""
    games = [make_game(config, seed) for _ in range(config.num_generations)]
    num_hunters = games[0].num_hunters
    rollout = GroupRollout(seed, [[0.0] * num_hunters for _ in games])
    turns: list[dict] = []
    initial_board = games[0].render() if record else ""
    for turn in range(config.horizon):
        live = [e for e, game in enumerate(games) if not game.finished]
        if not live:
            break
        pairs = [(e, h) for e in live for h in range(num_hunters)]
        observations = [prompts.format_observation(games[e], h) for e, h in pairs]
        think_messages = [prompts.thinking_messages(obs, h) for obs, (_, h) in zip(observations, pairs)]
        think_ids = [prompts.prompt_ids(m) for m in think_messages]
        thoughts = generate_completions(model, tokenizer, think_ids, config)
        thinking = [tokenizer.decode(c.ids, skip_special_tokens=True) for c in thoughts]
        act_messages = [prompts.action_messages(obs, t, h) for obs, t, (_, h) in zip(observations, thinking, pairs)]
        act_ids = [prompts.prompt_ids(m) for m in act_messages]
        actions = generate_completions(model, tokenizer, act_ids, config)
        action_texts = [tokenizer.decode(c.ids, skip_special_tokens=True) for c in actions]
        outcomes = [resolve_action(games[e], h, text) for (e, h), text in zip(pairs, action_texts)]
        declared = [games[e].pending_move(h) or "WAIT" for e, h in pairs]
        results = {e: games[e].advance() for e in live}

        turn_rewards = []
        for i, (e, h) in enumerate(pairs):
            for prompt, completion in ((think_ids[i], thoughts[i]), (act_ids[i], actions[i])):
                rollout.samples.append(Sample(prompt, completion.ids, e, h))
                rollout.num_truncated += completion.truncated
            reward = float(results[e].rewards[h]) + (0.0 if outcomes[i].valid else config.invalid_move_penalty)
            rollout.returns[e][h] += reward
            turn_rewards.append(reward)
        rollout.num_actions += len(pairs)
        rollout.num_invalid += sum(not o.valid for o in outcomes)

        if record and 0 in live:
            hunters = [{"hunter": h, "prompt": think_messages[i], "thinking": thinking[i],
                        "action_prompt": act_messages[i], "action_output": action_texts[i],
                        "parsed_call": outcomes[i].call, "helper_result": outcomes[i].result,
                        "valid": outcomes[i].valid, "error": outcomes[i].error, "declared_move": declared[i],
                        "reward": turn_rewards[i]}
                       for i, (e, h) in enumerate(pairs) if e == 0]
            turns.append({"turn": turn, "hunters": hunters, "events": results[0].events, "board": games[0].render()})
    if record:
        rollout.transcript = {"seed": seed, "returns": rollout.returns[0], "initial_board": initial_board,
                              "turns": turns}
    return rollout


# ---------------------------------------------------------------- GRPO math
def group_advantages(returns: torch.Tensor) -> torch.Tensor:
    """(G, H) episode returns -> (G, H) advantages, normalised per hunter role over the group."""
    mean = returns.mean(dim=0, keepdim=True)  # (1, H)
    std = returns.std(dim=0, keepdim=True)  # (1, H), unbiased as TRL
    return (returns - mean) / (std + ADVANTAGE_EPS)


def per_token_logps(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, T-1) log-probability of each next token."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]  # (B, T-1, V)
    logps = torch.log_softmax(logits.float(), dim=-1)
    return logps.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)


def grpo_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, ref_logps: torch.Tensor | None,
                    advantages: torch.Tensor, epsilon: float,
                    beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token loss, k3 KL and clip indicator, all (B, T-1); `advantages` is (B,)."""
    adv = advantages.unsqueeze(1)  # (B, 1)
    ratio = torch.exp(logps - old_logps)  # (B, T-1)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    loss = -torch.min(ratio * adv, clipped_ratio * adv)
    if ref_logps is not None and beta > 0:
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1  # k3 estimator, >= 0
        loss = loss + beta * kl
    else:
        kl = torch.zeros_like(logps)
    is_clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + epsilon) & (adv > 0))
    return loss, kl, is_clipped.float()


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T) prompt + completion, right-padded
    attention_mask: torch.Tensor  # (B, T)
    completion_mask: torch.Tensor  # (B, T-1) 1 where the predicted token was generated
    advantages: torch.Tensor  # (B,)


def collate(samples: list[Sample], pad_id: int, device: torch.device) -> Batch:
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    completion_mask = torch.zeros((len(samples), width - 1))
    for row, s in enumerate(samples):
        ids = s.prompt_ids + s.completion_ids
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
        # position t predicts token t + 1: the completion is predicted from position len(prompt) - 1 on
        completion_mask[row, len(s.prompt_ids) - 1: len(ids) - 1] = 1
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return Batch(input_ids.to(device), attention_mask.to(device), completion_mask.to(device), advantages.to(device))


def chunks(items: list, size: int) -> list[list]:
    return [items[i: i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------- training state and one update
@dataclass
class TrainState:
    config: GRPOConfig
    accelerator: Accelerator
    model: torch.nn.Module
    ref_model: torch.nn.Module | None
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any


def load_state(config: GRPOConfig, accelerator: Accelerator, policy: str = "") -> TrainState:
    """The tokenizer, the policy (from `policy`: the model, or a checkpoint to resume), the frozen reference
    (always the model itself), the optimizer and the scheduler."""
    tokenizer = AutoTokenizer.from_pretrained(config.model_name_or_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # fp32 master weights: in pure bf16 an AdamW step of ~learning_rate (1e-6) is below the rounding
    # step of most weights and is lost; under bf16 mixed precision accelerate autocasts the forward
    model = AutoModelForCausalLM.from_pretrained(policy or config.model_name_or_path, dtype=torch.float32)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ref_model = None
    if config.beta > 0:
        ref_dtype = torch.bfloat16 if accelerator.mixed_precision == "bf16" else torch.float32  # frozen: bf16 is enough
        ref_model = AutoModelForCausalLM.from_pretrained(config.model_name_or_path, dtype=ref_dtype)
        ref_model = ref_model.to(accelerator.device).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_scheduler(config.lr_scheduler_type, optimizer,
                              num_warmup_steps=math.ceil(config.warmup_ratio * config.max_steps),
                              num_training_steps=config.max_steps)
    # the scheduler stays unwrapped: it steps once per optimiser step on every process
    model, optimizer = accelerator.prepare(model, optimizer)
    return TrainState(config, accelerator, model, ref_model, tokenizer, optimizer, scheduler)


def optimisation_step(state: TrainState, samples: list[Sample]) -> dict[str, float]:
    """Accumulate the token-mean GRPO loss over all `samples` in micro-batches, then ONE optimiser step."""
    c, accelerator = state.config, state.accelerator
    total_tokens = max(sum(len(s.completion_ids) for s in samples), 1)
    micro_batches = chunks(samples, c.per_device_train_batch_size)
    loss_sum = kl_sum = clipped_sum = 0.0
    for i, micro in enumerate(micro_batches):
        batch = collate(micro, state.tokenizer.pad_token_id, accelerator.device)
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else accelerator.no_sync(state.model):
            logps = per_token_logps(state.model, batch.input_ids, batch.attention_mask)  # (B, T-1)
            ref_logps = None
            if state.ref_model is not None:
                with torch.no_grad():
                    ref_logps = per_token_logps(state.ref_model, batch.input_ids, batch.attention_mask)
            # one pass per rollout: pi_old is the current policy, detached
            loss_tok, kl_tok, clip_tok = grpo_token_loss(logps, logps.detach(), ref_logps, batch.advantages,
                                                         c.epsilon, c.beta)
            loss = (loss_tok * batch.completion_mask).sum() / total_tokens
            accelerator.backward(loss)
        loss_sum += loss.item()
        kl_sum += (kl_tok.detach() * batch.completion_mask).sum().item()
        clipped_sum += (clip_tok * batch.completion_mask).sum().item()
    grad_norm = accelerator.clip_grad_norm_(state.model.parameters(), c.max_grad_norm)
    learning_rate = state.scheduler.get_last_lr()[0]  # the lr this step uses
    state.optimizer.step()
    state.scheduler.step()
    state.optimizer.zero_grad(set_to_none=True)
    return {"loss": loss_sum, "kl": kl_sum / total_tokens, "clip_ratio": clipped_sum / total_tokens,
            "grad_norm": float(grad_norm), "learning_rate": learning_rate}


def rollout_statistics(rollouts: list[GroupRollout]) -> dict[str, float]:
    """Assign advantages to every sample; return this process's reward and completion metrics."""
    returns = torch.tensor([r.returns for r in rollouts], dtype=torch.float32)  # (K, G, H)
    for k, rollout in enumerate(rollouts):
        advantages = group_advantages(returns[k])  # (G, H)
        for sample in rollout.samples:
            sample.advantage = advantages[sample.episode, sample.hunter].item()
    group_std = returns.std(dim=1)  # (K, H): one value per group and hunter role
    lengths = [len(s.completion_ids) for r in rollouts for s in r.samples]
    actions = sum(r.num_actions for r in rollouts)
    return {"reward": returns.mean().item(), "reward_std": group_std.mean().item(),
            "frac_reward_zero_std": (group_std < 1e-6).float().mean().item(),
            "invalid_action_rate": sum(r.num_invalid for r in rollouts) / max(actions, 1),
            "completion_mean_length": sum(lengths) / max(len(lengths), 1),
            "completion_clipped_ratio": sum(r.num_truncated for r in rollouts) / max(len(lengths), 1),
            "num_tokens": float(sum(lengths))}


def reduce_mean(accelerator: Accelerator, values: dict[str, float]) -> dict[str, float]:
    keys = sorted(values)
    tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=accelerator.device)
    return dict(zip(keys, accelerator.reduce(tensor, reduction="mean").tolist()))


# ---------------------------------------------------------------- checkpoints and exact resume
TRAINING_STATE = "training_state.pt"  # beside a checkpoint's weights: optimizer, scheduler, step and episodes


def rng_state() -> dict[str, Any]:
    """This process's random generators: Python's, torch's CPU generator and every CUDA device's."""
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(rng: dict[str, Any]) -> None:
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"]:
        torch.cuda.set_rng_state_all(rng["cuda"])


def save_model(state: TrainState, name: str, progress: dict[str, int] | None = None) -> None:
    """The model, tokenizer and config in output_dir/NAME; given `progress` (step, episodes_done), also what an
    exact resume needs: the optimizer, the scheduler, the counters and every process's random generators. It is
    written into NAME.partial and renamed once whole, so a job killed while saving leaves no half checkpoint."""
    accelerator = state.accelerator
    out = Path(state.config.output_dir) / name
    partial = out.with_name(f"{name}.partial")
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(state.model)
    if accelerator.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    accelerator.wait_for_everyone()
    if progress is not None:
        torch.save(rng_state(), partial / f"rng_state_{accelerator.process_index}.pt")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        accelerator.unwrap_model(state.model).save_pretrained(partial, state_dict=state_dict)
        state.tokenizer.save_pretrained(partial)
        (partial / "grpo_config.json").write_text(json.dumps(dataclasses.asdict(state.config), indent=2))
        if progress is not None:
            torch.save({"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict(),
                        **progress}, partial / TRAINING_STATE)
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    accelerator.wait_for_everyone()


def checkpoints(output_dir: str) -> list[tuple[int, Path]]:
    """(step, folder) of every whole checkpoint-N in output_dir that can be resumed from, oldest first."""
    found = []
    for folder in Path(output_dir).glob("checkpoint-*"):
        number = folder.name.removeprefix("checkpoint-")
        if number.isdigit() and (folder / TRAINING_STATE).is_file():
            found.append((int(number), folder))
    return sorted(found)


def resume_folder(config: GRPOConfig) -> Path | None:
    """The checkpoint `resume_from` names: "latest" is the newest in output_dir (None while there is none)."""
    if not config.resume_from:
        return None
    if config.resume_from == "latest":
        found = checkpoints(config.output_dir)
        return found[-1][1] if found else None
    folder = Path(config.resume_from)
    if not (folder / TRAINING_STATE).is_file():
        raise FileNotFoundError(f"resume_from={config.resume_from}: no {TRAINING_STATE} there; give a "
                                f"checkpoint-N folder, \"latest\" or \"\"")
    return folder


def restore(state: TrainState, folder: Path) -> dict[str, int]:
    """The optimizer, the scheduler and this process's random generators as the checkpoint saved them (its weights
    are the policy load_state loaded); the step and episode counters it was saved at."""
    saved = torch.load(folder / TRAINING_STATE, map_location="cpu", weights_only=False)
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    set_rng_state(torch.load(folder / f"rng_state_{state.accelerator.process_index}.pt", weights_only=False))
    return {"step": saved["step"], "episodes_done": saved["episodes_done"]}


# === CUSTOMIZE ===
# The logging system. `RunLogger(config)` is built on the main process only and writes into
# config.output_dir: `train.logs` (training statistics) and `Sample_EP.logs` (sampled episodes).
#   start(info): once before training (again when a run resumes: train.logs is continued, not started
#     afresh); info has model, max_steps, num_processes, episodes_per_step, num_generations,
#     num_hunters, horizon, config (a dict of every field) and resumed_at (0 for a fresh start).
#   log_update(metrics): every logging_steps updates and after the last; metrics has step,
#     episodes, loss, grad_norm, learning_rate, kl, clip_ratio, reward, reward_std,
#     frac_reward_zero_std, invalid_action_rate, completion_mean_length,
#     completion_clipped_ratio, num_tokens and step_time (seconds).
#   log_episode(episode): one full game; episode has step, episode (1-based global number), seed,
#     returns, initial_board and turns: each {turn, events, board, hunters: [{hunter, prompt,
#     thinking, action_prompt, action_output, parsed_call, helper_result, valid, error,
#     declared_move, reward}]} where prompt/action_prompt are the chat messages.
#   finish(summary): once after training; summary has steps, episodes and seconds.
class RunLogger:
    def __init__(self, config: GRPOConfig) -> None:
        raise NotImplementedError("CUSTOMIZE RunLogger")

    def start(self, info: dict[str, Any]) -> None:
        raise NotImplementedError("CUSTOMIZE RunLogger.start")

    def log_update(self, metrics: dict[str, Any]) -> None:
        raise NotImplementedError("CUSTOMIZE RunLogger.log_update")

    def log_episode(self, episode: dict[str, Any]) -> None:
        raise NotImplementedError("CUSTOMIZE RunLogger.log_episode")

    def finish(self, summary: dict[str, Any]) -> None:
        raise NotImplementedError("CUSTOMIZE RunLogger.finish")


# === GENERIC — DO NOT MODIFY ===
# ---------------------------------------------------------------- main loop
def train(config: GRPOConfig) -> None:
    # bf16 as in TRL: mixed precision (bf16 autocast over fp32 weights), on GPU only
    accelerator = Accelerator(mixed_precision="bf16" if config.bf16 and torch.cuda.is_available() else "no")
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    resume_from = resume_folder(config)
    state = load_state(config, accelerator, str(resume_from or ""))
    torch.manual_seed(config.seed + 1_000_003 * accelerator.process_index)  # processes sample differently
    prompts = HunterPrompts(state.tokenizer)
    logger = RunLogger(config) if accelerator.is_main_process else None
    groups_per_step = config.gradient_accumulation_steps * accelerator.num_processes
    episodes_per_step = groups_per_step * config.num_generations
    # the last thing before the first update: the random generators continue where the checkpoint left them
    done = restore(state, resume_from) if resume_from is not None else {"step": 0, "episodes_done": 0}
    if logger:
        logger.start({"model": config.model_name_or_path, "max_steps": config.max_steps,
                      "num_processes": accelerator.num_processes, "episodes_per_step": episodes_per_step,
                      "num_generations": config.num_generations, "num_hunters": config.num_hunters,
                      "horizon": config.horizon, "config": dataclasses.asdict(config), "resumed_at": done["step"]})
    run_started = time.perf_counter()
    episodes_done = done["episodes_done"]
    for step in range(done["step"] + 1, config.max_steps + 1):
        started = time.perf_counter()
        # record the run's first episode, then the first of every update that reaches a multiple of sample_every
        next_sample = (episodes_done // config.sample_every + 1) * config.sample_every
        record = accelerator.is_main_process and (step == 1 or episodes_done + episodes_per_step >= next_sample)
        policy = accelerator.unwrap_model(state.model)
        rollouts = []
        for k in range(config.gradient_accumulation_steps):
            group = (step - 1) * groups_per_step + k * accelerator.num_processes + accelerator.process_index
            rollouts.append(play_group(policy, state.tokenizer, prompts, config, config.seed + group,
                                       record and k == 0))
        local = rollout_statistics(rollouts)
        stats = optimisation_step(state, [s for r in rollouts for s in r.samples])
        local.update({k: stats[k] for k in ("loss", "kl", "clip_ratio", "grad_norm")})
        local["step_time"] = time.perf_counter() - started
        metrics = reduce_mean(accelerator, local)
        metrics["num_tokens"] *= accelerator.num_processes
        episodes_done += episodes_per_step
        if logger and (step % config.logging_steps == 0 or step == config.max_steps):
            logger.log_update({"step": step, "episodes": episodes_done, "learning_rate": stats["learning_rate"],
                               **metrics})
        if logger and record:
            logger.log_episode({"step": step, "episode": episodes_done - episodes_per_step + 1,
                                **rollouts[0].transcript})
        if config.save_steps and step % config.save_steps == 0 and step != config.max_steps:
            save_model(state, f"checkpoint-{step}", {"step": step, "episodes_done": episodes_done})
    save_model(state, "final")
    if logger:
        logger.finish({"steps": config.max_steps, "episodes": episodes_done,
                       "seconds": time.perf_counter() - run_started})


def main() -> None:
    config = HfArgumentParser(GRPOConfig).parse_args_into_dataclasses()[0]
    train(config)


if __name__ == "__main__":
    main()
