"""The graph through Steps 0-4: files, commits with trailers, claude.logs, re-runs, budget, resume."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import git
import pytest
from conftest import (GENERATION_STEPS, REFERENCE, SOURCE_OF_TRUTH, file_answer, reference_replies, roles_reply,
                      write_transcript)
from messages_api import answer
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from orchestrator.graph import build_graph
from orchestrator.rules.helper_docs import helper_readme
import orchestrator.runner as runner
from orchestrator.runner import SetupError, resume_run
from orchestrator.run.state import Limits

def start_run(project: Path, **kwargs):
    """Steps 0-4 are under test here: runs stop once generate_launch has passed."""
    return runner.start_run(project, until="generate_launch", **kwargs)


GENERATED = ["helpers.py", "helper_readme.md", "prompt_template.py", "train.py", "launch_training.sh"]


def nodes_in_log(project: Path) -> set[str]:
    return {line.split(" node=")[1].split()[0] for line in (project / "claude.logs").read_text().splitlines()
            if " node=" in line}


def test_run_writes_the_five_files_and_commits_each_attempt(project: Path, tmp_path: Path):
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    assert outcome.status == "done"
    generated = project / "workspace" / "generated"
    for name in GENERATED:
        assert (generated / name).read_text() == (REFERENCE / name).read_text()
    repo = git.Repo(project / "workspace")
    assert repo.active_branch.name == "run/r1"
    messages = [c.message for c in repo.iter_commits("run/r1")][::-1]
    assert messages[0] == "workspace: init\n"
    for node, message in zip(["setup", "map_roles", *GENERATION_STEPS], messages[1:]):
        assert message.startswith(f"{node} attempt 1:")
        assert f"Node: {node}\nAttempt: 1\nOutcome: " in message and "\nTokens: " in message
    assert nodes_in_log(project) >= {"run", "setup", "map_roles", *GENERATION_STEPS, "finish"}
    assert (project / "runs/r1/events.jsonl").exists() and (project / "runs/r1/report.md").exists()


def test_attempt_records_point_at_their_commits(project: Path, tmp_path: Path):
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    repo = git.Repo(project / "workspace")
    for attempt in outcome.state["attempts"]:
        commit = repo.commit(attempt["sha"])
        assert commit.message.startswith(f"{attempt['node']} attempt {attempt['attempt']}")
    events = [json.loads(line) for line in (project / "runs/r1/events.jsonl").read_text().splitlines()]
    logged = {e["extra"]["sha"] for e in events if e["action"] == "llm_generate"}
    assert logged == {a["sha"] for a in outcome.state["attempts"] if a["node"] not in ("setup", "map_roles")}


def test_second_run_over_a_complete_workspace_spends_no_llm_call(project: Path, tmp_path: Path):
    start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    outcome = start_run(project, llm=write_transcript(tmp_path / "empty.json", []), run_id="r2")
    assert outcome.status == "done"
    assert outcome.state["skipped"] == ["map_roles", *GENERATION_STEPS]
    assert outcome.state.get("ledger", {}) == {}
    assert "skipped: helpers.py already exists and passes its checks (0 tokens)" in (project / "claude.logs").read_text()


def committed_files(project: Path, sha: str) -> set[str]:
    return set(git.Repo(project / "workspace").git.show("--name-only", "--format=", sha).split())


def test_step_1_asks_for_helpers_py_only_and_commits_the_readme_rendered_from_it(project: Path, tmp_path: Path):
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    [attempt] = [a for a in outcome.state["attempts"] if a["node"] == "generate_helpers"]
    assert committed_files(project, attempt["sha"]) == {"generated/helpers.py", "generated/helper_readme.md"}
    readme = git.Repo(project / "workspace").git.show(f"{attempt['sha']}:generated/helper_readme.md",
                                                      strip_newline_in_stdout=False)
    assert readme == helper_readme((REFERENCE / "helpers.py").read_text())


@pytest.mark.parametrize("change", ["missing", "stale"])
def test_a_missing_or_stale_readme_is_rendered_again_for_no_tokens(project: Path, tmp_path: Path, change: str):
    """A workspace whose last commit lacks the readme, or holds one an older run had the LLM write."""
    start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    repo = git.Repo(project / "workspace")
    readme = project / "workspace/generated/helper_readme.md"
    if change == "missing":
        repo.index.remove([str(readme)], working_tree=True)
    else:
        readme.write_text("# helpers\n\nan older run's readme, written by the LLM\n")
        repo.index.add([str(readme)])
    repo.index.commit(f"the readme {change}")
    outcome = start_run(project, llm=write_transcript(tmp_path / "empty.json", []), run_id="r2")
    assert outcome.status == "done", outcome.reason
    assert outcome.state["skipped"] == ["map_roles", *GENERATION_STEPS] and outcome.state.get("ledger", {}) == {}
    assert readme.read_text() == (REFERENCE / "helper_readme.md").read_text()
    assert not repo.is_dirty(untracked_files=True)
    [attempt] = outcome.state["attempts"]
    assert (attempt["node"], attempt["outcome"], attempt["tokens"]) == ("generate_helpers", "rendered", 0)
    assert committed_files(project, attempt["sha"]) == {"generated/helper_readme.md"}


def test_a_malformed_answer_is_fed_back_once(project: Path, tmp_path: Path):
    replies = reference_replies()
    replies.insert(2, {"tag": "generate_prompts", "text": "Sure! Here is the file you asked for.",
                       "usage": {"input_tokens": 10, "output_tokens": 10}})
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", replies), run_id="r1")
    assert outcome.status == "done"
    assert outcome.state["ledger"]["generate_prompts"]["calls"] == 2


def history_subjects(project: Path) -> list[str]:
    return git.Repo(project / "workspace").git.log("run/r1", "--format=%s").splitlines()[::-1][1:]  # less init


def test_an_answer_malformed_twice_blocks_the_run_with_a_report_and_a_commit(project: Path, tmp_path: Path):
    bad = {"tag": "generate_helpers", "text": "no files here", "usage": {"input_tokens": 1, "output_tokens": 1}}
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", [roles_reply(), bad, bad]), run_id="r1")
    assert outcome.status == "blocked"
    assert "malformed" in outcome.reason
    assert "blocked" in (project / "runs/r1/report.md").read_text()
    assert history_subjects(project)[-1] == "generate_helpers attempt 1: malformed"
    assert len(history_subjects(project)) == len(outcome.state["attempts"])


def test_a_mapping_unusable_twice_is_a_commit_too(project: Path, tmp_path: Path):
    bad = {"tag": "map_roles", "text": "I am not sure.", "usage": {"input_tokens": 1, "output_tokens": 1}}
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", [bad, bad]), run_id="r1")
    assert outcome.status == "blocked"
    assert history_subjects(project)[-1] == "map_roles attempt 1: malformed"
    assert len(history_subjects(project)) == len(outcome.state["attempts"])


def test_one_re_ask_names_every_problem_of_a_generation_answer(project: Path, httpserver: HTTPServer, monkeypatch):
    """A model that repairs only what it is told: Step 1 puts prose between a FILE line and its fence and
    sends helpers.py twice; Step 3 sends CUSTOMIZE 1 twice and leaves CUSTOMIZE 2 out. One re-ask each
    names all of it, and both steps converge."""
    asked: dict[str, list[str]] = {"Step 1": [], "Step 3": []}

    def respond(request: Request) -> Response:
        body = json.loads(request.data)
        first, last = body["messages"][0]["content"][-1]["text"], body["messages"][-1]["content"]
        told = last if len(body["messages"]) > 1 else ""
        step = first[:6]
        if step in asked:
            asked[step].append(told)
        if step == "Step 1":
            helpers = file_answer("helpers.py")
            if "must be followed directly by the code fence" not in told:
                helpers = helpers.replace("\n````\n", "\nHere it is:\n````\n", 1)
            again = "" if "helpers.py is sent twice" in told else file_answer("helpers.py")
            return answer(body, helpers + again)
        if step == "Step 3":
            sections = file_answer("train.py").split("\nCUSTOMIZE ")
            if "CUSTOMIZE 1 is sent twice" not in told:
                sections.insert(1, sections[0].removeprefix("CUSTOMIZE "))
            if "CUSTOMIZE 2 is missing" not in told:
                sections = [s for s in sections if not s.startswith("2:")]
            return answer(body, "\nCUSTOMIZE ".join(sections))
        return _answer(request)

    httpserver.expect_request("/v1/messages", method="POST").respond_with_handler(respond)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", httpserver.url_for(""))
    outcome = start_run(project, llm="anthropic", run_id="r1")
    assert outcome.status == "done", outcome.reason
    assert asked["Step 1"][1].startswith("Your answer could not be used: 2 format error(s)")
    assert asked["Step 3"][1].startswith("Your answer could not be used: 2 format error(s)")
    second = [n for n, line in enumerate((SOURCE_OF_TRUTH / "grpo_template.py").read_text().splitlines(), 1)
              if line.startswith("# === CUSTOMIZE ===")][1]
    assert f"CUSTOMIZE 2: # === CUSTOMIZE ===   (grpo_template.py line {second}" in asked["Step 3"][1]
    for name in ("helpers.py", "helper_readme.md", "train.py"):
        assert (project / "workspace/generated" / name).read_text() == (REFERENCE / name).read_text()
    assert outcome.state["ledger"]["generate_helpers"]["calls"] == outcome.state["ledger"]["generate_train"]["calls"] == 2
    assert len(history_subjects(project)) == len(outcome.state["attempts"])


def test_budget_stops_at_a_node_boundary_and_resume_with_a_higher_cap_continues(project: Path, tmp_path: Path):
    first = write_transcript(tmp_path / "first.json", reference_replies()[:1])
    outcome = start_run(project, llm=first, run_id="r1", limits=Limits(max_cost_usd=0.001))
    assert outcome.status == "budget" and "generate_helpers" in outcome.reason
    assert not (project / "workspace/generated/helpers.py").exists()
    # the rest of the transcript starts at generate_helpers: a redone map_roles would be out of step
    rest = write_transcript(tmp_path / "rest.json", reference_replies()[1:])
    resumed = resume_run(project, "r1", max_cost_usd=10.0, llm=rest)
    assert resumed.status == "done"
    assert resumed.state["ledger"]["map_roles"]["calls"] == 1


def test_a_read_only_folder_the_orchestrator_writes_ends_environment_and_resume_continues(project: Path,
                                                                                           tmp_path: Path,
                                                                                           read_only_mount):
    """A fault of the machine met by the orchestrator itself (setup copies the source of truth into a folder on a
    read-only file system) is the machine's too: status `environment`, the line to act on, no crash.log; once
    the folder is writable, resume runs the node again."""
    generated = read_only_mount(project / "workspace" / "generated")
    outcome = start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    assert outcome.status == "environment" and outcome.exit_code == 4, outcome.reason
    assert f"{generated}/" in outcome.reason and "is on a read-only file system: remount it writable" in outcome.reason
    assert not (project / "runs/r1/crash.log").exists()
    assert "read-only file system" in (project / "runs/r1/state.json").read_text()  # `status` shows it as last error
    subprocess.run(["umount", str(generated)], check=True)
    resumed = resume_run(project, "r1")
    assert resumed.status == "done", resumed.reason
    assert (project / "workspace/generated/helpers.py").read_text() == (REFERENCE / "helpers.py").read_text()


def test_resume_from_a_node_redoes_only_that_node_and_what_follows(project: Path, tmp_path: Path):
    start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    (project / "workspace/generated/train.py").unlink()  # so the step does not skip
    again = write_transcript(tmp_path / "again.json", reference_replies(("generate_train",))[1:])
    outcome = resume_run(project, "r1", from_node="generate_train", llm=again)
    assert outcome.status == "done"
    assert outcome.state["ledger"]["generate_train"]["calls"] == 2
    assert outcome.state["ledger"]["generate_helpers"]["calls"] == 1
    assert "generate_launch" in outcome.state["skipped"]


def test_resume_from_an_unknown_node_is_a_clear_error(project: Path, tmp_path: Path):
    start_run(project, llm=write_transcript(tmp_path / "t.json", reference_replies()), run_id="r1")
    with pytest.raises(SetupError, match="never reached node 'nope'"):
        resume_run(project, "r1", from_node="nope")


def test_missing_source_of_truth_file_is_one_clear_line(project: Path):
    (project / "source_of_truth/grpo_template.py").unlink()
    result = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--llm", "replay:x.json",
                             "--project-root", str(project)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "grpo_template.py missing" in result.stdout
    assert not (project / "runs").exists() and not (project / "workspace").exists()


def test_missing_api_key_says_how_to_set_it_and_writes_nothing(project: Path):
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    result = subprocess.run([sys.executable, "-m", "orchestrator", "run", "--project-root", str(project)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY is not set" in result.stdout and "demo" in result.stdout
    assert not (project / "runs").exists()


def _answer(request: Request) -> Response:
    body = json.loads(request.data)
    tag = body["messages"][0]["content"][-1]["text"].split(":", 1)[0]
    if tag == "Before any code is written":
        return answer(body, roles_reply()["text"])
    step = {"Step 1": "generate_helpers", "Step 2": "generate_prompts", "Step 3": "generate_train",
            "Step 4": "generate_launch"}[tag]
    return answer(body, file_answer(*GENERATION_STEPS[step]))


@pytest.mark.slow
def test_resume_after_the_process_is_killed_mid_run(project: Path, httpserver: HTTPServer):
    """A real SIGKILL while generate_train waits for the API; resume redoes only generate_train onwards."""
    requests: list[str] = []
    child: dict[str, subprocess.Popen] = {}

    def handler(request: Request) -> Response:
        response = _answer(request)
        requests.append(request.data)
        if len(requests) == 4:
            child["proc"].send_signal(signal.SIGKILL)
            child["proc"].wait()
        return response

    httpserver.expect_request("/v1/messages", method="POST").respond_with_handler(handler)
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": httpserver.url_for("")}
    command = [sys.executable, "-m", "orchestrator", "run", "--run-id", "r1", "--project-root", str(project),
               "--until", "generate_launch"]
    child["proc"] = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert child["proc"].wait(timeout=120) == -signal.SIGKILL
    assert not (project / "workspace/generated/train.py").exists()

    resumed = subprocess.run([sys.executable, "-m", "orchestrator", "resume", "r1", "--project-root", str(project)],
                             env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(requests) == 6  # roles, helpers, prompts, train (killed), then train again and launch
    history = subprocess.run([sys.executable, "-m", "orchestrator", "history", "r1", "--project-root", str(project)],
                             capture_output=True, text=True).stdout
    assert history.count("generate_helpers") == 1 and history.count("generate_train") == 1


def test_graph_shape_is_stable():
    mermaid = build_graph().get_graph().draw_mermaid()
    edges = sorted(line.strip().rstrip(";") for line in mermaid.splitlines() if "->" in line)
    chain = ["setup", "map_roles", "generate_helpers", "generate_prompts", "generate_train", "generate_launch", "rules",
             "import_check", "runtime_check", "formal_train", "review"]
    expected = ["__start__ --> setup", "finish --> __end__", "review --> finish", "fix -.-> rules", "fix -.-> finish",
                "formal_train -.-> formal_train"]
    expected += [f"{a} -.-> {b}" for a, b in zip(chain, chain[1:]) if a != "review"]
    expected += [f"{node} -.-> finish" for node in chain[:-1]]
    expected += [f"{check} -.-> fix" for check in ("rules", "import_check", "runtime_check", "formal_train")]
    # a child run (orchestrator.ideas): its idea applied before the checks, both arms' seeds trained before the review
    expected += ["generate_launch -.-> apply_idea", "apply_idea -.-> rules", "apply_idea -.-> finish",
                 "formal_train -.-> seed_runs", "seed_runs -.-> review", "seed_runs -.-> finish"]
    assert edges == sorted(expected)
