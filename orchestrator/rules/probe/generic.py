"""GENERIC by behaviour: the researcher's template, imported apart before train.py runs, is the yardstick
for what train.py's GENERIC code does ("Keep all # === GENERIC — DO NOT MODIFY === sections unchanged":
byte-identical text must also run as the template's does).

- generic-object-rebound: once train.py is imported and its CUSTOMIZE code has run (the game, helpers,
  prompts and dispatch probed), every name the template's GENERIC sections bind is, in train.py, what
  the template binds: the same module or library object, a function or class with the same code and
  members (members the template's CUSTOMIZE sections define aside), the same value; every library
  attribute the GENERIC code reads (`torch.clamp`, `math.ceil`, ...) is still the object it was before
  train.py was imported, every library class it names keeps its members, and no builtin it reads is
  shadowed or replaced.
- generic-behaviour-changed: every GENERIC function whose arguments can be made from its annotations
  (tensors, numbers, strings, lists and dicts of them, the template's own dataclasses; never a model, a
  config or a file) returns the same values and leaves its arguments the same in train.py as in the
  template, on the same fixed inputs with the same seeds.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import sys
import types
import typing
from typing import Any

from orchestrator.rules.probe.values import (at, call, canonical, differences, digest, same_object, short, show_path,
                                             unwrap, violation)

TEMPLATE_MODULE = "_grpo_template_reference"
SHAPES = ((2, 3), (3,))  # the tensors of each try: a batch of rows, then one row
SKIPPED_MEMBERS = {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__dataclass_fields__",
                   "__dataclass_params__", "__match_args__", "__annotations__", "__parameters__", "__orig_bases__",
                   "__abstractmethods__", "_abc_impl", "__firstlineno__", "__static_attributes__",
                   "__protocol_attrs__", "__non_callable_proto_members__"}
DATA = (type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset)
MISSING = object()


class Unmade(Exception):
    """An argument the probe cannot make from its annotation."""


def resolve(annotation: Any, namespace: dict[str, Any]) -> Any:
    if isinstance(annotation, str):
        try:
            return eval(annotation, dict(namespace))  # an annotation is an expression over the module's names
        except Exception as exc:
            raise Unmade(annotation) from exc
    return annotation


def make(kind: Any, namespace: dict[str, Any], module: str, index: int, variant: int) -> Any:
    """A fixed value of type `kind` (the same for the same index and variant, in any process)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return make(next(a for a in args if a is not type(None)), namespace, module, index, variant)
    if kind is bool:
        return index % 2 == 0
    if kind is int:
        return 2 + index + variant
    if kind is float:
        return round(0.25 + 0.1 * index + 0.05 * variant, 4)
    if kind is str:
        return f"probe{index}"
    if kind is list or origin is list:
        item = args[0] if args else int
        return [make(item, namespace, module, index * 7 + k + 1, variant) for k in range(3 - index % 2)]
    if kind is tuple or origin is tuple:
        if args and args[-1] is Ellipsis:
            return tuple(make(args[0], namespace, module, index * 7 + k + 1, variant) for k in range(2))
        return tuple(make(a, namespace, module, index * 7 + k + 1, variant) for k, a in enumerate(args or (int, int)))
    if kind is dict or origin is dict:
        if not args:
            return {}
        return {make(args[0], namespace, module, index * 7 + k + 1, variant):
                make(args[1], namespace, module, index * 7 + k + 2, variant) for k in range(2)}
    if isinstance(kind, type):
        root = kind.__module__.split(".")[0]
        if kind.__name__ == "Tensor" and root == "torch":
            torch = sys.modules["torch"]
            generator = torch.Generator().manual_seed(1000 + 10 * index + variant)
            return torch.randn(SHAPES[variant], generator=generator)
        if kind.__name__ == "ndarray" and root == "numpy":
            numpy = sys.modules["numpy"]
            return numpy.random.default_rng(1000 + 10 * index + variant).standard_normal(SHAPES[variant])
        if kind.__name__ == "device" and root == "torch":
            return kind("cpu")
        if dataclasses.is_dataclass(kind) and kind.__module__ == module:
            values = {}
            for k, f in enumerate(dataclasses.fields(kind)):
                if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    values[f.name] = make(resolve(f.type, namespace), namespace, module, index * 5 + k + 1, variant)
            return kind(**values)
    raise Unmade(repr(kind))


def arguments(function: types.FunctionType, variant: int) -> list[Any]:
    """Fixed arguments for every required parameter; Unmade when one cannot be made."""
    target = unwrap(function)
    params = [p for p in inspect.signature(target).parameters.values()
              if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not params or any(p.kind in (p.KEYWORD_ONLY,) and p.default is p.empty
                         for p in inspect.signature(target).parameters.values()):
        raise Unmade("no parameter to vary")
    namespace = target.__globals__
    return [make(resolve(p.annotation if p.annotation is not p.empty else Any, namespace), namespace,
                 target.__module__, index, variant) for index, p in enumerate(params)]


def walk(root: Any, parts: list[str]) -> Any:
    value = root
    for part in parts:
        value = getattr(value, part, MISSING)
        if value is MISSING:
            return MISSING
    return value


def is_own(value: Any, module: str) -> bool:
    value = unwrap(value)
    return isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == module


def members(cls: type, skipped: set[str]) -> dict[str, str]:
    return {k: digest(v) for k, v in vars(cls).items() if k not in SKIPPED_MEMBERS and k not in skipped}


class Reference:
    """The template's GENERIC code as the researcher wrote it: its bindings, the library objects it reads,
    and what its functions return on fixed inputs, all taken before train.py is imported."""

    def __init__(self, template: types.ModuleType, plan: dict[str, Any]) -> None:
        self.template = template
        self.names = [n for n in plan.get("generic_names", []) if n not in set(plan.get("customize_names", []))]
        self.customize_members = {cls: set(names) for cls, names in plan.get("class_customize_members", {}).items()}
        self.library: dict[str, tuple[Any, dict[str, Any] | None]] = {}
        for chain in plan.get("chains", []):
            root, *parts = chain.split(".")
            if not isinstance(getattr(template, root, None), types.ModuleType):
                continue
            value = walk(getattr(template, root), parts)
            if value is not MISSING and not is_own(value, template.__name__):
                self.library[chain] = (value, dict(vars(value)) if isinstance(value, type) else None)
        self.builtins = {n: getattr(builtins, n) for n in plan.get("read_names", [])
                         if n not in vars(template) and hasattr(builtins, n)}
        self.outputs: dict[str, tuple[int, Any, Any]] = {}
        for name in self.names:
            function = getattr(template, name, None)
            if not (isinstance(function, types.FunctionType) and is_own(function, template.__name__)):
                continue
            for variant in range(len(SHAPES)):
                try:
                    args = arguments(function, variant)
                except Unmade:
                    break
                result, error = call(function, *args)
                if error is None:
                    self.outputs[name] = (variant, canonical(result), canonical(args))
                    break

    def compare(self, train: types.ModuleType) -> list[dict]:
        return self.compare_names(train) + self.compare_library(train) + self.compare_calls(train)

    def compare_names(self, train: types.ModuleType) -> list[dict]:
        problems = []
        for name in self.names:
            want, got = getattr(self.template, name, MISSING), getattr(train, name, MISSING)
            reason = self.differs(name, want, got, train.__name__)
            if reason:
                problems.append(violation("generic-object-rebound", "train.py",
                                          f"{name}, which a GENERIC section binds, {reason} by the time the training "
                                          f"runs (CUSTOMIZE code rebound or patched it, maybe from inside a function, "
                                          f"through __main__, a class body or a `global` statement); GENERIC code must "
                                          f"run on the template's own objects: remove that change"))
        return problems

    def differs(self, name: str, want: Any, got: Any, train_module: str) -> str:
        if got is MISSING:
            return "is missing from train.py"
        if isinstance(want, types.ModuleType):
            return "" if got is want else f"is {short(got)} instead of the module {want.__name__}"
        if is_own(want, self.template.__name__):
            if not is_own(got, train_module):
                return f"is {short(got)}, not train.py's copy of the template's {type(unwrap(want)).__name__}"
            if isinstance(want, type):
                skipped = self.customize_members.get(name, set())
                mine, theirs = members(got, skipped), members(want, skipped)
                changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                return f"has other members than the template's: {', '.join(changed)}" if changed else ""
            return "" if digest(got) == digest(want) else "runs other code than the template's"
        if isinstance(want, DATA):
            return "" if canonical(got) == canonical(want) else f"is {short(got)} instead of {short(want)}"
        if got is want:
            return ""
        try:
            return "" if got == want else f"is {short(got)} instead of {short(want)}"
        except Exception:  # an object that cannot be compared: identity was the test
            return f"is {short(got)} instead of {short(want)}"

    def compare_library(self, train: types.ModuleType) -> list[dict]:
        problems = []
        for chain, (then, members_then) in self.library.items():
            root, *parts = chain.split(".")
            now = walk(getattr(train, root, MISSING), parts)
            if not same_object(now, then):
                problems.append(violation("generic-object-rebound", "train.py",
                                          f"{chain}, which the GENERIC code reads, is {short(now)} instead of "
                                          f"{short(then)} (what it was before train.py ran): CUSTOMIZE code replaced a "
                                          f"library object the GENERIC code relies on; leave libraries as they are"))
            elif members_then is not None:
                current = vars(now)
                changed = sorted({k for k, v in members_then.items() if not same_object(current.get(k, MISSING), v)}
                                 | {k for k in current if k not in members_then})
                if changed:
                    problems.append(violation("generic-object-rebound", "train.py",
                                              f"{chain}, which the GENERIC code uses, had {', '.join(changed[:5])} "
                                              f"replaced or added after train.py was imported: leave library classes "
                                              f"as they are"))
        for name, original in self.builtins.items():
            if name in vars(train) or getattr(builtins, name) is not original:
                problems.append(violation("generic-object-rebound", "train.py",
                                          f"the builtin {name}, which the GENERIC code calls, is shadowed or "
                                          f"replaced in train.py; name your own function differently"))
        return problems

    def compare_calls(self, train: types.ModuleType) -> list[dict]:
        problems = []
        for name, (variant, result, args_after) in self.outputs.items():
            function = getattr(train, name, None)
            if not isinstance(function, types.FunctionType):
                continue  # compare_names reports it
            try:
                args = arguments(function, variant)
            except Unmade:
                continue
            got, error = call(function, *args)
            if error is not None:
                detail = (f"raises {type(error).__name__}: {str(error)[:200]} where the template's returned "
                          f"{short(result)}")
            elif canonical(got) != result:
                detail = self.first_difference(canonical(got), result, "returns")
            elif canonical(args) != args_after:
                detail = self.first_difference(canonical(args), args_after, "leaves its arguments")
            else:
                continue
            problems.append(violation("generic-behaviour-changed", "train.py",
                                      f"the GENERIC {name}(...) on fixed inputs {detail}; its text is the template's, "
                                      f"so CUSTOMIZE code changed what it runs on (a library function or a global it "
                                      f"reads): undo that change"))
        return problems

    @staticmethod
    def first_difference(got: Any, want: Any, what: str) -> str:
        where = differences(want, got)[0]
        return (f"{what} {short(at(got, where))} where the template's gives {short(at(want, where))} "
                f"(at {show_path(where) if where else 'the whole value'})")
