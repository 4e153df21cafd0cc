"""What GRPO trains on: training rows with params of their own, warm-up rows generated apart, and the recipe
check's warnings when the warm-up shows GRPO's rows or the run would draw more problems than there are."""

from __future__ import annotations

import pytest
from support import REPO, run_script

from grpo_recipes.data import generated_rows, load_splits
from grpo_recipes.recipe import RecipeError, load_recipe
from grpo_recipes.training.train import pool_warnings, trainer_config

DEFAULT = REPO / "recipes" / "default.yaml"
# The default recipe as it was: a warm-up on the training rows, GRPO on the 163 rows of operands 2-12 not held out.
WARM_UP_ON_TRAINING_ROWS = [
    "dataset.generator.warmup_size=0",
    "dataset.generator.warmup_params={}",
    "dataset.generator.train_params={}",
    "dataset.generator.train_size=163",
]


def warnings_for(*overrides: str) -> list[str]:
    recipe = load_recipe(DEFAULT, list(overrides))
    return pool_warnings(recipe, trainer_config(recipe, checking=True))


def test_the_held_out_rows_stay_the_task_s_whatever_the_training_params():
    plain = load_recipe(DEFAULT, WARM_UP_ON_TRAINING_ROWS).dataset
    wide = load_recipe(
        DEFAULT,
        [
            "dataset.generator.train_params={min_operand: 0, max_operand: 30}",
            "dataset.generator.train_size=900",
        ],
    ).dataset
    _, plain_held_out = generated_rows(plain)
    train, held_out = generated_rows(wide)
    assert held_out == plain_held_out  # the same 200 problems measure every run
    questions = {row["question"] for row in held_out}
    assert len(train) == 900 and not questions & {row["question"] for row in train}
    operands = [int(x) for row in train for x in row["question"].split(" ")[::2]]
    assert min(operands) == 0 and max(operands) == 30  # the training params, not the task's 2-12


def test_warm_up_rows_are_apart_from_training_and_held_out_rows():
    recipe = load_recipe(DEFAULT)
    gen = recipe.dataset.generator
    splits = load_splits(recipe)
    warm = {row["question"] for row in splits.warmup}
    assert len(warm) == gen.warmup_size > 0
    assert not warm & set(splits.train["question"]) and not warm & set(splits.eval["question"])
    assert f"{gen.warmup_size} rows apart for the warm-up's demonstrations" in splits.describe()
    # warmup_params: the shipped recipe shows differences (the minus sign), some of them below zero.
    assert all(" - " in question for question in warm)
    assert any(answer.startswith("-") for answer in splits.warmup["answer"])
    assert load_splits(load_recipe(DEFAULT, WARM_UP_ON_TRAINING_ROWS)).warmup is None


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (
            ["dataset.generator.train_params={max_operand: twelve}"],
            "dataset.generator.train_params",
            "max_operand",
        ),
        (["dataset.generator.train_params={operands: 3}"], "dataset.generator.train_params", "operands"),
        (
            ["dataset.generator.warmup_params={operators: '/'}"],
            "dataset.generator.warmup_params",
            "operators",
        ),
        (["dataset.generator.warmup_size=-1"], "dataset.generator.warmup_size", "0 or more"),
        (
            [*WARM_UP_ON_TRAINING_ROWS, "dataset.generator.warmup_size=10"],
            "dataset.generator",
            "train_size 163 + eval_size 200 + warmup_size 10 exceed the 363 distinct problems",
        ),
        (
            [
                "dataset.generator.train_params={min_operand: 0, max_operand: 20}",
                "dataset.generator.train_size=5000",
            ],
            "dataset.generator.train_size",
            "train_size 5000 exceeds the 1323 distinct problems train_params allow",
        ),
    ],
)
def test_bad_training_params_name_their_key(overrides, key, message):
    with pytest.raises(RecipeError) as caught:
        load_recipe(DEFAULT, overrides)
    assert caught.value.key.startswith(key) and message in str(caught.value), str(caught.value)


def test_too_many_warm_up_rows_for_their_params_is_a_recipe_error():
    # 121 differences of 2-12, about 67 of them held out: 100 cannot be generated apart.
    with pytest.raises(RecipeError) as caught:
        load_splits(load_recipe(DEFAULT, ["dataset.generator.warmup_size=100"]))
    assert caught.value.key == "dataset.generator.warmup_size" and "100 distinct problems" in str(
        caught.value
    )


def test_a_warm_up_on_grpo_s_own_rows_is_warned_about_in_one_line():
    (warning,) = warnings_for(*WARM_UP_ON_TRAINING_ROWS, "trainer.max_steps=50")
    assert warning.startswith("the warm-up's demonstrations are GRPO's own training rows")
    assert "dataset.generator.warmup_size" in warning and "\n" not in warning
    assert warnings_for() == []  # the shipped recipe: rows apart, a pool larger than the run draws
    assert warnings_for("warmup=null", *WARM_UP_ON_TRAINING_ROWS, "trainer.max_steps=50") == []


def test_a_problem_space_smaller_than_the_run_draws_is_warned_about():
    # 163 problems of operands 2-12 outside the held-out ones; 100 steps x 2 prompts draw 200.
    (warning,) = warnings_for("warmup=null", *WARM_UP_ON_TRAINING_ROWS, "trainer.max_steps=100")
    assert warning.startswith("the generator's training problems number 163 ")
    assert "fewer than the 200 prompts the run draws (100 steps x 2 prompts)" in warning
    assert warnings_for("warmup=null", *WARM_UP_ON_TRAINING_ROWS, "trainer.max_steps=80") == []


def test_make_check_prints_the_warning():
    result = run_script("train.py", "--config", str(DEFAULT), "--check", *WARM_UP_ON_TRAINING_ROWS)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "warning: the warm-up's demonstrations are GRPO's own training rows" in result.stdout
    assert result.stdout.count("warning:") == 1  # 163 problems outnumber the 60 prompts 30 steps draw
