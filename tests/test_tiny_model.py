"""The tiny Qwen3 model and tokenizer load through the Auto* classes and behave like a real Qwen checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM

from orchestrator.tiny.model import (
    IM_END,
    IM_START,
    MARKER_FILE,
    PAD_TOKEN,
    build_tiny_model,
    build_tokenizer,
    main,
    qwen3_config_for,
)

TRICKY_TEXTS = [
    '{"action": "move_to", "agent_id": 0, "args": {"x": 3, "y": 4}}',
    "line one\nline two\r\n\n\ttabbed   spaced  \n",
    "unicode: héllo wörld – ∑ 日本語 🙂🍎 e\u0301",
    "digits 0123456789 -1.5e-6 3,141,592 007",
    " leading space, trailing space . ! ?",
    "UP DOWN LEFT RIGHT STAY CLEAN",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tok(model_dir: Path):
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> Qwen3ForCausalLM:
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    return model.eval()


def test_model_loads_as_qwen3_with_tokenizer_ids(model: Qwen3ForCausalLM, tok, model_dir: Path) -> None:
    assert isinstance(model, Qwen3ForCausalLM)
    assert (model_dir / "model.safetensors").is_file()
    assert model.dtype == torch.float32
    cfg = model.config
    assert cfg.vocab_size == len(tok) == 1024
    assert cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert cfg.head_dim == cfg.hidden_size // cfg.num_attention_heads
    assert cfg.eos_token_id == tok.convert_tokens_to_ids(IM_END)
    assert cfg.pad_token_id == cfg.bos_token_id == tok.convert_tokens_to_ids(PAD_TOKEN)
    gen = model.generation_config
    assert (gen.eos_token_id, gen.pad_token_id, gen.do_sample) == (tok.eos_token_id, tok.pad_token_id, True)


def test_tokenizer_special_tokens_and_round_trip(tok) -> None:
    assert (tok.eos_token, tok.pad_token) == (IM_END, PAD_TOKEN)
    ids = tok.convert_tokens_to_ids([PAD_TOKEN, IM_START, IM_END])
    assert ids == list(range(ids[0], ids[0] + 3))
    for text in TRICKY_TEXTS:
        encoded = tok.encode(text, add_special_tokens=False)
        assert tok.decode(encoded) == text
    user = tok.encode("user", add_special_tokens=False)
    assert tok.encode(IM_START + "user" + IM_END, add_special_tokens=False) == [ids[1], *user, ids[2]]


def test_reloaded_tokenizer_matches_built_one(tok) -> None:
    built = build_tokenizer()
    assert built.get_vocab() == tok.get_vocab()
    assert built.chat_template == tok.chat_template
    for text in TRICKY_TEXTS:
        assert built.encode(text) == tok.encode(text)


def test_tokenizer_training_is_deterministic_and_takes_extra_corpus() -> None:
    assert build_tokenizer().backend_tokenizer.to_str() == build_tokenizer().backend_tokenizer.to_str()
    extended = build_tokenizer(["zyxwvutsrq " * 50], vocab_size=2048)
    assert len(extended.encode("zyxwvutsrq", add_special_tokens=False)) == 1


def test_chat_template_is_chatml(tok) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": '{"x": 1}\nGo!'}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == ('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{"x": 1}\nGo!<|im_end|>\n'
                    "<|im_start|>assistant\n")
    no_prompt = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert not no_prompt.endswith("<|im_start|>assistant\n")
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert ids == tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text


def test_left_padded_batch_generates_like_single_rows(model: Qwen3ForCausalLM, tok) -> None:
    tok.padding_side = "left"
    prompts = ["hello", 'The agent at (3, 4) chose {"action": "move_to"}']
    batch = tok(prompts, return_tensors="pt", padding=True)
    assert batch["attention_mask"][0, 0] == 0  # the shorter prompt really is left-padded
    with torch.no_grad():
        batched = model.generate(**batch, max_new_tokens=4, do_sample=False)
        for row, prompt in enumerate(prompts):
            single = model.generate(**tok([prompt], return_tensors="pt"), max_new_tokens=4, do_sample=False)
            assert torch.equal(batched[row, -4:], single[0, -4:])


def test_second_build_is_a_noop(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mtimes = {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()}

    def built_again(*args, **kwargs):
        raise AssertionError("the second build trained a tokenizer again")

    monkeypatch.setattr("orchestrator.tiny.model.build_tokenizer", built_again)
    assert build_tiny_model(model_dir) == model_dir
    assert {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()} == mtimes


def test_changed_arguments_rebuild(tmp_path: Path) -> None:
    build_tiny_model(tmp_path, seed=1)
    first = (tmp_path / "model.safetensors").read_bytes()
    build_tiny_model(tmp_path, seed=2)
    assert json.loads((tmp_path / MARKER_FILE).read_text())["seed"] == 2
    assert (tmp_path / "model.safetensors").read_bytes() != first


def test_main_prints_path(model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(model_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(model_dir)


def test_qwen3_4b_config_shape() -> None:
    cfg = qwen3_config_for("qwen3-4b")
    assert cfg.hidden_size == 2560 and cfg.num_hidden_layers == 36
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (32, 8)
    assert (cfg.head_dim, cfg.intermediate_size, cfg.vocab_size) == (128, 9728, 151936)
    assert cfg.tie_word_embeddings and cfg.rms_norm_eps == 1e-6
    assert cfg.rope_parameters["rope_theta"] == 5_000_000
    assert cfg.max_position_embeddings == 262144
    assert (cfg.eos_token_id, cfg.pad_token_id) == (151645, 151643)
    small_vocab = qwen3_config_for("qwen3-4b", vocab_size=1000)
    assert small_vocab.vocab_size == 1000 and small_vocab.eos_token_id is None


def test_tiny_config_and_unknown_shape() -> None:
    cfg = qwen3_config_for("tiny")
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim) == (1024, 64, 2, 16)
    with pytest.raises(ValueError, match="unknown shape"):
        qwen3_config_for("qwen3-8b")
