"""The config's roles: which of the researcher's GRPOConfig fields the orchestrator needs, and how values
reach train.py.

The orchestrator never names a config field itself. It needs a few roles (the model, how long to
train, the group size, the token caps, ...); once per run the LLM maps each role to one of the
researcher's field names, or to nothing when their config has no such knob, and code validates
every name and kind against the real dataclass. The mapping is kept in the run state and in the
workspace (`config_roles.json`), so a re-run reuses it for free. The runtime check, the formal
plan, the memory arithmetic and the small-issue fixes read values only through it.

Delivery: values reach train.py as `--field value` flags when the template or the config parses the
command line (HfArgumentParser, argparse, a `from_args`), otherwise they are written into the
generated copy of grpo_config.py (the brief allows value changes there).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.sources.config_file import set_values

CLI, CONFIG_FILE = "cli", "config_file"
DELIVERIES = (CLI, CONFIG_FILE)


@dataclass(frozen=True)
class Role:
    kind: str  # int, float, bool, str, or "bool|str" (a precision switch or a dtype name)
    meaning: str


ROLES: dict[str, Role] = {
    "model": Role("str", "the model to train: a hub id or a local folder loaded with from_pretrained"),
    "episodes_total": Role("int", "how many game episodes the whole training plays"),
    "updates_total": Role("int", "how many optimiser updates (training steps) the whole training makes"),
    "group_generations": Role("int", "episodes (generations) per GRPO group, compared with each other"),
    "episode_turns": Role("int", "turns (game steps) per episode"),
    "agent_count": Role("int", "agents (players) in one game"),
    "thinking_cap": Role("int", "new-token cap of the thinking stage (or the one cap of every generation)"),
    "action_cap": Role("int", "new-token cap of the action stage (or the one cap of every generation)"),
    "micro_batch": Role("int", "sequences per forward/backward pass on one device"),
    "accumulation_steps": Role("int", "micro-batches accumulated into one optimiser step"),
    "precision": Role("bool|str", "bfloat16 switch (bool) or dtype name (str)"),
    "checkpointing": Role("bool", "gradient checkpointing switch"),
    "output_folder": Role("str", "folder of checkpoints and the final model"),
    "log_folder": Role("str", "folder of train.logs and Sample_EP.logs"),
    "random_seed": Role("int", "the run's random seed"),
    "sample_every": Role("int", "interval between episodes written to Sample_EP.logs"),
    "eval_every": Role("int", "interval between evaluations"),
    "save_every": Role("int", "interval between checkpoints"),
    "kl_coef": Role("float", "KL coefficient to the frozen reference (0: no reference model)"),
    "resume_from": Role("str", 'where training resumes: given "latest", the newest checkpoint in the output folder '
                               '(a fresh start while there is none), so a restarted job goes on from it'),
}
SHARED_ROLES = {"thinking_cap", "action_cap"}  # may name the same field: one cap for both stages


@dataclass(frozen=True)
class ConfigRoles:
    fields: dict[str, str | None]  # role -> the researcher's field name, None where the config has none
    delivery: str  # CLI or CONFIG_FILE
    notes: str = ""  # what the mapping assumed, for the log and the report

    def field_of(self, role: str) -> str | None:
        return self.fields.get(role)

    def absent(self) -> list[str]:
        return [role for role in ROLES if not self.fields.get(role)]

    def read(self, values: dict[str, Any]) -> dict[str, Any]:
        """Role -> value, from field values (roles without a field are left out)."""
        return {role: values[name] for role, name in self.fields.items() if name and name in values}

    def to_fields(self, by_role: dict[str, Any]) -> dict[str, Any]:
        """Field -> value for the roles the config has; a field shared by two caps gets the larger value."""
        values: dict[str, Any] = {}
        for role, value in by_role.items():
            name = self.fields.get(role)
            if not name:
                continue
            values[name] = max(values[name], value) if name in values and role in SHARED_ROLES else value
        return values

    def describe(self) -> str:
        rows = [f"{role:<20} -> {self.fields.get(role) or '(none)'}" for role in ROLES]
        return "\n".join(rows + [f"{'delivery':<20} -> {self.delivery}"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ConfigRoles":
        return cls(fields=dict(data["fields"]), delivery=data["delivery"], notes=data.get("notes", ""))


_CLI_PARSING = re.compile(r"HfArgumentParser|ArgumentParser|parse_args|parse_known_args|sys\.argv|from_args|"
                          r"fire\.Fire|typer\.|click\.")


def parses_command_line(*texts: str) -> bool:
    return any(_CLI_PARSING.search(text) for text in texts)


def validate_roles(answer: dict[str, Any], kinds: dict[str, str], *, cli_possible: bool) -> ConfigRoles:
    """The LLM's answer {"roles": {role: field | null}, "delivery": ...} checked against the real
    config's fields and their kinds (`config_file.read_config(path).kinds`); ValueError listing every problem."""
    if not isinstance(answer, dict) or not isinstance(answer.get("roles"), dict):
        raise ValueError('the answer must be a JSON object {"roles": {ROLE: FIELD or null, ...}, "delivery": ...}')
    problems: list[str] = []
    roles: dict[str, str | None] = {}
    for role, name in answer["roles"].items():
        if role not in ROLES:
            problems.append(f"{role!r} is not a role; the roles are {', '.join(ROLES)}")
        elif name is None or name == "":
            roles[role] = None
        elif not isinstance(name, str) or name not in kinds:
            problems.append(f"{role}: {name!r} is not a GRPOConfig field; fields: {', '.join(kinds)}")
        elif not _kind_fits(ROLES[role].kind, kinds[name]):
            problems.append(f"{role}: field {name!r} holds a {kinds[name]} but the role needs a {ROLES[role].kind}")
        else:
            roles[role] = name
    owners: dict[str, list[str]] = {}
    for role, name in roles.items():
        if name:
            owners.setdefault(name, []).append(role)
    for name, sharing in owners.items():
        if len(sharing) > 1 and not set(sharing) <= SHARED_ROLES:
            problems.append(f"field {name!r} is given to several roles ({', '.join(sharing)}); give each role its own "
                            f"field or null")
    if not roles.get("model"):
        problems.append("model: no field is mapped, but the runtime check loads a small local model and the formal run "
                        "the real one through it; map the field that names the model to load")
    if not roles.get("episodes_total") and not roles.get("updates_total"):
        problems.append("episodes_total, updates_total: neither is mapped, but the runtime check shortens the run and "
                        "the formal run sizes it through one of them; map the field that sets how long training runs")
    delivery = answer.get("delivery", CLI if cli_possible else CONFIG_FILE)
    if delivery not in DELIVERIES:
        problems.append(f"delivery must be one of {', '.join(DELIVERIES)}, got {delivery!r}")
    elif delivery == CLI and not cli_possible:
        problems.append("delivery 'cli' but neither grpo_template.py nor grpo_config.py parses the command line; "
                        "use 'config_file'")
    if problems:
        raise ValueError("; ".join(problems))
    notes = answer.get("notes", "")
    return ConfigRoles({role: roles.get(role) for role in ROLES}, delivery, notes if isinstance(notes, str) else "")


def _kind_fits(role_kind: str, field_kind: str) -> bool:
    if role_kind == "float":
        return field_kind in ("float", "int")
    return field_kind in role_kind.split("|")


# ---------------------------------------------------------------- a first guess, from names and help texts

# per role: alternatives of words that must all appear in a field's name, and words that rule a field out
_HINTS: dict[str, tuple[tuple[frozenset[str], ...], frozenset[str]]] = {
    "model": ((frozenset({"model", "name"}), frozenset({"model", "path"}), frozenset({"model"})),
              frozenset({"ref", "reference", "revision", "dtype"})),
    "episodes_total": ((frozenset({"episodes"}), frozenset({"episode", "total"})),
                       frozenset({"eval", "sample", "log", "save", "interval", "every", "per", "length", "steps"})),
    "updates_total": ((frozenset({"max", "steps"}), frozenset({"total", "steps"}), frozenset({"updates"}),
                       frozenset({"train", "steps"})),
                      frozenset({"warmup", "eval", "save", "logging", "log", "env", "sample", "per", "episode"})),
    "group_generations": ((frozenset({"group"}), frozenset({"generations"})), frozenset({"groups"})),
    "episode_turns": ((frozenset({"turns"}), frozenset({"horizon"}), frozenset({"env", "steps"}),
                       frozenset({"episode", "length"}), frozenset({"rounds"})), frozenset({"eval"})),
    "agent_count": ((frozenset({"agents"}), frozenset({"players"}), frozenset({"num", "agents"})), frozenset()),
    "thinking_cap": ((frozenset({"thinking", "tokens"}), frozenset({"think", "tokens"}),
                      frozenset({"reasoning", "tokens"}), frozenset({"completion", "length"}),
                      frozenset({"new", "tokens"})), frozenset({"prompt", "action"})),
    "action_cap": ((frozenset({"action", "tokens"}), frozenset({"action", "length"}),
                    frozenset({"completion", "length"}), frozenset({"new", "tokens"})),
                   frozenset({"prompt", "thinking", "think"})),
    "micro_batch": ((frozenset({"micro", "batch"}), frozenset({"per", "device", "batch"}),
                     frozenset({"train", "batch"}), frozenset({"batch", "size"}), frozenset({"minibatch", "size"})),
                    frozenset({"eval", "generation", "rollout"})),
    "accumulation_steps": ((frozenset({"accumulation"}), frozenset({"accum"})), frozenset()),
    "precision": ((frozenset({"bf16"}), frozenset({"bfloat16"}), frozenset({"dtype"}), frozenset({"precision"})),
                  frozenset({"eval"})),
    "checkpointing": ((frozenset({"gradient", "checkpointing"}), frozenset({"checkpointing"})), frozenset()),
    "output_folder": ((frozenset({"output", "dir"}), frozenset({"out", "dir"}), frozenset({"save", "dir"}),
                       frozenset({"checkpoint", "dir"})), frozenset({"log", "logging"})),
    "log_folder": ((frozenset({"log", "dir"}), frozenset({"logging", "dir"}), frozenset({"logs", "dir"})), frozenset()),
    "random_seed": ((frozenset({"seed"}),), frozenset({"data"})),
    "sample_every": ((frozenset({"sample", "interval"}), frozenset({"sample", "every"}),
                      frozenset({"sample", "steps"}), frozenset({"sample", "log"}), frozenset({"sample", "freq"})),
                     frozenset()),
    "eval_every": ((frozenset({"eval", "interval"}), frozenset({"eval", "every"}), frozenset({"eval", "steps"}),
                    frozenset({"eval", "freq"})), frozenset({"episodes", "batch"})),
    "save_every": ((frozenset({"save", "interval"}), frozenset({"save", "steps"}), frozenset({"save", "every"}),
                    frozenset({"save", "freq"})), frozenset({"total", "limit"})),
    "kl_coef": ((frozenset({"beta"}), frozenset({"kl", "coef"}), frozenset({"kl", "coeff"})), frozenset()),
    "resume_from": ((frozenset({"resume"}),), frozenset()),
}
# a field whose help text names agents or players counts as the agent count when its name does not say so
_AGENT_WORDS = re.compile(r"\b(agents?|players?)\b", re.I)


def words(name: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w}


def with_guess(answer: Any, guess: dict[str, Any]) -> Any:
    """An answer that names only the roles its guess got wrong, completed by the guess: {"roles": {ROLE: FIELD
    or null, ...}, "delivery": ..., "notes": ...}, each key optional. Anything but an object is left as it is
    (validate_roles says what is wrong with it)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("roles", {}), dict):
        return answer
    return {**guess, **answer, "roles": {**guess["roles"], **answer.get("roles", {})}}


def corrections(answer: dict[str, Any], guess: dict[str, Any]) -> dict[str, Any]:
    """The shortest answer that `with_guess` completes into `answer`: the roles and delivery the guess got wrong."""
    wrong = {role: field for role, field in answer["roles"].items() if guess["roles"].get(role, "") != field}
    short: dict[str, Any] = {"roles": wrong}
    if answer.get("delivery") != guess.get("delivery"):
        short["delivery"] = answer.get("delivery")
    return {**short, **({"notes": answer["notes"]} if answer.get("notes") else {})}


def suggest_roles(kinds: dict[str, str], helps: dict[str, str] | None = None, *,
                  cli_possible: bool) -> dict[str, Any]:
    """A first guess at the mapping from field names (and help texts), in the answer's JSON form."""
    helps = helps or {}
    chosen: dict[str, str | None] = {}
    taken: set[str] = set()
    for role, (alternatives, forbidden) in _HINTS.items():
        chosen[role] = None
        for wanted in alternatives:
            match = next((name for name, kind in kinds.items()
                          if wanted <= words(name) and not forbidden & words(name)
                          and _kind_fits(ROLES[role].kind, kind)
                          and (name not in taken or role in SHARED_ROLES)), None)
            if match:
                chosen[role] = match
                taken.add(match)
                break
    if chosen["agent_count"] is None:
        chosen["agent_count"] = next((name for name, kind in kinds.items() if kind == "int"
                                      and name not in taken and _AGENT_WORDS.search(helps.get(name, ""))
                                      and {"num", "n", "count"} & words(name)), None)
    return {"roles": chosen, "delivery": CLI if cli_possible else CONFIG_FILE,
            "notes": "guessed from field names and help texts"}


# ---------------------------------------------------------------- values to train.py

def to_args(values: dict[str, Any]) -> list[str]:
    """`--field value` flags (bools as true/false, as argparse and HfArgumentParser read them)."""
    args: list[str] = []
    for name, value in values.items():
        args += [f"--{name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return args


def deliver(roles: ConfigRoles, values: dict[str, Any], config_path: Path) -> list[str]:
    """Make train.py (next to `config_path`) run with these field values: the flags to pass, or []
    after writing them into that grpo_config.py."""
    if not values:
        return []
    if roles.delivery == CLI:
        return to_args(values)
    config_path.write_text(set_values(config_path.read_text(), values))
    return []
