"""The conversations of a supervised warm-up: a row's prompt, the tool calls a recipe prescribes (made for real),
their results, and the answer.

A small model rarely calls a tool on its own (SmolLM2-135M-Instruct: 0 calls in 32 tries zero-shot), so GRPO
has nothing to reinforce. A few steps of supervised training on such conversations teach the call format;
GRPO then improves on it. Argument values and the answer are templates filled from the row. With no calls, a
demonstration is the answer alone: it shows a format (a minus sign, where the answer goes) that the model does
not sample on its own.

Example:
    >>> from grpo_recipes.agents import get_tool
    >>> row = {"prompt": [{"role": "user", "content": "What is 12 * 34?"}], "question": "12 * 34", "answer": "408"}
    >>> demo = demonstration(row, [("calculator", {"expression": "{question}"})], "The answer is {answer}.",
    ...                      {"calculator": get_tool("calculator")})
    >>> [m["role"] for m in demo["completion"]], demo["completion"][1]["content"], demo["completion"][2]["content"]
    (['assistant', 'tool', 'assistant'], '408', 'The answer is 408.')
    >>> demonstration({**row, "question": "3 - 9", "answer": "-6"}, [], "{question} = {answer}", {})["completion"]
    [{'role': 'assistant', 'content': '3 - 9 = -6'}]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


def demonstration(
    row: Mapping[str, Any],
    calls: Sequence[tuple[str, Mapping[str, str]]],
    answer: str,
    tools: Mapping[str, Callable[..., Any]],
) -> dict[str, Any]:
    """``{"prompt": [...], "completion": [...]}`` for one row (TRL's conversational prompt-completion format)."""
    values = {key: value for key, value in row.items() if key != "prompt"}
    tool_calls, results = [], []
    for name, arguments in calls:
        filled = {key: template.format(**values) for key, template in arguments.items()}
        tool_calls.append({"type": "function", "function": {"name": name, "arguments": filled}})
        results.append({"role": "tool", "name": name, "content": tools[name](**filled)})
    completion = [{"role": "assistant", "content": "", "tool_calls": tool_calls}, *results] if calls else []
    completion.append({"role": "assistant", "content": answer.format(**values)})
    return {"prompt": list(row["prompt"]), "completion": completion}
