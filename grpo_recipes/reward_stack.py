"""The recipe's rewards as TRL reward functions, with a count of the groups that teach nothing.

A group whose G completions all get the same total reward has zero advantage everywhere, so it contributes
no gradient. TRL's own `frac_reward_zero_std` misses groups whose equal rewards are non-zero (float32 std
comes out near 1e-8, not 0), so we count them here from the weighted total, and log the fraction as
`zero_variance_groups` through TRL's `log_metric`. With dynamic sampling that name is the trained batch's
share (logged by the trainer), and this count of every generated group is `zero_variance_groups_generated`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .recipe import Recipe


class RewardStack:
    """One TRL reward function per reward, weighted; the last one also logs group statistics.

    >>> import rewards
    >>> stack = RewardStack([rewards.get_reward("numeric_accuracy")], weights=[1.0])
    >>> [f.__name__ for f in stack.functions], stack.weights
    (['numeric_accuracy'], [1.0])
    """

    def __init__(
        self, rewards: list[Callable[..., list[float | None]]], weights: list[float], tolerance: float = 1e-6
    ):
        self.weights = weights
        self.tolerance = tolerance
        self.metric = "zero_variance_groups"
        self.functions = [_Tracked(self, i, reward) for i, reward in enumerate(rewards)]
        self._batch: list[list[float | None]] = []

    @classmethod
    def for_recipe(cls, recipe: Recipe) -> RewardStack:
        """The recipe's rewards, the instances `parse_recipe` built and checked, with the recipe's weights."""
        stack = cls(recipe.reward_functions, [spec.weight for spec in recipe.rewards])
        if recipe.sampling.dynamic:
            stack.metric = "zero_variance_groups_generated"
        return stack

    def record(self, index: int, scores: list[float | None], prompts: Any, log_metric: Any) -> None:
        if index == 0:
            self._batch = []
        self._batch.append(scores)
        last = len(self.functions) - 1
        if index == last and len(self._batch) == len(self.functions) and log_metric is not None:
            totals, keys = self.totals(), _prompt_keys(prompts, len(self._batch[0]))
            # Under several processes a group's completions can be split across them: count whole groups.
            # Every process scores its share at the same point of the step, so the gather is safe here.
            from accelerate import PartialState

            if PartialState().num_processes > 1:
                from accelerate.utils import gather_object

                totals, keys = gather_object(totals), gather_object(keys)
            log_metric(self.metric, zero_variance_fraction(totals, keys, self.tolerance))

    def totals(self) -> list[float]:
        """Weighted total per completion of the batch just scored (None counts as 0, as TRL's nansum)."""
        return [
            sum(w * (s if s is not None else 0.0) for w, s in zip(self.weights, column, strict=True))
            for column in zip(*self._batch, strict=True)
        ]


class _Tracked:
    """A reward function that reports its scores to its stack; picklable, named like the reward."""

    def __init__(self, stack: RewardStack, index: int, function: Callable[..., list[float | None]]):
        self.stack, self.index, self.function = stack, index, function
        self.__name__ = function.__name__

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        scores = self.function(completions, **kwargs)
        self.stack.record(self.index, scores, kwargs.get("prompts"), kwargs.get("log_metric"))
        return scores


def zero_variance_fraction(totals: list[float], prompts: Any, tolerance: float = 1e-6) -> float:
    """Fraction of prompt groups (runs of the same prompt) whose totals are all equal within `tolerance`.

    >>> zero_variance_fraction([1, 1, 0, 1], ["a", "a", "b", "b"])
    0.5
    """
    if not totals:
        return 0.0
    keys = _prompt_keys(prompts, len(totals))
    groups: list[list[float]] = []
    for i, (key, value) in enumerate(zip(keys, totals, strict=True)):
        if i and key == keys[i - 1]:
            groups[-1].append(value)
        else:
            groups.append([value])
    flat = sum(1 for g in groups if max(g) - min(g) <= tolerance)
    return flat / len(groups)


def _prompt_keys(prompts: Any, count: int) -> list[str]:
    """One comparable key per completion: its prompt, written out (no prompts: one group)."""
    return [repr(p) for p in prompts] if prompts is not None else ["all"] * count
