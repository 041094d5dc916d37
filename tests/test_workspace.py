"""Tests for orchestrator.base.workspace on real temporary git repositories."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import git
import pytest

from orchestrator.base.workspace import Attempt, Workspace, WorkspaceError


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide the user's global and system git config, so no identity is configured."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ws(tmp_path: Path, isolated_git: None) -> Workspace:
    workspace = Workspace.open(tmp_path / "workspace")
    workspace.checkout_run_branch("r1")
    return workspace


def test_init_does_not_create_anything(tmp_path: Path) -> None:
    Workspace(tmp_path / "workspace")
    assert not (tmp_path / "workspace").exists()


def test_open_creates_repo_with_initial_commit_and_identity(tmp_path: Path, isolated_git: None) -> None:
    root = tmp_path / "workspace"
    ws = Workspace.open(root)
    repo = git.Repo(root)
    assert [c.message for c in repo.iter_commits()] == ["workspace: init\n"]
    assert ws.head_sha() == repo.head.commit.hexsha
    local = repo.config_reader("repository")
    assert local.get_value("user", "name") == "grpo-orchestrator"
    assert local.get_value("user", "email") == "orchestrator@localhost"
    # Opening again reuses the repository.
    assert Workspace.open(root).head_sha() == ws.head_sha()
    assert len(list(repo.iter_commits())) == 1


def test_open_keeps_a_configured_identity(tmp_path: Path, isolated_git: None) -> None:
    (Path(os.environ["HOME"]) / ".gitconfig").write_text("[user]\n\tname = Someone\n\temail = someone@example.org\n")
    Workspace.open(tmp_path / "workspace")
    local = git.Repo(tmp_path / "workspace").config_reader("repository")
    assert not local.has_option("user", "name")


def test_run_branch_created_then_reused(tmp_path: Path, isolated_git: None) -> None:
    ws = Workspace.open(tmp_path / "workspace")
    base = ws.current_branch()
    ws.checkout_run_branch("r1")
    assert ws.current_branch() == "run/r1"
    ws.write("a.py", "x = 1\n")
    sha = ws.commit(["a.py"], node="n", attempt=1, outcome="ok", tokens=0)
    git.Repo(ws.root).git.checkout(base)
    ws.checkout_run_branch("r1")
    assert ws.current_branch() == "run/r1"
    assert ws.head_sha() == sha


def test_commit_message_and_trailers(ws: Workspace) -> None:
    ws.write("pkg/helpers.py", "def f():\n    return 1\n")
    sha = ws.commit(
        ["pkg/helpers.py"], node="generate_helpers", attempt=2, outcome="failed", tokens=1234, body="pytest: 1 failed"
    )
    assert sha is not None and sha == ws.head_sha()
    commit = git.Repo(ws.root).commit(sha)
    assert commit.message == (
        "generate_helpers attempt 2: failed\n\npytest: 1 failed\n\n"
        "Node: generate_helpers\nAttempt: 2\nOutcome: failed\nTokens: 1234\n"
    )
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=commit.message, capture_output=True, text=True, check=True
    )
    assert parsed.stdout.splitlines() == ["Node: generate_helpers", "Attempt: 2", "Outcome: failed", "Tokens: 1234"]


def test_commit_without_body(ws: Workspace) -> None:
    ws.write("a.py", "x = 1\n")
    sha = ws.commit(["a.py"], node="n", attempt=1, outcome="passed", tokens=5)
    expected = "n attempt 1: passed\n\nNode: n\nAttempt: 1\nOutcome: passed\nTokens: 5\n"
    assert git.Repo(ws.root).commit(sha).message == expected


def test_commit_with_no_change_returns_none(ws: Workspace) -> None:
    ws.write("a.py", "x = 1\n")
    first = ws.commit(["a.py"], node="n", attempt=1, outcome="ok", tokens=0)
    ws.write("a.py", "x = 1\n")
    assert ws.commit(["a.py"], node="n", attempt=2, outcome="ok", tokens=0) is None
    assert ws.commit([], node="n", attempt=3, outcome="ok", tokens=0) is None
    assert ws.head_sha() == first


def test_history_oldest_first_ignores_commits_without_trailers(ws: Workspace) -> None:
    ws.write("a.py", "a = 1\n")
    ws.write("b.py", "b = 1\n")
    s1 = ws.commit(["a.py", "b.py"], node="gen", attempt=1, outcome="failed", tokens=100, body="SyntaxError")
    ws.write("notes.txt", "manual\n")
    repo = git.Repo(ws.root)
    repo.git.add("notes.txt")
    repo.git.commit("-m", "a manual commit\n\nwithout trailers")
    ws.write("a.py", "a = 2\n")
    s2 = ws.commit(["a.py"], node="gen", attempt=2, outcome="passed", tokens=250)
    ws.write("c.py", "c = 1\n")
    s3 = ws.commit(["c.py"], node="check", attempt=1, outcome="passed", tokens=0)

    history = ws.history()
    assert [(a.sha, a.node, a.attempt, a.outcome, a.tokens, a.files) for a in history] == [
        (s1, "gen", 1, "failed", 100, ["a.py", "b.py"]),
        (s2, "gen", 2, "passed", 250, ["a.py"]),
        (s3, "check", 1, "passed", 0, ["c.py"]),
    ]
    assert all(isinstance(a, Attempt) and "T" in a.when for a in history)
    assert history[0].message.startswith("gen attempt 1: failed\n\nSyntaxError\n")
    assert ws.history("run/r1") == history


def test_history_of_another_branch(ws: Workspace) -> None:
    ws.write("a.py", "a = 1\n")
    sha = ws.commit(["a.py"], node="gen", attempt=1, outcome="ok", tokens=1)
    ws.checkout_run_branch("r2")
    ws.write("b.py", "b = 1\n")
    ws.commit(["b.py"], node="gen", attempt=1, outcome="ok", tokens=1)
    assert [a.sha for a in ws.history("run/r1")] == [sha]
    assert len(ws.history()) == 2


def test_deleted_file_is_committed(ws: Workspace) -> None:
    ws.write("old.py", "x = 1\n")
    ws.commit(["old.py"], node="gen", attempt=1, outcome="ok", tokens=0)
    ws.path("old.py").unlink()
    sha = ws.commit(["old.py"], node="gen", attempt=2, outcome="removed", tokens=0)
    assert sha is not None
    assert "old.py" not in [b.path for b in git.Repo(ws.root).commit(sha).tree.traverse()]
    assert ws.history()[-1].files == ["old.py"]


def test_read_write_copy_in(ws: Workspace, tmp_path: Path) -> None:
    assert ws.read("missing.py") is None
    ws.write("deep/dir/f.txt", "héllo\r\nworld")
    assert ws.read("deep/dir/f.txt") == "héllo\r\nworld"
    src = tmp_path / "blob.bin"
    src.write_bytes(bytes(range(256)))
    src.chmod(src.stat().st_mode | stat.S_IXUSR)
    ws.copy_in(src, "assets/blob.bin")
    assert ws.path("assets/blob.bin").read_bytes() == bytes(range(256))
    assert ws.path("assets/blob.bin").stat().st_mode & stat.S_IXUSR
    assert ws.path("a/b.py") == ws.root / "a/b.py"


@pytest.mark.parametrize("rel", ["../escape.py", "/etc/passwd", ".git/config", "a/../../x"])
def test_paths_outside_the_workspace_are_refused(ws: Workspace, rel: str) -> None:
    with pytest.raises(WorkspaceError):
        ws.write(rel, "x")


def test_commit_failure_raises_workspace_error(ws: Workspace) -> None:
    hook = ws.root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'rejected by hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    ws.write("a.py", "x = 1\n")
    with pytest.raises(WorkspaceError) as info:
        ws.commit(["a.py"], node="gen", attempt=1, outcome="ok", tokens=0)
    assert "\n" not in str(info.value)
    assert "git commit failed" in str(info.value)
    assert "rejected by hook" in str(info.value)


def test_locked_index_raises_workspace_error(ws: Workspace) -> None:
    (ws.root / ".git" / "index.lock").write_text("")
    ws.write("a.py", "x = 1\n")
    with pytest.raises(WorkspaceError, match="index.lock") as info:
        ws.commit(["a.py"], node="gen", attempt=1, outcome="ok", tokens=0)
    assert "\n" not in str(info.value)


def test_unknown_branch_and_missing_repo_raise_workspace_error(ws: Workspace, tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        ws.history("run/nope")
    with pytest.raises(WorkspaceError):
        Workspace(tmp_path / "not-a-repo").head_sha()


def test_weights_checkpoints_and_large_binaries_never_enter_the_history(ws: Workspace) -> None:
    """An output folder pointed into the committed log folder: the logs are committed, the model is not."""
    run = ws.root / "training/formal-1"
    (run / "final").mkdir(parents=True)
    (run / "train.logs").write_text("train update=1 loss=0.5\n")
    (run / "final/model.safetensors").write_bytes(b"\0" * 4096)
    (run / "final/tokenizer.json").write_text("{}")
    (run / "optimizer.pt").write_bytes(b"\0" * 64)
    (run / "big.raw").write_bytes(b"\0" * (2 << 20))
    (run / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 512)
    left_out: list[str] = []
    ws.on_left_out = left_out.extend
    assert ws.commit(["training/formal-1"], node="formal_train", attempt=1, outcome="finished", tokens=0)
    tracked = ws.repo.git.ls_files().splitlines()
    assert tracked == ["training/formal-1/plot.png", "training/formal-1/train.logs"]
    assert left_out == ["training/formal-1/final/", "training/formal-1/big.raw"]
    (run / "train.logs").write_text("train update=1 loss=0.5\ntrain update=2 loss=0.4\n")
    assert ws.commit(["training/formal-1"], node="formal_train", attempt=2, outcome="finished", tokens=0)
    assert ws.repo.git.ls_files().splitlines() == tracked
