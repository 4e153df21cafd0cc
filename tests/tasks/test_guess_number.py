"""The guess_number generator: games for the guess_number environment, told apart by their secrets."""

from __future__ import annotations

import pytest
from support import MINIMAL

from grpo_recipes.agents.environments import GuessNumber
from grpo_recipes.recipe import RecipeError, parse_recipe
from grpo_recipes.tasks import GENERATORS
from grpo_recipes.tasks.guess_number import guess_number
from rewards.typecheck import FieldError

GEN = GENERATORS["guess_number"]


def test_rows_are_the_instructions_and_a_secret_in_range():
    rows = guess_number(30, seed=0, low=11, high=60, max_guesses=6)
    assert all(sorted(row) == sorted(GEN.columns) == ["question", "secret"] for row in rows)
    assert {row["question"] for row in rows} == {rows[0]["question"]}  # one game, many secrets
    question = rows[0]["question"]
    assert "from 11 to 60" in question and "6 guesses" in question and "guess tool" in question
    assert all(isinstance(row["secret"], int) and 11 <= row["secret"] <= 60 for row in rows)


def test_splits_have_distinct_secrets_none_shared_and_are_reproducible():
    train, held_out = GEN.splits(80, 20, seed=3, low=1, high=100, max_guesses=7)
    assert GEN.splits(80, 20, seed=3, low=1, high=100, max_guesses=7) == (train, held_out)
    train_secrets, held_secrets = [r["secret"] for r in train], [r["secret"] for r in held_out]
    assert len(set(train_secrets)) == 80 and len(set(held_secrets)) == 20
    assert set(train_secrets) | set(held_secrets) == set(range(1, 101))  # the whole range, each once
    assert GEN.splits(80, 20, seed=4, low=1, high=100, max_guesses=7)[0] != train


def test_capacity_is_the_range_size_and_bounds_the_splits():
    assert GEN.capacity(low=1, high=100) == 100 and GEN.capacity() == 100
    assert GEN.capacity(low=-5, high=5) == 11
    with pytest.raises(ValueError, match="holds only 1 .after 10 held out"):
        GEN.splits(2, 10, seed=0, low=-5, high=5)
    data = {**MINIMAL, "dataset": {"generator": {"name": "guess_number", "train_size": 81, "eval_size": 20}}}
    data["prompt"] = {"user": "{question}", "solution_column": "secret"}
    with pytest.raises(RecipeError, match="train_size 81 \\+ eval_size 20 exceed the 100 distinct problems"):
        parse_recipe(data, "r.yaml", check_trainer=False)


@pytest.mark.parametrize(
    "params, key, problem",
    [
        ({"low": 5, "high": 5}, "high", "must be above low (5), got 5"),
        ({"low": 0, "high": 1_000_000}, "high", "holds more than 1,000,000 numbers"),
        ({"max_guesses": 0}, "max_guesses", "between 1 and 100, got 0"),
        ({"high": "ten"}, "high", "expected an integer"),
    ],
)
def test_params_are_checked(params, key, problem):
    with pytest.raises(FieldError) as info:
        GEN.check_params(params)
    assert info.value.key == key and problem in info.value.problem


def test_every_generated_game_is_won_by_a_binary_search_within_the_guesses_allowed():
    """The generator's params are the environment's: a game reset with a row is winnable as the question says."""
    params = {"low": 1, "high": 100, "max_guesses": 7}
    train, held_out = GEN.splits(80, 20, seed=0, **params)
    for row in train + held_out:
        game = GuessNumber(**params)
        game.reset(**row)
        low, high = params["low"], params["high"]
        for _ in range(params["max_guesses"]):
            middle = (low + high) // 2
            answer = game.guess(middle)
            if answer.startswith("correct"):
                break
            low, high = (middle + 1, high) if answer == "higher" else (low, middle - 1)
        assert game.get_reward() == 1.0, row
