"""A tiny, randomly initialised Qwen3 model and a locally trained tokenizer, for runs without a GPU or a hub.

`build_tiny_model(out_dir)` writes a folder that loads through exactly the calls a real
`Qwen/Qwen3-4B-Instruct-2507` checkout takes::

    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir)

The tokenizer is a byte-level BPE (any text round-trips encode -> decode exactly) with Qwen's
pre-tokenizer regex, Qwen's special tokens (`<|endoftext|>` pad, `<|im_start|>`, `<|im_end|>` eos)
and a ChatML chat template. Padding side is left at the library default; the trainer sets it.

Chat template in transformers 5.x: `apply_chat_template(..., tokenize=True)` returns a
`BatchEncoding` (`return_dict` now defaults to True). The call that yields a flat `list[int]` is::

    tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)

`qwen3_config_for("qwen3-4b")` gives the real Qwen3-4B shape, for building a random model of that
size on a GPU without downloading weights.

CLI: `python -m orchestrator.tiny.model OUT_DIR` builds the tiny model and prints its path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)  # Qwen's order: consecutive ids after the BPE vocab

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Qwen2/Qwen3 pre-tokenizer split: contractions, letter runs, single digits, punctuation runs, whitespace.
_QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MARKER_FILE = "tiny_model.json"
_MARKER_VERSION = 1  # bump when the recipe changes so existing folders are rebuilt
_MODEL_FILES = ("chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json")

_TINY_SHAPE: dict[str, int] = {
    "vocab_size": 1024, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
    "intermediate_size": 128, "max_position_embeddings": 4096,
}

_PROSE = """\
You are agent 0 in the Cleanup game. The grid has an orchard where apples grow and a river that fills
with dirt. Apples only regrow while the river is clean, so someone has to CLEAN the river while the
others collect apples. Each turn every agent chooses one action: UP, DOWN, LEFT, RIGHT, STAY or CLEAN.
Think step by step about where the other agents are, which cells hold apples and how much dirt is in
the river, then answer with a single JSON object and nothing else.
Your reward is the number of apples you collect. An invalid or unparseable action costs a penalty.
The episode ends after a fixed number of turns. Positions are (x, y) with x the column and y the row;
(0, 0) is the top-left corner. Moving into a wall or outside the grid leaves you where you are.
I think agent 1 is heading for the orchard, so I'll go to the river and clean the dirt first.
There are 3 apples left near (7, 2) and the river at column 0 has 5 dirty cells; cleaning raises regrowth.
Observation: turn 4 of 20. Your position is (2, 5). Scores: agent 0 has 2 apples, agent 1 has 1 apple.
Legal actions: move_to, clean, collect, stay. Reply with {"action": ..., "agent_id": ..., "args": {...}}.
System: keep your thinking short. User: what is your next move? Assistant: I will move right.
Strategy notes. Cooperation matters: if every agent harvests and nobody cleans, the river becomes polluted,
regrowth stops and everybody's score collapses. A good team splits the work. One agent patrols the riverbank,
removing pollution whenever the waste level rises above a threshold; the rest harvest the nearest ripe fruit
and avoid colliding with each other. When two agents want the same cell, the lower agent_id moves first.
Remember that the map wraps nowhere: the borders are walls. Count the steps carefully, because the shortest
path may be blocked by another player standing still. Prefer actions that keep options open for later turns.
Explanation of the observation format: each line of the map is one row, read from top to bottom; every
character is one cell. The legend is: '~' water, 'D' dirty water, 'A' apple, '.' empty grass, and a digit
shows which agent stands there. Your own position is also given explicitly, together with your orientation,
your inventory, the global pollution level, recent rewards, and the history of previous messages.
Training details: the policy is optimised with group relative policy optimization. For every prompt we sample
a group of completions, compute rewards, normalise them within the group to obtain advantages, and update the
weights with a clipped surrogate objective plus a small KL penalty towards the frozen reference model.
Evaluation runs held-out seeds with greedy decoding; checkpoints are saved periodically during training.
Common mistakes include returning markdown instead of raw JSON, forgetting a closing brace, inventing unknown
actions, quoting numbers as strings, or writing several objects when exactly one was requested. Respond briefly.
Questions people ask: why did my agent wander away? Which direction should it face? How quickly do apples
respawn? What happens when the waste spawns faster than anyone can clean? Should agents communicate plans?
"""


def _grid_lines(width: int, height: int, seed: int) -> list[str]:
    """A deterministic ASCII Cleanup map: '~' river, 'D' dirt, 'A' apple, '.' grass, a digit an agent."""
    def cell(x: int, y: int) -> str:
        code = (x * 7 + y * 13 + seed * 5) % 11
        if x == 0:
            return "~"
        if x == 1 and code < 4:
            return "D"
        if code < 3:
            return "A"
        return "." if code < 10 else str((x + y) % 4)

    return ["".join(cell(x, y) for x in range(width)) for y in range(height)]


def _builtin_corpus() -> list[str]:
    """English, JSON actions and grid text representative of the prompts and completions in a run."""
    actions = ("move_to", "clean", "collect", "stay")
    moves = ("UP", "DOWN", "LEFT", "RIGHT", "STAY", "CLEAN")
    corpus = [_PROSE, "0123456789 10 16 32 64 100 256 1024 -1 -0.1 0.5 3.14 1e-6 2,000",
              "!?.,:;'\"()[]{}<>/\\|-_+=*&^%$#@~`"]
    for i in range(64):
        x, y, agent = i % 10, (i * 3) % 8, i % 4
        call = {"action": actions[i % 4], "agent_id": agent, "args": {"x": x, "y": y}}
        corpus.append(json.dumps(call))
        corpus.append(json.dumps({"agent_id": agent, "move": moves[i % 6], "position": [x, y], "reward": i % 3}))
        corpus.append(f"Turn {i}: agent {agent} at ({x}, {y}) chose {moves[i % 6]}; apple count {i % 5}, dirt {i % 7}.")
    for seed in range(4):
        corpus.append("\n".join(_grid_lines(10, 8, seed)))
    return corpus


def build_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on the built-in corpus plus `corpus`; `vocab_size` counts the special tokens."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator([*_builtin_corpus(), *(corpus or ())], trainer)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[IM_START],  # transformers 5.x name for additional_special_tokens
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,  # cleanup would rewrite " ." to "." and break round-trips
        model_max_length=131072,
    )


def _qwen3_config(*, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int,
                  intermediate_size: int, max_position_embeddings: int, head_dim: int | None = None,
                  **overrides: Any) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim or hidden_size // num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        max_window_layers=num_layers,
        tie_word_embeddings=True,
        **overrides,
    )


def qwen3_config_for(shape: str, vocab_size: int | None = None) -> Qwen3Config:
    """Config for `shape` ("tiny" or "qwen3-4b"), optionally with another vocabulary size."""
    if shape == "tiny":
        return _qwen3_config(**{**_TINY_SHAPE, "vocab_size": vocab_size or _TINY_SHAPE["vocab_size"]})
    if shape == "qwen3-4b":
        vocab_size = vocab_size or 151936
        # Qwen's <|endoftext|> / <|im_end|> ids, kept only where the vocabulary still holds them
        token_ids = ({"bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643}
                     if vocab_size > 151645 else {})
        return _qwen3_config(
            vocab_size=vocab_size, hidden_size=2560, num_layers=36, num_heads=32, num_kv_heads=8,
            head_dim=128,  # not hidden_size // num_heads (80): Qwen3 widens attention beyond the hidden size
            intermediate_size=9728, max_position_embeddings=262144, rms_norm_eps=1e-6,
            # transformers 5.x folds rope_theta into rope_parameters
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0},
            **token_ids,
        )
    raise ValueError(f"unknown shape {shape!r}; expected 'tiny' or 'qwen3-4b'")


def _is_built(out_dir: Path, marker: dict[str, Any]) -> bool:
    marker_path = out_dir / MARKER_FILE
    if not marker_path.is_file() or not all((out_dir / name).is_file() for name in _MODEL_FILES):
        return False
    try:
        return json.loads(marker_path.read_text()) == marker
    except json.JSONDecodeError:
        return False


def build_tiny_model(out_dir: Path, *, vocab_size: int = 1024, hidden_size: int = 64, num_layers: int = 2,
                     num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128, seed: int = 0,
                     max_position_embeddings: int = 4096, corpus: Iterable[str] = ()) -> Path:
    """Build tokenizer + random Qwen3ForCausalLM into `out_dir` (a no-op if already built with these arguments).

    `corpus`: more text for the tokenizer (a game's prompts), so that text takes fewer tokens."""
    out_dir = Path(out_dir)
    shape = {"vocab_size": vocab_size, "hidden_size": hidden_size, "num_layers": num_layers, "num_heads": num_heads,
             "num_kv_heads": num_kv_heads, "intermediate_size": intermediate_size,
             "max_position_embeddings": max_position_embeddings}
    corpus = list(corpus)
    marker = {"version": _MARKER_VERSION, **shape, "seed": seed}
    if corpus:
        marker["corpus"] = hashlib.sha1("\n".join(corpus).encode()).hexdigest()
    if _is_built(out_dir, marker):
        return out_dir

    tok = build_tokenizer(corpus, vocab_size=vocab_size)
    pad_id, eos_id = tok.pad_token_id, tok.eos_token_id
    config = _qwen3_config(**{**shape, "vocab_size": len(tok)}, bos_token_id=pad_id, eos_token_id=eos_id,
                           pad_token_id=pad_id)
    with torch.random.fork_rng(devices=[]):  # seed the init without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id,
                                               do_sample=True)

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER_FILE).unlink(missing_ok=True)
    tok.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    # written last: its presence means the folder is complete
    (out_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return out_dir


def local_tiny_model(project_root: Path) -> str:
    """The project's tiny stand-in model (models/tiny-qwen3), built on first use."""
    return str(build_tiny_model(project_root / "models" / "tiny-qwen3"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a tiny random Qwen3 model and tokenizer into OUT_DIR.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out_dir, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
