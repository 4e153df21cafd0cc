"""A user's plain reward function, named by import path, made safe to train with.

A recipe may name a TRL-style reward function of its own, ``name: my_rewards:date_match``::

    def date_match(completions, solution, **kwargs):
        return [1.0 if solution[i] in completion_text(c) else 0.0 for i, c in enumerate(completions)]

It gets what TRL gives any reward function (``completions``, ``prompts``, the dataset's columns as keyword
arguments, ``**kwargs``), plus the recipe's ``params`` as keyword arguments, and returns one float (or None,
"cannot be scored") per completion. :class:`FunctionReward` wraps it so that it cannot stop a step:

* a call runs in a thread with a time bound (``TIMEOUT_SECONDS_PER_COMPLETION`` for each completion of the
  batch): past it, the batch scores None (the thread is left to finish; Python cannot kill it);
* an exception, or an answer that is not one number or None per completion, makes it score the batch one
  completion at a time: the completions that still fail score None;
* each kind of failure is counted (:attr:`FunctionReward.failures`) and logged once per reward, with the
  row it happened on.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewards.base import TRAINER_KWARGS, Reward
from rewards.imports import import_object

logger = logging.getLogger(__name__)

#: A user's function may take this long per completion of the batch it is called with (math_accuracy's own
#: bound on symbolic checking is 5 s a completion).
TIMEOUT_SECONDS_PER_COMPLETION = 5.0
#: Parameters that are TRL's, not a column or a recipe param.
_NOT_COLUMNS = frozenset({"completions", *TRAINER_KWARGS})


class FunctionReward(Reward):
    """A plain reward function as a :class:`~rewards.base.Reward` (see the module).

    >>> def has_answer(completions, **kwargs):
    ...     return [1.0 if "Answer:" in c else 0.0 for c in completions]
    >>> reward = FunctionReward(has_answer, "mine:has_answer", "mine.py", {})
    >>> reward.__name__, reward(["Answer: 3", "no idea"])
    ('has_answer', [1.0, 0.0])
    >>> def broken(completions, **kwargs):
    ...     return [1.0 / len(c) for c in completions]
    >>> FunctionReward(broken, "mine:broken", "mine.py", {})(["ok", ""])
    [0.5, None]
    """

    def __init__(
        self, function: Callable[..., Any], path: str, origin: str, params: Mapping[str, Any], search=()
    ) -> None:
        self.function = function
        #: The import path the recipe gave, the file it came from, and where it was looked for.
        self.path, self.origin, self.search = path, origin, tuple(str(place) for place in search)
        self.name = getattr(function, "__name__", path.split(":")[-1])
        self.bound_params = dict(params)
        self.required_columns = required_columns(function, self.bound_params)
        self.failures = {"exceptions": 0, "timeouts": 0, "bad_results": 0}
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.bound_params)

    def __repr__(self) -> str:
        return f"FunctionReward({self.path!r}, from {self.origin})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by import path: the other process imports the user's module again, as the recipe does.
        return _rebuild, (self.path, self.search, self.bound_params)

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        size = len(completions)
        self.check_columns(kwargs)
        call = {**kwargs, **self.bound_params}
        scores, failure = self._bounded(list(completions), call, size)
        if failure is None:
            return scores
        if failure == "timeouts":
            self._count(failure, kwargs, 0, f"took over {TIMEOUT_SECONDS_PER_COMPLETION * size:g} s")
            return [None] * size
        # One completion at a time, so that only the ones it fails on score None.
        results: list[float | None] = []
        for index in range(size):
            single = {key: _item(value, index, size) for key, value in call.items()}
            score, failure = self._bounded([completions[index]], single, 1)
            if failure is not None:
                self._count(failure, kwargs, index, score)
                results.append(None)
            else:
                results.append(score[0])
        return results

    def _bounded(self, completions: list[Any], call: dict[str, Any], size: int) -> tuple[Any, str | None]:
        """(scores, None), or (what went wrong, the kind of failure)."""
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = self.function(completions=completions, **call)
            except BaseException as error:  # noqa: BLE001 - the user's code: anything it raises is counted
                outcome["error"] = error

        worker = threading.Thread(target=run, name=f"reward {self.name}", daemon=True)
        worker.start()
        worker.join(TIMEOUT_SECONDS_PER_COMPLETION * max(1, size))
        if worker.is_alive():
            return f"took over {TIMEOUT_SECONDS_PER_COMPLETION * size:g} s", "timeouts"
        if "error" in outcome:
            error = outcome["error"]
            return f"raised {type(error).__name__}: {error}", "exceptions"
        scores = _scores(outcome.get("value"), size)
        if scores is None:
            return f"returned {_short(outcome.get('value'))}, not {size} floats or None", "bad_results"
        return scores, None

    def _count(self, kind: str, kwargs: Mapping[str, Any], index: int, what: Any) -> None:
        with self._lock:
            self.failures[kind] += 1
            first = kind not in self._logged
            self._logged.add(kind)
        if first:
            row = {
                key: _short(_item(value, index, None))
                for key, value in kwargs.items()
                if key not in _NOT_COLUMNS
            }
            logger.warning(
                "reward %r (%s) %s on a completion of the row %s; it scores None (logged once; counted in "
                "its failures)",
                self.name,
                self.path,
                what,
                row,
            )


def required_columns(function: Callable[..., Any], params: Mapping[str, Any]) -> tuple[str, ...]:
    """The dataset columns ``function`` names as parameters without a default (not TRL's, not a param).

    >>> def f(completions, solution, unit="kg", **kwargs): ...
    >>> required_columns(f, {})
    ('solution',)
    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return ()
    return tuple(
        name
        for name, param in signature.parameters.items()
        if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        and param.default is param.empty
        and name not in _NOT_COLUMNS
        and name not in params
    )


def check_function(function: Any, params: Mapping[str, Any]) -> str:
    """Why ``function`` cannot be a reward with ``params`` ("" when it can)."""
    if inspect.isclass(function) or not callable(function):
        return f"{function!r} is not a function (a reward class must subclass rewards.Reward)"
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return ""
    parameters = signature.parameters
    takes_any = any(param.kind is param.VAR_KEYWORD for param in parameters.values())
    if "completions" not in parameters and not takes_any:
        return "it must take completions (and **kwargs), as TRL calls reward functions"
    named = [n for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [name for name in params if name not in named]
    if unknown:
        return f"params {', '.join(unknown)} are not parameters of the function (it takes {', '.join(named)})"
    return ""


def _rebuild(path: str, search: Sequence[str], params: Mapping[str, Any]) -> Reward:
    """The reward again in another process: the user's module imported again, as the recipe did."""
    function, origin = import_object(path, search)
    return FunctionReward(function, path, origin, params, search)


def _item(value: Any, index: int, size: int | None) -> Any:
    """The ``index``-th value of a per-completion column, as a one-item list; anything else as it is."""
    if isinstance(value, (list, tuple)) and (size is None or len(value) == size):
        return [value[index]] if size is not None else value[index]
    return value


def _scores(value: Any, size: int) -> list[float | None] | None:
    if not isinstance(value, (list, tuple)) or len(value) != size:
        return None
    scores: list[float | None] = []
    for score in value:
        if score is None:
            scores.append(None)
            continue
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            try:
                score = float(score)  # a numpy or torch scalar
            except (TypeError, ValueError):
                return None
        scores.append(float(score) if math.isfinite(score) else 0.0)
    return scores


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
