"""How well the tiny agent plays each game: its build (time, loss) and its invalid-action rate in real play.

    python benchmarks/tiny_agent_bench.py [FOLDER ...] [--examples cleanup,staghunt,spread] [--episodes 4]
                                          [--turns 6] [--seed 7]

Each FOLDER is a generated set (a source of truth plus helpers.py and prompt_template.py); `--examples`
adds the examples' reference sets. For each, the tiny agent is built (or taken from the models cache:
`ORCHESTRATOR_MODELS_DIR`, else `models/`), then it plays episodes of the game as the training does: every
turn each agent's observation (`observation_to_text`), a sampled Stage-1 answer to `create_thinking_prompt`,
a sampled Stage-2 answer to `create_single_stage_prompt`, the JSON call parsed and run on the game (the
helper named, for the agent it names), then the game's step. Boards are game seeds the build never saw.

An action is invalid, as the templates count it, when the answer holds no JSON call, names no action helper,
names another agent, or the helper refuses its arguments (ValueError, TypeError, KeyError). Prints one JSON
object per set: build seconds and losses (from the agent's marker), turns played, the invalid-action rate and
its causes. Each set runs in its own interpreter (the generated modules share their names across sets).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.tiny.agent import MARKER_FILE, REFUSALS, local_tiny_agent  # noqa: E402


def play(folder: Path, agent: Path, episodes: int, turns: int, seed: int) -> dict:
    """The agent's play on `folder`'s game (run in a child interpreter: it imports the generated modules)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchestrator.rules.exposed import OBSERVATION_HELPER, action_helpers
    from orchestrator.tiny.agent import _advance, _agent_ids, _fresh_game, _game_play

    sys.path.insert(0, str(folder))
    import env_move
    import helpers
    import prompt_template

    table, observe = action_helpers(helpers), getattr(helpers, OBSERVATION_HELPER)
    game_play = _game_play(env_move)
    tok = AutoTokenizer.from_pretrained(agent, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(agent).eval()
    torch.manual_seed(seed)

    def sample(conversations: list[list[dict]], cap: int) -> list[str]:
        texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in conversations]
        batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=cap, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
        return [tok.decode(ids[batch["input_ids"].shape[1]:], skip_special_tokens=True) for ids in out]

    causes: collections.Counter = collections.Counter()
    played = 0
    for episode in range(episodes):
        game = _fresh_game(game_play, 1_000_003 + seed * 1_000 + episode)
        for _ in range(turns):
            agents = _agent_ids(game, observe, game_play)
            observations = [observe(game, a) for a in agents]
            thoughts = sample([prompt_template.create_thinking_prompt(o, a) for o, a in zip(observations, agents)], 48)
            answers = sample([prompt_template.create_single_stage_prompt(o, t, a)
                              for o, t, a in zip(observations, thoughts, agents)], 48)
            for agent_id, answer in zip(agents, answers):
                played += 1
                causes[judge(answer, agent_id, table, game)] += 1
            if not _advance(game_play, game):
                break
    invalid = played - causes["valid"]
    return {"turns": played, "invalid_rate": round(invalid / max(played, 1), 3),
            "causes": {k: v for k, v in causes.items() if k != "valid"}}


def judge(answer: str, agent_id: int, table: dict, game) -> str:
    """'valid', or why the template would count the action invalid."""
    try:
        call = json.loads(answer[answer.index("{"):answer.rindex("}") + 1])
    except ValueError:
        return "no JSON call"
    if not isinstance(call, dict) or call.get("action") not in table:
        return "no action helper named"
    if call.get("agent_id", agent_id) != agent_id:
        return "another agent's id"
    args = call.get("args", {})
    try:
        table[call["action"]](game, agent_id, **(args if isinstance(args, dict) else {}))
    except REFUSALS:
        return "arguments refused"
    except Exception:  # the helper's own bug: the agent's call was valid
        return "valid"
    return "valid"


def reference_set(name: str, dest: Path) -> Path:
    from orchestrator.demo import example

    ex = example(name)
    folder = dest / name
    folder.mkdir(parents=True)
    for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
        (folder / src.name).write_bytes(src.read_bytes())
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--examples", default="cleanup,staghunt,spread")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(play(Path(args.child[0]), Path(args.child[1]), args.episodes, args.turns, args.seed)))
        return
    scratch = Path(tempfile.mkdtemp(prefix="tiny-agent-bench-"))
    sets = [(p.name, p.resolve()) for p in args.folders]
    sets += [(n, reference_set(n, scratch)) for n in args.examples.split(",") if n]
    for name, folder in sets:
        agent = Path(local_tiny_agent(ROOT, folder))
        marker = json.loads((agent / MARKER_FILE).read_text())
        child = subprocess.run([sys.executable, __file__, "--child", str(folder), str(agent), "--episodes",
                                str(args.episodes), "--turns", str(args.turns), "--seed", str(args.seed)],
                               capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if child.returncode != 0:
            print(json.dumps({"set": name, "error": child.stderr[-800:]}))
            continue
        played = json.loads(child.stdout.strip().splitlines()[-1])
        print(json.dumps({"set": name, "build_seconds": marker.get("seconds"), "last_loss": round(marker["last_loss"], 3),
                          "samples": marker.get("samples"), **played}))


if __name__ == "__main__":
    main()
