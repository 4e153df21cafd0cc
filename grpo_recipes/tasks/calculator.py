"""The calculator task: arithmetic too hard to do mentally, asked in symbols or in words.

Each row has the `question` as asked, the `expression` it means in symbols (what a calculator reads), the
`answer`, and its `phrasing`. A question in symbols ("417 * 23 - 986") can be handed to a calculator as it
is; one in words ("417 times 23 minus 986") has to be rewritten first. The usual precedence holds in both
(products first). Whether a problem is asked in words depends on its expression only, so a problem is asked
the same way in every split, and distinct questions are distinct problems.

Example:
    >>> [(r["question"], r["expression"], r["answer"]) for r in calculator_arithmetic(2, seed=0, words_share=0.5)]
    [('786 minus 921 times 440 minus 51', '786 - 921 * 440 - 51', '-404505'), ('950 - 812 - 859 * 320', '950 - 812 - 859 * 320', '-274742')]
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator
from typing import Any, Literal, NoReturn

from rewards.typecheck import FieldError

from .arithmetic import _could_be, arithmetic, arithmetic_capacity

WORDS = {"+": "plus", "-": "minus", "*": "times"}

#: The most problems :func:`phrasing_capacity` counts one by one (about a second); beyond, it does not count.
COUNT_LIMIT = 4_000_000


def in_words(expression: str, words_share: float) -> bool:
    """Whether the problem `expression` is asked in words: a fixed share of problems, chosen by the expression."""
    return zlib.crc32(expression.encode()) % 1000 < round(words_share * 1000)


def to_words(expression: str) -> str:
    """``417 * 23 - 986`` -> ``417 times 23 minus 986``."""
    return " ".join(WORDS.get(token, token) for token in expression.split())


def to_symbols(question: str) -> str:
    """The inverse of :func:`to_words` (a question in symbols is returned as it is)."""
    symbols = {word: symbol for symbol, word in WORDS.items()}
    return " ".join(symbols.get(token, token) for token in question.split())


def calculator_arithmetic(
    n: int,
    seed: int,
    min_ops: int = 2,
    max_ops: int = 3,
    min_operand: int = 10,
    max_operand: int = 999,
    operators: str = "+-*",
    words_share: float = 0.5,
    exclude: set[str] | None = None,
    phrasing: Literal["any", "symbols", "words"] = "any",
) -> list[dict[str, Any]]:
    """`n` distinct problems; `words_share` of them (by expression) asked in words. `phrasing` keeps only one kind.

    When the problems asked in `phrasing` are too few, it says so, with the counts the caller gave:

    >>> calculator_arithmetic(20, seed=0, min_ops=1, max_ops=1, min_operand=10, max_operand=19, operators="+",
    ...                       words_share=0.05, phrasing="words")
    Traceback (most recent call last):
    ValueError: calculator_arithmetic: asked for 20 distinct problems in words (words_share 0.05), but these settings allow only 3.
    """
    excluded = {to_symbols(question) for question in exclude or ()}
    space = (min_ops, max_ops, min_operand, max_operand, operators)
    total = arithmetic_capacity(*space)
    held = {q for q in excluded if _could_be(q, min_ops, max_ops, min_operand, max_operand, set(operators))}
    if phrasing != "any":
        _check_room(n, words_share, phrasing, held, *space)
    rows: list[dict[str, Any]] = []
    rejected: set[str] = set()  # drawn, but asked the other way: once all are drawn, the phrasing is used up
    batch_seed = seed
    while len(rows) < n:
        if phrasing != "any" and len(rows) + len(rejected) + len(held) >= total:
            _short(n, words_share, phrasing, len(rows), held)
        need = n - len(rows)
        candidates = arithmetic(
            need if phrasing == "any" else min(2 * need + 8, total - len(held) - len(rows)),
            batch_seed,
            min_ops=min_ops,
            max_ops=max_ops,
            min_operand=min_operand,
            max_operand=max_operand,
            operators=operators,
            times_symbol="*",
            exclude=excluded | {row["expression"] for row in rows},
        )
        batch_seed += 7_919
        for candidate in candidates:
            expression = candidate["question"]
            words = in_words(expression, words_share)
            kind = "words" if words else "symbols"
            if phrasing != "any" and kind != phrasing:
                rejected.add(expression)
                continue
            question = to_words(expression) if words else expression
            rows.append(
                {
                    "question": question,
                    "expression": expression,
                    "answer": candidate["answer"],
                    "phrasing": kind,
                }
            )
            if len(rows) == n:
                break
    return rows


def phrasing_capacity(
    min_ops: int,
    max_ops: int,
    min_operand: int,
    max_operand: int,
    operators: str,
    words_share: float,
    phrasing: Literal["any", "symbols", "words"],
    **_: Any,
) -> int | None:
    """How many distinct problems these settings ask in `phrasing`; None for a space of more than
    `COUNT_LIMIT` problems (too many to count).

    >>> space = dict(min_ops=1, max_ops=1, min_operand=10, max_operand=19, operators="+", words_share=0.05)
    >>> phrasing_capacity(phrasing="words", **space), phrasing_capacity(phrasing="symbols", **space)
    (3, 97)
    """
    total = arithmetic_capacity(min_ops, max_ops, min_operand, max_operand, operators)
    if phrasing == "any":
        return total
    if total > COUNT_LIMIT:
        return None
    expressions = _expressions(min_ops, max_ops, min_operand, max_operand, operators)
    words = sum(in_words(expression, words_share) for expression in expressions)
    return words if phrasing == "words" else total - words


def _expressions(
    min_ops: int, max_ops: int, min_operand: int, max_operand: int, operators: str
) -> Iterator[str]:
    """Every problem these settings allow, in symbols, each once."""
    values = [str(value) for value in range(min_operand, max_operand + 1)]
    for k in range(min_ops, max_ops + 1):
        for ops in itertools.product(sorted(set(operators)), repeat=k):
            template = "{}" + "".join(f" {op} {{}}" for op in ops)
            for operands in itertools.product(values, repeat=k + 1):
                yield template.format(*operands)


def _check_room(
    n: int,
    words_share: float,
    phrasing: str,
    held: set[str],
    min_ops: int,
    max_ops: int,
    min_operand: int,
    max_operand: int,
    operators: str,
) -> None:
    """Raise before drawing when `n` problems asked in `phrasing` are known not to exist: none is asked that
    way, or (where `n` is near the share expected) the space is small enough to count them."""
    share = round(words_share * 1000) / 1000
    share = share if phrasing == "words" else 1 - share
    total = arithmetic_capacity(min_ops, max_ops, min_operand, max_operand, operators)
    if share == 0:
        _short(n, words_share, phrasing, 0, held)
    if n <= share * (total - len(held)) / 2:
        return
    pool = phrasing_capacity(min_ops, max_ops, min_operand, max_operand, operators, words_share, phrasing)
    if pool is not None and n > pool - _held_in(phrasing, words_share, held):
        _short(n, words_share, phrasing, pool - _held_in(phrasing, words_share, held), held)


def _held_in(phrasing: str, words_share: float, held: set[str]) -> int:
    """How many of the held-out problems `held` are asked in `phrasing`."""
    return sum((phrasing == "words") == in_words(question, words_share) for question in held)


def _short(n: int, words_share: float, phrasing: str, available: int, held: set[str]) -> NoReturn:
    held_here = _held_in(phrasing, words_share, held)
    raise ValueError(
        f"calculator_arithmetic: asked for {n} distinct problems in {phrasing} (words_share {words_share}),"
        f" but these settings allow only {available}"
        + (f" (after {held_here} held out)." if held_here else ".")
    )


def calculator_capacity(
    min_ops: int, max_ops: int, min_operand: int, max_operand: int, operators: str, **_: Any
) -> int:
    return arithmetic_capacity(min_ops, max_ops, min_operand, max_operand, operators)


def check_calculator(params: dict[str, Any]) -> None:
    from .arithmetic import check_arithmetic

    check_arithmetic({**params, "times_symbol": "*"})
    if not 0.0 <= params["words_share"] <= 1.0:
        raise FieldError("words_share", f"must be between 0 and 1, got {params['words_share']}.")
    kind = params["phrasing"]
    if (kind == "words" and params["words_share"] == 0.0) or (
        kind == "symbols" and params["words_share"] == 1.0
    ):
        raise FieldError(
            "phrasing", f"no problem is asked in {kind} with words_share {params['words_share']}."
        )
