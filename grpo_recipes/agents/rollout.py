"""The multi-turn loop of evaluation: generate, run the tool calls, append their results, generate again.

Training's loop is TRL's (``GRPOTrainer._tool_call_loop``); this one follows it for the held-out evaluation and
``make eval``, so both see the same conversations: the prompt rendered with the tools' schemas, tool calls
parsed by TRL's ``parse_response``, every call made through the same guarded tools, at most
``max_iterations`` rounds of calls, and the completion (assistant and tool tokens together) bounded by
``max_tokens``, as ``max_completion_length`` bounds it in training.

``generate`` is any function from a batch of prompt token ids to completion token ids (the end-of-turn token
included when the model stopped), so this module needs no model and is tested with a scripted one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .environments import tool_methods

Generate = Callable[[list[list[int]], int], list[list[int]]]


@dataclass
class Rollout:
    """One conversation after the prompt: assistant turns and tool results, with counts."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    """Completion tokens, tool results included (what max_completion_length bounds in training)."""
    truncated: bool = False
    """The token budget ran out before the model ended its last turn."""
    tool_calls: int = 0
    tool_failures: int = 0
    """Calls whose result was an error (an exception, a timeout, bad arguments, an unknown tool)."""
    environment: Any = None

    @property
    def final_text(self) -> str:
        """The last assistant message's text: the answer the rewards read."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                return message.get("content") or ""
        return ""


def transcript(messages: Sequence[dict[str, Any]]) -> str:
    """A conversation as readable text, one block per message, tool calls shown as calls.

    >>> print(transcript([{"role": "assistant", "content": "", "tool_calls": [{"type": "function",
    ...     "function": {"name": "calculator", "arguments": {"expression": "2+2"}}}]},
    ...     {"role": "tool", "name": "calculator", "content": "4"}, {"role": "assistant", "content": "4"}]))
    [call] calculator(expression='2+2')
    [calculator] 4
    4
    """
    lines = []
    for message in messages:
        if message.get("role") == "tool":
            lines.append(f"[{message.get('name', 'tool')}] {message.get('content', '')}")
            continue
        if message.get("content"):
            lines.append(str(message["content"]))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            arguments = function.get("arguments", {})
            shown = (
                ", ".join(f"{k}={v!r}" for k, v in arguments.items())
                if isinstance(arguments, dict)
                else repr(arguments)
            )
            lines.append(f"[call] {function.get('name', '?')}({shown})")
    return "\n".join(lines)


def _call(tools: dict[str, Callable[..., Any]], call: dict[str, Any]) -> tuple[str, str, bool]:
    """(tool name, result text, failed) for one parsed call; never raises."""
    function = call.get("function") or {}
    name = str(function.get("name", "unknown"))
    if call.get("type", "function") != "function":
        return name, f"Error: unsupported tool call type {call.get('type')!r}", True
    if name not in tools:
        return name, f"Error: there is no tool named {name!r} (tools: {', '.join(tools)})", True
    arguments = function.get("arguments")
    if not isinstance(arguments, dict):
        return name, "Error: the arguments must be a JSON object", True
    result = tools[name](**arguments)  # guarded: returns text, never raises
    text = result if isinstance(result, str) else str(result)
    return name, text, text.startswith("Error:")


def run_rollouts(
    prompts: Sequence[list[dict[str, Any]]],
    rows: Sequence[dict[str, Any]],
    tokenizer,
    generate: Generate,
    *,
    tools: Sequence[Callable[..., Any]] = (),
    environment_factory: Callable[[], Any] | None = None,
    max_iterations: int = 4,
    max_tokens: int = 256,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[Rollout]:
    """One rollout per prompt (a conversation; `rows[i]` resets its environment), batched turn by turn."""
    from trl.chat_template_utils import parse_response

    template_kwargs = chat_template_kwargs or {}
    rollouts = [Rollout() for _ in prompts]
    conversations: list[list[dict[str, Any]]] = []
    toolsets: list[dict[str, Callable[..., Any]]] = []
    for i, prompt in enumerate(prompts):
        prompt = copy.deepcopy(list(prompt))
        available = {tool.__name__: tool for tool in tools}
        if environment_factory is not None:
            environment = environment_factory()
            observation = environment.reset(**rows[i])
            if isinstance(observation, str):
                prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
            rollouts[i].environment = environment
            available |= {name: getattr(environment, name) for name in tool_methods(type(environment))}
        conversations.append(prompt)
        toolsets.append(available)

    def render(i: int) -> list[int]:
        text = tokenizer.apply_chat_template(
            conversations[i],
            tools=list(toolsets[i].values()) or None,
            tokenize=False,
            add_generation_prompt=True,
            **template_kwargs,
        )
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt_lengths = [len(render(i)) for i in range(len(prompts))]
    active = list(range(len(prompts)))
    for turn in range(max_iterations + 1):
        if not active:
            break
        contexts = [render(i) for i in active]
        used = [len(ids) - prompt_lengths[i] for i, ids in zip(active, contexts, strict=True)]
        budgets = [max_tokens - u for u in used]
        fits = [b > 0 for b in budgets]
        for i, ok in zip(active, fits, strict=True):
            if not ok:
                rollouts[i].truncated = True
        active = [i for i, ok in zip(active, fits, strict=True) if ok]
        contexts = [c for c, ok in zip(contexts, fits, strict=True) if ok]
        budgets = [b for b, ok in zip(budgets, fits, strict=True) if ok]
        if not active:
            break
        outputs = generate(contexts, max(budgets))
        still = []
        for i, context, ids, budget in zip(active, contexts, outputs, budgets, strict=True):
            ids = list(ids)[:budget]
            message = parse_response(tokenizer, ids, prefix=context, tools=list(toolsets[i].values()) or None)
            message = {
                "role": "assistant",
                "content": message.get("content") or "",
                **({"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {}),
            }
            rollout = rollouts[i]
            rollout.messages.append(message)
            conversations[i].append(message)
            rollout.tokens = len(context) - prompt_lengths[i] + len(ids)
            ended = bool(ids) and ids[-1] in _end_ids(tokenizer)
            if not ended and len(ids) >= budget:
                rollout.truncated = True
                continue
            calls = message.get("tool_calls") or []
            if not calls or turn == max_iterations:
                continue
            for call in calls:
                name, text, failed = _call(toolsets[i], call)
                rollout.tool_calls += 1
                rollout.tool_failures += failed
                result = {"role": "tool", "name": name, "content": text}
                rollout.messages.append(result)
                conversations[i].append(result)
            still.append(i)
        active = still
    return rollouts


def _end_ids(tokenizer) -> set[int]:
    ids = {tokenizer.eos_token_id}
    for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
        found = tokenizer.convert_tokens_to_ids(token)
        if isinstance(found, int) and found != tokenizer.unk_token_id:
            ids.add(found)
    return {i for i in ids if i is not None}
