"""The guess_number generator: games for the ``guess_number`` environment (``grpo_recipes.agents.environments``).

A row is one game: `question`, the instructions the model reads (the range and how many guesses it has), and
`secret`, the number the environment hides (``GuessNumber.reset(secret=...)``). The model finds it by calling
the environment's ``guess`` tool, which answers higher, lower or correct; the ``environment_reward`` is 1 when
it was found within the guesses allowed. The params are the environment's own (``low``, ``high``,
``max_guesses``): a recipe gives the same values to both.

Every row has the same question, so the splits are told apart by their secrets (the generator's ``key``):
distinct within a split, and none of the held-out split's in the training split. The range therefore bounds
the rows of both splits together: 1..100 makes 100 games in all.

Example:
    >>> rows = guess_number(2, seed=0, low=1, high=100, max_guesses=7)
    >>> [row["secret"] for row in rows]
    [50, 98]
    >>> print(rows[0]["question"])
    I am thinking of a whole number from 1 to 100. Find it with the guess tool: after each guess I say whether my number is higher or lower than your guess, or that you are right. You have 7 guesses.
"""

from __future__ import annotations

import random
from typing import Any

from rewards.typecheck import FieldError

#: The most numbers a range may hold (a binary search of it takes 20 guesses).
MAX_RANGE = 1_000_000
MAX_GUESSES = 100


def question_text(low: int, high: int, max_guesses: int) -> str:
    """The game's instructions.

    >>> question_text(1, 10, 1)[-22:]
    'You have 1 guess only.'
    """
    allowed = "1 guess only" if max_guesses == 1 else f"{max_guesses} guesses"
    return (
        f"I am thinking of a whole number from {low} to {high}. Find it with the guess tool: after each guess "
        "I say whether my number is higher or lower than your guess, or that you are right. "
        f"You have {allowed}."
    )


def guess_number(
    n: int,
    seed: int,
    low: int = 1,
    high: int = 100,
    max_guesses: int = 7,
    exclude: set[Any] | None = None,
) -> list[dict[str, Any]]:
    """`n` games with distinct secrets drawn uniformly from `low`..`high`; `exclude` holds secrets to leave out
    (a held-out split's).

    >>> [row["secret"] for row in guess_number(3, seed=1, low=1, high=5, exclude={1, 2})]
    [3, 5, 4]
    >>> guess_number(3, seed=1, low=1, high=5, exclude={1, 2, 3})
    Traceback (most recent call last):
    ValueError: guess_number: asked for 3 games with distinct secrets, but 1..5 holds only 2 (after 3 held out).
    """
    excluded = {int(secret) for secret in exclude or ()}
    pool = [secret for secret in range(low, high + 1) if secret not in excluded]
    if n > len(pool):
        held = len(excluded & set(range(low, high + 1)))
        raise ValueError(
            f"guess_number: asked for {n} games with distinct secrets, but {low}..{high} holds only {len(pool)}"
            + (f" (after {held} held out)." if held else ".")
        )
    question = question_text(low, high, max_guesses)
    return [{"question": question, "secret": secret} for secret in random.Random(seed).sample(pool, n)]


def guess_number_capacity(low: int, high: int, **_: Any) -> int:
    """How many games with distinct secrets the range allows (every parameter of `guess_number` is passed in).

    >>> guess_number_capacity(low=1, high=100, max_guesses=7)
    100
    """
    return high - low + 1


def check_guess_number(params: dict[str, Any]) -> None:
    """What the annotations of `guess_number` cannot say; `params` has every parameter, type-checked.

    >>> check_guess_number({"low": 10, "high": 10, "max_guesses": 7})
    Traceback (most recent call last):
    rewards.typecheck.FieldError: high: must be above low (10), got 10.
    """
    low, high, guesses = params["low"], params["high"], params["max_guesses"]
    if high <= low:
        raise FieldError("high", f"must be above low ({low}), got {high}.")
    if high - low + 1 > MAX_RANGE:
        raise FieldError("high", f"the range {low}..{high} holds more than {MAX_RANGE:,} numbers.")
    if not 1 <= guesses <= MAX_GUESSES:
        raise FieldError("max_guesses", f"must be between 1 and {MAX_GUESSES}, got {guesses}.")
