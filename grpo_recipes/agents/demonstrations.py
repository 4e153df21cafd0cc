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

import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: Annotations a template's text is converted to (a model writes these as JSON numbers and booleans).
_CONVERTERS: dict[Any, Callable[[str], Any]] = {
    int: int,
    float: float,
    bool: lambda text: {"true": True, "false": False}[text.strip().lower()],
}


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
        filled = typed_arguments(
            tools[name], {key: template.format(**values) for key, template in arguments.items()}
        )
        tool_calls.append({"type": "function", "function": {"name": name, "arguments": filled}})
        results.append({"role": "tool", "name": name, "content": tools[name](**filled)})
    completion = [{"role": "assistant", "content": "", "tool_calls": tool_calls}, *results] if calls else []
    completion.append({"role": "assistant", "content": answer.format(**values)})
    return {"prompt": list(row["prompt"]), "completion": completion}


def typed_arguments(tool: Callable[..., Any], arguments: Mapping[str, str]) -> dict[str, Any]:
    """A demonstration's arguments (text filled from templates) as the tool's annotated types: what a model
    writes in a JSON tool call, and what the tool is then called with. Raises ValueError naming the argument.

    >>> def convert(value: float, unit: str) -> str: ...
    >>> typed_arguments(convert, {"value": "3.5", "unit": "kg"})
    {'value': 3.5, 'unit': 'kg'}
    """
    function = inspect.unwrap(tool)
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: leave the text as it is
        hints = {}
    typed = {}
    for key, text in arguments.items():
        annotation = hints.get(key, str)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # Optional[int], int | None
            annotation = next((a for a in typing.get_args(annotation) if a in _CONVERTERS), str)
        convert = _CONVERTERS.get(annotation)
        try:
            typed[key] = convert(text) if convert is not None else text
        except (ValueError, KeyError):
            raise ValueError(
                f"argument {key}={text!r} of {getattr(function, '__name__', 'the tool')} is not a {annotation.__name__}"
            ) from None
    return typed
