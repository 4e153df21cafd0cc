"""Rewards read a tool conversation's answer: its last assistant message, not the first turn or a tool result."""

from __future__ import annotations

import rewards
from rewards.base import completion_text


def conversation(first: str, result: str, final: str) -> list[dict]:
    """A completion as TRL hands a multi-turn rollout to the rewards: the assistant's turns and the tool results."""
    return [
        {
            "role": "assistant",
            "content": first,
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "5 + 7"}}}
            ],
        },
        {"role": "tool", "name": "calculator", "content": result},
        {"role": "assistant", "content": final},
    ]


def test_the_text_of_a_tool_conversation_is_its_last_assistant_message():
    assert completion_text(conversation("Maybe 13?", "12", "The answer is 12.")) == "The answer is 12."
    # The last assistant message is read even when the rollout ended on a tool result (out of turns or budget).
    assert completion_text(conversation("I guess 13.", "12", "")[:2]) == "I guess 13."
    assert completion_text(conversation("", "12", "")) == ""
    parts = [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "The answer "}, {"type": "text", "text": "is 3."}],
        }
    ]
    assert completion_text([{"role": "tool", "content": "3"}, *parts]) == "The answer is 3."
    # Without an assistant message at all, the first message, as before.
    assert completion_text([{"role": "tool", "content": "7"}, {"role": "tool", "content": "8"}]) == "7"


def test_numeric_accuracy_scores_the_final_answer_of_a_conversation():
    reward = rewards.get_reward("numeric_accuracy")
    completions = [
        conversation("I think 5 + 7 = 13, let me check.", "12", "The answer is 12."),  # right at the end
        conversation("5 + 7 = 12.", "12", "The answer is 13."),  # right at first, wrong at the end
        conversation("", "12", "I could not work it out."),  # the tool's result is not the model's answer
        conversation("The answer is 12.", "12", "")[:2],  # ended on the tool's result: the call turn is read
    ]
    assert reward(completions, solution=["12"] * 4) == [1.0, 0.0, 0.0, 1.0]
