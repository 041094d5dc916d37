"""The researcher's source of truth is usable before any token is spent: checked by `run`, `demo` and `check`.

Kept apart from the runner so that `check` does not import the graph to read three files."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from orchestrator.base.execution import execute
from orchestrator.sources.config_file import CONFIG_CLASS
from orchestrator.rules import config_fields
from orchestrator.run.runs import SetupError
from orchestrator.run.state import SOURCE_FILES
from orchestrator.sources.template import TemplateError, read_template

SOURCE_CHECK_TIMEOUT_S = 120.0

# Imports the researcher's config and game in a fresh interpreter: they are code, never run in ours.
_SOURCE_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
problems = []
try:
    import dataclasses
    import grpo_config
    config_cls = grpo_config.GRPOConfig
    if not dataclasses.is_dataclass(config_cls):
        problems.append("grpo_config.py: GRPOConfig is not a dataclass")
    elif all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
             for f in dataclasses.fields(config_cls)):  # required fields are given at launch, e.g. as flags
        config_cls()
except BaseException as exc:
    problems.append(f"grpo_config.py: GRPOConfig() with its defaults failed: {type(exc).__name__}: {exc}")
try:
    import env_move
except BaseException as exc:
    problems.append(f"env_move.py does not import: {type(exc).__name__}: {exc}")
print("\\n".join(problems))
sys.exit(1 if problems else 0)
"""


def check_source_of_truth(folder: Path) -> None:
    """The source of truth is usable before any token is spent: the three files exist, parse and are not
    empty, the template's markers read, grpo_config.py has a GRPOConfig; env_move.py imports and GRPOConfig()
    constructs, in a subprocess. One line on failure."""
    missing = [name for name in SOURCE_FILES if not (folder / name).is_file()]
    if missing:
        raise SetupError(f"source of truth incomplete: {', '.join(missing)} missing in {folder}; "
                         f"put env_move.py, grpo_config.py and grpo_template.py there or pass --source-of-truth DIR")
    fix = f"fix it in {folder} (or pass --source-of-truth DIR); nothing was spent"
    for name in SOURCE_FILES:
        text = (folder / name).read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text, filename=name)
        except SyntaxError as exc:
            raise SetupError(f"source of truth: {name} does not parse (line {exc.lineno}: {exc.msg}); {fix}") from exc
        if not any(isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) for n in tree.body):
            raise SetupError(f"source of truth: {name} defines no class or function (is it empty?); {fix}")
    try:
        read_template((folder / "grpo_template.py").read_text())
    except TemplateError as exc:
        raise SetupError(f"source of truth: grpo_template.py {exc}; {fix}") from exc
    if config_fields(ast.parse((folder / "grpo_config.py").read_text())) is None:
        raise SetupError(f"source of truth: grpo_config.py defines no class {CONFIG_CLASS}; the brief's config is "
                         f"a {CONFIG_CLASS} dataclass; {fix}")
    result = execute([sys.executable, "-c", _SOURCE_PROBE, str(folder.resolve())], folder,
                     timeout_s=SOURCE_CHECK_TIMEOUT_S)
    if not result.ok:
        problem = (result.stdout.strip().splitlines() or result.stderr.strip().splitlines()[-1:]
                   or [f"the import check timed out after {SOURCE_CHECK_TIMEOUT_S:.0f} s"])[0]
        raise SetupError(f"source of truth: {problem[:400]}; {fix}")

