"""What the generated helpers, dispatch and prompts do, judged on copies of real game states (made the way
verified on this game: `replicas`) and over one whole episode on the training's own game.

Each rule is the running side of a line of the brief:
- helper-returns-non-bool, helper-raises ("returns whether the task completed"): each action helper,
  called as NAME(game, agent_id, **args) on copies of real states with arguments guessed from its
  annotations, the game's actions and the prompts, returns a real bool; a ValueError or TypeError for
  guessed arguments is the contract's way to refuse them, anything else is a bug.
- helper-too-slow: a helper call returns within CALL_SECONDS (the training calls one per agent per turn).
- helper-calls-helper ("no helper calling another helper"): no public helper runs while another one
  runs (a profiler sees every call, however it was reached).
- helper-side-effect, helper-acts-for-others, helper-advances-game ("Each function abstracts low-level
  actions"; `env.step()` plays every agent's chosen action at once): a helper changes nothing of the
  game but its own agent's pending action: not the board, not another agent's action, not the turn.
  Judged on copies of a few states, then over a whole short episode on one game object built by the
  training's factory (every turn every agent calls a helper, then the game steps), where state a helper
  keeps between calls and paths only later turns reach show.
- helper-invalid-action ("abstracts low-level actions": the game's own): the action a helper leaves is
  one the game's setter accepts, and a helper that only ever fails because the game refuses the
  action it sets (a helper without arguments: that fails so at all) is flagged.
- observation-not-from-helpers ("Use observation_to_text from helpers.py in format_observation"): the
  training's observation text contains observation_to_text's.
- prompt-missing-observation, prompt-missing-thinking, prompt-missing-helper-menu,
  prompt-wrong-agent-id (Step 2: "Available high-level actions with signatures", "given reasoning,
  output ONE action call", the JSON form with the agent's id): the prompts the training renders, in the
  order it renders them (every agent's Stage 1, then every agent's Stage 2), hold the agent's own
  observation (both stages), its own Stage-1 output (Stage 2), every helper's name (Stage 2) and required
  parameters (either stage; one with a default is optional), and an "agent_id" example equal to the agent's
  own id.
- dispatch-wrong-helper, dispatch-accepts-raw-action, dispatch-accepts-bad-arguments ("parse JSON action →
  call the right helper function"): the CUSTOMIZE function that, given (game, call), runs a helper is the
  dispatch; a call naming an offered helper runs that helper and no other, and does what calling it
  directly does (for that agent, with its result); a call naming a low-level action, observation_to_text,
  a private function or an unknown name, and a call whose args are no object, name a parameter the
  helper lacks or hold values the helper itself refuses (bad values as well as bad names), raise (the
  template's penalty path) instead of returning, with or without another helper.
- prompt-builder-output, unknown-action: the prompt builders return chat messages and offer only
  helpers.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from orchestrator.rules.exposed import OBSERVATION_HELPER, helper_function
from orchestrator.rules.probe.game import Play, Position
from orchestrator.rules.probe.replicas import state
from orchestrator.rules.probe.values import (ProbeTimeout, at, call, canonical, covered, differences, short, show_path,
                                             violation)

JSON_ACTION = re.compile(r"""["']action["']\s*:\s*["']([A-Za-z_]\w*)["']""")
AGENT_ID = re.compile(r"""["']agent_id["']\s*:\s*["']?(-?\d+)""")
PLACEHOLDERS = {"name", "action", "action_name", "helper", "helper_name", "function", "function_name", "func",
                "tool", "tool_name", "your_action", "some_action"}
QUOTED = re.compile(r"""["']([A-Za-z_][\w-]{0,20})["']""")
THINKING = "Probe reasoning 7f3a: the plan is to act on what I see."
JUDGED_AGENTS = 4  # agents each helper is judged for, in every state
EPISODE_TURNS = 12  # turns of the whole episode the helpers are played over
CALL_SECONDS = 2.0  # a helper call's time budget
MOST_ARGUMENT_SETS = 16
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def text_of(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages)


def flat(text: str) -> str:
    return " ".join(str(text).split())


def check_prompts(prompt_template: types.ModuleType, observation: str, helpers: set[str]) -> tuple[list[dict], str]:
    """prompt-builder-output and unknown-action on the prompt_template builders; the rendered text."""
    problems, rendered = [], []
    calls = (("create_thinking_prompt", (observation, 0)), ("create_single_stage_prompt", (observation, "I think.", 0)))
    for name, args in calls:
        builder = getattr(prompt_template, name, None)
        if builder is None:
            continue  # the static layer reports a missing builder
        messages, error = call(builder, *args)
        if error is not None:
            problems.append(violation("prompt-builder-output", "prompt_template.py",
                                      f"{name}{args!r} raised {type(error).__name__}: {error}"))
            continue
        if not is_messages(messages):
            problems.append(violation("prompt-builder-output", "prompt_template.py",
                                      f"{name} returned {repr(messages)[:200]}; return a non-empty list of "
                                      f"{{\"role\": str, \"content\": str}} messages"))
            continue
        rendered.append(text_of(messages))
    text = "\n".join(rendered)
    unknown = sorted({n for n in JSON_ACTION.findall(text) if n not in helpers and n.lower() not in PLACEHOLDERS
                      and not n.isupper()})
    for name in unknown:
        problems.append(violation("unknown-action", "prompt_template.py",
                                  f"the rendered prompt offers action {name!r}, which is not an action helper; the "
                                  f"action helpers are: {', '.join(sorted(helpers))}"))
    return problems, text


# ---------------------------------------------------------------- helpers on copies of real states

def guessed_arguments(function: types.FunctionType, words: list[Any]) -> list[dict[str, Any]]:
    """Argument sets to try, for the parameters after (game, agent_id) that have no default."""
    params = [p for p in list(inspect.signature(function).parameters.values())[2:]
              if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not params:
        return [{}]
    options = []
    for p in params:
        annotation = str(p.annotation).lower()
        if "int" in annotation or "float" in annotation:
            options.append([1, 0, 2, 3])
        elif "bool" in annotation:
            options.append([True, False])
        else:
            options.append(words[:MOST_ARGUMENT_SETS - 1] + [1])
    return [{p.name: choice[min(i, len(choice) - 1)] for p, choice in zip(params, options)}
            for i in range(max(len(c) for c in options))]


class HelperTracer:
    """Sees every call: a public helper entered while another runs (nested), and the helpers entered
    from outside any helper (entered), in order."""

    def __init__(self, helpers: dict[str, Callable]) -> None:
        self.names: dict[types.CodeType, str] = {}
        for name, f in helpers.items():  # the code that runs; two names of one function are seen as the first
            self.names.setdefault(helper_function(f).__code__, name)
        self.canonical = {name: self.names[helper_function(f).__code__] for name, f in helpers.items()}
        self.active: list[str] = []
        self.nested: set[tuple[str, str]] = set()
        self.entered: list[str] = []

    def __call__(self, frame, event, arg):
        name = self.names.get(frame.f_code)
        if name is None or event not in ("call", "return"):
            return
        if event == "call":
            if self.active:
                self.nested.add((self.active[-1], name))
            else:
                self.entered.append(name)
            self.active.append(name)
        elif self.active and self.active[-1] == name:
            self.active.pop()

    def run(self, function: Callable, *args: Any, **kwargs: Any) -> tuple[Any, BaseException | None]:
        self.active, self.entered = [], []
        sys.setprofile(self)
        try:
            return call(function, *args, seconds=CALL_SECONDS, **kwargs)
        finally:
            sys.setprofile(None)


def raised_in(error: BaseException, code: types.CodeType | None) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


@dataclass
class Success:
    turn: int
    agent: int
    args: dict[str, Any]
    result: Any
    refused: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # (turn, agent, args) it refused


@dataclass
class Footprint:
    """What may change when agent `agent` acts in one state, learned from the clean game."""
    own: list[tuple]  # paths the setter changes for this agent
    actions: set[str]  # canonical values those paths take for the game's accepted actions
    others: list[tuple]  # paths the setter changes for the other agents
    advance: list[tuple]  # paths the stepper changes with no action chosen
    reads: list[tuple]  # paths observation_to_text changes (a game that caches what it shows)


class Board:
    """The real states: the clean game's (env_move imported apart), so that what a helper does is judged
    against the researcher's game, whatever train.py may have done to env_move; every copy is made the way
    verified on this game (play.copier)."""

    def __init__(self, play: Play, positions: list[Position], observe: Callable | None) -> None:
        self.play, self.positions, self.observe = play, positions, observe
        self._footprints: dict[tuple[int, int], Footprint] = {}

    def copy(self, index: int) -> Any:
        position = self.positions[index]
        return self.play.copier.copy(position.game, position.recipe)

    def footprint(self, index: int, agent: int) -> Footprint:
        key = (index, agent)
        if key not in self._footprints:
            start = self.positions[index].game
            before = state(start)
            own, values, others = [], set(), []
            for action in self.play.actions:
                game = self.copy(index)
                if self.play.set(game, agent, action) is None:
                    after = state(game)
                    changed = differences(before, after)
                    own += [p for p in changed if p not in own]
                    values.update(repr(at(after, p)) for p in changed)
            for other in self.play.agents:
                if other != agent:
                    game = self.copy(index)
                    self.play.set(game, other, self.play.actions[0])
                    others += differences(before, state(game))
            advance = []
            if self.play.stepper is not None:
                game = self.copy(index)
                if self.play.step(game)[1] is None:
                    advance = differences(before, state(game))
            reads = []
            if self.observe is not None:
                game = self.copy(index)
                call(self.observe, game, agent)
                reads = differences(before, state(game))
            self._footprints[key] = Footprint(own, values, others, advance, reads)
        return self._footprints[key]


def check_helpers(table: dict[str, types.FunctionType], board: Board, words: list[Any],
                  observe: Callable | None) -> tuple[list[dict], dict[str, Success], set[str]]:
    """Every action helper on every real state, for each agent: its return, its effect, its calls; the
    helpers that worked (with a call that did) and those flagged."""
    problems: list[dict] = []
    observed = {OBSERVATION_HELPER: observe} if isinstance(observe, types.FunctionType) else {}
    tracer = HelperTracer({**table, **observed})
    play = board.play
    setter_code = getattr(getattr(play.cls, play.setter, None), "__code__", None)
    working: dict[str, Success] = {}
    flagged: set[str] = set()
    for name, function in table.items():
        reported: set[str] = set()
        refused_by_game: list[str] = []
        refusals: list[tuple[int, int, dict[str, Any]]] = []
        succeeded = False
        arguments = guessed_arguments(function, words)

        def report(rule: str, message: str, name: str = name) -> None:
            flagged.add(name)
            if rule not in reported:
                reported.add(rule)
                problems.append(violation(rule, "helpers.py", message))

        for index, turn in enumerate(p.turn for p in board.positions):
            for agent in play.agents[:JUDGED_AGENTS]:
                for args in arguments:
                    game = board.copy(index)
                    before = state(game)
                    result, error = tracer.run(function, game, agent, **args)
                    where = f"{name}(game, {agent}{''.join(f', {k}={v!r}' for k, v in args.items())}) on a real game " \
                            f"state (turn {turn})"
                    if error is not None:
                        if isinstance(error, (ValueError, TypeError)):
                            refusals.append((turn, agent, args))
                            if raised_in(error, setter_code):
                                refused_by_game.append(f"{where}: {type(error).__name__}: {error}")
                            continue
                        report(*helper_failure(where, error))
                        break
                    succeeded = True
                    if name not in working or (working[name].agent == 0 and agent != 0):
                        working[name] = Success(turn, agent, args, result)  # another agent than 0, where one acts
                    if type(result) is not bool:
                        report("helper-returns-non-bool", f"{where} returned {result!r} ({type(result).__name__}); an "
                                                          f"action helper returns a real bool: True or False, whether "
                                                          f"its task completed")
                    judge_effect(report, where, before, state(game), board.footprint(index, agent), play, agent)
                    break
        if name in working:
            working[name].refused = refusals
        if not succeeded and refused_by_game and not any(r in reported for r in ("helper-raises",)):
            report("helper-invalid-action", f"{name} never completed: every call raised, and the game refused the "
                                            f"action it set, e.g. {refused_by_game[0]}; set one of the game's actions "
                                            f"({', '.join(map(repr, play.actions))})")
        elif refused_by_game and arguments == [{}]:
            report("helper-invalid-action", f"the game refused the action {name} set (it takes no argument, so the "
                                            f"action is its own): {refused_by_game[0]}")
    for caller, callee in sorted(tracer.nested):
        problems.append(violation("helper-calls-helper", "helpers.py",
                                  f"{callee}() ran inside {caller}() (however it was reached); helpers must be "
                                  f"independent: move shared logic into a private _function"))
    flagged.update(name for pair in tracer.nested for name in pair)
    return problems, working, flagged


def helper_failure(where: str, error: BaseException) -> tuple[str, str]:
    """(rule, message) for a helper call that crashed or ran out of time."""
    if isinstance(error, ProbeTimeout):
        return "helper-too-slow", (f"{where} did not return within {CALL_SECONDS:.0f} s; the training calls a helper "
                                   f"for every agent on every turn: a helper decides one low-level action, quickly")
    return "helper-raises", (f"{where} raised {type(error).__name__}: {error}; a helper may refuse bad arguments "
                             f"with ValueError, never crash")


def check_episode(table: dict[str, types.FunctionType], board: Board, working: dict[str, Success], game: Any,
                  observe: Callable, turns: int = EPISODE_TURNS, episode: int = 1) -> list[dict]:
    """The helpers over one whole episode (until the game says it is over, at most `turns` turns) on one game
    object, the way the training plays: every turn, each agent sees its observation and calls one helper (the
    helpers in turn, with arguments each accepted), then the game steps. State a helper keeps between calls (a
    module-level cache of the game) and paths only later turns reach (a slow path from turn 10 on) show here,
    which fresh copies of a few states never see."""
    play, names = board.play, sorted(working)
    tracer = HelperTracer(table)
    problems: list[dict] = []
    reported: set[str] = set()

    def report(rule: str, message: str) -> None:
        if rule not in reported:
            reported.add(rule)
            problems.append(violation(rule, "helpers.py", message))

    for turn in range(turns):
        for agent in play.agents:
            name = names[(turn + agent) % len(names)]
            args = working[name].args
            call(observe, game, agent)
            before = state(game)
            _, error = tracer.run(table[name], game, agent, **copy.deepcopy(args))
            where = f"{name}(game, {agent}{''.join(f', {k}={v!r}' for k, v in args.items())}) at turn {turn} of " \
                    f"episode {episode} played on a game built by the training's factory"
            if error is not None and not isinstance(error, (ValueError, TypeError)):
                report(*helper_failure(where, error))
                names.remove(name)  # the rest of the episode goes on without it
                if not names:
                    return problems
                continue
            judge_effect(report, where, before, state(game), board.footprint(0, agent), play, agent)
        result, error = play.step(game)
        if error is not None or episode_over(result, game):
            break
    return problems


def episode_over(result: Any, game: Any) -> bool:
    """What the step returned or the game says: a done flag (a (obs, rewards, done, ...) tuple, a result with a
    `finished`/`done` field, a `done` attribute)."""
    flags = [result[2]] if isinstance(result, tuple) and len(result) >= 3 and isinstance(result[2], bool) else []
    for owner in (result, game):
        flags += [v for v in (getattr(owner, n, None) for n in ("done", "finished", "over")) if isinstance(v, bool)]
    return any(flags)


def judge_effect(report: Callable[[str, str], None], where: str, before: dict, after: dict, footprint: Footprint,
                 play: Play, agent: int) -> None:
    changed = differences(before, after)
    extra = [p for p in changed if not covered(p, footprint.own + footprint.reads)]
    paths = ", ".join(show_path(p) for p in extra[:4]) + (" ..." if len(extra) > 4 else "")
    if extra and any(covered(p, footprint.others) for p in extra):
        report("helper-acts-for-others", f"{where} changed {paths}: another agent's action; a helper chooses only "
                                         f"agent {agent}'s own action ({play.setter}(agent_id, ...)), every agent "
                                         f"chooses for itself")
    elif extra and any(covered(p, footprint.advance) for p in extra):
        report("helper-advances-game", f"{where} changed {paths}: it played the turn itself; the training steps the "
                                       f"game ({play.stepper}()) once every agent has chosen: set the action with "
                                       f"{play.setter} and return")
    elif extra:
        report("helper-side-effect", f"{where} changed {paths} directly; a helper changes nothing of the game but "
                                     f"its own agent's pending action, set with {play.setter}(agent_id, action)")
    for path in changed:
        value = at(after, path)
        if covered(path, footprint.own) and value is not None and repr(value) not in footprint.actions:
            report("helper-invalid-action", f"{where} left {show_path(path)} = {short(value)}, which no action of the "
                                            f"game produces; set one of the game's actions "
                                            f"({', '.join(map(repr, play.actions))}) with {play.setter}")
            break


# ---------------------------------------------------------------- the training's observation, prompts, dispatch

@dataclass
class Callee:
    label: str  # name in train.py, e.g. format_observation or HunterPrompts.format_observation
    function: Callable
    arity: int  # required positional arguments (self aside)


def callees(train: types.ModuleType, names: list[str]) -> list[Callee]:
    """train.py's CUSTOMIZE functions and methods (a method on an instance made without __init__)."""
    found = []
    for name in names:
        owner, _, member = name.rpartition(".")
        if owner:
            cls = getattr(train, owner, None)
            raw = inspect.getattr_static(cls, member, None) if isinstance(cls, type) else None
            if not isinstance(raw, types.FunctionType):
                continue
            try:
                function = functools.partial(raw, cls.__new__(cls))
            except Exception:  # a class that cannot be made bare: its methods are not probed
                continue
            params = list(inspect.signature(raw).parameters.values())[1:]
        else:
            function = getattr(train, name, None)
            if not isinstance(function, types.FunctionType):
                continue
            params = list(inspect.signature(function).parameters.values())
        arity = sum(1 for p in params if p.default is p.empty and p.kind in POSITIONAL)
        found.append(Callee(name, function, arity))
    return found


def find(candidates: list[Callee], arity: int, args: Callable[[], tuple],
         accept: Callable[[Any], bool]) -> Callee | None:
    for candidate in candidates:
        if candidate.arity == arity:
            result, error = call(candidate.function, *args(), seconds=2.0)
            if error is None and accept(result):
                return candidate
    return None


def check_observation(candidates: list[Callee], board: Board, observe: Callable, agents: list[int]) -> list[dict]:
    index = len(board.positions) - 1
    formatter = find(candidates, 2, lambda: (board.copy(index), agents[0]), lambda r: isinstance(r, str))
    if formatter is None:
        return []
    for agent in agents:
        expected, _ = call(observe, board.copy(index), agent)
        got, _ = call(formatter.function, board.copy(index), agent)
        if isinstance(expected, str) and flat(expected) not in flat(got):
            return [violation("observation-not-from-helpers", "train.py",
                              f"{formatter.label}(game, {agent}) returns {short(got, 160)}, which does not contain "
                              f"observation_to_text(game, {agent}) ({short(expected, 160)}); the brief: use "
                              f"helpers.observation_to_text in format_observation, for the agent it is given")]
    return []


def thinking_of(agent: int) -> str:
    """The Stage-1 output the probe hands Stage 2 for `agent`: its own, so a prompt showing another's is seen."""
    return f"{THINKING} (agent {agent})"


def check_stages(candidates: list[Callee], prompt_template: types.ModuleType, observations: dict[int, str],
                 table: dict[str, types.FunctionType]) -> tuple[list[dict], str]:
    """The prompts as the training renders them (its CUSTOMIZE builders, else prompt_template's), in the order
    the training calls them (every agent's Stage 1, then every agent's Stage 2: a builder that keeps what the
    last call saw shows one agent another's observation); the Stage-2 text for agent 0, for the dispatch check."""
    first_agent = next(iter(observations))
    obs = observations[first_agent]
    builders = {"create_thinking_prompt": getattr(prompt_template, "create_thinking_prompt", None),
                "create_single_stage_prompt": getattr(prompt_template, "create_single_stage_prompt", None)}
    stage1 = find(candidates, 2, lambda: (obs, first_agent), is_messages)
    stage2 = find(candidates, 3, lambda: (obs, thinking_of(first_agent), first_agent), is_messages)
    own = {"create_thinking_prompt": stage1, "create_single_stage_prompt": stage2}
    order = [("create_thinking_prompt", agent, (observation, agent)) for agent, observation in observations.items()]
    order += [("create_single_stage_prompt", agent, (observation, thinking_of(agent), agent))
              for agent, observation in observations.items()]
    rendered = batch(order, {b: (own[b].function if own[b] else builders[b]) for b in builders})
    # prompt_template's own builders in the same order, to tell whose text a finding is about
    theirs = batch(order, builders)
    problems = []
    for agent, texts in rendered.items():
        shown = {}
        for builder, (messages, args) in texts.items():
            mine = own[builder]
            same = mine is None or canonical(theirs[agent].get(builder, (None,))[0]) == canonical(messages)
            spelled = "obs, thinking" if len(args) == 3 else "obs"
            who = f"{builder if same else mine.label}({spelled}, {agent})"
            shown[builder] = (text_of(messages), "prompt_template.py" if same else "train.py", who)
        problems += stage_problems(shown, observations[agent], agent, table)
    offered = rendered[first_agent].get("create_single_stage_prompt")
    stage2_text = text_of(offered[0]) if offered else ""
    unique, seen = [], set()
    for p in problems:
        if (p["rule"], p["file"]) not in seen:
            seen.add((p["rule"], p["file"]))
            unique.append(p)
    return unique, stage2_text


def batch(order: list[tuple[str, int, tuple]], functions: dict[str, Callable | None]
          ) -> dict[int, dict[str, tuple[list[dict], tuple]]]:
    """Each (builder, agent, args) of `order` rendered in that order by `functions[builder]`: agent -> builder ->
    (messages, args), for the calls that returned chat messages."""
    rendered: dict[int, dict[str, tuple[list[dict], tuple]]] = {agent: {} for _, agent, _ in order}
    for builder, agent, args in order:
        function = functions[builder]
        if function is None:
            continue
        messages, error = call(function, *args)
        if error is None and is_messages(messages):  # prompt-builder-output reports the builders' own failures
            rendered[agent][builder] = (messages, args)
    return rendered


def stage_problems(rendered: dict[str, tuple[str, str, str]], observation: str, agent: int,
                   table: dict[str, types.FunctionType]) -> list[dict]:
    problems = []
    for text, file, who in rendered.values():
        if flat(observation) not in flat(text):
            problems.append(violation("prompt-missing-observation", file,
                                      f"{who} does not contain the observation text it was given; every stage shows "
                                      f"the agent what it sees (obs_text)"))
    if "create_single_stage_prompt" in rendered:
        text, file, who = rendered["create_single_stage_prompt"]
        if flat(thinking_of(agent)) not in flat(text):
            problems.append(violation("prompt-missing-thinking", file,
                                      f"{who} does not contain the thinking_response it was given; Stage 2 shows "
                                      f"Stage 1's reasoning and asks for ONE action given it"))
        missing = [name for name in table if not re.search(rf"\b{re.escape(name)}\b", text)]
        if missing:
            problems.append(violation("prompt-missing-helper-menu", file,
                                      f"{who} never names the helper(s) {', '.join(missing)}; the prompt offers every "
                                      f"action helper with its arguments (the brief's 'Available high-level actions "
                                      f"with signatures')"))
        wrong = sorted({int(n) for n in AGENT_ID.findall(text) if int(n) != agent})
        if wrong:
            problems.append(violation("prompt-wrong-agent-id", file,
                                      f"{who} shows \"agent_id\": {wrong[0]} in its response format for agent "
                                      f"{agent}; the JSON example names the agent's own id"))
    both = " ".join(text for text, _, _ in rendered.values())
    unnamed = [f"{name}({p.name})" for name, f in table.items() for p in required_parameters(f)
               if not re.search(rf"\b{re.escape(p.name)}\b", both)]
    if unnamed and rendered:
        text, file, who = list(rendered.values())[-1]
        problems.append(violation("prompt-missing-helper-menu", file,
                                  f"the prompts never name the argument(s) {', '.join(unnamed)}; offer every helper "
                                  f"with its signature so the model can fill \"args\""))
    return problems


def required_parameters(helper: Callable) -> list[inspect.Parameter]:
    """The parameters after (game, agent_id) a call must fill: an optional one (with a default) is no
    required part of the menu."""
    return [p for p in list(inspect.signature(helper).parameters.values())[2:]
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def find_dispatch(candidates: list[Callee], table: dict[str, types.FunctionType], board: Board,
                  working: dict[str, Success]) -> Callee | None:
    """The CUSTOMIZE function of (game, call) that runs a helper when given a call naming it."""
    tracer = HelperTracer(table)
    index_of = {p.turn: i for i, p in enumerate(board.positions)}
    for candidate in (c for c in candidates if c.arity == 2):
        for name, success in list(working.items())[:2]:
            tracer.run(candidate.function, board.copy(index_of[success.turn]),
                       {"action": name, "agent_id": success.agent, "args": dict(success.args)})
            if tracer.entered:
                return candidate
    return None


def check_dispatch(candidates: list[Callee], table: dict[str, types.FunctionType], board: Board,
                   working: dict[str, Success], offered: str, others: list[str]) -> list[dict]:
    """The CUSTOMIZE function that runs a parsed call: each offered helper, named with an agent id and
    arguments it accepts, runs itself only and does exactly what calling it directly does (for that agent,
    with that result); a low-level action, another function of helpers.py (`others`) or an unknown name runs
    nothing."""
    tracer = HelperTracer(table)
    index_of = {p.turn: i for i, p in enumerate(board.positions)}
    offered_helpers = {n: s for n, s in working.items() if re.search(rf"\b{re.escape(n)}\b", offered)} or working
    dispatch = find_dispatch(candidates, table, board, offered_helpers)
    if dispatch is None:
        return []
    problems = []
    for name, success in offered_helpers.items():
        payload = {"action": name, "agent_id": success.agent, "args": dict(success.args)}
        game, direct = board.copy(index_of[success.turn]), board.copy(index_of[success.turn])
        result, error = tracer.run(dispatch.function, game, copy.deepcopy(payload))
        entered = list(tracer.entered)
        expected, _ = call(table[name], direct, success.agent, **copy.deepcopy(success.args))
        own = tracer.canonical[name]
        if entered[:1] != [own] or set(entered) != {own} or error is not None:
            ran = ", ".join(f"{n}()" for n in dict.fromkeys(entered)) or "no helper"
            detail = f"ran {ran}" + (f" and raised {type(error).__name__}: {error}" if error else "")
        elif state(game) != state(direct) or type(result) is not type(expected) or result != expected:
            changed = differences(state(direct), state(game))
            detail = (f"ran {name}() but not as {name}(game, {success.agent}, **args): "
                      + (f"the game differs at {show_path(changed[0])}" if changed
                         else f"it returned {result!r} where the helper returns {expected!r}"))
        else:
            continue
        problems.append(violation("dispatch-wrong-helper", "train.py",
                                  f"{dispatch.label}(game, {payload}) {detail}; the named helper, and only it, must "
                                  f"run as {name}(game, agent_id, **args), for that agent, and its result returned"))
        break
    accepted = []
    first = next(iter(working.values()))
    for action in [a for a in board.play.actions if str(a) not in table] + others + ["not_a_helper"]:
        _, error = tracer.run(dispatch.function, board.copy(index_of[first.turn]),
                              {"action": action, "agent_id": first.agent, "args": {}})
        if error is None:
            accepted.append((action, list(dict.fromkeys(tracer.entered))))
    if accepted:
        (action, ran), also = accepted[0], [repr(a) for a, _ in accepted[1:]]
        done = f"ran {', '.join(f'{n}()' for n in ran)} instead" if ran else "returned without running an action helper"
        problems.append(violation("dispatch-accepts-raw-action", "train.py",
                                  f"{dispatch.label}(game, {{\"action\": {action!r}, ...}}) {done} (also: "
                                  f"{', '.join(also) or 'none'}); a call must name an action helper, and anything "
                                  f"else raises ValueError, so that the training plays its fallback with the penalty"))
    problems += bad_arguments(dispatch, table, board, working, index_of, tracer)
    return problems


BAD_VALUES = {"int": (10 ** 9, -10 ** 9), "float": (1e12, float("nan")), "str": ("not_a_value_7f3a",)}


def bad_arguments(dispatch: Callee, table: dict[str, types.FunctionType], board: Board, working: dict[str, Success],
                  index_of: dict[int, int], tracer: HelperTracer) -> list[dict]:
    """dispatch-accepts-bad-arguments: a call to a real helper whose "args" is not an object, names a parameter the
    helper does not have, or holds values the helper itself refuses (a ValueError or TypeError when called
    directly: the arguments the probe's calls met, and out-of-range values), must raise (the penalty path), not run
    the helper some other way (with repaired arguments, a retry, a default)."""
    for name, success in working.items():
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(table[name]).parameters.values())
        tries = [(success.turn, success.agent, ["not", "an", "object"], "")]
        tries += [] if takes_any else [(success.turn, success.agent, {**success.args, "not_a_parameter_7f3a": 1}, "")]
        tries += [(turn, agent, args, "the helper refuses them") for turn, agent, args in success.refused[:3]]
        tries += [(success.turn, success.agent, args, "the helper refuses them")
                  for args in out_of_range(table[name], success.args)
                  if refuses(table[name], board.copy(index_of[success.turn]), success.agent, args)]
        for turn, agent, args, why in tries:
            payload = {"action": name, "agent_id": agent, "args": args}
            _, error = tracer.run(dispatch.function, board.copy(index_of[turn]), copy.deepcopy(payload))
            if error is None:
                ran = ", ".join(f"{n}()" for n in dict.fromkeys(tracer.entered)) or "no helper"
                refused = f" ({why}: {name}(game, {agent}, **{args!r}) raises)" if why else ""
                return [violation("dispatch-accepts-bad-arguments", "train.py",
                                  f"{dispatch.label}(game, {payload}) returned normally (it ran {ran}){refused}; "
                                  f"arguments the helper cannot take must raise (TypeError or ValueError), so that the "
                                  f"training plays its fallback with the penalty instead of another action (no retry "
                                  f"with repaired arguments, no default)")]
    return []


def out_of_range(helper: Callable, args: dict[str, Any]) -> list[dict[str, Any]]:
    """`args` with one value at a time replaced by one far out of any game's range, by the value's own kind."""
    found = []
    for key, value in args.items():
        kind = "int" if isinstance(value, int) and not isinstance(value, bool) else type(value).__name__
        found += [{**args, key: bad} for bad in BAD_VALUES.get(kind, ())]
    return found[:4]


def refuses(helper: Callable, game: Any, agent: int, args: dict[str, Any]) -> bool:
    _, error = call(helper, game, agent, **copy.deepcopy(args), seconds=CALL_SECONDS)
    return isinstance(error, (ValueError, TypeError))
