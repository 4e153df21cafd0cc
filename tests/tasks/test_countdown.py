"""The countdown generator: every problem solvable, its reference equation right, splits apart, params checked."""

from __future__ import annotations

import ast
import copy
import importlib
import itertools
from collections import Counter
from fractions import Fraction

import pytest
from support import MINIMAL, REPO

from grpo_recipes.evaluation.audit import audit, format_report
from grpo_recipes.recipe import RecipeError, load_recipe, parse_recipe
from grpo_recipes.tasks import GENERATORS
from rewards import get_reward
from rewards.typecheck import FieldError

# The module; `grpo_recipes.tasks.countdown` as an attribute is the generator function the package exports.
countdown_task = importlib.import_module("grpo_recipes.tasks.countdown")

GENERATOR = GENERATORS["countdown"]


def walk(expression: str) -> tuple[Fraction, list[int], list[Fraction]]:
    """Value, numbers used and every intermediate result of an equation, read by Python's parser (no eval)."""
    steps: list[Fraction] = []
    used: list[int] = []
    operators = {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b,
    }

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp):
            result = operators[type(node.op)](value(node.left), value(node.right))
            steps.append(result)
            return result
        assert isinstance(node, ast.Constant) and type(node.value) is int, ast.dump(node)
        used.append(node.value)
        return Fraction(node.value)

    return value(ast.parse(expression, mode="eval").body), used, steps


def brute_force(numbers: list[int], target: int) -> str | None:
    """An equation reaching `target` from `numbers`, each once, with + - * / over exact fractions (what the
    reward accepts: negative and fractional steps too), or None: an exhaustive search, independent of the
    generator."""

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == target else None
        for i, j in itertools.combinations(range(len(items)), 2):
            (a, x), (b, y) = items[i], items[j]
            rest = [item for k, item in enumerate(items) if k not in (i, j)]
            options = [(a + b, f"({x} + {y})"), (a * b, f"({x} * {y})")]
            options += [(a - b, f"({x} - {y})"), (b - a, f"({y} - {x})")]
            options += [(a / b, f"({x} / {y})")] if b else []
            options += [(b / a, f"({y} / {x})")] if a else []
            for option in options:
                found = search([*rest, option])
                if found is not None:
                    return found
        return None

    return search([(Fraction(n), str(n)) for n in numbers])


def test_brute_force_finds_solutions_and_refuses_impossible_targets():
    reward = get_reward("countdown")
    found = brute_force([3, 3, 8, 8], 24)  # needs a fraction: 8 / (3 - 8 / 3)
    assert found is not None and walk(found)[0] == 24
    assert reward([f"<answer>{found}</answer>"], numbers=[[3, 3, 8, 8]], target=[24]) == [1.0]
    assert brute_force([1, 1, 1], 100) is None
    assert brute_force([2, 3, 5], 1000) is None


def test_thousands_of_problems_have_a_right_reference_equation():
    rows = GENERATOR.generate(3000, seed=11)
    reward = get_reward("countdown")
    scores = reward(
        [f"<answer>{row['solution']}</answer>" for row in rows],
        numbers=[row["numbers"] for row in rows],
        target=[row["target"] for row in rows],
    )
    assert scores == [1.0] * len(rows)
    for row in rows:
        value, used, steps = walk(row["solution"])
        assert value == row["target"], row
        assert Counter(used) == Counter(row["numbers"]), row  # each number once, no other
        assert all(step.denominator == 1 and step > 0 for step in steps), row  # exact, positive steps
        assert 3 <= len(row["numbers"]) <= 4 and all(1 <= n <= 99 for n in row["numbers"])
        assert 1 <= row["target"] <= 100
        assert row["question"] == (
            f"Using the numbers {row['numbers']}, create an equation that equals {row['target']}."
        )
    assert {len(row["numbers"]) for row in rows} == {3, 4}
    assert len({row["target"] for row in rows}) == 100  # every target in 1..100 occurs


def test_an_independent_search_solves_a_sample():
    rows = GENERATOR.generate(250, seed=5, min_count=4, max_count=4) + GENERATOR.generate(250, seed=6)
    reward = get_reward("countdown")
    for row in rows:
        found = brute_force(row["numbers"], row["target"])
        assert found is not None, row
        assert reward([f"<answer>{found}</answer>"], numbers=[row["numbers"]], target=[row["target"]]) == [
            1.0
        ]


def test_splits_share_no_problem_and_repeat_with_the_seed():
    train, held_out = GENERATOR.splits(3000, 500, seed=3)

    def keys(rows):
        return [(tuple(sorted(row["numbers"])), row["target"]) for row in rows]

    assert len(set(keys(train))) == 3000 and len(set(keys(held_out))) == 500  # distinct within each
    assert not set(keys(train)) & set(keys(held_out))  # the numbers in any order and the target
    assert GENERATOR.splits(3000, 500, seed=3) == (train, held_out)
    assert GENERATOR.splits(20, 5, seed=4)[0] != train[:20]


def test_a_held_out_problem_is_excluded_whatever_the_order_of_its_numbers():
    first = GENERATOR.generate(1, seed=0)[0]
    permuted = countdown_task.question_text(first["numbers"][::-1], first["target"])
    again = GENERATOR.generate(1, seed=0, exclude={permuted})[0]
    assert (sorted(again["numbers"]), again["target"]) != (sorted(first["numbers"]), first["target"])


def test_params_set_the_ranges():
    rows = GENERATOR.generate(
        300, seed=2, min_count=4, max_count=4, min_number=10, max_number=20, max_target=50
    )
    assert all(len(row["numbers"]) == 4 and all(10 <= n <= 20 for n in row["numbers"]) for row in rows)
    assert all(1 <= row["target"] <= 50 for row in rows)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_count": 7}, "max_count: must be at most 6, got 7."),
        ({"min_count": 1}, "min_count: must be at least 2, got 1."),
        ({"min_count": 4, "max_count": 3}, "min_count: must not exceed max_count (3), got 4."),
        ({"min_number": 0}, "min_number: must be at least 1, got 0."),
        ({"min_target": 50, "max_target": 10}, "min_target: must not exceed max_target (10), got 50."),
        ({"max_number": "many"}, "max_number: expected an integer, got 'many'."),
        ({"max_numbers": 9}, "Did you mean 'max_number'"),
    ],
)
def test_bad_params_are_one_line_naming_the_key(params, message):
    with pytest.raises(FieldError) as caught:
        GENERATOR.check_params(params)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    data = copy.deepcopy(MINIMAL)
    data["dataset"] = {"generator": {"name": "countdown", "params": params}}
    with pytest.raises(RecipeError) as caught:
        parse_recipe(data, "r.yaml", check_trainer=False)
    assert str(caught.value).startswith("r.yaml: dataset.generator.params") and message in str(caught.value)


def test_settings_too_narrow_for_the_size_asked_fail_clearly(monkeypatch):
    monkeypatch.setattr(countdown_task, "MAX_FRUITLESS_DRAWS", 2000)
    # Two 1s reach only 1 (1 * 1, 1 / 1) and 2 (1 + 1) through positive steps: two problems exist.
    narrow = {"min_count": 2, "max_count": 2, "min_number": 1, "max_number": 1}
    assert sorted(row["target"] for row in GENERATOR.generate(2, seed=0, **narrow)) == [1, 2]
    with pytest.raises(ValueError, match="found only 2 of 3 distinct problems"):
        GENERATOR.generate(3, seed=0, **narrow)
    # More than the upper bound is refused by the recipe check before any generation.
    data = copy.deepcopy(MINIMAL)
    data["dataset"] = {
        "generator": {"name": "countdown", "train_size": 90, "eval_size": 20, "params": narrow}
    }
    with pytest.raises(RecipeError, match="exceed the 100 distinct problems"):
        parse_recipe(data, "r.yaml", check_trainer=False)


def test_the_recipe_audit_gives_the_reference_full_marks_and_another_equation_only_the_format_score():
    recipe = load_recipe(REPO / "recipes" / "countdown.yaml", check_trainer=False)
    rows = GENERATOR.generate(1000, seed=9)
    report = audit(recipe, rows)
    assert (report.rows, report.ideal_full_marks, report.corrupted_zero) == (1000, 1000, 1000), format_report(
        report
    )
    assert report.wrong_score == 0.1 and report.failures == []
    assert "corrupted scoring <= 0.1 1000 (100.0 %)" in format_report(report)

    # Without a format score the corrupted completions score 0 outright.
    strict = load_recipe(
        REPO / "recipes" / "countdown.yaml", ["rewards.0.params.format_score=0"], check_trainer=False
    )
    report = audit(strict, rows[:50])
    assert report.wrong_score == 0.0 and report.corrupted_zero == 50

    # A reward that reads another answer format fails the audit: no ideal completion gets full marks.
    boxed = load_recipe(
        REPO / "recipes" / "countdown.yaml", ["rewards.0.params.answer_format=boxed"], check_trainer=False
    )
    report = audit(boxed, rows[:50])
    assert report.ideal_full_marks == 0 and len(report.failures) == 50
    assert report.failures[0].ideal == {"countdown": 0.0}


def test_a_format_score_of_one_cannot_pass_a_corrupted_completion():
    recipe = load_recipe(
        REPO / "recipes" / "countdown.yaml", ["rewards.0.params.format_score=1.0"], check_trainer=False
    )
    report = audit(recipe, GENERATOR.generate(20, seed=1))
    assert report.ideal_full_marks == 20 and report.corrupted_zero == 0
