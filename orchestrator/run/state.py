"""What a run remembers (RunState, checkpointed) and what it is given (RunContext, rebuilt per process).

RunState is what LangGraph saves in `runs/RUN_ID/checkpoints.sqlite` after every node: the token and
cost ledger, every attempt with its commit, the probe, the evidence a failing check left for `fix`.
Nodes return partial dicts; only the fields that grow have reducers.

RunContext holds what cannot or should not be checkpointed: the LLM client, the workspace, the
action log, and the limits. `resume` rebuilds it, so a cap can be raised without touching history.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, TypedDict

from orchestrator.base.actionlog import ActionLog
from orchestrator.checks import RuntimeCheckSpec
from orchestrator.training.formal import FormalSpec
from orchestrator.llm import LLM, MAX_ANSWER_TOKENS
from orchestrator.base.workspace import Workspace

GENERATED_DIR = "generated"
SOURCE_FILES = ("env_move.py", "grpo_config.py", "grpo_template.py")


def merge_ledger(left: dict[str, dict[str, Any]], right: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-node spend: numbers add up; lists (the journaled answers a row accounts for) are joined."""
    merged = {node: dict(row) for node, row in (left or {}).items()}
    for node, row in (right or {}).items():
        into = merged.setdefault(node, {})
        for key, value in row.items():
            into[key] = into.get(key, [] if isinstance(value, list) else 0) + value
    return merged


class RunState(TypedDict, total=False):
    run_id: str
    until: str  # stop once this node has passed ("" = the whole pipeline)
    status: str  # running | done | blocked | budget | failed | environment (the machine, not the code) | cancelled
    exit_reason: str  # one line: why the run stopped
    probe: dict[str, Any]  # ProbeResult.to_dict()
    roles: dict[str, Any]  # ConfigRoles.to_dict(): the config's fields by role, and how values reach train.py
    log_format: dict[str, Any]  # LogFormat.to_dict(): how train.logs is read (absent: the first guess)
    metric_roles: dict[str, Any]  # MetricRoles.to_dict(): which keys of train.logs hold reward, invalid rate, ...
    probe_notes: list[str]  # what the import check's probe noted: how it started, stepped and copied the game
    ledger: Annotated[dict[str, dict[str, Any]], merge_ledger]  # node -> calls, tokens, cost_usd, ..., answers
    attempts: Annotated[list[dict[str, Any]], operator.add]  # node, attempt, outcome, sha, tokens, cost_usd
    skipped: Annotated[list[str], operator.add]  # nodes whose outputs existed and passed their checks
    evidence: dict[str, Any] | None  # the last failing check's evidence, for fix
    formal_log_dir: str  # the latest formal attempt's own folder (its logs at the top), as runs.to_disk stores it
    adjustments: dict[str, Any]  # config values raised after a finished formal run (small issues)
    restart_formal: bool  # a small issue was fixed by a config value: run formal_train again
    check_pace: dict[str, Any]  # Pace.to_dict(): the runtime check's seconds per update and values, for time estimates
    idea: dict[str, Any]  # a child run's idea (orchestrator.ideas): apply_idea and seed_runs run where it is set


@dataclass(frozen=True)
class Limits:
    max_cost_usd: float | None = None  # stop at a node boundary once spent
    max_tokens: int | None = None
    max_attempts_per_check: int = 5  # fix attempts per failing check before the run is blocked
    max_answer_tokens: int = MAX_ANSWER_TOKENS  # the output budget one answer may reach (a local server's context)
    max_context_tokens: int | None = None  # the server's context length, prompt and answer (None: as it says)


@dataclass
class RunContext:
    run_id: str
    project_root: Path
    source_of_truth: Path
    run_dir: Path
    workspace: Workspace
    llm: LLM
    log: ActionLog
    limits: Limits = field(default_factory=Limits)
    runtime_check: RuntimeCheckSpec = field(default_factory=lambda: RuntimeCheckSpec(model="", real_model=False))
    formal: FormalSpec = field(default_factory=FormalSpec)
    prompts_dir: Path | None = None
    fresh: bool = False  # the run's branch starts from the workspace's initial commit, not earlier outputs
    on_event: Callable[[str], None] = lambda line: None  # progress lines for the terminal
    journal: Any = None  # orchestrator.run.journal.Journal: paid answers and commits, for crash recovery
    source_changed: tuple[str, ...] = ()  # source-of-truth files changed since the run last ran (resume accepted it)

    @property
    def generated(self) -> Path:
        return self.workspace.path(GENERATED_DIR)


def attempt_count(state: RunState, node: str) -> int:
    return sum(1 for a in state.get("attempts") or [] if a["node"] == node)
