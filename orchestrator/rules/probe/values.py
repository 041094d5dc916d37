"""What the probe compares, and how it calls generated code.

- `canonical(value)`: a plain, comparable form of any value (floats by repr so NaN equals NaN, arrays and
  tensors by dtype, shape and values, RNGs by their state, plain Python objects by class name and attributes,
  an object whose state is held in compiled code, such as OpenSpiel's `pyspiel.State`, by its own
  serialisation, else its string and views), the same for two objects of two copies of one module. The object
  graph is walked once (cycles and shared references by the path of their first visit) within a budget; dict
  keys are named by content where a repr would hold an address. What cannot be read is an `Unread`, noted
  with its type (`Reading.notes`), as is how each compiled class was read.
- `differences(a, b)`: the paths (attribute, key, index, ...) at which two canonical forms differ.
- `digest(value)`: a fingerprint of what a function or class does (its code, defaults and members).
- `guarded()`: every call into generated code runs under it: no file is written, no socket or process
  is opened (an audit hook refuses them), and a call that runs too long is stopped.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import functools
import hashlib
import importlib.machinery
import json
import os
import random
import re
import signal
import sys
import threading
import types
import weakref
from typing import Any, Iterator

MAX_DEPTH = 40  # a path this long is past the budget too (a chain of wrappers is a few levels)
Where = tuple  # a path into a canonical form: attribute names, keys and indices


ADDRESS = re.compile(r" (at|of) 0x[0-9a-fA-F]+")  # a repr's memory address: different in every run
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# a coordinate pair in any numeric form "natural language with coordinates" admits: (2,3), [2, 3], (+0.21, -0.60),
# (1.5 2.0), x=0.21, y=-0.6, x: 3 y: 4, (row 2, col 3)
COORDINATE_PAIRS = (re.compile(rf"[(\[]\s*({NUMBER})\s*[,;]?\s+({NUMBER})\s*[)\]]|[(\[]\s*({NUMBER})\s*[,;]\s*({NUMBER})\s*[)\]]"),
                    re.compile(rf"\b(?:x|row|r)\s*[=:]?\s*({NUMBER})\s*[,;]?\s*(?:and\s+)?(?:y|col|column|c)\s*[=:]?\s*"
                               rf"({NUMBER})", re.I))


def coordinate_matches(text: str) -> list[re.Match]:
    """Every coordinate pair in `text`, in order of appearance."""
    return sorted((m for pattern in COORDINATE_PAIRS for m in pattern.finditer(text)), key=lambda m: m.start())


def coordinate_pairs(text: str) -> list[tuple[float, float]]:
    """Every coordinate pair in `text`, as floats, in order of appearance."""
    return [tuple(float(g) for g in m.groups() if g is not None) for m in coordinate_matches(text)]


def violation(rule: str, file: str, message: str) -> dict[str, str]:
    return {"rule": rule, "file": file, "message": ADDRESS.sub("", message)}


def short(value: Any, limit: int = 120) -> str:
    """A value for a message: its repr (canonical floats unwrapped, no memory addresses), cut at `limit`."""
    text = ADDRESS.sub("", repr(value).replace("<float ", "").replace(">'", "'"))
    return text if len(text) <= limit else text[:limit] + "..."


def is_array(value: Any) -> bool:
    """A tensor or array (torch, numpy, ...): has a dtype, a shape and tolist()."""
    return all(hasattr(value, name) for name in ("dtype", "shape", "tolist")) and not isinstance(value, type)


class Unread:
    """What the probe could not read: an object whose state it has no way to see, or one past the walk's budget,
    shown by its type. Two of one type compare equal (what cannot be seen cannot be told apart), and every one
    met is a note, "not verified" with its type (`Reading.notes`): never passed silently."""

    def __init__(self, value: Any, why: str) -> None:
        self.kind, self.why = qualified(type(value)), why

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unread) and (other.kind, other.why) == (self.kind, self.why)

    def __hash__(self) -> int:
        return hash((self.kind, self.why))

    def __repr__(self) -> str:
        return f"<{self.kind}: not verified>" if self.why else f"<{self.kind}>"


MOST_NODES = 20_000  # objects one walk reads (about 0.15 CPU-s); past it the rest is Unread, never passed silently
# objects all walks of one probe read (about 15 CPU-s; the examples' probes read 3,000 to 70,000): past it every
# state is Unread, so a game of any size is judged within `check`'s minute, saying what it could not verify
PROBE_NODES = 2_000_000
READERS = ("serialize", "get_state", "__getstate__", "state_dict")  # a compiled object's own serialisation, in order
VIEWS = ("observation_tensor", "history")  # then a library state's views beside its string
# library objects that are the process's, not a game's (a logger, a lock, a stream, a font): never walked
RESOURCE_MODULES = ("logging", "threading", "_thread", "io", "_io", "socket", "selectors", "asyncio", "multiprocessing",
                    "concurrent", "weakref", "_weakrefset", "warnings", "tqdm", "pygame", "_abc")
PLAIN_KEYS = (type(None), bool, int, float, str, bytes)


class Reading:
    """How the probe read the state of what it compared, for the run's notes: each compiled class by the way
    used, and what could not be read. Kept for the process (one probe)."""
    ways: dict[str, str] = {}
    unread: dict[str, str] = {}
    nodes = 0  # objects read by every walk of this process

    @classmethod
    def notes(cls) -> list[str]:
        found = []
        if cls.ways:
            found.append("state read through " + ", ".join(f"{k} by {v}" for k, v in sorted(cls.ways.items())))
        if cls.unread:
            found.append("not verified: " + ", ".join(f"{k} ({v})" for k, v in sorted(cls.unread.items())))
        return found


def qualified(kind: type) -> str:
    module = kind.__module__ or ""
    return kind.__qualname__ if module in ("builtins", "__main__") else f"{module}.{kind.__qualname__}"


def canonical(value: Any) -> Any:
    """The plain form of `value`, its object graph walked once: a cycle or a second reference to the same
    mutable object is `<same as PATH>` (the path of its first visit); at most MOST_NODES objects are read, and
    PROBE_NODES by all walks of the process."""
    walk = _Walk()
    try:
        return walk.form(value, ())
    finally:
        Reading.nodes += walk.nodes


class _Walk:
    def __init__(self) -> None:
        self.seen: dict[int, tuple] = {}
        self.kept: list[Any] = []  # what a reader returned, alive until the walk ends (its id stays unique)
        self.nodes = 0

    def form(self, value: Any, path: tuple) -> Any:
        if value is None or isinstance(value, (bool, int, str, bytes)):
            return value
        if isinstance(value, float):
            return f"<float {value!r}>"
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
                              functools.partial, types.ModuleType)):
            return f"<{type(value).__name__} {getattr(value, '__qualname__', getattr(value, '__name__', '?'))}>"
        if isinstance(value, random.Random):
            return f"<rng {hashlib.sha1(repr(value.getstate()).encode()).hexdigest()}>"
        if len(path) > MAX_DEPTH or self.nodes >= MOST_NODES:
            return self.unread(value, f"past the budget of {MOST_NODES} objects read in one state")
        if Reading.nodes + self.nodes >= PROBE_NODES:
            return self.unread(value, f"past the probe's budget of {PROBE_NODES} objects read in all")
        if isinstance(value, tuple):  # immutable: a cycle runs through a mutable object, which is remembered
            self.nodes += 1
            return tuple(self.form(v, path + (i,)) for i, v in enumerate(value))
        if id(value) in self.seen:
            return f"<same as {show_path(self.seen[id(value)])}>"
        self.seen[id(value)] = path
        self.nodes += 1
        return self.inner(value, path)

    def inner(self, value: Any, path: tuple) -> Any:
        if isinstance(value, (list, collections.deque)):
            return [self.form(v, path + (i,)) for i, v in enumerate(value)]
        if isinstance(value, (dict, collections.abc.Mapping)) and not is_array(value):
            try:
                items = list(value.items())
            except Exception:  # a mapping that cannot be listed
                return self.unread(value, "its items cannot be listed")
            form = {}
            for key, inner in items:
                name = self.key(key, path)
                while name in form:  # two keys of the same content: by place
                    name += "'"
                form[name] = self.form(inner, path + (name,))
            return form if type(value) is dict else {"<class>": qualified(type(value)), **form}
        if isinstance(value, (set, frozenset)):
            members = [self.form(v, path + ("<member>",)) for v in value]
            return ("<set>",) + tuple(sorted(members, key=repr))
        if isinstance(value, weakref.ref):
            return ("<weakref>", self.form(value(), path + ("<referent>",)))
        generator = rng_state(value)
        if generator is not None:
            return f"<rng {hashlib.sha1(repr(canonical(generator)).encode()).hexdigest()}>"
        if is_array(value):
            try:
                values = value.detach().cpu().tolist() if hasattr(value, "detach") else value.tolist()
            except Exception:  # an array that cannot be read back (a meta tensor): its type and shape only
                values = "<unreadable>"
            self.kept.append(values)
            return ("<array>", str(value.dtype), tuple(value.shape), self.form(values, path + ("<values>",)))
        kind = type(value)
        if (kind.__module__ or "").split(".")[0] in RESOURCE_MODULES:
            return Unread(value, "")  # the process's own object (a logger, a lock, a stream): no state of a game
        fields = attributes(value)
        if fields is not None and pure_python(kind):
            return {"<class>": kind.__name__, **{k: self.form(v, path + (k,)) for k, v in fields.items()}}
        read = self.read(value, path)  # state held in compiled code: what the object offers to show it
        if read is None:
            return self.unread(value, "no state it shows (no serialize(), get_state(), __getstate__(), state_dict(), "
                                      "str(), observation_tensor() or history())")
        return {"<class>": kind.__name__, **read, **{k: self.form(v, path + (k,)) for k, v in (fields or {}).items()}}

    def key(self, key: Any, path: tuple) -> str:
        """A dict key's name: its repr for plain keys and those whose repr holds no address, else its content."""
        if isinstance(key, PLAIN_KEYS) or (isinstance(key, tuple) and all(isinstance(k, PLAIN_KEYS) for k in key)):
            return repr(key)
        text = repr(key)
        if not ADDRESS.search(text) and type(key).__repr__ is not object.__repr__:
            return text
        return f"<{type(key).__name__} {hashlib.sha1(repr(self.form(key, path + ('<key>',))).encode()).hexdigest()[:12]}>"

    def read(self, value: Any, path: tuple) -> dict[str, Any] | None:
        """A compiled object's state: its own serialisation (the first of READERS that answers), else its string
        and views (VIEWS); None when it shows nothing."""
        kind = type(value)
        for name in READERS:
            method = getattr(value, name, None)
            if not callable(method) or (name == "__getstate__" and getattr(kind, name, None) is object.__getstate__):
                continue
            try:
                found = method()
            except Exception:  # not a reader of this object (a pickling refusal, a method that needs arguments)
                continue
            if found is not None and found is not value:
                Reading.ways.setdefault(qualified(kind), f"{name}()")
                self.kept.append(found)
                return {f"{name}()": self.form(found, path + (f"{name}()",))}
        shown: dict[str, Any] = {}
        if kind.__str__ is not object.__str__ or kind.__repr__ is not object.__repr__:
            text = str(value)
            if not ADDRESS.search(text):
                shown["str()"] = text
        for name in VIEWS:
            method = getattr(value, name, None)
            if callable(method):
                try:
                    found = method()
                except Exception:  # a view this state does not offer now (a terminal state's observation)
                    continue
                self.kept.append(found)
                shown[f"{name}()"] = self.form(found, path + (f"{name}()",))
        if shown and (kind.__module__ or "").split(".")[0] not in ("numpy", "torch"):  # a dtype: its name is all
            Reading.ways.setdefault(qualified(kind), " and ".join(shown))
        return shown or None

    def unread(self, value: Any, why: str) -> Unread:
        Reading.unread.setdefault(qualified(type(value)), why)
        return Unread(value, why)


def rng_state(value: Any) -> Any:
    """The state of a random generator that keeps it out of reach of `attributes` (numpy's Generator,
    BitGenerator and RandomState, torch's Generator), so that two generators in different states differ."""
    module = type(value).__module__ or ""
    if not module.startswith(("numpy", "torch")):
        return None
    for read in (lambda: value.bit_generator.state, lambda: value.get_state(), lambda: value.state):
        try:
            found = read()
        except Exception:  # not this kind of generator
            continue
        if isinstance(found, (dict, tuple)) or is_array(found):
            return found
    return None


def attributes(value: Any) -> dict[str, Any] | None:
    """An object's attributes: its __dict__ and its __slots__; None for an object without either."""
    found: dict[str, Any] | None = None
    if isinstance(getattr(value, "__dict__", None), dict) and not isinstance(value, type):
        found = dict(vars(value))
    for cls in type(value).__mro__:
        slots = vars(cls).get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                found = {} if found is None else found
                found[name] = getattr(value, name)
    return found


def pure_python(kind: type) -> bool:
    """Whether all of an object's state is in its attributes: no class of its MRO but `object` comes from a
    builtin or compiled module (random.Random's base, a dict subclass, a Cython or pybind11 class keep state of
    their own)."""
    return not any(compiled(c.__module__) for c in kind.__mro__[:-1])


def compiled(module_name: str) -> bool:
    if module_name in sys.builtin_module_names:
        return True
    where = getattr(sys.modules.get(module_name), "__file__", None) or ""
    return where.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def differences(a: Any, b: Any, path: Where = ()) -> list[Where]:
    """The paths at which two canonical forms differ; a changed length or type counts at the container."""
    if type(a) is not type(b):
        return [path]
    if isinstance(a, dict):
        found = []
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                found.append(path + (key,))
            else:
                found += differences(a[key], b[key], path + (key,))
        return found
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [path]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in differences(x, y, path + (i,))]
    return [] if a == b else [path]


def covered(path: Where, allowed: list[Where]) -> bool:
    """`path` is one of `allowed` or lies under one."""
    return any(path[:len(a)] == a for a in allowed)


def show_path(path: Where) -> str:
    """A path as code-like text: `_pending[1]`, `_positions[0]`, `stats.loss`."""
    text = "".join(f".{part}" if isinstance(part, str) and part.isidentifier() else f"[{part}]" for part in path)
    return text.lstrip(".") or "(the whole value)"


def at(form: Any, path: Where) -> Any:
    """The part of a canonical form at `path` (None when the path is absent)."""
    for part in path:
        try:
            form = form[part]
        except (KeyError, IndexError, TypeError):
            return None
    return form


def same_object(a: Any, b: Any) -> bool:
    """The same object, a method bound anew to the same object, or an equal plain value."""
    if a is b:
        return True
    if isinstance(a, types.MethodType) and isinstance(b, types.MethodType):
        return a.__self__ is b.__self__ and a.__func__ is b.__func__
    if isinstance(a, types.BuiltinMethodType) and isinstance(b, types.BuiltinMethodType):
        return a.__self__ is b.__self__ and a.__name__ == b.__name__
    plain = (type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset)
    return isinstance(a, plain) and isinstance(b, plain) and canonical(a) == canonical(b)


# ---------------------------------------------------------------- fingerprints of code

def code_digest(code: types.CodeType) -> str:
    """The code's instructions, names and constants; `co_code` is the unspecialised bytecode, stable
    while the interpreter specialises the running code (marshal of the code object is not)."""
    consts = [code_digest(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    signature = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_varnames, code.co_flags)
    return hashlib.sha1(code.co_code + repr((code.co_names, consts, signature)).encode()).hexdigest()


def unwrap(value: Any) -> Any:
    """The function under decorators that keep it as __wrapped__ (torch.no_grad, contextmanager, ...)."""
    for _ in range(10):
        inner = getattr(value, "__wrapped__", None)
        if inner is None or inner is value:
            break
        value = inner
    return value


def digest(value: Any, depth: int = 0) -> str:
    """A fingerprint of what a module attribute does: code for functions, members for classes, the value
    itself for data (by canonical form, whole)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return "property:" + "|".join(digest(f, depth + 1) for f in (value.fget, value.fset, value.fdel) if f)
    value = unwrap(value)
    if isinstance(value, types.FunctionType):
        defaults = canonical(value.__defaults__), canonical(value.__kwdefaults__)
        return f"function:{code_digest(value.__code__)}:{hashlib.sha1(repr(defaults).encode()).hexdigest()}"
    if isinstance(value, type) and depth == 0:
        members = {k: digest(v, depth + 1) for k, v in sorted(vars(value).items()) if not k.startswith("__")
                   or k in ("__init__", "__post_init__", "__call__", "__new__")}
        return "class:" + json.dumps(members, sort_keys=True)
    if isinstance(value, types.ModuleType):
        return f"module:{value.__name__}"
    if callable(value) or isinstance(value, type):
        return f"{type(value).__name__}:{id(value)}"
    return f"{type(value).__name__}:{hashlib.sha1(repr(canonical(value)).encode()).hexdigest()}"


# ---------------------------------------------------------------- calls into generated code

class ProbeTimeout(BaseException):
    """A call into generated code ran past its time (BaseException: an `except Exception` cannot swallow it)."""


class _Sandbox:
    active = False
    installed = False
    thread = 0  # the thread whose calls are guarded
    this_thread_only = False  # in a training (training.py), its other threads write on meanwhile


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_REFUSED = {"os.remove", "os.rename", "os.replace", "os.mkdir", "os.rmdir", "os.chmod", "os.chown", "os.truncate",
            "os.symlink", "os.link", "os.utime", "shutil.rmtree", "shutil.move", "socket.connect", "socket.bind",
            "socket.getaddrinfo", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
            "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.chdir", "pty.spawn"}


def _audit(event: str, args: tuple) -> None:
    if not _Sandbox.active or (_Sandbox.this_thread_only and threading.get_ident() != _Sandbox.thread):
        return
    refused = event in _REFUSED
    if event == "open" and len(args) >= 3:
        mode, flags = args[1], args[2]
        refused = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
    if refused:
        raise PermissionError(f"the probe refuses {event} {args[:1]!r}: generated code is probed without writing "
                              f"files, opening sockets or starting processes")


def guard_this_thread_only() -> None:
    """From now on `guarded` refuses only the guarded thread's writes: in a training process, whose other
    threads (a tracker's writer, a logging thread) are not the code being judged."""
    _Sandbox.this_thread_only = True


def _stop(signum, frame) -> None:
    raise ProbeTimeout("the call did not return in time")


@contextlib.contextmanager
def guarded(seconds: float = 5.0) -> Iterator[None]:
    """Run generated code: no writes, sockets or processes, at most `seconds` (not re-entrant)."""
    if not _Sandbox.installed:
        sys.addaudithook(_audit)
        _Sandbox.installed = True
    previous = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    _Sandbox.active, _Sandbox.thread = True, threading.get_ident()
    try:
        yield
    finally:
        _Sandbox.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def seed_everything(seed: int = 0) -> None:
    """The same random numbers for every call: Python's, and torch's and numpy's where loaded."""
    random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None and hasattr(getattr(numpy, "random", None), "seed"):
        numpy.random.seed(seed)


def call(function: Any, *args: Any, seconds: float = 5.0, **kwargs: Any) -> tuple[Any, BaseException | None]:
    """(result, None) or (None, the exception) of one seeded, guarded call; a timeout is an exception too."""
    seed_everything()
    try:
        with guarded(seconds):
            return function(*args, **kwargs), None
    except (Exception, ProbeTimeout, SystemExit) as exc:
        return None, exc
