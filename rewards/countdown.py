r"""``countdown``: TinyZero's Countdown task -- reach ``target`` using each of ``numbers`` exactly once.

The completion's equation (the last ``<answer>`` block, or the last ``\boxed{}``) is parsed by a tiny
recursive-descent parser over ``+ - * /``, parentheses and integers, and evaluated exactly with
:class:`fractions.Fraction`. Model output is never passed to ``eval``: the grammar has no names, no
calls, no attributes and no exponent, so nothing but arithmetic can happen, and the input length,
nesting depth and digit counts are capped so evaluation is instant.

Grammar (``=`` and what follows it is ignored, so ``(1 + 2) * 3 = 9`` reads as ``(1 + 2) * 3``)::

    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/") factor)*
    factor     := ("+" | "-") factor | "(" expression ")" | integer
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from rewards.base import Reward, Sample
from rewards.extract import find_answer_tags, find_boxed
from rewards.registry import invalid, register

#: Caps on what the parser accepts; real Countdown equations are far smaller.
MAX_EQUATION_CHARS = 300
MAX_DEPTH = 50
MAX_DIGITS = 12

_TOKEN = re.compile(r"\s*(?:(?P<number>\d+)|(?P<op>[-+*/()]))")


class EquationError(ValueError):
    """The text is not an arithmetic expression of the accepted form."""


@dataclass(frozen=True)
class Equation:
    """A parsed equation: its exact value (``None`` after a division by zero) and the integers it uses."""

    value: Fraction | None
    numbers: tuple[int, ...]


class _Parser:
    """Recursive descent over the tokens of one expression (see the module's grammar)."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        text = text.rstrip()
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                raise EquationError(f"unexpected character {text[position]!r}")
            token = match.group("number") or match.group("op")
            if match.group("number") and len(token) > MAX_DIGITS:
                raise EquationError("number too long")
            self.tokens.append(token)
            position = match.end()
        self.index = 0
        self.numbers: list[int] = []
        self.divided_by_zero = False

    def peek(self) -> str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise EquationError("unexpected end of expression")
        self.index += 1
        return token

    def expression(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            value = value + self.term(depth) if self.take() == "+" else value - self.term(depth)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            operator = self.take()
            right = self.factor(depth)
            if operator == "*":
                value *= right
            elif right == 0:
                self.divided_by_zero = True
                value = Fraction(0)
            else:
                value /= right
        return value

    def factor(self, depth: int) -> Fraction:
        if depth > MAX_DEPTH:
            raise EquationError("nested too deeply")
        token = self.take()
        if token in ("+", "-"):
            value = self.factor(depth + 1)
            return value if token == "+" else -value
        if token == "(":
            value = self.expression(depth + 1)
            if self.take() != ")":
                raise EquationError("missing ')'")
            return value
        if token.isdigit():
            self.numbers.append(int(token))
            return Fraction(int(token))
        raise EquationError(f"unexpected {token!r}")


def parse_equation(text: str) -> Equation:
    """Parse and evaluate an arithmetic expression; raises :class:`EquationError` if it is not one.

    >>> parse_equation("(25 - 5) * 4 / 2 = 40")
    Equation(value=Fraction(40, 1), numbers=(25, 5, 4, 2))
    >>> parse_equation("8 / (3 - 3)").value is None
    True
    """
    text = text.replace("×", "*").replace("÷", "/").replace("\\times", "*").replace("\\div", "/")
    text = text.split("=", 1)[0]
    if len(text) > MAX_EQUATION_CHARS:
        raise EquationError("equation too long")
    parser = _Parser(text)
    if not parser.tokens:
        raise EquationError("empty equation")
    value = parser.expression(0)
    if parser.peek() is not None:
        raise EquationError(f"unexpected {parser.peek()!r}")
    return Equation(value=None if parser.divided_by_zero else value, numbers=tuple(parser.numbers))


def _as_int(value: Any) -> int | None:
    """An integer from an int (numpy's too), an integral float or a string of digits; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        value = value.strip()
        return int(value) if value.lstrip("-").isdigit() and len(value) <= MAX_DIGITS else None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _as_ints(values: Any) -> list[int] | None:
    """The integers of a list (tuple, numpy array, ...), or None unless every item is one."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        return None
    numbers = [_as_int(value) for value in values]
    return None if any(number is None for number in numbers) else numbers


@register("countdown")
class Countdown(Reward):
    r"""1.0 if the equation uses each of ``numbers`` exactly once and equals ``target``.

    Scores, as in TinyZero: no answer (no ``<answer>`` block, or an empty one) → 0.0; an answer
    that is not a valid equation, uses the wrong numbers or misses the target → ``format_score``
    (the format was followed); a division by zero → 0.0.

    Params:
        answer_format: read the equation from the last ``<answer>`` block (``"answer_tag"``) or the
            last ``\boxed{}`` (``"boxed"``).
        format_score: score of a well-formed but wrong equation.

    Columns: ``numbers`` (list of ints) and ``target`` (int).

    >>> reward = Countdown()
    >>> reward(["<answer>(6 - 2) * 5</answer>", "<answer>6 * 5 - 2</answer>", "<answer>6*2</answer>",
    ...         "<answer>6 / (5 - 5) + 2</answer>", "20"], numbers=[[2, 5, 6]] * 5, target=[20] * 5)
    [1.0, 0.1, 0.1, 0.0, 0.0]
    """

    required_columns = ("numbers", "target")
    is_accuracy = True

    def __init__(
        self, *, answer_format: Literal["answer_tag", "boxed"] = "answer_tag", format_score: float = 0.1
    ) -> None:
        if not 0.0 <= format_score <= 1.0:
            raise invalid("countdown", f"format_score must be in [0, 1], got {format_score!r}")
        self.answer_format = answer_format
        self.format_score = float(format_score)

    def equation_text(self, text: str) -> str | None:
        found = find_answer_tags(text) if self.answer_format == "answer_tag" else find_boxed(text)
        return found[-1].strip() if found and found[-1].strip() else None

    reads_answers = True

    def final_answer(self, text: str) -> str | None:
        """The equation of the answer, without spaces (the same equation written alike votes together).

        >>> Countdown().final_answer("<answer> (6 - 2) * 5 </answer>")
        '(6-2)*5'
        """
        equation = self.equation_text(text)
        return None if equation is None else "".join(equation.split())

    def score(self, sample: Sample) -> float:
        text = self.equation_text(sample.text)
        numbers = _as_ints(sample.columns.get("numbers"))
        target = _as_ints([sample.columns.get("target")])
        if text is None or numbers is None or target is None:
            return 0.0
        try:
            equation = parse_equation(text)
        except EquationError:
            return self.format_score
        if equation.value is None:  # division by zero
            return 0.0
        if Counter(equation.numbers) != Counter(numbers):
            return self.format_score
        return 1.0 if equation.value == target[0] else self.format_score
