"""No standard-library object, bound to a program's name, passes a test it should fail.

``sandbox.judge.run_tests`` used to import, in the tests' process, the object a program's callable named
by its ``__module__`` and ``__qualname__``: ``from test.test_class import AllTests as remove_occ`` (a class
whose instances equal everything and whose constructor takes any arguments) got full marks. Now every name
a program binds to a callable is a stub that calls the program's process and gets plain data back. This
test walks the standard library to show that no object of it can be used that way:

1. inside a sandbox, it imports every standard-library module (``sys.stdlib_module_names``, the ``test``
   package, and the submodules of each package one level deep; not the GUI ones, ``antigravity``,
   ``this``, any ``__main__`` or ``test.autotest``, nor one that fails or takes over a second to import)
   and collects every callable and class reachable from one in one or two attribute steps
   (``module.attr``, ``module.attr.attr``), plus a deeper one whose own ``__module__``/``__qualname__``
   resolves by ``getattr``. Each is kept once, under its shortest path: an object once; a method bound to
   an instance (a new object on each ``getattr``: ``"abc".split``, ``sys.stdout.write``, each module's
   ``__loader__.get_code``) once per class and function; ``object.__init_subclass__`` and
   ``__subclasshook__`` bound to a class once in all. About 68,000 on CPython 3.11;
2. it binds each candidate under two names in a program: ``f_<i>``, the object itself (``import module as
   __m`` then ``f_<i> = __m.attr.attr``), and ``g_<i>``, a function that returns None but claims the
   candidate's ``__module__`` and ``__qualname__`` (the old hole). The test of each name, ``f('hello',
   'l') == 'heo'`` then ``f([3, 1, 2], 'x') == [1, 2, 3, 'x']``, is one no standard-library function
   passes honestly and ``AllTests`` passes when it runs in the tests' process (the walk checks both);
3. it asserts that no test passes. Against a vacuous pass, every ``g_<i>`` must fail by its assertion
   (its stub was bound and the program answered) and an honest control (``ok_``), tested last, must pass.
   Where that does not hold (a candidate killed, hung or garbled the program's process: ``_testcapi``'s
   crashers, a blocking lock), the first candidate it fails at is judged alone and the rest again; a
   single candidate that breaks its own program scores 0 and is fine. Against the judge before the fix,
   this test fails in well under a minute, on ``AllTests`` (and ``AlwaysEqualExc``), both ways.
"""

from __future__ import annotations

import collections
import json
import keyword
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

import pytest
from sandbox_fixtures import *  # noqa: F403  (the shared fixtures)

from sandbox import Limits, Sandbox
from sandbox.judge import run_tests

#: Candidates per program: two names each plus the control must stay under the judge's 1000 names.
BATCH = 450
#: A run's wall time: a clean batch takes half a second (test_decimal's 6 s at most seen), a single
#: candidate less; one that runs out has its first unfinished candidate judged alone, the rest again.
MIN_SECONDS = 3.0
SECONDS_PER_CANDIDATE = 0.015
WORKERS = 2
#: Batches with a candidate that broke the program, at most (about a dozen in a run).
MAX_REPAIRS = 200
#: Classes whose instances equal everything: the walk must find them. Run in the tests' own process (as
#: the old judge ran them), ``AllTests`` and ``AlwaysEqualExc`` pass the check (the two that did, of all
#: candidates); ``_ANY`` takes no arguments.
ALWAYS_EQUAL = [
    ("test.test_class", "AllTests"),
    ("test.test_except_star", "TestExceptStar_WeirdLeafExceptions.AlwaysEqualExc"),
    ("unittest.mock", "_ANY"),
]

#: Runs in the sandbox: prints {"stats": ..., "candidates": [[module, path], ...], "cheats": [...]}.
ENUMERATE = r"""
import importlib, json, os, pkgutil, signal, sys, time, types

ALWAYS_EQUAL = __ALWAYS_EQUAL__
CHECK = __CHECK__
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


NO_OWNER = object()


def key(obj):
    # What calling obj runs: the object itself, except for a method bound to an instance (a new object
    # on each getattr), which runs its class's function: that counts once per class and function.
    if isinstance(obj, type):
        return id(obj)
    if type(obj) is types.MethodType:
        owner, function = obj.__self__, obj.__func__
        if isinstance(owner, type):  # a classmethod: what it makes may depend on the class
            return ("classmethod", id(owner), id(function))
        return ("method", id(type(owner)), id(function))
    if type(obj) not in C_BOUND:
        return id(obj)
    owner, name = getattr(obj, "__self__", NO_OWNER), getattr(obj, "__name__", None)
    if owner is NO_OWNER or isinstance(owner, types.ModuleType) or not isinstance(name, str):
        return id(obj)
    if isinstance(owner, type):  # object.__init_subclass__ and __subclasshook__ ignore the class
        base, _ = defined_by(owner, name)
        return ("object", name) if base is object else (id(type(obj)), id(owner), name)
    _, code = defined_by(type(owner), name)
    return ("c method", id(code), name) if code is not None else (id(type(obj)), id(owner), name)


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

cheats = []  # those that pass the check when they run here, as the old judge ran them in the tests' process
for module_name, path in ALWAYS_EQUAL:
    try:
        klass = resolve(module_name, path)
        exec(compile(CHECK, "<check>", "exec"), {"f": klass})
        cheats.append({"object": [module_name, path], "found_as": chosen[key(klass)][0]})
    except BaseException:
        continue
stats["seconds"] = round(time.monotonic() - started, 2)
report = {"stats": stats, "candidates": candidates, "cheats": cheats}
os.write(out, (json.dumps(report) + "\n").encode())
os._exit(0)  # no module's atexit handler or thread gets a say
"""


def enumerate_candidates() -> dict:
    script = ENUMERATE.replace("__ALWAYS_EQUAL__", repr(ALWAYS_EQUAL)).replace("__CHECK__", repr(check("f")))
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
        plain = all(part.isidentifier() for part in module.split("."))  # not test.audit-tests
        lines += [
            "try:",
            f"    import {module} as __m"
            if plain
            else f"    __m = __import__('importlib').import_module({module!r})",
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


CONTROL_TEST = "assert ok_('hello', 'l') == 'heo'\n"


def check(name: str) -> str:
    return f"assert {name}('hello', 'l') == 'heo'\nassert {name}([3, 1, 2], 'x') == [1, 2, 3, 'x']\n"


def sources(batch: list[tuple[str, str]]) -> list[str]:
    """``f_<i>``'s test at 2i, ``g_<i>``'s at 2i + 1, the control's last."""
    return [check(f"{way}_{i}") for i in range(len(batch)) for way in "fg"] + [CONTROL_TEST]


@dataclass
class Verdict:
    passed: list[str]
    """The candidates' tests that passed (there must be none)."""
    settled: int
    """How many leading candidates were tested against a live program: their g_<i> and every one before
    it failed by its assertion (the stub was bound and its call answered)."""
    ran: bool
    """Whether the program loaded and any test ran."""
    unbound: int
    """Of the settled candidates, how many f_<i> the program could not bind (NameError in its test)."""


def judge(batch: list[tuple[str, str]]) -> Verdict:
    seconds = MIN_SECONDS + SECONDS_PER_CANDIDATE * len(batch)
    result = run_tests(
        Sandbox(Limits(timeout_seconds=seconds, memory_mb=1024)), program(batch), sources(batch)
    )
    passed = [
        f"{'imported' if index % 2 == 0 else 'named'} {batch[index // 2]}"
        for index, ok in enumerate(result.passed[:-1])
        if ok
    ]
    settled = 0
    while settled < len(batch) and result.errors[2 * settled + 1] == "AssertionError":
        settled += 1
    if settled == len(batch) and not result.passed[-1]:  # the control failed after all (never seen)
        settled -= 1
    ran = not result.load_error and result.errors[0] != "not run"
    unbound = sum("NameError" in error for error in result.errors[0 : 2 * settled : 2])
    return Verdict(passed, settled, ran, unbound)


def judge_all(
    candidates: list[tuple[str, str]],
) -> tuple[list[str], list[tuple[str, str]], collections.Counter]:
    """Judge every candidate, ``WORKERS`` batches at a time: (what passed, the candidates that broke their
    program on their own, counts). A batch with an unsettled candidate has that one judged alone and the
    rest again (halves, when the program did not even load). Stops at the first pass, and when the
    batches keep breaking (``MAX_REPAIRS``): a harness that never settles must not run for hours."""
    passed, broke = [], []
    count = collections.Counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        pending = {}

        def submit(batch):
            pending[pool.submit(judge, batch)] = batch

        for start in range(0, len(candidates), BATCH):
            submit(candidates[start : start + BATCH])
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                batch = pending.pop(future)
                verdict = future.result()
                count["runs"] += 1
                count["unbound"] += verdict.unbound
                passed += verdict.passed
                if verdict.settled == len(batch):
                    continue
                if len(batch) == 1:  # it killed, hung or garbled its program: it scored 0, its own doing
                    broke.append(batch[0])
                elif verdict.ran:  # the first unsettled candidate alone, and the rest again
                    count["isolated"] += 1
                    submit(batch[verdict.settled : verdict.settled + 1])
                    if batch[verdict.settled + 1 :]:
                        submit(batch[verdict.settled + 1 :])
                else:  # the program did not load, or nothing ran: halves
                    count["bisected"] += 1
                    half = len(batch) // 2
                    submit(batch[:half])
                    submit(batch[half:])
            if passed or count["isolated"] + count["bisected"] > MAX_REPAIRS:
                count["stopped early"] = 1
                for future in pending:
                    future.cancel()
                break
    return passed, broke, count


@pytest.mark.slow
@pytest.mark.long  # over a minute: make test-long (CI runs it)
def test_no_standard_library_object_passes_a_test_for_the_program():
    began = time.monotonic()
    found = enumerate_candidates()
    candidates = [tuple(pair) for pair in found["candidates"]]
    print(f"enumeration: {len(candidates)} candidates, {json.dumps(found['stats'])}")
    assert len(candidates) > 20_000, found["stats"]  # a broken walk must not pass vacuously
    assert len(set(candidates)) == len(candidates)
    # what this is about: the class that passes the check when it runs in the tests' process is a candidate
    cheats = [tuple(cheat["found_as"]) for cheat in found["cheats"]]
    assert ("test.test_class", "AllTests") in cheats, found["cheats"]
    assert {*cheats, *ALWAYS_EQUAL} <= set(candidates), found["cheats"]

    passed, broke, count = judge_all(candidates)
    summary = (
        f"{len(candidates)} candidates in {count['runs']} runs ({count['isolated']} isolated, "
        f"{count['bisected']} bisected{', stopped early' if count['stopped early'] else ''}), "
        f"{count['unbound']} never bound as f_<i>, {len(broke)} that broke their program on their own: "
        f"{broke[:20]}; {time.monotonic() - began:.0f}s"
    )
    print(summary)
    assert not passed, f"{len(passed)} passed: {passed[:50]}\n{summary}"
    assert not count["stopped early"], f"the batches kept breaking: {summary}"
    # not a harness that never really ran them
    assert len(broke) < len(candidates) // 100 and count["unbound"] < len(candidates) // 20, summary
