"""Start and resume runs: run settings, the SQLite checkpointer, the graph invocation, named exits.

A run is `runs/RUN_ID/` with `run.json` (settings and status), `checkpoints.sqlite` (LangGraph,
thread id = run id), `events.jsonl`, `claude.logs`, `probe.json`, `report.md`.
"""

from __future__ import annotations

import ast
import json
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from langgraph.checkpoint.sqlite import SqliteSaver

from orchestrator.actionlog import ActionLog, Event
from orchestrator.checks import RuntimeCheckSpec
from orchestrator.formal import FormalSpec
from orchestrator.graph import NODES, build_graph
from orchestrator.rules import CONFIG_CLASS, check_syntax, config_fields
from orchestrator.limits import RunStopped
from orchestrator.llm import LLMError, make_llm
from orchestrator.state import SOURCE_FILES, Limits, RunContext, RunState, spent
from orchestrator.template import TemplateError, read_template
from orchestrator.workspace import Workspace

EXIT_CODES = {"done": 0, "blocked": 1, "failed": 1, "budget": 3, "interrupted": 130}


class SetupError(ValueError):
    """Bad input found before anything runs; the message says what to do."""


@dataclass
class RunSettings:
    run_id: str
    llm: str
    project_root: str
    source_of_truth: str
    limits: dict[str, Any] = field(default_factory=dict)
    runtime_check: dict[str, Any] = field(default_factory=dict)  # RuntimeCheckSpec fields; model "" = tiny local
    formal: dict[str, Any] = field(default_factory=dict)  # FormalSpec fields
    fresh: bool = False  # start from the workspace's initial commit instead of earlier runs' outputs
    status: str = "created"
    exit_reason: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    @property
    def run_dir(self) -> Path:
        return Path(self.project_root) / "runs" / self.run_id

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "run.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, project_root: Path, run_id: str) -> "RunSettings":
        path = project_root / "runs" / run_id / "run.json"
        if not path.exists():
            raise SetupError(f"no run {run_id!r} under {project_root / 'runs'}: see `python -m orchestrator list`")
        return cls(**json.loads(path.read_text()))


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    status: str
    reason: str
    state: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def check_source_of_truth(folder: Path) -> None:
    """The researcher's three files exist, compile, have readable markers and a GRPOConfig: else one line."""
    missing = [name for name in SOURCE_FILES if not (folder / name).is_file()]
    if missing:
        raise SetupError(f"source of truth incomplete: {', '.join(missing)} missing in {folder}; "
                         f"put env_move.py, grpo_config.py and grpo_template.py there or pass --source-of-truth DIR")
    for name in SOURCE_FILES:
        broken = check_syntax(name, (folder / name).read_text())
        if broken:
            raise SetupError(f"source of truth {folder / name}: {broken[0].message}")
    try:
        read_template((folder / "grpo_template.py").read_text())
    except TemplateError as exc:
        raise SetupError(f"{folder / 'grpo_template.py'} {exc}") from exc
    if config_fields(ast.parse((folder / "grpo_config.py").read_text())) is None:
        raise SetupError(f"{folder / 'grpo_config.py'} defines no class {CONFIG_CLASS}; the brief's config is a "
                         f"{CONFIG_CLASS} dataclass")


def list_runs(project_root: Path) -> list[RunSettings]:
    runs = sorted((project_root / "runs").glob("*/run.json"))
    return [RunSettings(**json.loads(p.read_text())) for p in runs]


@contextmanager
def open_graph(run_dir: Path) -> Iterator[Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with SqliteSaver.from_conn_string(str(run_dir / "checkpoints.sqlite")) as saver:
        yield build_graph(saver)


def thread(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}}


def make_context(settings: RunSettings, on_event: Callable[[str], None]) -> RunContext:
    root = Path(settings.project_root)
    try:
        llm = make_llm(settings.llm)
    except LLMError as exc:
        raise SetupError(str(exc)) from exc
    return RunContext(run_id=settings.run_id, project_root=root, source_of_truth=Path(settings.source_of_truth),
                      run_dir=settings.run_dir, workspace=Workspace.open(root / "workspace"), llm=llm,
                      log=ActionLog(root / "claude.logs", settings.run_dir), limits=Limits(**settings.limits),
                      runtime_check=RuntimeCheckSpec(**settings.runtime_check), formal=FormalSpec(**settings.formal),
                      fresh=settings.fresh, on_event=on_event)


def start_run(project_root: Path, *, llm: str, source_of_truth: Path | None = None, limits: Limits = Limits(),
              runtime_check: RuntimeCheckSpec = RuntimeCheckSpec(model="", real_model=False),
              formal: FormalSpec = FormalSpec(), fresh: bool = False, until: str = "", run_id: str | None = None,
              on_event: Callable[[str], None] = lambda line: None) -> RunOutcome:
    if until and until not in NODES:
        raise SetupError(f"--until {until!r} is not a node; nodes: {', '.join(NODES)}")
    source = (source_of_truth or project_root / "source_of_truth").resolve()
    check_source_of_truth(source)
    settings = RunSettings(run_id=run_id or new_run_id(), llm=llm, project_root=str(project_root.resolve()),
                           source_of_truth=str(source), limits=asdict(limits), runtime_check=asdict(runtime_check),
                           formal=asdict(formal), fresh=fresh)
    ctx = make_context(settings, on_event)  # fails on a missing API key before anything is written
    settings.status = "running"
    settings.save()
    ctx.log.record(Event(settings.run_id, "run", "start", "python -m orchestrator run",
                         f"llm={llm}; source of truth {source}; limits {asdict(limits)}"))
    return _drive(settings, ctx, {"run_id": settings.run_id, "until": until}, thread(settings.run_id))


def resume_run(project_root: Path, run_id: str, *, from_node: str | None = None,
               max_cost_usd: float | None = None, max_tokens: int | None = None, llm: str | None = None,
               on_event: Callable[[str], None] = lambda line: None) -> RunOutcome:
    settings = RunSettings.load(project_root, run_id)
    raised = {k: v for k, v in (("max_cost_usd", max_cost_usd), ("max_tokens", max_tokens)) if v is not None}
    settings.limits = asdict(replace(Limits(**settings.limits), **raised))
    settings.llm = llm or settings.llm
    ctx = make_context(settings, on_event)
    with open_graph(settings.run_dir) as graph:
        config = _resume_point(graph, run_id, from_node)
    ctx.workspace.checkout_run_branch(run_id)
    settings.status = "running"
    settings.save()
    ctx.log.record(Event(run_id, "run", "resume", f"python -m orchestrator resume {run_id}"
                         + (f" --from {from_node}" if from_node else ""),
                         f"re-entering at {from_node or 'the interrupted node'}; limits {settings.limits}"))
    return _drive(settings, ctx, None, config)


def _resume_point(graph: Any, run_id: str, from_node: str | None) -> dict[str, Any]:
    latest = graph.get_state(thread(run_id))
    if from_node is None:
        if not latest.next:
            raise SetupError(f"run {run_id} has nothing left to do (status {latest.values.get('status')}); "
                             f"use --from NODE to re-run from a node")
        return latest.config
    for snapshot in graph.get_state_history(thread(run_id)):
        if from_node in snapshot.next:
            return _carry_spend(graph, snapshot.config, snapshot.values, latest.values)
    nodes = sorted({n for s in graph.get_state_history(thread(run_id)) for n in s.next})
    raise SetupError(f"run {run_id} never reached node {from_node!r}; nodes it reached: {', '.join(nodes)}")


def _carry_spend(graph: Any, config: dict[str, Any], before: RunState, latest: RunState) -> dict[str, Any]:
    """Re-entering at an earlier checkpoint forgets nothing that was paid for: the spend and the attempts
    recorded since then are carried into the fork, so caps stay honest and attempt numbers go on."""
    old_ledger = before.get("ledger") or {}
    delta = {node: {k: v - old_ledger.get(node, {}).get(k, 0) for k, v in row.items()}
             for node, row in (latest.get("ledger") or {}).items()}
    delta = {node: row for node, row in delta.items() if any(row.values())}
    seen = {(a["node"], a["attempt"]) for a in before.get("attempts") or []}
    attempts = [a for a in latest.get("attempts") or [] if (a["node"], a["attempt"]) not in seen]
    if not delta and not attempts:
        return config
    return graph.update_state(config, {"ledger": delta, "attempts": attempts})


def _drive(settings: RunSettings, ctx: RunContext, graph_input: RunState | None, config: dict[str, Any]) -> RunOutcome:
    status, reason = "failed", ""
    with open_graph(settings.run_dir) as graph:
        try:
            graph.invoke(graph_input, config, context=ctx, durability="sync")
            values = graph.get_state(thread(settings.run_id)).values
            status, reason = values.get("status", "done"), values.get("exit_reason", "")
        except RunStopped as exc:
            status, reason = exc.status, str(exc)
        except LLMError as exc:
            status, reason = "failed", f"LLM error: {exc}"
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted by the user; resume with `python -m orchestrator resume RUN`"
        except Exception as exc:  # a bug or an environment failure: keep the run resumable and say where to look
            (settings.run_dir / "crash.log").write_text(traceback.format_exc())
            status, reason = "failed", (f"{type(exc).__name__}: {exc}; traceback in {settings.run_dir / 'crash.log'}; "
                                        f"resume with `python -m orchestrator resume {settings.run_id}`")
        finally:
            settings.status, settings.exit_reason = status, reason
            settings.save()
            ctx.log.record(Event(settings.run_id, "run", "stop", "the graph returned or stopped", f"{status}: {reason}"))
        values = graph.get_state(thread(settings.run_id)).values
    return RunOutcome(settings.run_id, status, reason, dict(values))


def run_summary(project_root: Path, run_id: str) -> dict[str, Any]:
    """What `status` shows: settings, where the graph stands, spend, the last error."""
    settings = RunSettings.load(project_root, run_id)
    with open_graph(settings.run_dir) as graph:
        snapshot = graph.get_state(thread(run_id))
    values = snapshot.values or {}
    tokens, cost = spent(values)
    evidence = values.get("evidence") or {}
    return {"run_id": run_id, "status": settings.status, "reason": settings.exit_reason, "llm": settings.llm,
            "next": list(snapshot.next), "tokens": tokens, "cost_usd": cost, "limits": settings.limits,
            "attempts": len(values.get("attempts") or []), "skipped": values.get("skipped") or [],
            "ledger": values.get("ledger") or {}, "last_error": evidence.get("summary", "")}
