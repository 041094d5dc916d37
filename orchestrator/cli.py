"""Command line: `python -m orchestrator COMMAND`.

Exit codes: 0 success, 1 the run ended failed or blocked, 2 bad input (missing file, key, argument).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import typer
from rich.console import Console

from orchestrator.execution import execute
from orchestrator.tiny_model import build_tiny_model

PROJECT_ROOT = Path(__file__).resolve().parents[1]
console = Console()
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Turn a game, a GRPO config and a GRPO template into a running, monitored training job.")


@app.callback()
def _root() -> None:
    """Turn a game, a GRPO config and a GRPO template into a running, monitored training job."""


@app.command()
def demo(runs_dir: Path = typer.Option(PROJECT_ROOT / "runs", help="where the demo run folder goes")) -> None:
    """Offline smoke run: the reference generated files train the tiny local model for two updates."""
    folder = runs_dir / "demo-reference" / "generated"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for src in [*(PROJECT_ROOT / "source_of_truth").glob("*.py"),
                *(PROJECT_ROOT / "tests" / "fixtures" / "reference_generated").iterdir()]:
        shutil.copy2(src, folder / src.name)
    model = build_tiny_model(PROJECT_ROOT / "models" / "tiny-qwen3")
    console.print(f"[bold]training[/] the reference files in {folder} on the tiny model {model}")
    result = execute(["bash", "launch_training.sh", "--model_name", str(model), "--episodes", "4", "--group_size", "2",
                      "--max_env_steps", "3", "--max_thinking_tokens", "16", "--max_action_tokens", "16",
                      "--eval_interval", "1", "--eval_episodes", "2", "--save_interval", "0"],
                     folder, timeout_s=900, env={"PYTHON": sys.executable})
    console.print(result.stdout)
    if not result.ok:
        console.print(result.stderr[-3000:])
        raise typer.Exit(1)
    console.print(f"[green]done[/] in {result.seconds:.0f} s: logs in {folder / 'train.logs'} and "
                  f"{folder / 'Sample_EP.logs'}")


def main() -> None:
    app()
