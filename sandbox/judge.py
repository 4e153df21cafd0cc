"""Run tests against a program with the verdict out of the program's reach.

A program that shares a process with its tests can fake passing them: exit with status 0 before they run,
replace ``AssertionError`` or the builtins they use, return an object whose ``__eq__`` is always true,
re-run itself under ``python -O``, print what a harness greps for. Here the program and the tests never
share a process:

1. the **program process** (sandboxed) runs the setup code and the program, then serves its top-level
   names over a pipe (:func:`sandbox._calls.serve`);
2. the **tests process** (sandboxed separately; the program never ran in it) binds each of those names to
   a stub that calls the program process and gets back plain data only, decoded by the strict decoder of
   :mod:`sandbox.wire` (exact built-in types, bounded depth and size, no pickle); other objects stay in
   the program process and are opaque references here (no ``__eq__``, ``__bool__`` or dunder of theirs
   runs here). It runs the setup code again (the tests' helpers are the trusted ones, not the program's),
   then each test compiled with assertions on, whatever the flags (``compile(optimize=0)``);
3. the **harness** (this module) reads each test's outcome from a pipe only the tests process holds; the
   program's exit status and output count for nothing.

Without namespaces the tests process starts first and makes itself undumpable (no same-uid process may
ptrace it or open its ``/proc`` files) before the program process exists.

What crosses to the program: the arguments of each call, and nothing else of the tests. What it cannot do:
see the tests, reach the tests process, change how a test's result is decided. A program that calls
back into the tests process's values (a callable argument) is not supported: passing one fails that test.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sandbox.runner import RunResult, Sandbox, Watch, _drive, _Workdir


@dataclass(frozen=True)
class TestsResult:
    """The outcome of each test, as the tests process reported it (a test it never reported failed)."""

    passed: tuple[bool, ...]
    errors: tuple[str, ...]
    """Per test: the exception that failed it (its last line), "not run" when it never ran, "" when passed."""
    load_error: str
    """Why the program did not load (its exception, or that its process ended first); "" when it did."""
    setup_error: str
    """The setup code's exception in the tests process, or the sandbox's own setup failure; "" if none."""
    timed_out: bool
    program: RunResult
    tests: RunResult

    @property
    def share_passed(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def limits_hit(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.program.limits_hit + self.tests.limits_hit))


def run_tests(sandbox: Sandbox, program: str, tests: Sequence[str], setup: str = "") -> TestsResult:
    """Run each of ``tests`` (Python source) against ``program`` (Python source), ``setup`` first in both.

    One wall deadline (``sandbox.limits.timeout_seconds``) covers both processes and every test.

    >>> from sandbox import Limits, Sandbox
    >>> result = run_tests(Sandbox(Limits(timeout_seconds=10)), "def add(a, b):\\n    return a + b\\n",
    ...                    ["assert add(1, 2) == 3", "assert add('a', 'b') == 'ab'", "assert add(1, 1) == 3"])
    >>> result.passed, result.errors[2], result.load_error
    ((True, True, False), 'AssertionError', '')
    """
    tests = [str(test) for test in tests]
    started = time.monotonic()
    deadline = started + sandbox.limits.timeout_seconds
    report = _Report(len(tests))
    namespaces = sandbox.isolation == "namespaces"
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    results_r, results_w = os.pipe()
    owned = [requests_r, requests_w, replies_r, replies_w, results_r, results_w]
    processes = []
    try:
        with _Workdir(sandbox) as tests_dir, _Workdir(sandbox) as program_dir:
            tester = sandbox._spawn(
                "tests",
                tests_dir,
                files={},
                stdin=b"",
                argv=[],
                pass_fds=(replies_r, requests_w, results_w),
                extra={
                    "fds": {"replies": replies_r, "requests": requests_w, "results": results_w},
                    "tests": tests,
                    "setup": setup,
                },
            )
            processes.append(tester)
            for fd in (requests_w, results_w):
                os.close(fd)
                owned.remove(fd)
            watch = Watch(results_r, report.feed)
            if not namespaces:  # the program must not exist before the tests process is undumpable
                _drive_until(tester, watch, deadline, lambda: report.ready)
            if report.ready or namespaces:
                processes.append(
                    sandbox._spawn(
                        "serve",
                        program_dir,
                        files={"main.py": program},
                        stdin=b"",
                        argv=[],
                        pass_fds=(requests_r, replies_w),
                        extra={"fds": {"requests": requests_r, "replies": replies_w}, "setup": setup},
                    )
                )
            for fd in (requests_r, replies_r, replies_w):
                os.close(fd)
                owned.remove(fd)
            _drive(processes, deadline, [watch], stop=lambda: report.finished)
    finally:
        for fd in owned:
            os.close(fd)
    duration = time.monotonic() - started
    results = [process.result(sandbox.limits, sandbox.isolation, duration) for process in processes]
    tests_run = results[0]
    program_run = results[1] if len(results) > 1 else _not_started(sandbox.isolation)
    return report.result(program_run, tests_run)


def _drive_until(process, watch: Watch, deadline: float, condition) -> None:
    """Read ``watch`` until ``condition()`` or the deadline, without ending ``process``."""
    import select

    poller = select.poll()
    poller.register(watch.fd, select.POLLIN)
    while not condition() and watch.open:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(int(remaining * 1000) + 1):
            return
        chunk = os.read(watch.fd, 65536)
        if chunk:
            watch.on_data(chunk)
        else:
            watch.open = False


def _not_started(isolation: str) -> RunResult:
    return RunResult("", "", None, None, False, (), 0.0, 0.0, isolation, setup_error="not started")


class _Report:
    """The tests process's lines, as they arrive."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.buffer = b""
        self.ready = False
        self.finished = False
        self.load_error = ""
        self.setup_error = ""
        self.outcomes: dict[int, tuple[bool, str]] = {}

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                self._take(message)
        if len(self.buffer) > 1 << 20:
            self.buffer = b""

    def _take(self, message: dict) -> None:
        if message.get("ready") is True:
            self.ready = True
        elif "load_error" in message:
            self.load_error = str(message["load_error"]) or "did not load"
            self.finished = True
        elif "setup_error" in message:
            self.setup_error = str(message["setup_error"]) or "setup failed"
            self.finished = True
        elif message.get("done") is True:
            self.finished = True
        elif type(message.get("test")) is int and 0 <= message["test"] < self.count:
            passed = message.get("passed") is True
            self.outcomes.setdefault(
                message["test"], (passed, "" if passed else str(message.get("error", "")))
            )

    def result(self, program: RunResult, tests: RunResult) -> TestsResult:
        passed, errors = [], []
        for index in range(self.count):
            ok, error = self.outcomes.get(index, (False, "not run"))
            passed.append(ok)
            errors.append(error)
        return TestsResult(
            passed=tuple(passed),
            errors=tuple(errors),
            load_error=self.load_error,
            setup_error=self.setup_error
            or tests.setup_error
            or program.setup_error.replace("not started", ""),
            timed_out=tests.timed_out or program.timed_out,
            program=program,
            tests=tests,
        )
