"""The workspace: a git repository of generated files, one commit per attempt.

This is the only module that writes generated files to disk. Every attempt a node
makes is committed on the run's branch (``run/<run_id>``) with a message whose last
paragraph is a git-trailer block::

    generate_helpers attempt 2: failed

    <free-form body, e.g. the checker's output>

    Node: generate_helpers
    Attempt: 2
    Outcome: failed
    Tokens: 1234

``history()`` reads those trailers back, so the git log *is* the record of attempts.

Model artefacts never enter the history, whatever folder a run's settings point them at: weights and
checkpoint files by their suffix (``WEIGHT_SUFFIXES``, kept in the repository's ``.git/info/exclude``),
a folder that holds one (a checkpoint: its config and tokenizer files go with it), a binary file over
``LARGE_BINARY_BYTES`` and any file over ``LARGE_FILE_BYTES``. ``commit`` leaves them out, adds them
to the exclude file, and tells ``on_left_out``.
Git failures never escape as GitPython exceptions: they become one-line
``WorkspaceError``s.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git
from git.exc import GitCommandError, GitError, ODBError

# Everything GitPython may raise for a broken, locked or missing repository
# (it uses ValueError for unresolvable refs and OSError for filesystem trouble).
ANY_GIT_ERROR: tuple[type[BaseException], ...] = (GitError, ODBError, OSError, ValueError)

_USER_NAME = "grpo-orchestrator"
_USER_EMAIL = "orchestrator@localhost"
_TRAILER_KEYS = ("Node", "Attempt", "Outcome", "Tokens")
_GIT_LOCKS = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "config.lock", "packed-refs.lock")
_TRAILER_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*):\s?(.*)$")

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".gguf", ".msgpack", ".npz",
                   ".pkl", ".distcp")
LARGE_BINARY_BYTES = 1 << 20  # a binary file this large is a model artefact, not a record of an attempt
LARGE_FILE_BYTES = 50 << 20  # nor is any file this large


class WorkspaceError(RuntimeError):
    """A git or filesystem operation on the workspace failed."""


@dataclass(frozen=True)
class Attempt:
    """One attempt commit, parsed from the git log."""

    sha: str
    node: str
    attempt: int
    outcome: str
    tokens: int
    files: list[str]
    message: str  # the full commit message
    when: str  # ISO-8601 commit time


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, GitCommandError):
        stderr = exc.stderr.removeprefix("\n  stderr: '").removesuffix("'")
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        key = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[0] if lines else "")
        sub = exc.command[1] if len(exc.command) > 1 else exc.command[0]
        return f"git {sub} failed (exit {exc.status})" + (f": {key}" if key else "")
    return " ".join(f"{type(exc).__name__}: {exc}".split())


@contextmanager
def _git_errors(what: str) -> Iterator[None]:
    try:
        yield
    except ANY_GIT_ERROR as exc:
        raise WorkspaceError(f"{what}: {_one_line(exc)}") from exc


def _single_line(value: str) -> str:
    return " ".join(value.split())


def _artefact(path: Path) -> bool:
    """A weights file, a large binary or a huge file."""
    try:
        size = path.stat().st_size
        if path.suffix in WEIGHT_SUFFIXES or size > LARGE_FILE_BYTES:
            return True
        if size > LARGE_BINARY_BYTES:
            with path.open("rb") as handle:
                return b"\0" in handle.read(8192)
    except OSError:
        return False
    return False


def _exclude(root: Path, patterns: list[str]) -> None:
    """Add patterns to the repository's own ignore list (.git/info/exclude), each once."""
    path = root / ".git" / "info" / "exclude"
    known = set(path.read_text().splitlines()) if path.exists() else set()
    new = [p for p in patterns if p not in known]
    if new:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write("".join(f"{p}\n" for p in new))


def _parse_trailers(message: str) -> dict[str, str] | None:
    """The ``Key: value`` lines of the message's last paragraph, or None if it has none."""
    paragraphs = message.strip().split("\n\n")
    if len(paragraphs) < 2:
        return None
    trailers = {}
    for line in paragraphs[-1].splitlines():
        match = _TRAILER_LINE.match(line)
        if match is None:
            return None
        trailers[match.group(1)] = match.group(2).strip()
    return trailers


class Workspace:
    """A git working tree under ``root``; construct with ``Workspace.open``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._repo: git.Repo | None = None
        # called with (sha, parent, node, attempt, branch) right after each commit: the run's journal
        self.on_commit: Callable[[str, str, str, int, str], None] | None = None
        # called with the files a commit left out (weights, checkpoints, large binaries), before it commits
        self.on_left_out: Callable[[list[str]], None] | None = None

    @classmethod
    def open(cls, root: Path, *, create: bool = True) -> Workspace:
        """Open the workspace at ``root``, creating the repository (with an initial empty commit) if missing
        and ``create``; without ``create`` a missing or broken repository is a ``WorkspaceError``."""
        root = Path(root)
        if not create and not (root / ".git").exists():
            raise WorkspaceError(f"workspace {root} is missing or is not a git repository")
        with _git_errors(f"cannot open workspace {root}"):
            root.mkdir(parents=True, exist_ok=True)
            repo = git.Repo(root) if (root / ".git").exists() else git.Repo.init(root)
            for key, value in (("name", _USER_NAME), ("email", _USER_EMAIL)):
                # Ask git itself so that global/system config and GIT_CONFIG_* env count.
                try:
                    repo.git.config("--get", f"user.{key}")
                except GitCommandError:
                    repo.git.config(f"user.{key}", value)
            if not repo.head.is_valid() and not repo.git.for_each_ref("--count=1"):  # a new repository
                repo.git.commit("--allow-empty", "--no-gpg-sign", "-m", "workspace: init")
            _exclude(root, [f"*{suffix}" for suffix in WEIGHT_SUFFIXES])
        workspace = cls(root)
        workspace._repo = repo
        return workspace

    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            with _git_errors(f"not a workspace: {self.root}"):
                self._repo = git.Repo(self.root)
        return self._repo

    def checkout_run_branch(self, run_id: str, *, fresh: bool = False, force: bool = False) -> None:
        """Check out ``run/<run_id>``, creating it if it does not exist: from the current HEAD (so a
        re-run reuses earlier outputs) or, when ``fresh``, from the workspace's initial commit.
        ``force`` discards uncommitted changes in the way (a crashed run's half-written files)."""
        branch = f"run/{run_id}"
        with _git_errors(f"cannot check out {branch}"):
            if branch in self.repo.heads:
                if self.repo.head.is_detached or self.repo.active_branch.name != branch:
                    self.repo.git.checkout(*(["-f"] if force else []), branch)
            elif fresh:
                root = self.repo.git.rev_list("--max-parents=0", "HEAD").splitlines()[-1]
                self.repo.git.checkout("-b", branch, root)
            else:
                self.repo.git.checkout("-b", branch)

    def path(self, rel: str) -> Path:
        """``root / rel``; refuses paths that leave the workspace or touch ``.git``."""
        root = self.root.resolve()
        target = (root / rel).resolve()
        if target == root or not target.is_relative_to(root) or target.relative_to(root).parts[0] == ".git":
            raise WorkspaceError(f"path outside the workspace: {rel!r}")
        return self.root / rel

    def read(self, rel: str) -> str | None:
        """The file's UTF-8 text, or None if it does not exist."""
        target = self.path(rel)
        return target.read_bytes().decode("utf-8") if target.is_file() else None

    def write(self, rel: str, text: str) -> None:
        """Write ``text`` as UTF-8 (newlines untranslated), creating parent directories."""
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))

    def copy_in(self, src: Path, rel: str) -> None:
        """Copy the file ``src`` byte for byte (and its permission bits) to ``rel``."""
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, target)

    def commit(
        self, paths: list[str], *, node: str, attempt: int, outcome: str, tokens: int, body: str = "",
        allow_empty: bool = False
    ) -> str | None:
        """Stage ``paths`` (added, modified or deleted) and commit them as one attempt.

        Returns the new commit's sha, or None when the paths hold no change; with ``allow_empty`` an
        attempt that changed nothing (an unusable or no-op edit) is still committed, so that the
        history is every attempt.
        """
        node, outcome = _single_line(node), _single_line(outcome)
        trailers = f"Node: {node}\nAttempt: {attempt}\nOutcome: {outcome}\nTokens: {tokens}\n"
        paragraphs = [f"{node} attempt {attempt}: {outcome}", body.strip("\n"), trailers]
        message = "\n\n".join(p for p in paragraphs if p.strip())
        for rel in paths:
            self.path(rel)
        if not paths and not allow_empty:
            return None
        with _git_errors(f"cannot commit {node} attempt {attempt}"):
            if paths:
                self._leave_out_artefacts(paths)
                self.repo.git.add("--all", "--", *paths)
            if not self.repo.is_dirty(index=True, working_tree=False, untracked_files=False) and not allow_empty:
                return None
            parent = self.repo.head.commit.hexsha
            # verbatim: keep the message byte for byte (no whitespace or comment cleanup).
            self.repo.git.commit("--cleanup=verbatim", "--no-gpg-sign", "--allow-empty", "-m", message)
            sha = self.repo.head.commit.hexsha
        if self.on_commit is not None:
            self.on_commit(sha, parent, node, attempt, self.current_branch())
        return sha

    def _leave_out_artefacts(self, paths: list[str]) -> None:
        """Exclude the model artefacts among the new or changed files under `paths` (see the module's doc)."""
        lines = self.repo.git.status("--porcelain", "--ignored", "--untracked-files=all", "-z", "--",
                                     *paths).split("\0")
        candidates = [self.root / line[3:] for line in lines if line[:2] == "??"]
        weights = [self.root / line[3:] for line in lines if line[:2] in ("??", "!!") and line.endswith(WEIGHT_SUFFIXES)]
        # a checkpoint is a folder below what is committed: the committed folder itself keeps its other files
        folders = sorted({p.parent for p in weights} - {self.root, *(self.root / rel for rel in paths)})
        left = [f"{folder.relative_to(self.root).as_posix()}/" for folder in folders]
        left += [p.relative_to(self.root).as_posix() for p in candidates
                 if not any(p.is_relative_to(folder) for folder in folders) and _artefact(p)]
        if left:
            _exclude(self.root, [f"/{rel}" for rel in left])
            if self.on_left_out is not None:
                self.on_left_out(left)

    def history(self, branch: str | None = None) -> list[Attempt]:
        """The attempt commits on ``branch`` (default: the current one), oldest first."""
        rev = branch or "HEAD"
        with _git_errors(f"cannot read history of {rev}"):
            attempts = []
            for commit in self.repo.iter_commits(rev, reverse=True):
                message = commit.message if isinstance(commit.message, str) else commit.message.decode(errors="replace")
                trailers = _parse_trailers(message)
                if trailers is None or not all(k in trailers for k in _TRAILER_KEYS):
                    continue
                try:
                    attempt, tokens = int(trailers["Attempt"]), int(trailers["Tokens"])
                except ValueError:
                    continue
                attempts.append(
                    Attempt(
                        sha=commit.hexsha,
                        node=trailers["Node"],
                        attempt=attempt,
                        outcome=trailers["Outcome"],
                        tokens=tokens,
                        files=sorted(str(f) for f in commit.stats.files),
                        message=message,
                        when=commit.committed_datetime.isoformat(),
                    )
                )
            return attempts

    def has_branch(self, name: str) -> bool:
        with _git_errors(f"cannot list the branches of {self.root}"):
            return name in self.repo.heads

    def branch_sha(self, name: str) -> str:
        """The commit branch ``name`` points at (a run's final commit: ``run/RUN_ID``)."""
        with _git_errors(f"cannot resolve branch {name}"):
            return self.repo.heads[name].commit.hexsha

    def read_at(self, sha: str, rel: str) -> str | None:
        """The text of ``rel`` in commit ``sha``; None when the commit has no such file."""
        try:
            return self.repo.git.show(f"{sha}:{rel}")
        except ANY_GIT_ERROR:
            return None

    def branch_at(self, name: str, sha: str) -> None:
        """A new branch ``name`` at commit ``sha``, not checked out (a child run's, from its parent's final commit)."""
        with _git_errors(f"cannot create branch {name} at {sha[:10]}"):
            self.repo.create_head(name, sha)

    def damage(self, branch: str) -> str:
        """What is wrong with `branch` and the history it needs, as `git fsck` finds it: its ref, and every commit,
        tree and file of its history present; '' when nothing is. HEAD naming a missing branch is said too."""
        try:
            sha = self.repo.git.rev_parse("--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
        except ANY_GIT_ERROR:
            return f"its branch {branch} is missing or names no commit"
        with _git_errors(f"cannot check the history of {branch}"):
            code, out, err = self.repo.git.fsck("--connectivity-only", "--no-dangling", "--no-progress", sha,
                                                with_extended_output=True, with_exceptions=False)
        if code == 0:
            return ""
        found = [line.strip() for line in f"{out}\n{err}".splitlines()
                 if line.startswith(("missing", "error", "fatal"))]
        return f"the history of {branch} is incomplete ({'; '.join(found[:3]) or f'git fsck exit {code}'})"

    def head_damage(self) -> str:
        """'' when HEAD names a commit; else what it names (a branch that does not exist, say)."""
        try:
            self.repo.git.rev_parse("--verify", "--quiet", "HEAD^{commit}")
            return ""
        except ANY_GIT_ERROR:
            try:
                return f"HEAD names {self.repo.git.symbolic_ref('HEAD')}, which does not exist"
            except ANY_GIT_ERROR:
                return "HEAD names no commit"

    def is_ancestor(self, older: str, newer: str = "HEAD") -> bool:
        """True when ``older`` is a commit of ``newer``'s history (False for an unknown sha too)."""
        try:
            self.repo.git.merge_base("--is-ancestor", older, newer)
            return True
        except ANY_GIT_ERROR:
            return False

    def commits_since(self, sha: str) -> list[str]:
        """The commits after ``sha`` on the current branch, oldest first."""
        with _git_errors(f"cannot list the commits after {sha[:10]}"):
            return self.repo.git.rev_list("--reverse", f"{sha}..HEAD").split()

    def changed_files(self) -> list[str]:
        """Tracked files that differ from HEAD, and untracked files (not ignored), relative to the root."""
        with _git_errors("cannot read the workspace status"):
            lines = self.repo.git.status("--porcelain", "--untracked-files=all", "-z").split("\0")
        return sorted(line[3:] for line in lines if line)

    def restore(self, sha: str) -> list[str]:
        """Put the branch and the working tree back at ``sha``: later commits leave the branch, changes to
        tracked files are undone and untracked files removed. Returns what was discarded (files, and the
        commits as ``commit SHA``)."""
        with _git_errors(f"cannot restore the workspace to {sha[:10]}"):
            dropped = [f"commit {c}" for c in self.repo.git.rev_list(f"{sha}..HEAD").split()]
            changed = self.changed_files()
            self.repo.git.reset("--hard", sha)
            self.repo.git.clean("-f", "-d")
        return dropped + changed

    def remove_stale_locks(self) -> list[str]:
        """Remove the lock files a git process killed mid-write leaves in ``.git`` (``index.lock``,
        ``HEAD.lock``, a branch's ``.lock``, ...), which make every later git write fail. Only for a caller
        that knows no git process is at work here. Returns what was removed, as ``.git/...`` paths."""
        git_dir = self.root / ".git"
        candidates = [git_dir / name for name in _GIT_LOCKS]
        candidates += sorted((git_dir / "refs").rglob("*.lock")) if (git_dir / "refs").is_dir() else []
        removed = []
        for path in candidates:
            if path.is_file():
                path.unlink()
                removed.append(path.relative_to(self.root).as_posix())
        return removed

    def head_sha(self) -> str:
        with _git_errors("cannot resolve HEAD"):
            return self.repo.head.commit.hexsha

    def current_branch(self) -> str:
        """The checked-out branch's name ("HEAD" when detached)."""
        with _git_errors("cannot resolve the current branch"):
            return self.repo.git.rev_parse("--abbrev-ref", "HEAD")
