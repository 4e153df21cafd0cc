"""The calculator tool: right values, and no input is evaluated as Python, raises through the guard or hangs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from support import REPO

from grpo_recipes.agents import ToolError, ToolStats, get_tool
from grpo_recipes.agents.calculator import calculate


@pytest.mark.parametrize(
    "expression, value",
    [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 * (3 + 4) * (5 - 1)", "56"),
        ("10 - 4 - 3", "3"),  # left to right
        ("2 ** 3 ** 2", "512"),  # right to left
        ("-3 + 5", "2"),
        ("--3", "3"),
        ("-(2 + 3) * 2", "-10"),
        ("-2 ** 2", "-4"),  # as Python and in mathematics: -(2**2)
        ("+7", "7"),
        ("3 × 4", "12"),
        ("8 ÷ 2", "4"),
        ("2^10", "1024"),
        ("2 ^ 3 ^ 2", "512"),
        ("4817 + 2396 × 7", "21589"),
        ("17 // 5", "3"),
        ("17 % 5", "2"),
        ("7 / 2", "3.5"),
        ("6 / 3", "2"),  # an integral quotient is written without a fraction
        ("1 / 3", "0.3333333333"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** 0.5", "1.414213562"),
        ("2 ** -1", "0.5"),
        ("1e-12", "1e-12"),
        ("1,000 + 1", "1001"),  # thousands separators
        ("12 * 3 =", "36"),  # a trailing equals sign
        ("  (1)  ", "1"),
        ("2 ** 64", "18446744073709551616"),  # exact integers within the bounds
        ("-" * 199 + "1", "-1"),  # as long as the default allows, and no deeper than Python handles
    ],
)
def test_values(expression, value):
    assert calculate(expression) == value


def test_calculate_returns_text_that_a_model_reads_back_as_the_number():
    assert calculate("123 * 45") == str(123 * 45)
    assert calculate("1e15 + 1") == "1000000000000001"
    assert calculate("2.5e20 * 4") == "1e+21"


# Each must be refused as arithmetic: if any were evaluated by Python, it would return a value (or do harm).
NOT_ARITHMETIC = [
    "x",
    "__import__('os').getcwd()",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "(1).real",
    "lambda: 1",
    "abs(-1)",
    "print(1)",
    "'a' * 3",
    "b'a'",
    "True + 1",
    "None",
    "[1, 2]",
    "{1: 2}",
    "(1, 2)",
    "()",
    "1 if 1 else 2",
    "1 < 2",
    "1 and 2",
    "not 1",
    "~1",
    "1 << 2",
    "6 & 3",
    "1j",
    "1; 2",
    "1\n+ 2",
    "a := 1",
    "[i for i in range(10**9)]",
    "...",
    "f'{1}'",
    "",
    "   ",
    "=",
]


@pytest.mark.parametrize("expression", NOT_ARITHMETIC)
def test_anything_but_arithmetic_is_refused(expression):
    assert "\n" not in str(refused_at_once(expression))


def refused_at_once(expression: str, seconds: float = 1.0, **kwargs) -> ToolError:
    """The ToolError `calculate` raises for `expression`, which it must raise within `seconds`. The call runs in a
    daemon thread, so that a calculator stuck in Python code fails the test instead of hanging it (arithmetic
    on huge integers holds the GIL: that is bounded in a subprocess, below)."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = calculate(expression, **kwargs)
        except BaseException as err:  # noqa: BLE001 - inspected below
            outcome["error"] = err

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{expression[:40]!r} still running after {seconds} s"
    assert "error" in outcome, f"{expression[:40]!r} gave {outcome.get('value')!r}"
    assert isinstance(outcome["error"], ToolError), repr(outcome["error"])[:200]
    return outcome["error"]


@pytest.mark.parametrize(
    "expression, problem",
    [
        ("10**1000", "exponent too large"),
        ("2**65", "exponent too large"),
        ("2.0**1000", "exponent too large"),
        ("(10**30)**2", "too large"),
        ("10**30 * 10", "too large"),
        ("1e300 * 1e300", "too large"),
        ("1.5**64 * 1e30", "too large"),
        ("1e400", "too large"),  # a literal that is already infinite
        ("1e400 - 1e400", "too large"),  # inf - inf: not a number
        ("9" * 40, "too large"),  # a literal above the bound on every value
        ("9" * 40 + " // " + "9" * 39, "too large"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("1 / 0.0", "division by zero"),
        ("0 ** -1", "negative power"),
        ("(-8) ** (1/3)", "not a real number"),
        ("(-1) ** 0.5", "not a real number"),
        ("1 +", "cannot read"),
        ("(1", "cannot read"),
    ],
)
def test_huge_undefined_and_malformed_arithmetic_is_an_error_at_once(expression, problem):
    assert problem in str(refused_at_once(expression))


HUGE_POWERS = [
    "9**9**9",
    "9**9**9**9",
    "(9**9)**(9**9)",
    "99**99**99",
    "2**3**4**5",
    "(10**30)**64",
    "7**(2**64)",
]


def test_huge_powers_are_refused_without_computing_them():
    """Were a bound lost, Python would compute these for minutes holding the GIL (no thread could stop it), so
    they run in a process of their own that is killed when it takes too long."""
    program = (
        "import sys; from grpo_recipes.agents.calculator import calculate; from grpo_recipes.agents import ToolError\n"
        "for expression in sys.argv[1:]:\n"
        "    try:\n"
        "        print(expression, '->', calculate(expression))\n"
        "    except ToolError as err:\n"
        "        print(expression, '-> refused:', err)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program, *HUGE_POWERS], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(HUGE_POWERS) and all("-> refused: " in line for line in lines), result.stdout
    assert "exponent too large" in lines[0] and "too large" in lines[-2]


def test_very_long_expressions_are_refused_by_length():
    with pytest.raises(ToolError, match="longer than 200 characters"):
        calculate("1 + " * 100 + "1")
    with pytest.raises(ToolError, match="longer than 10 characters"):
        calculate("1 + 2 + 3 + 4", max_length=10)
    assert calculate("1 + " * 100 + "1", max_length=1000) == "101"


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 5000 + "1" + ")" * 5000,  # beyond the parser's nesting limit
        "-" * 5000 + "1",  # beyond the recursion limit, without a parenthesis
        "1+" * 5000 + "1",
        "-" * 200_000 + "1",  # the parser runs out of memory
        "2**" * 3000 + "1",
    ],
)
def test_deep_nesting_with_a_raised_length_limit_is_a_tool_error(expression):
    """A recipe may raise `max_length`: what the parser or the evaluator cannot nest so deeply is still a
    ToolError (one line for the model), never a RecursionError or MemoryError."""
    error = refused_at_once(expression, seconds=5.0, max_length=10**7)
    assert "\n" not in str(error) and len(str(error)) < 400


def test_non_text_expression_is_refused():
    with pytest.raises(ToolError, match="must be text"):
        calculate(12)  # type: ignore[arg-type]


def test_through_the_guard_every_adversarial_input_is_one_error_line_and_is_counted():
    stats = ToolStats()
    calculator = get_tool("calculator", {"max_length": 10**6}, stats=stats, timeout_seconds=10)
    inputs = [
        *NOT_ARITHMETIC,
        "10**1000",  # huge powers that would hold the GIL if computed are tried in a subprocess above
        "2**65",
        "1e400",
        "(" * 5000 + "1" + ")" * 5000,
        "-" * 5000 + "1",
        "-" * 200_000 + "1",
    ]
    start = time.monotonic()
    for expression in inputs:
        text = calculator(expression=expression)
        assert text.startswith("Error: ") and "\n" not in text, (expression[:40], text)
        # The calculator's own refusals, not a Python exception escaping it.
        assert not text.startswith(("Error: RecursionError", "Error: MemoryError", "Error: OverflowError"))
    assert time.monotonic() - start < 10.0
    assert stats.as_dict() == {"calls": len(inputs), "failures": len(inputs), "timeouts": 0, "truncated": 0}
    assert calculator(expression="(12 + 3) * 4") == "60"
