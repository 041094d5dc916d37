"""Debug loops with real subprocess checks: the real traceback reaches the fix prompt, the fix is an
edit, it is committed, the check passes; protected files are refused; a hopeless loop ends blocked."""

import os
from pathlib import Path

import git
import pytest
from conftest import REFERENCE, file_answer, roles_reply
from messages_api import ScriptedServer

from orchestrator.checks import RuntimeCheckSpec
from orchestrator.run.journal import Journal
from orchestrator.runner import start_run
from orchestrator.run.state import Limits

GENERATION = [("helpers.py",), ("prompt_template.py",), ("train.py",), ("launch_training.sh",)]
GENERATION_TAGS = ["generate_helpers", "generate_prompts", "generate_train", "generate_launch"]


def generation_replies(tmp_path: Path, **replace: tuple[str, str]) -> list[str]:
    """The roles answer, then the reference answers for Steps 1-4 with `file=(old, new)` text substitutions."""
    folder = tmp_path / "answers"
    folder.mkdir(exist_ok=True)
    for src in REFERENCE.iterdir():
        text = src.read_text()
        if src.name.replace(".", "_") in replace:
            old, new = replace[src.name.replace(".", "_")]
            assert old in text
            text = text.replace(old, new)
        (folder / src.name).write_text(text)
    return [roles_reply()["text"]] + [file_answer(*names, folder=folder) for names in GENERATION]


def edit(path: str, search: str, replace: str) -> str:
    return f"FILE: {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


@pytest.fixture
def anthropic_env(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")

    def point_at(server: ScriptedServer) -> None:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    return point_at


@pytest.fixture
def quick_runtime(tiny_model_dir) -> RuntimeCheckSpec:
    """The runtime check shrunk to one update of the tiny model, in one process (the two-process path is the
    distributed tests', the demo's and the log formats' process-count test's)."""
    return RuntimeCheckSpec(model=str(tiny_model_dir), real_model=False, episodes=2, group=2, turns=2, token_cap=8,
                            cpu_processes=1)


def run(project: Path, runtime_check: RuntimeCheckSpec, until: str = "runtime_check", **kwargs):
    """The pipeline to `until`: a failure the rules or the import check meet, and its fix, need no training run."""
    return start_run(project, llm="anthropic", run_id="r1", runtime_check=runtime_check, until=until, **kwargs)


def fix_commits(project: Path) -> list[str]:
    return [c.message for c in git.Repo(project / "workspace").iter_commits("run/r1") if c.message.startswith("fix")]


@pytest.mark.slow
def test_runtime_error_in_the_tiny_model_run_is_fixed(project, tmp_path, httpserver, anthropic_env, quick_runtime):
    line = "    return env_move.CleanupEnv(width=config.env_width, height=config.env_height, {}=config.num_agents,"
    replies = generation_replies(tmp_path, train_py=(line.format("num_agents"), line.format("agents")))
    replies.append(edit("train.py", line.format("agents"), line.format("num_agents")))
    server = ScriptedServer(httpserver, replies)
    anthropic_env(server)
    outcome = run(project, quick_runtime)
    assert outcome.status == "done", outcome.reason
    fix_prompt = server.prompt_text(5)
    assert "runtime_check" in fix_prompt and "unexpected keyword argument 'agents'" in fix_prompt
    assert "(wrong_signature)" in fix_prompt
    assert fix_commits(project)[0].startswith("fix attempt 1: runtime_check edited train.py")
    assert (project / "runs/r1/runtime_check/logs/train.logs").read_text().count(" train ") == 1


@pytest.mark.slow
def test_guard_violation_is_fixed_by_an_edit(project, tmp_path, httpserver, anthropic_env, quick_runtime):
    menu = '    "stay": "{} - do nothing",\n'
    dance = menu + '    "dance": "{} - celebrate",\n'
    replies = generation_replies(tmp_path, prompt_template_py=(menu, dance))
    replies.append(edit("prompt_template.py", dance.rstrip("\n"), menu.rstrip("\n")))
    server = ScriptedServer(httpserver, replies)
    anthropic_env(server)
    outcome = run(project, quick_runtime, until="import_check")
    assert outcome.status == "done", outcome.reason
    assert "unknown-action prompt_template.py" in server.prompt_text(5)
    assert fix_commits(project)[0].startswith("fix attempt 1: rules edited prompt_template.py")


@pytest.mark.slow
def test_an_import_error_s_traceback_reaches_the_fix_and_an_edit_to_a_protected_file_is_refused(
        project, tmp_path, httpserver, anthropic_env, quick_runtime):
    replies = generation_replies(tmp_path, train_py=("import prompt_template\n", "import prompt_templates\n"))
    replies.append(edit("env_move.py", 'ACTIONS', 'ACTIONS_RENAMED'))
    replies.append(edit("train.py", "import prompt_templates", "import prompt_template"))
    server = ScriptedServer(httpserver, replies)
    anthropic_env(server)
    outcome = run(project, quick_runtime, until="import_check")
    assert outcome.status == "done", outcome.reason
    fix_prompt = server.prompt_text(5)
    assert "ModuleNotFoundError: No module named 'prompt_templates'" in fix_prompt
    assert 'File "' in fix_prompt and "train.py" in fix_prompt  # the real traceback, with its frames
    assert "import_check" in fix_prompt
    assert "refused: env_move.py must never be edited" in server.prompt_text(6)
    assert fix_commits(project)[0].startswith("fix attempt 1: import_check edited train.py")
    assert "import prompt_template\n" in (project / "workspace/generated/train.py").read_text()
    source = (project / "source_of_truth/env_move.py").read_bytes()
    assert (project / "workspace/generated/env_move.py").read_bytes() == source
    history = git.Repo(project / "workspace").git.log("run/r1", "--format=%s", "--", "generated/env_move.py")
    assert history.splitlines() == ["setup attempt 1: source of truth copied"]


@pytest.mark.slow
def test_a_hopeless_loop_escalates_then_ends_blocked(project, tmp_path, httpserver, anthropic_env,
                                                     quick_runtime):
    replies = generation_replies(tmp_path, train_py=("import prompt_template\n", "import prompt_templates\n"))
    useless = edit("train.py", "import env_move", "import env_move  # the game")
    replies += [useless, edit("train.py", "import env_move  # the game", "import env_move  # the grid game")]
    server = ScriptedServer(httpserver, replies)
    anthropic_env(server)
    outcome = run(project, quick_runtime, limits=Limits(max_attempts_per_check=2))
    assert outcome.status == "blocked"
    assert "import_check still failing after 2 fix attempts" in outcome.reason
    assert "The same failure came back after a fix" in server.prompt_text(6)
    assert "=== FILE: helpers.py ===" in server.prompt_text(6)  # escalation shows every file in full
    report = (project / "runs/r1/report.md").read_text()
    assert "blocked" in report and "No module named 'prompt_templates'" in report
    assert len(fix_commits(project)) == 2


LEFTOVER_PLUGIN = "[torch.backends]\nnpu = torch_npu_missing:autoload\n"  # a torch device plugin, half uninstalled


@pytest.mark.slow
def test_machine_faults_stop_the_run_before_any_fix_and_resume_reaches_done(project, tmp_path, monkeypatch,
                                                                             quick_runtime):
    """Real faults of the machine met by the runtime check's real launch, one per run or resume: an empty
    OMP_NUM_THREADS (accelerate cannot read it), a leftover torch plugin whose module is not installed, the
    rendezvous port of a two-node job held by another process. Each ends the run `environment` (exit code 4)
    with a one-line remedy and no LLM call; each resume runs the runtime check again, not a fix; with the
    machine right, the resume reaches done, and the transcript's fix reply is never used."""
    import socket

    import orchestrator.checks
    from conftest import reference_replies, write_transcript

    from orchestrator.base.actionlog import ActionLog
    from orchestrator.runner import resume_run
    from orchestrator.run.runs import run_summary

    fix = {"tag": "fix", "text": edit("train.py", "import json", "import json  # never needed"),
           "usage": {"input_tokens": 9000, "output_tokens": 500}}
    llm = write_transcript(tmp_path / "t.json", reference_replies() + [fix])

    def stopped(outcome, says: str) -> None:
        assert outcome.status == "environment" and outcome.exit_code == 4, outcome.reason
        assert says in outcome.reason
        assert "`python -m orchestrator resume r1` runs runtime_check again" in outcome.reason
        summary = run_summary(project, "r1")
        assert summary["next"] == ["runtime_check"] and says in summary["last_error"]
        assert "\n" not in summary["last_error"] and "fix" not in outcome.state["ledger"]
        assert says in (project / "runs/r1/report.md").read_text()

    monkeypatch.setenv("OMP_NUM_THREADS", "")
    stopped(start_run(project, llm=llm, run_id="r1", runtime_check=quick_runtime, until="runtime_check"),
            "`export OMP_NUM_THREADS=1`")

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    plugin = tmp_path / "plugin" / "npu_plugin-1.0.dist-info"
    plugin.mkdir(parents=True)
    (plugin / "METADATA").write_text("Metadata-Version: 2.1\nName: npu-plugin\nVersion: 1.0\n")
    (plugin / "entry_points.txt").write_text(LEFTOVER_PLUGIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(plugin.parent), os.environ.get("PYTHONPATH", "")]))
    stopped(resume_run(project, "r1"), "the module `torch_npu_missing` is missing")

    monkeypatch.setenv("PYTHONPATH", os.environ["PYTHONPATH"].split(os.pathsep, 1)[1])
    for name, value in (("SLURM_NNODES", "2"), ("GRPO_PER_NODE", "1"), ("SLURM_NODEID", "0")):  # node 0 of two
        monkeypatch.setenv(name, value)
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setattr(orchestrator.checks, "free_port", lambda: port)
        stopped(resume_run(project, "r1"), f"port {port} is held by another process")

    for name in ("SLURM_NNODES", "GRPO_PER_NODE", "SLURM_NODEID"):
        monkeypatch.delenv(name)
    done = resume_run(project, "r1")
    assert done.status == "done", done.reason
    assert "fix" not in done.state["ledger"] and not any(a["node"] == "fix" for a in done.state["attempts"])
    events = ActionLog(project / "claude.logs", project / "runs/r1").events()
    checks = [e.node for e in events if e.action == "check"]
    assert checks == ["rules", "import_check", "runtime_check", "runtime_check", "runtime_check", "runtime_check"]
    machine = [e for e in events if e.action == "environment"]
    assert len(machine) == 3 and all("none is paid for" in e.reason for e in machine)
    answers = Journal(project / "runs/r1/journal.jsonl").records("llm_answer")
    assert [a["tag"] for a in answers] == ["map_roles", *GENERATION_TAGS]
