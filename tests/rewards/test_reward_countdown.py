"""countdown: TinyZero's scoring, a parser that is not eval, and its guards."""

from __future__ import annotations

import pytest

from rewards import get_reward
from rewards.countdown import EquationError, parse_equation

NUMBERS, TARGET = [44, 19, 35], 98


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>...</think><answer>44 + 19 + 35</answer>", 1.0),
        ("<answer>(44 + 19) + 35 = 98</answer>", 1.0),  # "= target" is ignored
        ("<answer>35 + 44 + 19</answer>", 1.0),
        ("<answer>44 × 2 + 10</answer>", 0.1),  # wrong numbers
        ("<answer>44 + 19 - 35</answer>", 0.1),  # misses the target
        ("<answer>44 + 19 + 35 + 35</answer>", 0.1),  # a number used twice
        ("<answer>44 + 54</answer>", 0.1),
        ("<answer>98</answer>", 0.1),
        ("<answer>44 / (19 - 19) + 35</answer>", 0.0),  # division by zero
        ("<answer>__import__('os').system('echo pwned')</answer>", 0.1),  # not arithmetic: never evaluated
        ("<answer>44 ** 19 + 35</answer>", 0.1),  # no exponent operator
        ("<answer> </answer>", 0.0),
        ("44 + 19 + 35", 0.0),  # no answer block
        ("<answer>1 + 1</answer> then <answer>44 + 19 + 35</answer>", 1.0),  # the last block counts
    ],
)
def test_countdown_scores(completion, expected):
    assert get_reward("countdown")([completion], numbers=[NUMBERS], target=[TARGET]) == [expected]


def test_countdown_params_and_column_types():
    boxed = get_reward("countdown", answer_format="boxed", format_score=0.0)
    assert boxed(
        [r"\boxed{44 + 19 + 35}", r"\boxed{44 - 19 + 35}"], numbers=[NUMBERS] * 2, target=[98, 98]
    ) == [1.0, 0.0]
    reward = get_reward("countdown")
    assert reward(["<answer>44+19+35</answer>"], numbers=[("44", "19", "35")], target=["98"]) == [1.0]
    assert reward(["<answer>44+19+35</answer>"], numbers=[[44, 19.5, 35]], target=[98]) == [0.0]  # bad column
    assert reward(["<answer>8 / 3 * 3</answer>"], numbers=[[8, 3, 3]], target=[8]) == [1.0]  # exact fractions


@pytest.mark.parametrize(
    "text",
    [
        "(" * 200 + "1" + ")" * 200,  # too deep
        "-" * 500 + "1",
        "1" * 20,  # a number too long
        "1 +" * 200 + " 1",  # too long
        "1 + ",
        "(1 + 2",
        "1 2",
        "a + 1",
    ],
)
def test_parser_refuses_abuse(text):
    with pytest.raises(EquationError):
        parse_equation(text)
