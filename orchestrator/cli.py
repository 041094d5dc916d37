"""Command line: `python -m orchestrator COMMAND --help`.

Exit codes: 0 the run finished (done); 1 it ended blocked or failed; 2 bad input (missing source of
truth, missing API key, unknown run or node); 3 stopped by the cost/token cap (resume with a higher
cap); 4 stopped by a fault of the machine, not the code (`environment`: set or install what its reason
says, then resume); 5 the formal run's SLURM job was cancelled from outside (`cancelled`: resume goes on from its
checkpoint); 130 interrupted (resume continues).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import typer
from typer.exceptions import Abort, TyperException
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.training.formal import DEFAULT_MODEL
from orchestrator.llm.base import MAX_ANSWER_TOKENS
from orchestrator.run.runs import SetupError, answered_by_text, jobs_line, list_runs, metric_roles_line, metrics_line, run_summary, spent
from orchestrator.base.files import from_disk
from orchestrator.ideas.lineage import Lineage, lineage_lines, tree_lines
from orchestrator.tiny.agent import TINY_AGENT

if TYPE_CHECKING:
    from orchestrator.runner import RunOutcome

# status, list and history answer at once: the training stack (LangGraph, the anthropic SDK, git, torch)
# is imported inside the commands that run the pipeline

console = Console(width=None if sys.stdout.isatty() else 200)  # full tables in logs and pipes
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)

RootOption = typer.Option(Path("."), "--project-root", help="folder holding source_of_truth/, workspace/, runs/")


@app.callback()
def _root() -> None:
    """Turn a game, a GRPO config and a GRPO template into a running, monitored training job."""


@contextmanager
def _progress() -> Iterator[Callable[[str], None]]:
    """Each event as a timestamped line, and a live status line naming the node at work."""
    with console.status("[bold]starting[/]") as status:
        def on_event(line: str) -> None:
            console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {line}", highlight=False)
            status.update(f"[bold]{line.split(':', 1)[0]}[/] at work (since {time.strftime('%H:%M:%S')})")
        yield on_event


def _finish(outcome: RunOutcome) -> None:
    colour = {"done": "green", "budget": "yellow", "environment": "yellow", "cancelled": "yellow"}.get(
        outcome.status, "red")
    console.print(f"[bold {colour}]{outcome.status}[/] run {outcome.run_id}: {escape(outcome.reason or 'finished')}",
                  soft_wrap=True)  # one line, however long
    console.print(f"  history: python -m orchestrator history {outcome.run_id}   "
                  f"status: python -m orchestrator status {outcome.run_id}")
    raise typer.Exit(outcome.exit_code)


def _bad_input(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)  # one line, however long
    raise typer.Exit(2)


@contextmanager
def _one_line_endings(stops: bool = True) -> Iterator[None]:
    """A command's endings that are not a run's outcome, each in one line with its exit code: bad input (2); a full
    disk, a quota or a read-only file system wherever it is met (4: free space or remount, then go on); with
    `stops`, SIGINT, SIGTERM and SIGHUP, any number of them (130)."""
    from orchestrator.base.workspace import WorkspaceError
    from orchestrator.faults import disk_fault

    try:
        if stops:
            from orchestrator.runner import stop_signals

            with stop_signals():
                yield
        else:
            yield
    except KeyboardInterrupt:
        console.print("[bold yellow]interrupted[/]: stopped before the run began or after it ended; nothing is lost",
                      soft_wrap=True)
        raise typer.Exit(130) from None
    except (typer.Exit, Abort):
        raise
    except Exception as exc:
        remedy = disk_fault(exc)
        if remedy:
            console.print(f"[bold yellow]environment[/]: the machine, not the code: {escape(remedy)}; then run the "
                          f"command again", soft_wrap=True)
            raise typer.Exit(4) from None
        if isinstance(exc, (SetupError, WorkspaceError)):
            _bad_input(str(exc))
        raise


def _sbatch_options(pairs: list[str]) -> tuple[str, ...]:
    from orchestrator.training.slurm_site import option_flag

    try:
        return tuple(option_flag(pair) for pair in pairs)
    except ValueError as exc:
        _bad_input(str(exc))
        raise  # unreachable: _bad_input exits


SbatchOption = typer.Option([], "--sbatch-option", help="KEY=VALUE (or KEY) for sbatch, e.g. partition=long, "
                                                       "account=lab, qos=high, time=2-00:00:00; repeatable; wins over "
                                                       "SBATCH_* variables and the script's #SBATCH lines")


def _pinned_values(pairs: list[str]) -> dict:
    values = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            _bad_input(f"--formal-set takes KEY=VALUE, got {pair!r}")
        try:
            values[key] = json.loads(text)
        except json.JSONDecodeError:
            values[key] = text
    return values


@app.command()
def run(
    llm: str = typer.Option("anthropic", help="anthropic[:MODEL], bedrock:MODEL, vertex:MODEL, openai:MODEL[@URL] "
                                             "or replay:TRANSCRIPT.json (README: LLM backends)"),
    source_of_truth: Optional[Path] = typer.Option(None, help="default: PROJECT_ROOT/source_of_truth"),
    max_cost: Optional[float] = typer.Option(None, help="USD cap; the run stops cleanly at a node boundary"),
    max_tokens: Optional[int] = typer.Option(None, help="token cap; the run stops cleanly at a node boundary"),
    max_attempts: int = typer.Option(5, help="fix attempts per failing check before the run is blocked"),
    max_answer_tokens: int = typer.Option(MAX_ANSWER_TOKENS, help="the most output tokens one LLM answer may use "
                                                                  "(below a local server's context length)"),
    max_context: Optional[int] = typer.Option(None, help="the LLM server's context length in tokens, prompt and "
                                                         "answer (default: as the server or model config says)"),
    check_model: str = typer.Option("", help="model for the runtime check; default: the tiny agent, a tiny "
                                          "local model warm-started on the generated game's turns"),
    check_episodes: int = typer.Option(10, help="episodes of the runtime check's short training run"),
    formal_model: str = typer.Option("", help=f"default: {DEFAULT_MODEL} with GPUs, the tiny agent "
                                           f"without ('{TINY_AGENT}' asks for it anywhere)"),
    formal_set: list[str] = typer.Option([], help="KEY=VALUE config values that win over the LLM's proposal"),
    slurm: bool = typer.Option(False, help="sbatch the formal run when SLURM is present"),
    sbatch_option: list[str] = SbatchOption,
    max_jobs: int = typer.Option(20, help="SLURM jobs one formal run may take (time limits, preemptions, lost "
                                          "nodes) before it stops for you to resume"),
    poll_seconds: Optional[float] = typer.Option(None, help="between two looks at the formal job (default: 2 s "
                                                            "for a local job, 30 s for a SLURM job)"),
    formal_timeout: Optional[float] = typer.Option(None, help="wall-clock cap in seconds for one formal run"),
    hang_seconds: float = typer.Option(1800.0, help="no new update for this long stops the formal run as hung"),
    fresh: bool = typer.Option(False, help="start from an empty workspace branch instead of earlier outputs"),
    until: str = typer.Option("", help="stop once this node has passed, e.g. runtime_check (default: the end)"),
    run_id: Optional[str] = typer.Option(None, help="default: a new time-stamped id"),
    project_root: Path = RootOption,
) -> None:
    """The whole pipeline, Step 0 to the end."""
    from orchestrator.checks import RuntimeCheckSpec
    from orchestrator.training.formal import FormalSpec
    from orchestrator.runner import start_run
    from orchestrator.run.state import Limits

    limits = Limits(max_cost_usd=max_cost, max_tokens=max_tokens, max_attempts_per_check=max_attempts,
                    max_answer_tokens=max_answer_tokens, max_context_tokens=max_context)
    spec = RuntimeCheckSpec(model=check_model, real_model=check_model not in ("", TINY_AGENT),
                            episodes=check_episodes)
    formal = FormalSpec(model=formal_model, pinned=_pinned_values(formal_set), use_slurm=slurm,
                        timeout_s=formal_timeout, hang_seconds=hang_seconds,
                        sbatch_options=_sbatch_options(sbatch_option), max_jobs=max_jobs, poll_s=poll_seconds)
    with _one_line_endings(), _progress() as on_event:
        outcome = start_run(project_root, llm=llm, source_of_truth=source_of_truth, limits=limits,
                            runtime_check=spec, formal=formal, fresh=fresh, until=until, run_id=run_id,
                            on_event=on_event)
    _finish(outcome)


@app.command()
def resume(
    run_id: str = typer.Argument(..., help="the run to continue"),
    from_node: Optional[str] = typer.Option(None, "--from", help="re-enter at this node, from the latest state before it"),
    max_cost: Optional[float] = typer.Option(None, help="a new USD cap"),
    max_tokens: Optional[int] = typer.Option(None, help="a new token cap"),
    llm: Optional[str] = typer.Option(None, help="switch the LLM backend"),
    max_answer_tokens: Optional[int] = typer.Option(None, help="a new most output tokens for one LLM answer"),
    max_context: Optional[int] = typer.Option(None, help="the LLM server's context length in tokens"),
    sbatch_option: list[str] = SbatchOption,
    accept_source_change: bool = typer.Option(False, help="the source of truth changed since the run last ran: copy "
                                                          "it again (Step 0) and re-run every check on it"),
    project_root: Path = RootOption,
) -> None:
    """Continue a run from its checkpoint (after a crash, a cap, a cancelled job, or from a chosen node)."""
    from orchestrator.runner import resume_run

    options = _sbatch_options(sbatch_option)
    with _one_line_endings(), _progress() as on_event:
        outcome = resume_run(project_root, run_id, from_node=from_node, max_cost_usd=max_cost,
                             max_tokens=max_tokens, llm=llm, max_answer_tokens=max_answer_tokens,
                             max_context=max_context, sbatch_options=options,
                             accept_source_change=accept_source_change, on_event=on_event)
    _finish(outcome)


@app.command()
def history(run_id: str = typer.Argument(...), project_root: Path = RootOption) -> None:
    """Every attempt of a run, read from the workspace's git history."""
    from orchestrator.base.workspace import Workspace, WorkspaceError

    try:
        attempts = Workspace(project_root / "workspace").history(branch=f"run/{run_id}")
    except WorkspaceError as exc:
        _bad_input(str(exc))
    lineage = Lineage.load(project_root / "runs" / run_id)
    inherited = next((i + 1 for i, a in enumerate(attempts) if lineage and a.sha == lineage.parent_sha), 0)
    if inherited:  # a child's branch starts at its parent's final commit: those attempts are the parent's
        console.print(f"the first {inherited} attempts on this branch are run {lineage.parent}'s (up to commit "
                      f"{lineage.parent_sha[:10]}): python -m orchestrator history {lineage.parent}", soft_wrap=True)
        attempts = attempts[inherited:]
    table = Table(title=f"run {run_id}: {len(attempts)} attempts")
    for column in ("commit", "node", "attempt", "outcome", "files", "tokens", "when"):
        table.add_column(column)
    for a in attempts:
        table.add_row(a.sha[:10], a.node, str(a.attempt), a.outcome, ", ".join(a.files), str(a.tokens), a.when)
    console.print(table)
    tree = tree_lines(project_root, run_id, {r.run_id: r.status for r in list_runs(project_root)})
    if len(tree) > 1:
        console.print("tree of runs (parent -> children, the idea each tried):\n" + "\n".join(tree), markup=False,
                      highlight=False, soft_wrap=True)


@app.command()
def status(run_id: Optional[str] = typer.Argument(None, help="default: the latest run"),
           project_root: Path = RootOption) -> None:
    """Where a run stands: status, next node, tokens and cost, the latest formal run's latest metrics,
    last error."""
    runs = list_runs(project_root)
    if run_id is None:
        if not runs:
            _bad_input(f"no runs under {project_root / 'runs'}")
        run_id = runs[-1].run_id
    try:
        info = run_summary(project_root, run_id)
    except SetupError as exc:
        _bad_input(str(exc))
    console.print(f"run {info['run_id']}: [bold]{info['status']}[/] {info['reason']}")
    console.print(f"  llm {info['llm']}; next node: {', '.join(info['next']) or '-'}; attempts {info['attempts']}; "
                  f"skipped: {', '.join(info['skipped']) or '-'}")
    console.print(f"  spent {info['tokens']} tokens, ${info['cost_usd']:.4f}; limits {info['limits']}")
    for node, row in info["ledger"].items():
        by = answered_by_text(info["answered_by"].get(node, {}), row)
        console.print(f"    {node}: {int(row.get('calls', 0))} calls, {int(row.get('tokens', 0))} tokens, "
                      f"${row.get('cost_usd', 0.0):.4f}" + (f" ({by})" if by else ""), markup=False,
                      highlight=False, soft_wrap=True)
    for note in info["probe_notes"]:
        console.print(f"  probe: {note}", markup=False, highlight=False, soft_wrap=True)
    if info["metric_roles"]:
        console.print(f"  {metric_roles_line(info['metric_roles'])}", markup=False, highlight=False, soft_wrap=True)
    if info["metrics"]:
        console.print(f"  {metrics_line(info['metrics'])}", markup=False, highlight=False, soft_wrap=True)
    if info["jobs"] and (len(info["jobs"]["jobs"]) > 1 or info["jobs"]["jobs"][0].get("job_id")):
        console.print(f"  {jobs_line(info['jobs'])}", markup=False, highlight=False, soft_wrap=True)
    if info["last_error"]:
        console.print(f"  last error: {info['last_error']}")
    for line in lineage_lines(project_root, run_id):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


@app.command("list")
def list_command(project_root: Path = RootOption) -> None:
    """All runs, oldest first."""
    table = Table()
    for column in ("run", "status", "llm", "created", "reason"):
        table.add_column(column)
    for s in list_runs(project_root):
        table.add_row(s.run_id, s.status, s.llm, s.created, s.exit_reason)
    console.print(table)


@app.command()
def report(run_id: Optional[str] = typer.Argument(None, help="default: the latest run"),
           open_page: bool = typer.Option(False, "--open", help="open the page in the default browser"),
           project_root: Path = RootOption) -> None:
    """Write runs/RUN_ID/report.html, one self-contained page with every attempt, diff and curve, and
    print its path."""
    import webbrowser

    from orchestrator.page import Pipeline, write_page

    runs = list_runs(project_root)
    if run_id is None:
        if not runs:
            _bad_input(f"no runs under {project_root / 'runs'}")
        run_id = runs[-1].run_id
    pipeline = Pipeline.load(project_root / "runs" / run_id)
    if pipeline is None:  # a run from before pipeline.json: today's graph
        from orchestrator.graph import build_graph

        pipeline = Pipeline.of(build_graph().get_graph())
    with _one_line_endings(stops=False):
        path = write_page(project_root, run_id, pipeline)
    console.print(str(path), markup=False, highlight=False, soft_wrap=True)
    if open_page and not webbrowser.open(path.as_uri()):
        console.print(f"no browser could be started here: open {path.as_uri()} yourself", soft_wrap=True)


@app.command("try")
def try_command(
    run_id: str = typer.Argument(..., help="the parent run, whose formal run finished"),
    idea: Optional[str] = typer.Argument(None, help="the idea's number or heading in RUN's future_improvements.md"),
    idea_text: Optional[str] = typer.Option(None, "--idea", help="an idea of your own, as text, instead"),
    seeds: int = typer.Option(3, help="seeds of each arm (the parent's formal run is the first of the parent's)"),
    llm: Optional[str] = typer.Option(None, help="default: the parent's backend (a replayed parent: its recorded "
                                                 "answers for the idea)"),
    max_cost: Optional[float] = typer.Option(None, help="USD cap for the child run"),
    max_tokens: Optional[int] = typer.Option(None, help="token cap for the child run"),
    max_attempts: int = typer.Option(5, help="fix attempts per failing check before the child is blocked"),
    max_answer_tokens: int = typer.Option(MAX_ANSWER_TOKENS, help="the most output tokens one LLM answer may use "
                                                                  "(left so with the parent's backend: the parent's)"),
    max_context: Optional[int] = typer.Option(None, help="the LLM server's context length in tokens (default: the "
                                                         "parent's, else as the server says)"),
    child_id: Optional[str] = typer.Option(None, "--run-id", help="default: RUN-idea-N"),
    project_root: Path = RootOption,
) -> None:
    """Try one idea of a run as a child run: the idea's edits, every check, the parent's plan on the same seeds for
    both arms, and the verdict (runs/compare-RUN-vs-CHILD.html)."""
    from orchestrator.run.state import Limits
    from orchestrator.trying import try_idea

    limits = Limits(max_cost_usd=max_cost, max_tokens=max_tokens, max_attempts_per_check=max_attempts,
                    max_answer_tokens=max_answer_tokens, max_context_tokens=max_context)
    with _one_line_endings(), _progress() as on_event:
        outcome = try_idea(project_root, run_id, idea, idea_text, seeds=seeds, llm=llm, limits=limits,
                           run_id=child_id, on_event=on_event)
    for line in lineage_lines(project_root, outcome.run_id):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"  compare: python -m orchestrator compare {run_id} {outcome.run_id}")
    _finish(outcome)


@app.command()
def compare(run_ids: list[str] = typer.Argument(..., help="two runs or more; the first is the baseline"),
            open_page: bool = typer.Option(False, "--open", help="open the page in the default browser"),
            project_root: Path = RootOption) -> None:
    """Write runs/compare-A-vs-B.html: the runs' curves overlaid (each seed thin, the mean thick), the verdict of
    each against the first, the diff of their generated files, their tokens and cost; print its path and verdicts."""
    import webbrowser

    from orchestrator.page.compare import verdicts, write_compare_page

    with _one_line_endings(stops=False):
        path = write_compare_page(project_root, run_ids)
        found = {other: verdicts(project_root, run_ids[0], other) for other in run_ids[1:]}
    console.print(str(path), markup=False, highlight=False, soft_wrap=True)
    for other, comparison in found.items():
        console.print(f"{other} against {run_ids[0]}:", markup=False, highlight=False)
        for metric in comparison.metrics:
            console.print(f"  {metric.line}", markup=False, highlight=False, soft_wrap=True)
    if open_page and not webbrowser.open(path.as_uri()):
        console.print(f"no browser could be started here: open {path.as_uri()} yourself", soft_wrap=True)


@app.command()
def check(
    folder: Path = typer.Argument(..., help="a folder of generated files (helpers.py, train.py, ...)"),
    source_of_truth: Path = typer.Option(Path("source_of_truth"), help="the files the rules compare against"),
    skip_import: bool = typer.Option(False, help="only the static rules: no import, no run on a real game"),
) -> None:
    """Every rule over a folder, no LLM: the static ones, the launch script run with recorders, then the import
    check and the behaviour rules on a real game (in a fresh interpreter). Exit 0 only when all pass; warnings
    are printed but do not fail."""
    from orchestrator.checks import rule_violations, run_import_check
    from orchestrator.run.source_check import check_source_of_truth
    from orchestrator.rules import errors

    try:
        check_source_of_truth(source_of_truth)
    except SetupError as exc:
        _bad_input(str(exc))
    if not folder.is_dir():
        _bad_input(f"{folder} is not a folder")
    violations = rule_violations(folder, source_of_truth)
    for v in violations:
        console.print(str(v), markup=False, highlight=False)
    failed = bool(errors(violations))
    if not skip_import:
        result = run_import_check(folder, source_of_truth=source_of_truth)
        for note in result.notes:
            console.print(f"probe note: {note}", markup=False, highlight=False, soft_wrap=True)
        if not result.passed:
            console.print(f"import {', '.join(result.files)}: {result.summary}", markup=False, highlight=False)
            console.print(result.evidence, markup=False, highlight=False)
            failed = True
    console.print("[red]failed[/]" if failed else "[green]all checks pass[/]")
    raise typer.Exit(1 if failed else 0)


@app.command()
def demo(example: str = typer.Option("cleanup", help="an example under examples/: cleanup, staghunt, ..."),
         project_root: Path = RootOption) -> None:
    """The whole pipeline offline: a recorded LLM, the tiny local model, no network, no GPU, no key."""
    from orchestrator.demo import roles_of, run_demo
    from orchestrator.nodes.review import IDEAS_FILE

    started = time.monotonic()
    with _one_line_endings(), _progress() as on_event:
        outcome = run_demo(project_root.resolve(), example, on_event=on_event)
    tokens, cost = spent(outcome.state)
    run_dir = project_root.resolve() / "runs" / outcome.run_id
    console.print(f"\n[bold]demo summary[/] ({time.monotonic() - started:.0f} s wall time)")
    console.print(f"  files: {project_root.resolve() / 'workspace' / 'generated'}")
    for a in outcome.state.get("attempts") or []:
        console.print(f"    {a['node']} attempt {a['attempt']}: {a['outcome']}  ({a['tokens']} tokens)",
                      markup=False, highlight=False)
    console.print(f"  tokens (recorded): {tokens}, cost at API prices: ${cost:.2f}")
    roles = roles_of(outcome)
    if roles is not None:
        console.print("  config roles:\n" + "\n".join(f"    {line}" for line in roles.describe().splitlines()),
                      markup=False, highlight=False)
    logs = outcome.state.get("formal_log_dir")
    console.print(f"  formal run logs: {from_disk(logs, project_root.resolve()) if logs else '-'}")
    console.print(f"  ideas: {run_dir / IDEAS_FILE}")
    console.print(f"  action log: {project_root.resolve() / 'claude.logs'}; events, report: {run_dir}")
    _finish(outcome)


def main() -> None:
    """`python -m orchestrator`: a command line that cannot be parsed (an unknown option, a value of the wrong
    kind, a missing argument) is refused in one line with its exit code (2), like any other bad input."""
    try:
        code = app(standalone_mode=False)
    except TyperException as exc:
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one printed the help already, as typer knows it by name
            where = getattr(getattr(exc, "ctx", None), "command_path", "python -m orchestrator")
            message = " ".join(exc.format_message().split()).rstrip(".")
            console.print(f"[bold red]error:[/] {escape(message)}; see `{where} --help`", soft_wrap=True, highlight=False)
        sys.exit(exc.exit_code)
    except Abort as exc:  # click's word for a KeyboardInterrupt it met
        sys.exit(130 if isinstance(exc.__context__, KeyboardInterrupt) else 1)
    sys.exit(code if isinstance(code, int) else 0)
