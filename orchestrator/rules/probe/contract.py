"""The dynamic layer's child: import a generated folder's modules and run them on a real game.

Run as `python contract.py FOLDER` (standard library only, nothing of the orchestrator is
imported here, so the generated code meets a clean interpreter). It prints one JSON object:

    {"import_failed": MODULE, "traceback": TEXT}        a module did not import (Phase 1 of the brief)
    {"violations": [{"rule", "file", "message"}, ...]}   what the running code breaks of the contract

What it checks, each the dynamic side of a line of the brief:
- protected-module-shadowed: `env_move` and `grpo_config` resolve to the folder's own files.
- protected-module-patched: importing helpers, prompt_template and train changes no function, method
  or class attribute of `env_move` or `grpo_config` (code objects hashed before and after).
- config-invalid: GRPOConfig() with the generated values passes the config's own validation.
- observation-to-text: `observation_to_text(game, 0)` returns text with at least one coordinate pair.
- prompt-builder-output: both prompt builders return [{"role": str, "content": str}, ...].
- unknown-action: every `"action": "NAME"` in the rendered prompts names an action helper.
- helper-calls-helper: no public helper runs while another one is running (a profiler sees every
  call, however the callee was reached: alias, table, lambda, `globals()`, `getattr`, a class).
- helper-returns-non-bool, helper-raises: each action helper, called as NAME(game, 0, **args) on a
  fresh game with arguments guessed from its annotations and the prompts, returns a bool; a
  ValueError or TypeError for guessed arguments is the contract's way to refuse them, anything else
  is a bug.
The game is the first class defined in env_move that constructs with no arguments (or `seed=0`),
trying the classes with the most public methods first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import re
import sys
import traceback
import types
from typing import Any

PROTECTED = ("env_move", "grpo_config")
GENERATED = ("helpers", "prompt_template", "train")
OBSERVATION_HELPER = "observation_to_text"
COORDINATES = re.compile(r"[(\[]\s*-?\d+\s*,\s*-?\d+\s*[)\]]")
JSON_ACTION = re.compile(r"""["']action["']\s*:\s*["']([A-Za-z_]\w*)["']""")
PLACEHOLDERS = {"name", "action", "action_name", "helper", "helper_name", "function", "function_name", "func",
                "tool", "tool_name", "your_action", "some_action"}
QUOTED = re.compile(r"""["']([A-Za-z_][\w-]{0,20})["']""")


def code_digest(code: types.CodeType) -> str:
    """The code's instructions, names and constants; `co_code` is the unspecialised bytecode, stable
    while the interpreter specialises the running code (marshal of the code object is not)."""
    consts = [code_digest(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return hashlib.sha1(code.co_code + repr((code.co_names, consts)).encode()).hexdigest()


def digest(value: Any, depth: int = 0) -> str:
    """A fingerprint of what a module attribute does: code for functions, members for classes."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return "property:" + "|".join(digest(f, depth + 1) for f in (value.fget, value.fset, value.fdel) if f)
    if isinstance(value, types.FunctionType):
        return f"function:{code_digest(value.__code__)}:{value.__defaults__!r}"
    if isinstance(value, type) and depth == 0:
        members = {k: digest(v, depth + 1) for k, v in sorted(vars(value).items()) if not k.startswith("__")
                   or k in ("__init__", "__post_init__", "__call__")}
        return "class:" + json.dumps(members, sort_keys=True)
    if isinstance(value, types.ModuleType):
        return f"module:{value.__name__}"
    return f"{type(value).__name__}:{id(value) if callable(value) else repr(value)[:200]}"


def snapshot(module: types.ModuleType) -> dict[str, str]:
    return {name: digest(value) for name, value in vars(module).items() if not name.startswith("__")}


def violation(rule: str, file: str, message: str) -> dict[str, str]:
    return {"rule": rule, "file": file, "message": message}


def protected_modules(folder: str) -> tuple[dict[str, types.ModuleType], list[dict]]:
    found, problems = {}, []
    for name in PROTECTED:
        module = importlib.import_module(name)
        where = os.path.realpath(getattr(module, "__file__", "") or "")
        if where != os.path.realpath(os.path.join(folder, f"{name}.py")):
            problems.append(violation("protected-module-shadowed", f"{name}.py",
                                      f"`import {name}` loads {where or 'a module without a file'}, not {name}.py of "
                                      f"this folder; remove whatever shadows it"))
        found[name] = module
    return found, problems


def game_instance(env_move: types.ModuleType) -> Any:
    classes = [c for c in vars(env_move).values() if isinstance(c, type) and c.__module__ == env_move.__name__]
    classes.sort(key=lambda c: -sum(1 for n in vars(c) if not n.startswith("_") and callable(getattr(c, n))))
    for cls in classes:
        for kwargs in ({}, {"seed": 0}):
            try:
                return cls(**kwargs)
            except Exception:  # not the game, or not constructible this way: try the next
                continue
    return None


def action_helpers(helpers: types.ModuleType) -> dict[str, types.FunctionType]:
    return {name: f for name, f in vars(helpers).items() if isinstance(f, types.FunctionType)
            and f.__module__ == helpers.__name__ and not name.startswith("_") and name != OBSERVATION_HELPER}


def check_prompts(prompt_template: types.ModuleType, observation: str, helpers: set[str]) -> tuple[list[dict], str]:
    problems, rendered = [], []
    calls = (("create_thinking_prompt", (observation, 0)), ("create_single_stage_prompt", (observation, "I think.", 0)))
    for name, args in calls:
        builder = getattr(prompt_template, name, None)
        if builder is None:
            continue  # the static layer reports a missing builder
        try:
            messages = builder(*args)
        except Exception as exc:
            problems.append(violation("prompt-builder-output", "prompt_template.py",
                                      f"{name}{args!r} raised {type(exc).__name__}: {exc}"))
            continue
        if not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
            problems.append(violation("prompt-builder-output", "prompt_template.py",
                                      f"{name} returned {repr(messages)[:200]}; return a non-empty list of "
                                      f"{{\"role\": str, \"content\": str}} messages"))
            continue
        rendered += [m["content"] for m in messages]
    text = "\n".join(rendered)
    unknown = sorted({n for n in JSON_ACTION.findall(text) if n not in helpers and n.lower() not in PLACEHOLDERS
                      and not n.isupper()})
    for name in unknown:
        problems.append(violation("unknown-action", "prompt_template.py",
                                  f"the rendered prompt offers action {name!r}, which is not an action helper; the "
                                  f"action helpers are: {', '.join(sorted(helpers))}"))
    return problems, text


def guessed_arguments(function: types.FunctionType, words: list[str]) -> list[dict[str, Any]]:
    """Argument sets to try, for the parameters after (game, agent_id) that have no default."""
    params = [p for p in list(inspect.signature(function).parameters.values())[2:]
              if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not params:
        return [{}]
    options = []
    for p in params:
        annotation = str(p.annotation).lower()
        if "int" in annotation or "float" in annotation:
            options.append([1, 0, 2])
        elif "bool" in annotation:
            options.append([True])
        else:
            options.append(words[:12] + [1])
    return [{p.name: choice[min(i, len(choice) - 1)] for p, choice in zip(params, options)}
            for i in range(max(len(c) for c in options))]


class HelperTracer:
    """Sees every call; records a public helper entered while another public helper is running."""

    def __init__(self, helpers: dict[str, types.FunctionType]) -> None:
        self.names = {f.__code__: name for name, f in helpers.items()}
        self.active: list[str] = []
        self.nested: set[tuple[str, str]] = set()

    def __call__(self, frame, event, arg):
        name = self.names.get(frame.f_code)
        if name is None or event not in ("call", "return"):
            return
        if event == "call":
            if self.active:
                self.nested.add((self.active[-1], name))
            self.active.append(name)
        elif self.active and self.active[-1] == name:
            self.active.pop()


def check_helpers(env_move: types.ModuleType, helpers: types.ModuleType, words: list[str]) -> list[dict]:
    problems = []
    table = action_helpers(helpers)
    tracer = HelperTracer({**table, **({OBSERVATION_HELPER: helpers.observation_to_text}
                                       if isinstance(getattr(helpers, OBSERVATION_HELPER, None), types.FunctionType)
                                       else {})})
    for name, function in table.items():
        for args in guessed_arguments(function, words):
            game = game_instance(env_move)
            tracer.active = []
            sys.setprofile(tracer)
            try:
                result = function(game, 0, **args)
            except (ValueError, TypeError):
                continue  # refused these guessed arguments, as the contract allows
            except Exception as exc:
                problems.append(violation("helper-raises", "helpers.py",
                                          f"{name}(game, 0, **{args!r}) raised {type(exc).__name__}: {exc}; a helper "
                                          f"may refuse bad arguments with ValueError, never crash"))
                break
            finally:
                sys.setprofile(None)
            if not isinstance(result, bool):
                problems.append(violation("helper-returns-non-bool", "helpers.py",
                                          f"{name}(game, 0, **{args!r}) returned {result!r}; an action helper returns "
                                          f"a bool: whether its task completed"))
            break
    for caller, callee in sorted(tracer.nested):
        problems.append(violation("helper-calls-helper", "helpers.py",
                                  f"{callee}() ran inside {caller}() (however it was reached); helpers must be "
                                  f"independent: move shared logic into a private _function"))
    return problems


def probe(folder: str) -> dict:
    sys.path.insert(0, folder)
    os.chdir(folder)
    modules, problems = protected_modules(folder)
    before = {name: snapshot(module) for name, module in modules.items()}
    loaded = {}
    for name in GENERATED:
        try:
            loaded[name] = importlib.import_module(name)
        except BaseException:  # the brief's Phase 1: the first module that does not import is the evidence
            return {"import_failed": name, "traceback": traceback.format_exc()}
    for name, module in modules.items():
        after = snapshot(module)
        changed = sorted(k for k in set(before[name]) | set(after) if before[name].get(k) != after.get(k))
        if changed or sys.modules.get(name) is not module:
            problems.append(violation("protected-module-patched", f"{name}.py",
                                      f"importing the generated modules changed {name}: "
                                      f"{', '.join(changed) or 'the module object itself'}; {name}.py is protected: "
                                      f"change behaviour in the generated files, never by patching it"))
    config_cls = getattr(modules["grpo_config"], "GRPOConfig", None)
    if dataclasses.is_dataclass(config_cls) and all(  # with required fields, only a launch can construct it
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            for f in dataclasses.fields(config_cls)):
        try:
            config_cls()
        except Exception as exc:
            problems.append(violation("config-invalid", "grpo_config.py",
                                      f"GRPOConfig() fails its own validation: {type(exc).__name__}: {exc}; change "
                                      f"the value back to one the config accepts"))
    helpers, prompts = loaded["helpers"], loaded["prompt_template"]
    game = game_instance(modules["env_move"])
    observe = getattr(helpers, OBSERVATION_HELPER, None)
    if game is None or not callable(observe):
        return {"violations": problems, "note": "no game could be constructed without arguments: game checks skipped"}
    try:
        observation = observe(game, 0)
    except Exception as exc:
        problems.append(violation("observation-to-text", "helpers.py",
                                  f"observation_to_text(game, 0) raised {type(exc).__name__}: {exc}"))
        return {"violations": problems}
    if not isinstance(observation, str) or not COORDINATES.search(observation):
        problems.append(violation("observation-to-text", "helpers.py",
                                  f"observation_to_text(game, 0) returned {repr(observation)[:160]}: the brief asks for "
                                  f"natural language with coordinates, e.g. 'You are at (2,3)'"))
        observation = str(observation)
    prompt_problems, rendered = check_prompts(prompts, observation, set(action_helpers(helpers)))
    problems += prompt_problems
    words = list(dict.fromkeys(QUOTED.findall(rendered + "\n" + (inspect.getsource(helpers) or ""))))
    problems += check_helpers(modules["env_move"], helpers, words)
    return {"violations": problems}


if __name__ == "__main__":
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # whatever the generated code prints must not garble the answer
        answer = probe(os.path.abspath(sys.argv[1]))
    out.write(json.dumps(answer) + "\n")
