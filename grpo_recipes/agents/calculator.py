"""The calculator tool: arithmetic on numbers, evaluated by walking the parsed expression, never by ``eval``.

Only number literals, parentheses, unary ``+``/``-`` and the operators ``+ - * / // % **`` are accepted
(``×``, ``÷`` and ``^`` are read as ``*``, ``/`` and ``**``). Every intermediate value is bounded, so no input
makes it slow or huge: the expression is at most ``max_length`` characters, an exponent at most 64 in size,
and a value (a number written in it or an intermediate result) at most 10**30. An expression nested deeper than
Python can parse or walk is refused like any other.

Example:
    >>> calculate("4817 + 2396 × 7"), calculate("2^10 / 8"), calculate("7 / 3")
    ('21589', '128', '2.333333333')
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

from .tools import ToolError, register_tool

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_VALUE = 10**30
MAX_EXPONENT = 64


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if abs(node.value) > MAX_VALUE or not math.isfinite(node.value):
            raise ToolError("", "a number in the expression is too large")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > MAX_VALUE):
            raise ToolError("", f"exponent too large (at most {MAX_EXPONENT})")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ToolError("", "division by zero")
        try:
            result = _BINARY[type(node.op)](left, right)
        except (OverflowError, ZeroDivisionError, ValueError) as err:
            raise ToolError("", str(err)) from None
        if isinstance(result, complex):
            raise ToolError("", "the result is not a real number")
        if abs(result) > MAX_VALUE or (isinstance(result, float) and not math.isfinite(result)):
            raise ToolError("", "the result is too large")
        return result
    raise ToolError("", f"only numbers and + - * / // % ** ( ) are allowed, not {_describe(node)}")


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name '{node.id}'"
    if isinstance(node, ast.Constant):
        return f"the value {node.value!r}"
    return f"a {type(node).__name__}"


def format_number(value: int | float) -> str:
    """An integer as it is; a float with 10 significant digits, integral floats without a fraction.

    >>> format_number(3), format_number(2.0), format_number(1 / 3), format_number(1e-12)
    ('3', '2', '0.3333333333', '1e-12')
    """
    if isinstance(value, int):
        return str(value)
    if value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return f"{value:.10g}"


def calculate(expression: str, max_length: int = 200) -> str:
    """The value of an arithmetic `expression` as text; raises ToolError for anything else."""
    if not isinstance(expression, str):
        raise ToolError("", "the expression must be text, such as '12 * (3 + 4)'")
    text = expression.replace("×", "*").replace("÷", "/").replace("^", "**").strip()
    text = re.sub(
        r"(?<=\d),(?=\d{3}(?!\d))", "", text
    )  # 1,234 -> 1234; any other comma stays (and is refused)
    if text.endswith("="):
        text = text[:-1]
    if not text:
        raise ToolError("", "the expression is empty")
    if len(text) > max_length:
        raise ToolError("", f"the expression is longer than {max_length} characters")
    try:
        tree = ast.parse(text, mode="eval")
        return format_number(_value(tree.body))
    except (SyntaxError, ValueError) as err:
        if isinstance(err, ToolError):
            raise
        raise ToolError(
            "",
            f"cannot read {_quoted(expression)} as arithmetic: write it with numbers and + - * / ( ), "
            "e.g. '(12 + 3) * 4'",
        ) from None
    except (RecursionError, MemoryError):  # possible only when a recipe raises max_length
        raise ToolError("", "the expression is nested too deeply") from None


def _quoted(expression: str, limit: int = 60) -> str:
    """The expression on one line, cut to `limit` characters, for an error message."""
    text = " ".join(expression.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


@register_tool("calculator")
def calculator_tool(max_length: int = 200) -> Callable[[str], str]:
    """The calculator; `max_length` bounds the expression's length in characters."""

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return its value.

        Args:
            expression: The arithmetic to do, with numbers, parentheses and + - * / ** operators, e.g. "(12 + 3) * 4".
        """
        return calculate(expression, max_length)

    return calculator
