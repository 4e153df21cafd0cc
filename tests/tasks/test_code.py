"""The code generator: every reference solution passes its own tests, splits apart, params checked."""

from __future__ import annotations

import pytest

from grpo_recipes.tasks import GENERATORS
from grpo_recipes.tasks.code import FAMILIES, FAMILY_NAMES, code_functions, code_functions_capacity
from rewards.typecheck import FieldError


def run_reference(row: dict) -> list[bool]:
    """Each test's verdict on the row's own reference solution (our code, run here without a sandbox)."""
    verdicts = []
    for test in row["tests"]:
        namespace: dict = {}
        exec(row["solution"], namespace)
        try:
            exec(test, namespace)
            verdicts.append(True)
        except AssertionError:
            verdicts.append(False)
    return verdicts


def test_every_problem_reference_passes_its_tests_and_a_wrong_body_fails_some():
    rows = code_functions(code_functions_capacity("all"), seed=0)
    assert len({row["question"] for row in rows}) == len(rows) == 164
    for row in rows:
        assert len(row["tests"]) == 4 and all(run_reference(row)), row["question"]
        assert row["solution"].startswith(f"def {row['entry_point']}(")
    # The tests tell problems apart: every other problem's solution of the same family fails one of them.
    by_family: dict[str, list[dict]] = {}
    for row in rows:
        by_family.setdefault(row["entry_point"], []).append(row)
    for group in by_family.values():
        for row in group:
            for other in group:
                if other is not row:
                    assert not all(run_reference({**row, "solution": other["solution"]})), (row, other)


def test_seeded_distinct_and_held_out():
    generator = GENERATORS["code_functions"]
    train, held_out = generator.splits(100, 50, seed=0)
    assert len(train) == 100 and len(held_out) == 50
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}
    assert generator.splits(100, 50, seed=0) == (train, held_out)
    assert generator.capacity() == 164 and generator.capacity(families="power") == 4


def test_families_select_and_too_many_is_an_error():
    rows = code_functions(4, seed=1, families="power")
    assert {row["entry_point"] for row in rows} == {"power"}
    with pytest.raises(ValueError, match="allow only 4"):
        code_functions(5, seed=1, families="power")


def test_params_are_checked_before_anything_runs():
    generator = GENERATORS["code_functions"]
    with pytest.raises(FieldError, match="unknown family 'sort'"):
        generator.check_params({"families": "scale,sort"})
    with pytest.raises(FieldError, match="tests_per_problem: must be between 1 and 20"):
        generator.check_params({"tests_per_problem": 0})
    with pytest.raises(FieldError, match="expected an integer"):
        generator.check_params({"tests_per_problem": "four"})
    assert len(FAMILY_NAMES) == len(FAMILIES) == len(set(FAMILY_NAMES))
