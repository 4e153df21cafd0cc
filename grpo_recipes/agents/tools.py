"""Tools a model may call, by name or import path, and the guard every call goes through.

A tool is a plain function with typed parameters and a docstring whose ``Args:`` section describes each
parameter: TRL renders its JSON schema into the prompt from exactly these (``transformers.utils.get_json_schema``).
A shipped tool is registered by a *factory* that takes the recipe's ``params`` and returns the tool;
a user's own tool is named by import path, ``package.module:function``, and is the tool itself.

TRL 1.16 runs tool calls one after another in the trainer's process, with no timeout of its own, and hands
an exception to the model as the text of a dict. So every call goes through :func:`guard`: it runs the tool
in a daemon thread and waits at most ``timeout_seconds``; an exception, a timeout or arguments that do not
fit the signature become one line of text for the model (``Error: ...``), a result longer than
``max_result_chars`` is cut to its start and its end (:func:`cut`), and :class:`ToolStats` counts each case for the step log. A tool that never
returns leaves its thread behind (Python cannot kill a thread), but training goes on.

Example:
    >>> stats = ToolStats()
    >>> calculator = get_tool("calculator", {}, stats=stats)
    >>> calculator(expression="12 * (3 + 4)"), calculator(expression="1 / 0")
    ('84', 'Error: division by zero')
    >>> stats.as_dict()
    {'calls': 2, 'failures': 1, 'timeouts': 0, 'truncated': 0}
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rewards import imports
from rewards.typecheck import FieldError, check_mapping, parameters

#: Shipped tools: name -> factory(**params) -> tool function.
TOOLS: dict[str, Callable[..., Callable[..., Any]]] = {}


class ToolError(ValueError):
    """A tool or environment that cannot be used: ``key`` names the recipe key (relative), ``problem`` what is wrong."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"{key}: {problem}" if key else problem)


def register_tool(
    name: str,
) -> Callable[[Callable[..., Callable[..., Any]]], Callable[..., Callable[..., Any]]]:
    """Register a tool factory under `name`: its keyword parameters are the recipe's ``params`` for it."""

    def decorate(factory: Callable[..., Callable[..., Any]]) -> Callable[..., Callable[..., Any]]:
        TOOLS[name] = factory
        return factory

    return decorate


class ToolStats:
    """Counts of tool calls in this process; thread-safe. The trainer logs the change over each step."""

    FIELDS = ("calls", "failures", "timeouts", "truncated")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                self._counts[key] += value

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def result_text(result: Any) -> str:
    """A tool's return value as the text the model reads: strings as they are, other values as JSON."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def guard(
    tool: Callable[..., Any],
    *,
    timeout_seconds: float = 10.0,
    max_result_chars: int = 2000,
    stats: ToolStats | None = None,
) -> Callable[..., Any]:
    """`tool` with the same name, signature and docstring (so TRL renders the same schema), whose calls
    never raise and never take longer than `timeout_seconds`: see the module docstring.

    >>> def slow(seconds: float) -> str:
    ...     '''Sleep.
    ...
    ...     Args:
    ...         seconds: How long.
    ...     '''
    ...     import time; time.sleep(seconds); return "done"
    >>> guarded = guard(slow, timeout_seconds=0.2)
    >>> guarded(seconds=0.0), guarded(seconds=5.0), guarded(seconds=1, wrong=1)
    ('done', 'Error: slow did not finish within 0.2 s', "Error: bad arguments for slow: got an unexpected keyword argument 'wrong'")
    """
    stats = stats if stats is not None else ToolStats()
    signature = inspect.signature(tool)
    name = getattr(tool, "__name__", "tool")

    @functools.wraps(tool)
    def guarded(*args: Any, **kwargs: Any) -> str:
        stats.add(calls=1)
        try:
            signature.bind(*args, **kwargs)
        except TypeError as err:
            stats.add(failures=1)
            return f"Error: bad arguments for {name}: {_one_line(err)}"
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = tool(*args, **kwargs)
            except BaseException as err:  # noqa: BLE001 - everything a tool raises is an answer for the model
                outcome["error"] = err

        worker = threading.Thread(target=run, name=f"tool-{name}", daemon=True)
        worker.start()
        worker.join(timeout_seconds)
        if worker.is_alive():
            stats.add(failures=1, timeouts=1)
            return f"Error: {name} did not finish within {timeout_seconds:g} s"
        if "error" in outcome:
            stats.add(failures=1)
            err = outcome["error"]
            message = _one_line(err) or type(err).__name__
            return (
                f"Error: {message}"
                if isinstance(err, ToolError)
                else f"Error: {type(err).__name__}: {message}"
            )
        text = result_text(outcome.get("result"))
        if len(text) > max_result_chars:
            stats.add(truncated=1)
            text = cut(text, max_result_chars)
        return text

    guarded.__wrapped__ = tool  # functools.wraps sets it; named here because get_json_schema relies on it
    return guarded


def tool_schema_problems(tool: Callable[..., Any]) -> list[str]:
    """What keeps TRL from describing `tool` to the model: a missing docstring, an unannotated parameter, a
    parameter the docstring's ``Args:`` does not describe. Empty when the tool is fine.

    >>> def add(a: int, b) -> int:
    ...     '''Add two numbers.
    ...
    ...     Args:
    ...         a: The first.
    ...     '''
    >>> tool_schema_problems(add)
    ["parameter 'b' has no type annotation", "parameter 'b' is not described under Args: in the docstring"]
    """
    problems = []
    doc = inspect.getdoc(tool) or ""
    if not doc.strip():
        problems.append("it has no docstring (the model reads it as the tool's description)")
    for param in inspect.signature(tool).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.annotation is param.empty:
            problems.append(f"parameter '{param.name}' has no type annotation")
        if not re.search(rf"^\s*{re.escape(param.name)}\s*(\(.*\))?\s*:", doc, re.MULTILINE):
            problems.append(f"parameter '{param.name}' is not described under Args: in the docstring")
    return problems


def import_object(path: str, key: str, search: Sequence[str | Path] = ()) -> Any:
    """The object at ``package.module:attribute``, looked for next to the recipe (``search``) first, then in
    the working directory and the installed packages; a ToolError under `key` saying where it looked."""
    try:
        return imports.import_object(path, search)[0]
    except imports.ImportPathError as err:
        raise ToolError(key, str(err)) from None


def build_tool(
    name: str, params: Mapping[str, Any] | None = None, key: str = "name", search: Sequence[str | Path] = ()
) -> Callable[..., Any]:
    """The unguarded tool `name` names: a shipped one built with `params`, or a user's by import path
    (looked for in the folders of `search`, the recipe's, first).

    Errors are ToolErrors whose key is `key` (the name) or ``params.<param>``; the recipe loader prefixes
    them with the tool's place (``tools[0]``).
    """
    params = dict(params or {})
    if name in TOOLS:
        factory = TOOLS[name]
        try:
            checked = check_mapping(params, parameters_of(factory), "params")
        except FieldError as err:
            raise ToolError(err.key, err.problem) from None
        tool = factory(**checked)
    elif ":" in name:
        tool = import_object(name, key, search)
        if params:
            raise ToolError(
                "params",
                f"a tool given by import path takes no params (got {', '.join(params)}); "
                "bind them in your module, e.g. with functools.partial plus a docstring.",
            )
        if not callable(tool) or inspect.isclass(tool):
            raise ToolError(key, f"{name} is not a function.")
    else:
        known = ", ".join(sorted(TOOLS))
        raise ToolError(
            key, f"unknown tool '{name}'. Shipped: {known}; or give an import path 'package.module:function'."
        )
    problems = tool_schema_problems(tool)
    if problems:
        raise ToolError(key, f"tool {name} cannot be described to the model: {'; '.join(problems)}.")
    return tool


def cut(text: str, max_chars: int) -> str:
    """``text`` cut to its first two thirds of ``max_chars`` and its last third, with a note of its length
    between them: how a long output ended (an error, a limit, the last value) is what the model most needs.

    >>> cut("0123456789" * 3, 12)
    '01234567\\n[... cut: 30 characters in all ...]\\n6789'
    """
    tail = max_chars // 3
    return (
        text[: max_chars - tail]
        + f"\n[... cut: {len(text)} characters in all ...]\n"
        + text[len(text) - tail :]
    )


def get_tool(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout_seconds: float = 10.0,
    max_result_chars: int = 2000,
    stats: ToolStats | None = None,
) -> Callable[..., Any]:
    """The guarded tool `name` names (see :func:`build_tool` and :func:`guard`)."""
    tool = build_tool(name, params)
    return guard(tool, timeout_seconds=timeout_seconds, max_result_chars=max_result_chars, stats=stats)


def parameters_of(factory: Callable[..., Any]) -> dict[str, Any]:
    """``{param: annotation}`` of a tool factory's keyword parameters: what a recipe's ``params`` may set."""
    return {name: param.annotation for name, param in parameters(factory).items()}
