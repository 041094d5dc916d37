"""Start and resume runs: run settings, the SQLite checkpointer, the graph invocation, named exits.

A run is `runs/RUN_ID/` with `run.json` (settings and status; paths relative to the project root, so
a copied project resumes into itself), `checkpoints.sqlite` (LangGraph, thread id = run id, written
before the next node starts), `journal.jsonl` (every paid answer and every commit, fsynced: see
orchestrator.run.journal), `jobs/` (training job records), `formal-N/` (formal attempt N's own folder: its
code, logs, outputs; orchestrator.nodes.train), `events.jsonl`, `claude.logs`, `probe.json`,
`report.md`, `state.json` (orchestrator.run.runs: what `status` reads, rewritten after every checkpoint),
`plots/` (orchestrator.training.plots), `report.html` (orchestrator.page: the run in a browser, rewritten with
state.json and every PAGE_LIVE_S while a node reports progress).

Crash consistency: one run at a time holds the workspace (orchestrator.base.runlock). A resume after a
crash reconciles the journal with the checkpoint: commits no checkpointed attempt names are rolled
back and the interrupted node runs again, getting the answers it already paid for back from the
journal (never paying twice) and adopting its training job instead of starting a second one;
processes an earlier process of the run left behind are stopped. SIGTERM and SIGHUP stop a run as
Ctrl-C does: its training job is stopped and run.json says `interrupted`.

The run's two edges resume too: killed after its graph ended but before run.json said so, a resume
records the ending the last checkpoint holds; killed after run.json appeared but before the first
checkpoint (nothing paid for or committed), it starts from the beginning. Git lock files a kill left in
the workspace are removed once the run holds the workspace.
"""

from __future__ import annotations

import ast
import os
import signal
import sqlite3
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from langgraph.checkpoint.sqlite import SqliteSaver

from orchestrator.base.actionlog import ActionLog, Event
from orchestrator.checks import EVIDENCE_CHARS, RuntimeCheckSpec
from orchestrator.base.execution import tail
from orchestrator.faults import ENVIRONMENT, cause_of, disk_fault
from orchestrator.training.formal import FormalSpec
from orchestrator.graph import NODES, build_graph
from orchestrator.base.halt import halt_point, halting
from orchestrator.run.journal import Journal, journaled
from orchestrator.base.files import write_atomic
from orchestrator.run.limits import RunStopped
from orchestrator.llm import MAX_ANSWER_TOKENS, PRICES_FILE, Backend, LLMError, Reply, load_prices, make_llm
from orchestrator.llm.context import MIN_CONTEXT_TOKENS
from orchestrator.llm.reported import ReportedLLM, call_line
from orchestrator.page import Pipeline, write_page
from orchestrator.training.plots import curves_section
from orchestrator.base.runlock import WorkspaceBusy, WorkspaceLock, marked_process, run_processes, stop_processes
from orchestrator.run.runs import (BRANCH, DamagedSettings, damaged_checkpoints, FORMAL_JOB, RunSettings, SetupError,
                                   changed_source, check_run_id, evidence_lines, llm_paths, source_hashes, spent,
                                   write_state)
from orchestrator.base.files import to_disk
from orchestrator.run.state import SOURCE_FILES, Limits, RunContext, RunState, attempt_count
from orchestrator.training.job import live_jobs
from orchestrator.base.workspace import Workspace, WorkspaceError
from orchestrator.sources.config_file import CONFIG_CLASS
from orchestrator.rules import config_fields
from orchestrator.run.source_check import check_source_of_truth

EXIT_CODES = {"done": 0, "blocked": 1, "failed": 1, "budget": 3, "environment": 4, "cancelled": 5,
              "interrupted": 130}
CRASHED = ("running", "interrupted", "environment")  # statuses a resume may find half-done work after
PAGE_LIVE_S = 10.0  # between two rewrites of report.html inside one node (a formal run training, say)


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
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]


def merged_options(before: Sequence[str], given: Sequence[str]) -> list[str]:
    """The sbatch options of a run resumed with `given`: each given one replaces an earlier one of the same key."""
    keys = {option.split("=", 1)[0] for option in given}
    return [option for option in before if option.split("=", 1)[0] not in keys] + list(given)


def check_limits(limits: Limits) -> None:
    if limits.max_cost_usd is not None and not limits.max_cost_usd >= 0:  # nan too
        raise SetupError(f"--max-cost must be 0 or more, got {limits.max_cost_usd}")
    if limits.max_tokens is not None and limits.max_tokens < 0:
        raise SetupError(f"--max-tokens must be 0 or more, got {limits.max_tokens}")
    if limits.max_attempts_per_check < 1:
        raise SetupError(f"--max-attempts must be 1 or more, got {limits.max_attempts_per_check}")
    if not 1 <= limits.max_answer_tokens <= MAX_ANSWER_TOKENS:
        raise SetupError(f"--max-answer-tokens must be from 1 to {MAX_ANSWER_TOKENS}, got {limits.max_answer_tokens}")
    if limits.max_context_tokens is not None and limits.max_context_tokens < MIN_CONTEXT_TOKENS:
        raise SetupError(f"--max-context must be at least {MIN_CONTEXT_TOKENS} tokens, got {limits.max_context_tokens}")




def check_project_root(root: Path) -> None:
    """The project root is a folder this process may write workspace/ and runs/ into (or may create)."""
    existing = next(folder for folder in (root, *root.parents) if folder.exists())
    if not existing.is_dir():
        raise SetupError(f"--project-root {root}: {existing} is a file: give the folder that holds source_of_truth/ "
                         f"(workspace/ and runs/ are made there)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SetupError(f"--project-root {root}: {existing} is not writable here; give a folder you may write to")


def local_model(value: str, flag: str) -> str:
    """A model given as a folder (a path starting with /, ./, ../ or ~) made absolute, so the training runs find
    it from their own folders; refused when it is not there. A hub id, the tiny agent or "" is left as it is."""
    if not value.startswith(("/", "./", "../", "~")):
        return value
    folder = Path(value).expanduser().resolve()
    if not folder.is_dir():
        raise SetupError(f"{flag} {value}: no such model folder; give a local model folder or a hub id")
    return str(folder)


def checked_specs(runtime_check: RuntimeCheckSpec, formal: FormalSpec,
                  source: Path) -> tuple[RuntimeCheckSpec, FormalSpec]:
    """The runtime check's and the formal run's settings, refused before anything is spent when they cannot
    work (no episode, no time, a value pinned on a field the researcher's GRPOConfig lacks); model folders
    made absolute."""
    if runtime_check.episodes < 1:
        raise SetupError(f"--check-episodes must be 1 or more, got {runtime_check.episodes}")
    if not formal.hang_seconds > 0:
        raise SetupError(f"--hang-seconds must be more than 0, got {formal.hang_seconds}")
    if formal.timeout_s is not None and not formal.timeout_s > 0:
        raise SetupError(f"--formal-timeout must be more than 0 seconds, got {formal.timeout_s}")
    if formal.max_jobs < 1:
        raise SetupError(f"--max-jobs must be 1 or more, got {formal.max_jobs}")
    if formal.poll_s is not None and not formal.poll_s > 0:
        raise SetupError(f"--poll-seconds must be more than 0, got {formal.poll_s}")
    fields = config_fields(ast.parse((source / "grpo_config.py").read_text())) or {}
    unknown = [key for key in formal.pinned if key not in fields]
    if unknown:
        raise SetupError(f"--formal-set {', '.join(map(repr, unknown))}: not a field of {CONFIG_CLASS} in "
                         f"{source / 'grpo_config.py'}; its fields: {', '.join(fields)}")
    return (replace(runtime_check, model=local_model(runtime_check.model, "--check-model")),
            replace(formal, model=local_model(formal.model, "--formal-model")))


class _Saver(SqliteSaver):
    """SqliteSaver with test hooks (orchestrator.base.halt): right after a node's writes are on disk, before the
    checkpoint that follows them (`writes:NODE`), and right after each checkpoint is on disk, the node boundary
    (`checkpoint:NEXT_NODE`). LangGraph saves both from its own threads; the checkpoint's save is what the next step
    waits for, so both hooks halt there."""

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[override]
        if metadata.get("source") == "loop" and halting("writes"):
            for node in self._written(config):
                halt_point("writes", node)
        saved = super().put(config, checkpoint, metadata, new_versions)
        for channel in new_versions:
            if str(channel).startswith("branch:to:"):
                halt_point("checkpoint", str(channel)[len("branch:to:"):])
        return saved

    def _written(self, config: dict[str, Any], wait_s: float = 30.0) -> list[str]:
        """The nodes whose writes of this step are saved (against the checkpoint the step began from), once they
        are: LangGraph saves them in another thread, maybe still at work."""
        key = (str(config["configurable"]["thread_id"]), str(config["configurable"].get("checkpoint_ns", "")),
               str(config["configurable"].get("checkpoint_id")))
        deadline = time.monotonic() + wait_s
        while True:
            with self.cursor(transaction=False) as cur:
                rows = cur.execute("select task_path, channel from writes where thread_id = ? and checkpoint_ns = ? "
                                   "and checkpoint_id = ?", key).fetchall()
            nodes = [path.rpartition(", ")[2] for path, channel in rows if not channel.startswith("__")]
            if nodes or time.monotonic() > deadline:
                return list(dict.fromkeys(nodes))
            time.sleep(0.01)


@contextmanager
def open_graph(run_dir: Path, *, must_exist: bool = False) -> Iterator[Any]:
    path = run_dir / "checkpoints.sqlite"
    if must_exist and not path.exists():
        raise SetupError(f"{path} is missing; this run cannot be resumed: start a new run with "
                         f"`python -m orchestrator run`")
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with _Saver.from_conn_string(str(path)) as saver:
            yield build_graph(saver)
    except sqlite3.DatabaseError as exc:
        if disk_fault(exc):  # a full disk or a read-only folder: the machine's, the checkpoint is sound
            raise
        raise damaged_checkpoints(run_dir, exc) from exc


def thread(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}}


def _llm_or_setup_error(spec: str, root: Path, limits: Limits, **kwargs: Any) -> Backend:
    """The backend `spec` names, priced from the project's price table; a missing credential, an unknown model or
    a bad price table is bad input (SetupError)."""
    try:
        return make_llm(spec, prices=load_prices(root / PRICES_FILE), max_output_tokens=limits.max_answer_tokens,
                        max_context=limits.max_context_tokens, **kwargs)
    except LLMError as exc:
        raise SetupError(str(exc)) from exc


def checked_llm(spec: str, root: Path, limits: Limits) -> Backend:
    """The backend, after its preflight: its server answers, its credentials and model are known. Nothing is
    written and nothing is paid for before this passes."""
    backend = _llm_or_setup_error(spec, root, limits)
    try:
        backend.preflight()
    except LLMError as exc:
        raise SetupError(str(exc)) from exc
    return backend


def make_context(settings: RunSettings, on_event: Callable[[str], None],
                 ledger: dict[str, dict[str, Any]] | None = None, *, create_workspace: bool = True) -> RunContext:
    root = Path(settings.project_root)
    log = ActionLog(root / "claude.logs", settings.run_dir)
    journal = Journal(settings.run_dir / "journal.jsonl")

    def on_retry(line: str) -> None:
        tag = line[1:].split("]", 1)[0] if line.startswith("[") else "llm"
        _kept(log.record, Event(settings.run_id, tag, "llm_retry", "the API failed in a way worth retrying", line))
        on_event(f"{tag}: {line}")

    def on_reply(tag: str, reply: Reply) -> None:  # a full disk must not lose the answer before the journal has it
        _kept(log.record, Event(settings.run_id, tag or "llm", "llm_call", f"asked {inner.label}", call_line(reply),
                                tokens=reply.usage.total_tokens, cost_usd=reply.cost_usd,
                                extra={"backend": reply.backend, "model": reply.model,
                                       "request_id": reply.request_id, "stop_reason": reply.stop_reason}))
        if reply.reasoning:
            _kept(log.record, Event(settings.run_id, tag or "llm", "llm_reasoning",
                                    "the model's reasoning, taken out of its answer before it was read; never applied",
                                    reply.reasoning))

    def on_note(tag: str, line: str) -> None:
        _kept(log.record, Event(settings.run_id, tag or "llm", "llm_fit",
                                "every request must fit the server's context", line))
        on_event(f"{tag}: {line}")

    spec = llm_paths(settings.llm, to_disk, root)  # as run.json has it: the same in a copied project
    inner = _llm_or_setup_error(settings.llm, root, Limits(**settings.limits), answered=journal.answered(spec),
                                on_retry=on_retry)
    try:
        inner.preflight()  # what the server says of itself (its context length) is this backend's to know
    except LLMError as exc:
        raise SetupError(str(exc)) from exc
    workspace = Workspace.open(root / "workspace", create=create_workspace)
    workspace.on_commit = lambda sha, parent, node, attempt, branch: journal.append(
        "commit", sha=sha, parent=parent, node=node, attempt=attempt, branch=branch)
    workspace.on_left_out = lambda files: log.record(Event(
        settings.run_id, "workspace", "left_out", "weights, checkpoints and large binaries never enter the workspace's git",
        f"not committed: {', '.join(files)}"))
    return RunContext(run_id=settings.run_id, project_root=root, source_of_truth=Path(settings.source_of_truth),
                      run_dir=settings.run_dir, workspace=workspace,
                      llm=journaled(ReportedLLM(inner, on_reply, on_note), journal, spec, ledger or {}, root),
                      log=log,
                      limits=Limits(**settings.limits), runtime_check=RuntimeCheckSpec(**settings.runtime_check),
                      formal=FormalSpec(**settings.formal), fresh=settings.fresh, on_event=on_event, journal=journal)


@contextmanager
def _holding(project_root: Path, run_id: str, command: str) -> Iterator[None]:
    lock = WorkspaceLock(project_root)
    try:
        lock.acquire(run_id, command)
    except WorkspaceBusy as exc:
        raise SetupError(str(exc)) from None
    try:
        yield
    finally:
        lock.release()


def start_run(project_root: Path, *, llm: str, source_of_truth: Path | None = None, limits: Limits = Limits(),
              runtime_check: RuntimeCheckSpec = RuntimeCheckSpec(model="", real_model=False),
              formal: FormalSpec = FormalSpec(), fresh: bool = False, until: str = "", run_id: str | None = None,
              on_event: Callable[[str], None] = lambda line: None) -> RunOutcome:
    if until and until not in NODES:
        raise SetupError(f"--until {until!r} is not a node; nodes: {', '.join(NODES)}")
    if run_id is not None:
        check_run_id(run_id)
    check_limits(limits)
    project_root = project_root.resolve()
    check_project_root(project_root)
    source = (source_of_truth or project_root / "source_of_truth").resolve()
    check_source_of_truth(source)
    runtime_check, formal = checked_specs(runtime_check, formal, source)
    backend = checked_llm(llm, project_root, limits)  # a missing key, an absent server: refused before any write
    settings = RunSettings(run_id=run_id or new_run_id(), llm=llm, project_root=str(project_root),
                           source_of_truth=str(source), limits=asdict(limits), runtime_check=asdict(runtime_check),
                           formal=asdict(formal), fresh=fresh, until=until)
    with _holding(project_root, settings.run_id, f"run --run-id {settings.run_id}"):
        if any((settings.run_dir / name).exists() for name in ("run.json", "journal.jsonl")):
            raise SetupError(f"run {settings.run_id} already exists: resume it with "
                             f"`python -m orchestrator resume {settings.run_id}` or choose another --run-id")
        ctx = make_context(settings, on_event)
        head = ctx.workspace.head_damage()
        if head:
            raise SetupError(f"the workspace {ctx.workspace.root} is damaged: {head}; check out a branch that exists "
                             f"(`git -C {ctx.workspace.root} checkout BRANCH`) or restore it from a copy")
        _remove_stale_git_locks(ctx)
        settings.status = "running"
        settings.save()
        settings.journal()
        ctx.journal.append("source", hashes=source_hashes(source, SOURCE_FILES))
        ctx.log.record(Event(settings.run_id, "run", "start", "python -m orchestrator run",
                             f"llm={llm} ({backend.label}; {backend.price_note}{_context_said(backend)}); "
                             f"source of truth {source}; "
                             f"limits {asdict(limits)}"))
        return _drive(settings, ctx, _first_input(settings), thread(settings.run_id))


def _context_said(backend: Backend) -> str:
    """The server's context length, where the backend knows it, for the run's first line."""
    window = getattr(backend, "window", None)
    return f"; a {window.describe()}" if window is not None and window.tokens else ""


def _first_input(settings: RunSettings) -> RunState:
    return {"run_id": settings.run_id, "until": settings.until}


def resume_run(project_root: Path, run_id: str, *, from_node: str | None = None,
               max_cost_usd: float | None = None, max_tokens: int | None = None, llm: str | None = None,
               max_answer_tokens: int | None = None, max_context: int | None = None,
               sbatch_options: tuple[str, ...] = (), accept_source_change: bool = False,
               on_event: Callable[[str], None] = lambda line: None) -> RunOutcome:
    project_root = project_root.resolve()
    settings, rebuilt = _loaded_or_rebuilt(project_root, run_id)
    settings.formal["sbatch_options"] = merged_options(settings.formal.get("sbatch_options") or (), sbatch_options)
    raised = {k: v for k, v in (("max_cost_usd", max_cost_usd), ("max_tokens", max_tokens),
                                ("max_answer_tokens", max_answer_tokens), ("max_context_tokens", max_context))
              if v is not None}
    limits = replace(Limits(**settings.limits), **raised)
    check_limits(limits)
    settings.limits = asdict(limits)
    settings.llm = llm or settings.llm
    journal = Journal(settings.run_dir / "journal.jsonl")
    recorded, current, changed = changed_source(settings)
    if changed and not accept_source_change:
        raise SetupError(f"the source of truth in {settings.source_of_truth} changed since run {run_id} last ran: "
                         f"{', '.join(changed)}; `python -m orchestrator resume {run_id} --accept-source-change` "
                         f"copies it again and re-runs every check on it, or put the old files back; nothing was spent")
    if changed and from_node is not None:
        raise SetupError(f"--from {from_node} with --accept-source-change: a changed source of truth is taken up from "
                         f"Step 0 (setup); leave --from out")
    if changed:
        check_source_of_truth(Path(settings.source_of_truth))  # usable, as `run` asks before any token
    checked_llm(settings.llm, project_root, limits)
    with _holding(project_root, run_id, f"resume {run_id}"):
        previous = settings.status
        worked = any(r["kind"] in ("llm_answer", "commit") for r in journal.records())  # paid for or committed
        with open_graph(settings.run_dir, must_exist=worked) as graph:
            try:
                if not worked and from_node is None and not graph.get_state(thread(run_id)).values:
                    return _start_over(settings, on_event, rebuilt)
                point = _resume_point(graph, run_id, "setup" if changed else from_node)
                if point.ended:
                    return _record_ending(settings, point.values, previous, Pipeline.of(graph.get_graph()), on_event,
                                          rebuilt)
            except sqlite3.DatabaseError as exc:
                if disk_fault(exc):
                    raise
                raise damaged_checkpoints(settings.run_dir, exc) from exc
        ctx = _resumed_context(settings, point, on_event)
        if rebuilt:
            _say(ctx, "rebuilt", "run.json is the run's settings and status", rebuilt)
        _remove_stale_git_locks(ctx)
        if ctx.workspace.has_branch(f"run/{run_id}"):
            ctx.workspace.checkout_run_branch(run_id, force=previous in CRASHED)
        if from_node is None:
            _reconcile(ctx, point.latest, () if changed else point.next_nodes, previous)
        if changed:
            _take_up_source_change(ctx, point.latest, recorded, current, changed)
        settings.status = "running"
        settings.save()
        settings.journal()
        ctx.log.record(Event(run_id, "run", "resume", f"python -m orchestrator resume {run_id}"
                             + (f" --from {from_node}" if from_node else "")
                             + (" --accept-source-change" if changed else ""),
                             f"re-entering at {', '.join(point.next_nodes)}; limits {settings.limits}"))
        return _drive(settings, ctx, None, point.config)


def _loaded_or_rebuilt(project_root: Path, run_id: str) -> tuple[RunSettings, str]:
    """The run's settings and, when run.json was missing or damaged and was rebuilt from the journal's record of
    them, the line that says so ('' otherwise)."""
    try:
        return RunSettings.load(project_root, run_id), ""
    except DamagedSettings as exc:
        settings = RunSettings.rebuilt(project_root, run_id)
        if settings is None:
            raise
        settings.status = "running"  # as far as anything knows, its process died: resumed as a crash is
        return settings, f"{exc.args[0].split(' (')[0]}: rebuilt from the run's journal and checkpoint"


def _resumed_context(settings: RunSettings, point: "_ResumePoint", on_event: Callable[[str], None]) -> RunContext:
    """The context of a resumed run, once its workspace is known to hold what the checkpoint names: the run's
    branch and every object of its history (git fsck), or one line that says what is damaged."""
    run_id, root = settings.run_id, Path(settings.project_root)
    committed = any(a.get("sha") for a in point.latest.get("attempts") or [])  # else setup has not run yet
    try:
        ctx = make_context(settings, on_event, point.values.get("ledger") or {}, create_workspace=not committed)
        damage = ctx.workspace.damage(f"run/{run_id}") if committed else ""
        if not damage and not ctx.workspace.has_branch(f"run/{run_id}"):
            damage = ctx.workspace.head_damage()
    except WorkspaceError as exc:
        damage = str(exc)
    if damage:
        raise SetupError(f"cannot resume {run_id}: the workspace {root / 'workspace'} is damaged ({damage}); "
                         f"restore it from a copy, or start a new run with `python -m orchestrator run`")
    head = ctx.workspace.head_damage()
    if head:
        _say(ctx, "workspace", "the run's branch is checked out again", f"the workspace was damaged: {head}; "
             f"run/{run_id} is intact and is checked out")
    return ctx


def _say(ctx: RunContext, action: str, reason: str, line: str) -> None:
    ctx.log.record(Event(ctx.run_id, "run", action, reason, line))
    ctx.on_event(f"resume: {line}")


def _take_up_source_change(ctx: RunContext, latest: RunState, recorded: dict[str, str], current: dict[str, str],
                           changed: list[str]) -> None:
    """The researcher accepted a changed source of truth: setup copies it again and every check runs on it. A
    formal attempt not yet committed was started on the old files: it is stopped and set aside, never adopted."""
    ctx.source_changed = tuple(name for name in current if recorded.get(name) != current[name])
    committed = attempt_count(latest, "formal_train")
    aside = []
    for record in sorted((ctx.run_dir / "jobs").glob("formal-*.json")):
        number = record.stem.removeprefix("formal-")
        if number.isdigit() and int(number) > committed:
            stamp = f"stale-{int(time.time())}"
            for path in (record, *record.parent.glob(f"{record.stem}.*"), ctx.run_dir / record.stem):
                if path.exists() and ".stale-" not in path.name:
                    path.rename(path.with_name(f"{path.name}.{stamp}"))
                    aside.append(path.name)
    ctx.journal.append("source_change", before=recorded, after=current)
    ctx.journal.append("source", hashes=current)
    line = (f"the source of truth changed ({', '.join(changed)}): Step 0 copies it again, then every check runs on "
            f"it" + (f"; set aside, as started on the old files: {', '.join(aside)}" if aside else ""))
    ctx.log.record(Event(ctx.run_id, "run", "source_change", "resume --accept-source-change", line,
                         extra={"before": recorded, "after": current}))
    ctx.on_event(f"resume: {line}")


def _start_over(settings: RunSettings, on_event: Callable[[str], None], rebuilt: str = "") -> RunOutcome:
    """A run killed between writing run.json and its first checkpoint: nothing was done, paid for or committed
    (its journal holds neither), so it starts from the beginning, as `run` would have."""
    ctx = make_context(settings, on_event)
    if rebuilt:
        _say(ctx, "rebuilt", "run.json is the run's settings and status", rebuilt)
    _remove_stale_git_locks(ctx)
    settings.status = "running"
    settings.save()
    settings.journal()
    ctx.journal.append("source", hashes=source_hashes(Path(settings.source_of_truth), SOURCE_FILES))
    line = "no checkpoint, and nothing paid for or committed: nothing was lost; the run starts from the beginning"
    ctx.log.record(Event(settings.run_id, "run", "resume", f"python -m orchestrator resume {settings.run_id}", line))
    on_event(f"resume: {line}")
    return _drive(settings, ctx, _first_input(settings), thread(settings.run_id))


def _record_ending(settings: RunSettings, values: RunState, previous: str, pipeline: Pipeline,
                   on_event: Callable[[str], None], rebuilt: str = "") -> RunOutcome:
    """The graph had ended (its last checkpoint is after `finish`) when the process was killed, before run.json
    said so: nothing is left to run, so the ending the checkpoint holds is recorded."""
    if previous not in CRASHED:
        raise SetupError(f"run {settings.run_id} has nothing left to do (status {values.get('status')}); "
                         f"use --from NODE to re-run from a node")
    status, reason = values.get("status") or "done", values.get("exit_reason", "")
    settings.status, settings.exit_reason = status, reason
    settings.save()
    write_state(settings.run_dir, status, reason, values, ())
    log = ActionLog(Path(settings.project_root) / "claude.logs", settings.run_dir)
    line = f"the run had ended ({status}) but was killed before run.json said so; recorded, nothing re-run"
    for said in (rebuilt, line):
        if said:
            log.record(Event(settings.run_id, "run", "resume", f"python -m orchestrator resume {settings.run_id}",
                             said))
            on_event(f"resume: {said}")
    _write_page(settings, log, pipeline)
    return RunOutcome(settings.run_id, status, reason, dict(values))


@dataclass(frozen=True)
class _ResumePoint:
    config: dict[str, Any]  # the checkpoint the graph goes on from
    values: RunState  # its values
    next_nodes: tuple[str, ...]  # the nodes it runs next
    latest: RunState  # the latest checkpoint's values, with the writes of a node that finished after it
    ended: bool  # the graph had ended: nothing is left to run


def _resume_point(graph: Any, run_id: str, from_node: str | None) -> _ResumePoint:
    """Where to re-enter. A node that finished, its writes saved, when the process died before the next checkpoint
    is not run again: the graph goes on to the node its writes route to (LangGraph applies them)."""
    latest = graph.get_state(thread(run_id))
    if not latest.values and not latest.next:
        raise SetupError(f"run {run_id} has no checkpoint (checkpoints.sqlite is empty or was replaced); "
                         f"it cannot be resumed: start a new run with `python -m orchestrator run`")
    if from_node is None:  # the thread, not the checkpoint's id: LangGraph would replay that node, not resume
        routed = tuple(latest.next) or _routed(graph, latest.config)
        return _ResumePoint(thread(run_id), latest.values, routed, latest.values,
                            ended=not latest.next and not latest.tasks)
    for snapshot in graph.get_state_history(thread(run_id)):
        if from_node in snapshot.next:
            config = _carry_spend(graph, snapshot.config, snapshot.values, latest.values)
            return _ResumePoint(config, graph.get_state(config).values, (from_node,), latest.values, ended=False)
    nodes = sorted({n for s in graph.get_state_history(thread(run_id)) for n in s.next})
    raise SetupError(f"run {run_id} never reached node {from_node!r}; nodes it reached: {', '.join(nodes)}")


def _routed(graph: Any, config: dict[str, Any]) -> tuple[str, ...]:
    """The nodes the saved writes of a finished node route to (none after `finish`)."""
    saved = graph.checkpointer.get_tuple(config)
    writes = saved.pending_writes or [] if saved is not None else []
    return tuple(dict.fromkeys(channel[len(BRANCH):] for _, channel, _ in writes if channel.startswith(BRANCH)))


def _carry_spend(graph: Any, config: dict[str, Any], before: RunState, latest: RunState) -> dict[str, Any]:
    """Re-entering at an earlier checkpoint forgets nothing that was paid for: the spend and the attempts
    recorded since then are carried into the fork, so caps stay honest and attempt numbers go on."""
    old_ledger = before.get("ledger") or {}

    def since(node: str, key: str, value: Any) -> Any:
        old = old_ledger.get(node, {}).get(key)
        if isinstance(value, list):
            return [v for v in value if v not in (old or [])]
        return value - (old or 0)

    delta = {node: {k: since(node, k, v) for k, v in row.items()} for node, row in (latest.get("ledger") or {}).items()}
    delta = {node: row for node, row in delta.items() if any(row.values())}
    seen = {(a["node"], a["attempt"]) for a in before.get("attempts") or []}
    attempts = [a for a in latest.get("attempts") or [] if (a["node"], a["attempt"]) not in seen]
    if not delta and not attempts:
        return config
    return graph.update_state(config, {"ledger": delta, "attempts": attempts})


def _reconcile(ctx: RunContext, values: RunState, next_nodes: tuple[str, ...], previous: str) -> None:
    """After a crash: the workspace goes back to what the checkpoint knows (commits no checkpointed attempt
    names, and half-written files, are dropped; the node re-runs from its journaled answers); processes an
    earlier process of this run left behind are stopped, except the training job the next node adopts."""
    jobs_dir = ctx.run_dir / "jobs"
    adoptable = FORMAL_JOB.format(attempt_count(values, "formal_train") + 1) if "formal_train" in next_nodes else None
    live = live_jobs(jobs_dir)
    spared = {pgid for name, pgid in live.items() if name == adoptable}
    strays = {pgid: pids for pgid, pids in run_processes(ctx.run_dir).items() if pgid not in spared}
    if strays:
        ctx.log.record(Event(ctx.run_id, "run", "stop_strays", "an earlier process of this run left them running",
                             f"stopping process groups {', '.join(map(str, strays))}"))
        stop_processes(strays)
    target, later = _rollback_point(ctx, values)
    if not later and previous not in CRASHED:
        return
    ours = {r["sha"] for r in ctx.journal.records("commit")}
    if previous not in CRASHED and not set(later) <= ours:
        return  # commits this run did not make (a researcher's, by hand): leave the workspace alone
    dropped = ctx.workspace.restore(target)  # a training job writes in the run's folder, never in the workspace
    if dropped:
        ctx.journal.append("rollback", to=target, commits=later, files=dropped)
        ctx.log.record(Event(ctx.run_id, "run", "rollback",
                             "the checkpoint does not know of this work: the interrupted node runs again, "
                             "from the answers already paid for", f"workspace back at {target[:10]}; dropped "
                             f"{', '.join(d[:17] if d.startswith('commit') else d for d in dropped)}"))


def _rollback_point(ctx: RunContext, values: RunState) -> tuple[str, list[str]]:
    """Where the checkpoint left the workspace, and the commits made after it (oldest first): after the
    last commit a checkpointed attempt names, or, before any, before the first commit the journal has."""
    claimed = [a["sha"] for a in values.get("attempts") or [] if a.get("sha")]
    for sha in reversed(claimed):
        if ctx.workspace.is_ancestor(sha):
            return sha, ctx.workspace.commits_since(sha)
    unclaimed = ctx.journal.unclaimed_commits(f"run/{ctx.run_id}", set(claimed))
    if unclaimed and ctx.workspace.is_ancestor(unclaimed[0]["parent"]):
        return unclaimed[0]["parent"], ctx.workspace.commits_since(unclaimed[0]["parent"])
    return ctx.workspace.head_sha(), []


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_stopping: list[str] = []  # the signal that is stopping this process, once one came


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the process as Ctrl-C does (KeyboardInterrupt, raised once): any number of
    them, however close together, end it the same way (`interrupted`, exit code 130), since the ones after the first
    are noted and change nothing while the run stops its job and writes its books. Nested uses share the first."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is _interrupt:
        yield
        return
    _stopping.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        if not _stopping:  # once stopping, later signals stay noted until the process exits
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _interrupt(signum: int, frame: Any) -> None:
    if _stopping:
        return
    _stopping.append(signal.Signals(signum).name)
    raise KeyboardInterrupt() if signum == signal.SIGINT else _Terminated(signal.Signals(signum).name)


def _remove_stale_git_locks(ctx: RunContext) -> None:
    """Git's lock files left in the workspace by a process killed during a git write: this run holds the
    workspace (runs/workspace.lock), so no git of ours is running and they are stale."""
    removed = ctx.workspace.remove_stale_locks()
    if removed:
        line = (f"removed the stale {', '.join(removed)} left by a git process killed mid-write (this run holds "
                f"the workspace, so no git of a run is at work)")
        ctx.log.record(Event(ctx.run_id, "run", "git_lock", "git refuses to work while its lock file exists", line))
        ctx.on_event(f"run: {line}")


def _write_page(settings: RunSettings, log: ActionLog, pipeline: Pipeline) -> None:
    """report.html; a page that cannot be written is logged, never a reason to stop the run."""
    try:
        write_page(Path(settings.project_root), settings.run_id, pipeline)
    except Exception as exc:  # the page is a view of the run, never a reason to fail it
        _kept(log.record, Event(settings.run_id, "run", "page", "report.html shows the run in a browser",
                                f"not written: {type(exc).__name__}: {exc}"))


def _with_live_page(ctx: RunContext, settings: RunSettings, pipeline: Pipeline) -> None:
    """Progress lines inside a node (a formal run's updates) also rewrite the page, at most every PAGE_LIVE_S."""
    shown, last = ctx.on_event, [time.monotonic()]

    def on_event(line: str) -> None:
        shown(line)
        if time.monotonic() - last[0] >= PAGE_LIVE_S:
            last[0] = time.monotonic()
            _write_page(settings, ctx.log, pipeline)
    ctx.on_event = on_event


def _drive(settings: RunSettings, ctx: RunContext, graph_input: RunState | None, config: dict[str, Any]) -> RunOutcome:
    status, reason = "failed", ""
    stopped_by: dict[str, Any] | None = None  # the evidence that stopped the run outside the graph's state
    finished = False
    with marked_process(settings.run_dir), open_graph(settings.run_dir) as graph, stop_signals():
        pipeline = Pipeline.of(graph.get_graph())
        try:
            pipeline.save(settings.run_dir)
            _with_live_page(ctx, settings, pipeline)
            for _ in graph.stream(graph_input, config, context=ctx, durability="sync", stream_mode="values"):
                snapshot = graph.get_state(thread(settings.run_id))  # the checkpoint just written
                write_state(settings.run_dir, settings.status, "", snapshot.values, snapshot.next)
                _write_page(settings, ctx.log, pipeline)
            values = graph.get_state(thread(settings.run_id)).values
            status, reason = values.get("status", "done"), values.get("exit_reason", "")
            finished = True
            halt_point("graph_end", status)  # the graph has ended; run.json does not say so yet
        except RunStopped as exc:
            status, reason, stopped_by = exc.status, str(exc), exc.evidence
        except LLMError as exc:  # no answer: the run's last error says why (what a node asked about, and the API's word)
            status, reason = "failed", f"LLM error: {exc}"
            stopped_by = {"check": "LLM", "summary": reason}
        except KeyboardInterrupt as exc:
            how = f"stopped by {exc}" if isinstance(exc, _Terminated) else "interrupted by the user"
            status, reason = "interrupted", f"{how}; resume with `python -m orchestrator resume {settings.run_id}`"
        except Exception as exc:  # a bug or the machine's fault: keep the run resumable and say what to do
            status, reason, stopped_by = unexpected_ending(ctx, exc)
        finally:
            halt_point("stop", status)
            leftovers = run_processes(settings.run_dir)
            if leftovers:  # an earlier process's job this one never adopted; nothing of a run outlives it
                stop_processes(leftovers)
            settings.status, settings.exit_reason = status, reason
            _kept(settings.save)
            _kept(ctx.log.record, Event(settings.run_id, "run", "stop", "the graph returned or stopped",
                                        f"{status}: {reason}"))
        snapshot = graph.get_state(thread(settings.run_id))
        values = {**snapshot.values, "evidence": stopped_by} if stopped_by else snapshot.values
        _kept(write_state, settings.run_dir, status, reason, values, snapshot.next)
    if not finished:
        _kept(_write_report, ctx, values, status, reason)
    _write_page(settings, ctx.log, pipeline)
    return RunOutcome(settings.run_id, status, reason, dict(values))


def _kept(write: Callable[..., Any], *args: Any) -> None:
    """One of the books a stopping run writes, written where the disk lets it: a full disk or a read-only folder
    (the very fault the run may be stopping for) leaves that book as it was, and the run still ends in its one
    line; any other error is raised."""
    try:
        write(*args)
    except Exception as exc:
        if not disk_fault(exc):
            raise


def unexpected_ending(ctx: RunContext, exc: BaseException) -> tuple[str, str, dict[str, Any] | None]:
    """(status, reason, evidence) of a run stopped by an exception no node expected: the machine's fault (a full
    disk, a read-only folder: `environment`, with the line that says what to do; orchestrator.faults) or a bug
    (`failed`, its traceback in crash.log). The node that raised is still next, so `resume` runs it again."""
    text = "".join(traceback.format_exception(exc))
    resume = f"resume with `python -m orchestrator resume {ctx.run_id}`"
    cause = cause_of(text, ctx.generated)
    remedy = disk_fault(exc, (ctx.run_dir, ctx.project_root / "workspace", ctx.log.project_log)) or (
        cause.remedy if cause.machine else "")
    if remedy:
        reason = f"the machine, not the code: {remedy}; then {resume}"
        _kept(ctx.log.record, Event(ctx.run_id, "run", ENVIRONMENT, "the orchestrator met a fault of the machine, "
                                    "not of the code: a fix cannot repair it, so none is paid for", reason))
        return ENVIRONMENT, reason, {"check": "run", "kind": ENVIRONMENT, "summary": remedy,
                                     "text": tail(text, EVIDENCE_CHARS)}
    (ctx.run_dir / "crash.log").write_text(text)
    return "failed", f"{type(exc).__name__}: {exc}; traceback in {ctx.run_dir / 'crash.log'}; {resume}", None


def _write_report(ctx: RunContext, values: RunState, status: str, reason: str) -> None:
    """report.md for a run that stopped before its `finish` node: the spend includes paid answers no
    checkpoint holds yet (they are used, not paid again, on resume)."""
    tokens, cost = spent(values)
    pending_tokens, pending_cost = ctx.journal.pending_spend(values.get("ledger") or {})
    lines = [f"# Run {ctx.run_id}: {status}", "", f"Reason: {reason}", "",
             f"Tokens: {tokens + pending_tokens}, cost: ${cost + pending_cost:.4f} "
             f"(of which {pending_tokens} tokens, ${pending_cost:.4f} paid for answers the interrupted node "
             f"had not used yet; a resume uses them without paying again)", "",
             "| node | attempt | outcome | commit | tokens |", "|---|---|---|---|---|"]
    lines += [f"| {a['node']} | {a['attempt']} | {a['outcome']} | {(a.get('sha') or '-')[:10]} | {a['tokens']} |"
              for a in values.get("attempts") or []]
    lines += evidence_lines(values.get("evidence"))
    lines += curves_section(ctx.run_dir)
    write_atomic(ctx.run_dir / "report.md", "\n".join(lines) + "\n")
