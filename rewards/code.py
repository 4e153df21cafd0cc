r"""``code_tests`` and ``code_stdio``: run the completion's Python program in the sandbox and score it.

The program is the completion's last complete fenced block tagged ``python`` (or ``py``, ``python3``)::

    Here is my solution:
    ```python
    def add(a, b):
        return a + b
    ```

A completion without one scores 0, and so does a program that does not load. Programs run in
:mod:`sandbox` (namespaces where the kernel allows them; see ``sandbox.isolation()``), each bounded by
``timeout_seconds`` of wall time, as much CPU time, and ``memory_mb`` of address space. Where namespaces
do not work and the trainer is not root, the rewards raise a setup error rather than run programs as the
trainer's uid, unless ``isolation="none"`` says to (see :class:`sandbox.Sandbox`).

* ``code_tests``, column ``tests``: one string of Python (passes when it runs to the end without an
  exception: 1 or 0), or a list of strings, each a separate test (the score is the share that pass;
  ``partial_credit=False`` gives 1 only when all pass). Optional column ``setup``: trusted code that runs
  first in the program's process (so the program may use its imports and helpers) and again in the tests'
  process (so the tests use those helpers, not the program's). The tests run in a process of their own
  that calls the program's functions and gets back plain data (see :mod:`sandbox.judge`): exiting early,
  patching builtins or ``AssertionError``, ``__eq__`` tricks and ``python -O`` all get 0.
  ``timeout_seconds`` covers the program and all its tests.
* ``code_stdio``, column ``test_cases``: a list of ``{"input": str, "output": str}`` (or that list as a
  JSON string). The program runs once per case with the input on stdin; a case passes when it exits with
  status 0 within the limits and its stdout equals the output, line by line, ignoring trailing whitespace
  on each line and trailing blank lines. ``timeout_seconds`` is per case, and ``total_timeout_seconds``
  (default three times that) bounds all of one completion's cases together: a case starts with what is left
  of it, and the cases left when it is spent fail unrun, so a program costs at most that budget whatever it
  does per case (one that sleeps just under the per-case limit on every case included). Once a case runs
  out of wall or CPU time, the program's remaining cases are skipped and fail too. The score is the share
  of cases passed (``partial_credit=False``: 1 only when all pass, and the remaining cases are skipped
  after the first failure).

HumanEval and MBPP rows map onto ``code_tests`` with :func:`humaneval_columns` and :func:`mbpp_columns`.
A row whose tests are missing or malformed scores None (cannot be scored): among them a row with a blank
test (empty or only comments), which would pass whatever the program does. Tests run as ``__main__``
(a test's ``if __name__ == "__main__":`` block runs).
"""

from __future__ import annotations

import ast
import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rewards.base import LogExtra, Reward, RewardSetupError, Sample
from rewards.registry import invalid, register

_PYTHON_TAGS = frozenset({"python", "py", "python3"})


def last_python_block(text: str) -> str | None:
    r"""The last complete fenced Python block of ``text`` (None when there is none). One pass over the lines:
    a fence opens a block only at the start of a line, and other languages' blocks are skipped whole.

    >>> last_python_block("```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```")
    'print(2)\n'
    >>> last_python_block("```python\nprint(1)\n```\n```python\ncut off"), last_python_block("no code")
    ('print(1)\n', None)
    >>> last_python_block("```text\n```python\nnot code\n```\n")  # inside another block
    """
    found: str | None = None
    current: list[str] | None = None
    other = False
    for line in text.split("\n"):
        stripped = line.strip()
        fence = stripped.startswith("```")
        if current is not None:
            if fence and not stripped.strip("`"):
                found = "".join(part + "\n" for part in current)
                current = None
            else:
                current.append(line.rstrip("\r"))
        elif other:
            other = not (fence and not stripped.strip("`"))
        elif fence:
            tag = stripped.strip("`").strip().lower()
            if tag in _PYTHON_TAGS:
                current = []
            else:
                other = True
    return found


def humaneval_columns(row: Mapping[str, Any]) -> dict[str, str]:
    r"""``code_tests`` columns for a HumanEval row (``prompt``, ``test``, ``entry_point``).

    ``tests``: the row's ``test`` (which defines ``check``) followed by ``check(<entry_point>)``.
    ``setup``: the prompt without the entry point's own function -- its imports and helper functions
    (``poly`` for ``find_zero``, ``encode_cyclic`` for ``decode_cyclic``), which the program may call and
    the tests then take from the prompt, not from the program.

    >>> row = {"prompt": "import math\n\ndef double(x):\n    return 2 * x\n\ndef f(x):\n    \"\"\"Twice x.\"\"\"\n",
    ...        "test": "def check(candidate):\n    assert candidate(2) == double(2)\n", "entry_point": "f"}
    >>> columns = humaneval_columns(row)
    >>> print(columns["setup"])
    import math
    <BLANKLINE>
    def double(x):
        return 2 * x
    >>> columns["tests"].endswith("check(f)\n")
    True
    """
    entry_point = str(row["entry_point"])
    return {
        "tests": f"{row['test']}\n\ncheck({entry_point})\n",
        "setup": prompt_without(str(row["prompt"]), entry_point),
    }


def prompt_without(prompt: str, name: str) -> str:
    """``prompt`` (a function's signature and docstring, after imports and helpers) without the top-level
    function ``name``; "" when the prompt does not parse."""
    for body in ("    pass\n", "  pass\n", "\tpass\n", ""):
        try:
            tree = ast.parse(prompt.rstrip() + "\n" + body)
        except SyntaxError:
            continue
        tree.body = [
            node
            for node in tree.body
            if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name)
        ]
        return ast.unparse(tree)
    return ""


def mbpp_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """``code_tests`` columns for an MBPP row: ``tests`` is its ``test_list`` (each assert a separate test),
    ``setup`` its ``test_setup_code`` (the full set) and ``test_imports`` (the sanitized set).

    >>> mbpp_columns({"test_list": ["assert f(1) == 2"], "test_setup_code": "", "test_imports": ["import math"]})
    {'tests': ['assert f(1) == 2'], 'setup': 'import math'}
    """
    setup = [str(row.get("test_setup_code") or "")] + [str(line) for line in row.get("test_imports") or []]
    return {
        "tests": [str(test) for test in row["test_list"]],
        "setup": "\n".join(part for part in setup if part),
    }


class _CodeReward(Reward):
    """Parameters and sandbox shared by the code rewards."""

    is_accuracy = True
    timeout_seconds: float
    memory_mb: int
    num_workers: int
    partial_credit: bool
    isolation: str

    def _check_params(self) -> None:
        if self.isolation not in ("auto", "namespaces", "none"):
            raise invalid(
                self.name, f"isolation must be 'auto', 'namespaces' or 'none', got {self.isolation!r}"
            )
        if not (0 < self.timeout_seconds <= 3600 and math.isfinite(self.timeout_seconds)):
            raise invalid(self.name, f"timeout_seconds must be in (0, 3600], got {self.timeout_seconds}")
        if not 32 <= self.memory_mb <= 1 << 20:
            raise invalid(self.name, f"memory_mb must be at least 32, got {self.memory_mb}")
        if not 1 <= self.num_workers <= 256:
            raise invalid(self.name, f"num_workers must be between 1 and 256, got {self.num_workers}")

    def _sandbox(self):
        import sandbox

        box = sandbox.Sandbox(
            sandbox.Limits(timeout_seconds=self.timeout_seconds, memory_mb=self.memory_mb),
            num_workers=self.num_workers,
            isolation=self.isolation,
        )
        try:
            box.isolation  # noqa: B018  (checked now: an unusable sandbox is a setup error, not a score)
        except sandbox.SandboxUnavailableError as error:
            raise RewardSetupError(f"reward {self.name!r}: {error}") from error
        return box

    def warmup(self) -> None:
        self._sandbox()


@register("code_tests")
class CodeTests(_CodeReward):
    r"""The share of the row's tests the completion's program passes (see the module for the columns).

    >>> reward = CodeTests(timeout_seconds=10)
    >>> good = "```python\ndef add(a, b):\n    return a + b\n```"
    >>> bad = "```python\ndef add(a, b):\n    return a - b\n```"
    >>> reward([good, bad, "no code", good], tests=[["assert add(1, 2) == 3", "assert add(2, 0) == 2"]] * 3
    ...        + ["assert add(1, 2) == 3\nassert add(-1, 1) == 0"])
    [1.0, 0.5, 0.0, 1.0]
    """

    required_columns = ("tests",)

    def __init__(
        self,
        *,
        timeout_seconds: float = 10.0,
        memory_mb: int = 1024,
        num_workers: int = 1,
        partial_credit: bool = True,
        isolation: str = "auto",
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.memory_mb = memory_mb
        self.num_workers = num_workers
        self.partial_credit = partial_credit
        #: The sandbox's isolation ("auto", "namespaces", "none"): see sandbox.Sandbox.
        self.isolation = isolation
        self._check_params()

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        scores: list[float | None] = [None] * len(samples)
        notes = [""] * len(samples)
        jobs = []
        for index, sample in enumerate(samples):
            tests = _tests(sample.columns.get("tests"))
            if tests is None:
                notes[index] = "[no tests]"
                continue
            program = last_python_block(sample.text)
            if program is None or not program.strip():
                scores[index], notes[index] = 0.0, "[no python block]"
                continue
            setup = sample.columns.get("setup")
            jobs.append((index, program, tests, setup if isinstance(setup, str) else ""))
        if jobs:
            from sandbox.judge import run_tests

            box = self._sandbox()
            results = box.map(lambda job: run_tests(box, job[1], job[2], job[3]), jobs)
            for (index, *_), result in zip(jobs, results, strict=True):
                share = result.share_passed
                scores[index] = share if self.partial_credit else float(share == 1.0)
                notes[index] = _summary(result)
        if log_extra is not None:
            log_extra(f"{self.name}/result", notes)
        return scores


def _tests(value: Any) -> list[str] | None:
    r"""The tests as a list of strings; None when the column holds nothing usable: no test, something else
    than strings, or a blank test (empty, or only comments), which would pass whatever the program does.

    >>> _tests("assert f() == 1"), _tests(["assert f() == 1", "  # nothing\n"]), _tests([])
    (['assert f() == 1'], None, None)
    """
    tests = [value] if isinstance(value, str) else value
    if not isinstance(tests, Sequence) or isinstance(tests, str) or not tests:
        return None
    if all(isinstance(test, str) and not _blank(test) for test in tests):
        return list(tests)
    return None


def _blank(test: str) -> bool:
    return not any(line.strip() and not line.strip().startswith("#") for line in test.splitlines())


def _summary(result) -> str:
    passed = sum(result.passed)
    if result.load_error:
        return f"did not load: {result.load_error.splitlines()[-1][:120]}"
    text = f"{passed}/{len(result.passed)} passed"
    if result.timed_out:
        text += " (timed out)"
    elif result.limits_hit:
        text += f" (limits: {', '.join(result.limits_hit)})"
    return text


@register("code_stdio")
class CodeStdio(_CodeReward):
    r"""The share of the row's stdin/stdout cases the completion's program gets right (see the module).

    >>> reward = CodeStdio(timeout_seconds=10)
    >>> cases = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}]
    >>> reward(["```python\nprint(sum(map(int, input().split())))\n```",
    ...         "```python\nprint(3)   \n\n\n```"], test_cases=[cases, cases])
    [1.0, 0.5]
    """

    required_columns = ("test_cases",)

    def __init__(
        self,
        *,
        timeout_seconds: float = 10.0,
        memory_mb: int = 1024,
        num_workers: int = 1,
        partial_credit: bool = True,
        cases_column: str = "test_cases",
        isolation: str = "auto",
        total_timeout_seconds: float | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        #: Wall time of all one completion's cases together (None: three times ``timeout_seconds``).
        self.total_timeout_seconds = total_timeout_seconds
        self.memory_mb = memory_mb
        self.num_workers = num_workers
        self.partial_credit = partial_credit
        #: The sandbox's isolation ("auto", "namespaces", "none"): see sandbox.Sandbox.
        self.isolation = isolation
        #: The column holding the cases: a list of {"input", "output"}, or a mapping with such a list under
        #: "test_cases" (open-r1/verifiable-coding-problems-python's `verification_info`).
        self.cases_column = cases_column
        self.required_columns = (cases_column,)
        self._check_params()
        if not (0 < self.budget_seconds <= 36000 and math.isfinite(self.budget_seconds)):
            raise invalid(
                self.name, f"total_timeout_seconds must be in (0, 36000], got {self.budget_seconds}"
            )

    @property
    def budget_seconds(self) -> float:
        """The wall time all one completion's cases share."""
        if self.total_timeout_seconds is None:
            return 3 * self.timeout_seconds
        return self.total_timeout_seconds

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        scores: list[float | None] = [None] * len(samples)
        notes = [""] * len(samples)
        jobs = []  # (index, program, cases): one completion's cases run in turn, within its budget
        for index, sample in enumerate(samples):
            cases = _cases(sample.columns.get(self.cases_column))
            if cases is None:
                notes[index] = "[no test cases]"
                continue
            program = last_python_block(sample.text)
            if program is None or not program.strip():
                scores[index], notes[index] = 0.0, "[no python block]"
                continue
            jobs.append((index, program, cases))
        if jobs:
            box = self._sandbox()
            results = box.map(lambda job: self._judge(box, job[1], job[2]), jobs)
            for (index, _, cases), (passed, note) in zip(jobs, results, strict=True):
                scores[index] = passed / len(cases) if self.partial_credit else float(passed == len(cases))
                notes[index] = f"{passed}/{len(cases)} cases passed{note}"
        if log_extra is not None:
            log_extra(f"{self.name}/result", notes)
        return scores

    def _judge(self, box, program: str, cases: list[tuple[str, str]]) -> tuple[int, str]:
        """How many of ``cases`` the program passes, run one after another within the completion's budget;
        and a note when the budget or a case's time ran out."""
        deadline = time.monotonic() + self.budget_seconds
        passed = 0
        for stdin, expected in cases:
            left = deadline - time.monotonic()
            if left <= 0:
                return passed, " (time budget spent)"
            result = box.run_python(program, stdin=stdin, timeout_seconds=min(self.timeout_seconds, left))
            if result.ok and output_lines(result.stdout) == output_lines(expected):
                passed += 1
            elif not self.partial_credit:
                return passed, ""
            if result.timed_out or {"wall", "cpu"} & set(result.limits_hit):
                return passed, " (time budget spent)" if left < self.timeout_seconds else " (out of time)"
        return passed, ""


def output_lines(text: str) -> list[str]:
    r"""Output as compared: lines without trailing whitespace, trailing blank lines dropped.

    >>> output_lines("1 2 \r\n3\n\n\n"), output_lines("1 2\n3")
    (['1 2', '3'], ['1 2', '3'])
    """
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _cases(value: Any) -> list[tuple[str, str]] | None:
    """``[(input, output), ...]`` from the column; None when it holds nothing usable, or cases of another
    kind than stdin/stdout (a ``type`` other than ``stdin_stdout``, such as ``function_call``).

    >>> _cases({"language": "python", "test_cases": [{"input": "1\\n", "output": "2\\n", "type": "stdin_stdout"}]})
    [('1\\n', '2\\n')]
    >>> _cases([{"fn_name": "f", "input": "[1]", "output": "[2]", "type": "function_call"}]) is None
    True
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, Mapping):
        value = value.get("test_cases")
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        return None
    cases = []
    for case in value:
        if not isinstance(case, Mapping):
            return None
        stdin, output = case.get("input"), case.get("output")
        if not isinstance(stdin, str) or not isinstance(output, str):
            return None
        if case.get("type", "stdin_stdout") not in ("stdin_stdout", None):
            return None
        cases.append((stdin, output))
    return cases
