"""gsm8k_accuracy and numeric_accuracy: where they look for the answer and how they compare numbers."""

from __future__ import annotations

import pytest

from rewards import get_reward

GOLD = "Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"She makes $18. The answer is $\boxed{18}$.", 1.0),
        ("... so she makes 18 dollars.\n#### 18", 1.0),
        ("The answer is $18.", 1.0),
        ("The final answer is: 18.00", 1.0),
        ("<answer>18</answer>", 1.0),
        (r"\boxed{\$18}", 1.0),
        (r"\boxed{18 \text{ dollars}}", 1.0),
        (r"The answer is 17. \boxed{18}", 1.0),  # a box beats "the answer is"
        ("She makes 9 * 2 = 18", 0.0),  # no explicit answer, and no last-number fallback by default
        (r"\boxed{17}", 0.0),
        (r"\boxed{18} or \boxed{19}", 0.0),  # hedging
        ("#### 180", 0.0),
        ("", 0.0),
    ],
)
def test_gsm8k_accuracy(completion, expected):
    assert get_reward("gsm8k_accuracy")([completion], solution=[GOLD]) == [expected]


def test_gsm8k_last_number_fallback_and_gold_forms():
    reward = get_reward("gsm8k_accuracy", last_number_fallback=True)
    assert reward(["She makes 9 * 2 = 18"], solution=[GOLD]) == [1.0]
    plain = get_reward("gsm8k_accuracy")
    golds = ["#### 1,234", "1234", " 1234.0 ", "#### twelve", ""]
    assert plain([r"\boxed{1234}"] * 5, solution=golds) == [1.0, 1.0, 1.0, None, None]


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("2 + 2 × 6 = 2 + 12 = 14", "14", 1.0),
        ("Calculate 2 + 2 × 6. First 2 × 6 = 12, then 2 + 12 = 14.", "14", 1.0),
        (r"\boxed{14}", "14", 1.0),
        (r"\boxed{14.0}", "14", 1.0),
        ("Answer: 14", "14", 1.0),
        ("The answer is 14.", "14", 1.0),
        ("the answer is -3", "-3", 1.0),
        ("5 - 8 = -3", "-3", 1.0),
        ("The answer is 1,000.", "1000", 1.0),
        ("The answer is 1000", "1,000", 1.0),
        (r"\boxed{\frac{7}{2}}", "3.5", 1.0),
        ("Answer: 13. Since 2 + 12 = 14", "14", 0.0),  # the explicit answer wins over the last number
        ("14 is wrong, it is 15", "14", 0.0),
        ("no idea", "14", 0.0),
        ("14", "14.5", 0.0),
        ("", "14", 0.0),
    ],
)
def test_numeric_accuracy(completion, gold, expected):
    assert get_reward("numeric_accuracy")([completion], solution=[gold]) == [expected]


def test_numeric_accuracy_without_last_number_fallback():
    reward = get_reward("numeric_accuracy", last_number_fallback=False)
    assert reward(["2 + 12 = 14", r"\boxed{14}"], solution=["14", "14"]) == [0.0, 1.0]


def test_numeric_rewards_take_conversational_completions_and_int_golds():
    completions = [[{"role": "assistant", "content": "Answer: 7"}], [{"role": "assistant", "content": None}]]
    assert get_reward("numeric_accuracy")(completions, solution=[7, 7]) == [1.0, 0.0]
