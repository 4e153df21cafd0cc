"""soft_overlong, cosine_length and repetition_penalty."""

from __future__ import annotations

import math

import pytest

from rewards import get_reward


def test_soft_overlong_follows_dapo():
    reward = get_reward("soft_overlong", max_completion_length=100, cache_length=20)
    ids = [[0] * n for n in (10, 80, 81, 90, 100, 101, 500)]
    assert reward(["x"] * len(ids), completion_ids=ids) == pytest.approx(
        [0.0, 0.0, -0.05, -0.5, -1.0, -1.0, -1.0]
    )
    # Without token ids the length is estimated at 4 characters per token.
    assert reward(["x" * 360, "x" * 400]) == pytest.approx([-0.5, -1.0])
    assert get_reward("soft_overlong", max_completion_length=100, cache_length=20, chars_per_token=1)(
        ["x" * 90]
    ) == [-0.5]
    default = get_reward("soft_overlong", max_completion_length=100)  # a ramp of a fifth of the maximum
    assert default.cache_length == 20 and default(["x"], completion_ids=[[0] * 90]) == [-0.5]


def test_cosine_length_rewards_short_correct_and_long_wrong():
    reward = get_reward("cosine_length", max_length=100, accuracy="numeric_accuracy")
    ids = [[0] * n for n in (0, 50, 100, 400)]
    correct = reward(["14"] * 4, solution=["14"] * 4, completion_ids=ids)
    wrong = reward(["15"] * 4, solution=["14"] * 4, completion_ids=ids)
    assert correct == pytest.approx([1.0, 0.75, 0.5, 0.5])  # clamped beyond max_length
    assert wrong == pytest.approx([-1.0, -0.75, -0.5, -0.5])
    assert reward(["14"], solution=["#### not a number"], completion_ids=[[0]]) == [None]


def test_cosine_length_uses_math_accuracy_with_its_params():
    reward = get_reward("cosine_length", max_length=10, accuracy_params={"answer_format": "answer_tag"})
    scores = reward(
        ["<answer>\\frac12</answer>", "\\boxed{0.5}"], solution=["0.5", "0.5"], completion_ids=[[0] * 5] * 2
    )
    assert scores == pytest.approx([0.75, -0.75])
    custom = get_reward("cosine_length", max_length=10, min_value_correct=0.0, max_value_correct=2.0)
    assert custom(["\\boxed{1}"], solution=["1"], completion_ids=[[]]) == [2.0]


def test_repetition_penalty():
    reward = get_reward("repetition_penalty", ngram_size=2, max_penalty=-1.0)
    assert reward(["the cat sat on the mat", "go go go go go", "short", ""]) == pytest.approx(
        [0.0, -0.75, 0.0, 0.0]
    )
    loop = " ".join(["and then"] * 500)
    assert -1.0 <= reward([loop])[0] < -0.99
    tokens = get_reward("repetition_penalty", ngram_size=2, unit="tokens")
    assert tokens(["ignored"], completion_ids=[[5, 5, 5, 5, 5]]) == [-0.75]
    assert tokens(["a b a b"]) == pytest.approx([-1 / 3])  # falls back to words without ids
    assert all(math.isfinite(s) for s in reward(["x " * 100_000]))
