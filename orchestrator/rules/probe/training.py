"""The training run judged from inside, in every training process: GENERIC code compared with the researcher's
template after every optimizer step and once more as the process ends, so a patch that CUSTOMIZE code applies
only while training runs (on the first call of a function only the training loop calls), on one rank only, or
that it undoes when the training ends, is caught where it acts.

The runtime check's `sitecustomize` (orchestrator/training/census.py) calls `start` in every training process
before train.py's code runs: the researcher's template is imported apart and its `Reference` taken (generic.py:
GENERIC bindings, the library objects and classes the GENERIC code reaches and the tables their functions read,
its functions' outputs on fixed inputs), and an `InstanceWatch` notes the instances of the template's GENERIC
classes, and of the library classes its GENERIC code names, as they are made. After every optimizer step (torch's
global step hook) and when the interpreter shuts down (`threading`'s exit hook, which runs before any of
train.py's `atexit` handlers can undo a patch), `compare` checks train.py (the `__main__` module) against the
reference (and searches the libraries the GENERIC code imports for functions of the generated files), reports
instance attributes that shadowed a method and writes to the source-of-truth files (protect.py), and appends what
it found, as violations of the same rules, to the findings file the runtime check reads: one record per
comparison, so that a process without any is seen (census.py: "the training check did not run").

It never breaks the run: it writes nothing to the run's stdout or stderr (file descriptors 1 and 2 point at
/dev/null while it works, the stream objects the GENERIC code holds stay the same), adds no logging handler (those
the template's module code adds when imported apart are taken off again), silences warnings and logging while it
calls functions, leaves the random generators as they were, refuses writes only to its own calls
(values.guard_this_thread_only) and to the source-of-truth files, and its own errors become a note in the findings
instead of an exception. Its own instruments (its step hook, its gc callback) are in place before the reference
is taken, so they are never seen as changes. The template's module code runs before train.py's, so torch,
transformers and accelerate are imported a moment earlier than train.py would: the same imports, moved, not added.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import gc
import inspect
import json
import logging
import os
import random
import sys
import threading
import time
import traceback
import types
import warnings
import weakref
from typing import Any, Iterator

from orchestrator.rules.probe.generic import DURING_TRAINING, TEMPLATE_MODULE, Reference, replaced_by_generated_code
from orchestrator.rules.probe.protect import Guard, protect
from orchestrator.rules.probe.values import guard_this_thread_only, short, violation

TRAINING_MODULE = "__main__"  # train.py as `accelerate launch` (or `python train.py`) runs it


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Nothing reaches the run's stdout or stderr (which a launch script may write into train.logs): file
    descriptors 1 and 2 point at /dev/null meanwhile, and sys.stdout and sys.stderr stay the objects they are (the
    GENERIC code may hold them: a `logging.StreamHandler(sys.stderr)` must find its own stream)."""
    flush_streams()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        flush_streams()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream the training replaced or closed: nothing of ours to flush
            pass


@contextlib.contextmanager
def calling() -> Iterator[None]:
    """Around each call of a GENERIC function: silenced, warnings and logging too (a handler the training set up
    may write to a file, train.logs itself)."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with silenced(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)


def logging_handlers() -> dict[int, tuple[logging.Logger, list[logging.Handler]]]:
    """Every logger's handlers, by logger."""
    loggers = [logging.root, *(v for v in list(logging.root.manager.loggerDict.values())
                               if isinstance(v, logging.Logger))]
    return {id(logger): (logger, list(logger.handlers)) for logger in loggers}


def drop_new_handlers(before: dict[int, tuple[logging.Logger, list[logging.Handler]]]) -> None:
    """Take off the loggers the handlers added since `before`: the template's module code, run apart, adds its
    handlers to the same loggers train.py's will (loggers are global), and each line would be written twice."""
    for key, (logger, handlers) in logging_handlers().items():
        kept = before.get(key, (logger, []))[1]
        for handler in [h for h in handlers if h not in kept]:
            logger.removeHandler(handler)


@contextlib.contextmanager
def random_state_kept() -> Iterator[None]:
    """The reference calls functions under fixed seeds; the random generators loaded now (Python's, torch's,
    numpy's) are left as they were for the training."""
    python_state = random.getstate()
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    torch_state = (torch.initial_seed(), torch.get_rng_state()) if torch is not None else None
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        random.setstate(python_state)
        if torch_state is not None:
            torch.manual_seed(torch_state[0])  # CUDA's generators too, as they were before any seeding
            torch.set_rng_state(torch_state[1])
        if numpy_state is not None:
            numpy.random.set_state(numpy_state)


def import_template(path: str, script_folder: str) -> types.ModuleType:
    """The template as a module of its own; its imports (grpo_config) resolve from the training folder, as
    train.py's will (sys.path gets the script's folder only once this interpreter has started)."""
    from orchestrator.rules.probe.game import import_apart

    sys.path.insert(0, script_folder)
    try:
        return import_apart(path, TEMPLATE_MODULE)
    finally:
        sys.path.remove(script_folder)


# ---------------------------------------------------------------- instances of GENERIC classes

class InstanceWatch:
    """The instances of train.py's GENERIC classes and of the library classes its GENERIC code names (Accelerator),
    and the members of their class that any of them shadows with an attribute of its own.

    An instance lives in train.py's functions and is gone when they return, so it is judged while the training
    runs: at every garbage collection (a gc callback, no cost per call) the young generation's new instances of
    those classes are noted by weak reference, and every noted instance still alive is looked at.
    A GENERIC class's member may be shadowed when the template's GENERIC code itself sets an attribute of that
    name (`self.forward = ...`), when it is a dataclass field or a cached property, or when a CUSTOMIZE section
    of the class defines it. A library class's method that the GENERIC code calls (`accelerator.backward`) may
    be shadowed by the library itself (torch's LR scheduler wraps `optimizer.step` on the instance): it counts
    when the generated code wrote the new value or it no longer wraps the method (generic.py's rule)."""

    def __init__(self, classes: dict[str, set[str]], allowed: set[str], library: dict[type, frozenset[str]],
                 folder: str, module: str = TRAINING_MODULE) -> None:
        self.pending = dict(classes)  # class name -> members its CUSTOMIZE sections define, until train.py binds it
        self.allowed = allowed  # attribute names the GENERIC code sets itself
        self.library = set(library)  # classes whose own code may shadow their members too
        self.folder = folder  # the training's folder: code written there is the generated code
        self.module = module
        self.shadowable: dict[type, frozenset[str]] = dict(library)
        self.alive: dict[int, tuple[weakref.ref, type]] = {}
        self.found: dict[tuple[str, str], str] = {}  # (class, attribute) -> the value that shadows
        self.instances = 0  # instances noted
        self.collections = 0  # garbage collections watched
        self.seconds = 0.0  # spent in them
        self.error = ""

    def install(self) -> None:
        gc.callbacks.append(self.on_collect)

    def uninstall(self) -> None:
        if self.on_collect in gc.callbacks:
            gc.callbacks.remove(self.on_collect)

    def on_collect(self, phase: str, info: dict) -> None:
        if phase != "start":
            return
        started = time.perf_counter()
        try:
            self.resolve()
            if self.shadowable:
                self.note(gc.get_objects(generation=0))
                self.inspect()
        except Exception as exc:  # the watch stops; the training goes on
            self.error = f"{type(exc).__name__}: {exc}"
            self.uninstall()
        self.collections += 1
        self.seconds += time.perf_counter() - started

    def resolve(self) -> None:
        """The GENERIC classes train.py has bound by now (its module body runs while the watch is on)."""
        if not self.pending:
            return
        module = sys.modules.get(self.module)
        namespace = vars(module) if module is not None else {}
        for name in [n for n in self.pending if isinstance(namespace.get(n), type)]:
            cls = namespace[name]
            if cls.__module__ == self.module:
                members = self.members(cls, self.pending[name])
                if members:
                    self.shadowable[cls] = members
            del self.pending[name]

    def members(self, cls: type, customize: set[str]) -> frozenset[str]:
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        own = [c for c in cls.__mro__ if c.__module__ == self.module]
        return frozenset(name for c in own for name, value in vars(c).items()
                         if not name.startswith("__") and name not in fields and name not in customize
                         and name not in self.allowed and not isinstance(value, functools.cached_property))

    def note(self, objects: list) -> None:
        for obj in objects:
            cls = type(obj)
            if cls in self.shadowable and id(obj) not in self.alive:
                try:
                    self.alive[id(obj)] = (weakref.ref(obj, functools.partial(self.forget, id(obj))), cls)
                except TypeError:  # no weak reference (__slots__): no __dict__ either, nothing can shadow
                    continue
                self.instances += 1

    def forget(self, key: int, _ref: weakref.ref) -> None:
        self.alive.pop(key, None)

    def inspect(self) -> None:
        for ref, cls in list(self.alive.values()):
            obj = ref()
            own = getattr(obj, "__dict__", None) if obj is not None else None
            if not own:
                continue
            for name in self.shadowable[cls].intersection(own):
                if cls not in self.library or replaced_by_generated_code(
                        own[name], inspect.getattr_static(cls, name), self.folder, DURING_TRAINING):
                    self.found.setdefault((cls.__qualname__, name), short(own[name], 80))

    def sweep(self) -> None:
        """At the end: every instance still alive, all of them when the garbage collector was off."""
        self.resolve()
        if self.shadowable and not gc.isenabled():
            self.note(gc.get_objects())
        if self.shadowable:
            self.inspect()

    def violations(self) -> list[dict]:
        library = {cls.__qualname__ for cls in self.library}
        return [violation("generic-object-rebound", "train.py",
                          f"an instance of {'' if cls in library else 'the GENERIC class '}{cls} had its own {name} "
                          f"during training ({value}), shadowing {cls}.{name}: CUSTOMIZE code set it on the "
                          f"instance, so the GENERIC code that calls {name} on it runs other code than the "
                          f"template's; remove that assignment")
                for (cls, name), value in sorted(self.found.items())]


def generic_classes(reference: Reference, plan: dict[str, Any]) -> dict[str, set[str]]:
    """The template's GENERIC classes, each with the members its CUSTOMIZE sections define."""
    customize = plan.get("class_customize_members", {})
    return {name: set(customize.get(name, [])) for name in reference.names
            if isinstance(value := getattr(reference.template, name, None), type)
            and value.__module__ == reference.template.__name__}


METHODS = (types.FunctionType, staticmethod, classmethod, functools.partialmethod, types.MethodDescriptorType,
           types.WrapperDescriptorType, types.BuiltinFunctionType)


def library_classes(reference: Reference, plan: dict[str, Any]) -> dict[type, frozenset[str]]:
    """The library classes the GENERIC code imports by name, each with the methods it calls on them by
    attribute (a value an instance of the library's own may hold, a dataclass field, is no method)."""
    called = set(plan.get("attributes", []))
    found = {}
    for cls, members in reference.library_classes.values():
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        methods = frozenset(n for n in called & members.keys() - fields if isinstance(members[n], METHODS))
        if methods:
            found[cls] = methods
    return found


# ---------------------------------------------------------------- the check's ends

@dataclasses.dataclass
class TrainingCheck:
    reference: Reference
    watch: InstanceWatch
    guard: Guard
    folder: str  # the training's folder: train.py and the other generated files
    findings: str
    seconds: dict[str, float]  # CPU seconds of each part: the template's import, the reference, the comparisons
    updates: int = 0  # optimizer steps seen
    comparing: bool = False

    def after_step(self, *_: Any) -> None:
        """torch's global optimizer-step hook: compare while the training is still running."""
        self.updates += 1
        self.compare(f"after optimizer step {self.updates}")

    def finish(self) -> None:
        """Compare as the process ends, before train.py's own exit handlers run. A training that raised is compared
        too (a patch may be why it broke), unless train.py's module body never finished."""
        self.watch.uninstall()
        train = sys.modules.get(TRAINING_MODULE)
        if getattr(sys, "last_value", None) is not None and not all(hasattr(train, n) for n in self.reference.names):
            write(self.findings, [], "train.py raised before it bound every GENERIC name: its traceback is the "
                                     "evidence, its GENERIC code was not compared", moment="at exit", final=True)
            return
        self.compare("at exit", final=True)

    def compare(self, moment: str, final: bool = False) -> None:
        if self.comparing:  # a GENERIC function stepped an optimizer while being compared
            return
        self.comparing = True
        try:
            started = time.process_time()
            with silenced(), random_state_kept():
                if final:
                    self.watch.sweep()
                problems = self.reference.compare(sys.modules.get(TRAINING_MODULE), DURING_TRAINING, self.folder)
                problems += self.watch.violations() + self.guard.violations("during training")
            note = f"the instance watch stopped: {self.watch.error}" if self.watch.error else ""
            self.seconds["comparisons"] = self.seconds.get("comparisons", 0.0) + time.process_time() - started
            checked = {"functions": len(self.reference.outputs), "tables": len(self.reference.tables),
                       "classes": len(self.watch.shadowable), "instances": self.watch.instances,
                       "collections": self.watch.collections, "updates": self.updates,
                       "seconds": {k: round(v, 3) for k, v in {**self.seconds, "watch": self.watch.seconds}.items()}}
            write(self.findings, problems, note, checked, moment=moment, final=final)
        except BaseException as exc:
            write(self.findings, [], f"the comparison {moment} failed: {describe(exc)}", moment=moment, final=final)
        finally:
            self.comparing = False


def at_shutdown(function: Any) -> None:
    """`function` runs as the interpreter shuts down, before any atexit handler (threading's own exit hook, which
    runs first); atexit where that hook is missing."""
    register = getattr(threading, "_register_atexit", None)
    try:
        register(function)
    except Exception:  # an interpreter without it
        atexit.register(function)


def step_hook(check: TrainingCheck) -> bool:
    """Compare after every optimizer step (torch's global hook, for any optimizer), where torch offers one."""
    register = getattr(sys.modules.get("torch.optim.optimizer"), "register_optimizer_step_post_hook", None)
    if register is None:
        return False
    register(check.after_step)
    return True


def start(plan_path: str, findings: str) -> None:
    """Take the template's reference and watch the GENERIC classes' instances; compare after every optimizer step
    and at shutdown."""
    try:
        with open(plan_path) as handle:
            plan = json.load(handle)
        guard_this_thread_only()
        folder = os.path.dirname(os.path.realpath(sys.argv[0]))
        guard = protect(folder)
        started = time.process_time()
        # not silenced: what the template's module code sets up (a logging handler on stdout, warning filters)
        # must hold the run's own streams and filters, as when train.py runs that code
        handlers = logging_handlers()
        template = import_template(plan["template"], folder)
        drop_new_handlers(handlers)
        imported = time.process_time()
        check = TrainingCheck(None, None, guard, folder, findings, {})  # type: ignore[arg-type]
        hooked = step_hook(check)  # before the reference: the hook it adds to torch's table is the check's own
        with silenced(), random_state_kept():
            check.reference = Reference(template, plan, calling=calling)
        check.watch = InstanceWatch(generic_classes(check.reference, plan), set(plan.get("attribute_stores", [])),
                                    library_classes(check.reference, plan), folder)
        check.watch.install()
        check.seconds.update({"template import": imported - started, "reference": time.process_time() - imported})
        at_shutdown(check.finish)
        if not hooked:
            write(findings, [], "no optimizer-step hook (torch not loaded by the template): compared at exit only",
                  moment="start")
    except BaseException as exc:  # the training goes on, unjudged
        write(findings, [], f"the template's reference could not be taken: {describe(exc)}", moment="start")


def describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" ({os.path.basename(where[0].filename)}, line {where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{at}"


def write(path: str, problems: list[dict], note: str, checked: dict[str, Any] | None = None, *, moment: str,
          final: bool = False) -> None:
    """One comparison's findings, a JSON line: the process, when, its violations, a note on what it could not do,
    what it compared."""
    record = {"pid": os.getpid(), "host": os.uname().nodename, "rank": os.environ.get("RANK"), "moment": moment,
              "final": final, "violations": problems, "note": note, "checked": checked or {}}
    with open(path, "a") as handle:
        handle.write(json.dumps(record, default=str) + "\n")
