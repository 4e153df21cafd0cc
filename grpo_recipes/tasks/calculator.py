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

import zlib
from typing import Any, Literal

from rewards.typecheck import FieldError

from .arithmetic import arithmetic, arithmetic_capacity

WORDS = {"+": "plus", "-": "minus", "*": "times"}


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
    """`n` distinct problems; `words_share` of them (by expression) asked in words. `phrasing` keeps only one kind."""
    excluded = {to_symbols(question) for question in exclude or ()}
    rows: list[dict[str, Any]] = []
    batch_seed = seed
    while len(rows) < n:
        need = n - len(rows)
        candidates = arithmetic(
            need if phrasing == "any" else 2 * need + 8,
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
