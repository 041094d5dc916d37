"""Static rules on what generated code takes in from outside the contract: the model's text run as code,
and config values read from the environment.

- eval-of-model-output ("Response format specification (JSON with action name + args, parseable)";
  "parse JSON action → call the right helper function"): no generated file (helpers.py,
  prompt_template.py, the CUSTOMIZE code of train.py) calls `eval`, `exec` or `compile` (the builtins,
  also as `builtins.eval`) on anything but a constant. Telling "model output" apart statically would
  need data flow through the template's GENERIC code, so any non-constant source counts: the only text
  such code meets at run time is the model's (its action and thinking, a helper's `args`), the game's
  and the config's, and none of them is Python to run; a constant is harmless and passes. JSON is read
  with json.loads, a Python literal with ast.literal_eval (neither runs code), and `re.compile`,
  `torch.compile` or `model.eval()` are other functions: only the builtins, not shadowed by a binding
  of the file, are meant.
- config-from-environment ("Set configs for train.py via grpo_config.py or cmd parameters"): no
  generated file reads a value from the environment (`os.environ[K]`, `os.environ.get(K)`,
  `os.getenv(K)`, `K in os.environ`), in any spelling of the import, unless K is a runtime fact a
  launcher, scheduler or library sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, CUDA_*, SLURM_*,
  HF_*, ...: RUNTIME_VARIABLES, RUNTIME_PREFIXES). Anything else is a config value or a game parameter
  (an agent count, a model, an output folder) that would reach train.py around the orchestrator, which
  sets and checks values in grpo_config.py and on the command line. A key that is no constant cannot be
  judged and passes; `os.environ.setdefault(K, V)` sets a library's knob and passes. In grpo_config.py,
  only the reads its source of truth does not have are refused (the researcher's own are theirs).
"""

from __future__ import annotations

import ast
import re

from orchestrator.rules.violation import Violation
from orchestrator.sources.template import GENERIC, TemplateError, read_sections

EXECUTORS = ("eval", "exec", "compile")
RUNTIME_VARIABLES = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
    "MASTER_PORT", "HOME", "USER", "LOGNAME", "HOSTNAME", "PATH", "PWD", "TMPDIR", "TEMP", "TMP", "SHELL", "TERM",
    "LANG", "PYTHONPATH", "PYTHONHASHSEED", "LD_LIBRARY_PATH", "CI", "NO_COLOR", "DISPLAY"})
RUNTIME_PREFIXES = ("SLURM_", "SLURMD_", "CUDA_", "NCCL_", "GLOO_", "TORCH", "PYTORCH_", "ACCELERATE_", "DEEPSPEED_",
                    "DS_", "OMPI_", "PMI_", "PMIX_", "MV2_", "OMP_", "MKL_", "KMP_", "HF_", "HUGGINGFACE_",
                    "TRANSFORMERS_", "TOKENIZERS_", "WANDB_", "TENSORBOARD_", "MLFLOW_", "COMET_", "XLA_", "TPU_",
                    "NVIDIA_", "ROCR_", "HIP_", "XDG_", "CONDA_", "VIRTUAL_ENV", "LC_")
_READERS = ("get", "pop")  # os.environ methods that return a variable's value
_MARKER_LIKE = re.compile(r"^\s*#\s*={2,}", re.M)  # a cheap first look before the sections are read


def check_inputs(name: str, tree: ast.Module, text: str) -> list[Violation]:
    """Both rules over a generated file (`tree` is its parsed `text`); the GENERIC sections of train.py are
    the researcher's and are not judged."""
    nodes = list(ast.walk(tree))
    found = check_eval(name, nodes) + check_environment(name, nodes, set())
    skipped = generic_lines(text) if found else set()  # the sections are read only when there is something to skip
    return [v for v in found if v.line not in skipped]


def check_config_inputs(text: str, source_text: str) -> list[Violation]:
    """config-from-environment on grpo_config.py: the reads its source of truth does not have."""
    allowed = {key for _, key, _ in environment_reads(list(ast.walk(ast.parse(source_text))))}
    return check_environment("grpo_config.py", list(ast.walk(ast.parse(text))), allowed)


def generic_lines(text: str) -> set[int]:
    """The line numbers of a file's GENERIC sections, their marker lines included (none without markers)."""
    if not _MARKER_LIKE.search(text):
        return set()
    try:
        sections = read_sections(text)
    except TemplateError:  # the section rules report broken markers; every line is judged meanwhile
        return set()
    lines: set[int] = set()
    for section in sections:
        if section.kind == GENERIC:
            lines.update(range(section.start_line, section.end_line + 1))
    return lines


# ---------------------------------------------------------------- eval / exec

def check_eval(name: str, nodes: list[ast.AST]) -> list[Violation]:
    """`nodes`: every node of the file's tree."""
    builtins = {a.asname or a.name for n in nodes if isinstance(n, ast.Import) for a in n.names
                if a.name == "builtins"}
    calls = [n for n in nodes if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Name) and n.func.id in EXECUTORS) or (
            isinstance(n.func, ast.Attribute) and n.func.attr in EXECUTORS and isinstance(n.func.value, ast.Name)
            and n.func.value.id in builtins))]
    shadowed = _bound_names(nodes) if any(isinstance(n.func, ast.Name) for n in calls) else set()
    found, lines = [], set()
    for node in calls:
        if node.lineno in lines or (isinstance(node.func, ast.Name) and node.func.id in shadowed):
            continue
        source = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "source"), None)
        if source is not None and not isinstance(source, ast.Constant):
            lines.add(node.lineno)  # exec(compile(text, ...)): once
            found.append(Violation(
                "eval-of-model-output", name, node.lineno,
                f"{ast.unparse(node)[:100]} runs text as Python; what this code gets at run time is the model's "
                f"output (or the game's, or the config's), never code to run: read the JSON action with "
                f"json.loads (a Python literal with ast.literal_eval) and call the named helper (the brief: "
                f"'parse JSON action → call the right helper function')"))
    return found


def _bound_names(nodes: list[ast.AST]) -> set[str]:
    """Names the file binds anywhere (imports, definitions, assignments, parameters): not the builtins."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


# ---------------------------------------------------------------- the environment

def is_runtime_fact(key: str) -> bool:
    """A variable a launcher, scheduler or library sets: where the process runs, not what it trains."""
    return key in RUNTIME_VARIABLES or key.startswith(RUNTIME_PREFIXES)


def check_environment(name: str, nodes: list[ast.AST], allowed: set[str | None]) -> list[Violation]:
    found = []
    for line, key, shown in environment_reads(nodes):
        if key is None or key in allowed or is_runtime_fact(key):
            continue
        found.append(Violation(
            "config-from-environment", name, line,
            f"{shown} reads {key!r} from the environment: a config value or a game parameter reaches train.py "
            f"through grpo_config.py or the command line, where the orchestrator sets and checks it (the brief: "
            f"'Set configs for train.py via grpo_config.py or cmd parameters'); read it from the GRPOConfig "
            f"instead (the launcher's own variables, such as RANK, LOCAL_RANK or WORLD_SIZE, are fine)"))
    return found


def environment_reads(nodes: list[ast.AST]) -> list[tuple[int, str | None, str]]:
    """(line, key or None when it is no constant, the code) of each read of an environment variable, among
    `nodes` (every node of a file's tree)."""
    modules = {a.asname or "os" for n in nodes if isinstance(n, ast.Import) for a in n.names if a.name == "os"}
    imported = {a.asname or a.name: a.name for n in nodes if isinstance(n, ast.ImportFrom) and n.module == "os"
                for a in n.names}
    if not modules and not imported:
        return []

    def is_environ(node: ast.expr) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
                and node.value.id in modules) or (isinstance(node, ast.Name) and imported.get(node.id) == "environ")

    def is_getenv(node: ast.expr) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "getenv" and isinstance(node.value, ast.Name)
                and node.value.id in modules) or (isinstance(node, ast.Name) and imported.get(node.id) == "getenv")

    reads = []
    for node in nodes:
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args and (is_getenv(node.func) or (
                isinstance(node.func, ast.Attribute) and node.func.attr in _READERS and is_environ(node.func.value))):
            key = node.args[0]
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(is_environ(c) for c in node.comparators):
            key = node.left
        if key is not None:
            constant = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
            reads.append((node.lineno, constant, ast.unparse(node)[:100]))
    return reads
