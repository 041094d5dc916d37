"""The offline demo: the whole pipeline with a recorded LLM, no network, no GPU, no API key.

The transcript is assembled from the reference generated set (`examples/reference_generated/`) with
two real faults in the recorded `train.py`: a misspelt import (the import check catches it) and a
wrong keyword argument to the game (only the tiny-model training run hits it). The recorded fixes
are SEARCH/REPLACE edits; then come a formal-run proposal sized for a CPU and a review of the
samples. Token counts are the recorded ones, so the summary shows what a real run would cost.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from orchestrator.checks import RuntimeCheckSpec
from orchestrator.formal import FormalSpec
from orchestrator.runner import RunOutcome, start_run

REFERENCE = Path(__file__).resolve().parents[1] / "examples" / "reference_generated"

IMPORT_FAULT = ("import prompt_template\n", "import prompt_templates\n")
ENV_LINE = "    return env_move.CleanupEnv(width=config.env_width, height=config.env_height, {}=config.num_agents,"
RUNTIME_FAULT = (ENV_LINE.format("num_agents"), ENV_LINE.format("agents"))

FORMAL_PROPOSAL = {"episodes": 8, "group_size": 2, "max_env_steps": 3, "max_thinking_tokens": 24,
                   "max_action_tokens": 16, "learning_rate": 1e-5, "warmup_steps": 2, "micro_batch_size": 8,
                   "bf16": False, "gradient_checkpointing": False, "eval_interval": 2, "eval_episodes": 2,
                   "sample_log_interval": 4, "save_interval": 0}

IDEAS = """# Future improvements

## Teach the action format before rewarding play
Almost every action of this run failed to parse, so every group had equal returns and no gradient. Start
with a short supervised or format-reward phase (a +0.1 reward for a parseable JSON call) so GRPO has signal.
Evidence: invalid_action_rate=1

## Split the agents into jobs through the prompt
Both agents see the same board and the same instructions, so they chase the same apples and nobody cleans.
Give agent 0 the river and agent 1 the orchard in the thinking prompt, and swap the roles every episode.
Evidence: helper result: STAY (unparseable: no JSON object with an "action" key in the output)

## Shorter thinking, more turns
Thinking outputs hit their token cap, which truncates the reasoning the action stage reads. Ask for three
short bullet points instead of free text, and spend the tokens on longer episodes.
Evidence: completion_clipped_ratio=1

## Reward cleaning a little while the river is dirty
Apples stop regrowing at 40% dirt. A small shaped reward for cells cleaned while dirt is above 25% would
make the cooperative strategy discoverable early; anneal it to zero later in training.
Evidence: info: {"step": 1, "dirt_fraction":
"""


def _files(names: tuple[str, ...], faults: dict[str, list[tuple[str, str]]]) -> str:
    blocks = []
    for name in names:
        text = (REFERENCE / name).read_text()
        for old, new in faults.get(name, []):
            text = text.replace(old, new)
        blocks.append(f"FILE: {name}\n````\n{text}````\n")
    return "\n".join(blocks)


def _edit(path: str, search: str, replace: str) -> str:
    return f"FILE: {path}\n<<<<<<< SEARCH\n{search.rstrip()}\n=======\n{replace.rstrip()}\n>>>>>>> REPLACE\n"


def transcript() -> dict:
    faults = {"train.py": [IMPORT_FAULT, RUNTIME_FAULT]}
    reply = lambda tag, text, i, o: {"tag": tag, "text": text, "usage": {"input_tokens": i, "output_tokens": o}}
    return {"replies": [
        reply("generate_helpers", _files(("helpers.py", "helper_readme.md"), faults), 9200, 3100),
        reply("generate_prompts", _files(("prompt_template.py",), faults), 5400, 1100),
        reply("generate_train", _files(("train.py",), faults), 24800, 8900),
        reply("generate_launch", _files(("launch_training.sh",), faults), 2600, 700),
        reply("fix", _edit("train.py", IMPORT_FAULT[1], IMPORT_FAULT[0]), 15200, 180),
        reply("fix", _edit("train.py", RUNTIME_FAULT[1], RUNTIME_FAULT[0]), 15900, 210),
        reply("formal_train", f"```json\n{json.dumps(FORMAL_PROPOSAL, indent=2)}\n```\nA CPU and a tiny model: "
                              "a short run that still logs samples and evaluations.", 3900, 260),
        reply("review", f"FILE: future_improvements.md\n````\n{IDEAS}````\n", 7400, 640),
    ]}


def run_demo(project_root: Path, on_event=lambda line: None) -> RunOutcome:
    from orchestrator.tiny_model import local_tiny_model  # torch and transformers: only when needed

    model = local_tiny_model(project_root)
    run_id = "demo-" + time.strftime("%Y%m%d-%H%M%S")
    path = project_root / "runs" / run_id / "demo_transcript.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(transcript(), indent=1))
    return start_run(project_root, llm=f"replay:{path}", run_id=run_id, fresh=True, on_event=on_event,
                     runtime_check=RuntimeCheckSpec(model=model, real_model=False, episodes=4, max_env_steps=2,
                                                    max_thinking_tokens=16, max_action_tokens=16),
                     formal=FormalSpec(model=model, timeout_s=900, hang_seconds=300))
