"""GRPO for multi-turn, multi-agent LLM play of the Crossing game: the training template.

Copy this file to `train.py` and fill every `# === CUSTOMIZE ===` section; leave every
`# === GENERIC — DO NOT MODIFY ===` section byte-identical. Each section here is also closed by an
end marker, an optional extra that keeps the text between sections apart. Each CUSTOMIZE section
starts with a comment saying what it must provide.

What one update does (per process):
    1. Rollout: G = `group_size` episodes of the game, all reset from the same seed. Each turn, every
       agent of every live episode gets two generations: a thinking stage, then an action stage that
       sees the thinking. Both stages are ONE batched generate call over all (episode, agent) pairs.
       The action text is parsed into a JSON helper call {"action", "agent_id", "args"}; the helper
       sets the agent's low-level move in the game (`env.choose`) and returns whether its task
       is completed (bool); then the game steps all agents at once. An unparseable or invalid action,
       or a helper that returns anything but a bool, plays the fallback action and costs
       `invalid_action_penalty`; it never crashes the episode.
    2. Advantages: each agent's episode return is compared with the same agent role in the other
       G - 1 episodes of the group: A = (R - mean) / (std + 1e-4), std over the group (unbiased, as
       TRL). Every generated token of that agent in that episode gets A.
    3. Loss: per generated token, the clipped ratio objective
       -min(rho * A, clip(rho, 1 - epsilon_low, 1 + epsilon_high) * A) plus beta * k3-KL to a frozen
       reference, k3 = exp(ref - logp) - (ref - logp) - 1. Aggregated as a token mean over all
       generated tokens of one optimiser step on every process (no per-sequence length bias, no
       mean of per-process means). Prompt and game tokens are masked out; a NaN in a masked-out
       position stays out. The log-ratio is clamped to +-20 before exp and k3 to at most 10 (verl's
       bounds), so one extreme token cannot overflow float32 or swamp the step. Log-probs are those of
       the sampling distribution, softmax(logits / temperature).
What is kept from GRPO (DeepSeekMath, TRL's `GRPOTrainer` names): group-relative advantages, the
clipped ratio with asymmetric clip (`epsilon_low`, `epsilon_high`), the k3 KL estimator with `beta`
(no reference model is loaded when beta = 0), `num_iterations` passes over a rollout batch.
Departures: advantages are per agent role; the loss is the token mean ("dapo" aggregation).

Token-in / token-out: the loss is computed on exactly the token ids the rollout generated, kept
from generation, never on re-tokenised decoded text.

With one optimiser step per rollout batch and num_iterations = 1, pi_old is pi_theta detached, so
the ratio is 1, the clip never acts, and with beta = 0 the reported loss starts near 0: expected.

Logs: `train.logs` gets one `train` line per update (loss, kl, avg_return and return_std, lr, gradNorm,
clip_ratio, format_err: the share of action outputs that did not parse or dispatch, ...) and an `eval` line every
`eval_interval` updates, written by Python logging as `TIME - crossing - INFO - KIND key=value ...`
(also shown on stderr). `Sample_EP.logs` gets one full episode every
`sample_log_interval` episodes: per turn and agent the prompt, thinking, action output, parsed call,
helper result and rewards, and the game board after each turn. With `report_to` tensorboard or wandb, every
value of the `train` and `eval` lines except `update` also goes to that tracker through accelerate, under
`log_dir`/grpo, as train/KEY and eval/KEY (eval_avg_return -> eval/avg_return) at step = update.

Multi-GPU: `accelerate launch --num_processes N train.py --field value ...`; each process plays its
own group (seed offset by process index), gradients are averaged by accelerate.

Checkpoints and resume: every `save_interval` updates, `output_dir/checkpoint-N` holds the weights, the
tokenizer and the config, and what an exact resume needs: the optimizer and scheduler states, the update and
episode counters and every process's random generators (written whole or not at all). `--resume_from latest`
continues from the newest one (a fresh start while there is none), `--resume_from FOLDER` from that one: the
next update is N + 1, `train.logs` goes on with it, and on the same machine and process count the parameters
at the end are those of a run never interrupted.
"""

# === GENERIC — DO NOT MODIFY ===
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer, StaticCache, get_scheduler

from grpo_config import GRPOConfig

Messages = list[dict[str, str]]
# === END GENERIC ===

# === CUSTOMIZE ===
# Imports: the game module (env_move), the helpers module (helpers) and the prompt module
# (prompt_template) that the sections below use.
# === END CUSTOMIZE ===

# === CUSTOMIZE ===
# `make_env(config) -> game`, a fresh game sized from the config (corridor_length, max_env_steps).
# The game must offer reset(seed), choose(agent_id, move), pending (the moves chosen this turn),
# step() -> (rewards, done), render() -> str and num_agents.
def make_env(config: GRPOConfig) -> Any:
    raise NotImplementedError("CUSTOMIZE make_env")
# === END CUSTOMIZE ===

# === CUSTOMIZE ===
# `format_observation(env, agent_id) -> str`, what one agent sees this turn, as text for the
# prompt (use helpers.observation_to_text).
def format_observation(env: Any, agent_id: int) -> str:
    raise NotImplementedError("CUSTOMIZE format_observation")
# === END CUSTOMIZE ===

# === CUSTOMIZE ===
# The two prompt builders, each returning chat messages [{"role", "content"}, ...] (use
# prompt_template). `thinking_messages(obs_text, agent_id)` asks the agent to reason about the
# situation; `action_messages(obs_text, thinking, agent_id)` shows that reasoning and asks for
# exactly one action as a JSON helper call.
def thinking_messages(obs_text: str, agent_id: int) -> Messages:
    raise NotImplementedError("CUSTOMIZE thinking_messages")


def action_messages(obs_text: str, thinking: str, agent_id: int) -> Messages:
    raise NotImplementedError("CUSTOMIZE action_messages")
# === END CUSTOMIZE ===

# === CUSTOMIZE ===
# `FALLBACK_ACTION`, the low-level game action played when an action is invalid;
# `parse_action(text, agent_id) -> dict`, the JSON call {"action": NAME, "agent_id": I, "args": {}}
# found in the model's action output (raise ValueError when there is none); and
# `dispatch_action(env, call) -> bool`, which calls the named helper from helpers.py as
# NAME(env, agent_id, **args) and returns its result: the helper sets the agent's low-level action
# with env.choose and returns whether its task is completed (raise ValueError for an unknown
# helper or bad arguments).
FALLBACK_ACTION = ""


def parse_action(text: str, agent_id: int) -> dict:
    raise NotImplementedError("CUSTOMIZE parse_action")


def dispatch_action(env: Any, call: dict) -> bool:
    raise NotImplementedError("CUSTOMIZE dispatch_action")
# === END CUSTOMIZE ===

# === CUSTOMIZE ===
# `shape_reward(reward, agent_id) -> float`, the training reward of one agent for one game step,
# from the game's reward (return `reward` unchanged for none).
def shape_reward(reward: float, agent_id: int) -> float:
    raise NotImplementedError("CUSTOMIZE shape_reward")
# === END CUSTOMIZE ===

# === GENERIC — DO NOT MODIFY ===
ADVANTAGE_EPS = 1e-4
# log-ratio bound before exp (as verl): exp(20) ~ 4.9e8 is far past any clip, and float32 exp overflows at ~88.7
LOG_RATIO_CLAMP = 20.0
KL_CLAMP = 10.0  # per-token bound on k3 (as verl): one token whose reference log-prob collapsed cannot swamp the step
ACTION_ERRORS = (ValueError, KeyError, TypeError)


# ---------------------------------------------------------------- rollout engines
@dataclass
class Completion:
    ids: list[int]  # generated token ids, ending with EOS unless truncated
    truncated: bool  # stopped at max_new_tokens without EOS


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[Completion]: ...


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts -> (B, T) left-padded ids and (B, T) attention mask, on the CPU."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt)
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


def _trim_at_eos(ids: list[int], eos_id: int, max_new_tokens: int) -> Completion:
    if eos_id in ids:
        return Completion(ids[: ids.index(eos_id) + 1], truncated=False)
    return Completion(ids[:max_new_tokens], truncated=True)


class HFGenerateEngine:
    """All prompts of a stage in one left-padded `generate` call with the KV cache."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, config: GRPOConfig) -> None:
        self.model, self.tokenizer, self.config = model, tokenizer, config

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        device = next(self.model.parameters()).device
        pad_id, eos_id = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        input_ids, attention_mask = left_pad(prompts, pad_id)  # (B, T)
        sampling = self.config.temperature > 0
        with eval_mode(self.model):
            out = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                max_new_tokens=max_new_tokens, do_sample=sampling, use_cache=True,
                temperature=self.config.temperature if sampling else None,
                top_p=self.config.top_p if sampling else None, top_k=0 if sampling else None,
                pad_token_id=pad_id, eos_token_id=eos_id)
        width = input_ids.shape[1]
        return [_trim_at_eos(row.tolist(), eos_id, max_new_tokens) for row in out[:, width:].cpu()]


# ------------------------------------------------ static-cache decode loop (pytorch-labs/gpt-fast style)
ROW_BUCKET = 8  # compiled step: batch rows rounded up to a multiple of this (one CUDA graph per bucket)
LENGTH_BUCKET = 256  # compiled step: cache slots (prompt + new tokens) rounded up to a multiple of this
EAGER_LENGTH_BUCKET = 32  # eager step: every step attends over all cache slots, so keep the slack small
EOS_CHECK_EVERY = 16  # decode steps between the host syncs that stop once every row has finished


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def sample_next(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """(B, V) logits -> (B,) next ids, on the device without a host sync; greedy at temperature 0."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, V)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (B, V)
        # nucleus: drop a token once the tokens ranked above it already hold top_p of the mass
        sorted_probs = sorted_probs.masked_fill(sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    # inverse CDF: one uniform per row against the running sum, no host sync (multinomial syncs on CUDA). On CPU
    # it costs 13 ms per step at (32, 151936) where an exponential draw per entry (multinomial's way, and HF
    # generate's) costs 108 ms, as much as the model's forward. A zero-probability id never has the first
    # cdf > u, as its cdf equals its predecessor's; the minimum keeps a rounded u == total off the tail.
    cdf = probs.cumsum(dim=-1)  # (B, V)
    ids = torch.searchsorted(cdf, torch.rand_like(cdf[:, -1:]) * cdf[:, -1:], right=True).squeeze(-1)  # (B,)
    return torch.minimum(ids, cdf.argmax(dim=-1))


def forward_and_sample(model: torch.nn.Module, cache: StaticCache, input_ids: torch.Tensor,
                       position_ids: torch.Tensor, slot_mask: torch.Tensor, temperature: float,
                       top_p: float) -> torch.Tensor:
    """(B, T) ids at (B, T) positions -> (B,) next ids; writes T cache slots. `slot_mask` (B, L) is 0 on
    the left padding; slots not yet written are hidden by causality, so one mask serves every step."""
    assert input_ids.shape == position_ids.shape and slot_mask.shape[1] == cache.get_max_length()
    logits = model(input_ids=input_ids, position_ids=position_ids, attention_mask=slot_mask,
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits  # (B, 1, V)
    return sample_next(logits[:, -1], temperature, top_p)


def first_rows(cache: StaticCache, rows: int) -> StaticCache:
    """The first `rows` rows of an allocated `cache`: a forward through it writes into `cache` (the tensors
    are views and the layers share `cache`'s fill counters), so a prefill costs the real rows only."""
    import copy  # local: keeps this change inside the engine code

    view = copy.copy(cache)
    view.layers = [copy.copy(layer) for layer in cache.layers]
    for layer in view.layers:
        layer.keys, layer.values = layer.keys[:rows], layer.values[:rows]
    return view


def onednn_available(model: torch.nn.Module) -> bool:
    param = next(model.parameters())
    return (param.device.type == "cpu" and param.dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class OneDNNLinears:
    """CPU only: while generating, every nn.Linear of the model runs oneDNN's fp32 kernel on pre-packed weights.

    torch's CPU fp32 `linear` calls MKL; measured on this project's 2-core AMD EPYC (AVX-512), MKL runs the
    (B, 1024) x (1024, 151936) lm_head at 28 / 59 GFLOP/s for B = 8 / 32 where oneDNN's packed kernel runs
    it at 100 / 150, and the whole forward 1.8-2.5x faster (prefill, and decode at batch >= 8). Packing reads
    and writes the weights once (~0.5 s for 281 M parameters), so the packed copies are kept and redone
    only after a weight changes: its storage or version counter moved (an in-place optimiser step bumps
    it), or a strided probe of PROBE_SIZE of its values differs (fused optimisers and `.data` writes skip
    the counter). Costs a second copy of the Linear weights in memory while the engine lives.
    """

    PROBE_SIZE = 4096

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        # Linear -> ((data_ptr, version), probe of the weight it was packed from, packed weight)
        self.packed: dict[torch.nn.Module, tuple[tuple[int, int], torch.Tensor, torch.Tensor]] = {}
        self.packings = 0

    def packed_weight(self, linear: torch.nn.Linear) -> torch.Tensor:
        weight = linear.weight.detach()
        key = (weight.data_ptr(), weight._version)
        probe = weight.reshape(-1)[:: max(1, weight.numel() // self.PROBE_SIZE)]
        entry = self.packed.get(linear)
        if entry is None or entry[0] != key or not torch.equal(entry[1], probe):
            self.packed[linear] = key, probe.clone(), torch.ops.mkldnn._reorder_linear_weight(weight)
            self.packings += 1
        return self.packed[linear][2]

    @contextlib.contextmanager
    def __call__(self):
        # a module whose forward is already an instance attribute (someone's hook) is left alone
        linears = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear) and "forward" not in vars(m)]
        try:
            for linear in linears:
                weight, bias = self.packed_weight(linear), linear.bias
                linear.forward = (lambda w, b: lambda x: torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], ""))(
                    weight, None if bias is None else bias.detach())
            yield
        finally:
            for linear in linears:
                vars(linear).pop("forward", None)


class StaticCacheEngine:
    """Prefill once, then one decode step per token over a preallocated StaticCache.

    Eager (CPU by default): exactly the prompts' rows, cache slots rounded up to EAGER_LENGTH_BUCKET, one
    cache kept for the next call of the same shape; on CPU in fp32 the Linears run through oneDNN
    (`OneDNNLinears`). Compiled (CUDA by default): rows and slots are bucketed and caches kept per bucket,
    so the compiled step's CUDA graphs are replayed across calls instead of re-captured; the prefill still
    runs only the real rows (`first_rows`), the filler rows join for the decode steps alone. Rows that
    emitted EOS keep emitting pad and are trimmed afterwards; the host checks for "all finished" only every
    EOS_CHECK_EVERY steps.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, config: GRPOConfig,
                 compile_step: bool | None = None, bucketed: bool | None = None,
                 onednn: bool | None = None) -> None:
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.device = next(model.parameters()).device
        if compile_step is None:
            compile_step = self.device.type == "cuda"  # CPU has no CUDA graphs to gain; compiling is opt-in
        # only the T = 1 step is compiled; prefill runs eager as its width changes every call
        self.decode_one_token = (torch.compile(forward_and_sample, mode="reduce-overhead", fullgraph=True,
                                               dynamic=False) if compile_step else forward_and_sample)
        # buckets only pay where a shape change costs a recompile; eagerly, a filler row costs a real row
        self.bucketed = compile_step if bucketed is None else bucketed
        if onednn is None:  # the packed oneDNN op does not trace under torch.compile: eager CPU only
            onednn = onednn_available(model) and not compile_step
        self.linears = OneDNNLinears(model) if onednn else None
        self.caches: dict[tuple[int, int], StaticCache] = {}
        self.cache_allocations = 0

    def cache_for(self, rows: int, length: int) -> StaticCache:
        if (rows, length) not in self.caches:
            if not self.bucketed:
                self.caches.clear()  # eager shapes vary call to call: keep only the latest cache
            cache = StaticCache(config=self.model.config, max_cache_len=length)
            cfg = self.model.config
            head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
            cache.early_initialization(rows, cfg.num_key_value_heads, head_dim, self.model.dtype, self.device)
            self.caches[rows, length] = cache
            self.cache_allocations += 1
        cache = self.caches[rows, length]
        cache.reset()
        return cache

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        pad_id, eos_id = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        temperature, top_p = self.config.temperature, self.config.top_p
        n = len(prompts)
        rows = round_up(n, ROW_BUCKET) if self.bucketed else n
        input_ids, attention_mask = left_pad(prompts, pad_id)  # (n, T)
        width = input_ids.shape[1]
        length = round_up(width + max_new_tokens, LENGTH_BUCKET if self.bucketed else EAGER_LENGTH_BUCKET)
        # filler rows (rows n..R-1) see every slot: zeros before their first decode step, never an empty row
        slot_mask = torch.ones((rows, length), dtype=torch.bool)  # (R, L)
        slot_mask[:n, :width] = attention_mask.bool()
        positions = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)  # (n, T), pads at 0 as in HF generate
        input_ids, positions, slot_mask = (t.to(self.device) for t in (input_ids, positions, slot_mask))
        out = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=self.device)  # (R, N)
        finished = torch.arange(rows, device=self.device) >= n  # (R,) filler rows start finished
        fillers = rows - n
        position = torch.cat([positions[:, -1:], positions.new_zeros((fillers, 1))])  # (R, 1)
        with eval_mode(self.model), (self.linears() if self.linears else contextlib.nullcontext()):
            cache = self.cache_for(rows, length)
            prefill_cache = first_rows(cache, n) if fillers else cache
            token = forward_and_sample(self.model, prefill_cache, input_ids, positions, slot_mask[:n],
                                       temperature, top_p)  # (n,)
            token = torch.cat([token, token.new_full((fillers,), pad_id)])  # (R,)
            for step in range(max_new_tokens):
                token = token.masked_fill(finished, pad_id)  # (R,)
                out[:, step] = token
                finished |= token == eos_id
                if step + 1 == max_new_tokens or (step % EOS_CHECK_EVERY == EOS_CHECK_EVERY - 1
                                                  and bool(finished.all())):
                    break
                position = position + 1
                token = self.decode_one_token(self.model, cache, token[:, None], position, slot_mask,
                                              temperature, top_p)
        return [_trim_at_eos(row.tolist(), eos_id, max_new_tokens) for row in out[:n].cpu()]


ROLLOUT_ENGINES = {"hf": HFGenerateEngine, "static": StaticCacheEngine}


def make_engine(model: torch.nn.Module, tokenizer: Any, config: GRPOConfig) -> RolloutEngine:
    """"auto" picks by measurement (`benchmarks/rollout_bench.py --phases`): on CPU the static engine, faster
    than HF generate in prefill and decode at batch 1, 8 and 32; on CUDA HF generate, until the static
    engine's compiled step is measured faster there."""
    name = config.rollout_engine
    if name == "auto":
        name = "static" if next(model.parameters()).device.type == "cpu" else "hf"
    if name not in ROLLOUT_ENGINES:
        raise ValueError(f"rollout_engine must be one of {sorted(ROLLOUT_ENGINES) + ['auto']}, got {name!r}")
    return ROLLOUT_ENGINES[name](model, tokenizer, config)


# ---------------------------------------------------------------- rollouts
@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    episode: int  # index within the group
    agent_id: int
    advantage: float = 0.0


@dataclass
class ActionOutcome:
    action: str  # low-level game action actually played
    call: dict | None  # the parsed helper call, None when unparseable
    valid: bool
    completed: bool = False  # what the helper returned: its task is done
    error: str = ""


@dataclass
class Rollout:
    samples: list[Sample]
    returns: list[list[float]]  # [episode][agent] summed shaped reward
    num_actions: int = 0
    num_invalid: int = 0
    completion_lengths: list[int] = field(default_factory=list)
    num_truncated: int = 0
    transcript: list[str] = field(default_factory=list)  # episode 0, when asked for


def chat_ids(tokenizer: Any, messages: Messages) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def resolve_action(env: Any, agent_id: int, text: str) -> ActionOutcome:
    """Parse and dispatch one agent's action; anything invalid sets the fallback action instead."""
    call, error = None, ""
    try:
        call = parse_action(text, agent_id)
        completed = dispatch_action(env, call)
        if not isinstance(completed, bool):
            raise TypeError(f"helper {call.get('action')!r} returned {completed!r}; helpers return a bool")
    except ACTION_ERRORS as exc:
        error = f"unparseable: {exc}" if call is None else f"invalid: {type(exc).__name__}: {exc}"
    if error:
        env.choose(agent_id, FALLBACK_ACTION)
        return ActionOutcome(FALLBACK_ACTION, call, False, error=error)
    return ActionOutcome(env.pending.get(agent_id, "(none: the game's default)"), call, True, completed)


def play_episodes(engine: RolloutEngine, tokenizer: Any, config: GRPOConfig, seeds: list[int],
                  record_transcript: bool = False) -> Rollout:
    """Play one episode per seed, all episodes and agents batched together per stage."""
    envs = [make_env(config) for _ in seeds]
    for env, seed in zip(envs, seeds):
        env.reset(seed=seed)
    rollout = Rollout(samples=[], returns=[[0.0] * env.num_agents for env in envs])
    live = list(range(len(envs)))
    for turn in range(config.max_env_steps):
        if not live:
            break
        pairs = [(e, a) for e in live for a in range(envs[e].num_agents)]
        observations = [format_observation(envs[e], a) for e, a in pairs]
        think_prompts = [chat_ids(tokenizer, thinking_messages(o, a)) for o, (_, a) in zip(observations, pairs)]
        thoughts = engine.generate(think_prompts, config.max_thinking_tokens)
        thinking_texts = [tokenizer.decode(c.ids, skip_special_tokens=True) for c in thoughts]
        act_prompts = [chat_ids(tokenizer, action_messages(o, t, a))
                       for o, t, (_, a) in zip(observations, thinking_texts, pairs)]
        actions = engine.generate(act_prompts, config.max_action_tokens)
        action_texts = [tokenizer.decode(c.ids, skip_special_tokens=True) for c in actions]
        outcomes = [resolve_action(envs[e], a, text) for (e, a), text in zip(pairs, action_texts)]

        for i, (e, a) in enumerate(pairs):
            for prompt, completion in ((think_prompts[i], thoughts[i]), (act_prompts[i], actions[i])):
                rollout.samples.append(Sample(prompt, completion.ids, e, a))
                rollout.completion_lengths.append(len(completion.ids))
                rollout.num_truncated += completion.truncated
        rollout.num_actions += len(outcomes)
        rollout.num_invalid += sum(not o.valid for o in outcomes)

        step_results = {}
        for e in live:
            rewards, done = envs[e].step()
            step_results[e] = (rewards, done)
            for a in range(envs[e].num_agents):
                rollout.returns[e][a] += shape_reward(float(rewards[a]), a)
        for (e, a), outcome in zip(pairs, outcomes):
            if not outcome.valid:
                rollout.returns[e][a] += config.invalid_action_penalty
        if record_transcript and 0 in live:
            rollout.transcript.append(_turn_transcript(turn, pairs, think_prompts, thinking_texts, action_texts,
                                                       outcomes, step_results[0], envs[0], tokenizer))
        live = [e for e in live if not step_results[e][1]]
    return rollout


def _turn_transcript(turn, pairs, prompts, thinking_texts, action_texts, outcomes, step_result, env,
                     tokenizer) -> str:
    rewards, _ = step_result
    lines = [f"--- turn {turn} ---"]
    for i, (e, a) in enumerate(pairs):
        if e != 0:
            continue
        outcome = outcomes[i]
        lines += [f"[agent {a}] prompt:", tokenizer.decode(prompts[i]),
                  f"[agent {a}] thinking: {thinking_texts[i]}",
                  f"[agent {a}] action output: {action_texts[i]}",
                  f"[agent {a}] parsed call: {json.dumps(outcome.call)}",
                  f"[agent {a}] helper result: completed={outcome.completed}, played {outcome.action}"
                  + (f" ({outcome.error})" if outcome.error else ""),
                  f"[agent {a}] reward: {float(rewards[a]):+.3f}"]
    lines.append(env.render())
    return "\n".join(lines)


# ---------------------------------------------------------------- GRPO math
def group_advantages(returns: torch.Tensor, eps: float = ADVANTAGE_EPS) -> torch.Tensor:
    """(G, A) episode returns -> (G, A) advantages, normalised per agent role over the group."""
    mean = returns.mean(dim=0, keepdim=True)  # (1, A)
    std = returns.std(dim=0, keepdim=True)  # (1, A), unbiased as TRL
    return (returns - mean) / (std + eps)


def frac_zero_std(returns: torch.Tensor) -> float:
    """Fraction of agent-role groups whose returns are all equal (they carry no signal)."""
    return (returns.std(dim=0) < 1e-6).float().mean().item()


def per_token_logps(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """(B, T) ids -> (B, T-1) log-probability of each next token under the distribution the rollout
    sampled from: softmax(logits / temperature) (plain logits for greedy decoding; top_p is not modelled,
    as in TRL)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]  # (B, T-1, V)
    logits = logits.float() / temperature if temperature > 0 else logits.float()
    logps = torch.log_softmax(logits, dim=-1)
    return logps.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)


def grpo_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, ref_logps: torch.Tensor | None,
                    advantages: torch.Tensor, epsilon_low: float, epsilon_high: float,
                    beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token loss, KL and clip indicator, all (B, T-1); advantages are (B,)."""
    adv = advantages.unsqueeze(1)  # (B, 1)
    ratio = torch.exp(torch.clamp(logps - old_logps, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    loss = -torch.min(ratio * adv, clipped_ratio * adv)
    if ref_logps is not None and beta > 0:
        delta = torch.clamp(ref_logps - logps, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        kl = torch.clamp(torch.exp(delta) - delta - 1, max=KL_CLAMP)  # k3 estimator, >= 0
        loss = loss + beta * kl
    else:
        kl = torch.zeros_like(logps)
    is_clipped = ((ratio < 1 - epsilon_low) & (adv < 0)) | ((ratio > 1 + epsilon_high) & (adv > 0))
    return loss, kl, is_clipped.float()


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over the mask's positions; a NaN or inf in a masked-out position (padding) stays out."""
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum()


# ---------------------------------------------------------------- batches
@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T) prompt + completion, right-padded
    attention_mask: torch.Tensor  # (B, T)
    completion_mask: torch.Tensor  # (B, T-1) 1 where the next token was generated
    advantages: torch.Tensor  # (B,)


def collate(samples: list[Sample], pad_id: int, device: torch.device) -> Batch:
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    completion_mask = torch.zeros((len(samples), width - 1))
    for row, s in enumerate(samples):
        ids = s.prompt_ids + s.completion_ids
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        # position t predicts token t+1: completion tokens are predicted from len(prompt)-1 on
        completion_mask[row, len(s.prompt_ids) - 1: len(ids) - 1] = 1
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return Batch(input_ids.to(device), attention_mask.to(device), completion_mask.to(device), advantages.to(device))


def chunks(items: list, size: int) -> list[list]:
    return [items[i: i + size] for i in range(0, len(items), size)]


# ---------------------------------------------------------------- training
@dataclass
class Trainer:
    config: GRPOConfig
    accelerator: Accelerator
    model: torch.nn.Module
    ref_model: torch.nn.Module | None
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any

    def optimisation_plan(self, samples: list[Sample]) -> list[list[list[Sample]]]:
        """Optimiser steps, each a list of micro-batches; equal step counts on every process."""
        c = self.config
        per_step = c.micro_batch_size * c.gradient_accumulation_steps
        local_steps = math.ceil(len(samples) / per_step)
        counts = self.accelerator.gather(torch.tensor([local_steps], device=self.accelerator.device))
        steps = chunks(samples, per_step)
        # a process with fewer samples repeats its first step at zero weight so collectives stay matched
        steps += [[]] * (int(counts.max().item()) - local_steps)
        return [chunks(step, c.micro_batch_size) for step in steps]

    @torch.no_grad()
    def frozen_logps(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        return per_token_logps(model, batch.input_ids, batch.attention_mask, self.config.temperature)

    def train_on_rollout(self, samples: list[Sample]) -> dict[str, float]:
        c, device = self.config, self.accelerator.device
        plan = self.optimisation_plan(samples)
        filler = samples[: c.micro_batch_size]
        batches = [[collate(mb, self.tokenizer.pad_token_id, device) for mb in step] or
                   [collate(filler, self.tokenizer.pad_token_id, device)] for step in plan]
        weights = [1.0 if step else 0.0 for step in plan]
        reuse_pass = c.num_iterations > 1 or len(plan) > 1
        old = [[self.frozen_logps(self.model, b) for b in step] for step in batches] if reuse_pass else None
        ref = ([[self.frozen_logps(self.ref_model, b) for b in step] for step in batches]
               if self.ref_model is not None else None)
        totals = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_ratio": 0.0, "gradNorm": 0.0, "tokens": 0.0}
        n_steps = 0
        for _ in range(c.num_iterations):
            for s, step in enumerate(batches):
                # the token mean is global: over every process's generated tokens of this step (one all-reduce);
                # DDP then averages gradients over processes, hence the factor num_processes
                local_tokens = sum(b.completion_mask.sum() for b in step) * weights[s]
                step_tokens = self.accelerator.reduce(local_tokens.detach().clone(), reduction="sum").clamp(min=1)
                scale = self.accelerator.num_processes / step_tokens
                for m, batch in enumerate(step):
                    last = m == len(step) - 1
                    sync = contextlib.nullcontext() if last else self.accelerator.no_sync(self.model)
                    with sync:
                        logps = per_token_logps(self.model, batch.input_ids, batch.attention_mask, c.temperature)
                        old_logps = old[s][m] if old is not None else logps.detach()
                        ref_logps = ref[s][m] if ref is not None else None
                        loss_tok, kl_tok, clip_tok = grpo_token_loss(
                            logps, old_logps, ref_logps, batch.advantages, c.epsilon_low, c.epsilon_high, c.beta)
                        loss = masked_sum(loss_tok, batch.completion_mask) * scale * weights[s]
                        self.accelerator.backward(loss)
                    mask = batch.completion_mask
                    totals["loss"] += loss.item()
                    totals["kl"] += masked_sum(kl_tok.detach(), mask).item() * weights[s]
                    totals["policy_loss"] += (masked_sum(loss_tok.detach() - c.beta * kl_tok.detach(), mask)
                                              * scale).item() * weights[s]
                    totals["clip_ratio"] += masked_sum(clip_tok, mask).item() * weights[s]
                    totals["tokens"] += mask.sum().item() * weights[s]
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                totals["gradNorm"] += float(grad_norm)
                n_steps += 1
        tokens = max(totals["tokens"], 1.0)
        return {"loss": totals["loss"] / n_steps, "policy_loss": totals["policy_loss"] / n_steps,
                "kl": totals["kl"] / tokens, "clip_ratio": totals["clip_ratio"] / tokens,
                "gradNorm": totals["gradNorm"] / n_steps, "optimizer_steps": float(n_steps)}


def assign_advantages(rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    returns = torch.tensor(rollout.returns, dtype=torch.float32)  # (G, A)
    advantages = group_advantages(returns)
    for sample in rollout.samples:
        sample.advantage = advantages[sample.episode, sample.agent_id].item()
    return returns, advantages


# ---------------------------------------------------------------- logging
TRACKER_PACKAGES = {"tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb",)}  # any one of them will do


def tracker_options(config: GRPOConfig) -> dict[str, Any]:
    """Accelerator arguments for `report_to`; exits with the pip command when the tracker's package is missing
    (accelerate itself would drop the tracker silently)."""
    if config.report_to == "none":
        return {}
    packages = TRACKER_PACKAGES[config.report_to]
    if not any(importlib.util.find_spec(package) for package in packages):
        sys.exit(f"report_to={config.report_to} needs the {packages[0]} package: pip install {packages[0]}")
    return {"log_with": config.report_to, "project_dir": config.log_dir}


class RunLogs:
    """train.logs and Sample_EP.logs, written by the main process only; with `report_to`, the train and eval
    lines also go to accelerate's tracker."""

    def __init__(self, config: GRPOConfig, accelerator: Accelerator) -> None:
        self.enabled = accelerator.is_main_process
        log_dir = Path(config.log_dir)
        self.train_path, self.sample_path = log_dir / "train.logs", log_dir / "Sample_EP.logs"
        self.logger = logging.getLogger("crossing")
        if self.enabled:
            log_dir.mkdir(parents=True, exist_ok=True)
            self.logger.setLevel(logging.INFO)
            self.logger.propagate = False
            formatter = logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s")
            for handler in (logging.FileHandler(self.train_path), logging.StreamHandler()):
                handler.setFormatter(formatter)
                self.logger.addHandler(handler)
        self.tracker = accelerator if config.report_to != "none" else None
        if self.tracker is not None:
            self.tracker.init_trackers("grpo", config=config.to_dict(), init_kwargs={"wandb": {"dir": config.log_dir}})

    def line(self, kind: str, **values: Any) -> None:
        if not self.enabled:
            return
        self.logger.info("%s %s", kind, " ".join(f"{k}={_fmt(v)}" for k, v in values.items()))
        if self.tracker is not None and kind in ("train", "eval"):
            self.tracker.log({f"{kind}/{key.removeprefix(kind + '_')}": value for key, value in values.items()
                              if key != "update"}, step=values["update"])

    def close(self) -> None:
        """Flush and close the log's handlers and the tracker; every process calls it."""
        for handler in list(self.logger.handlers):
            handler.close()
            self.logger.removeHandler(handler)
        if self.tracker is not None:
            self.tracker.end_training()

    def sample_episode(self, episode: int, update: int, seed: int, returns: list[float], transcript: list[str]) -> None:
        if not self.enabled:
            return
        header = f"===== episode {episode} (update {update}, seed {seed}) returns {json.dumps(returns)} ====="
        with self.sample_path.open("a") as fh:
            fh.write("\n".join([header, *transcript, ""]) + "\n")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value).replace(" ", "_")


# ---------------------------------------------------------------- set-up and main loop
def load_models(config: GRPOConfig, accelerator: Accelerator, policy: str):
    """The tokenizer, the policy (from `policy`: the model, or a checkpoint to resume) and the frozen reference
    (always the model itself)."""
    dtype = torch.bfloat16 if config.bf16 and torch.cuda.is_available() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(config.model_name)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=dtype).train()
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref_model = None
    if config.beta > 0:
        ref_model = AutoModelForCausalLM.from_pretrained(config.model_name, dtype=dtype).to(accelerator.device)
        ref_model.eval().requires_grad_(False)
    return tokenizer, model, ref_model


def build_trainer(config: GRPOConfig, accelerator: Accelerator, num_updates: int, policy: str = "") -> Trainer:
    tokenizer, model, ref_model = load_models(config, accelerator, policy or config.model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    steps_per_update = config.num_iterations * math.ceil(
        config.group_size * config.num_agents * config.max_env_steps * 2
        / (config.micro_batch_size * config.gradient_accumulation_steps))
    scheduler = get_scheduler(config.lr_scheduler_type, optimizer, num_warmup_steps=config.warmup_steps,
                              num_training_steps=max(num_updates * steps_per_update, 1))
    # the scheduler stays unwrapped: accelerate's wrapper would step it once per process
    model, optimizer = accelerator.prepare(model, optimizer)
    return Trainer(config, accelerator, model, ref_model, tokenizer, optimizer, scheduler)


# ---------------------------------------------------------------- checkpoints and exact resume
TRAINING_STATE = "training_state.pt"  # beside a checkpoint's weights: optimizer, scheduler, update and episode counters


def rng_state() -> dict[str, Any]:
    """This process's random generators: Python's, torch's CPU generator and every CUDA device's."""
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(trainer: Trainer, name: str, progress: dict[str, int] | None = None) -> None:
    """The model, tokenizer and config in output_dir/NAME; given `progress` (update, episodes_done), also what an
    exact resume needs: the optimizer, the scheduler, the counters and every process's random generators. It is
    written into NAME.partial and renamed once whole, so a job killed while saving leaves no half checkpoint."""
    accelerator = trainer.accelerator
    out = Path(trainer.config.output_dir) / name
    partial = out.with_name(f"{name}.partial")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    accelerator.wait_for_everyone()
    if progress is not None:
        torch.save(rng_state(), partial / f"rng_state_{accelerator.process_index}.pt")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        accelerator.unwrap_model(trainer.model).save_pretrained(partial,
                                                                state_dict=accelerator.get_state_dict(trainer.model))
        trainer.tokenizer.save_pretrained(partial)
        (partial / "grpo_config.json").write_text(trainer.config.to_json())
        if progress is not None:
            torch.save({"optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.scheduler.state_dict(),
                        **progress}, partial / TRAINING_STATE)
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    accelerator.wait_for_everyone()


def checkpoints(output_dir: str) -> list[tuple[int, Path]]:
    """(update, folder) of every whole checkpoint-N in output_dir that can be resumed from, oldest first."""
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


def restore(trainer: Trainer, folder: Path) -> dict[str, int]:
    """The optimizer, the scheduler and this process's random generators as the checkpoint saved them (its weights
    are the policy build_trainer loaded); the update and episode counters it was saved at."""
    state = torch.load(folder / TRAINING_STATE, map_location="cpu", weights_only=False)
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    set_rng_state(torch.load(folder / f"rng_state_{trainer.accelerator.process_index}.pt", weights_only=False))
    return {"update": state["update"], "episodes_done": state["episodes_done"]}


def evaluate(trainer: Trainer, engine: RolloutEngine) -> dict[str, float]:
    c = trainer.config
    seeds = [10_000_000 + c.seed + i for i in range(c.eval_episodes)]
    rollout = play_episodes(engine, trainer.tokenizer, c, seeds)
    returns = torch.tensor(rollout.returns, dtype=torch.float32)
    return {"eval_avg_return": returns.mean().item(), "eval_return_std": returns.std().item() if returns.numel() > 1 else 0.0,
            "eval_format_err": rollout.num_invalid / max(rollout.num_actions, 1)}


def reduce_mean(accelerator: Accelerator, values: dict[str, float]) -> dict[str, float]:
    keys = sorted(values)
    tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=accelerator.device)
    reduced = accelerator.reduce(tensor, reduction="mean")
    return dict(zip(keys, reduced.tolist()))


def train(config: GRPOConfig) -> None:
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    accelerator = Accelerator(**tracker_options(config))
    episodes_per_update = config.group_size * accelerator.num_processes
    num_updates = math.ceil(config.episodes / episodes_per_update)
    resume_from = resume_folder(config)
    trainer = build_trainer(config, accelerator, num_updates, str(resume_from or ""))
    torch.manual_seed(config.seed + accelerator.process_index)
    logs = RunLogs(config, accelerator)
    engine = make_engine(accelerator.unwrap_model(trainer.model), trainer.tokenizer, config)
    # the last thing before the first update: the random generators continue where the checkpoint left them
    done = restore(trainer, resume_from) if resume_from is not None else {"update": 0, "episodes_done": 0}
    logs.line("start", model=config.model_name, processes=accelerator.num_processes, updates=num_updates,
              episodes=config.episodes, group_size=config.group_size, agents=config.num_agents,
              **({"resumed_at": done["update"]} if resume_from is not None else {}))
    episodes_done = done["episodes_done"]
    for update in range(done["update"] + 1, num_updates + 1):
        started = time.perf_counter()
        group = (update - 1) * accelerator.num_processes + accelerator.process_index
        seed = config.seed + group
        next_sample = (episodes_done // config.sample_log_interval + 1) * config.sample_log_interval
        record = episodes_done + episodes_per_update >= next_sample
        rollout = play_episodes(engine, trainer.tokenizer, config, [seed] * config.group_size, record)
        returns, _ = assign_advantages(rollout)
        stats = trainer.train_on_rollout(rollout.samples)
        episodes_done += episodes_per_update
        lengths = rollout.completion_lengths
        local = {**stats, "avg_return": returns.mean().item(), "return_std": returns.std().item(),
                 "frac_reward_zero_std": frac_zero_std(returns),
                 "completion_mean_length": sum(lengths) / max(len(lengths), 1),
                 "completion_clipped_ratio": rollout.num_truncated / max(len(lengths), 1),
                 "format_err": rollout.num_invalid / max(rollout.num_actions, 1),
                 "num_tokens": float(sum(lengths))}
        metrics = reduce_mean(accelerator, local)
        metrics["num_tokens"] *= accelerator.num_processes
        logs.line("train", update=update, episode=episodes_done, lr=trainer.scheduler.get_last_lr()[0],
                  **{k: metrics[k] for k in sorted(metrics) if k != "optimizer_steps"},
                  step_time=time.perf_counter() - started)
        if record:
            logs.sample_episode(episodes_done - episodes_per_update + 1, update, seed, rollout.returns[0],
                                rollout.transcript)
        if update % config.eval_interval == 0 or update == num_updates:
            logs.line("eval", update=update, episode=episodes_done, **reduce_mean(accelerator, evaluate(trainer, engine)))
        if config.save_interval and update % config.save_interval == 0:
            save_checkpoint(trainer, f"checkpoint-{update}", {"update": update, "episodes_done": episodes_done})
    save_checkpoint(trainer, "final")
    logs.line("done", updates=num_updates, episodes=episodes_done)
    logs.close()


def main(argv: list[str] | None = None) -> None:
    train(GRPOConfig.from_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
# === END GENERIC ===
