"""The offline demo: the whole pipeline with a recorded LLM, no network, no GPU, no API key.

An example is a folder `examples/NAME/` holding `reference_generated/` (what an excellent LLM writes
for that triple; its `helper_readme.md` is what the orchestrator renders from its `helpers.py`) and
`source_of_truth/` (the researcher's three files; an example without one uses the project's
`source_of_truth/`). Optional: `roles.json`, the recorded roles answer (otherwise the
first guess from the config's field names is recorded as the answer); `log_format.json`, the recorded
log-format answer (otherwise none is recorded: the first guess reads the log); `metric_roles.json`, the recorded
answer naming the log's keys the first guess could not give a role (otherwise none is recorded); `future_improvements.md`,
the recorded review (otherwise a review about GRPO itself, in no game's words); `idea_edits.md`, the recorded
answers of `apply_idea` for ideas of that review, one `## title` section each (the title of the idea, the answer's
SEARCH/REPLACE edits), kept beside the transcript's replies for a child of the demo run to replay (`python -m
orchestrator try RUN N`, orchestrator.trying).

The transcript is assembled from the example's files (Step 3's answer: the CUSTOMIZE sections of the
reference `train.py`, as the template's markers delimit them) with two real faults put into the recorded
`train.py`'s sections, found generically: a misspelt import of a generated module (the import check catches
it) and an unexpected keyword argument to `observation_to_text` (only the tiny-model training run
hits it). The recorded fixes are SEARCH/REPLACE edits; then come a formal-run proposal sized for a
CPU, by role, and a review. Token counts are the recorded ones, so the summary shows what a real run
would cost. A fault whose pattern the example's train.py does not contain is left out.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.checks import RuntimeCheckSpec
from orchestrator.sources.config_file import ConfigFile, accepted_values, field_help, read_config, value_kind
from orchestrator.llm.edits import sections_answer
from orchestrator.training.formal import FormalSpec
from orchestrator.training.logformat import LOG_FORMAT_FILE
from orchestrator.training.metric_roles import METRIC_ROLES_FILE
from orchestrator.ideas.catalog import read_ideas
from orchestrator.nodes.idea import NODE as APPLY_IDEA
from orchestrator.nodes.review import IDEAS_FILE
from orchestrator.sources.roles import ConfigRoles, corrections, parses_command_line, suggest_roles, validate_roles
from orchestrator.runner import RunOutcome, check_project_root, check_source_of_truth, start_run
from orchestrator.trying import IDEA_KEY, IDEAS_KEY
from orchestrator.run.runs import SetupError
from orchestrator.sources.template import holes, read_sections
from orchestrator.tiny.agent import TINY_AGENT

PROJECT = Path(__file__).resolve().parents[1]
EXAMPLES = PROJECT / "examples"
DEFAULT_EXAMPLE = "cleanup"
IDEA_EDITS_FILE = "idea_edits.md"

# the formal run of the demo, by role: short, on a CPU, still logging samples and evaluations; groups of 4 episodes
# of 3 turns, so that most groups' returns differ and most updates have a gradient (benchmarks/flat_groups.py: every
# update of 10 Cleanup seeds, 68 of 90 of 30 Stag Hunt seeds, whose rewards are sparse)
FORMAL_BY_ROLE = {"episodes_total": 12, "updates_total": 3, "group_generations": 4, "episode_turns": 3,
                  "thinking_cap": 40, "action_cap": 40, "micro_batch": 8, "precision": False, "checkpointing": False,
                  "eval_every": 2, "sample_every": 3, "save_every": 1000}

# the review an example without a recorded one plays back: about GRPO itself, no game's words
GENERIC_IDEAS = """# Future improvements

## Larger groups, or a reward per useful turn
Groups whose episodes all end with the same return add nothing to the gradient. Sample more episodes
per group, or add a small reward for each turn whose helper call completed its task, so that every
group ranks its episodes.
Evidence: frac_reward_zero_std

## Give each agent a standing role through the prompt
All agents read the same instructions and tend to pursue the same target. Give each agent a role in the
thinking prompt and rotate the roles between episodes.
Evidence: helper result

## Shorter thinking, more turns
Thinking outputs that reach their token cap truncate the reasoning the action stage reads. Ask for three
short bullet points instead of free text, and spend the tokens on longer episodes.
Evidence: completion_clipped_ratio
"""


@dataclass(frozen=True)
class Example:
    name: str
    source_of_truth: Path
    reference: Path
    folder: Path

    def recorded(self, name: str, default: str = "") -> str:
        """The example's recorded answer file `name`, or `default`."""
        path = self.folder / name
        return path.read_text() if path.is_file() else default


def example(name: str) -> Example:
    known = sorted(p.name for p in EXAMPLES.iterdir() if (p / "reference_generated").is_dir())
    if name not in known:
        raise SetupError(f"no example {name!r}: expected {EXAMPLES / name / 'reference_generated'}; examples: "
                         f"{', '.join(known)}")
    folder = EXAMPLES / name
    source = folder / "source_of_truth"
    return Example(name, source if source.is_dir() else PROJECT / "source_of_truth", folder / "reference_generated",
                   folder)


def _config(ex: Example) -> tuple[ConfigFile, dict[str, str], bool]:
    """The example config (read in a fresh interpreter), its fields' kinds, and whether values can reach train.py
    as flags."""
    config_path = ex.source_of_truth / "grpo_config.py"
    config = read_config(config_path)
    cli = parses_command_line((ex.source_of_truth / "grpo_template.py").read_text(), config_path.read_text())
    return config, config.kinds, cli


def first_guess(ex: Example) -> dict[str, Any]:
    """The mapping map_roles guesses from the example config's field names (what its prompt shows)."""
    _, kinds, cli = _config(ex)
    return suggest_roles(kinds, field_help((ex.source_of_truth / "grpo_config.py").read_text()), cli_possible=cli)


def recorded_roles(ex: Example) -> dict[str, Any]:
    """The whole mapping the demo's roles answer stands for: the example's own (roles.json), or the first
    guess; ValueError naming roles.json when that is not a valid mapping of the example's config."""
    recorded = ex.recorded("roles.json")
    if not recorded:
        return first_guess(ex)
    _, kinds, cli = _config(ex)
    try:
        answer = json.loads(recorded)
        validate_roles(answer, kinds, cli_possible=cli)
    except ValueError as exc:
        raise ValueError(f"roles.json: {exc}") from exc
    return answer


def formal_proposal(ex: Example, answer: dict[str, Any]) -> dict[str, Any]:
    """FORMAL_BY_ROLE in the example config's field names, each value of the field's own kind."""
    config, kinds, cli = _config(ex)
    roles = validate_roles(answer, kinds, cli_possible=cli)
    proposal = {}
    for name, value in roles.to_fields(FORMAL_BY_ROLE).items():
        if kinds[name] == value_kind(value) or (kinds[name] == "float" and value_kind(value) == "int"):
            proposal[name] = value
    return accepted_values(config, proposal)[0]


def faults(train_text: str) -> list[tuple[str, str]]:
    """(correct line, faulty line) pairs found in this train.py's CUSTOMIZE sections: an import and a runtime
    fault."""
    train_text = "".join(hole.text for hole in holes(read_sections(train_text)))
    found = []
    # the prompt module first: a misspelt helpers import would also trip the static dispatch rule
    module_import = (re.search(r"^(\s*(?:import|from)\s+)(prompt_template)\b(.*)$", train_text, re.M)
                     or re.search(r"^(\s*(?:import|from)\s+)(helpers)\b(.*)$", train_text, re.M))
    if module_import:
        line = module_import.group(0)
        found.append((line, f"{module_import.group(1)}{module_import.group(2)}s{module_import.group(3)}"))
    observation = re.search(r"^.*observation_to_text\(([^()\n]*)\).*$", train_text, re.M)
    if observation:
        line = observation.group(0)
        call = f"observation_to_text({observation.group(1)})"
        found.append((line, line.replace(call, f"observation_to_text({observation.group(1)}, detail_level=2)", 1)))
    return found


def _files(folder: Path, names: tuple[str, ...]) -> str:
    return "\n".join(f"FILE: {name}\n````\n{(folder / name).read_text()}````\n" for name in names)


def _faulty(path: Path, found: list[tuple[str, str]]) -> str:
    text = path.read_text()
    for old, new in found:
        text = text.replace(old, new, 1)
    return text


def _edit(path: str, search: str, replace: str) -> str:
    return f"FILE: {path}\n<<<<<<< SEARCH\n{search.rstrip()}\n=======\n{replace.rstrip()}\n>>>>>>> REPLACE\n"


def transcript(ex: Example) -> dict:
    roles = recorded_roles(ex)
    found = faults((ex.reference / "train.py").read_text())
    reply = lambda tag, text, i, o: {"tag": tag, "text": text, "usage": {"input_tokens": i, "output_tokens": o}}
    proposal = formal_proposal(ex, roles)
    return {"replies": [
        reply("map_roles", f"```json\n{json.dumps(corrections(roles, first_guess(ex)), indent=2)}\n```", 7100, 120),
        reply("generate_helpers", _files(ex.reference, ("helpers.py",)), 9200, 2400),
        reply("generate_prompts", _files(ex.reference, ("prompt_template.py",)), 5400, 1100),
        reply("generate_train", sections_answer(_faulty(ex.reference / "train.py", found)), 24800, 1500),
        reply("generate_launch", _files(ex.reference, ("launch_training.sh",)), 2600, 700),
        *[reply("fix", _edit("train.py", new, old), 15200 + 700 * i, 180 + 30 * i) for i, (old, new) in enumerate(found)],
        reply("formal_train", f"```json\n{json.dumps(proposal, indent=2)}\n```\nA CPU and a tiny model: a short run "
                              "that still logs samples and evaluations.", 3900, 260),
        reply("review", f"FILE: future_improvements.md\n````\n{ex.recorded(IDEAS_FILE, GENERIC_IDEAS)}````\n", 7400, 640),
        *([reply("log_format", f"```json\n{log_format}```", 2100, 160)]
          if (log_format := ex.recorded(LOG_FORMAT_FILE)) else []),
        *([reply("metric_roles", f"```json\n{metric_roles}```", 900, 40)]
          if (metric_roles := ex.recorded(METRIC_ROLES_FILE)) else []),
    ], IDEAS_KEY: [{**reply(APPLY_IDEA, idea.text + "\n", 31000, 240), IDEA_KEY: idea.title}
                   for idea in read_ideas(ex.recorded(IDEA_EDITS_FILE))]}


def checked_transcript(ex: Example) -> dict:
    """The example's transcript; an example whose files cannot make one (a roles.json that is not JSON or maps
    no model, a reference file missing) is bad input: SetupError, before anything runs."""
    check_source_of_truth(ex.source_of_truth)
    try:
        return transcript(ex)
    except (OSError, ValueError) as exc:
        problem = " ".join(str(exc).split())[:400]
        raise SetupError(f"example {ex.name!r} cannot be replayed: {problem}; fix its files in {ex.folder}") from exc


def run_demo(project_root: Path, name: str = DEFAULT_EXAMPLE, on_event=lambda line: None) -> RunOutcome:
    ex = example(name)
    check_project_root(project_root)
    replies = checked_transcript(ex)
    run_id = f"demo-{name}-" + time.strftime("%Y%m%d-%H%M%S")
    path = project_root / "runs" / run_id / "demo_transcript.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(replies, indent=1))
    return start_run(project_root, llm=f"replay:{path}", run_id=run_id, fresh=True, on_event=on_event,
                     source_of_truth=ex.source_of_truth,
                     runtime_check=RuntimeCheckSpec(model=TINY_AGENT, real_model=False, episodes=4, turns=2),
                     formal=FormalSpec(model=TINY_AGENT, timeout_s=900, hang_seconds=300))


def roles_of(outcome: RunOutcome) -> ConfigRoles | None:
    data = outcome.state.get("roles")
    return ConfigRoles.from_dict(data) if data else None
