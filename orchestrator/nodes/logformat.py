"""The log format of train.logs: the first guess, or learned once from the runtime check's real log.

The same pattern as the config's roles (nodes/roles.py): the first guess (orchestrator.training.logformat)
reads the common formats for free; when it finds no update in the runtime check's train.logs, or reads
it wrongly, one LLM answer describes the format from train.py's logging code and the log's first lines;
code checks the description on that very sample; it is committed as the workspace's `log_format.json`,
kept in the run state (the formal monitor, `status`, the curves and the review read through it), and
reused by later runs while train.py's logging code is unchanged. What the guess found (which file, its
first lines, what was wrong) is logged before the answer is asked for (`unread_log`), and is the run's
last error when no answer comes.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.base.actionlog import Event
from orchestrator.llm.asking import ask
from orchestrator.llm.json_answer import json_object
from orchestrator.run.limits import ensure_budget
from orchestrator.llm import LLMError
from orchestrator.training.logformat import (ANSWER_KEYS, LOG_FORMAT_FILE, LOGGING_CODE_CHARS, SYNTAXES, LogFormat,
                                    event_files, format_from_answer, log_text, logging_code, logging_code_hash,
                                    read_log, sample_problems, terminal_lines)
from orchestrator.llm.prompts import render
from orchestrator.run.state import GENERATED_DIR, RunContext, RunState, attempt_count

NODE = "log_format"
SAMPLE_LINES = 40
SAMPLE_CHARS = 4000
FIRST_LINES = 3  # of train.logs, in the one-line report of a log the first guess could not read
FIRST_LINE_CHARS = 100
REASON = "read train.logs as this train.py writes it, so the checks, the monitor, status and the curves see its updates"


def _train_text(ctx: RunContext) -> str:
    return ctx.workspace.read(f"{GENERATED_DIR}/train.py") or ""


def known_format(ctx: RunContext) -> LogFormat:
    """The workspace's learned format while train.py's logging code is the one it was learned from, else
    the first guess."""
    stored = ctx.workspace.read(LOG_FORMAT_FILE)
    if stored:
        try:
            log_format = LogFormat.from_dict(json.loads(stored))
        except (ValueError, TypeError):
            return LogFormat()
        if log_format.code_hash == logging_code_hash(_train_text(ctx)):
            return log_format
    return LogFormat()


def validated(text: str, log_path: Path, code_hash: str) -> LogFormat:
    """The answer's format, read on the sample it was shown; ValueError with what the reading found wrong."""
    log_format = format_from_answer(json_object(text, "the log format"))
    problems = sample_problems(read_log(log_path, log_format))
    if problems:
        raise ValueError(f"read with this description, the sample shows: {'; '.join(problems)}")
    return LogFormat.from_dict({**log_format.to_dict(), "code_hash": code_hash})


def _shown_lines(log_path: Path) -> list[str]:
    """train.logs's lines as the reader reads them (a terminal's view: last redraws, no escape codes)."""
    text = log_text(log_path).removesuffix("\n")
    return terminal_lines(text) if text else []


def _sample(log_path: Path) -> tuple[str, int, int]:
    lines = _shown_lines(log_path)
    shown = "\n".join(lines[:SAMPLE_LINES])[:SAMPLE_CHARS]
    return shown or "(train.logs is empty or missing)", min(len(lines), SAMPLE_LINES), len(lines)


def unread_log(log_path: Path, found: str) -> str:
    """One line for the run's last error and claude.logs when the first guess cannot read train.logs, or reads
    it wrongly: what it found, which file, and the file's first lines (cut)."""
    lines = _shown_lines(log_path)
    first = [json.dumps(line if len(line) <= FIRST_LINE_CHARS else line[:FIRST_LINE_CHARS] + "...", ensure_ascii=False)
             for line in lines if line.strip()][:FIRST_LINES]
    where = f"{log_path} ({len(lines)} lines)" if log_path.is_file() else f"{log_path} (missing)"
    return f"{found}; the file: {where}" + (f", its first lines: {' | '.join(first)}" if first else ", empty")


def learn_log_format(state: RunState, ctx: RunContext, log_path: Path, problems: str) -> tuple[LogFormat | None, dict]:
    """One LLM answer describing train.logs, checked on the log at `log_path`; (the format or None when the
    answer stayed unusable, the state update with its spend and attempt). LLMError when no answer came."""
    ensure_budget(state, ctx.limits, NODE)
    train_text = _train_text(ctx)
    code = logging_code(train_text) or train_text
    sample, shown, total = _sample(log_path)
    prompt = render(NODE, ctx.prompts_dir, problems=problems, code=code[:LOGGING_CODE_CHARS], sample=sample,
                    sample_lines=shown, total_lines=total, syntaxes=", ".join(SYNTAXES), keys=list(ANSWER_KEYS),
                    event_files=", ".join(p.name for p in event_files(log_path.parent)))
    ctx.on_event("log_format: asking how train.logs is written")
    code_hash = logging_code_hash(train_text)
    try:
        answer = ask(ctx.llm, [{"role": "user", "content": prompt}], lambda text: validated(text, log_path, code_hash),
                     system=render("system", ctx.prompts_dir), tag=NODE, max_tokens=2000)
    except LLMError as exc:
        ctx.log.record(Event(ctx.run_id, NODE, "llm_log_format", REASON, f"no answer: {exc}"))
        raise
    row = answer.ledger_row()
    tokens = int(row["tokens"])
    attempt = attempt_count(state, NODE) + 1
    log_format = answer.parsed
    if log_format is None:
        outcome = f"malformed: {answer.error.splitlines()[0][:200]}"
        sha = ctx.workspace.commit([], node=NODE, attempt=attempt, outcome=outcome, tokens=tokens,
                                   body=answer.error, allow_empty=True)
    else:
        ctx.workspace.write(LOG_FORMAT_FILE, json.dumps(log_format.to_dict(), indent=2) + "\n")
        outcome = f"learned: {log_format.syntax}"
        sha = ctx.workspace.commit([LOG_FORMAT_FILE], node=NODE, attempt=attempt, outcome=outcome, tokens=tokens,
                                   body=log_format.describe(), allow_empty=True)
    ctx.log.record(Event(ctx.run_id, NODE, "llm_log_format", REASON, f"{outcome}; commit {sha}", tokens=tokens,
                         cost_usd=answer.cost_usd, extra={"sha": sha}))
    ctx.on_event(f"log_format: {outcome}")
    return log_format, {"ledger": {NODE: row}, "attempts": [{"node": NODE, "attempt": attempt, "outcome": outcome,
                                                            "sha": sha, "tokens": tokens, "cost_usd": answer.cost_usd}]}
