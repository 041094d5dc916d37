"""The template's rollout engines: the static-cache decode loop matches batched `generate`, and the benchmark runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from orchestrator.base.execution import execute
from orchestrator.training.logformat import parse_log

ROOT = Path(__file__).resolve().parents[1]
MAX_NEW = 24


@pytest.fixture(scope="module")
def sharp_model(tiny_model_dir):
    """The tiny model with weights scaled up: at init scale greedy decoding repeats one token forever."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.mul_(8.0)
    # as in training: train mode with gradient checkpointing; the engines must generate in eval mode
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, 1000, (n,), generator=gen).tolist() for n in (5, 17, 9, 30, 2)]


def engines(train, model, eos_id: int, static: dict | None = None, **config):
    from grpo_config import GRPOConfig

    tokenizer = SimpleNamespace(pad_token_id=1021, eos_token_id=eos_id)
    config = GRPOConfig(model_name="tiny", **config)
    return (train.HFGenerateEngine(model, tokenizer, config),
            train.StaticCacheEngine(model, tokenizer, config, **(static or {})))


# eager + oneDNN (the CPU default), eager without oneDNN, and the compiled path's bucketing run eagerly
STATIC_VARIANTS = {"cpu-default": {}, "no-onednn": {"onednn": False}, "bucketed": {"bucketed": True}}


@pytest.mark.parametrize("variant", sorted(STATIC_VARIANTS))
def test_greedy_static_matches_hf_generate_token_for_token(reference_train, sharp_model, prompts, variant):
    static_args = STATIC_VARIANTS[variant]
    hf, static = engines(reference_train, sharp_model, eos_id=1024, static=static_args,
                         temperature=0.0)  # 1024: never emitted
    free_run = hf.generate(prompts, MAX_NEW)
    assert len({tuple(c.ids) for c in free_run}) == len(prompts) and all(c.truncated for c in free_run)
    assert static.generate(prompts, MAX_NEW) == free_run

    # an EOS that greedy decoding emits at step 6 of row 1: that row stops early, the others run on
    eos_id = free_run[1].ids[5]
    hf, static = engines(reference_train, sharp_model, eos_id=eos_id, static=static_args, temperature=0.0)
    expected = hf.generate(prompts, MAX_NEW)
    assert expected[1].ids[-1] == eos_id and not expected[1].truncated and len(expected[1].ids) <= 6
    assert any(c.truncated and len(c.ids) == MAX_NEW for c in expected)
    assert static.generate(prompts, MAX_NEW) == expected
    assert sharp_model.training  # eval mode only while generating


def test_sampling_gives_valid_ids_within_budget(reference_train, sharp_model, prompts):
    torch.manual_seed(0)
    _, static = engines(reference_train, sharp_model, eos_id=1023, temperature=1.0, top_p=0.9)
    completions = static.generate(prompts * 3, MAX_NEW)
    assert len(completions) == 15
    for c in completions:
        assert 1 <= len(c.ids) <= MAX_NEW and all(0 <= i < sharp_model.config.vocab_size for i in c.ids)
        assert c.truncated == (1023 not in c.ids)
        assert c.truncated or (c.ids.index(1023) == len(c.ids) - 1)
        assert not c.truncated or len(c.ids) == MAX_NEW
    assert len({tuple(c.ids) for c in completions}) > 1


def test_top_p_samples_only_from_the_nucleus(reference_train):
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(4000, 4)  # (B, V)
    ids = reference_train.sample_next(logits, temperature=1.0, top_p=0.7)
    assert set(ids.tolist()) == {0, 1}  # 0.5 < 0.7 needs token 1; 0.8 >= 0.7 drops the rest
    share = (ids == 0).float().mean().item()
    assert share == pytest.approx(0.5 / 0.8, abs=0.03)
    assert reference_train.sample_next(logits, temperature=0.0, top_p=0.7).eq(0).all()


def test_sampling_follows_the_distribution_and_never_draws_a_zero(reference_train):
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.5, 0.0, 0.3, 0.1, 0.0])  # zeros inside and at the tail
    ids = reference_train.sample_next(probs.log().expand(20000, 6), temperature=1.0, top_p=1.0)
    shares = torch.bincount(ids, minlength=6).float() / len(ids)
    assert shares[2] == 0 and shares[5] == 0
    assert torch.allclose(shares, probs, atol=0.015)


def test_eager_engine_runs_exactly_the_prompts_rows(reference_train, sharp_model, prompts):
    _, static = engines(reference_train, sharp_model, eos_id=1023, temperature=1.0)
    assert not static.bucketed
    static.generate(prompts[:1], 8)
    ((rows, length), cache), = static.caches.items()
    assert rows == 1 and cache.layers[0].keys.shape[0] == 1  # a single prompt is one row, not ROW_BUCKET
    assert length == reference_train.round_up(len(prompts[0]) + 8, reference_train.EAGER_LENGTH_BUCKET)
    static.generate(prompts[:1], 8)  # same shape: the cache is reused
    assert static.cache_allocations == 1
    static.generate(prompts, 8)  # another shape: one new cache, the old one dropped
    assert static.cache_allocations == 2 and list(static.caches) == [(5, 64)]


def test_bucketed_cache_is_allocated_once_per_bucket(reference_train, sharp_model, prompts):
    _, static = engines(reference_train, sharp_model, eos_id=1023, static={"bucketed": True}, temperature=1.0)
    static.generate(prompts, 8)
    (cache,) = static.caches.values()
    assert cache.layers[0].keys.shape[0] == reference_train.ROW_BUCKET
    keys = cache.layers[0].keys.data_ptr()
    static.generate(prompts[:3], 16)  # fewer rows and another width, same (row, length) bucket
    assert static.cache_allocations == 1 and cache.layers[0].keys.data_ptr() == keys
    static.generate(prompts * 2, 8)  # 10 rows: the next row bucket
    assert static.cache_allocations == 2 and len(static.caches) == 2


def test_prefill_through_first_rows_writes_the_full_cache(reference_train, sharp_model, prompts):
    """The bucketed path prefills only the real rows, through views that land in the bucketed cache."""
    _, static = engines(reference_train, sharp_model, eos_id=1023, static={"bucketed": True}, temperature=0.0)
    cache = static.cache_for(8, 64)
    view = reference_train.first_rows(cache, 3)
    key = cache.layers[0].keys
    assert view.layers[0].keys.shape[0] == 3 and view.layers[0].keys.data_ptr() == key.data_ptr()
    ids = torch.tensor([p[:5] for p in prompts[:3]])
    mask = torch.ones((3, 64), dtype=torch.bool)
    with torch.no_grad():
        reference_train.forward_and_sample(sharp_model.eval(), view, ids, torch.arange(5).expand(3, 5), mask, 0.0, 1.0)
    sharp_model.train()
    assert int(cache.get_seq_length()) == 5  # the fill counter is shared with the view
    assert key[:3, :, :5].abs().sum() > 0 and key[3:].abs().sum() == 0 and key[:, :, 5:].abs().sum() == 0


def test_onednn_weights_are_packed_once_per_weight_version(reference_train, sharp_model, prompts):
    hf, static = engines(reference_train, sharp_model, eos_id=1024, temperature=0.0)
    assert static.linears is not None  # fp32 on CPU: the oneDNN path is the default
    linears = [m for m in sharp_model.modules() if isinstance(m, torch.nn.Linear)]
    first = static.generate(prompts, 4)
    assert static.linears.packings == len(linears)
    assert not any("forward" in vars(m) for m in linears)  # the plain forwards are back after generating
    static.generate(prompts, 4)
    assert static.linears.packings == len(linears)  # unchanged weights: no repacking
    weight = sharp_model.lm_head.weight
    with torch.no_grad():
        saved = weight.clone()
        weight.mul_(-1.0)  # as an optimiser step would: in place, bumping the version counter
    try:
        assert static.generate(prompts, 4) == hf.generate(prompts, 4) != first
        assert static.linears.packings == len(linears) + 1  # lm_head only (the tied embedding is not a Linear)
        version = weight._version
        weight.data.mul_(-1.0)  # as a fused optimiser step would: the version counter does not move
        assert weight._version == version
        assert static.generate(prompts, 4) == hf.generate(prompts, 4) == first
        assert static.linears.packings == len(linears) + 2  # the probe of the weight's values saw the change
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_make_engine_knows_the_static_engine(reference_train, sharp_model):
    from grpo_config import GRPOConfig

    engine = reference_train.make_engine(sharp_model, None, GRPOConfig(model_name="tiny", rollout_engine="static"))
    assert isinstance(engine, reference_train.StaticCacheEngine)
    # the default, "auto", picks the engine measured faster on the device: on CPU the static one
    assert GRPOConfig(model_name="tiny").rollout_engine == "auto"
    assert isinstance(reference_train.make_engine(sharp_model, None, GRPOConfig(model_name="tiny")),
                      reference_train.StaticCacheEngine)
    hf = reference_train.make_engine(sharp_model, None, GRPOConfig(model_name="tiny", rollout_engine="hf"))
    assert isinstance(hf, reference_train.HFGenerateEngine)
    with pytest.raises(ValueError, match="'hf', 'static'"):
        reference_train.make_engine(sharp_model, None, GRPOConfig(model_name="tiny", rollout_engine="vllm"))


def test_rollout_benchmark_runs_on_cpu():
    args = ["--shape", "tiny", "--turns", "1", "--episodes", "2", "--agents", "2", "--prompt-len", "16",
            "--think-tokens", "6", "--action-tokens", "3", "--naive-seqs", "2", "--update", "--micro-batch", "4"]
    result = subprocess.run([sys.executable, "benchmarks/rollout_bench.py", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("device ") and "torch" in line for line in lines)
    assert any(line.startswith("engine") and "gen tok/s" in line and "vs naive" in line for line in lines)
    for engine in ("naive", "hf", "hf-static", "static"):
        assert any(line.split()[:1] == [engine] and "GiB" in line for line in lines), engine
    assert any(line.startswith("update ") and "s/update" in line for line in lines)


@pytest.mark.slow
def test_rollout_benchmark_phases_run_on_cpu():
    args = ["--phases", "--shape", "tiny", "--threads", "1", "--batches", "1,3", "--prompt-len", "12",
            "--phase-new", "4", "--repeats", "1", "--engines", "hf,static,static-mkl"]
    result = subprocess.run([sys.executable, "benchmarks/rollout_bench.py", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("copy bandwidth") and "GFLOP/s (per CPU-second)" in line for line in lines)
    assert any(line.startswith("phase") and "tok/CPU-s" in line and "roofline" in line for line in lines)
    rows = {(line.split()[0], line.split()[1], line.split()[2]) for line in lines
            if line.split()[:1] in (["prefill"], ["decode"])}
    assert rows == {(phase, engine, batch) for phase in ("prefill", "decode")
                    for engine in ("hf", "static", "static-mkl") for batch in ("1", "3")}


def test_reference_train_runs_one_update_with_the_static_engine(tmp_path, tiny_model_dir):
    from conftest import copy_generated_set

    folder = copy_generated_set(tmp_path / "generated")
    args = ["--model_name", str(tiny_model_dir), "--rollout_engine", "static", "--episodes", "2", "--group_size", "2",
            "--max_env_steps", "1", "--max_thinking_tokens", "8", "--max_action_tokens", "8", "--eval_episodes", "2",
            "--save_interval", "0", "--output_dir", "outputs"]
    result = execute(["bash", "launch_training.sh", *args], folder, timeout_s=300, env={"PYTHON": sys.executable})
    assert result.ok, result.stderr[-3000:]
    records = parse_log((folder / "train.logs").read_text())
    assert [r.kind for r in records] == ["start", "train", "eval", "done"]
    assert records[1].values["num_tokens"] > 0
