"""Prompts are data: templates in agent_prompts/, rendered with Jinja2's StrictUndefined so a missing
variable fails loudly instead of sending the LLM an empty hole."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

DEFAULT_PROMPTS_DIR = Path(__file__).resolve().parents[2] / "agent_prompts"


@lru_cache(maxsize=4)
def _environment(prompts_dir: Path) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(prompts_dir), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def render(name: str, prompts_dir: Path | None = None, **variables: Any) -> str:
    return _environment(prompts_dir or DEFAULT_PROMPTS_DIR).get_template(f"{name}.md").render(**variables)


def file_blocks(files: dict[str, str]) -> list[str]:
    """Input files as labelled text blocks, the large repeated part of prompts (sent for caching)."""
    return [f"=== FILE: {name} ===\n{text}" for name, text in files.items()]
