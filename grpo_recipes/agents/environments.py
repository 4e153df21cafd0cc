"""Environments: state that lives for one rollout, tools that act on it, and the reward it gives at the end.

An environment is a class (TRL's ``environment_factory`` contract) with

* ``reset(**row)``: called with the dataset row before each rollout; it may return text that is added to
  the prompt (or None);
* public methods: the tools the model may call (typed parameters, a docstring with ``Args:``);
* ``get_reward()``: the outcome, read by the ``environment_reward`` reward once the rollout is over.

A recipe names one from :data:`ENVIRONMENTS` or by import path (``package.module:Class``), with ``params``
given to its constructor. :func:`guarded_factory` returns what ``GRPOTrainer(environment_factory=...)``
takes: each instance wraps the user's, with every tool method behind :func:`~grpo_recipes.agents.tools.guard`
(timeouts, error text, truncation, counts), and ``get_reward`` kept off the class so that TRL does not add a
reward of its own: the recipe's ``rewards`` decide (``environment_reward`` with its weight).

Example:
    >>> game = GuessNumber(low=1, high=100, max_guesses=7)
    >>> game.reset(secret=42)
    >>> game.guess(50), game.guess(25), game.guess(42), game.get_reward()
    ('lower', 'higher', 'correct: the number is 42', 1.0)
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewards.typecheck import FieldError, check_mapping, parameters

from .tools import ToolError, ToolStats, guard, import_object, tool_schema_problems

#: Shipped environments: name -> class.
ENVIRONMENTS: dict[str, type] = {}


def register_environment(name: str) -> Callable[[type], type]:
    """Register an environment class under `name`: its constructor's keyword parameters are the recipe's ``params``."""

    def decorate(cls: type) -> type:
        ENVIRONMENTS[name] = cls
        return cls

    return decorate


def tool_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The public methods of `cls` that are tools: all but ``reset`` and ``get_reward``, as TRL finds them."""
    return {
        name: member
        for name, member in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    }


def get_environment_class(
    name: str, params: Mapping[str, Any] | None = None, key: str = "name", search: Sequence[Any] = ()
) -> tuple[type, dict[str, Any]]:
    """The environment class `name` names and its constructor `params`, checked; ToolError otherwise."""
    if name in ENVIRONMENTS:
        cls = ENVIRONMENTS[name]
    elif ":" in name:
        cls = import_object(name, key, search)
        if not inspect.isclass(cls):
            raise ToolError(
                key, f"{name} is not a class (an environment is a class with reset() and tool methods)."
            )
    else:
        known = ", ".join(sorted(ENVIRONMENTS))
        raise ToolError(
            key,
            f"unknown environment '{name}'. Shipped: {known}; or give an import path 'package.module:Class'.",
        )
    for required in ("reset", "get_reward"):
        if not callable(getattr(cls, required, None)):
            raise ToolError(key, f"environment {name} has no {required}() method.")
    methods = tool_methods(cls)
    if not methods:
        raise ToolError(key, f"environment {name} has no public method for the model to call.")
    for method_name, method in methods.items():
        problems = tool_schema_problems(method)
        if problems:
            raise ToolError(
                key, f"{name}.{method_name} cannot be described to the model: {'; '.join(problems)}."
            )
    try:
        fields = {
            p: param.annotation
            for p, param in parameters(cls.__init__).items()
            if p not in ("args", "kwargs")
        }
        checked = check_mapping(dict(params or {}), fields, "params")
    except FieldError as err:
        raise ToolError(err.key, err.problem) from None
    return cls, checked


def guarded_factory(
    cls: type,
    params: Mapping[str, Any],
    *,
    timeout_seconds: float = 10.0,
    max_result_chars: int = 2000,
    stats: ToolStats | None = None,
) -> Callable[[], Any]:
    """A no-argument factory of guarded instances of `cls` (see the module docstring)."""
    stats = stats if stats is not None else ToolStats()
    namespace: dict[str, Any] = {"__doc__": cls.__doc__}

    def __init__(self) -> None:
        self.inner = cls(**params)

    def reset(self, **row: Any) -> Any:
        return self.inner.reset(**row)

    def _get_reward(self) -> float | None:
        return self.inner.get_reward()

    namespace.update(__init__=__init__, reset=reset, _get_reward=_get_reward)
    for name, method in tool_methods(cls).items():
        namespace[name] = _guarded_method(name, method, timeout_seconds, max_result_chars, stats)
    guarded_cls = type(cls.__name__, (), namespace)
    return guarded_cls


def _guarded_method(name: str, method: Callable[..., Any], timeout: float, limit: int, stats: ToolStats):
    def call(self, *args: Any, **kwargs: Any) -> str:
        bound = getattr(self.inner, name)
        # Built per call: the guard binds the instance's own method (its signature has no `self`).
        return guard(bound, timeout_seconds=timeout, max_result_chars=limit, stats=stats)(*args, **kwargs)

    # The annotations resolved where the method was written: `call` lives in this module, whose globals
    # would not resolve a user's postponed annotations (`from __future__ import annotations`) such as
    # Literal[...] when TRL renders the tool's schema.
    try:
        hints = typing.get_type_hints(method)
    except Exception:  # noqa: BLE001 - left as written; get_json_schema says what it cannot read
        hints = dict(getattr(method, "__annotations__", {}))
    signature = inspect.signature(method)  # with `self`: a bound method's signature drops it
    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    call.__signature__ = signature.replace(
        parameters=[
            p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
        ],
        return_annotation=hints.get("return", signature.return_annotation),
    )
    call.__annotations__ = hints
    return call


@register_environment("guess_number")
class GuessNumber:
    """Guess a secret whole number: after each guess the environment says higher, lower or correct.

    The row's `secret` column holds the number. The reward is 1 when it was found within `max_guesses`
    guesses, else 0; a guess after the limit is refused.
    """

    def __init__(self, low: int = 1, high: int = 100, max_guesses: int = 7) -> None:
        if not low < high:
            raise ValueError(f"low ({low}) must be below high ({high})")
        self.low, self.high, self.max_guesses = low, high, max_guesses
        self.secret: int | None = None
        self.guesses: list[int] = []
        self.found = False

    def reset(self, secret: int | str | None = None, **row: Any) -> None:
        self.secret = int(secret) if secret is not None else None
        self.guesses, self.found = [], False

    def guess(self, number: int) -> str:
        """Guess the secret number; the answer says whether the secret is higher, lower, or that the guess is correct.

        Args:
            number: The whole number to guess.
        """
        if self.secret is None:
            raise ToolError("", "there is no game: the environment was not reset")
        if self.found:
            return f"already found: the number is {self.secret}"
        if len(self.guesses) >= self.max_guesses:
            return f"no guesses left (the limit is {self.max_guesses})"
        number = int(number)
        self.guesses.append(number)
        if number == self.secret:
            self.found = True
            return f"correct: the number is {self.secret}"
        return "higher" if self.secret > number else "lower"

    def get_reward(self) -> float:
        return 1.0 if self.found else 0.0
