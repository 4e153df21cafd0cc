import signal
from contextlib import contextmanager

import pytest

from grpo_recipes.tasks import GENERATORS, calculator
from grpo_recipes.tasks.arithmetic import arithmetic_capacity
from grpo_recipes.tasks.calculator import (
    _expressions,
    calculator_arithmetic,
    in_words,
    phrasing_capacity,
)

# 10..19 with "+" and one operator: 100 problems, 3 of them asked in words at words_share 0.05.
SPACE = dict(min_ops=1, max_ops=1, min_operand=10, max_operand=19, operators="+")
TINY = SPACE | dict(words_share=0.05)


@contextmanager
def deadline(seconds: int):
    """Fail, rather than hang, if the body runs longer than `seconds` (a generator that draws forever)."""

    def expired(*_):
        raise TimeoutError(f"still drawing after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_phrasing_capacity_counts_each_phrasing():
    assert phrasing_capacity(phrasing="words", **TINY) == 3
    assert phrasing_capacity(phrasing="symbols", **TINY) == 97
    assert phrasing_capacity(phrasing="any", **TINY) == 100
    space = dict(min_ops=1, max_ops=2, min_operand=1, max_operand=9, operators="+-*")
    expressions = list(_expressions(**space))
    assert len(expressions) == len(set(expressions)) == arithmetic_capacity(**space)
    words = sum(in_words(e, 0.3) for e in expressions)
    assert phrasing_capacity(phrasing="words", words_share=0.3, **space) == words
    assert phrasing_capacity(phrasing="symbols", words_share=0.3, **space) == len(expressions) - words
    # Too many to count: no number rather than a long count.
    assert phrasing_capacity(phrasing="words", **(TINY | dict(max_ops=6))) is None


def test_too_few_problems_in_a_phrasing_is_an_error_not_a_hang():
    # Before the fix these drew forever once the 3 problems in words were used up.
    with deadline(20):
        with pytest.raises(
            ValueError,
            match=r"^calculator_arithmetic: asked for 20 distinct problems in words \(words_share 0\.05\), "
            r"but these settings allow only 3\.$",
        ):
            calculator_arithmetic(20, seed=0, phrasing="words", **TINY)
        # The recipe's splits: the train split names the train size the caller asked for, not a batch size.
        with pytest.raises(
            ValueError, match=r"asked for 20 distinct .* allow only 1 \(after 2 held out\)\.$"
        ):
            GENERATORS["calculator_arithmetic"].splits(20, 2, seed=0, phrasing="words", **TINY)
        with pytest.raises(
            ValueError, match=r"asked for 150 distinct problems in symbols .* \(after 100 held out"
        ):
            GENERATORS["calculator_arithmetic"].splits(
                150, 100, seed=0, min_ops=1, max_ops=1, min_operand=2, max_operand=12, phrasing="symbols"
            )
        # A share that rounds to no problem at all, in a space far too large to count.
        with pytest.raises(
            ValueError, match=r"in words \(words_share 0\.0004\), but these settings allow only 0\."
        ):
            calculator_arithmetic(5, seed=0, words_share=0.0004, phrasing="words")


def test_the_draw_stops_by_itself_when_the_space_is_too_large_to_count(monkeypatch):
    # Without the count up front, the loop must still see that the phrasing is used up.
    monkeypatch.setattr(calculator, "COUNT_LIMIT", 0)
    with deadline(20):
        with pytest.raises(ValueError, match=r"asked for 20 distinct problems in words .* allow only 3\.$"):
            calculator_arithmetic(20, seed=0, phrasing="words", **TINY)
        with pytest.raises(ValueError, match=r"asked for 20 .* allow only 1 \(after 2 held out\)\.$"):
            GENERATORS["calculator_arithmetic"].splits(20, 2, seed=0, phrasing="words", **TINY)


def test_every_problem_in_a_phrasing_can_be_asked_for():
    with deadline(20):
        rows = calculator_arithmetic(3, seed=0, phrasing="words", **TINY)
        assert sorted(r["expression"] for r in rows) == sorted(
            e for e in _expressions(**SPACE) if in_words(e, 0.05)
        )
        assert all(r["phrasing"] == "words" and r["question"] != r["expression"] for r in rows)
        # 345 of 363 problems are in symbols: once asked for 2 * 200 + 8 problems a batch, more than exist.
        small = dict(min_ops=1, max_ops=1, min_operand=2, max_operand=12, words_share=0.05)
        rows = calculator_arithmetic(200, seed=0, phrasing="symbols", **small)
        assert len({r["question"] for r in rows}) == 200
        assert all(r["phrasing"] == "symbols" and r["question"] == r["expression"] for r in rows)


def test_phrasing_rows_are_deterministic_distinct_and_held_out():
    gen = GENERATORS["calculator_arithmetic"]
    params = dict(min_ops=2, max_ops=3, min_operand=10, max_operand=999, words_share=0.5, phrasing="words")
    train, held_out = gen.splits(300, 50, seed=3, **params)
    assert (train, held_out) == gen.splits(300, 50, seed=3, **params)
    questions = [r["question"] for r in train]
    assert len(set(questions)) == len(questions) == 300
    assert not set(questions) & {r["question"] for r in held_out}
    assert all(r["phrasing"] == "words" for r in train + held_out)
