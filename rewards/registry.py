"""Reward names: ``@register("name")`` to add one, :func:`get_reward` to build one from recipe params.

A reward is a :class:`~rewards.base.Reward` subclass whose ``__init__`` takes keyword-only,
annotated parameters with defaults. Registering it is one decorator::

    @register("my_reward")
    class MyReward(Reward):
        '''Docstring with an example.'''

        def __init__(self, *, bonus: float = 1.0) -> None:
            self.bonus = bonus

        def score(self, sample: Sample) -> float:
            return self.bonus if "42" in sample.text else 0.0

The registry reads parameter names, defaults and annotations from that signature, so
:func:`get_reward` can reject an unknown parameter or a value of the wrong type with a message that
names the reward and lists the allowed parameters -- before any model is loaded. The values are checked
(and numbers converted) by :mod:`rewards.typecheck`, the validator every other recipe value goes through.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rewards.base import Reward
from rewards.function_reward import FunctionReward, check_function
from rewards.imports import ImportPathError, import_object, is_import_path
from rewards.typecheck import FieldError, check_mapping


class _Required:
    """Marker default for a parameter that has no sensible default and must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"  # pickles as the module-level singleton


#: Default of a parameter a recipe must set (e.g. ``soft_overlong``'s ``max_completion_length``).
REQUIRED: Any = _Required()


class UnknownRewardError(KeyError, ValueError):
    """No reward has this name. Subclass of both ``KeyError`` and ``ValueError``: catch either."""

    def __str__(self) -> str:  # KeyError would show the message with quotes around it
        return str(self.args[0])


class InvalidRewardParamsError(TypeError, ValueError):
    """Bad parameters for a reward (unknown, missing, wrong type or out of range).

    Subclass of both ``TypeError`` and ``ValueError``: catch either. ``param`` names the parameter
    (``""`` when the problem is not one parameter's) and ``problem`` says what is wrong, for callers that
    name the place themselves (a recipe's ``rewards[0].params.<param>``).
    """

    def __init__(self, reward: str, problem: str, param: str = "") -> None:
        self.reward, self.problem, self.param = reward, problem, param
        where = f" parameter {param!r}" if param else ""
        super().__init__(f"reward {reward!r}{where}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:  # the default would call __init__(message)
        return type(self), (self.reward, self.problem, self.param)


_REGISTRY: dict[str, type[Reward]] = {}
R = TypeVar("R", bound=type[Reward])


def register(name: str) -> Callable[[R], R]:
    """Class decorator adding a :class:`~rewards.base.Reward` subclass to the registry under ``name``."""

    def decorate(cls: R) -> R:
        if not (isinstance(cls, type) and issubclass(cls, Reward)):
            raise TypeError(f"@register({name!r}) decorates Reward subclasses, not {cls!r}")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"reward name {name!r} is already registered by {_REGISTRY[name].__qualname__}")
        cls.signature()  # fail at import time if the signature breaks the conventions
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def available_rewards() -> list[str]:
    """Sorted names of all registered rewards."""
    return sorted(_REGISTRY)


def reward_class(name: str) -> type[Reward]:
    """The class registered under ``name``; raises :class:`UnknownRewardError` with suggestions."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), _REGISTRY, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownRewardError(
            f"unknown reward {name!r}.{hint} Available rewards: {', '.join(available_rewards())}"
        ) from None


def reward_params(name: str) -> dict[str, Any]:
    """The parameters ``name`` accepts, with their defaults (:data:`REQUIRED` when there is none).

    >>> reward_params("think_format")
    {'strict': False, 'think_prefilled': False}
    """
    return {param: default for param, (default, _) in reward_class(name).signature().items()}


def get_reward(name: str, **params: Any) -> Reward:
    """Build the reward registered under ``name`` (or a user's, by import path: see :func:`build_reward`)
    with ``params`` (e.g. from a recipe).

    Cheap: nothing is started (worker processes start on first use).

    >>> reward = get_reward("numeric_accuracy")
    >>> reward.__name__, reward(["So 2 + 2 * 6 = 14."], solution=["14"])
    ('numeric_accuracy', [1.0])

    Raises:
        UnknownRewardError: no reward has that name (the message suggests the closest one).
        InvalidRewardParamsError: a parameter is unknown, missing or invalid (the message names the
            reward, the parameter and the allowed parameters).
    """
    return build_reward(name, params)


def build_reward(name: str, params: Mapping[str, Any], search: Sequence[str | Path] = ()) -> Reward:
    """The reward ``name`` names, built with ``params``: a registered name, or a user's own by import path,
    ``package.module:name``, looked for in the folders of ``search`` (the recipe's), then the working
    directory and the installed packages (:func:`rewards.imports.import_object`):

    * a :class:`~rewards.base.Reward` subclass: built and checked like a registered one (its ``name``, when
      it sets none, is the class's);
    * a plain TRL-style reward function: wrapped in :class:`~rewards.function_reward.FunctionReward`
      (bounded in time, its exceptions counted and scored None), ``params`` passed to it as keyword
      arguments on each call.

    The built reward's ``origin`` is the file it came from ("" for a registered one).

    Raises:
        UnknownRewardError: no registered reward has that name, or the import path does not resolve.
        InvalidRewardParamsError: a parameter is unknown, missing or invalid.
    """
    if is_import_path(name):
        try:
            found, origin = import_object(name, search)
        except ImportPathError as error:
            raise UnknownRewardError(f"reward {name!r}: {error}") from None
        if not (isinstance(found, type) and issubclass(found, Reward)):
            problem = check_function(found, params)
            if problem:
                raise InvalidRewardParamsError(name, problem)
            return FunctionReward(found, name, origin, params, search)
        if not found.__dict__.get("name"):
            found.name = name.split(":")[-1]
        reward = _build(found, found.name, params)
        reward.origin = origin
        return reward
    return _build(reward_class(name), name, params)


def _build(cls: type[Reward], name: str, params: Mapping[str, Any]) -> Reward:
    signature = cls.signature()
    allowed = ", ".join(f"{key}={default!r}" for key, (default, _) in signature.items()) or "none"
    required = [key for key, (default, _) in signature.items() if default is REQUIRED]
    try:
        annotations = {key: annotation for key, (_, annotation) in signature.items()}
        params = check_mapping(params, annotations, required=required, list_allowed=False)
    except FieldError as error:
        raise InvalidRewardParamsError(
            name, f"{error.problem} Allowed parameters: {allowed}", error.key
        ) from None
    try:
        return cls(**params)
    except InvalidRewardParamsError:
        raise
    except (TypeError, ValueError) as error:  # range checks inside __init__
        raise InvalidRewardParamsError(name, f"{error}. Allowed parameters: {allowed}") from error


def invalid(name: str, message: str) -> InvalidRewardParamsError:
    """An error for a reward's own range checks: ``raise invalid(self.name, "cache_length must be > 0")``."""
    return InvalidRewardParamsError(name, message)


# --- reading and checking signatures ---------------------------------------------------------
