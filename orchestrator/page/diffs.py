"""Each attempt's edit as git sees it: the unified diff of its commit in the workspace, abridged.

A commit is read once per process (commits never change): `git show --numstat` lists its files, and
one `git show` gives the patch of those whose change is small enough to read; bigger ones (a formal
run's logs, a whole generated file past the line budget) are listed with their counts only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import git
from markupsafe import Markup

from orchestrator.base.workspace import ANY_GIT_ERROR

FILE_LINES = 1500  # a file whose change has more lines is listed, not shown (a whole generated train.py is shown)
COMMIT_LINES = 3000  # lines of patch shown per commit


@dataclass(frozen=True)
class FileChange:
    path: str
    added: int | None  # None: binary
    deleted: int | None
    shown: bool


@dataclass(frozen=True)
class CommitDiff:
    files: tuple[FileChange, ...] = ()
    html: Markup = Markup("")  # one escaped <span class="KIND"> per patch line: file, hunk, add, del, ctx or meta
    error: str = ""

    @property
    def changed_lines(self) -> int:
        return sum((f.added or 0) + (f.deleted or 0) for f in self.files)


def line_kind(line: str) -> str:
    if line.startswith("diff --git"):
        return "file"
    if line.startswith(("+++", "---", "index ", "new file", "deleted file", "similarity", "rename ", "old mode",
                        "new mode", "Binary files")):
        return "meta"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def _count(text: str) -> int | None:
    return None if text == "-" else int(text)


@functools.lru_cache(maxsize=512)
def commit_diff(workspace: str, sha: str) -> CommitDiff:
    """The diff of commit `sha` in the git repository at `workspace`."""
    return _diff(workspace, ["show", "--format="], [sha], [], f"git show {sha[:10]}")


def range_diff(workspace: str, base: str, head: str, under: str = "") -> CommitDiff:
    """The diff from commit `base` to commit `head` (two runs' final commits), of the files below `under`."""
    return _diff(workspace, ["diff"], [base, head], [under] if under else [], f"git diff {base[:10]} {head[:10]}")


def _diff(workspace: str, command: list[str], commits: list[str], paths: list[str], what: str) -> CommitDiff:
    """`git COMMAND --numstat` lists the files; one `--patch` gives those whose change is small enough to read."""
    try:
        git_ = git.Repo(workspace).git
        stats = git_.execute(["git", *command, "--numstat", "--no-renames", *commits, "--", *paths]).splitlines()
        files, budget = [], COMMIT_LINES
        for row in stats:
            added, deleted, path = row.split("\t", 2)
            size = (_count(added) or 0) + (_count(deleted) or 0)
            shown = _count(added) is not None and size <= min(FILE_LINES, budget)
            budget -= size if shown else 0
            files.append(FileChange(path, _count(added), _count(deleted), shown))
        wanted = [f.path for f in files if f.shown]
        patch = (git_.execute(["git", *command, "--patch", "--no-color", "--no-renames", *commits, "--", *wanted])
                 if wanted else "")
    except ANY_GIT_ERROR as exc:
        return CommitDiff(error=f"{what} failed: {' '.join(str(exc).split())[:300]}")
    # escaped once per diff here, not at every rewrite of the page: a generated train.py is a thousand lines
    line_html = Markup('<span class="{}">{}</span>')
    return CommitDiff(tuple(files), Markup("").join(line_html.format(line_kind(line), line)
                                                    for line in patch.splitlines()))
