"""What a pipeline costs in tokens: the whole run against a local Messages API server, counted per node.

    python benchmarks/tokens_bench.py [--example cleanup|staghunt] [--generic-times 4] [--until NODE] [--json OUT]

The server speaks the Messages API on 127.0.0.1 (the SDK's base_url); its model answers each request from
what the request asks, with the offline demo's recorded answers for the example (`orchestrator.demo`:
the reference files, two real faults in train.py, their fixes, a formal-run proposal, a review), so the
run takes the demo's path: rules, import check, runtime check and formal run on the tiny agent, two fixes.

Tokens are counted by the server with Anthropic's published Claude tokenizer (the `tokenizer.json` that the
`anthropic` SDK shipped up to 0.38, for the Claude 1-2 models; Claude 3 and later tokenize differently and
their tokenizer is not published, so the counts are a close proxy, not a bill): every text block of the
system prompt and the messages, and the reply's text; a reply longer than the request's max_tokens is cut
there with stop_reason "max_tokens" (the orchestrator then asks again with twice the budget). Prompt caching is emulated as the API does it:
a request's prefix up to a `cache_control` breakpoint that an earlier request already sent is read from
the cache (cache_read), a new one is written (cache_write) when it holds at least 1024 tokens; the rest is
input. The 5-minute cache lifetime is not emulated. Cost is at list prices (`orchestrator.llm.price_usd`,
claude-sonnet-4-6: $3 / $15 per million input / output tokens, cache writes x1.25, reads x0.1).

`--generic-times N` makes every GENERIC section of the example's template N times longer (the section's
lines repeated N - 1 times more, as comments; the reference train.py likewise), so the GENERIC part a
researcher brings grows while the holes stay the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.checks import RuntimeCheckSpec  # noqa: E402
from orchestrator.demo import Example, example, transcript  # noqa: E402
from orchestrator.training.formal import FormalSpec  # noqa: E402
from orchestrator.llm import DEFAULT_MODEL, Usage, price_usd  # noqa: E402
from orchestrator.runner import start_run  # noqa: E402
from orchestrator.sources.template import GENERIC, read_sections, split_lines  # noqa: E402
from orchestrator.tiny.agent import TINY_AGENT  # noqa: E402

TOKENIZER_SDK = "anthropic==0.34.2"  # the last SDK releases ship Anthropic's tokenizer.json
TOKENIZER_CACHE = ROOT / "models" / "claude-tokenizer" / "tokenizer.json"
MIN_CACHEABLE_TOKENS = 1024  # Sonnet's smallest cacheable prefix
NODE_ORDER = ("map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch", "fix",
              "formal_train", "review")


# ---------------------------------------------------------------- counting

def claude_tokenizer(cache: Path = TOKENIZER_CACHE):
    """Anthropic's published tokenizer, taken once from the SDK wheel that ships it (pip, no install)."""
    from tokenizers import Tokenizer

    if not cache.exists():
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp,
                                   TOKENIZER_SDK], capture_output=True, text=True)
            wheels = list(Path(tmp).glob("anthropic-*.whl"))
            if done.returncode or not wheels:
                sys.exit(f"cannot fetch the tokenizer ({TOKENIZER_SDK} from PyPI): {done.stderr.strip()[-300:]}; "
                         f"put its anthropic/tokenizer.json at {cache}")
            cache.parent.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheels[0]) as wheel:
                cache.write_bytes(wheel.read("anthropic/tokenizer.json"))
    return Tokenizer.from_file(str(cache))


@dataclass
class CacheEmulator:
    """The API's prompt cache, by exact prefix up to each breakpoint; one per server."""

    count: Any  # str -> tokens
    seen: set[str] = field(default_factory=set)

    def usage(self, pieces: list[tuple[str, bool]]) -> dict[str, int]:
        """pieces: (text, ends at a cache_control breakpoint) in request order -> the input side of usage."""
        tokens, keys, total = [], [], hashlib.sha256()
        for text, breakpoint in pieces:
            total.update(text.encode() + b"\0")
            tokens.append(self.count(text))
            keys.append(total.hexdigest() if breakpoint else None)
        cumulative = [sum(tokens[: i + 1]) for i in range(len(tokens))]
        hit = max((cumulative[i] for i, key in enumerate(keys) if key in self.seen), default=0)
        last = max((i for i, key in enumerate(keys) if key), default=None)
        write = 0
        if last is not None and cumulative[last] >= MIN_CACHEABLE_TOKENS:
            write = max(0, cumulative[last] - hit)
            self.seen.update(key for i, key in enumerate(keys) if key and cumulative[i] >= MIN_CACHEABLE_TOKENS)
        return {"input_tokens": cumulative[-1] - hit - write if cumulative else 0,
                "cache_creation_input_tokens": write, "cache_read_input_tokens": hit}


def request_pieces(body: dict) -> list[tuple[str, bool]]:
    pieces: list[tuple[str, bool]] = []
    system = body.get("system") or []
    for block in [{"text": system}] if isinstance(system, str) else system:
        pieces.append((block["text"], "cache_control" in block))
    for message in body["messages"]:
        content = message["content"]
        for block in [{"text": content}] if isinstance(content, str) else content:
            pieces.append((block.get("text", ""), "cache_control" in block))
    return pieces


# ---------------------------------------------------------------- the model

ASKS = {  # how each node's question starts (agent_prompts/) -> the transcript's tag
    "Before any code is written": "map_roles", "Step 1": "generate_helpers", "Step 2": "generate_prompts",
    "Step 3": "generate_train", "Step 4": "generate_launch", "Plan the formal training run": "formal_train",
    "The formal training run finished": "review",
}


class RecordedModel:
    """Answers each request with the example's next recorded answer for what the request asks; an answer cut
    at the request's max_tokens is given again when the question comes back with a larger budget."""

    def __init__(self, replies: list[dict]) -> None:
        self.replies = {tag: [r["text"] for r in replies if r["tag"] == tag] for tag in {r["tag"] for r in replies}}

    def answer(self, body: dict, fits) -> str:
        """The answer; `fits(text)` says whether it fits the request's budget (else it is not used up)."""
        first = body["messages"][0]["content"]
        asked = first if isinstance(first, str) else first[-1]["text"]
        tag = next((t for start, t in ASKS.items() if asked.startswith(start)), "fix")
        if len(body["messages"]) > 1:
            raise RuntimeError(f"{tag}: the recorded answer was re-asked: {body['messages'][-1]['content'][:300]}")
        if not self.replies.get(tag):
            raise RuntimeError(f"no recorded answer left for {tag}")
        text = self.replies[tag][0]
        if fits(text):
            self.replies[tag].pop(0)
        return text


# ---------------------------------------------------------------- the server

class MessagesServer:
    """A local Messages API: the recorded model's answers, usage counted with the tokenizer; an answer longer
    than the request's max_tokens is cut there (stop_reason "max_tokens"), as the API does."""

    def __init__(self, model: RecordedModel, tokenizer) -> None:
        from werkzeug import Request, Response
        from werkzeug.serving import make_server

        encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids if text else []  # noqa: E731
        count = lambda text: len(encode(text))  # noqa: E731
        self.cache, self.model, self.calls = CacheEmulator(count), model, []

        @Request.application
        def app(request: Request) -> Response:
            body = json.loads(request.data)
            budget = body["max_tokens"]
            try:
                text = model.answer(body, lambda answer: count(answer) <= budget)
            except RuntimeError as error:
                self.calls.append({"error": str(error)})
                return Response(json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                                        "message": str(error)}}), status=400)
            ids, stop = encode(text), "end_turn"
            if len(ids) > budget:
                ids, stop = ids[:budget], "max_tokens"
                text = tokenizer.decode(ids)
            usage = {**self.cache.usage(request_pieces(body)), "output_tokens": len(ids)}
            self.calls.append(usage)
            message = {"id": f"msg_{len(self.calls)}", "type": "message", "role": "assistant",
                       "model": body["model"], "content": [{"type": "text", "text": text}],
                       "stop_reason": stop, "stop_sequence": None, "usage": usage}
            if not body.get("stream"):
                return Response(json.dumps(message), content_type="application/json")
            return Response(_sse(message), content_type="text/event-stream")

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def _sse(message: dict) -> str:
    usage, text = message["usage"], message["content"][0]["text"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
         "usage": {"output_tokens": usage["output_tokens"]}},
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


# ---------------------------------------------------------------- a longer GENERIC part

def lengthen_generic(text: str, times: int) -> str:
    """`text` (a template or a train.py) with each GENERIC section followed by `times - 1` copies of its lines
    as comments: valid at any indentation, inside a class too, and the same tokens as code give or take a `#`."""
    if times == 1:
        return text
    lines = split_lines(text)
    for section in reversed([s for s in read_sections(text) if s.kind == GENERIC]):
        indent = section.marker[: len(section.marker) - len(section.marker.lstrip())]
        copy = "".join(f"{indent}# {line.rstrip()}\n" if line.strip() else "\n" for line in split_lines(section.text))
        end = section.end_line
        if not lines[end - 1].endswith("\n"):
            lines[end - 1] += "\n"
        lines[end:end] = [copy] * (times - 1)
    return "".join(lines)


def lengthened_example(ex: Example, times: int, folder: Path) -> Example:
    source, reference = folder / "source_of_truth", folder / "reference_generated"
    shutil.copytree(ex.source_of_truth, source, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ex.reference, reference, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (source / "grpo_template.py", reference / "train.py"):
        path.write_text(lengthen_generic(path.read_text(), times))
    compile((source / "grpo_template.py").read_text(), "grpo_template.py", "exec")
    return Example(ex.name, source, reference, ex.roles_file)


# ---------------------------------------------------------------- the run

def run(name: str, times: int, until: str, workdir: Path, tokenizer) -> dict:
    ex = example(name)
    if times > 1:
        ex = lengthened_example(ex, times, workdir / "example")
    model = RecordedModel(transcript(ex)["replies"])
    server = MessagesServer(model, tokenizer)
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)  # noqa: E731
    os.environ.update(ANTHROPIC_API_KEY="bench", ANTHROPIC_BASE_URL=server.url)
    project = workdir / "project"
    project.mkdir()
    started = time.perf_counter()
    try:
        outcome = start_run(project, llm=f"anthropic:{DEFAULT_MODEL}", run_id=f"tokens-{name}", fresh=True,
                            source_of_truth=ex.source_of_truth, until=until,
                            runtime_check=RuntimeCheckSpec(model=TINY_AGENT, real_model=False, episodes=4, turns=2),
                            formal=FormalSpec(model=TINY_AGENT, timeout_s=900, hang_seconds=300),
                            on_event=lambda line: print(f"  {line}", file=sys.stderr))
    finally:
        server.close()
    errors = [c["error"] for c in server.calls if "error" in c]
    template = (ex.source_of_truth / "grpo_template.py").read_text()
    generic = "".join(s.text for s in read_sections(template) if s.kind == GENERIC)
    return {"example": name, "generic_times": times, "until": until or "review", "status": outcome.status,
            "reason": outcome.reason, "seconds": round(time.perf_counter() - started, 1), "errors": errors,
            "template_tokens": count(template), "generic_tokens": count(generic),
            "ledger": outcome.state.get("ledger", {})}


def table(result: dict) -> str:
    rows = ["| node | calls | input | cache write | cache read | output | cost $ |", "|---|---:|---:|---:|---:|---:|---:|"]
    total = Usage()
    calls = 0
    for node in sorted(result["ledger"], key=lambda n: NODE_ORDER.index(n) if n in NODE_ORDER else 99):
        row = result["ledger"][node]
        usage = Usage(row["input_tokens"], row["output_tokens"], row["cache_write_tokens"], row["cache_read_tokens"])
        total += usage
        calls += row["calls"]
        rows.append(f"| {node} | {row['calls']} | {usage.input_tokens} | {usage.cache_creation_input_tokens} | "
                    f"{usage.cache_read_input_tokens} | {usage.output_tokens} | {price_usd(DEFAULT_MODEL, usage):.4f} |")
    rows.append(f"| **total** | {calls} | {total.input_tokens} | {total.cache_creation_input_tokens} | "
                f"{total.cache_read_input_tokens} | {total.output_tokens} | {price_usd(DEFAULT_MODEL, total):.4f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="cleanup")
    parser.add_argument("--generic-times", type=int, default=1)
    parser.add_argument("--until", default="", help="stop once this node has passed (default: the whole pipeline)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tokenizer = claude_tokenizer()
    with tempfile.TemporaryDirectory(prefix="tokens-bench-") as tmp:
        result = run(args.example, args.generic_times, args.until, Path(tmp), tokenizer)
    print(f"{result['example']}, GENERIC x{result['generic_times']} (template {result['template_tokens']} tokens, "
          f"GENERIC {result['generic_tokens']}), until {result['until']}: {result['status']} in {result['seconds']} s"
          + (f" ({result['reason']})" if result["status"] != "done" else ""))
    for error in result["errors"]:
        print(f"server: {error}")
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
