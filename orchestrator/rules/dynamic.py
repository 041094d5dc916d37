"""The dynamic layer: `probe/` runs the generated modules on a real game in a fresh interpreter (never in
the orchestrator's process) and compares what they do with what the researcher's own files do; its answer
becomes import evidence or violations of the contract.

The probe gets a plan read from the template's markers here (so the child needs no template reading of
its own): which module-level names the GENERIC and the CUSTOMIZE sections bind, which class members a
CUSTOMIZE section inside a class defines, the library attributes (`torch.clamp`) and names the GENERIC
code reads, train.py's CUSTOMIZE functions and methods (candidates for the game factory, the prompt
builders and the dispatch), and where the researcher's own env_move.py and grpo_template.py are.
The child runs with a fixed hash seed: the same files, the same verdict.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.base.execution import ExecutionResult, execute
from orchestrator.rules.violation import Violation
from orchestrator.training.slurm_job import job_variables
from orchestrator.sources.template import CUSTOMIZE, GENERIC, Section, TemplateError, read_sections

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the orchestrator package


@dataclass(frozen=True)
class ProbeAnswer:
    result: ExecutionResult
    import_failed: str = ""  # the first generated module that did not import
    traceback: str = ""
    violations: list[Violation] = field(default_factory=list)
    note: str = ""
    notes: list[str] = field(default_factory=list)  # the probe's notes one by one: how it played the game, what it skipped


def probe_folder(folder: Path, timeout_s: float = 300.0, *, source_of_truth: Path | None = None,
                 import_only: bool = False) -> ProbeAnswer:
    """Run the probe on `folder` (the researcher's own env_move.py and template from `source_of_truth`,
    else the folder's copies); a probe that dies without answering is reported as an import failure."""
    plan = {"import_only": True} if import_only else probe_plan(folder, source_of_truth)
    python_path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # under the variables of the formal launch's SLURM job, as the runtime check's processes run
    job = job_variables(folder.resolve())
    result = execute([sys.executable, "-m", "orchestrator.rules.probe", str(folder.resolve()), json.dumps(plan)],
                     folder, timeout_s=timeout_s, env={**job, "PYTHONHASHSEED": "0", "PYTHONPATH": python_path})
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        return ProbeAnswer(result, import_failed="(probe)", traceback=result.stderr or result.stdout)
    if answer.get("import_failed"):
        return ProbeAnswer(result, import_failed=answer["import_failed"], traceback=answer.get("traceback", ""))
    violations = [Violation(v["rule"], v["file"], None, v["message"]) for v in answer.get("violations", [])]
    return ProbeAnswer(result, violations=violations, note=answer.get("note", ""), notes=list(answer.get("notes") or []))


def probe_plan(folder: Path, source_of_truth: Path | None = None) -> dict:
    origin = source_of_truth if source_of_truth is not None else folder
    plan: dict = {"env_move": str((origin / "env_move.py").resolve()),
                  "template": str((origin / "grpo_template.py").resolve())}
    try:
        plan |= template_facts((origin / "grpo_template.py").read_text())
    except (OSError, SyntaxError, TemplateError, ValueError):
        pass  # an unreadable template is reported before any run; the probe then compares no GENERIC code
    try:
        text = (folder / "train.py").read_text()
        plan["customize_callables"], plan["customize_classes"] = customize_callables(text), customize_classes(text)
    except (OSError, SyntaxError, TemplateError, ValueError):
        plan["customize_callables"], plan["customize_classes"] = [], []
    return plan


def kinds_by_line(sections: list[Section]) -> dict[int, str]:
    return {line: s.kind for s in sections for line in range(s.start_line, s.end_line + 1)}


def bound(node: ast.stmt) -> set[str]:
    """Names a statement binds at its level: definitions, assignments, imports."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names if a.name != "*"}
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def dotted(node: ast.Attribute) -> list[str] | None:
    parts = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    return [value.id, *reversed(parts)] if isinstance(value, ast.Name) else None


def template_facts(text: str) -> dict:
    """What the template's GENERIC sections bind and read (names, library chains, attribute names read and
    written), what its CUSTOMIZE sections bind, and which GENERIC names its own functions change at run time."""
    kinds = kinds_by_line(read_sections(text))
    tree = ast.parse(text)
    generic: list[str] = []
    customize: set[str] = set()
    members: dict[str, list[str]] = {}
    generic_code: list[ast.AST] = []
    for node in tree.body:
        kind = kinds.get(node.lineno)
        if kind == GENERIC:
            generic += [n for n in sorted(bound(node)) if n not in generic]
        elif kind == CUSTOMIZE:
            customize |= bound(node)
        if isinstance(node, ast.ClassDef):
            inside = [s for s in node.body if kinds.get(s.lineno) == CUSTOMIZE]
            if inside and kind == GENERIC:
                members[node.name] = sorted(set().union(*(bound(s) for s in inside)))
            if kind == GENERIC:
                generic_code += [*node.decorator_list, *node.bases,
                                 *(s for s in node.body if kinds.get(s.lineno) != CUSTOMIZE)]
        elif kind == GENERIC:
            generic_code.append(node)
    imported = {n for node in tree.body if kinds.get(node.lineno) == GENERIC
                and isinstance(node, (ast.Import, ast.ImportFrom)) for n in bound(node)}
    chains: set[str] = set()
    reads: set[str] = set()
    attributes: set[str] = set()
    for code in generic_code:
        for node in ast.walk(code):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                reads.add(node.id)
            elif isinstance(node, ast.Attribute):
                attributes.add(node.attr)
                if (parts := dotted(node)) and parts[0] in imported:
                    chains.update(".".join(parts[:k]) for k in range(2, len(parts) + 1))
    functions = [n for c in generic_code for n in ast.walk(c) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    names, written_attributes = run_time_writes(functions)
    return {"generic_names": generic, "customize_names": sorted(customize), "class_customize_members": members,
            "chains": sorted(chains), "read_names": sorted(reads), "attributes": sorted(attributes),
            "attribute_stores": sorted(written_attributes), "run_time_written": sorted(names & set(generic))}


MUTATORS = {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "add", "discard",
            "remove", "sort", "reverse"}


def run_time_writes(functions: list[ast.AST]) -> tuple[set[str], set[str]]:
    """What the template's GENERIC functions themselves change while they run: names (declared `global`, or
    written through: `NAME[k] = v`, `NAME.x = v`, `NAME.append(v)`) and attribute names (`obj.NAME = v`,
    `obj.NAME[k] = v`, `obj.NAME.append(v)`). At the end of a training their values are the training's own,
    not the template's, and an instance may hold its own NAME."""
    names: set[str] = set()
    attributes: set[str] = set()

    def through(target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            attributes.add(target.attr)

    for node in (n for f in functions for n in ast.walk(f)):
        if isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            attributes.add(node.attr)
            through(node.value)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            through(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            through(node.func.value)
    return names, attributes


def customize_callables(text: str) -> list[str]:
    """train.py's functions written in CUSTOMIZE sections, public first: `name`, or `Class.name` for a method
    in a CUSTOMIZE section inside a class."""
    kinds = kinds_by_line(read_sections(text))
    found = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and kinds.get(node.lineno) == CUSTOMIZE:
            found.append(node.name)
        elif isinstance(node, ast.ClassDef) and kinds.get(node.lineno) == GENERIC:
            found += [f"{node.name}.{s.name}" for s in node.body if isinstance(s, ast.FunctionDef)
                      and kinds.get(s.lineno) == CUSTOMIZE]
    return sorted(found, key=lambda n: n.rpartition(".")[2].startswith("_"))


def customize_classes(text: str) -> list[str]:
    """train.py's classes written in CUSTOMIZE sections (a logger, a reward tracker)."""
    kinds = kinds_by_line(read_sections(text))
    return [node.name for node in ast.parse(text).body
            if isinstance(node, ast.ClassDef) and kinds.get(node.lineno) == CUSTOMIZE]
