"""The evaluation metrics against hand-computed cases: pass@k, maj@k, intervals, the paired comparison."""

from __future__ import annotations

import itertools
import math

import pytest

from grpo_recipes.evaluation.metrics import (
    compare,
    maj_at_k,
    majority_correct,
    paired_difference,
    pass_at_k,
    wilson_interval,
)


def test_wilson_interval_known_values_and_edges():
    low, high = wilson_interval(29, 100)
    assert low == pytest.approx(0.2100, abs=1e-3) and high == pytest.approx(0.3855, abs=1e-3)
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(0, 50)[1] > 0.05
    assert wilson_interval(50, 50)[1] == 1.0 and wilson_interval(50, 50)[0] < 0.95


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (8, 1, 8, 1.0),  # k = n: solved if any sample is right
        (8, 0, 8, 0.0),
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_is_the_share_of_k_subsets_with_a_correct_sample():
    for n in range(1, 7):
        for c in range(n + 1):
            verdicts = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(verdicts, k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="n=2, c=3"):
        pass_at_k(2, 3, 1)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


@pytest.mark.parametrize(
    ("votes", "correct", "expected"),
    [
        (["5", "5", "6"], [1, 1, 0], 1.0),  # the right answer wins
        (["5", "6", "6"], [1, 0, 0], 0.0),  # a wrong answer wins
        (["5", "6"], [1, 0], 0.5),  # a tie between a right and a wrong answer: a fair coin
        (["5", "6", "7", "5", "6", "7"], [1, 0, 0, 1, 0, 0], 1 / 3),  # a three-way tie, one right
        (["6", "7", "6", "7"], [0, 0, 0, 0], 0.0),  # a tie between two wrong answers
        ([None, None, "5"], [0, 0, 1], 1.0),  # no answer does not vote
        ([None, None], [0, 0], 0.0),  # nobody answered
    ],
)
def test_majority_vote_hand_computed(votes, correct, expected):
    assert majority_correct(votes, correct) == pytest.approx(expected)


def test_maj_at_k_blocks_and_k_equal_to_n():
    votes, correct = ["1", "2", "2", "2", "1", "1", "3", "1"], [1, 0, 0, 0, 1, 1, 0, 1]
    # k = n: "1" has 4 votes, "2" 3, "3" 1.
    assert maj_at_k(votes, correct, 8) == 1.0
    # k = 4: block 1 is 1,2,2,2 -> "2" wrong; block 2 is 1,1,3,1 -> right.
    assert maj_at_k(votes, correct, 4) == 0.5
    # k = 2: (1,2) tie 0.5; (2,2) 0; (1,1) 1; (3,1) tie 0.5 -> 2 / 4.
    assert maj_at_k(votes, correct, 2) == 0.5
    assert maj_at_k(votes, correct, 1) == sum(correct) / 8
    with pytest.raises(ValueError):
        maj_at_k(votes, correct, 9)


def test_paired_interval_hand_computed():
    new, old = [1, 1, 1, 0, 1, 0], [0, 1, 0, 0, 1, 1]
    # d = 1, 0, 1, 0, 0, -1: mean 1/6; sample variance (25+1+25+1+1+49)/36/5 = 102/180; half 1.96 sqrt(var/6)
    half = 1.96 * math.sqrt(102 / 180 / 6)
    result = paired_difference(new, old)
    assert result["difference"] == pytest.approx(1 / 6, abs=1e-4)
    assert result["low"] == pytest.approx(1 / 6 - half, abs=1e-4)
    assert result["high"] == pytest.approx(1 / 6 + half, abs=1e-4)
    # Same verdicts on every problem: no doubt about the difference, whatever the accuracies.
    assert paired_difference([1, 0, 1], [1, 0, 1]) == {"difference": 0.0, "low": 0.0, "high": 0.0}
    with pytest.raises(ValueError, match="same problems"):
        paired_difference([1, 0], [1])


def test_compare_pairs_the_same_problems_and_counts_who_solves_what():
    def records(verdicts):
        return [
            {"problem": p, "sample": 0, "gold": str(p), "correct": c, "vote": "x"}
            for p, c in enumerate(verdicts)
        ]

    base, model = records([1, 0, 0, 1]), records([1, 1, 1, 0])
    result = compare(base, model)
    row = next(r for r in result["metrics"] if r["metric"] == "pass@1")
    assert (row["base"], row["model"]) == (0.5, 0.75)
    assert row == {**row, **paired_difference([1, 1, 1, 0], [1, 0, 0, 1])}
    assert (result["solved_by_model_only"], result["solved_by_base_only"], result["solved_by_both"]) == (
        2,
        1,
        1,
    )
    with pytest.raises(ValueError, match="same problems"):
        compare(base, records([1, 1, 1]))
