"""The debug checks, cheapest first: rules (AST, and the launch script run with recorders), import (and
the behaviour probe on a real game), then a short training run.

Each returns a `CheckResult` rather than raising. Generated code only ever runs in a subprocess.
The evidence is what the fix prompt needs: the violations, or the last traceback plus the generated
lines it points at, trimmed to fit a prompt. The fingerprint normalises that evidence (paths, line
numbers, addresses, numbers, quoted values) so the same failure after a fix is recognised. A failure
whose cause is the machine (orchestrator.faults) is kind `environment`, its summary the line that says
what to set or install: no fix can help it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.training.census import (Census, TrainingFindings, census_env, read_census, read_training_check,
                                          unreported)
from orchestrator.training.slurm_job import local_job
from orchestrator.sources.config_file import accepted_values, read_config
from orchestrator.base.execution import (ExecutionResult, execute, exit_after_done, last_traceback, launcher_failures,
                                    own_tracebacks, rank_errors, strip_progress_bars, tail)
from orchestrator.faults import CODE, ENVIRONMENT, Cause, cause_of
from orchestrator.training.logformat import LogFormat, read_log, sample_problems
from orchestrator.sources.roles import ConfigRoles, deliver, parses_command_line
from orchestrator.rules import GENERATED_FILES, Violation, check_folder, errors
from orchestrator.rules.dynamic import probe_folder, probe_plan
from orchestrator.rules.recorded_launch import check_recorded_launch, probe_args

EVIDENCE_CHARS = 6000
IMPORTED_MODULES = ("helpers", "prompt_template", "train")
GENERATED_PY = ["helpers.py", "prompt_template.py", "train.py"]
EDITABLE_FILES = (*GENERATED_FILES, "grpo_config.py")

# first match wins; each pattern is searched in the traceback / stderr tail
FAILURE_CLASSES = (
    ("timeout", re.compile(r"^TIMEOUT$", re.M)),
    ("oom", re.compile(r"CUDA out of memory|OutOfMemoryError|MemoryError|Killed")),
    ("missing_config_field", re.compile(r"'GRPOConfig' object has no attribute|GRPOConfig.__init__\(\) got an unexpected")),
    ("import", re.compile(r"ModuleNotFoundError|ImportError|cannot import name")),
    ("wrong_signature", re.compile(r"TypeError: .*(positional argument|keyword argument|takes \d+|missing \d+ required)")),
    ("shape_mismatch", re.compile(r"size mismatch|shape .* (is invalid|mismatch)|must match the size|mat1 and mat2|"
                                  r"Expected .* dimension|The size of tensor")),
    ("syntax", re.compile(r"SyntaxError|IndentationError")),
    ("name", re.compile(r"NameError|AttributeError")),
)


@dataclass(frozen=True)
class CheckResult:
    check: str  # rules | import_check | runtime_check
    passed: bool
    kind: str = ""  # failure class: guard, import, shape_mismatch, ..., no_updates, non_finite; environment
    summary: str = ""  # one line
    evidence: str = ""  # what the fix prompt shows
    files: list[str] = field(default_factory=list)  # generated files the evidence points at
    seconds: float = 0.0
    signature: str = ""  # the failure itself (traceback, violations), without the code around it
    notes: list[str] = field(default_factory=list)  # what the check noted and could not verify (the probe's notes)

    @property
    def fingerprint(self) -> str:
        return fingerprint(f"{self.check}\n{self.kind}\n{self.signature or self.evidence}")

    def to_evidence(self) -> dict:
        return {"check": self.check, "kind": self.kind, "summary": self.summary, "text": self.evidence,
                "files": self.files, "fingerprint": self.fingerprint}


def fingerprint(text: str) -> str:
    normalised = re.sub(r'File "[^"]*/([^/"]+)"', r'File "\1"', text)
    normalised = re.sub(r"line \d+", "line N", normalised)
    normalised = re.sub(r"0x[0-9a-fA-F]+", "0xADDR", normalised)
    normalised = re.sub(r"'[^'\n]*'|\"[^\"\n]*\"", "'V'", normalised)
    normalised = re.sub(r"\d+(\.\d+)?", "N", normalised)
    normalised = re.sub(r"\s+", " ", normalised)
    return hashlib.sha1(normalised.encode()).hexdigest()[:16]


def classify_failure(text: str) -> str:
    for kind, pattern in FAILURE_CLASSES:
        if pattern.search(text):
            return kind
    return "runtime_error"


def implicated_files(traceback: str) -> list[str]:
    """Generated files named in a traceback's frames, innermost last, each once."""
    names = re.findall(r'File "(?:[^"]*/)?([^/"]+)", line \d+', traceback)
    seen: list[str] = []
    for name in names:
        if name in GENERATED_FILES and name not in seen:
            seen.append(name)
    return seen


def code_excerpts(traceback: str, folder: Path, context: int = 3) -> str:
    """The generated lines each traceback frame points at, with a few lines around them."""
    excerpts = []
    for name, line in re.findall(r'File "(?:[^"]*/)?([^/"]+)", line (\d+)', traceback):
        path = folder / name
        if name not in GENERATED_FILES or not path.exists():
            continue
        lines = path.read_text().splitlines()
        n = int(line)
        start, end = max(n - 1 - context, 0), min(n + context, len(lines))
        body = "\n".join(f"{'>' if i + 1 == n else ' '}{i + 1:5d}  {lines[i]}" for i in range(start, end))
        excerpts.append(f"{name} around line {n}:\n{body}")
    return "\n\n".join(excerpts)


def _failure(check: str, result: ExecutionResult, folder: Path, what: str, logged_done: bool = False) -> CheckResult:
    """A failed subprocess as a CheckResult: kind `environment` (summary: the remedy) when its cause is the
    machine (orchestrator.faults), else the code's failure class, with any part the machine played stated."""
    stderr = strip_progress_bars(result.stderr)
    stdout = strip_progress_bars(result.stdout)
    traceback = last_traceback(stderr) or last_traceback(stdout)
    # under a launcher, each rank's own error and the launcher's list of failed ranks (exit codes, signals)
    failures, ranks = launcher_failures(stderr), rank_errors(stderr)
    origin = Cause(CODE) if result.timed_out else cause_of(stderr if stderr.strip() else stdout, folder)
    if result.timed_out:
        kind, summary = "timeout", f"{what} did not finish within the time limit ({result.seconds:.0f} s)"
    elif origin.machine:
        kind, summary = ENVIRONMENT, f"{what} failed because of the machine, not the code: {origin.remedy}"
    else:
        kind = classify_failure(traceback or stderr)
        last_line = (traceback or stderr).strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        cause = str(failures[0]) if failures and not own_tracebacks(stderr) else last_line[0][:300]
        summary = f"{what} failed{' after train.logs said done' if logged_done else ''}: {cause}"
    body = (ranks if failures else traceback) or tail(stderr, EVIDENCE_CHARS // 2)
    excerpts = code_excerpts(traceback, folder)
    fact = origin.fact and f"On this machine: {origin.fact}."
    evidence = tail("\n\n".join(part for part in (body, excerpts and f"Relevant lines:\n{excerpts}", fact) if part),
                    EVIDENCE_CHARS)
    files = [] if origin.machine else implicated_files(traceback)
    return CheckResult(check, False, kind, summary, evidence, files, result.seconds, body)


def launch_probe_args(folder: Path, cli: bool | None = None) -> list[str]:
    """The arguments a recorded launch is given: the orchestrator's kind (every config field, each value
    changed from its default) when values reach train.py as flags; `cli` None: guessed from whether the
    template or the config parses the command line."""
    config, template = folder / "grpo_config.py", folder / "grpo_template.py"
    if cli is None:
        cli = parses_command_line(*(p.read_text() for p in (config, template) if p.is_file()))
    try:
        return probe_args(config.read_text()) if cli else []
    except (OSError, SyntaxError, ValueError):
        return []  # the static rules report an unreadable config


def rule_violations(folder: Path, source_of_truth: Path, launch_args: list[str] | None = None) -> list[Violation]:
    """Every static rule, then the launch script run with recorders (rules/recorded_launch.py), unless the
    static rules already found it missing or unparseable; warnings included. A rule both layers judge
    (launch-without-accelerate: by the text, by what runs) is reported once, by the static one."""
    violations = check_folder(folder, source_of_truth)
    if not any(v.file == "launch_training.sh" and v.rule in ("launch-syntax", "file-missing") for v in violations):
        reported = {v.rule for v in violations}
        recorded = check_recorded_launch(folder, launch_probe_args(folder) if launch_args is None else launch_args)
        violations += [v for v in recorded if v.rule not in reported]
    return violations


def run_guards(folder: Path, source_of_truth: Path, launch_args: list[str] | None = None) -> CheckResult:
    """rule_violations as a check. When a rule fails on Python code that compiles, the import check runs
    too: a missing import can look like a broken rule (a dispatch that "never calls a helper" because
    `helpers` is unbound), and the fix must see both."""
    violations = errors(rule_violations(folder, source_of_truth, launch_args))
    if not violations:
        return CheckResult("rules", True, summary="every rule holds")
    files = list(dict.fromkeys(v.file for v in violations if v.file in GENERATED_FILES))
    evidence = "\n".join(str(v) for v in violations)
    summary = f"{len(violations)} rule violation(s); first: {violations[0]}"
    if any(v.file.endswith(".py") for v in violations) and not any(v.rule == "syntax-error" for v in violations):
        answer = probe_folder(folder, import_only=True)
        if answer.import_failed:
            failure = last_traceback(answer.traceback) or answer.traceback
            excerpts = tail(code_excerpts(failure, folder), 800)
            evidence = (f"{tail(evidence, EVIDENCE_CHARS // 2)}\n\nThe import check fails too, and the rule(s) above "
                        f"may be only its effect: `import {answer.import_failed}` raises:\n"
                        f"{tail(failure, EVIDENCE_CHARS // 3)}" + (f"\n\n{excerpts}" if excerpts else ""))
            # the files the rules name are shown whole; the import failure's own frames come as excerpts
            files = files or list(dict.fromkeys([*implicated_files(failure), f"{answer.import_failed}.py"]))
            last = (failure.strip().splitlines() or [""])[-1]
            summary += f"; `import {answer.import_failed}` fails too: {last[:200]}"
    return CheckResult("rules", False, "guard", summary, tail(evidence, EVIDENCE_CHARS), files)


def run_import_check(folder: Path, timeout_s: float = 300.0, source_of_truth: Path | None = None) -> CheckResult:
    """Phase 1 and the contract on a real game: one fresh interpreter imports helpers, prompt_template and
    train (the first that fails is the evidence), then runs the dynamic rules (rules/probe/), comparing
    with the researcher's own files in `source_of_truth` (default: the folder's copies)."""
    answer = probe_folder(folder, timeout_s, source_of_truth=source_of_truth)
    result = answer.result
    if result.timed_out:
        return _failure("import_check", result, folder, "the import check")
    if answer.import_failed:
        module = answer.import_failed
        failed = _failure("import_check", replace(result, stderr=answer.traceback, returncode=1), folder,
                          f"`import {module}`")
        return replace(failed, files=failed.files or [f"{module}.py"])
    if answer.violations:
        # a patched protected module is changed from the generated files: those are what to show
        files = list(dict.fromkeys(f for v in answer.violations
                                   for f in ([v.file] if v.file in EDITABLE_FILES else GENERATED_PY)))
        evidence = "\n".join(str(v) for v in answer.violations)
        return CheckResult("import_check", False, "contract",
                           f"{len(answer.violations)} contract violation(s) on a real game; first: {answer.violations[0]}",
                           tail(evidence, EVIDENCE_CHARS), files, result.seconds, notes=answer.notes)
    note = f" ({answer.note})" if answer.note else ""
    return CheckResult("import_check", True, summary=f"imported {', '.join(IMPORTED_MODULES)}; the contract holds on "
                                                     f"a real game{note}", seconds=result.seconds, notes=answer.notes)


@dataclass(frozen=True)
class RuntimeCheckSpec:
    model: str  # a local tiny model folder, or the real model where weights are available
    real_model: bool  # a real model must also show varying rewards and some parsed actions
    episodes: int = 10
    group: int = 2  # episodes per group
    turns: int = 3
    token_cap: int = 40  # both generation stages; the tiny agent's longest call takes 32 tokens
    plays: bool = False  # the model writes valid calls (the tiny agent): some actions must parse
    timeout_s: float = 900.0
    cpu_processes: int = 2  # without a GPU, training processes in a gloo group: the distributed path runs too
    slurm_job: bool = True  # run as the batch script of a one-node SLURM job, as `sbatch launch_training.sh` does

    def role_values(self, log_dir: Path) -> dict[str, object]:
        """The short run, by role: the config's roles mapping turns these into its own field names."""
        return {"model": self.model, "episodes_total": self.episodes,
                "updates_total": max(1, -(-self.episodes // self.group)), "group_generations": self.group,
                "episode_turns": self.turns, "thinking_cap": self.token_cap, "action_cap": self.token_cap,
                "accumulation_steps": 1, "checkpointing": False, "sample_every": self.group,
                "eval_every": 1_000_000, "save_every": 1_000_000,
                "log_folder": str(log_dir), "output_folder": str(log_dir / "outputs")}


LOG_NAME = "train.logs"
SAMPLE_LOG_NAME = "Sample_EP.logs"
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "outputs", "*.logs", "job.stdout", "job.stderr")


LOG_SEARCH_DEPTH = 5  # folders below a training run's folder where its log may sit (output/run name/time/...)


def copy_code(folder: Path, code: Path) -> Path:
    """`folder`'s generated files copied to `code`, where a training run launches: config values written for the
    run and whatever it writes beside train.py stay out of the workspace. Logs and outputs are not copied."""
    shutil.copytree(folder, code, ignore=_COPY_IGNORE)
    return code


def find_log(folder: Path, name: str = LOG_NAME) -> Path:
    """Where a training run whose files all lie in `folder` (its copy of the code, the log and output folders it
    was given) wrote `name`: `folder/name`, else the shallowest file of that name at most LOG_SEARCH_DEPTH folders
    below (a template may write into folders named from config values, e.g. OUTPUT/RUN_NAME/), else
    `folder/name` (not written yet: search again later)."""
    direct = folder / name
    level = [folder]
    for _ in range(LOG_SEARCH_DEPTH + 1):
        found = sorted(p / name for p in level if (p / name).is_file())
        if found:
            return found[0]
        level = sorted(child for p in level for child in _folders(p))
    return direct


def _folders(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


@dataclass(frozen=True)
class ShortRun:
    """What a short run left: how it ended, its folder and log, the values it could not set, which training
    processes really started, and what the check inside the training found."""

    result: ExecutionResult
    code: Path
    log_path: Path
    refused: list[str]
    census: Census | None
    expected_processes: int
    training: TrainingFindings | None = None
    judged: bool = False  # the training was asked to judge itself: every process must report


def short_run(folder: Path, spec: RuntimeCheckSpec, roles: ConfigRoles, work_dir: Path, gpus: int = 0,
              source_of_truth: Path | None = None) -> ShortRun:
    """`bash launch_training.sh` shrunk to a few episodes, on a copy of the generated folder (so config
    values written for the check and its outputs never touch the workspace), asked for one process per
    GPU, or `spec.cpu_processes` gloo processes without one. The training process of rank 0 compares
    train.py's GENERIC code with the researcher's template in `source_of_truth` (default: the folder's
    copy) at its end (rules/probe/training.py)."""
    if work_dir.exists():
        shutil.rmtree(work_dir)
    code, log_dir = work_dir / "code", work_dir / "logs"
    copy_code(folder, code)
    log_dir.mkdir(parents=True)
    values, refused = short_run_values(roles.to_fields(spec.role_values(log_dir)), code / "grpo_config.py")
    args = deliver(roles, values, code / "grpo_config.py")
    job = local_job(work_dir / "slurm", code, gpus) if spec.slurm_job else {}
    plan = probe_plan(folder, source_of_truth)
    census = census_env(work_dir / "census", training_plan=plan, path=job.get("PATH"))
    result = execute(["bash", "launch_training.sh", *args], code, timeout_s=spec.timeout_s,
                     env={"CPU_PROCESSES": str(spec.cpu_processes), "MAIN_PORT": str(free_port()), **job, **census})
    return ShortRun(result, code, find_log(work_dir), refused, read_census(work_dir / "census"),
                    gpus or spec.cpu_processes, read_training_check(work_dir / "census"), judged=plan is not None)


def judge_short_run(run: ShortRun, spec: RuntimeCheckSpec, log_format: LogFormat | None = None) -> CheckResult:
    """It must exit cleanly (or only lose a rank to a signal after train.logs said done), log updates with
    finite numbers (read in `log_format`), have run the processes it was asked for, and leave the GENERIC
    code as the template's to its end, in every process (`with_training_findings`)."""
    judged = judge_run(run, spec, log_format)
    ended = run.result.ok or judged.passed  # a run that crashed has its own evidence: its ranks could not report
    missing = unreported(run.census, run.training, run.expected_processes) if run.judged and ended else []
    return with_training_findings(judged, run.training, exited=run.result.ok, missing=missing)


MISSING_CHECK = "training-check-missing"


def with_training_findings(result: CheckResult, findings: TrainingFindings | None, exited: bool = True,
                           missing: list[str] | None = None) -> CheckResult:
    """The violations the check inside the training found fail a run that `exited` cleanly (or passed all the
    same: a rank lost at exit after train.logs said done) as the rules' own failures, with the run's own failure
    after them if it had one (a patch can show as a non-finite loss); a run that crashed keeps its failure (its
    traceback, or the machine's fault), with the violations after it. A process the check did not run in
    (`missing`, census.unreported) is a violation too. What the check could not do is a note in the summary of a
    run that passed, never a failure."""
    violations = [Violation(v["rule"], v["file"], None, v["message"]) for v in (findings.violations if findings else [])]
    violations += [Violation(MISSING_CHECK, "launch_training.sh", None, line) for line in missing or []]
    if not violations:
        if findings is not None and findings.notes and result.passed:
            return replace(result, summary=f"{result.summary}; the check during training: {'; '.join(findings.notes)}")
        return result
    found = "\n".join(str(v) for v in violations)
    if not exited and not result.passed:
        return replace(result, evidence=f"{tail(result.evidence, EVIDENCE_CHARS // 2)}\n\nDuring the training run, "
                                        f"also:\n{tail(found, EVIDENCE_CHARS // 2)}")
    evidence = found if result.passed else (f"{tail(found, EVIDENCE_CHARS // 2)}\n\nThe run itself: {result.summary}"
                                            f"\n{tail(result.evidence, EVIDENCE_CHARS // 3)}")
    files = list(dict.fromkeys([*(v.file for v in violations if v.file in EDITABLE_FILES), "train.py", *result.files]))
    return CheckResult("runtime_check", False, "contract",
                       f"{len(violations)} rule violation(s) during the training run; first: {violations[0]}",
                       tail(evidence, EVIDENCE_CHARS), files, result.seconds, found)


def judge_run(run: ShortRun, spec: RuntimeCheckSpec, log_format: LogFormat | None = None) -> CheckResult:
    """The run alone: its exit, its log and its processes."""
    if not run.result.ok:
        done = any(r.kind == "done" for r in read_log(run.log_path, log_format))
        after_done = exit_after_done(strip_progress_bars(run.result.stderr), done)
        judged = judge_training_log(run.log_path, spec, run.result.seconds, log_format) if after_done else None
        if judged is not None and judged.passed:  # trained and logged done; a rank died at exit: no fix to pay for
            return replace(judged, summary=f"{judged.summary}; {after_done}")
        return _failure("runtime_check", run.result, run.code, "the short training run", logged_done=done)
    judged = judge_training_log(run.log_path, spec, run.result.seconds, log_format)
    if not judged.passed:
        return judged
    if run.census is not None and run.census.processes < run.expected_processes:
        asked = (f"{run.expected_processes} (one per GPU)" if run.expected_processes != spec.cpu_processes
                 else f"{run.expected_processes} (CPU_PROCESSES={spec.cpu_processes}, no GPU)")
        return CheckResult("runtime_check", False, "process_count",
                           f"launch_training.sh started {run.census.processes} training process(es) where {asked} "
                           f"were asked: the distributed path did not run",
                           f"{run.census.describe()}; asked for {asked}.\nThe launch contract: with GPUs one process "
                           f"per GPU; without a GPU, when CPU_PROCESSES is above 1, that many gloo processes "
                           f"(ACCELERATE_USE_CPU=true and --multi_gpu --num_processes \"$CPU_PROCESSES\").\n"
                           f"Processes noted: {json.dumps(run.census.records)}",
                           ["launch_training.sh"], run.result.seconds)
    if run.refused:
        return replace(judged, summary=f"{judged.summary}; the config's validation refused the short run's "
                                       f"{', '.join(run.refused)}, so its own values were kept")
    return judged


def run_runtime_check(folder: Path, spec: RuntimeCheckSpec, roles: ConfigRoles, work_dir: Path,
                      log_format: LogFormat | None = None, gpus: int = 0,
                      source_of_truth: Path | None = None) -> CheckResult:
    """A short run (`short_run`), judged (`judge_short_run`)."""
    return judge_short_run(short_run(folder, spec, roles, work_dir, gpus, source_of_truth), spec, log_format)


def free_port() -> int:
    """A TCP port free right now, for the rendezvous of a check's processes (two checks must not share one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def short_run_values(values: dict[str, object], config_path: Path) -> tuple[dict[str, object], list[str]]:
    """The short run's values that the config's own validation accepts (all of them when it cannot load), judged
    in a fresh interpreter: the generated config never runs in this one."""
    try:
        config = read_config(config_path)
    except ValueError:  # a broken config is the run's evidence, not the orchestrator's crash
        return values, []
    return accepted_values(config, values)


def unset_roles_note(roles: ConfigRoles) -> str:
    """What the short run cannot shrink because the config has no field for it, or ''."""
    missing = [role for role in ("episodes_total", "updates_total", "episode_turns", "thinking_cap", "action_cap")
               if not roles.field_of(role)]
    if roles.field_of("episodes_total") or roles.field_of("updates_total"):
        missing = [role for role in missing if role not in ("episodes_total", "updates_total")]
    return (f"the config has no field for {', '.join(missing)}: the short run keeps the config's own values there"
            if missing else "")


def judge_training_log(path: Path, spec: RuntimeCheckSpec, seconds: float,
                       log_format: LogFormat | None = None) -> CheckResult:
    """A clean exit is not enough: completed updates with finite loss and grad norm, read without a sign of
    misreading (orchestrator.training.logformat.sample_problems), and with a real model also varying rewards and
    some parsed actions."""
    log_format = log_format or LogFormat()
    records = read_log(path, log_format)
    updates = [r for r in records if r.kind == "train"]
    text = path.read_text(errors="replace") if path.exists() else ""
    log_tail = tail(text, EVIDENCE_CHARS)
    read_as = f"read as {log_format.describe()}"
    if not updates:
        return CheckResult("runtime_check", False, "no_updates",
                           f"the run exited 0 but train.logs shows no completed update ({read_as})",
                           f"train.logs:\n{log_tail or '(empty or missing)'}", ["train.py"], seconds)
    problems = sample_problems(records)
    if not any("grad_norm" in r.values for r in updates):
        problems.append(f"none of its {len(updates)} update lines holds a grad norm")
    if problems:
        return CheckResult("runtime_check", False, "unreadable_log",
                           f"train.logs is not read right ({read_as}): {'; '.join(problems)}",
                           f"train.logs:\n{log_tail}\n\nLog them per update (names the monitor reads: loss, "
                           f"grad_norm or gradNorm, reward_mean or reward, kl, lr), one line per update, evaluations "
                           f"told apart.", ["train.py"], seconds)
    bad = [r for r in updates if not all(isinstance(r.values.get(k), float) and math.isfinite(r.values[k])
                                          for k in ("loss", "grad_norm") if k in r.values)]
    if bad:
        return CheckResult("runtime_check", False, "non_finite",
                           f"update {bad[0].values.get('update')} logged a non-finite loss or grad norm",
                           f"train.logs:\n{log_tail}", ["train.py"], seconds)
    if spec.real_model and not any(r.values.get("reward_std", 0.0) > 0 for r in updates):
        return CheckResult("runtime_check", False, "flat_rewards", "rewards never varied within a group",
                           f"train.logs:\n{log_tail}", ["train.py", "prompt_template.py"], seconds)
    invalid = [r.values["invalid_action_rate"] for r in updates if "invalid_action_rate" in r.values]
    if (spec.real_model or spec.plays) and invalid and all(rate >= 1.0 for rate in invalid):
        who = "the model" if spec.real_model else "the tiny agent, which writes valid helper calls most of the time,"
        return CheckResult("runtime_check", False, "no_parsed_actions",
                           f"no action was parsed in any turn, though {who} played; check the action parsing and "
                           f"dispatch in train.py against the brief's {{\"action\", \"agent_id\", \"args\"}} form",
                           f"train.logs:\n{log_tail}", ["train.py", "prompt_template.py"], seconds)
    return CheckResult("runtime_check", True, summary=f"{len(updates)} updates with finite loss and grad norm",
                       seconds=seconds)
