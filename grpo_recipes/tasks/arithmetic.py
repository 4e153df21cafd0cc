"""The arithmetic generator: expressions with operator precedence, like ``2 + 2 × 6``.

Each row has a `worked` column, the question worked to its answer one operation at a time, for a supervised
warm-up to show (`warmup.answer: "{worked}"`): a difference below zero is written as the opposite of a
difference above it, ``3 - 9 = -(9 - 3) = -6``, which a small model computes where it cannot ``3 - 9`` directly.

Example:
    >>> arithmetic(1, seed=0, max_ops=1)
    [{'question': '7 - 1', 'answer': '6', 'worked': '7 - 1 = 6'}]
"""

from __future__ import annotations

import random
from typing import Any, Literal

from rewards.typecheck import FieldError


def _evaluate(operands: list[int], operators: list[str]) -> int:
    """Evaluate with the usual precedence: products first, then sums and differences left to right."""
    terms, signs = [operands[0]], []
    for op, value in zip(operators, operands[1:], strict=True):
        if op == "*":
            terms[-1] *= value
        else:
            terms.append(value)
            signs.append(op)
    total = terms[0]
    for op, value in zip(signs, terms[1:], strict=True):
        total = total + value if op == "+" else total - value
    return total


def worked(operands: list[int], operators: list[str], times_symbol: str = "×") -> str:
    """The expression, then each step of its evaluation (products first, then left to right), joined by `=`.

    >>> worked([2, 3, 4], ["+", "*"])
    '2 + 3 × 4 = 2 + 12 = 14'
    >>> worked([3, 9], ["-"]), worked([9, 3], ["-"])
    ('3 - 9 = -(9 - 3) = -6', '9 - 3 = 6')
    """
    values, ops = list(operands), list(operators)

    def text() -> str:
        parts = [str(values[0])]
        for op, value in zip(ops, values[1:], strict=True):
            parts += [times_symbol if op == "*" else op, str(value)]
        return " ".join(parts)

    steps = [text()]
    while ops:
        i = ops.index("*") if "*" in ops else 0
        left, right, op = values[i], values[i + 1], ops[i]
        if op == "-" and len(ops) == 1 and 0 <= left < right:
            steps.append(f"-({right} - {left})")
        values[i : i + 2] = [left * right if op == "*" else left + right if op == "+" else left - right]
        del ops[i]
        steps.append(text())
    return " = ".join(steps)


def arithmetic(
    n: int,
    seed: int,
    min_ops: int = 1,
    max_ops: int = 2,
    min_operand: int = 1,
    max_operand: int = 9,
    operators: str = "+-*",
    times_symbol: Literal["×", "*", "x"] = "×",
    exclude: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Arithmetic expressions with operator precedence, like ``2 + 2 × 6`` (answer ``14``).

    Difficulty grows with the number of operators (`min_ops`..`max_ops`, drawn uniformly per problem) and the
    operand range. Each operator is drawn from `operators`, so one written twice is drawn twice as often. Problems are distinct within a call; `exclude` removes given questions (a held-out split).

    >>> [row["question"] + " -> " + row["answer"] for row in arithmetic(2, seed=1, max_ops=1)]
    ['2 + 5 -> 7', '8 × 8 -> 64']
    """
    rng = random.Random(seed)
    exclude = exclude or set()
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    distinct = arithmetic_capacity(min_ops, max_ops, min_operand, max_operand, operators)
    symbols = {times_symbol if op == "*" else op for op in operators}
    reachable = sum(_could_be(q, min_ops, max_ops, min_operand, max_operand, symbols) for q in exclude)
    if n > distinct - reachable:
        raise ValueError(
            f"arithmetic: asked for {n} distinct problems, but these settings allow only {distinct}"
            + (f", {reachable} of them excluded." if reachable else ".")
        )
    while len(rows) < n:
        k = rng.randint(min_ops, max_ops)
        operands = [rng.randint(min_operand, max_operand) for _ in range(k + 1)]
        ops = [rng.choice(operators) for _ in range(k)]
        parts = [str(operands[0])]
        for op, value in zip(ops, operands[1:], strict=True):
            parts += [times_symbol if op == "*" else op, str(value)]
        question = " ".join(parts)
        if question in seen or question in exclude:
            continue
        seen.add(question)
        answer = str(_evaluate(operands, ops))
        rows.append({"question": question, "answer": answer, "worked": worked(operands, ops, times_symbol)})
    return rows


def _could_be(question: str, min_ops: int, max_ops: int, low: int, high: int, symbols: set[str]) -> bool:
    """Whether these settings could generate `question` (an excluded question that they cannot takes no
    problem away from them).

    >>> _could_be("3 × 12", 1, 1, 2, 12, {"+", "×"}), _could_be("3 × 13", 1, 1, 2, 12, {"+", "×"})
    (True, False)
    """
    parts = question.split(" ")
    operands, ops = parts[::2], parts[1::2]
    return (
        min_ops <= len(ops) <= max_ops
        and all(op in symbols for op in ops)
        and all(value.isdigit() and low <= int(value) <= high for value in operands)
    )


def arithmetic_capacity(
    min_ops: int, max_ops: int, min_operand: int, max_operand: int, operators: str, **_: Any
) -> int:
    """How many distinct problems these settings allow (every parameter of `arithmetic` is passed in).

    An operator written twice (``"+--*"``) is drawn twice as often, and adds no problem:

    >>> arithmetic_capacity(min_ops=1, max_ops=1, min_operand=2, max_operand=12, operators="+-*")
    363
    >>> arithmetic_capacity(min_ops=1, max_ops=1, min_operand=2, max_operand=12, operators="+--*")
    363
    """
    values = max_operand - min_operand + 1
    kinds = len(set(operators))
    return sum(values ** (k + 1) * kinds**k for k in range(min_ops, max_ops + 1))


def check_arithmetic(params: dict[str, Any]) -> None:
    """What the annotations of `arithmetic` cannot say; `params` has every parameter, type-checked."""
    ops = params["operators"]
    if not ops or set(ops) - set("+-*"):
        raise FieldError("operators", f"must be a non-empty string of + - *, got {ops!r}.")
    lo, hi, a, b = params["min_ops"], params["max_ops"], params["min_operand"], params["max_operand"]
    if not 1 <= lo <= hi <= 6:
        raise FieldError("", f"need 1 <= min_ops <= max_ops <= 6, got min_ops={lo}, max_ops={hi}.")
    if not 0 <= a <= b:
        raise FieldError("", f"need 0 <= min_operand <= max_operand, got {a}, {b}.")
