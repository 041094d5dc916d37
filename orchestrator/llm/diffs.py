"""Unified diffs as an edit format: what `git diff` and `diff -u` write, and what many coder models answer with.

    --- a/train.py
    +++ b/train.py
    @@ -40,7 +40,7 @@
     context line
    -old line
    +new line
     context line

Each hunk becomes one edit (a `Hunk`, made an Edit by orchestrator.llm.edits): its context and `-` lines are what to find, its
context and `+` lines what to put there, and its `@@ -N` line number where to look first. The hunk's counts
are not trusted (models get them wrong): a hunk runs to the next hunk, file header or closing fence; a blank
line inside a hunk is a blank context line. Placing it is `patch`'s way (orchestrator.llm.edits): the lines
anywhere in the file, nearest to the stated line; then with up to two context lines dropped at each end.
`--- /dev/null` creates the `+++` file. Paths lose git's `a/` and `b/`; hunks after a `FILE: path` line with no
`---`/`+++` header are that file's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OLD = re.compile(r"^--- (?P<path>\S+)")
_NEW = re.compile(r"^\+\+\+ (?P<path>\S+)")
_HUNK = re.compile(r"^@@+ -(?P<old>\d+)(?:,\d+)? \+\d+(?:,\d+)? @@+|^@@+\s*@@*")
_FENCE = re.compile(r"^\s*`{3,}")
_FILE = re.compile(r"^[\s#*]*FILE:[\s*`]*(?P<path>[^\s*`]+)")
_META = re.compile(r"^(diff --git |index |new file mode |deleted file mode |similarity index |rename |old mode |"
                   r"new mode |Binary files )")


@dataclass(frozen=True)
class Hunk:
    path: str
    search: str  # context and removed lines ("" creates the file)
    replace: str  # context and added lines
    line: int | None = None  # the 1-based line the hunk says it starts at in the old file
    context: tuple[int, int] = (0, 0)  # context lines before and after the change that may be left out (fuzz)


def looks_like_diff(text: str) -> bool:
    """Whether an answer holds a unified diff: a hunk, and a `+++` header or a `FILE:` line naming its file."""
    lines = text.replace("\r\n", "\n").split("\n")
    named = any(_NEW.match(line) or _FILE.match(line) for line in lines)
    return named and any(re.match(r"^@@+ -\d", line) for line in lines)


def parse_unified(text: str) -> tuple[list[Hunk], list[str]]:
    """The answer's hunks as edits, in order, and its problems ("Line N: ...")."""
    lines = text.replace("\r\n", "\n").split("\n")
    edits: list[Hunk] = []
    problems: list[str] = []
    old_path: str | None = None
    path: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if _OLD.match(line) and i + 1 < len(lines) and _NEW.match(lines[i + 1]):
            old_path = _path(_OLD.match(line)["path"])
            path = _path(_NEW.match(lines[i + 1])["path"])
            i += 2
            continue
        named = _FILE.match(line)
        if named:
            old_path, path = None, _path(named["path"])
            i += 1
            continue
        hunk = _HUNK.match(line)
        if hunk:
            if path is None:
                problems.append(f"Line {i + 1}: this hunk has no `--- a/path` and `+++ b/path` lines before it.")
                i += 1
                continue
            body, i = _hunk_body(lines, i + 1)
            if path == "/dev/null":
                problems.append(f"Line {i}: deleting {old_path} is not an edit this run takes; change its lines.")
                continue
            edits.append(_edit(path, body, int(hunk["old"]) if hunk["old"] else None, old_path == "/dev/null"))
            continue
        i += 1
    return edits, problems


def _hunk_body(lines: list[str], start: int) -> tuple[list[str], int]:
    """The hunk's lines from `start` (to the next hunk, header or fence; trailing blank lines left out), and
    the index after them."""
    end = start
    while end < len(lines):
        line = lines[end]
        if (line.startswith("@@") or _FENCE.match(line) or _META.match(line)
                or (_OLD.match(line) and end + 1 < len(lines) and _NEW.match(lines[end + 1]))):
            break
        if line and line[0] not in " +-\\":
            break
        end += 1
    body = lines[start:end]
    while body and not body[-1].strip():
        body.pop()
    return body, end


def _edit(path: str, body: list[str], line: int | None, new_file: bool) -> Hunk:
    search: list[str] = []
    replace: list[str] = []
    marks: list[str] = []
    for raw in body:
        if raw.startswith("\\"):  # "\ No newline at end of file"
            continue
        mark, text = (raw[0], raw[1:]) if raw else (" ", "")
        marks.append(mark)
        if mark in " -":
            search.append(text)
        if mark in " +":
            replace.append(text)
    if new_file:
        return Hunk(path, "", _join(replace))
    changes = [k for k, mark in enumerate(marks) if mark != " "]
    lead = changes[0] if changes else 0
    trail = len(marks) - 1 - changes[-1] if changes else 0
    return Hunk(path, _join(search), _join(replace), line=line, context=(min(lead, 2), min(trail, 2)))


def _path(raw: str) -> str:
    raw = raw.strip().strip("\"'")
    if raw == "/dev/null":
        return raw
    return raw[2:] if raw[:2] in ("a/", "b/") else raw


def _join(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)
