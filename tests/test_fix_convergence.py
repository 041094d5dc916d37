"""The fix loop with a model that answers only from what each request shows it (a local Messages API):
it repairs a mistake only when the evidence it needs is in the prompt. Every case converges, and the
workspace history holds exactly one commit per recorded attempt."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import git
import pytest
from conftest import REFERENCE, SOURCE_OF_TRUTH, file_answer, roles_reply
from messages_api import PromptDrivenServer, request_text

from orchestrator.rules.helper_docs import helper_readme
from orchestrator.runner import start_run
from orchestrator.sources.template import read_template

STEPS = {"Step 1": ("helpers.py",), "Step 2": ("prompt_template.py",), "Step 3": ("train.py",),
         "Step 4": ("launch_training.sh",)}
FixModel = Callable[[str, str], str]  # (what the last user message asks, everything the request shows) -> answer


def edit(path: str, search: str, replace: str) -> str:
    return f"FILE: {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def line_edit(path: str, shown: str, old: str, new: str) -> str:
    """An edit of the one line of `path`, as the request shows it, that holds `old` (SEARCH takes whole lines)."""
    block = shown[shown.index(f"=== FILE: {path} ==="):]
    line = next(l for l in block.splitlines()[1:] if old in l)
    return edit(path, line, line.replace(old, new))


def model(tmp_path: Path, faults: dict[str, tuple[str, str]], fix: FixModel):
    folder = tmp_path / "answers"
    folder.mkdir()
    for src in REFERENCE.iterdir():
        text = src.read_text()
        if src.name in faults:
            old, new = faults[src.name]
            assert text.count(old) == 1, (src.name, old)
            text = text.replace(old, new)
        (folder / src.name).write_text(text)

    def respond(shown: str, body: dict) -> str:
        last = body["messages"][-1]["content"]
        asked = last if isinstance(last, str) else last[-1]["text"]
        if asked.startswith("Before any code is written"):
            return roles_reply()["text"]
        if asked[:6] in STEPS:
            return file_answer(*STEPS[asked[:6]], folder=folder)
        return fix(asked, shown)
    return respond


def run(project: Path, server: PromptDrivenServer, monkeypatch, until: str = "import_check"):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    return start_run(project, llm="anthropic", run_id="r1", until=until)


def assert_history_is_every_attempt(project: Path, outcome) -> None:
    subjects = git.Repo(project / "workspace").git.log("run/r1", "--format=%s").splitlines()
    assert len(subjects) - 1 == len(outcome.state["attempts"])  # the workspace's init commit aside


def test_a_fix_that_also_changes_a_generic_line_gets_the_template_s_line_back_by_code(project, tmp_path, httpserver,
                                                                                     monkeypatch):
    """Step 3 cannot change GENERIC code (its answer is the CUSTOMIZE sections); a sloppy fix can, and its GENERIC
    change is put back from the template by code in the same attempt: no second fix is paid to retype it."""
    generic = "".join(s.text for s in read_template((SOURCE_OF_TRUTH / "grpo_template.py").read_text())
                      if s.kind == "generic")
    train = (REFERENCE / "train.py").read_text()
    line = next(l for l in generic.splitlines() if len(l) > 100 and l.endswith(")") and train.count(l) == 1)
    changed = line[:-1] + ", )"  # a token more, past column 80: a change in meaning, not only in form
    fault = ("import prompt_template\n", "import prompt_templates\n")

    def fix(asked: str, shown: str) -> str:
        assert "No module named 'prompt_templates'" in asked
        return edit("train.py", "import prompt_templates", "import prompt_template") + edit("train.py", line, changed)

    server = PromptDrivenServer(httpserver, model(tmp_path, {"train.py": fault}, fix))
    outcome = run(project, server, monkeypatch)
    assert outcome.status == "done", outcome.reason
    fixes = [a for a in outcome.state["attempts"] if a["node"] == "fix"]
    assert [(a["check"], a["outcome"]) for a in fixes] == [("import_check", "edited train.py")]
    assert fixes[0]["put_back"].startswith("the edit also changed the 2nd GENERIC section (template line ")
    assert (project / "workspace/generated/train.py").read_text() == train
    assert "were put back from grpo_template.py by code" in (project / "claude.logs").read_text()
    assert_history_is_every_attempt(project, outcome)


def test_an_unknown_action_is_renamed_to_the_helper_the_evidence_lists(project, tmp_path, httpserver, monkeypatch):
    seen: list[str] = []

    def fix(asked: str, shown: str) -> str:
        unknown = re.search(r"offers action '(\w+)'", asked)
        valid = re.search(r"the action helpers are: ([\w, ]+)", asked)
        if not (unknown and valid):
            return "I do not know which names are valid."
        seen.append(shown)
        menu = shown[shown.index("=== FILE: prompt_template.py ==="):]
        menu = menu[:menu.find("=== FILE:", 10)]
        missing = next(n for n in valid.group(1).split(", ") if f'"{n}"' not in menu)
        return line_edit("prompt_template.py", shown, f'"{unknown.group(1)}":', f'"{missing}":')

    faults = {"prompt_template.py": ('    "stay": "{} - do nothing",', '    "wait": "{} - do nothing",')}
    server = PromptDrivenServer(httpserver, model(tmp_path, faults, fix))
    outcome = run(project, server, monkeypatch)
    assert outcome.status == "done", outcome.reason
    menu = (project / "workspace/generated/prompt_template.py").read_text()
    assert '"stay": "{} - do nothing"' in menu and '"wait"' not in menu  # all six actions kept
    assert seen and "=== FILE: train.py ===" not in seen[0]  # the fix prompt shows what the evidence names
    assert_history_is_every_attempt(project, outcome)


STAY_MENU = ('    "stay": "{} - do nothing",', '    "wait": "{} - do nothing",')  # the menu offers a missing helper
WAIT_HELPER = ('def wait(env: CleanupEnv, agent_id: int) -> bool:\n    """Skip this turn (always completed)."""\n'
               '    env.set_action(agent_id, "STAY")\n    return True\n')


def fix_commit(project: Path, outcome) -> git.Commit:
    [attempt] = [a for a in outcome.state["attempts"] if a["node"] == "fix"]
    return git.Repo(project / "workspace").commit(attempt["sha"])


def committed_text(commit: git.Commit, name: str) -> str:
    return (commit.tree / f"generated/{name}").data_stream.read().decode()


@pytest.mark.parametrize("change", ["rename", "add"])
def test_a_fix_that_renames_or_adds_a_helper_commits_the_readme_rendered_from_it(project, tmp_path, httpserver,
                                                                                 monkeypatch, change):
    def fix(asked: str, shown: str) -> str:
        if "offers action 'wait'" not in asked:
            return "?"
        if change == "rename":
            return edit("helpers.py", "def stay(env: CleanupEnv, agent_id: int) -> bool:",
                        "def wait(env: CleanupEnv, agent_id: int) -> bool:")
        private = "def _list_positions(cells: list[Position], here: Position, limit: int = 12) -> str:"
        return edit("helpers.py", private, f"{WAIT_HELPER}\n\n{private}")

    server = PromptDrivenServer(httpserver, model(tmp_path, {"prompt_template.py": STAY_MENU}, fix))
    outcome = run(project, server, monkeypatch, until="rules")
    assert outcome.status == "done", outcome.reason
    commit = fix_commit(project, outcome)
    assert set(commit.stats.files) == {"generated/helpers.py", "generated/helper_readme.md"}
    readme = committed_text(commit, "helper_readme.md")
    assert readme == helper_readme(committed_text(commit, "helpers.py"))
    assert '{"action": "wait", "agent_id": 0, "args": {}}' in readme
    assert ('"action": "stay"' in readme) == (change == "add")
    assert "Rendered again from the edit: helper_readme.md" in commit.message
    assert_history_is_every_attempt(project, outcome)


def test_a_fix_that_edits_the_readme_is_refused_and_sent_to_the_docstrings(project, tmp_path, httpserver,
                                                                           monkeypatch):
    def fix(asked: str, shown: str) -> str:
        if "helper_readme.md is rendered from helpers.py" in asked:
            return edit("helpers.py", "def stay(env: CleanupEnv, agent_id: int) -> bool:",
                        "def wait(env: CleanupEnv, agent_id: int) -> bool:")
        return edit("helper_readme.md", "## `stay(env: CleanupEnv, agent_id: int) -> bool`",
                    "## `wait(env: CleanupEnv, agent_id: int) -> bool`")

    server = PromptDrivenServer(httpserver, model(tmp_path, {"prompt_template.py": STAY_MENU}, fix))
    outcome = run(project, server, monkeypatch, until="rules")
    assert outcome.status == "done", outcome.reason
    prompt = request_text(server.requests[-2])  # the fix's first request: the readme is neither shown nor offered
    assert "files you may edit: helpers.py, prompt_template.py" in prompt and "helper_readme.md" not in prompt
    assert outcome.state["ledger"]["fix"]["calls"] == 2  # refused, then the edit of helpers.py
    readme = committed_text(fix_commit(project, outcome), "helper_readme.md")
    assert "## `wait(" in readme and "## `stay(" not in readme
    assert_history_is_every_attempt(project, outcome)


def test_a_regeneration_by_empty_search_is_refused_then_the_edit_converges(project, tmp_path, httpserver,
                                                                           monkeypatch):
    fault = ("import prompt_template\n", "import prompt_templates\n")

    def fix(asked: str, shown: str) -> str:
        if "would regenerate it" in asked:
            return edit("train.py", "import prompt_templates", "import prompt_template")
        whole = (REFERENCE / "train.py").read_text()
        return f"FILE: train.py\n<<<<<<< SEARCH\n=======\n{whole}>>>>>>> REPLACE\n"

    server = PromptDrivenServer(httpserver, model(tmp_path, {"train.py": fault}, fix))
    outcome = run(project, server, monkeypatch)
    assert outcome.status == "done", outcome.reason
    train = (project / "workspace/generated/train.py").read_text()
    assert train == (REFERENCE / "train.py").read_text()  # not a second copy appended
    assert outcome.state["ledger"]["fix"]["calls"] == 2
    assert_history_is_every_attempt(project, outcome)


@pytest.mark.slow
def test_unusable_and_no_op_fixes_are_commits_too_and_already_tried_shows_them(project, tmp_path, httpserver,
                                                                               monkeypatch):
    fault = ("import prompt_template\n", "import prompt_templates\n")
    answers = iter([
        "Here is my analysis, no edit.", "Still no edit.",  # unusable (asked twice)
        edit("train.py", "import env_move", "import env_move"),  # changes nothing
        edit("train.py", "import prompt_templates", "import prompt_template"),
    ])
    prompts: list[str] = []

    def fix(asked: str, shown: str) -> str:
        prompts.append(asked)
        return next(answers)

    server = PromptDrivenServer(httpserver, model(tmp_path, {"train.py": fault}, fix))
    outcome = run(project, server, monkeypatch)
    assert outcome.status == "done", outcome.reason
    fixes = [a["outcome"] for a in outcome.state["attempts"] if a["node"] == "fix"]
    assert [f.split(":")[0] for f in fixes] == ["unusable edit", "the edit changed nothing", "edited train.py"]
    assert "it was refused because:" in prompts[2] and "No SEARCH/REPLACE block" in prompts[2]
    assert "import env_move\n=======\nimport env_move" in prompts[3]  # the earlier edit, shown again
    assert_history_is_every_attempt(project, outcome)


def test_a_hard_coded_training_value_in_the_launch_script_is_flagged_and_removed(project, tmp_path, httpserver,
                                                                                 monkeypatch):
    call = '--dynamo_backend no train.py "$@"'  # the CPU path's launch

    def fix(asked: str, shown: str) -> str:
        flagged = re.search(r"launch-overrides-args launch_training\.sh: .*? train\.py gets (--\w+ \S+) after", asked)
        return line_edit("launch_training.sh", shown, f'train.py "$@" {flagged.group(1)}', 'train.py "$@"') \
            if flagged else "?"

    faults = {"launch_training.sh": (call, '--dynamo_backend no train.py "$@" --max_action_tokens 4')}
    server = PromptDrivenServer(httpserver, model(tmp_path, faults, fix))
    outcome = run(project, server, monkeypatch, until="rules")
    assert outcome.status == "done", outcome.reason
    assert "--max_action_tokens 4" not in (project / "workspace/generated/launch_training.sh").read_text()
    assert_history_is_every_attempt(project, outcome)


@pytest.mark.slow
@pytest.mark.parametrize("escalations", [2])
def test_a_stubborn_model_is_stopped_after_two_escalated_fixes(project, tmp_path, httpserver, monkeypatch,
                                                              escalations):
    fault = ("import prompt_template\n", "import prompt_templates\n")
    count = iter(range(100))

    def fix(asked: str, shown: str) -> str:
        return edit("train.py", "import env_move", f"import env_move  # note {next(count)}")

    server = PromptDrivenServer(httpserver, model(tmp_path, {"train.py": fault}, fix))
    outcome = run(project, server, monkeypatch)
    assert outcome.status == "blocked" and f"survived {escalations} escalated fixes" in outcome.reason
    fixes = [a for a in outcome.state["attempts"] if a["node"] == "fix"]
    assert [a["escalated"] for a in fixes] == [False, True, True]  # stopped before the 5-attempt budget
    assert_history_is_every_attempt(project, outcome)
