"""Built-in procedural tasks: datasets generated from a seed, with exact answers and no download.

A recipe names one under `dataset.generator`; its rows have the columns listed in `columns`.

Example:
    >>> rows = GENERATORS["arithmetic"].generate(3, seed=0, max_ops=2)
    >>> sorted(rows[0])
    ['answer', 'question', 'worked']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rewards.typecheck import check_mapping, parameters

from .arithmetic import arithmetic, arithmetic_capacity, check_arithmetic
from .calculator import calculator_arithmetic, calculator_capacity, check_calculator
from .code import check_code_functions, code_functions, code_functions_capacity
from .countdown import check_countdown, countdown, countdown_capacity
from .guess_number import check_guess_number, guess_number, guess_number_capacity
from .reasoning_gym import HELD_OUT_SEED_OFFSET, ReasoningGymGenerator


@dataclass(frozen=True)
class Generator:
    """A procedural task: a row generator, the columns its rows have, and a check of its params."""

    generate_rows: Callable[..., list[dict[str, Any]]]
    columns: tuple[str, ...]
    check: Callable[[dict[str, Any]], None]
    """Range checks a type cannot say, given every parameter (defaults filled in); raises FieldError."""
    count_distinct: Callable[..., int]
    """How many distinct rows the params allow, given every parameter (defaults filled in)."""
    key: str = "question"
    """The column that tells two rows apart: distinct within a split, never shared by the two splits (what
    `exclude` holds)."""

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` checked against the annotations of `generate_rows`, then by `check`; raises FieldError
        keyed by the parameter.

        >>> GENERATORS["arithmetic"].check_params({"max_ops": "two"})
        Traceback (most recent call last):
        rewards.typecheck.FieldError: max_ops: expected an integer, got 'two'.
        """
        signature = parameters(self.generate_rows, skip=("n", "seed", "exclude"))
        checked = check_mapping(params, {name: p.annotation for name, p in signature.items()})
        self.check(self.with_defaults(checked))
        return checked

    def capacity(self, **params: Any) -> int:
        """How many distinct rows `params` allow; unset parameters take `generate_rows`'s defaults, so the
        count can never disagree with what generation uses.

        >>> GENERATORS["arithmetic"].capacity(max_ops=1, min_operand=2, max_operand=12)
        363
        """
        return self.count_distinct(**self.with_defaults(params))

    def with_defaults(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` with every unset parameter at `generate_rows`'s default.

        >>> GENERATORS["arithmetic"].with_defaults({"max_ops": 1})["max_operand"]
        9
        """
        signature = parameters(self.generate_rows, skip=("n", "seed", "exclude"))
        return {name: p.default for name, p in signature.items()} | dict(params)

    def generate(
        self, n: int, seed: int, exclude: set[Any] | None = None, **params: Any
    ) -> list[dict[str, Any]]:
        return self.generate_rows(n, seed, exclude=exclude, **params)

    def splits(
        self, train_size: int, eval_size: int, seed: int, **params: Any
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A train split and a held-out eval split with no `key` (question, by default) in common."""
        eval_rows = self.generate(eval_size, seed=seed + HELD_OUT_SEED_OFFSET, **params)
        held_out = {row[self.key] for row in eval_rows}
        train_rows = self.generate(train_size, seed=seed, exclude=held_out, **params)
        return train_rows, eval_rows


GENERATORS: dict[str, Generator | ReasoningGymGenerator] = {
    "arithmetic": Generator(
        arithmetic,
        columns=("question", "answer", "worked"),
        check=check_arithmetic,
        count_distinct=arithmetic_capacity,
    ),
    "calculator_arithmetic": Generator(
        calculator_arithmetic,
        columns=("question", "expression", "answer", "phrasing"),
        check=check_calculator,
        count_distinct=calculator_capacity,
    ),
    "countdown": Generator(
        countdown,
        columns=("question", "numbers", "target", "solution"),
        check=check_countdown,
        count_distinct=countdown_capacity,
    ),
    "code_functions": Generator(
        code_functions,
        columns=("question", "entry_point", "tests", "solution"),
        check=check_code_functions,
        count_distinct=code_functions_capacity,
    ),
    "guess_number": Generator(  # games for the guess_number environment: one question, distinct secrets
        guess_number,
        columns=("question", "secret"),
        check=check_guess_number,
        count_distinct=guess_number_capacity,
        key="secret",
    ),
    "reasoning_gym": ReasoningGymGenerator(),  # any reasoning-gym task, or a weighted mix
}
