"""`python -m orchestrator try RUN IDEA`: one idea of a run's review, tried as a child run and compared honestly.

The child is a run like any other, with a lineage (orchestrator.ideas.lineage, `runs/CHILD/idea.json`): its
workspace branch starts at the parent's final commit, so the generation steps find their outputs and skip;
`apply_idea` asks for the edits that implement the idea, and the checks run after them with their fix loop; the
formal run trains with the parent's plan (the values the idea changed in grpo_config.py excepted), the same length
and the same seed; `seed_runs` then trains both arms on the other seeds and writes the verdict. The child's own
caps (--max-cost, --max-tokens) hold for everything it spends.

Nothing is written or spent before the request is known to be sound: the parent exists and its formal run
finished; the idea exists (a number or heading of the parent's future_improvements.md, or free text); the seeds can
be set (the config has a seed field when more than one is asked for); the LLM answers (a replay parent's children
replay the parent transcript's recorded answers for their idea, as the demo records them).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from orchestrator.base.runlock import WorkspaceLock
from orchestrator.base.workspace import Workspace, WorkspaceError
from orchestrator.checks import RuntimeCheckSpec
from orchestrator.ideas.arms import formal_folder, planned_seed
from orchestrator.ideas.catalog import IDEAS_FILE, Idea, IdeaError, choose, free_idea
from orchestrator.ideas.lineage import Lineage
from orchestrator.run.runs import RunSettings, SetupError, check_run_id, llm_paths, read_state
from orchestrator.base.files import from_disk
from orchestrator.run.state import GENERATED_DIR, Limits
from orchestrator.runner import RunOutcome, check_limits, check_source_of_truth, checked_llm, start_run
from orchestrator.training.formal import FormalSpec

DEFAULT_SEEDS = 3
SEED_STEP = 10_007  # the seeds after the parent's: s, s + 10007, s + 2 x 10007, ... (a template that seeds its
# games from the seed and the update shares no game between arms' seeds for 10,007 updates)
IDEAS_KEY = "ideas"  # a replay transcript's recorded answers for its run's ideas, beside its replies (the demo's)
IDEA_KEY = "idea"  # such an answer's key: the title of the idea it implements
SERVER_LIMITS = ("max_answer_tokens", "max_context_tokens")  # the LLM server's, kept with the parent's backend
CHILD_TAGS = ("review",)  # what a child asks besides its idea's edits, played back from the parent's transcript


def seed_values(first: int, count: int) -> tuple[int, ...]:
    return tuple(first + i * SEED_STEP for i in range(count))


def finished_formal(project_root: Path, parent: str) -> Path:
    """The parent's last formal attempt's folder, when it finished; SetupError otherwise."""
    folder = formal_folder(project_root, parent)
    if folder is None:
        state = read_state(project_root / "runs" / parent) or {}
        formal = [a for a in state.get("attempts") or [] if a.get("node") == "formal_train"]
        reached = f"its last formal run ended {formal[-1]['outcome']}" if formal else "it never reached formal_train"
        raise SetupError(f"run {parent} cannot be a parent ({reached}; status {state.get('status', '?')}): try an "
                         f"idea of a run whose formal run finished")
    return folder


def the_idea(project_root: Path, parent: str, key: str | None, text: str | None) -> Idea:
    if (key is None) == (text is None):
        raise SetupError("give the idea by its number or heading (python -m orchestrator try RUN 2), or as text "
                         "(--idea \"...\"), not both")
    try:
        return free_idea(text) if text is not None else choose(project_root / "runs" / parent / IDEAS_FILE, key or "")
    except IdeaError as exc:
        raise SetupError(str(exc)) from exc


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def child_transcript(parent_llm: str, project_root: Path, idea: Idea) -> dict[str, Any] | None:
    """For a parent that replays a transcript: the child's, from the parent transcript's recorded answers for this
    idea and its replies for what a child asks besides (the review); None for a parent with a live backend."""
    kind, _, path = llm_paths(parent_llm, from_disk, project_root).partition(":")
    if kind != "replay":
        return None
    try:
        data = json.loads(Path(path).read_text())
        replies, answers = list(data["replies"]), list(data.get(IDEAS_KEY) or [])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SetupError(f"the parent's transcript {path} cannot be read ({exc}); give a backend with --llm") from exc
    recorded = [r for r in answers if _same(str(r.get(IDEA_KEY, "")), idea.title)]
    if not recorded:
        raise SetupError(f"the parent replays {path}, which records no answer for {idea.label}; give a live backend "
                         f"with --llm (e.g. --llm anthropic)")
    return {"replies": recorded + [r for r in replies if r.get("tag") in CHILD_TAGS]}


def child_id(project_root: Path, parent: str, idea: Idea) -> str:
    """`PARENT-idea-N` (or the free idea's first words), numbered on where that run exists."""
    words = re.sub(r"[^a-z0-9]+", "-", idea.title.lower()).strip("-")[:30]
    stem = f"{parent}-idea-{idea.number or words}"
    taken = {p.name for p in (project_root / "runs").iterdir()} if (project_root / "runs").is_dir() else set()
    candidate, k = stem, 1
    while candidate in taken:
        k += 1
        candidate = f"{stem}-{k}"
    return candidate


def try_idea(project_root: Path, parent: str, idea_key: str | None = None, idea_text: str | None = None, *,
             seeds: int = DEFAULT_SEEDS, llm: str | None = None, limits: Limits = Limits(), run_id: str | None = None,
             on_event: Callable[[str], None] = lambda line: None) -> RunOutcome:
    """Try one idea of run `parent` as a child run (module docstring); SetupError, before anything is written or
    spent, for a request that cannot work."""
    root = Path(project_root).resolve()
    check_limits(limits)
    if seeds < 1:
        raise SetupError(f"--seeds must be 1 or more, got {seeds}")
    settings = RunSettings.load(root, parent)
    if llm is None:  # the parent's backend: its server's context and answer budget, where not given
        limits = replace(limits, **{name: settings.limits[name] for name in SERVER_LIMITS if name in settings.limits
                                    and getattr(limits, name) == getattr(Limits(), name)})
    idea = the_idea(root, parent, idea_key, idea_text)
    formal = finished_formal(root, parent)
    manifest = json.loads((formal / "manifest.json").read_text())
    first = planned_seed(formal)
    if first is None and seeds > 1:
        raise SetupError(f"--seeds {seeds}: run {parent}'s config has no seed field (role random_seed), so its arms "
                         f"cannot train on other seeds; give --seeds 1 or map the seed field")
    if run_id is not None:
        check_run_id(run_id)
    child = run_id or child_id(root, parent, idea)
    if (root / "runs" / child).exists():
        raise SetupError(f"run {child} already exists: choose another --run-id")
    if WorkspaceLock(root).held_by_someone():
        raise SetupError(f"another run holds {root / 'workspace'}: try the idea once it has ended")
    try:
        workspace = Workspace.open(root / "workspace", create=False)
        parent_sha = workspace.branch_sha(f"run/{parent}")
    except WorkspaceError as exc:
        raise SetupError(f"run {parent}'s workspace branch cannot be read ({exc}): its final commit is where the "
                         f"child starts") from exc
    check_source_of_truth(Path(settings.source_of_truth))
    transcript = child_transcript(settings.llm, root, idea) if llm is None else None
    run_dir = root / "runs" / child
    spec = llm or (f"replay:{run_dir / 'transcript.json'}" if transcript is not None else settings.llm)
    if transcript is None:
        checked_llm(spec, root, limits)  # a missing key, an absent server: refused before anything is written
    plan = dict(manifest.get("config") or {})
    formal_spec = replace(FormalSpec(**settings.formal), plan=plan, model=str(manifest.get("model_id") or ""),
                          plan_config=workspace.read_at(parent_sha, f"{GENERATED_DIR}/grpo_config.py") or "")
    run_dir.mkdir(parents=True)
    if transcript is not None:
        (run_dir / "transcript.json").write_text(json.dumps(transcript, indent=1))
    Lineage(parent, parent_sha, idea, seed_values(first or 0, seeds), str(formal), plan).save(run_dir)
    workspace.branch_at(f"run/{child}", parent_sha)
    return start_run(root, llm=spec, source_of_truth=Path(settings.source_of_truth), limits=limits,
                     runtime_check=RuntimeCheckSpec(**settings.runtime_check), formal=formal_spec, run_id=child,
                     on_event=on_event)
