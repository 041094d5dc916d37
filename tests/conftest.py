"""Shared fixtures: the tiny model (built once per session) and the reference generated set."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# one torch thread for the tests and their subprocesses, set before torch is imported: on a small shared machine
# it is measured faster than two (benchmarks/README.md, "Threads"); an OMP_NUM_THREADS already set wins
os.environ.setdefault("OMP_NUM_THREADS", "1")
# the tiny agents built during the session (one per game and helper set), shared by every test project root, the
# subprocesses they start and the xdist workers (which inherit it from the controller); point it at a lasting folder
# to keep them between sessions
os.environ.setdefault("ORCHESTRATOR_MODELS_DIR", tempfile.mkdtemp(prefix="orchestrator-models-"))

ROOT = Path(__file__).resolve().parents[1]
SOURCE_OF_TRUTH = ROOT / "source_of_truth"
REFERENCE = ROOT / "examples" / "cleanup" / "reference_generated"


_AGENT_BUILDS: list[subprocess.Popen] = []
_BUILD_AGENT = ("import sys; from pathlib import Path; from orchestrator.tiny.agent import local_tiny_agent; "
                "local_tiny_agent(Path(sys.argv[1]), Path(sys.argv[2]))")


@functools.cache
def _shared_unit(module_path: str) -> str | None:
    """The unit a test module's tests are scheduled as together, if any: the one local SLURM cluster's tests share
    it (one unit for all), a module with a module-scoped fixture shares that (one unit per module)."""
    text = (ROOT / module_path).read_text()
    if "slurm_cluster.requires_cluster" in text:
        return "slurm"
    return module_path if 'scope="module"' in text else None


def work_unit(nodeid: str) -> str:
    """What a worker runs as one piece: the shared unit of its module, or the test alone."""
    return _shared_unit(nodeid.split("::", 1)[0]) or nodeid


class SharedFixtureScheduling(LoadScopeScheduling):
    """`--dist=load` that keeps each shared unit on one worker (xdist's loadgroup cannot: with pytest 9 the group
    suffix it writes to `_nodeid` never reaches the node ids it schedules)."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SharedFixtureScheduling | None:
    return SharedFixtureScheduling(config, log) if config.getoption("dist") == "load" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order the workers take units in: the slow ones first (those that need a tiny agent after the others,
    while it is built), the quick ones fill the end."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(work_unit(item.nodeid), []).append(item)

    def rank(unit: list[pytest.Item]) -> int:
        if not any(item.get_closest_marker("slow") for item in unit):
            return 2
        return 1 if any(item.get_closest_marker("tiny_agent") for item in unit) else 0

    items[:] = [item for unit in sorted(units.values(), key=rank) for item in unit]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the tiny agents that the collected tests mark (`@pytest.mark.tiny_agent(GAME)`), one
    background process each: the builds (a minute or two each) overlap the tests before them, and a test that
    needs an agent waits on its build lock instead of building it again. Every xdist worker collects the same
    tests: the first one starts the builds, for all of them."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    games = sorted({marker.args[0] for item in session.items for marker in item.iter_markers("tiny_agent")})
    for game in games:
        folder, _ = example_generated(Path(tempfile.mkdtemp(prefix="agent-build-")), game)
        _AGENT_BUILDS.append(subprocess.Popen([sys.executable, "-c", _BUILD_AGENT, str(ROOT), str(folder)], cwd=ROOT,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for build in _AGENT_BUILDS:  # a session that ended early does not leave a build running
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from orchestrator.tiny.model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def copy_generated_set(dest: Path) -> Path:
    """The source of truth plus the reference generated files, as a run's generated/ folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in [*SOURCE_OF_TRUTH.glob("*.py"), *REFERENCE.iterdir()]:
        shutil.copy2(src, dest / src.name)
    return dest


def example_generated(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """An example's source of truth plus its reference generated set, as a generated/ folder; and its
    source-of-truth folder."""
    from orchestrator.demo import example

    ex = example(name)
    folder = tmp_path / name
    folder.mkdir()
    for src in [*ex.source_of_truth.glob("*.py"), *ex.reference.iterdir()]:
        shutil.copy2(src, folder / src.name)
    return folder, ex.source_of_truth


def scripted_spread(module: str) -> str:
    """Lines for a script that imported a template as `module`: the returns its `group_advantages` normalises get 0,
    1, 2, ... added down each group (G, A), so the advantages, the loss's gradient and the parameters' change are
    never zero, whatever tokens this CPU samples; two runs of one script get the same spread."""
    return (f"import torch\n"
            f"_group_advantages = {module}.group_advantages\n"
            f"{module}.group_advantages = lambda returns, *a, **k: _group_advantages(\n"
            f"    returns + torch.arange(returns.shape[0], dtype=returns.dtype).unsqueeze(-1), *a, **k)\n")


def edit_file(folder: Path, name: str, change) -> None:
    """Apply `change` (text -> text) to folder/name; a mutant that changes nothing is a broken test."""
    path = folder / name
    before = path.read_text()
    after = change(before)
    assert after != before, f"the mutant left {name} unchanged"
    path.write_text(after)


def into_first_hole(code: str) -> Callable[[Path], None]:
    """A mutant: `code` at the top of train.py's first module-level CUSTOMIZE section."""
    from orchestrator.sources.template import read_sections

    def mutate(folder: Path) -> None:
        def change(text: str) -> str:
            hole = next(s for s in read_sections(text) if s.kind == "customize" and not s.text[:1].isspace())
            lines = text.split("\n")
            lines.insert(hole.start_line, code)
            return "\n".join(lines)
        edit_file(folder, "train.py", change)
    return mutate


@pytest.fixture
def read_only_mount():
    """Mounts an empty read-only tmpfs on a folder, a real read-only file system (needs root: the test is skipped
    elsewhere); each is unmounted at the end, if the test has not done so."""
    mounted: list[Path] = []

    def mount(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                                  capture_output=True, text=True)
        except OSError as exc:
            pytest.skip(f"no mount here ({exc})")
        if done.returncode != 0:
            pytest.skip(f"a read-only mount needs root: {done.stderr.strip()}")
        mounted.append(folder)
        return folder
    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], capture_output=True)


@pytest.fixture
def generated_dir(tmp_path: Path) -> Path:
    return copy_generated_set(tmp_path / "generated")


@pytest.fixture(scope="session")
def reference_train():
    """The reference train.py imported as a module (its GENERIC part is the template's)."""
    for folder in (SOURCE_OF_TRUTH, REFERENCE):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    import train

    return train


GENERATION_STEPS = {
    "generate_helpers": ("helpers.py",),  # helper_readme.md is rendered from it
    "generate_prompts": ("prompt_template.py",),
    "generate_train": ("train.py",),
    "generate_launch": ("launch_training.sh",),
}


def file_answer(*names: str, folder: Path = REFERENCE) -> str:
    """A generation step's answer with the reference files' contents: whole files, except train.py, which
    Step 3 answers with its CUSTOMIZE sections."""
    from orchestrator.llm.edits import sections_answer

    if names == ("train.py",):
        return sections_answer((folder / "train.py").read_text())
    return "\n".join(f"FILE: {name}\n````\n{(folder / name).read_text()}````\n" for name in names)


def roles_reply() -> dict:
    """The map_roles answer for the Cleanup stand-in (the demo's recorded one)."""
    import json

    from orchestrator.demo import example, recorded_roles

    return {"tag": "map_roles", "text": f"```json\n{json.dumps(recorded_roles(example('cleanup')))}\n```",
            "usage": {"input_tokens": 3000, "output_tokens": 300}}


def reference_replies(steps=tuple(GENERATION_STEPS)) -> list[dict]:
    """map_roles, then the generation steps answered with the reference files."""
    return [roles_reply()] + [{"tag": step, "text": file_answer(*GENERATION_STEPS[step]),
                               "usage": {"input_tokens": 4000, "output_tokens": 1000}} for step in steps]


def write_transcript(path: Path, replies: list[dict]) -> str:
    import json

    path.write_text(json.dumps({"replies": replies}))
    return f"replay:{path}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root holding only source_of_truth/, as a researcher would start."""
    root = tmp_path / "project"
    shutil.copytree(SOURCE_OF_TRUTH, root / "source_of_truth", ignore=shutil.ignore_patterns("__pycache__"))
    return root
