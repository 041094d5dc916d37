"""GENERIC by behaviour: the researcher's template, imported apart before train.py runs, is the yardstick
for what train.py's GENERIC code does ("Keep all # === GENERIC — DO NOT MODIFY === sections unchanged":
byte-identical text must also run as the template's does).

- generic-object-rebound: once train.py is imported and its CUSTOMIZE code has run (the game, helpers,
  prompts and dispatch probed), every name the template's GENERIC sections bind is, in train.py, what
  the template binds: the same module or library object, a function or class with the same code and
  members (members the template's CUSTOMIZE sections define aside), the same value; every library
  attribute the GENERIC code reads (`torch.clamp`, `math.ceil`, ...) is still the object it was before
  train.py was imported, every library class it names (`torch.optim.AdamW`, or `Accelerator` imported by
  name) keeps its members, also those it inherits under a name the GENERIC code reads by attribute
  (`accelerator.clip_grad_norm_`, `optimizer.zero_grad`), and no builtin it reads is shadowed or replaced; at
  the end of a training, also no function of the third-party packages it imports (torch's clip_grad_norm_,
  which accelerate's calls) is code of the generated files.
- generic-behaviour-changed: every GENERIC function whose arguments can be made from its annotations
  (tensors, numbers, strings, lists and dicts of them, the template's own dataclasses; never a model, a
  config or a file) returns the same values and leaves its arguments the same in train.py as in the
  template, on the same fixed inputs with the same seeds.

The import check's probe compares once CUSTOMIZE code has run on a real game; the runtime check compares again
at the end of its training run (`when=DURING_TRAINING`, training.py), where what the template's own functions
change while they run (module names: `run_time_written`; class members: `attribute_stores`) is left out, and
a library object counts as changed only when the generated code changed it (`replaced_by_generated_code`).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import inspect
import os
import re
import sys
import types
import typing
from typing import Any, Callable, ContextManager

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


@dataclasses.dataclass(frozen=True)
class Moment:
    """When a comparison is made, as its messages say it."""

    end: str  # when a changed binding is seen
    change: str  # when the change happened
    libraries_ran: bool = False  # the template's own code and its libraries have run: they change things too


AFTER_IMPORT = Moment("by the time the training runs", "after train.py was imported")
DURING_TRAINING = Moment("during the training run", "during training", libraries_ran=True)


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


def inner(value: Any) -> list[Any]:
    """What a value runs on: a decorator's `__wrapped__`, a partial's or a method's function, a property's."""
    if isinstance(value, (staticmethod, classmethod, types.MethodType)):
        return [value.__func__]
    if isinstance(value, (functools.partial, functools.partialmethod)):
        return [value.func]
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    if isinstance(value, types.FunctionType):  # functools.wraps sets it on the function
        wrapped = getattr(value, "__wrapped__", None)
        return [wrapped] if wrapped is not None and wrapped is not value else []
    try:
        wrapped = inspect.getattr_static(value, "__wrapped__", None)
    except Exception:  # an object that refuses to be looked at has no known inside
        return []
    return [wrapped] if wrapped is not None and wrapped is not value else []


def layers(value: Any, limit: int = 20) -> list[Any]:
    """`value` and everything it runs on, outermost first."""
    found, queue = [], [value]
    while queue and len(found) < limit:
        item = queue.pop(0)
        found.append(item)
        queue += inner(item)
    return found


def code_file(value: Any) -> str | None:
    if isinstance(value, types.FunctionType):
        return value.__code__.co_filename
    if isinstance(value, type):
        return getattr(sys.modules.get(value.__module__), "__file__", None)
    return None


@functools.lru_cache(maxsize=None)
def real_path(filename: str) -> str:
    """A code file's real path; '' for code without a file (`<string>`: made by exec, as namedtuple's)."""
    return "" if filename.startswith("<") else os.path.realpath(filename)


def written_in(value: Any, folder: str) -> bool:
    """The code of `value`, or of what it wraps, is in a file of `folder` (train.py, helpers.py, ...)."""
    if type(value) is types.FunctionType and getattr(value, "__wrapped__", None) is None:  # most of them: quickly
        return real_path(value.__code__.co_filename).startswith(folder + os.sep)
    files = (code_file(layer) for layer in layers(value))
    return any(f is not None and real_path(f).startswith(folder + os.sep) for f in files)


def replaced_by_generated_code(now: Any, then: Any, folder: str, when: Moment) -> bool:
    """Whether a library object that changed from `then` to `now` counts: always right after the import;
    once the libraries have run, which wrap their own functions (torch._dynamo wraps torch.manual_seed) and
    add members (transformers adds torch.nn.Module.smart_apply), only when the generated code wrote the new
    object or the original is gone (nothing in the new one wraps it)."""
    if not when.libraries_ran:
        return True
    if written_in(now, folder):
        return True
    return then is not MISSING and not any(same_object(layer, then) for layer in layers(now))


CODE = (types.FunctionType, types.MethodType, functools.partial, functools.partialmethod, staticmethod, classmethod,
        property)


def library_packages(template: types.ModuleType, names: list[str]) -> set[str]:
    """The third-party packages (torch, accelerate, transformers) of what the GENERIC sections bind."""
    found = set()
    for name in names:
        value = getattr(template, name, None)
        module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(module, str):
            found.add(module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - {template.__name__, "builtins", "__main__"}


def namespace_mark(namespace: Any) -> int:
    """What a namespace holds, by identity: another mark once any name is bound to another object."""
    try:
        return hash(tuple(map(id, namespace.values())))
    except RuntimeError:  # changed while read (another thread): searched again
        return -1


def generated_code_in(namespace: Any, where: tuple[str, ...], folder: str) -> list[tuple[str, Any]]:
    return [(".".join((*where, key)), value) for key, value in list(namespace.items())
            if isinstance(value, CODE) and written_in(value, folder)]


def origin(value: Any) -> str:
    """A value for a message, with the file and line of a function the generated code wrote."""
    function = next((v for v in layers(value) if isinstance(v, types.FunctionType)), None)
    if function is None:
        return short(value)
    code = function.__code__
    return f"{short(value)} ({os.path.basename(code.co_filename)}, line {code.co_firstlineno})"


def reached_members(cls: type, attributes: set[str]) -> dict[str, Any]:
    """A library class's own members, and those it inherits under a name the GENERIC code reads by attribute
    (an instance's method: `accelerator.clip_grad_norm_` is Accelerator's, `optimizer.zero_grad` Optimizer's)."""
    found = dict(vars(cls))
    for name in attributes - found.keys():
        value = inspect.getattr_static(cls, name, MISSING)
        if value is not MISSING:
            found[name] = value
    return found


MOST_TABLE_ITEMS = 5000  # a larger container is a cache, not a table
TABLE_DEPTH = 2  # reached functions, then the module functions they name


def code_names(code: types.CodeType) -> set[str]:
    """The global names a function's code (its nested functions' too) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_names(const)
    return names


def library_tables(functions: list[Any]) -> dict[str, tuple[str, Any]]:
    """`module.NAME` -> (the reached function that reads it, its value) for each module-level table (a dict, list,
    tuple or set) of a third-party module that the given functions, and the module functions they name, read by
    name. (A number or a flag a library sets as it runs, `torch.cuda._initialized`, is no table.)"""
    found: dict[str, tuple[str, Any]] = {}
    queue, seen = [(f, 0) for f in functions], set()
    while queue:
        value, level = queue.pop(0)
        for function in (layer for layer in layers(value) if isinstance(layer, types.FunctionType)):
            module = function.__globals__.get("__name__")
            if id(function) in seen or not isinstance(module, str) or module.partition(".")[0] in \
                    sys.stdlib_module_names or module in ("__main__", "builtins"):
                continue
            seen.add(id(function))
            owner = f"{module}.{function.__qualname__}"
            for name in code_names(function.__code__):
                inner = function.__globals__.get(name, MISSING)
                if isinstance(inner, types.FunctionType) and level + 1 < TABLE_DEPTH:
                    queue.append((inner, level + 1))
                elif isinstance(inner, (dict, list, tuple, set, frozenset)) and not name.startswith("__") \
                        and len(inner) <= MOST_TABLE_ITEMS:
                    found.setdefault(f"{module}.{name}", (owner, inner))
    return found


def table_form(value: Any, depth: int = 0) -> Any:
    """A table as its entries: containers by their items, anything else by identity (the same object, whatever
    it holds); compared within one process."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, float):
        return repr(value)
    if depth < 3 and isinstance(value, dict):  # what it holds, read without its own methods (a lazy mapping's
        return {table_key(k): table_form(v, depth + 1)  # items() would import every entry)
                for k, v in list(dict.items(value))[:MOST_TABLE_ITEMS]}
    if depth < 3 and isinstance(value, list):
        return [table_form(v, depth + 1) for v in list.__iter__(value)]
    if depth < 3 and isinstance(value, tuple):
        return ("<tuple>", *(table_form(v, depth + 1) for v in value))
    if depth < 3 and isinstance(value, (set, frozenset)):
        return ("<set>", frozenset(table_key(v) for v in value))
    return f"<{type(value).__name__} {getattr(value, '__qualname__', '')}#{id(value)}>"


def unnumbered(form: Any) -> str:
    """A table entry for a message, without the identities it is compared by."""
    return re.sub(r"#\d+", "", short(form, 100))


def table_key(key: Any) -> Any:
    return key if key is None or isinstance(key, (bool, int, float, str, bytes)) else repr(key)


def table_changes(then: Any, now: Any, path: tuple = ()) -> list[tuple]:
    """Where an entry of `then` was replaced or removed in `now`; a dict's new keys and a list that grew or shrank
    are a registry's or a cache's own bookkeeping (handlers noted, hooks added), not an edit of what is there."""
    if type(then) is not type(now):
        return [path]
    if isinstance(then, dict):
        return [change for key in then for change in
                ([path + (key,)] if key not in now else table_changes(then[key], now[key], path + (key,)))]
    if isinstance(then, list):
        return [] if len(then) != len(now) else [c for i, (a, b) in enumerate(zip(then, now))
                                                 for c in table_changes(a, b, path + (i,))]
    if isinstance(then, tuple) and then[:1] == ("<set>",):
        return [] if then[1] <= now[1] else [path]
    return [] if then == now else [path]


class Reference:
    """The template's GENERIC code as the researcher wrote it: its bindings, the library objects it reads,
    and what its functions return on fixed inputs, all taken before train.py is imported."""

    def __init__(self, template: types.ModuleType, plan: dict[str, Any],
                 calling: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> None:
        """`calling`: the context every call of a GENERIC function runs in (the training check's silence), so that
        what is read of the libraries is never read inside it."""
        self.template = template
        self.calling = calling
        self.names = [n for n in plan.get("generic_names", []) if n not in set(plan.get("customize_names", []))]
        self.customize_members = {cls: set(names) for cls, names in plan.get("class_customize_members", {}).items()}
        self.run_time_written = set(plan.get("run_time_written", []))
        self.attribute_stores = set(plan.get("attribute_stores", []))
        attributes = set(plan.get("attributes", []))
        self.library: dict[str, tuple[Any, dict[str, Any] | None]] = {}
        for chain in plan.get("chains", []):
            root, *parts = chain.split(".")
            if not isinstance(getattr(template, root, None), types.ModuleType):
                continue
            value = walk(getattr(template, root), parts)
            if value is not MISSING and not is_own(value, template.__name__):
                self.library[chain] = (value, reached_members(value, attributes) if isinstance(value, type) else None)
        self.library_classes = {name: (value, reached_members(value, attributes)) for name in self.names
                                if isinstance(value := getattr(template, name, None), type)
                                and not is_own(value, template.__name__)}  # `from accelerate import Accelerator`
        self.builtins = {n: getattr(builtins, n) for n in plan.get("read_names", [])
                         if n not in vars(template) and hasattr(builtins, n)}
        self.packages = library_packages(template, self.names)
        self.tables = {label: (owner, table_form(value)) for label, (owner, value) in
                       library_tables(self.reached_functions()).items()}
        self.scanned: dict[tuple[str, ...], tuple[int, list, list]] = {}  # compare_packages' search, kept
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
                with self.calling():
                    result, error = call(function, *args)
                if error is None:
                    self.outputs[name] = (variant, canonical(result), canonical(args))
                    break

    def compare(self, train: types.ModuleType, when: Moment = AFTER_IMPORT, folder: str | None = None) -> list[dict]:
        """`folder`: where the generated files are (default: train.py's; a finished script has no __file__)."""
        folder = folder or os.path.dirname(os.path.realpath(getattr(train, "__file__", None) or "."))
        problems = self.compare_names(train, when) + self.compare_library(train, folder, when)
        problems += self.compare_tables(when) + self.compare_calls(train, when)
        return problems + (self.compare_packages(train, folder) if when.libraries_ran else [])

    def reached_functions(self) -> list[Any]:
        """The library functions the GENERIC code calls: those it reads by attribute or binds by name, and the
        methods of the library classes it names that it reads by attribute."""
        found = [value for value, _ in self.library.values() if not isinstance(value, (type, types.ModuleType))]
        found += [getattr(self.template, n) for n in self.names if callable(getattr(self.template, n, None))
                  and not isinstance(getattr(self.template, n), type) and not is_own(getattr(self.template, n),
                                                                                      self.template.__name__)]
        for _, members in [*self.library.values(), *self.library_classes.values()]:
            found += [v for v in (members or {}).values() if isinstance(v, CODE)]
        return found

    def compare_tables(self, when: Moment) -> list[dict]:
        """The library data the reached functions read (tables, settings), by content: an entry replaced in place
        (transformers' scheduler table made to map cosine to linear) changes what the GENERIC code runs."""
        problems = []
        for label, (owner, then) in self.tables.items():
            module, _, name = label.rpartition(".")
            now = table_form(getattr(sys.modules.get(module), name, MISSING))
            changed = table_changes(then, now)
            if changed:
                where = changed[0]
                problems.append(violation("generic-object-rebound", "train.py",
                                          f"{label}, library data that {owner} (which the GENERIC code calls) reads, "
                                          f"was changed {when.change}: at {show_path(where)} it holds "
                                          f"{unnumbered(at(now, where))} instead of {unnumbered(at(then, where))}; "
                                          f"CUSTOMIZE code edited a library's table "
                                          f"in place, so the GENERIC code runs other code than the template's: leave "
                                          f"libraries' data as it is"))
        return problems

    def compare_packages(self, train: types.ModuleType, folder: str) -> list[dict]:
        """The library code the GENERIC code runs on without naming it (accelerate's clip_grad_norm_ calls
        torch's): every module of the third-party packages the GENERIC code imports, and every class defined
        there, is searched for a function the generated code wrote; what compare_library judges is left to it."""
        judged = {id(walk(getattr(train, root, MISSING), parts))
                  for root, *parts in (chain.split(".") for chain in self.library)}
        judged |= {id(inspect.getattr_static(cls, k, MISSING)) for cls, members in self.library_classes.values()
                   for k in members}
        found = []
        for name, module in list(sys.modules.items()):
            if name.partition(".")[0] not in self.packages or not isinstance(module, types.ModuleType):
                continue
            if real_path(getattr(module, "__file__", None) or "<none>").startswith(folder + os.sep):
                continue
            found += self.searched((name,), vars(module), folder, lambda ns, name=name: [
                ((name, k), v) for k, v in list(ns.items()) if isinstance(v, type) and v.__module__ == name])
        found = [(label, value) for label, value in found if id(value) not in judged]
        if not found:
            return []
        (first, value), labels = found[0], ", ".join(label for label, _ in found[:5])
        return [violation("generic-object-rebound", "train.py",
                          f"{labels}, library code the GENERIC code runs on, became code of the generated files "
                          f"during training ({first} is now {origin(value)}): CUSTOMIZE code patched "
                          f"{first.partition('.')[0]} under the GENERIC code; leave libraries as they are")]

    def searched(self, where: tuple[str, ...], namespace: Any, folder: str,
                 classes: Callable[[Any], list[tuple[tuple[str, ...], type]]]) -> list[tuple[str, Any]]:
        """The functions of the generated files in a module's namespace and its classes'; a namespace is searched
        again only once something in it was rebound (the search runs after every optimizer step)."""
        mark = namespace_mark(namespace)
        seen = self.scanned.get(where)
        if seen is None or seen[0] != mark:
            seen = (mark, generated_code_in(namespace, where, folder), classes(namespace))
            self.scanned[where] = seen
        found = list(seen[1])
        for inner, cls in seen[2]:
            found += self.searched(inner, vars(cls), folder, lambda ns: [])
        return found

    def compare_names(self, train: types.ModuleType, when: Moment = AFTER_IMPORT) -> list[dict]:
        problems = []
        for name in self.names:
            want, got = getattr(self.template, name, MISSING), getattr(train, name, MISSING)
            if when.libraries_ran and name in self.run_time_written and isinstance(want, DATA):
                continue
            reason = self.differs(name, want, got, train.__name__, when)
            if reason:
                problems.append(violation("generic-object-rebound", "train.py",
                                          f"{name}, which a GENERIC section binds, {reason} {when.end} (CUSTOMIZE "
                                          f"code rebound or patched it {when.change}, maybe from inside a function, "
                                          f"through __main__, a class body or a `global` statement); GENERIC code must "
                                          f"run on the template's own objects: remove that change"))
        return problems

    def differs(self, name: str, want: Any, got: Any, train_module: str, when: Moment = AFTER_IMPORT) -> str:
        if got is MISSING:
            return "is missing from train.py"
        if isinstance(want, types.ModuleType):
            return "" if got is want else f"is {short(got)} instead of the module {want.__name__}"
        if is_own(want, self.template.__name__):
            if not is_own(got, train_module):
                return f"is {short(got)}, not train.py's copy of the template's {type(unwrap(want)).__name__}"
            if isinstance(want, type):
                skipped = self.customize_members.get(name, set())
                if when.libraries_ran:  # members the GENERIC code itself sets or fills while it runs
                    skipped = skipped | self.attribute_stores
                mine, theirs = members(got, skipped), members(want, skipped)
                changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                return f"has other members than the template's: {', '.join(changed)}" if changed else ""
            return "" if digest(got) == digest(want) else "runs other code than the template's"
        if isinstance(want, DATA):
            return "" if canonical(got) == canonical(want) else f"is {short(got)} instead of {short(want)}"
        if got is want:
            return ""
        if type(got) is type(want) and not isinstance(want, (*CODE, types.BuiltinFunctionType, type)):
            # an object the GENERIC module code makes as it runs (a logging handler, a loss module): train.py's is
            # an instance of its own, of the same class; right after the import, in the same state too (during
            # training the GENERIC code itself changes it)
            if when.libraries_ran or canonical(got) == canonical(want):
                return ""
            return f"is {short(got)}, in another state than the template's {short(want)}"
        try:
            return "" if got == want else f"is {short(got)} instead of {short(want)}"
        except Exception:  # an object that cannot be compared: identity was the test
            return f"is {short(got)} instead of {short(want)}"

    def compare_library(self, train: types.ModuleType, folder: str, when: Moment = AFTER_IMPORT) -> list[dict]:
        problems = []
        for chain, (then, members_then) in self.library.items():
            root, *parts = chain.split(".")
            now = walk(getattr(train, root, MISSING), parts)
            if not same_object(now, then):
                if replaced_by_generated_code(now, then, folder, when):
                    problems.append(violation("generic-object-rebound", "train.py",
                                              f"{chain}, which the GENERIC code reads, is {origin(now)} instead of "
                                              f"{short(then)} (what it was before train.py ran): CUSTOMIZE code "
                                              f"replaced a library object the GENERIC code relies on {when.change}; "
                                              f"leave libraries as they are"))
            elif members_then is not None:
                problems += self.changed_members(chain, now, members_then, folder, when)
        for name, (then, members_then) in self.library_classes.items():
            if getattr(train, name, MISSING) is then:  # a rebound name is compare_names' finding
                problems += self.changed_members(name, then, members_then, folder, when)
        for name, original in self.builtins.items():
            now = getattr(builtins, name)
            if name in vars(train) or (now is not original and replaced_by_generated_code(now, original, folder, when)):
                problems.append(violation("generic-object-rebound", "train.py",
                                          f"the builtin {name}, which the GENERIC code calls, is shadowed or "
                                          f"replaced in train.py ({when.change}); name your own function differently"))
        return problems

    @staticmethod
    def changed_members(label: str, cls: type, then: dict[str, Any], folder: str, when: Moment) -> list[dict]:
        now = {k: inspect.getattr_static(cls, k, MISSING) for k in {*then, *vars(cls)}}
        changed = sorted(k for k, v in now.items() if not same_object(v, then.get(k, MISSING))
                         and replaced_by_generated_code(v, then.get(k, MISSING), folder, when))
        if not changed:
            return []
        return [violation("generic-object-rebound", "train.py",
                          f"{label}, which the GENERIC code uses, had {', '.join(changed[:5])} replaced or added "
                          f"{when.change} ({label}.{changed[0]} is now {origin(now[changed[0]])}): leave library "
                          f"classes as they are")]

    def compare_calls(self, train: types.ModuleType, when: Moment = AFTER_IMPORT) -> list[dict]:
        problems = []
        for name, (variant, result, args_after) in self.outputs.items():
            function = getattr(train, name, None)
            if not isinstance(function, types.FunctionType):
                continue  # compare_names reports it
            try:
                args = arguments(function, variant)
            except Unmade:
                continue
            with self.calling():
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
                                      f"the GENERIC {name}(...) on fixed inputs {detail} {when.end}; its text is the "
                                      f"template's, so CUSTOMIZE code changed what it runs on (a library function or "
                                      f"a global it reads) {when.change}: undo that change"))
        return problems

    @staticmethod
    def first_difference(got: Any, want: Any, what: str) -> str:
        where = differences(want, got)[0]
        return (f"{what} {short(at(got, where))} where the template's gives {short(at(want, where))} "
                f"(at {show_path(where) if where else 'the whole value'})")
