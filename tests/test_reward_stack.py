"""The reward stack: the recipe's rewards as TRL reward functions, weighted totals and group statistics."""

from __future__ import annotations

import pytest
from support import MINIMAL

from grpo_recipes.recipe import parse_recipe
from grpo_recipes.reward_stack import RewardStack, zero_variance_fraction


def test_zero_variance_groups_counts_equal_non_zero_rewards():
    # TRL's std-based count misses the second group (all 0.7): we count it.
    totals = [1.0, 0.0, 0.7, 0.7, 0.0, 0.0]
    prompts = ["a", "a", "b", "b", "c", "c"]
    assert zero_variance_fraction(totals, prompts) == pytest.approx(2 / 3)


def test_reward_stack_logs_the_weighted_total_per_group():
    recipe = parse_recipe(
        {**MINIMAL, "rewards": [{"name": "numeric_accuracy"}, {"name": "numeric_accuracy", "weight": 0.5}]},
        "x",
        check_trainer=False,
    )
    stack = RewardStack.for_recipe(recipe)
    logged = {}
    completions = ["Answer: 4", "Answer: 5", "Answer: 4", "Answer: 4"]
    kwargs = {"solution": ["4"] * 4, "prompts": ["p", "p", "q", "q"], "log_metric": logged.__setitem__}
    scores = [f(completions, **kwargs) for f in stack.functions]
    assert scores == [[1.0, 0.0, 1.0, 1.0]] * 2
    assert stack.totals() == [1.5, 0.0, 1.5, 1.5]
    assert logged == {"zero_variance_groups": 0.5}
    assert [f.__name__ for f in stack.functions] == ["numeric_accuracy", "numeric_accuracy"]
