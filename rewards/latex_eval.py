r"""Numeric value and rough shape of a canonical LaTeX answer, in pure Python.

Most MATH answers are constants (``\frac{3\sqrt{3}}{4}``, ``12\pi``, ``6 - 5i``), expressions in a
few variables (``2k + 2``, ``x^3 + 3x - 6``) or collections (tuples, intervals, matrices). Evaluating
an answer numerically, and telling one value from several, lets ``math_accuracy`` settle most *wrong*
answers without sympy: a sympy parse costs ~10 ms, this ~20 us.

:func:`evaluate` computes the value of an expression, with every variable (a single Latin letter)
set to a fixed, generic irrational number. If two answers' values differ, the answers differ as
functions -- one point suffices to prove that. Equal values prove nothing when variables are
involved, so the math reward only trusts "equal" for constants, and only clear-cut float
comparisons at all (equal to 1e-12 relative, or different by more than 1e-6).

Understood: decimal numbers, ``+ - * / ^``, ``\cdot \times \div``, parentheses and braces, implicit
multiplication (``3\sqrt{2}``, ``2(1+x)``, ``6r^2``), ``\frac{a}{b}``, ``\sqrt{x}``, ``\sqrt[n]{x}``,
``\pi``, ``i`` (imaginary unit) and single-letter variables. Anything else -- ``e`` (a constant or a
variable?), a run of letters (a unit? a word?), a letter before ``(`` (a function?), ``\infty``,
functions, commas, ``=`` -- returns
``None``, as do ambiguous TeX (``2^10``, the mixed number ``1\frac{4}{5}``), overflow, division by
zero and square roots of negative numbers. Input length, nesting depth and exponents are capped.
"""

from __future__ import annotations

import cmath
import math
import re
from dataclasses import dataclass

MAX_CHARS = 300
MAX_DEPTH = 30
MAX_EXPONENT = 1000.0

_TOKEN = re.compile(r"\d+(?:\.\d+)?|\.\d+|\\[a-zA-Z]+|[a-zA-Z]|[-+*/^(){}\[\]]")
_MULTIPLY = {"*", "\\cdot", "\\times"}
_DIVIDE = {"/", "\\div"}
_COMMAND_ATOMS = {"\\frac", "\\sqrt", "\\pi"}


def _variable_value(letter: str) -> float:
    """A fixed, generic value for a variable: distinct per letter, irrational-looking, in [1.1, 2.1).

    (Multiples of the golden ratio modulo 1 never repeat and avoid simple rationals.)
    """
    return 1.1 + math.fmod(ord(letter) * 0.6180339887498949, 1.0)


class _NotEvaluable(Exception):
    pass


@dataclass(frozen=True)
class Evaluation:
    """An answer's value at the generic point, and whether it had variables."""

    value: complex
    has_variables: bool


class _Evaluator:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                raise _NotEvaluable
            self.tokens.append(match.group(0))
            position = match.end()
        self.index = 0
        self.has_variables = False

    def peek(self) -> str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _NotEvaluable
        self.index += 1
        return token

    def expect(self, token: str) -> None:
        if self.take() != token:
            raise _NotEvaluable

    def starts_atom(self, token: str | None) -> bool:
        return token is not None and (token in ("(", "{") or token in _COMMAND_ATOMS or token.isalpha())

    def argument(self, depth: int) -> complex:
        """A TeX argument: ``{...}`` or one character (``x^23`` is ``x^2 * 3``, ``\\frac12`` is 1/2)."""
        token = self.peek()
        if token == "{":
            return self.atom(depth + 1)
        if token is not None and token[0].isdigit():
            self.index += 1
            if len(token) > 1:  # put the other digits back as the next token
                self.tokens.insert(self.index, token[1:])
            return complex(float(token[0]))
        if token is not None and (token == "\\pi" or (len(token) == 1 and token.isalpha())):
            return self.atom(depth + 1)
        raise _NotEvaluable

    def expression(self, depth: int) -> complex:
        if depth > MAX_DEPTH:
            raise _NotEvaluable
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            sign = self.take()
            right = self.term(depth)
            value = value + right if sign == "+" else value - right
        return value

    def term(self, depth: int) -> complex:
        value = self.factor(depth)
        while True:
            token = self.peek()
            if token in _MULTIPLY:
                self.take()
                value *= self.factor(depth)
            elif token in _DIVIDE:
                self.take()
                value = _divide(value, self.factor(depth))
            elif self.starts_atom(token):  # implicit multiplication: 3\sqrt{2}, 2(1+x), 6r^2
                if token == "\\frac" and self.tokens[self.index - 1][0].isdigit():
                    raise _NotEvaluable  # 15\frac{39}{40} is a mixed number to graders, a product to TeX
                value *= self.power(depth)
            else:
                return value

    def factor(self, depth: int) -> complex:
        token = self.peek()
        if token in ("+", "-"):
            self.take()
            if depth > MAX_DEPTH:
                raise _NotEvaluable
            value = self.factor(depth + 1)
            return value if token == "+" else -value
        return self.power(depth)

    def power(self, depth: int) -> complex:
        base = self.atom(depth)
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.argument(depth)
        if self.peek() == "^" or exponent.imag != 0 or abs(exponent.real) > MAX_EXPONENT:
            raise _NotEvaluable
        if exponent.real == int(exponent.real):
            return base ** int(exponent.real) if base != 0 or exponent.real > 0 else _divide(1, 0)
        if base.imag != 0 or base.real < 0:
            raise _NotEvaluable  # a branch choice: leave it to sympy
        return complex(math.pow(base.real, exponent.real))

    def atom(self, depth: int) -> complex:
        if depth > MAX_DEPTH:
            raise _NotEvaluable
        token = self.take()
        if token[0].isdigit() or token[0] == ".":
            return complex(float(token))
        if token in ("(", "{"):
            value = self.expression(depth + 1)
            self.expect(")" if token == "(" else "}")
            return value
        if token == "\\pi":
            return complex(math.pi)
        if token == "i":
            return 1j
        if len(token) == 1 and token.isalpha() and token != "e":
            following = self.peek() or ""
            if following == "(" or (len(following) == 1 and following.isalpha()):
                raise _NotEvaluable  # f(x) may be a function; a run of letters may be a word or a unit
            self.has_variables = True
            return complex(_variable_value(token))
        if token == "\\frac":
            numerator = self.argument(depth)
            return _divide(numerator, self.argument(depth))
        if token == "\\sqrt":
            degree = 2
            if self.peek() == "[":
                self.take()
                index = self.expression(depth + 1)
                self.expect("]")
                if index.imag != 0 or index.real != int(index.real) or not 2 <= index.real <= 100:
                    raise _NotEvaluable
                degree = int(index.real)
            radicand = self.argument(depth)
            if radicand.imag != 0 or (radicand.real < 0 and degree % 2 == 0):
                raise _NotEvaluable
            root = math.pow(abs(radicand.real), 1.0 / degree)
            return complex(-root if radicand.real < 0 else root)
        raise _NotEvaluable


def _divide(numerator: complex, denominator: complex) -> complex:
    if abs(denominator) < 1e-300:
        raise _NotEvaluable
    return numerator / denominator


def evaluate(canonical: str) -> Evaluation | None:
    r"""Evaluate a canonical (whitespace-free) LaTeX expression at the generic point; ``None`` if not possible.

    >>> round(evaluate(r"\frac{3\sqrt{3}}{4}").value.real, 6), evaluate("6-5i").value
    (1.299038, (6-5j))
    >>> evaluate("2k+2").has_variables, evaluate("2^{10}").value
    (True, (1024+0j))
    >>> [evaluate(text) for text in ("9^{9^{9^{9}}}", "2^10", r"15\frac{39}{40}", "5cm", r"\sqrt{-4}")]
    [None, None, None, None, None]
    """
    if not canonical or len(canonical) > MAX_CHARS:
        return None
    try:
        evaluator = _Evaluator(canonical)
        value = evaluator.expression(0)
        if evaluator.peek() is not None:
            return None
    except (_NotEvaluable, OverflowError, ValueError, ZeroDivisionError, RecursionError):
        return None
    if not cmath.isfinite(value):
        return None
    return Evaluation(value=value, has_variables=evaluator.has_variables)


_SHAPE_TOKEN = re.compile(r"\\\{|\\\}|\\\\|\\[a-zA-Z]+|.", re.DOTALL)
_OPENERS = {"(", "[", "{", "\\{", "\\langle"}
_CLOSERS = {")", "]", "}", "\\}", "\\rangle"}


def is_collection(canonical: str) -> bool:
    r"""Whether a canonical answer denotes several values: a tuple, interval, set, list, union or matrix.

    >>> is_collection(r"(3,\frac{\pi}{2})"), is_collection(r"(0,9)\cup(9,36)"), is_collection("1,2,3")
    (True, True, True)
    >>> is_collection(r"[2,5)"), is_collection(r"\{1,2\}"), is_collection(r"1\pm\sqrt{19}")
    (True, True, True)
    >>> is_collection(r"\begin{pmatrix}-1/3\\2/3\end{pmatrix}")
    True
    >>> is_collection(r"\frac{1}{2}"), is_collection("f(x)"), is_collection(r"\max(3,4)"), is_collection("(1)(2,3)")
    (False, False, False, False)
    """
    if len(canonical) > MAX_CHARS * 10:
        return False
    if re.search(r"\\begin\{[pbvBV]?matrix\}.*(?:\\\\|&)", canonical, re.DOTALL):
        return True
    tokens = _SHAPE_TOKEN.findall(canonical)
    depth = 0
    comma_inside_outer = False
    outer_closed_early = False
    for index, token in enumerate(tokens):
        if token in _OPENERS:
            depth += 1
        elif token in _CLOSERS:
            depth -= 1
            if depth == 0 and index < len(tokens) - 1:
                outer_closed_early = True
        elif depth == 0 and token in (",", "\\cup", "\\pm", "\\mp"):
            return True  # a list "1,2", a union of intervals, or two values "1 \pm \sqrt{2}"
        elif depth == 1 and token == ",":
            comma_inside_outer = True
    # A bracketed literal -- (a,b), [a,b), \{a,b\}, \langle a,b\rangle -- is one bracket pair spanning it all.
    starts_bracketed = bool(tokens) and tokens[0] in _OPENERS - {"{"}
    return starts_bracketed and comma_inside_outer and not outer_closed_early
