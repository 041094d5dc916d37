"""What a pipeline sends a local coder model with a short context: every request, counted by the server, per node.

    python benchmarks/context_bench.py [--example cleanup|staghunt] [--context 32768] [--fixes search|reformat|diff]
                                       [--no-think] [--served-as ID] [--until NODE] [--json OUT]

The whole pipeline of the demo (map_roles to review, the runtime check and formal run on the tiny agent) through
`openai:` against tests/coder_server.py: an OpenAI-compatible server that states `max_model_len`, counts every
prompt with the tiny model's byte-level BPE tokenizer through its ChatML template (about 1.8 characters a token
on code: the Cleanup template alone is 29,418 tokens, a coder model's own tokenizer gives about half as many) and
refuses a request whose prompt plus `max_tokens` passes the context with vLLM's 400 text; its model answers with
the demo's recorded answers, each after a `<think>` draft (see tests/coder_server.py). `--served-as` the
tokenizer's folder (the default) gives the orchestrator the model's own tokenizer; a hub id that is not cached here
makes it estimate.

Per node: requests, the largest prompt (server's count), the largest prompt + budget asked for (must stay within
the context), prompt and output tokens in all, and refusals. `--context 1000000` shows the prompts unfitted: what
each node needs whole (before this orchestrator fitted prompts, a 32k server refused the first request with HTTP
400 and the run ended `failed`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the server the tests use: one server, not two

from coder_server import CoderModel, CoderServer  # noqa: E402

from orchestrator.checks import RuntimeCheckSpec  # noqa: E402
from orchestrator.demo import example  # noqa: E402
from orchestrator.runner import start_run  # noqa: E402
from orchestrator.tiny.agent import TINY_AGENT  # noqa: E402
from orchestrator.tiny.model import build_tiny_model  # noqa: E402
from orchestrator.training.formal import FormalSpec  # noqa: E402

NODE_ORDER = ("map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch", "fix",
              "formal_train", "review", "log_format")


def run(args: argparse.Namespace, workdir: Path) -> dict:
    ex = example(args.example)
    tokenizer_folder = build_tiny_model(workdir / "tiny-qwen3")  # about 20 s
    server = CoderServer(CoderModel(ex, think=not args.no_think, fixes=args.fixes),
                         str(tokenizer_folder / "tokenizer.json"), served_as=args.served_as or str(tokenizer_folder),
                         context=args.context)
    os.environ.pop("OPENAI_API_KEY", None)
    project = workdir / "project"
    started = time.perf_counter()
    try:
        outcome = start_run(project, llm=f"openai:{server.served_as}@{server.url}", run_id="context-bench", fresh=True,
                            source_of_truth=ex.source_of_truth, until=args.until,
                            runtime_check=RuntimeCheckSpec(model=TINY_AGENT, real_model=False, episodes=4, turns=2),
                            formal=FormalSpec(model=TINY_AGENT, timeout_s=900, hang_seconds=300),
                            on_event=lambda line: print(f"  {line[:200]}", file=sys.stderr))
    finally:
        server.close()
    nodes: dict[str, dict] = {}
    for r in server.requests:
        row = nodes.setdefault(r.tag, {"requests": 0, "largest_prompt": 0, "largest_request": 0, "prompt": 0,
                                       "output": 0, "refused": 0})
        row["requests"] += 1
        row["refused"] += r.refused
        row["largest_prompt"] = max(row["largest_prompt"], r.prompt_tokens)
        row["largest_request"] = max(row["largest_request"], r.prompt_tokens + r.max_tokens)
        row["prompt"] += 0 if r.refused else r.prompt_tokens
        row["output"] += r.output_tokens
    return {"example": args.example, "context": args.context, "fixes": args.fixes, "think": not args.no_think,
            "status": outcome.status, "reason": outcome.reason, "seconds": round(time.perf_counter() - started, 1),
            "errors": server.errors, "nodes": nodes}


def table(result: dict) -> str:
    rows = ["| node | requests | largest prompt | largest prompt + budget | prompt tokens | output tokens | refused |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    nodes = result["nodes"]
    for node in sorted(nodes, key=lambda n: NODE_ORDER.index(n) if n in NODE_ORDER else 99):
        row = nodes[node]
        rows.append(f"| {node} | {row['requests']} | {row['largest_prompt']:,} | {row['largest_request']:,} | "
                    f"{row['prompt']:,} | {row['output']:,} | {row['refused']} |")
    total = {key: sum(row[key] for row in nodes.values()) for key in ("requests", "prompt", "output", "refused")}
    rows.append(f"| **total** | {total['requests']} | | | {total['prompt']:,} | {total['output']:,} | "
                f"{total['refused']} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="cleanup")
    parser.add_argument("--context", type=int, default=32768)
    parser.add_argument("--fixes", choices=("search", "reformat", "diff"), default="search")
    parser.add_argument("--no-think", action="store_true")
    parser.add_argument("--served-as", default="", help="the model id the server lists (default: the tokenizer's "
                                                        "folder, so the orchestrator has the model's own tokenizer)")
    parser.add_argument("--until", default="")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="context-bench-") as tmp:
        result = run(args, Path(tmp))
    print(f"{result['example']}, context {result['context']:,}, fixes {result['fixes']}, think {result['think']}: "
          f"{result['status']} in {result['seconds']} s" + (f" ({result['reason']})" if result["status"] != "done"
                                                           else ""))
    for error in result["errors"]:
        print(f"server: {error}")
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
