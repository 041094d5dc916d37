"""A child run's lineage: `runs/CHILD/idea.json`, written by `try` before the child starts, never changed after.

It names the parent, the commit the child's branch started from (the parent's final one), the idea, the seeds both
arms train on (the first is the parent's own formal run's), and the parent's formal run: its folder (whose `code/`
the parent arm's other seeds launch, whose train.logs is the parent arm's first seed) and its plan. Read without
the training stack, so `status`, `history` and the pages show the tree of runs at once.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.base.files import from_disk, project_root_of, read_json, to_disk, write_atomic
from orchestrator.ideas.catalog import Idea

LINEAGE_FILE = "idea.json"
COMPARISON_FILE = "comparison.json"  # the verdict between the arms, once both trained (orchestrator.ideas.verdict)


@dataclass(frozen=True)
class Lineage:
    parent: str
    parent_sha: str  # the parent's final commit: where the child's workspace branch starts
    idea: Idea
    seeds: tuple[int, ...]  # both arms' seeds; the first is the parent's formal run's
    parent_formal: str  # the parent's last finished formal attempt's folder (absolute here, relative on disk)
    plan: dict[str, Any] = field(default_factory=dict)  # that attempt's config: the plan both arms train with

    def save(self, run_dir: Path) -> None:
        data = {**asdict(self), "idea": self.idea.to_dict(), "seeds": list(self.seeds),
                "parent_formal": to_disk(self.parent_formal, project_root_of(run_dir))}
        write_atomic(run_dir / LINEAGE_FILE, json.dumps(data, indent=1, default=str))

    @classmethod
    def load(cls, run_dir: Path) -> Lineage | None:
        """The run's lineage; None for a run that tries no idea (or whose idea.json cannot be read)."""
        try:
            data = json.loads((run_dir / LINEAGE_FILE).read_text())
            return cls(str(data["parent"]), str(data["parent_sha"]), Idea.from_dict(data["idea"]),
                       tuple(int(s) for s in data["seeds"]),
                       from_disk(str(data["parent_formal"]), project_root_of(run_dir)), dict(data.get("plan") or {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def read_comparison(run_dir: Path) -> dict[str, Any] | None:
    return read_json(run_dir / COMPARISON_FILE)


def family(project_root: Path) -> dict[str, Lineage]:
    """Every child run under the project root, by run id."""
    found = {}
    for path in sorted((Path(project_root) / "runs").glob(f"*/{LINEAGE_FILE}")):
        lineage = Lineage.load(path.parent)
        if lineage is not None:
            found[path.parent.name] = lineage
    return found


def verdict_summary(run_dir: Path) -> str:
    """`reward better, invalid-action rate within noise, ...` from the run's comparison; "" before it has one."""
    comparison = read_comparison(run_dir)
    if not comparison:
        return ""
    return ", ".join(f"{m['label']} {m['verdict']}" for m in comparison.get("metrics") or [])


def tree_lines(project_root: Path, run_id: str, statuses: dict[str, str] | None = None,
               marked: frozenset[str] | None = None) -> list[str]:
    """The tree of runs `run_id` belongs to, from its first ancestor: one line per run, children indented under
    their parent with the idea they tried and their verdict; the runs `marked` (default: `run_id`) end in `<-`."""
    marked = frozenset({run_id}) if marked is None else marked
    children = family(project_root)
    root = run_id
    while root in children:
        root = children[root].parent
    below: dict[str, list[str]] = {}
    for child, lineage in children.items():
        below.setdefault(lineage.parent, []).append(child)
    lines: list[str] = []

    def walk(run: str, depth: int) -> None:
        status = f" ({statuses[run]})" if statuses and run in statuses else ""
        mark = "  <-" if run in marked else ""
        if depth == 0:
            lines.append(f"{run}{status}{mark}")
        else:
            verdict = verdict_summary(Path(project_root) / "runs" / run)
            lines.append(f"{'   ' * (depth - 1)}└─ {run}{status}: {children[run].idea.label}"
                         + (f" -> {verdict}" if verdict else "") + mark)
        for child in below.get(run, []):
            walk(child, depth + 1)

    walk(root, 0)
    return lines


def lineage_lines(project_root: Path, run_id: str) -> list[str]:
    """What `status` says of a child run: its parent, its idea, its seeds, its verdict; [] for a run that tries no
    idea."""
    run_dir = Path(project_root) / "runs" / run_id
    lineage = Lineage.load(run_dir)
    if lineage is None:
        return []
    verdict = verdict_summary(run_dir)
    return [f"child of {lineage.parent} (from its commit {lineage.parent_sha[:10]}): {lineage.idea.label}",
            f"both arms on seeds {', '.join(map(str, lineage.seeds))}"
            + (f"; verdict: {verdict}" if verdict else "; no verdict yet")]
