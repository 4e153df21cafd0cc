"""Evaluation statistics, group statistics of the reward stack, and greedy evaluation on a real tiny model."""

from __future__ import annotations

import copy

import pytest
from support import MINIMAL

from grpo_recipes.evaluate import greedy_accuracy, wilson_interval
from grpo_recipes.recipe import parse_recipe
from grpo_recipes.report import before_after_table, plot_reward_curve, reward_series
from grpo_recipes.reward_stack import RewardStack, zero_variance_fraction


def test_wilson_interval_known_values_and_edges():
    low, high = wilson_interval(29, 100)
    assert low == pytest.approx(0.2100, abs=1e-3) and high == pytest.approx(0.3855, abs=1e-3)
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(0, 50)[1] > 0.05
    assert wilson_interval(50, 50)[1] == 1.0 and wilson_interval(50, 50)[0] < 0.95


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


def test_report_table_and_curve(tmp_path):
    before = {"accuracy": 0.25, "ci_low": 0.2, "ci_high": 0.3, "correct": 50, "total": 200}
    after = {"accuracy": 0.40, "ci_low": 0.33, "ci_high": 0.47, "correct": 80, "total": 200}
    table = before_after_table(before, after)
    assert "25.0 % [20.0, 30.0] (50/200)" in table and "+15.0 points" in table
    history = [{"step": i, "reward": i / 10, "zero_variance_groups": 0.5} for i in range(1, 8)] + [
        {"step": 7}
    ]
    assert reward_series(history) == (list(range(1, 8)), [i / 10 for i in range(1, 8)])
    assert plot_reward_curve(history, tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert plot_reward_curve([], tmp_path / "none.png") is None


def test_greedy_accuracy_scores_generations_with_the_recipe_reward(tiny_model):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = copy.deepcopy(MINIMAL)
    data["model"]["name_or_path"] = str(tiny_model)
    data["evaluation"] = {"max_new_tokens": 4, "batch_size": 3}
    recipe = parse_recipe(data, "x", check_trainer=False)
    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(tiny_model),
        AutoTokenizer.from_pretrained(tiny_model),
    )
    rows = [{"prompt": [{"role": "user", "content": f"{i} + 0"}], "solution": str(i)} for i in range(5)]
    side_before = tokenizer.padding_side
    lines = []
    result = greedy_accuracy(model, tokenizer, datasets.Dataset.from_list(rows), recipe, log=lines.append)
    assert result.total == 5 and 0 <= result.correct <= 5
    assert lines == [f"  evaluated 5 problems (5 on this process): {result.correct} correct"]
    assert len(result.examples) == 5 and all(isinstance(e["completion"], str) for e in result.examples)
    assert [
        e["correct"] for e in result.examples
    ] == result.correct_by_problem  # one verdict per problem, in order
    assert sum(result.correct_by_problem) == result.correct
    assert tokenizer.padding_side == side_before  # restored after left-padded generation
