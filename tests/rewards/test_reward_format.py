"""think_format, answer_format, tag_count: multi-line text, prefilled <think>, tags exactly once."""

from __future__ import annotations

import pytest

from rewards import get_reward

GOOD = "<think>\nFirst, 2 * 6 = 12.\nThen 2 + 12 = 14.\n</think>\n<answer>\n14\n</answer>"


@pytest.mark.parametrize(
    ("completion", "soft", "strict"),
    [
        (GOOD, 1.0, 1.0),  # multi-line: a regex without DOTALL would score 0 here
        ("  <think>a</think><answer>b</answer>\n", 1.0, 1.0),
        ("<think>a</think> So: <answer>b</answer>", 1.0, 0.0),  # text between the blocks
        ("<think>a</think><answer>b</answer> Done.", 1.0, 0.0),  # text after the answer
        ("Sure! <think>a</think><answer>b</answer>", 0.0, 0.0),  # text before <think>
        ("<think>a</think><answer> </answer>", 0.0, 0.0),  # empty answer
        ("<think></think><answer>b</answer>", 1.0, 1.0),  # empty reasoning is allowed
        ("<answer>b</answer><think>a</think>", 0.0, 0.0),  # wrong order
        ("<think>a<think>b</think><answer>c</answer>", 0.0, 0.0),  # a tag twice
        ("<think>a</think><answer>b</answer><answer>c</answer>", 0.0, 0.0),
        ("<think>a</think>", 0.0, 0.0),
        ("", 0.0, 0.0),
    ],
)
def test_think_format(completion, soft, strict):
    assert get_reward("think_format")([completion]) == [soft]
    assert get_reward("think_format", strict=True)([completion]) == [strict]


def test_think_prefilled_by_the_chat_template():
    completion = "The sum is 4.\n</think>\n<answer>4</answer>"
    reward = get_reward("think_format", strict=True)
    assert reward([completion]) == [0.0]
    assert reward([completion], prompts=["<|im_start|>assistant\n<think>\n"]) == [
        1.0
    ]  # detected from the prompt
    assert reward(
        [completion],
        prompts=[[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>"}]],
    ) == [1.0]
    assert get_reward("think_format", think_prefilled=True)([completion]) == [1.0]
    # Opening <think> again after the template opened it is a repeated tag.
    assert reward(["<think>" + completion], prompts=["...<think>"]) == [0.0]
    assert get_reward("tag_count")([completion]) == [0.75]
    assert get_reward("tag_count", think_prefilled=True)([completion]) == [1.0]


@pytest.mark.parametrize(
    ("completion", "soft", "strict"),
    [
        ("<answer>\n42\n</answer>", 1.0, 1.0),
        ("reasoning...\n<answer>42</answer>\n", 1.0, 1.0),
        ("<answer>42</answer> (final)", 1.0, 0.0),
        ("<answer>1</answer><answer>2</answer>", 0.0, 0.0),
        ("<answer></answer>", 0.0, 0.0),
        ("</answer>42<answer>", 0.0, 0.0),
        ("<answer>42", 0.0, 0.0),
    ],
)
def test_answer_format(completion, soft, strict):
    assert get_reward("answer_format")([completion]) == [soft]
    assert get_reward("answer_format", strict=True)([completion]) == [strict]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (GOOD, 1.0),
        ("<think>a</think>", 0.5),
        ("<think>a</think><think>b</think><answer>c</answer>", 0.5),
        ("<answer>", 0.25),
        ("plain text", 0.0),
    ],
)
def test_tag_count(completion, expected):
    assert get_reward("tag_count")([completion]) == [expected]
