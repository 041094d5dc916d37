"""Rollout throughput of the GRPO template's engines on one fixed workload, and optionally one GRPO update.

    python benchmarks/rollout_bench.py                          # tiny random Qwen3 on CPU
    python benchmarks/rollout_bench.py --shape qwen3-4b --update --naive-turns 1 --naive-seqs 4   # GPU, bf16

Workload, as one GRPO update of the template plays it: `--episodes` x `--agents` sequences (8 x 4 = 32),
`--turns` turns, each a thinking stage (fresh random prompt of `--prompt-len` tokens) then an action stage
(that prompt plus the thinking ids). EOS is an id the model cannot emit, so every sequence generates exactly
its budget and all engines do equal work. Engines, all in this process, in order:
    naive      one `generate` call per sequence (batch 1), as a per-agent loop would do
    hf         the template's HFGenerateEngine: one batched `generate` per stage
    hf-static  the same with `cache_implementation="static"` set on the model's generation config
    static     the template's StaticCacheEngine (static KV cache decode loop; step compiled on CUDA)
Each engine runs one untimed warm-up turn (compilation, CUDA graph capture) before the timed run.
`--naive-turns` / `--naive-seqs` shrink the naive run; its numbers are per token, so they stay comparable.

Roofline (GPU only): a decode step must read every parameter once plus the KV cache of every live token;
HBM bandwidth is measured with a device-to-device copy. roofline tok/s = bandwidth / bytes per step x batch.

The model is randomly initialised from `orchestrator.tiny_model.qwen3_config_for` (no download); token ids
come from `build_tokenizer`. The template's GENERIC code is imported from the reference generated train.py.
"""

from __future__ import annotations

import argparse
import copy
import platform
import random
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "source_of_truth"), str(ROOT / "examples" / "cleanup" / "reference_generated")]

import torch  # noqa: E402
import transformers  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from transformers import AutoModelForCausalLM, get_scheduler  # noqa: E402

import train  # noqa: E402
from grpo_config import GRPOConfig  # noqa: E402
from orchestrator.tiny_model import build_tokenizer, qwen3_config_for  # noqa: E402

ENGINES = ("naive", "hf", "hf-static", "static")
DEFAULTS = {  # shape -> (prompt tokens, thinking tokens, action tokens)
    "tiny": (128, 32, 8),
    "qwen3-4b": (600, 128, 32),
}
HEADER = (f"{'engine':<10} {'batch':>5} {'turns x seqs':>12} {'tokens':>7} {'gen tok/s':>10} {'s/turn':>8} "
          f"{'peak mem':>10} {'vs naive':>9}")


@dataclass
class Stage:
    prompts: list[list[int]]
    max_new_tokens: int


@dataclass
class Result:
    engine: str
    batch: int
    turns: int
    seqs: int
    tokens: int
    seconds: float
    peak_bytes: int
    roofline_tok_s: float | None
    samples: list[train.Sample]


# ---------------------------------------------------------------- set-up
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(DEFAULTS), default="tiny")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma list from {ENGINES}")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per group (G)")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, help="thinking prompt tokens (default by shape)")
    parser.add_argument("--think-tokens", type=int, help="new tokens of the thinking stage (default by shape)")
    parser.add_argument("--action-tokens", type=int, help="new tokens of the action stage (default by shape)")
    parser.add_argument("--naive-turns", type=int, help="turns of the naive baseline (default --turns)")
    parser.add_argument("--naive-seqs", type=int, help="sequences per stage of the naive baseline (default all)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--compile", action="store_true", help="compile the static engine's step on CPU too")
    parser.add_argument("--update", action="store_true", help="also time one GRPO update on the rollout")
    parser.add_argument("--micro-batch", type=int, default=8, help="micro-batch size of the update")
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient (> 0 loads a frozen reference)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    prompt_len, think, action = DEFAULTS[args.shape]
    args.prompt_len = args.prompt_len or prompt_len
    args.think_tokens = args.think_tokens or think
    args.action_tokens = args.action_tokens or action
    args.naive_turns = args.naive_turns or args.turns
    args.engines = args.engines.split(",")
    unknown = set(args.engines) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines {sorted(unknown)}; valid: {ENGINES}")
    return args


def build_model(shape: str, vocab_size: int, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    config = qwen3_config_for(shape, vocab_size=vocab_size if shape == "tiny" else None)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval().requires_grad_(False)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def hbm_bandwidth(device: torch.device, nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy (each copy reads and writes nbytes)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    sync(device)
    return 2 * nbytes * repeats / (time.perf_counter() - start)


def decode_bytes_per_step(model: torch.nn.Module, batch: int, context: int) -> int:
    """Parameters (tied embeddings counted once) plus the KV cache of `batch` rows of `context` tokens."""
    cfg = model.config
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * model.dtype.itemsize
    return param_bytes + batch * context * kv_per_token


# ---------------------------------------------------------------- workload
def think_prompts(args: argparse.Namespace, vocab: int) -> list[list[list[int]]]:
    """[turn][sequence] random prompt ids, identical for every engine."""
    rng = random.Random(args.seed)
    return [[[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(args.episodes * args.agents)]
            for _ in range(args.turns)]


def play(generate: Callable[[Stage], list[train.Completion]], prompts: list[list[list[int]]], args: argparse.Namespace,
         turns: int, seqs: int) -> tuple[int, list[train.Sample]]:
    """Thinking then action stage per turn; returns generated tokens and the samples for an update."""
    tokens, samples = 0, []
    for turn in range(turns):
        think = Stage(prompts[turn][:seqs], args.think_tokens)
        thoughts = generate(think)
        action = Stage([p + c.ids for p, c in zip(think.prompts, thoughts)], args.action_tokens)
        actions = generate(action)
        for stage, completions in ((think, thoughts), (action, actions)):
            assert all(len(c.ids) == stage.max_new_tokens for c in completions), "EOS must never be emitted"
            tokens += sum(len(c.ids) for c in completions)
            samples += [train.Sample(p, c.ids, i // args.agents, i % args.agents)
                        for i, (p, c) in enumerate(zip(stage.prompts, completions))]
    return tokens, samples


def roofline_tok_s(model: torch.nn.Module, args: argparse.Namespace, batch: int, bandwidth: float) -> float:
    """Tokens per second if every decode step of one turn ran at the bandwidth bound."""
    seconds, tokens = 0.0, 0
    for prompt_len, new in ((args.prompt_len, args.think_tokens),
                            (args.prompt_len + args.think_tokens, args.action_tokens)):
        seconds += sum(decode_bytes_per_step(model, batch, prompt_len + i) for i in range(new)) / bandwidth
        tokens += batch * new
    return tokens / seconds


def run_engine(name: str, model: torch.nn.Module, tokenizer: Any, config: GRPOConfig, prompts: list[list[list[int]]],
               args: argparse.Namespace, device: torch.device, bandwidth: float | None) -> Result:
    seqs = args.episodes * args.agents
    turns = args.turns
    if name == "naive":
        engine = train.HFGenerateEngine(model, tokenizer, config)
        seqs, turns = min(args.naive_seqs or seqs, seqs), min(args.naive_turns, args.turns)

        def generate(stage: Stage) -> list[train.Completion]:
            return [engine.generate([p], stage.max_new_tokens)[0] for p in stage.prompts]
    else:
        engine = (train.StaticCacheEngine(model, tokenizer, config, compile_step=args.compile or None)
                  if name == "static" else train.HFGenerateEngine(model, tokenizer, config))

        def generate(stage: Stage) -> list[train.Completion]:
            return engine.generate(stage.prompts, stage.max_new_tokens)

    batch = 1 if name == "naive" else seqs
    torch.manual_seed(args.seed)
    play(generate, prompts, args, turns=1, seqs=1 if name == "naive" else seqs)  # warm-up, untimed
    reset_peak(device)
    sync(device)
    start = time.perf_counter()
    tokens, samples = play(generate, prompts, args, turns, seqs)
    sync(device)
    seconds = time.perf_counter() - start
    roofline = roofline_tok_s(model, args, batch, bandwidth) if bandwidth else None
    return Result(name, batch, turns, seqs, tokens, seconds, peak_bytes(device), roofline, samples)


# ---------------------------------------------------------------- GRPO update
def time_update(model: torch.nn.Module, tokenizer: Any, samples: list[train.Sample], args: argparse.Namespace,
                device: torch.device) -> None:
    """One `Trainer.train_on_rollout` on the rollout: policy + frozen reference (beta > 0) + AdamW, checkpointing."""
    config = GRPOConfig(model_name=args.shape, micro_batch_size=args.micro_batch, beta=args.beta,
                        lr_scheduler_type="constant", warmup_steps=0, gradient_checkpointing=True,
                        bf16=model.dtype == torch.bfloat16)
    rng = random.Random(args.seed)
    for sample in samples:
        sample.advantage = rng.choice((-1.0, 1.0))
    ref_model = copy.deepcopy(model).eval() if args.beta > 0 else None
    model.requires_grad_(True).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    accelerator = Accelerator(cpu=device.type == "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = get_scheduler(config.lr_scheduler_type, optimizer)
    policy, optimizer = accelerator.prepare(model, optimizer)
    trainer = train.Trainer(config, accelerator, policy, ref_model, tokenizer, optimizer, scheduler)
    trainer.train_on_rollout(samples[: args.micro_batch])  # warm-up, untimed
    reset_peak(device)
    sync(device)
    start = time.perf_counter()
    stats = trainer.train_on_rollout(samples)
    sync(device)
    seconds = time.perf_counter() - start
    steps = int(stats["optimizer_steps"])
    longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    print(f"\nGRPO update: {len(samples)} samples (<= {longest} tokens), micro-batch {args.micro_batch}, "
          f"beta {args.beta}, AdamW, gradient checkpointing")
    print(f"update  {seconds:.3f} s/update  {seconds / steps:.3f} s/optimizer step ({steps} steps)  "
          f"peak mem {peak_bytes(device) / 2**30:.2f} GiB  loss {stats['loss']:.4g}")


# ---------------------------------------------------------------- report
def print_environment(device: torch.device, dtype: torch.dtype, model: torch.nn.Module,
                      args: argparse.Namespace) -> None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    params = sum(p.numel() for p in model.parameters())
    print(f"device {name} | torch {torch.__version__} | transformers {transformers.__version__} | dtype "
          f"{str(dtype).removeprefix('torch.')}")
    print(f"model {args.shape} ({params / 1e6:.1f} M parameters, random init) | {args.episodes} episodes x "
          f"{args.agents} agents = {args.episodes * args.agents} sequences | {args.turns} turns | prompt "
          f"{args.prompt_len} | new tokens: thinking {args.think_tokens}, action {args.action_tokens} | "
          f"temperature {args.temperature} top_p {args.top_p} | seed {args.seed}")


def print_table(results: list[Result], args: argparse.Namespace, device: torch.device, bandwidth: float | None) -> None:
    tokens_per_turn = args.episodes * args.agents * (args.think_tokens + args.action_tokens)
    naive = next((r for r in results if r.engine == "naive"), None)
    mem_label = "peak GPU memory (max_memory_allocated)" if device.type == "cuda" else "peak RSS of the process"
    print(f"\n{HEADER}" + (f" {'roofline':>9}" if bandwidth else ""))
    for r in results:
        tok_s = r.tokens / r.seconds
        speedup = f"{tok_s / (naive.tokens / naive.seconds):8.1f}x" if naive else f"{'-':>9}"
        line = (f"{r.engine:<10} {r.batch:>5} {f'{r.turns} x {r.seqs}':>12} {r.tokens:>7} {tok_s:>10.1f} "
                f"{tokens_per_turn / tok_s:>8.3f} "
                f"{r.peak_bytes / 2**30:>6.2f} GiB {speedup}")
        if r.roofline_tok_s:
            line += f" {100 * tok_s / r.roofline_tok_s:>8.1f}%"
        print(line)
    print(f"s/turn: {tokens_per_turn} generated tokens per env turn at that rate; peak mem: {mem_label}")
    if bandwidth:
        rooflines = ", ".join(f"batch {r.batch}: {r.roofline_tok_s:,.0f} tok/s" for r in results)
        print(f"HBM bandwidth {bandwidth / 1e12:.2f} TB/s (device copy); decode roofline {rooflines}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tok = build_tokenizer()
    model = build_model(args.shape, len(tok), device, dtype)
    # an EOS id outside the vocabulary: every sequence generates exactly its token budget
    tokenizer = SimpleNamespace(pad_token_id=tok.pad_token_id, eos_token_id=model.config.vocab_size)
    config = GRPOConfig(model_name=args.shape, temperature=args.temperature, top_p=args.top_p)
    print_environment(device, dtype, model, args)
    prompts = think_prompts(args, vocab=len(tok) - len(tok.all_special_ids))
    bandwidth = hbm_bandwidth(device) if device.type == "cuda" else None
    results = []
    for name in args.engines:
        if name == "hf-static":
            model.generation_config.cache_implementation = "static"
        try:
            results.append(run_engine(name, model, tokenizer, config, prompts, args, device, bandwidth))
        finally:
            model.generation_config.cache_implementation = None
        print(f"  done {name}: {results[-1].seconds:.2f} s", flush=True)
    print_table(results, args, device, bandwidth)
    if args.update:
        samples = next((r.samples for r in reversed(results) if r.engine != "naive"), results[-1].samples)
        time_update(model, tokenizer, samples, args, device)


if __name__ == "__main__":
    main()
