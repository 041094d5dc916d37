"""What a module exposes under a name: the one definition of an action helper (and of a prompt builder).

A helper is whatever callable helpers.py exposes under that name, because that is what a dispatch reaches
(`getattr(helpers, name)`, `vars(helpers)[name]`, `from helpers import name`): a public module-level name
(no leading "_") bound to a callable the module itself made. observation_to_text is exposed the same way
but is not an action. The static rules, helper_readme.md, the tiny agent's cache key and the probe all use
this definition, read two ways:

- statically (`exposed_callables`, from the AST, nothing run): a `def` (decorated or not: a decorator is
  taken to keep the signature, as functools.wraps does), a lambda, or an assignment whose value resolves
  to one of the module's own functions: another name, `Class.member` (a staticmethod, classmethod or plain
  function of a module-level class), `Class(...).member` (a bound method), `Class(...)` of a class with a
  `__call__`, `functools.partial(function, ...)`, or a decorator applied by hand (`cache(function)`);
  each with the parameters a caller passes (a bound self or cls, and a partial's arguments, taken out as
  inspect.signature does);
- at run time (`action_helpers`): the module's public names whose value, unwrapped (`__wrapped__`, a
  partial's function, a bound method's function, a callable object's `__call__`), is a function whose
  `__module__` is the module.

Ambiguous cases, decided: a class is not a helper (calling it builds an object; it plays nothing); a name
imported into helpers.py is not one (another module made it); a later binding replaces an earlier one and
`del` removes it, as at run time; names bound inside a module-level `if` or `try` count, since which
branch runs is not known statically, except under `if TYPE_CHECKING:`, which never runs; two public names
for one function are two helpers. A public name bound to what a function of the module returns (a
factory's closure) cannot be followed: it is `unresolved`, accepted where only names are judged (an
offered action, a dispatch), and its signature is left to the probe.
"""

from __future__ import annotations

import ast
import functools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

OBSERVATION_HELPER = "observation_to_text"
_PARTIALS = {"partial", "functools.partial"}
_TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}
_WRAPPERS = 16  # most wrappers unwrapped before giving up (a loop of __wrapped__ never ends)

_Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass(frozen=True)
class Exposed:
    """A public name and the code that runs when it is called."""

    name: str
    function: _Function
    args: ast.arguments  # the parameters a caller passes: a bound self or cls, and a partial's arguments, taken out
    line: int  # where the name is bound

    @property
    def returns(self) -> ast.expr | None:
        return getattr(self.function, "returns", None)

    @property
    def docstring(self) -> str | None:
        return None if isinstance(self.function, ast.Lambda) else ast.get_docstring(self.function)


_UNRESOLVED = "unresolved"  # a binding the AST cannot follow: maybe a callable


# ---------------------------------------------------------------- statically

def exposed_callables(tree: ast.Module) -> dict[str, Exposed]:
    """Public module-level names bound to callables the module defines, in first-binding order."""
    return {name: value for name, value in _bindings(tree).items()
            if isinstance(value, Exposed) and not name.startswith("_")}


def unresolved_names(tree: ast.Module) -> set[str]:
    """Public names bound to what one of the module's own functions returns: maybe callables."""
    return {name for name, value in _bindings(tree).items() if value == _UNRESOLVED and not name.startswith("_")}


def static_action_helpers(tree: ast.Module) -> dict[str, Exposed]:
    """The action helpers of a helpers.py: its exposed callables but observation_to_text."""
    return {name: helper for name, helper in exposed_callables(tree).items() if name != OBSERVATION_HELPER}


def helper_names(tree: ast.Module) -> set[str]:
    """The names that may be action helpers: the exposed ones, and the unresolved ones (what rules that judge only
    names accept)."""
    return set(static_action_helpers(tree)) | (unresolved_names(tree) - {OBSERVATION_HELPER})


def module_statements(body: list[ast.stmt], *, type_checking: bool = False) -> Iterator[ast.stmt]:
    """The statements that run at module level, in order, through `if`, `try` and `with` blocks; the body
    of `if TYPE_CHECKING:` only with `type_checking` (what a type checker, or typing.get_type_hints, sees)."""
    for node in body:
        if isinstance(node, ast.If):
            checking = ast.unparse(node.test) in _TYPE_CHECKING
            if type_checking or not checking:
                yield from module_statements(node.body, type_checking=type_checking)
            yield from module_statements(node.orelse, type_checking=type_checking)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from module_statements(block, type_checking=type_checking)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from module_statements(node.body, type_checking=type_checking)
        else:
            yield node


def _bindings(tree: ast.Module) -> dict[str, Exposed | str | None]:
    """Every module-level name -> an Exposed callable, _UNRESOLVED, or None (anything else)."""
    bound: dict[str, Exposed | str | None] = {}
    classes: dict[str, ast.ClassDef] = {}
    factories: set[str] = set()
    for node in module_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound[node.name] = Exposed(node.name, node, node.args, node.lineno)
            factories.add(node.name)
        elif isinstance(node, ast.ClassDef):
            bound[node.name] = None
            classes[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update({(a.asname or a.name).split(".")[0]: None for a in node.names if a.name != "*"})
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.pop(target.id, None)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    value = _resolve(node.value, bound, classes, factories) if isinstance(target, ast.Name) else None
                    bound[name] = _renamed(value, name, node.lineno)
    return bound


def _renamed(value: Exposed | str | None, name: str, line: int) -> Exposed | str | None:
    return Exposed(name, value.function, value.args, line) if isinstance(value, Exposed) else value


def _resolve(value: ast.expr, bound: dict, classes: dict[str, ast.ClassDef],
             factories: set[str]) -> Exposed | str | None:
    """What calling the value of a module-level assignment runs, if the module defines it."""
    if isinstance(value, ast.Name):
        return bound.get(value.id)
    if isinstance(value, ast.Lambda):
        return Exposed("<lambda>", value, value.args, value.lineno)
    if isinstance(value, ast.Attribute) and isinstance(value.value, (ast.Name, ast.Call)):
        return _member(value, classes)
    if not isinstance(value, ast.Call):
        return None
    callee = ast.unparse(value.func)
    if callee in _PARTIALS and value.args:
        inner = _resolve(value.args[0], bound, classes, factories)
        return _partial(inner, value) if isinstance(inner, Exposed) else None
    if isinstance(value.func, ast.Name) and value.func.id in classes:
        call = _method(classes[value.func.id], "__call__")
        return Exposed("<instance>", call, _without_first(call.args), value.lineno) if call else None
    if len(value.args) == 1 and not value.keywords:  # a decorator applied by hand: cache(function)
        inner = _resolve(value.args[0], bound, classes, factories)
        if isinstance(inner, Exposed):
            return inner
    if isinstance(value.func, ast.Name) and value.func.id in factories:
        return _UNRESOLVED
    return None


def _member(value: ast.Attribute, classes: dict[str, ast.ClassDef]) -> Exposed | None:
    """`Class.member` or `Class(...).member` of a module-level class: the function that runs."""
    owner = value.value
    instance = isinstance(owner, ast.Call)
    if instance:
        owner = owner.func
    cls = classes.get(owner.id) if isinstance(owner, ast.Name) else None
    method = _method(cls, value.attr) if cls is not None else None
    if method is None:
        return None
    decorators = {ast.unparse(d) for d in method.decorator_list}
    bound_first = "classmethod" in decorators or (instance and "staticmethod" not in decorators)
    return Exposed(value.attr, method, _without_first(method.args) if bound_first else method.args, value.lineno)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    return found[-1] if found else None


def _without_first(args: ast.arguments) -> ast.arguments:
    """The parameters after the first positional one (a bound self or cls)."""
    positional = args.posonlyargs + args.args
    if not positional:
        return args
    defaults = args.defaults[1:] if len(args.defaults) == len(positional) else args.defaults
    if args.posonlyargs:
        return ast.arguments(args.posonlyargs[1:], args.args, args.vararg, args.kwonlyargs, args.kw_defaults,
                             args.kwarg, defaults)
    return ast.arguments([], args.args[1:], args.vararg, args.kwonlyargs, args.kw_defaults, args.kwarg, defaults)


def _partial(inner: Exposed, call: ast.Call) -> Exposed | None:
    """functools.partial(function, *args, **keywords), as inspect.signature shows it: the leading positional
    parameters bound; a parameter bound by keyword, and every positional one after it, keyword-only with a
    default."""
    given = call.args[1:]
    if any(isinstance(a, ast.Starred) for a in given) or any(k.arg is None for k in call.keywords):
        return None  # *args or **kwargs: what is bound is not known
    args = inner.args
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults))[len(given):]
    keywords = {k.arg: k.value for k in call.keywords}
    cut = next((i for i, (a, _) in enumerate(pairs) if a.arg in keywords), len(pairs))
    kept, moved = pairs[:cut], pairs[cut:]
    kwonly = [(a, keywords.get(a.arg, d)) for a, d in moved]
    kwonly += [(a, keywords.get(a.arg, d)) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    posonly = {id(a) for a in args.posonlyargs}
    kept_defaults = [d for _, d in kept if d is not None]
    return Exposed(inner.name, inner.function, ast.arguments(
        [a for a, _ in kept if id(a) in posonly], [a for a, _ in kept if id(a) not in posonly], args.vararg,
        [a for a, _ in kwonly], [d for _, d in kwonly], args.kwarg, kept_defaults), call.lineno)


# ---------------------------------------------------------------- at run time

def action_helpers(module: types.ModuleType) -> dict[str, Callable[..., Any]]:
    """The module's action helpers as they run: public names whose value is a callable the module made,
    observation_to_text aside."""
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and name != OBSERVATION_HELPER and made_by(value, module)}


def made_by(value: Any, module: types.ModuleType) -> bool:
    function = helper_function(value)
    return function is not None and function.__module__ == module.__name__


def helper_function(value: Any) -> types.FunctionType | None:
    """The function whose code runs when `value` is called (unwrapped); None for a class or a non-callable."""
    for _ in range(_WRAPPERS):
        if isinstance(value, type) or not callable(value):
            return None
        if isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, types.MethodType):
            value = value.__func__
        elif _wrapped(value) is not None:
            value = _wrapped(value)
        elif isinstance(value, types.FunctionType):
            return value
        else:  # a callable object: its class's __call__, when the class defines one in Python
            call = getattr(type(value), "__call__", None)
            return call if isinstance(call, types.FunctionType) else None
    return None


def _wrapped(value: Any) -> Any:
    try:
        return getattr(value, "__wrapped__", None)
    except Exception:  # an object whose __getattr__ raises something else than AttributeError
        return None
