"""code_tests and code_stdio: program extraction, columns, partial credit, params, HumanEval and MBPP rows."""

from __future__ import annotations

import pickle
import time

import pytest

from rewards import InvalidRewardParamsError, get_reward
from rewards.code import humaneval_columns, last_python_block, mbpp_columns

ADD = "```python\ndef add(a, b):\n    return a + b\n```"


def test_the_last_complete_python_block_in_linear_time():
    assert last_python_block("```py\nx = 1\n```\n```python3\ny = 2\n```") == "y = 2\n"
    assert last_python_block("```\nbare\n```\n```js\nlet a\n```") is None
    began = time.monotonic()
    assert last_python_block("```python\n" * 200_000) is None
    assert last_python_block("```python\nx\n```\n" * 100_000) == "x\n"
    assert time.monotonic() - began < 10  # quadratic scanning would take minutes


def test_tests_column_shapes():
    reward = get_reward("code_tests", timeout_seconds=10)
    logged = {}
    scores = reward(
        [ADD] * 5 + ["no code"],
        tests=[
            "assert add(1, 1) == 2",
            [],
            None,
            [1, 2],
            ["assert add(1, 1) == 2", "assert add(1, 1) == 3"],
            "x",
        ],
        log_extra=logged.__setitem__,
    )
    assert scores == [1.0, None, None, None, 0.5, 0.0]
    assert logged["code_tests/result"] == [
        "1/1 passed",
        "[no tests]",
        "[no tests]",
        "[no tests]",
        "1/2 passed",
        "[no python block]",
    ]
    wrong = "```python\ndef add(a, b):\n    return 0\n```"
    blank = reward(
        [wrong] * 3, tests=[["", "assert add(1, 2) == 3"], ["# no test", "assert add(1, 2) == 3"], "  \n"]
    )
    assert blank == [None, None, None]  # a blank test would pass whatever the program does
    strict = get_reward("code_tests", partial_credit=False, timeout_seconds=10)
    assert strict([ADD], tests=[["assert add(1, 1) == 2", "assert add(1, 1) == 3"]]) == [0.0]


def test_a_program_that_does_not_load_and_the_setup_column():
    reward = get_reward("code_tests", timeout_seconds=10)
    logged = {}
    program = "```python\nimport math\ndef area(r):\n    return round(math.pi * r * r, 2) + bonus()\n```"
    scores = reward(
        ["```python\ndef add(a, b)\n    return a\n```", program],
        tests=["assert add(1, 2) == 3", "assert area(1) == 3.14 + 0.0 and helper() == 0"],
        setup=["", "def bonus():\n    return 0.0\ndef helper():\n    return 0"],
        log_extra=logged.__setitem__,
    )
    assert scores == [0.0, 1.0] and logged["code_tests/result"][0].startswith("did not load: SyntaxError")


def test_stdio_cases():
    reward = get_reward("code_stdio", timeout_seconds=10)
    cases = [{"input": "2\n", "output": "4\n"}, {"input": "3\n", "output": "9"}]
    square = "```python\nn = int(input())\nprint(n * n, '  ')\nprint()\n```"
    crash = "```python\nn = int(input())\nprint(n * n)\nraise SystemExit(1)\n```"
    assert reward(
        [square, crash, square, square],
        test_cases=[cases, cases, '[{"input": "5", "output": "25"}]', "[oops"],
    ) == [
        1.0,
        0.0,  # the right output with a non-zero exit status fails the case
        1.0,
        None,
    ]
    assert reward([square], test_cases=[[{"input": 1, "output": "1"}]]) == [None]


def test_all_or_nothing_stops_at_the_first_failed_case():
    reward = get_reward("code_stdio", timeout_seconds=5, partial_credit=False)
    slow = "```python\nimport time\ntime.sleep(1)\nprint('wrong')\n```"
    began = time.monotonic()
    assert reward([slow], test_cases=[[{"input": "", "output": "x"}] * 6]) == [0.0]
    assert time.monotonic() - began < 4


def test_a_program_out_of_time_on_a_case_skips_its_other_cases():
    """Timeouts do not add up: after a case runs out of time, that program's remaining cases fail unrun
    (the others' still run)."""
    reward = get_reward("code_stdio", timeout_seconds=1)
    sleeper = "```python\nimport time\ntime.sleep(60)\n```"
    echo = "```python\nprint(input())\n```"
    cases = [{"input": f"{n}\n", "output": f"{n}\n"} for n in range(6)]
    logged = {}
    began = time.monotonic()
    assert reward([sleeper], test_cases=[cases], log_extra=logged.__setitem__) == [0.0]
    assert time.monotonic() - began < 3 * 1  # about one timeout, not six (a generous bound)
    assert logged["code_stdio/result"] == ["0/6 cases passed (out of time)"]
    assert reward([sleeper, echo], test_cases=[cases, cases]) == [0.0, 1.0]


def test_one_time_budget_per_completion_across_its_cases():
    """A program that sleeps just under the per-case limit on every case (reading the limit it was given)
    is never out of time on a case, yet costs at most the completion's budget: the cases left when it is
    spent fail unrun. An honest program's cases all run within the same budget."""
    reward = get_reward("code_stdio", timeout_seconds=1, total_timeout_seconds=2.5)
    sleeper = (
        "```python\nimport resource, time\n"
        "time.sleep(0.8 * resource.getrlimit(resource.RLIMIT_CPU)[0])\nprint(input())\n```"
    )
    echo = "```python\nprint(input())\n```"
    cases = [{"input": f"{n}\n", "output": f"{n}\n"} for n in range(12)]
    logged = {}
    began = time.monotonic()
    (score,) = reward([sleeper], test_cases=[cases], log_extra=logged.__setitem__)
    assert time.monotonic() - began < 2.5 + 1.5  # the budget and one run's start, not 12 x 0.8 s
    assert 0 < score < 0.5 and logged["code_stdio/result"][0].endswith("(time budget spent)")
    assert reward([echo], test_cases=[cases]) == [1.0]
    assert get_reward("code_stdio", timeout_seconds=4).budget_seconds == 12


@pytest.mark.parametrize(
    "params",
    [
        {"timeout_seconds": 0},
        {"timeout_seconds": "x"},
        {"total_timeout_seconds": 0},
        {"memory_mb": 1},
        {"num_workers": 0},
        {"partial_credit": "no"},
        {"memory": 5},
        {"isolation": "chroot"},
    ],
)
def test_params_are_checked(params):
    for name in ("code_tests", "code_stdio"):
        with pytest.raises(InvalidRewardParamsError):
            get_reward(name, **params)


def test_rewards_pickle_and_run_in_parallel():
    reward = pickle.loads(pickle.dumps(get_reward("code_tests", num_workers=3, timeout_seconds=10)))
    assert reward.params == {
        "timeout_seconds": 10.0,
        "memory_mb": 1024,
        "num_workers": 3,
        "partial_credit": True,
        "isolation": "auto",
    }
    assert reward([ADD] * 6, tests=[["assert add(2, 2) == 4"]] * 6) == [1.0] * 6


def test_humaneval_row_with_a_helper_the_tests_use():
    """HumanEval/32: the tests check find_zero's answer with the prompt's poly; a program redefining poly
    to always return 0 cannot make a wrong root pass."""
    prompt = (
        "import math\n\n\ndef poly(xs: list, x: float):\n    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])\n\n\n"
        'def find_zero(xs: list):\n    """Find x such that poly(xs, x) == 0."""\n'
    )
    row = {
        "prompt": prompt,
        "entry_point": "find_zero",
        "test": "def check(candidate):\n    for xs in ([1, 2], [-6, 11, -6, 1]):\n        assert math.fabs(poly(xs, candidate(xs))) < 1e-4\n",
    }
    columns = humaneval_columns(row)
    assert "def poly" in columns["setup"] and "find_zero" not in columns["setup"]
    solution = (
        "    begin, end = -1.0, 1.0\n    while poly(xs, begin) * poly(xs, end) > 0:\n        begin *= 2.0\n        end *= 2.0\n"
        "    while end - begin > 1e-10:\n        center = (begin + end) / 2.0\n"
        "        if poly(xs, center) * poly(xs, begin) > 0:\n            begin = center\n        else:\n            end = center\n"
        "    return begin\n"
    )
    cheat = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 123.0\n"
    reward = get_reward("code_tests", timeout_seconds=10)
    completions = [f"```python\n{prompt}{solution}```", f"```python\n{cheat}```"]
    assert reward(completions, tests=[columns["tests"]] * 2, setup=[columns["setup"]] * 2) == [1.0, 0.0]


def test_mbpp_row():
    row = {
        "text": "Write a function to find the shared elements from the given two lists.",
        "test_list": [
            "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
            "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == set((3, 4))",
            "assert set(similar_elements((11, 12, 14, 13), (17, 15, 14, 13))) == set((13, 14))",
        ],
        "test_setup_code": "",
    }
    columns = mbpp_columns(row)
    program = "```python\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```"
    half = "```python\ndef similar_elements(a, b):\n    return (4, 5)\n```"
    assert get_reward("code_tests", timeout_seconds=10)([program, half], tests=[columns["tests"]] * 2) == [
        1.0,
        1 / 3,
    ]
