"""The OpenAI-compatible backend against a server nobody here wrote: `transformers serve` (the installed
transformers) serving the tiny local model from its folder, offline, on a free local port.

The tiny model writes nonsense. What is asserted is the wire (the server's own model list, its token counts,
its access log), the ledger and the journal, and the re-ask path: the nonsense answer is sent back once, and
the run ends `blocked` with a clear reason, never a crash. The tiny model's context is its config's 4,096 tokens:
a run whose Step 3 prompt overflows it reaches Step 3 with every request inside it, by the server's count."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from orchestrator.llm import LLMError, make_llm
from orchestrator.llm.openai_chat import OpenAIChatLLM
from orchestrator.llm.prompts import render

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180.0
ANSWER_TOKENS = 48  # the nonsense is cut here (or ends sooner): cheap on a CPU


# The smallest triple a researcher could bring: the map_roles prompt it makes is a few thousand of the tiny
# tokenizer's tokens (the Cleanup triple's is 36,000), so the tiny model answers in about a second on a CPU.
SMALL_TRIPLE = {
    "env_move.py": '''"""A one-cell game: each agent says stay, and the game counts turns."""


class Game:
    def __init__(self, num_agents: int = 2) -> None:
        self.num_agents, self.turn, self.pending = num_agents, 0, {}

    def set_action(self, agent_id: int, action: str) -> None:
        self.pending[agent_id] = action

    def step(self) -> None:
        self.turn, self.pending = self.turn + 1, {}
''',
    "grpo_config.py": '''from dataclasses import dataclass


@dataclass
class GRPOConfig:
    model_name: str = "Qwen/Qwen3-4B-Instruct-2507"  # the policy model: hub id or local folder
    episodes: int = 100  # training episodes in total
    group_size: int = 4  # episodes per group
''',
    "grpo_template.py": '''"""GRPO training, the smallest template: one section to fill."""
# === GENERIC — DO NOT MODIFY ===
from grpo_config import GRPOConfig

LOG_FILE = "train.logs"  # one line per update
# === END GENERIC ===

# === CUSTOMIZE ===
def make_game(config: GRPOConfig):
    raise NotImplementedError
# === END CUSTOMIZE ===

# === GENERIC — DO NOT MODIFY ===
def main() -> None:
    make_game(GRPOConfig())
# === END GENERIC ===
''',
}


@dataclass
class Served:
    """A running `transformers serve`: the model id it serves, every line it has printed (read as it prints
    them), and, once it listens, its URL."""

    model: str
    url: str = ""
    lines: list[str] = field(default_factory=list)
    ended: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def first(self, pattern: str, timeout_s: float) -> re.Match | None:
        """The first printed line matching `pattern`, waiting for it while the server runs (None: it ended or
        the time ran out first)."""
        def found() -> re.Match | None:
            return next((m for m in map(re.compile(pattern).search, self.lines) if m), None)

        with self.changed:
            self.changed.wait_for(lambda: found() is not None or self.ended, timeout_s)
            return found()

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> None:
        """Block until a printed line matches `pattern` (the server logs each request as it ends)."""
        if self.first(pattern, timeout_s) is None:
            raise AssertionError(f"transformers serve never printed {pattern!r}; last: {self.lines[-3:]}")

    def settled(self, tag: str) -> None:
        """Block until every request made so far is in the log: a marker request's own line is (it logs in
        order)."""
        urllib.request.urlopen(f"{self.url.removesuffix('/v1')}/health?settle={tag}", timeout=30).close()
        self.wait_for(rf'"GET /health\?settle={tag} HTTP/1.1"')

    def requests(self, method: str, path: str) -> int:
        with self.changed:
            return sum(f'"{method} {path} HTTP/1.1"' in line for line in self.lines)


def _drain(process: subprocess.Popen, served: Served) -> None:
    for line in process.stdout:
        with served.changed:
            served.lines.append(line.rstrip("\n"))
            served.changed.notify_all()
    with served.changed:
        served.ended = True
        served.changed.notify_all()


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path) -> Served:
    if shutil.which("transformers") is None:
        pytest.skip("no `transformers` command here: transformers serve needs transformers >= 4.51")
    missing = [name for name in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)}: pip install 'transformers[serving]'")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        ["transformers", "serve", str(tiny_model_dir), "--host", "127.0.0.1", "--port", "0", "--device", "cpu",
         "--log-level", "info", "--default-seed", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    served = Served(model=str(tiny_model_dir))
    threading.Thread(target=_drain, args=(process, served), daemon=True).start()
    try:
        listening = served.first(r"Uvicorn running on (http://\S+)", START_TIMEOUT_S)
        if listening is None:
            why = f"exit {process.wait()}" if served.ended else f"not listening after {START_TIMEOUT_S:.0f} s"
            pytest.skip(f"transformers serve cannot run here ({why}): {' | '.join(served.lines[-3:])}")
        served.url = f"{listening.group(1)}/v1"
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_the_backend_speaks_to_transformers_serve_plain_and_streamed(served: Served):
    llm = OpenAIChatLLM(served.model, base_url=served.url, stream_above=8)
    llm.preflight()  # the server lists the folder it serves as its model
    messages = [{"role": "user", "content": "Write helpers.py for the game."}]
    plain = llm.complete(messages, system="You write code.", max_tokens=8, cache_prefix=["=== FILE: env_move.py ==="])
    streamed = llm.complete(messages, max_tokens=16)

    tokenizer = AutoTokenizer.from_pretrained(served.model)
    sent = [{"role": "system", "content": "You write code."},
            {"role": "user", "content": "=== FILE: env_move.py ===\n\nWrite helpers.py for the game."}]
    prompt = tokenizer.apply_chat_template(sent, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert plain.usage.input_tokens == len(prompt)  # the server counted exactly what the backend sent
    for reply, budget in ((plain, 8), (streamed, 16)):
        assert (reply.backend, reply.model, reply.cost_usd) == ("openai", served.model, 0.0)
        assert reply.stop_reason in ("max_tokens", "end_turn") and 0 < reply.usage.output_tokens <= budget
        assert (reply.stop_reason == "max_tokens") == (reply.usage.output_tokens == budget)
    served.settled("plain-and-streamed")
    assert served.requests("POST", "/v1/chat/completions") >= 2 and served.requests("GET", "/v1/models") >= 1

    served_only = rf"serves no model 'someone-else' \(it serves: {re.escape(repr(served.model))}\)"
    with pytest.raises(LLMError, match=served_only):
        make_llm(f"openai:someone-else@{served.url}").preflight()


def test_a_run_through_transformers_serve_ends_blocked_with_the_nonsense_sent_back_once(served: Served,
                                                                                         tmp_path: Path):
    project = tmp_path / "project"
    (project / "source_of_truth").mkdir(parents=True)
    for name, text in SMALL_TRIPLE.items():
        (project / "source_of_truth" / name).write_text(text)
    served.settled("before-run")
    chats_before = served.requests("POST", "/v1/chat/completions")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("OPENAI_API_KEY", None)
    run = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "--llm", f"openai:{served.model}@{served.url}",
         "--until", "generate_launch", "--max-answer-tokens", str(ANSWER_TOKENS), "--run-id", "t1",
         "--project-root", str(project)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)

    assert run.returncode == 1, run.stdout + run.stderr
    assert "blocked run t1: map_roles: the LLM's mapping stayed unusable after a re-ask: " in run.stdout
    assert "Traceback" not in run.stdout + run.stderr and not (project / "runs/t1/crash.log").exists()
    state = json.loads((project / "runs/t1/state.json").read_text())
    answers = [json.loads(line) for line in (project / "runs/t1/journal.jsonl").read_text().splitlines()
               if json.loads(line)["kind"] == "llm_answer"]
    assert [(a["tag"], a["backend"], a["model"], a["cost_usd"]) for a in answers] == \
        [("map_roles", "openai", served.model, 0.0)] * 2
    row = state["ledger"]["map_roles"]
    assert row["calls"] == 2 and row["answers"] == [a["seq"] for a in answers] and row["cost_usd"] == 0.0
    assert row["tokens"] == sum(sum(a["usage"].values()) for a in answers)
    assert all(a["usage"]["output_tokens"] <= ANSWER_TOKENS for a in answers)
    first, second = (a["usage"]["input_tokens"] for a in answers)
    reask = len(AutoTokenizer.from_pretrained(served.model)(render("reask_format", error=""))["input_ids"])
    assert second > first + reask  # the second request carried the nonsense and, after it, the re-ask

    served.settled("run")
    assert served.requests("POST", "/v1/chat/completions") - chats_before == 2

    status = subprocess.run([sys.executable, "-m", "orchestrator", "status", "t1", "--project-root", str(project)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert f"map_roles: 2 calls, {row['tokens']} tokens, $0.0000 (openai {served.model} x2; unpriced: $0" in \
        status.stdout
    log = (project / "claude.logs").read_text()
    assert log.count(f"result: openai {served.model} answered: ") == 2


SMALL_HELPERS = '''"""Helpers for the one-cell game: the game has no coordinates; every agent can only stay.

Call a helper from JSON: {"action": "stay", "agent_id": 0, "args": {}}.
"""

import env_move


def observation_to_text(env: env_move.Game, agent_id: int) -> str:
    """What agent `agent_id` sees: the turn number (the one cell is at (0, 0))."""
    return f"You are agent {agent_id} at (0, 0). Turn {env.turn}."


def stay(env: env_move.Game, agent_id: int) -> bool:
    """Stay in the cell this turn. True: the stay is queued."""
    env.set_action(agent_id, "stay")
    return True
'''
SMALL_PROMPTS = '''"""Prompts for the one-cell game."""

ACTIONS = "stay() - stay in the cell"


def create_thinking_prompt(obs_text: str, agent_id: int) -> list[dict]:
    return [{"role": "system", "content": f"One cell; actions: {ACTIONS}"},
            {"role": "user", "content": f"{obs_text} Think about your move."}]


def create_single_stage_prompt(obs_text: str, thinking_response: str, agent_id: int) -> list[dict]:
    return [{"role": "system", "content": f"One cell; actions: {ACTIONS}"},
            {"role": "user", "content": f"{obs_text}\\n{thinking_response}\\nAnswer with one JSON call of stay."}]
'''


def test_a_run_through_transformers_serve_reaches_step_3_with_every_request_inside_the_model_s_context(
        served: Served, tmp_path: Path):
    """Steps 0-2 come from a recorded transcript (the tiny model writes nonsense), then a second run asks Step 3 of
    the tiny model itself: its context is its config's 4,096 tokens, which the Step 3 prompt alone overflows, so
    the prompt is fitted, and every request the server counted is inside the context."""
    project = tmp_path / "project"
    (project / "source_of_truth").mkdir(parents=True)
    for name, text in SMALL_TRIPLE.items():
        (project / "source_of_truth" / name).write_text(text)
    transcript = tmp_path / "steps-0-2.json"
    transcript.write_text(json.dumps({"replies": [
        {"tag": "map_roles", "text": '```json\n{"roles": {}}\n```'},
        {"tag": "generate_helpers", "text": f"FILE: helpers.py\n```python\n{SMALL_HELPERS}```\n"},
        {"tag": "generate_prompts", "text": f"FILE: prompt_template.py\n```python\n{SMALL_PROMPTS}```\n"}]}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("OPENAI_API_KEY", None)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "orchestrator", "run", *args, "--project-root", str(project)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)

    recorded = run("--llm", f"replay:{transcript}", "--until", "generate_prompts", "--run-id", "t0")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    tiny = run("--llm", f"openai:{served.model}@{served.url}", "--until", "generate_train", "--max-answer-tokens",
               str(ANSWER_TOKENS), "--run-id", "t1")

    assert tiny.returncode == 1, tiny.stdout + tiny.stderr
    assert "blocked run t1: generate_train: the LLM's answer stayed malformed after a re-ask: " in tiny.stdout
    log = (project / "runs/t1/claude.logs").read_text()
    assert "a 4,096-token context (the model's config.json)" in log
    events = [json.loads(line) for line in (project / "runs/t1/events.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["action"] == "llm_call"]
    assert [c["node"] for c in calls] == ["generate_train"] * 2  # Steps 0-2 were the recorded run's
    for call in calls:  # the server's own count of the prompt, and the budget the request asked for
        found = re.search(r"answered: (\d+) tokens in, (\d+) out of (\d+) asked for", call["result"])
        prompt, out, budget = map(int, found.groups())
        assert prompt + budget <= 4096 and out <= budget
    fitted = [e["result"] for e in events if e["action"] == "llm_fit" and e["node"] == "generate_train"]
    assert fitted and "leaves too little room for the answer in the server's 4,096-token context" in fitted[0]
