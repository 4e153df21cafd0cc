"""Countdown (TinyZero's task): reach a target by combining the given numbers, each used once, with + - * /.

Each problem is built from a random expression over its numbers, so it is solvable by construction, and
that expression is kept as the reference `solution`. Every intermediate result of the reference is a
positive integer (division only where it is exact), as in the game; the `countdown` reward itself accepts
any exact value, fractions included.

Rows have the columns the `countdown` reward reads (`numbers`, `target`), a `question` for the prompt and
the reference equation as `solution`:

    >>> row = countdown(1, seed=0)[0]
    >>> sorted(row)
    ['numbers', 'question', 'solution', 'target']
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

from rewards.typecheck import FieldError

#: Draws in a row that may bring no new problem before generation gives up (the settings are too narrow).
MAX_FRUITLESS_DRAWS = 200_000
#: Random expressions tried on one draw of numbers before new numbers are drawn.
EXPRESSIONS_PER_DRAW = 8

# Binding strength of each operator, for writing the reference with as few parentheses as it needs.
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_LEAF = 3


@dataclass(frozen=True)
class _Node:
    """A sub-expression: its value, its text and the precedence of its outermost operator."""

    value: int
    text: str
    precedence: int = _LEAF


def _combine(left: _Node, op: str, right: _Node) -> _Node | None:
    """``left op right`` if its value is a positive integer, else None.

    The right operand of ``-`` or ``/`` is parenthesised when it is itself a sum/difference or a
    product/quotient, since ``a - (b - c)`` is not ``a - b - c``; ``a + (b - c)`` needs none.

    >>> _combine(_Node(9, "9"), "-", _combine(_Node(4, "4"), "+", _Node(2, "2"))).text
    '9 - (4 + 2)'
    >>> _combine(_Node(9, "9"), "/", _Node(2, "2")) is None
    True
    """
    a, b = left.value, right.value
    if op == "+":
        value = a + b
    elif op == "-":
        value = a - b
    elif op == "*":
        value = a * b
    else:
        if a % b:
            return None
        value = a // b
    if value <= 0:
        return None
    precedence = _PRECEDENCE[op]
    left_text = f"({left.text})" if left.precedence < precedence else left.text
    right_needs = right.precedence < precedence or (right.precedence == precedence and op in "-/")
    right_text = f"({right.text})" if right_needs else right.text
    return _Node(value, f"{left_text} {op} {right_text}", precedence)


def _random_expression(numbers: list[int], rng: random.Random) -> _Node | None:
    """A random expression tree using each number once (None when a step had no valid operator)."""
    pool = [_Node(n, str(n)) for n in numbers]
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        left, right = pool[i], pool[j]
        candidates = [node for op in "+-*/" if (node := _combine(left, op, right)) is not None]
        if not candidates:
            return None
        pool = [node for k, node in enumerate(pool) if k not in (i, j)] + [rng.choice(candidates)]
    return pool[0]


def question_text(numbers: list[int], target: int) -> str:
    """The problem in TinyZero's words.

    >>> question_text([44, 19, 35], 98)
    'Using the numbers [44, 19, 35], create an equation that equals 98.'
    """
    return f"Using the numbers {numbers}, create an equation that equals {target}."


def problem_key(question: str) -> tuple[tuple[int, ...], int]:
    """What makes two questions the same problem: the numbers in any order, and the target.

    >>> problem_key("Using the numbers [19, 44, 35], create an equation that equals 98.")
    ((19, 35, 44), 98)
    """
    values = [int(text) for text in re.findall(r"\d+", question)]
    return tuple(sorted(values[:-1])), values[-1]


def countdown(
    n: int,
    seed: int,
    min_count: int = 3,
    max_count: int = 4,
    min_number: int = 1,
    max_number: int = 99,
    min_target: int = 1,
    max_target: int = 100,
    exclude: set[str] | None = None,
) -> list[dict[str, Any]]:
    """`n` distinct Countdown problems: `min_count`..`max_count` numbers, each in `min_number`..`max_number`,
    and a target in `min_target`..`max_target` that they reach.

    A problem is the same as another when its numbers (in any order) and target are; `exclude` removes
    the problems of given questions (a held-out split).

    >>> row = countdown(1, seed=1, max_count=3, max_number=20, max_target=30)[0]
    >>> row["question"], row["solution"]
    ('Using the numbers [19, 3, 9], create an equation that equals 25.', '19 - 3 + 9')
    """
    rng = random.Random(seed)
    excluded = {problem_key(question) for question in exclude or ()}
    seen: set[tuple[tuple[int, ...], int]] = set()
    rows: list[dict[str, Any]] = []
    fruitless = 0
    while len(rows) < n:
        if fruitless > MAX_FRUITLESS_DRAWS:
            raise ValueError(
                f"countdown: found only {len(rows)} of {n} distinct problems before {MAX_FRUITLESS_DRAWS} "
                "draws in a row brought no new one; widen the number or target range, or ask for fewer."
            )
        fruitless += 1
        numbers = [rng.randint(min_number, max_number) for _ in range(rng.randint(min_count, max_count))]
        for _ in range(EXPRESSIONS_PER_DRAW):
            expression = _random_expression(numbers, rng)
            if expression is not None and min_target <= expression.value <= max_target:
                break
        else:
            continue
        key = (tuple(sorted(numbers)), expression.value)
        if key in seen or key in excluded:
            continue
        seen.add(key)
        fruitless = 0
        rows.append(
            {
                "question": question_text(numbers, expression.value),
                "numbers": numbers,
                "target": expression.value,
                "solution": expression.text,
            }
        )
    return rows


def countdown_capacity(
    min_count: int,
    max_count: int,
    min_number: int,
    max_number: int,
    min_target: int,
    max_target: int,
    **_: Any,
) -> int:
    """An upper bound on the distinct problems these settings allow: multisets of numbers times targets
    (every parameter of `countdown` is passed in).

    Not every pair is reachable, so asking for nearly this many can still fail (with a clear error).

    >>> countdown_capacity(min_count=3, max_count=3, min_number=1, max_number=3, min_target=1, max_target=10)
    100
    """
    values = max_number - min_number + 1
    multisets = sum(math.comb(values + k - 1, k) for k in range(min_count, max_count + 1))
    return multisets * (max_target - min_target + 1)


def check_countdown(params: dict[str, Any]) -> None:
    """What the annotations of `countdown` cannot say; `params` has every parameter, type-checked.

    >>> check_countdown({"min_count": 3, "max_count": 7, "min_number": 1, "max_number": 99,
    ...                  "min_target": 1, "max_target": 100})
    Traceback (most recent call last):
    rewards.typecheck.FieldError: max_count: must be at most 6, got 7.
    """
    _check_range(params, "min_count", "max_count", 2, 6)
    _check_range(params, "min_number", "max_number", 1, 10_000)
    _check_range(params, "min_target", "max_target", 1, 1_000_000)


def _check_range(params: dict[str, Any], low_key: str, high_key: str, floor: int, ceiling: int) -> None:
    """`floor <= params[low_key] <= params[high_key] <= ceiling`, else a FieldError naming the key at fault."""
    low, high = params[low_key], params[high_key]
    if low < floor:
        raise FieldError(low_key, f"must be at least {floor}, got {low}.")
    if high > ceiling:
        raise FieldError(high_key, f"must be at most {ceiling}, got {high}.")
    if low > high:
        raise FieldError(low_key, f"must not exceed {high_key} ({high}), got {low}.")
