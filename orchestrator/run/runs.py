"""What is known about runs without the training stack: settings (run.json), the state after the last
checkpoint (state.json), the list of runs and the summary `status` prints (with the backend and model of
every paid answer, from the journal).

This module imports neither LangGraph, nor torch, nor the anthropic SDK, so `status` and `list` answer
at once. `runs/RUN_ID/state.json` is written by the runner after every checkpoint (status, next node,
attempts, spend per node, last error, the latest formal run's latest metrics); a run from before
state.json existed is read from its LangGraph checkpoint instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.base.files import from_disk, project_root_of, read_json, to_disk
from orchestrator.base.halt import halt_point
from orchestrator.run.journal import Journal
from orchestrator.base.files import write_atomic
from orchestrator.training.logformat import LogFormat, read_log
from orchestrator.training.plots import latest_metrics
from orchestrator.base.runlock import WorkspaceLock

STATE_FILE = "state.json"
FORMAL_JOB = "formal-{}"  # formal attempt N's folder name everywhere: its logs, outputs, job record, plots


class SetupError(ValueError):
    """Bad input found before anything runs; the message says what to do."""


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_run_id(run_id: str) -> None:
    """A run id names a folder under runs/ and the git branch run/RUN_ID: letters, digits, `.`, `_` and `-`."""
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id or run_id.endswith((".", ".lock")):
        raise SetupError(f"--run-id {run_id!r} cannot name a run: use up to 100 letters, digits, '.', '_' and '-', "
                         f"starting with a letter or digit (no '..'), or leave it out for a new time-stamped id")


def llm_paths(spec: str, convert: Callable[[str, Path], str], root: Path) -> str:
    """An LLM spec with a replay transcript's path converted (to_disk or from_disk)."""
    kind, sep, arg = spec.partition(":")
    return f"{kind}:{convert(arg, root)}" if kind == "replay" and sep else spec


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
    until: str = ""  # stop once this node has passed ("" = the whole pipeline)
    status: str = "created"
    exit_reason: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    @property
    def run_dir(self) -> Path:
        return Path(self.project_root) / "runs" / self.run_id

    def stored(self) -> dict[str, Any]:
        """What run.json holds: every path inside the project root relative to it."""
        root = Path(self.project_root)
        data = asdict(self)
        data["project_root"] = "."
        data["source_of_truth"] = to_disk(self.source_of_truth, root)
        data["llm"] = llm_paths(self.llm, to_disk, root)
        for group in ("runtime_check", "formal"):
            if isinstance(data[group].get("model"), str):
                data[group]["model"] = to_disk(data[group]["model"], root)
        return data

    def save(self) -> None:
        """run.json, atomically."""
        write_atomic(self.run_dir / "run.json", json.dumps(self.stored(), indent=2))
        halt_point("run_json", self.status)

    def journal(self) -> None:
        """The settings, as run.json holds them, into the run's journal: what rebuilds a damaged run.json."""
        Journal(self.run_dir / "journal.jsonl").append("settings", settings=self.stored())

    @classmethod
    def from_stored(cls, root: Path, data: dict[str, Any]) -> "RunSettings":
        data = {**data, "project_root": str(root), "source_of_truth": from_disk(data["source_of_truth"], root),
                "llm": llm_paths(data["llm"], from_disk, root)}
        for group in ("runtime_check", "formal"):
            if isinstance(data.get(group, {}).get("model"), str):
                data[group] = {**data[group], "model": from_disk(data[group]["model"], root)}
        return cls(**data)

    @classmethod
    def load(cls, project_root: Path, run_id: str) -> "RunSettings":
        root = project_root.resolve()
        path = root / "runs" / run_id / "run.json"
        if not path.exists() and not (path.parent / "journal.jsonl").exists():
            raise SetupError(f"no run {run_id!r} under {root / 'runs'}: see `python -m orchestrator list`")
        try:
            return cls.from_stored(root, json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            what = "damaged" if path.exists() else "missing"
            todo = (f": `python -m orchestrator resume {run_id}` rebuilds it from the run's checkpoint and journal"
                    if cls.rebuilt(root, run_id) is not None
                    else "; this run cannot be resumed: start a new one with `python -m orchestrator run`")
            raise DamagedSettings(f"{path} is {what} ({type(exc).__name__}: {exc}){todo}") from exc

    @classmethod
    def rebuilt(cls, project_root: Path, run_id: str) -> "RunSettings | None":
        """The settings the run's journal last recorded (its status as it was then); None without any."""
        records = Journal(project_root / "runs" / run_id / "journal.jsonl").records("settings")
        try:
            return cls.from_stored(project_root, records[-1]["settings"]) if records else None
        except (KeyError, TypeError, AttributeError):
            return None


class DamagedSettings(SetupError):
    """run.json is missing or damaged; the message says whether a resume can rebuild it."""


def source_hashes(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """Each named source-of-truth file's sha256 ('' for a file that is not there): what a run was started on."""
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() if (folder / name).is_file() else ""
            for name in names}


def source_changes(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """The files whose hash differs from the recorded one, each as `NAME (OLD -> NEW)` with short hashes."""
    def short(digest: str) -> str:
        return digest[:12] or "missing"
    return [f"{name} ({short(digest)} -> {short(current.get(name, ''))})"
            for name, digest in recorded.items() if digest != current.get(name, "")]


def changed_source(settings: RunSettings) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(the hashes the run's journal last recorded for its source of truth, the files' hashes now, the changes)."""
    recorded = (Journal(settings.run_dir / "journal.jsonl").records("source") or [{}])[-1].get("hashes") or {}
    current = source_hashes(Path(settings.source_of_truth), list(recorded))
    return recorded, current, source_changes(recorded, current)


def spent(state: Mapping[str, Any]) -> tuple[int, float]:
    """(tokens, USD) spent so far in a run, from the ledger of its state."""
    rows = (state.get("ledger") or {}).values()
    return int(sum(r.get("tokens", 0) for r in rows)), float(sum(r.get("cost_usd", 0.0) for r in rows))


def answered_by_text(counts: Mapping[str, int], row: Mapping[str, Any]) -> str:
    """Who answered a node's calls, e.g. `openai Qwen/Qwen2.5-Coder-7B-Instruct x2`, and `unpriced` where
    tokens were spent for $0 (a model no price table names: a server of your own)."""
    who = ", ".join(f"{label} x{n}" if n > 1 else label for label, n in counts.items())
    unpriced = row.get("tokens", 0) and not row.get("cost_usd", 0.0)
    return "; ".join(part for part in (who, "unpriced: $0, no price table names the model" if unpriced else "")
                     if part)


def evidence_lines(evidence: Mapping[str, Any] | None) -> list[str]:
    """report.md's section on the evidence a stopped run ended with ([] when there is none)."""
    if not evidence:
        return []
    return ["", f"## Last evidence ({evidence.get('check')})", "", evidence.get("summary", ""), "", "```",
            evidence.get("text", ""), "```"]


def list_runs(project_root: Path) -> list[RunSettings]:
    """Every run, oldest first, with the status and reason `status` shows (`crashed` for a run.json that says
    running while no process holds the workspace, `damaged` for a run whose books are)."""
    runs = []
    held = WorkspaceLock(project_root).held_by_someone()
    folders = {path.parent for pattern in ("*/run.json", "*/journal.jsonl")
               for path in (project_root / "runs").glob(pattern)}
    for folder in sorted(folders):
        settings, status, reason = shown_status(project_root, folder.name, held)
        settings.status, settings.exit_reason = status, reason
        runs.append(settings)
    return runs


def checkpoint_damage(run_dir: Path, run_id: str) -> str:
    """Why the run's checkpoint cannot be resumed from (missing, empty, not a database, no checkpoint of this run),
    read with sqlite3 alone; '' when it holds one."""
    path = run_dir / "checkpoints.sqlite"
    if not path.is_file():
        return f"{path} is missing"
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            tables = {row[0] for row in db.execute("select name from sqlite_master where type = 'table'")}
            found = "checkpoints" in tables and db.execute(
                "select 1 from checkpoints where thread_id = ? limit 1", (run_id,)).fetchone()
    except sqlite3.OperationalError:
        return ""  # cannot be read from here (a read-only folder, a lock): not known to be gone
    except sqlite3.DatabaseError as exc:
        return f"{path} is damaged ({exc})"
    return "" if found else f"{path} holds no checkpoint of run {run_id} (it is empty or was replaced)"


def routed_next(run_dir: Path, run_id: str) -> list[str] | None:
    """The nodes a node that finished after the latest checkpoint routes to, its writes saved (read with sqlite3
    alone): where `resume` goes on. None when no node finished after that checkpoint (or it cannot be read)."""
    try:
        with contextlib.closing(sqlite3.connect(run_dir / "checkpoints.sqlite")) as db:
            latest = db.execute("select checkpoint_id from checkpoints where thread_id = ? and checkpoint_ns = '' "
                                "order by checkpoint_id desc limit 1", (run_id,)).fetchone()
            channels = [row[0] for row in db.execute(
                "select channel from writes where thread_id = ? and checkpoint_ns = '' and checkpoint_id = ?",
                (run_id, latest[0]))] if latest else []
    except sqlite3.Error:
        return None
    if not channels or any(channel.startswith("__") for channel in channels):
        return None
    return list(dict.fromkeys(c[len(BRANCH):] for c in channels if c.startswith(BRANCH)))


def shown_status(project_root: Path, run_id: str, held: bool | None = None) -> tuple[RunSettings, str, str]:
    """(settings, status, reason) as `status` and `list` show a run, saying only what can work: a run whose
    process died is `crashed` (resume it); one whose run.json is damaged says that a resume rebuilds it; one
    whose checkpoint is gone (with work paid for or committed) is `damaged` and says to start a new run."""
    root = project_root.resolve()
    held = WorkspaceLock(root).held_by_someone() if held is None else held
    try:
        settings = RunSettings.load(root, run_id)
        status, reason = settings.status, settings.exit_reason
    except DamagedSettings as exc:
        settings = RunSettings.rebuilt(root, run_id) or RunSettings(run_id, "?", str(root), "")
        status, reason = "damaged", str(exc)
    if status == "running" and held:
        return settings, status, reason
    if status == "running":
        status, reason = "crashed", (f"the process ended without stopping the run; resume with "
                                     f"`python -m orchestrator resume {run_id}`")
    if status == "done":
        return settings, status, reason
    gone = checkpoint_damage(settings.run_dir, run_id)
    worked = any(r["kind"] in ("llm_answer", "commit") for r in Journal(settings.run_dir / "journal.jsonl").records())
    if gone and worked:
        return settings, "damaged", (f"{gone}; this run cannot be resumed: start a new run with `python -m "
                                     f"orchestrator run` (the workspace branch run/{run_id} keeps its files)")
    changes = changed_source(settings)[2] if settings.source_of_truth else []
    if changes:
        reason = (f"{reason + '; ' if reason else ''}the source of truth changed since ({', '.join(changes)}): "
                  f"`python -m orchestrator resume {run_id} --accept-source-change` takes it up")
    return settings, status, reason


def _attempt_number(path: Path) -> int:
    found = re.search(r"(\d+)$", path.stem)
    return int(found.group(1)) if found else 0


def job_log(record: Path) -> Path | None:
    """The train.logs a job record (runs/RUN/jobs/NAME.json) names, where its job writes it; None without one."""
    try:
        log_path = json.loads(record.read_text()).get("log_path")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(from_disk(log_path, project_root_of(record.parent.parent))) if isinstance(log_path, str) else None


def latest_formal_metrics(run_dir: Path, formal_log_dir: str = "",
                          log_format: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The latest formal attempt's name and its last logged metrics (orchestrator.training.plots names, plus
    `update`), read in the run's log format: from the log its job record names (live while it trains),
    else from the run's folder the last ended attempt's logs were collected into (`formal_log_dir`, as
    state.json stores it); None when neither has a train line."""
    candidates = []
    records = sorted(run_dir.glob("jobs/formal-*.json"), key=_attempt_number)
    live = job_log(records[-1]) if records else None
    if live is not None:
        candidates.append((records[-1].stem, live))
    if formal_log_dir:
        folder = Path(from_disk(formal_log_dir, project_root_of(run_dir)))
        candidates.append((folder.name, folder / "train.logs"))
    for name, path in candidates:
        metrics = latest_metrics(path, LogFormat.from_dict(dict(log_format or {})))
        if metrics:
            return {"run": name, **metrics}
    return None


def formal_jobs(run_dir: Path, log_format: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The latest formal attempt's jobs (its chain, orchestrator.training.chain: formal-N/jobs.json), each with the update it
    went on from, read from the attempt's train.logs; None before any formal job."""
    chains = sorted(run_dir.glob("formal-*/jobs.json"), key=lambda p: _attempt_number(p.parent))
    if not chains:
        return None
    try:
        segments = json.loads(chains[-1].read_text()).get("segments", [])
    except (OSError, ValueError):
        return None
    if not segments:
        return None
    folder = chains[-1].parent
    records = read_log(job_log(run_dir / "jobs" / f"{folder.name}.json") or folder / "train.logs",
                       LogFormat.from_dict(dict(log_format or {})))
    if not records and (folder / "train.logs").is_file():
        records = read_log(folder / "train.logs", LogFormat.from_dict(dict(log_format or {})))
    for segment in segments:
        first = next((r for r in records[segment.get("first_record", 0):] if r.kind == "train"), None)
        update = first.values.get("update") if first is not None else None
        segment["from_update"] = int(update) - 1 if isinstance(update, float) else None
    return {"run": folder.name, "jobs": segments}


def jobs_line(jobs: Mapping[str, Any]) -> str:
    """`formal run formal-1, 3 jobs: 12 start -> time_limit; 13 after time_limit, from update 4 -> finished`"""
    shown = []
    for i, job in enumerate(jobs["jobs"]):
        why = "start" if job["cause"] == "start" else f"after {job['cause']}"
        where = f", from update {job['from_update']}" if i and job.get("from_update") is not None else ""
        ending = job.get("failure_class") or job.get("status") or "running"
        shown.append(f"{job.get('job_id') or '-'} {why}{where} -> {ending}")
    return f"formal run {jobs['run']}, {len(jobs['jobs'])} job(s): {'; '.join(shown)}"


def metric_roles_line(roles: Mapping[str, Any]) -> str:
    """`metric roles: reward <- ret_mean (first guess), ...; off: invalid_action_rise (...)`"""
    keys, sources = roles.get("keys") or {}, roles.get("sources") or {}
    mapped = ", ".join(f"{role} <- {key} ({sources.get(role, '?')})" for role, key in keys.items()) or "none mapped"
    off = roles.get("off") or []
    return f"metric roles: {mapped}" + (f"; {'; '.join(off)}" if off else "")


def metrics_line(metrics: Mapping[str, Any]) -> str:
    """`formal run formal-1, update 4: reward -0.15, loss 0.012, ...`"""
    values = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if k not in ("run", "update"))
    return f"formal run {metrics['run']}, update {int(metrics['update'])}: {values}"


def state_record(run_dir: Path, status: str, exit_reason: str, values: Mapping[str, Any],
                 next_nodes: Sequence[str]) -> dict[str, Any]:
    """What state.json holds, from a checkpoint's values and the run's status."""
    evidence = values.get("evidence") or {}
    formal_log_dir = values.get("formal_log_dir") or ""
    return {"status": status, "exit_reason": exit_reason, "next": list(next_nodes),
            "attempts": list(values.get("attempts") or []), "skipped": list(values.get("skipped") or []),
            "ledger": dict(values.get("ledger") or {}), "last_error": evidence.get("summary", ""),
            "last_evidence": {k: evidence.get(k, "") for k in ("check", "kind", "summary", "text")} if evidence else {},
            "formal_log_dir": formal_log_dir, "log_format": values.get("log_format") or {},
            "metric_roles": values.get("metric_roles") or {}, "probe_notes": list(values.get("probe_notes") or []),
            "latest_metrics": latest_formal_metrics(run_dir, formal_log_dir, values.get("log_format")),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}


def write_state(run_dir: Path, status: str, exit_reason: str, values: Mapping[str, Any],
                next_nodes: Sequence[str]) -> None:
    """runs/RUN_ID/state.json, atomically."""
    record = state_record(run_dir, status, exit_reason, values, next_nodes)
    write_atomic(run_dir / STATE_FILE, json.dumps(record, indent=1, default=str))


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """state.json, or None when it is missing or damaged."""
    return read_json(run_dir / STATE_FILE)


def run_summary(project_root: Path, run_id: str) -> dict[str, Any]:
    """What `status` shows: settings, where the graph stands, spend (paid answers not yet in the ledger
    included), the last error, the latest formal run's latest metrics."""
    project_root = project_root.resolve()
    settings, status, reason = shown_status(project_root, run_id)
    state = read_state(settings.run_dir)
    if state is None and status != "damaged":  # a run from before state.json: its checkpoint knows the same
        values, next_nodes = checkpoint_state(settings.run_dir, run_id)
        state = state_record(settings.run_dir, settings.status, settings.exit_reason, values, next_nodes)
    state = state or {}
    routed = routed_next(settings.run_dir, run_id) if status == "crashed" else None
    if routed is not None:  # killed after a node's writes, before its checkpoint: state.json names that node still
        state["next"] = routed
    ledger = state.get("ledger") or {}
    tokens, cost = spent(state)
    journal = Journal(settings.run_dir / "journal.jsonl")
    pending_tokens, pending_cost = journal.pending_spend(ledger)
    return {"run_id": run_id, "status": status, "reason": reason, "llm": settings.llm,
            "next": state.get("next") or [], "tokens": tokens + pending_tokens, "cost_usd": cost + pending_cost,
            "pending_tokens": pending_tokens, "limits": settings.limits,
            "attempts": len(state.get("attempts") or []), "skipped": state.get("skipped") or [],
            "ledger": ledger, "answered_by": journal.answered_by(ledger), "last_error": state.get("last_error") or "",
            "metrics": latest_formal_metrics(settings.run_dir, state.get("formal_log_dir") or "", state.get("log_format"))
            or state.get("latest_metrics"), "jobs": formal_jobs(settings.run_dir, state.get("log_format")),
            "metric_roles": state.get("metric_roles") or {}, "probe_notes": state.get("probe_notes") or []}


BRANCH = "branch:to:"  # LangGraph's channel that marks a node the next step runs


def damaged_checkpoints(run_dir: Path, exc: Exception) -> SetupError:
    return SetupError(f"{run_dir / 'checkpoints.sqlite'} is damaged ({exc}); this run cannot be resumed from it: "
                      f"start a new run with `python -m orchestrator run` (the workspace branch keeps its files)")


def checkpoint_state(run_dir: Path, run_id: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The latest checkpoint's values and next nodes, read from its SQLite file without building the graph (status
    stays light): the nodes the next step runs are the checkpoint's `branch:to:NODE` channels."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = run_dir / "checkpoints.sqlite"
    if not path.exists():
        raise SetupError(f"{path} is missing; this run cannot be resumed: start a new run with "
                         f"`python -m orchestrator run`")
    try:
        with SqliteSaver.from_conn_string(str(path)) as saver:
            saved = saver.get_tuple({"configurable": {"thread_id": run_id}})
    except sqlite3.DatabaseError as exc:
        raise damaged_checkpoints(run_dir, exc) from exc
    if saved is None:
        return {}, ()
    channels = saved.checkpoint["channel_values"]
    values = {key: value for key, value in channels.items() if not key.startswith(("branch:", "__"))}
    return values, tuple(key[len(BRANCH):] for key in channels if key.startswith(BRANCH))
