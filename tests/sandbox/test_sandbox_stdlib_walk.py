"""No standard-library object, bound to a program's name, passes a test it should fail.

``sandbox.judge.run_tests`` once imported, in the tests' process, the object a program's callable named by
its ``__module__`` and ``__qualname__``: ``from test.test_class import AllTests as remove_occ`` (a class
whose instances equal everything) got full marks. Now every name a program binds to a callable is a stub
that asks the program's process and gets plain data back. This test walks the whole standard library to
show that no object of it can be used that way:

1. inside a sandbox, it imports every standard-library module (``sys.stdlib_module_names``, the ``test``
   package, and the submodules of each package one level deep) and collects every callable and class
   reachable from one in one or two attribute steps (``module.attr``, ``module.attr.attr``), plus any
   callable whose own ``__module__``/``__qualname__`` resolves by ``getattr`` from its module. Each
   object is kept once, under its first (shortest) path; C methods bound to an instance (``"abc".split``,
   ``sys.stdout.write``) count once per method of the type (they run the same code), and
   ``object.__init_subclass__``/``__subclasshook__`` bound to a class once in all;
2. it binds each candidate under two names in a program: ``f_<i>``, the object itself (``import module as
   __m; f_<i> = __m.attr.attr``), and ``g_<i>``, a function that returns None but claims the candidate's
   ``__module__`` and ``__qualname__`` (the old hole); the test of each name (``f('hello', 'l') ==
   'heo'`` and ``f([3, 1, 2], 'x') == [1, 2, 3, 'x']``) is one that no standard-library function passes
   honestly, and that an always-equal object passes;
3. it asserts that none of those tests passes. Against a vacuous pass, each batch ends with an honest
   control (``ok_``) whose test must pass and every ``g_<i>`` must fail by its assertion (its stub was
   bound and called); a batch where that does not hold (a candidate killed, hung or garbled the program's
   process) is split in halves, down to single candidates, which then score 0 and are fine.
"""

from __future__ import annotations

import json
import keyword
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import pytest
from sandbox_fixtures import *  # noqa: F403  (the shared fixtures)

from sandbox import Limits, Sandbox
from sandbox.judge import run_tests

#: Candidates per program: two names each plus the control must stay under the judge's 1000 names.
BATCH = 450
#: A batch's wall time (a clean one takes about a second); one over it is split.
BATCH_SECONDS = 15
WORKERS = 2
#: Classes whose instances equal everything; each must be found by the walk (the attack the test is about).
ALWAYS_EQUAL = [("test.test_class", "AllTests"), ("unittest.mock", "_ANY")]

#: Runs in the sandbox: prints {"stats": ..., "candidates": [[module, path], ...], "always_equal": ...}.
ENUMERATE = r"""
import importlib, json, os, pkgutil, signal, sys, time, types

ALWAYS_EQUAL = __ALWAYS_EQUAL__
SKIP = {"antigravity", "this", "idlelib", "tkinter", "turtledemo", "autotest"}  # side effects or GUI
started = time.monotonic()
out = os.dup(1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)  # what modules print on import goes nowhere
os.dup2(null, 2)


class TooSlow(BaseException):
    pass


def too_slow(signum, frame):
    raise TooSlow()


signal.signal(signal.SIGALRM, too_slow)
stats = {"failed": [], "slow": []}


def skipped(name):
    parts = name.split(".")
    return parts[-1] == "__main__" or any(p in SKIP or p.startswith("turtle") for p in parts)


def load(name):
    if skipped(name):
        return None
    began = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        module = importlib.import_module(name)
    except BaseException:
        stats["failed"].append(name)
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if time.monotonic() - began > 1.0:  # every batch that binds from it would pay that again
        stats["slow"].append(name)
        return None
    return module


modules = {}
for name in sorted({*sys.stdlib_module_names, "test"}):
    module = load(name)
    if module is None:
        continue
    modules[name] = module
    try:
        subs = [info.name for info in pkgutil.iter_modules(getattr(module, "__path__", None) or [])]
    except BaseException:
        subs = []
    for sub in subs:
        if (found := load(f"{name}.{sub}")) is not None:
            modules[found.__name__] = found
signal.signal(signal.SIGALRM, too_slow)  # a module may have set its own
stats["modules"] = len(modules)
stats["import_seconds"] = round(time.monotonic() - started, 2)


def get(obj, attr):
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        return getattr(obj, attr)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def attributes(obj):
    try:
        names = [name for name in dir(obj) if isinstance(name, str)]
    except BaseException:
        return
    for name in names:
        try:
            yield name, get(obj, name)
        except BaseException:
            continue


def resolve(module_name, path):
    obj = modules[module_name]
    for part in path.split("."):
        obj = get(obj, part)
    return obj


C_BOUND = (types.BuiltinMethodType, types.MethodWrapperType)


def defined_by(klass, name):
    for base in getattr(klass, "__mro__", ()):
        if name in vars(base):
            return base, vars(base)[name]
    return None, None


def key(obj):
    # What decides what calling obj does: the object, or for C code bound to an instance, that code.
    if type(obj) is types.MethodType:  # a new one on each getattr: the same function and owner
        return ("method", id(obj.__self__), id(obj.__func__))
    if isinstance(obj, type) or type(obj) not in C_BOUND:
        return id(obj)
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", None)
    if owner is None or isinstance(owner, types.ModuleType) or not isinstance(name, str):
        return id(obj)
    if isinstance(owner, type):
        base, _ = defined_by(owner, name)
        return ("object", name) if base is object else (id(type(obj)), id(owner), name)
    _, code = defined_by(type(owner), name)
    return (id(code), name) if code is not None else (id(type(obj)), id(owner), name)


chosen = {}  # key -> ((module, path), object): the first path found
alive = []  # keeps every object seen alive, so that no id is reused
paths = 0


def add(obj, pair):
    global paths
    paths += 1
    alive.append(obj)
    try:
        chosen.setdefault(key(obj), (pair, obj))
    except BaseException:
        chosen.setdefault(id(obj), (pair, obj))


steps = []
for name, module in modules.items():
    for first, value in attributes(module):
        if callable(value):
            add(value, (name, first))
        steps.append((name, first, value))
for name, first, value in steps:  # the second step after every first one: the shortest path wins
    for second, inner in attributes(value):
        if callable(inner):
            add(inner, (name, f"{first}.{second}"))
stats["paths"] = paths
stats["walk_seconds"] = round(time.monotonic() - started, 2)

by_own_name = 0
for _, obj in list(chosen.values()):  # deeper objects that name themselves (the old hole's reach)
    try:
        module_name, qualname = obj.__module__, obj.__qualname__
        if type(module_name) is not str or type(qualname) is not str or module_name not in modules:
            continue
        if "<" in qualname:
            continue
        target = resolve(module_name, qualname)
        if callable(target) and key(target) not in chosen:
            alive.append(target)
            chosen[key(target)] = ((module_name, qualname), target)
            by_own_name += 1
    except BaseException:
        continue
stats["by_own_name"] = by_own_name

candidates = []
for module_name, path in sorted({pair for pair, _ in chosen.values()}):
    try:  # resolves by plain getattr from the imported module, and is callable
        if callable(resolve(module_name, path)):
            candidates.append([module_name, path])
    except BaseException:
        continue

always_equal = []
for module_name, path in ALWAYS_EQUAL:
    try:
        klass = resolve(module_name, path)
        instance = klass()
        if instance == "heo" and instance == [1, 2, 3, "x"] and instance == object():
            always_equal.append({"class": [module_name, path], "found_as": chosen[key(klass)][0]})
    except BaseException:
        continue
stats["seconds"] = round(time.monotonic() - started, 2)
report = {"stats": stats, "candidates": candidates, "always_equal": always_equal}
os.write(out, (json.dumps(report) + "\n").encode())
os._exit(0)  # no module's atexit handler or thread gets a say
"""


def enumerate_candidates() -> dict:
    script = ENUMERATE.replace("__ALWAYS_EQUAL__", repr(ALWAYS_EQUAL))
    box = Sandbox(Limits(timeout_seconds=120, memory_mb=2048, max_output_bytes=64 << 20))
    result = box.run_python(script)
    assert result.exit_code == 0 and not result.timed_out, (result.exit_code, result.limits_hit)
    return json.loads(result.stdout)


def reference(path: str) -> str:
    """``__m.a.b`` for the attribute path ``a.b`` (``getattr`` for a part that is not a plain name)."""
    expression = "__m"
    for part in path.split("."):
        plain = part.isidentifier() and not keyword.iskeyword(part)
        expression = f"{expression}.{part}" if plain else f"getattr({expression}, {part!r})"
    return expression


def program(batch: list[tuple[str, str]]) -> str:
    lines = []
    for i, (module, path) in enumerate(batch):
        lines += [
            "try:",
            f"    import {module} as __m",
            f"    f_{i} = {reference(path)}",
            "except BaseException:",
            "    pass",
            f"def g_{i}(*args, **kwargs):",
            "    return None",
            f"g_{i}.__module__ = {module!r}",
            f"g_{i}.__qualname__ = {path!r}",
        ]
    lines += ["def ok_(s, ch):", "    return s.replace(ch, '')"]
    return "\n".join(lines) + "\n"


def check(name: str) -> str:
    return f"assert {name}('hello', 'l') == 'heo'\nassert {name}([3, 1, 2], 'x') == [1, 2, 3, 'x']\n"


def tests(batch: list[tuple[str, str]]) -> list[str]:
    """``f_<i>``'s test at 2i, ``g_<i>``'s at 2i + 1, the control's last."""
    return [check(f"{way}_{i}") for i in range(len(batch)) for way in "fg"] + [check("ok_")]


def judge(batch: list[tuple[str, str]]) -> tuple[bool, list[str], int]:
    """(clean, what passed, how many f_<i> were never bound): clean when the control passed and every
    g_<i> failed by its assertion, so every test ran against a live program."""
    box = Sandbox(Limits(timeout_seconds=BATCH_SECONDS, memory_mb=1024))
    result = run_tests(box, program(batch), tests(batch))
    passed = [
        f"{'imported' if index % 2 == 0 else 'named'} {batch[index // 2]}"
        for index, ok in enumerate(result.passed[:-1])
        if ok
    ]
    clean = result.passed[-1] and all(e == "AssertionError" for e in result.errors[1:-1:2])
    unbound = sum("NameError" in e for e in result.errors[0:-1:2])
    return clean, passed, unbound


@pytest.mark.slow
def test_no_standard_library_object_passes_a_test_for_the_program():
    began = time.monotonic()
    found = enumerate_candidates()
    candidates = [tuple(pair) for pair in found["candidates"]]
    stats = found["stats"]
    print(f"enumeration: {len(candidates)} candidates, {json.dumps(stats)}")
    assert len(candidates) > 50_000, stats  # a broken walk must not pass vacuously
    assert len(set(candidates)) == len(candidates)
    assert found["always_equal"], "no always-equal class found on this interpreter"
    for entry in found["always_equal"]:  # the attack this is about is among the candidates
        assert tuple(entry["found_as"]) in set(candidates), entry
    assert ("test.test_class", "AllTests") in set(candidates)

    passed, unclean = [], []
    runs = splits = unbound = 0
    with ThreadPoolExecutor(WORKERS) as pool:
        pending = {
            pool.submit(judge, batch): batch
            for batch in (candidates[i : i + BATCH] for i in range(0, len(candidates), BATCH))
        }
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                batch = pending.pop(future)
                clean, batch_passed, batch_unbound = future.result()
                runs += 1
                passed += batch_passed
                if clean:
                    unbound += batch_unbound
                elif len(batch) > 1:  # some candidate killed, hung or garbled the program: bisect
                    splits += 1
                    half = len(batch) // 2
                    for part in (batch[:half], batch[half:]):
                        pending[pool.submit(judge, part)] = part
                else:  # it scored 0, as it should: the program's own doing
                    unclean.append(batch[0])
    summary = (
        f"{len(candidates)} candidates in {runs} runs ({splits} splits), {unbound} never bound as "
        f"f_<i>, {len(unclean)} that broke their program on their own: {unclean[:20]}; "
        f"{time.monotonic() - began:.0f}s"
    )
    print(summary)
    assert not passed, f"{len(passed)} passed: {passed[:50]}\n{summary}"
    assert len(unclean) < len(candidates) // 100, summary  # not a harness that never really ran them
