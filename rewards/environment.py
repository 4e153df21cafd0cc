r"""``environment_reward``: the outcome a rollout's environment reports, for multi-turn recipes.

An environment (a recipe's ``environment`` section, see ``grpo_recipes.agents.environments``) keeps the state
of one rollout; when the rollout is over this reward asks it for ``get_reward()``. TRL passes the rollouts'
environments as the ``environments`` keyword argument, one per completion, and so does the evaluation.

>>> class Game:
...     def __init__(self, won): self.won = won
...     def get_reward(self): return 1.0 if self.won else 0.0
>>> EnvironmentReward()(["", ""], environments=[Game(True), Game(False)])
[1.0, 0.0]
>>> EnvironmentReward()([""])  # no environment: unscorable
[None]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rewards.base import Reward, _clean
from rewards.registry import register


def environment_outcome(environment: Any) -> float | None:
    """The reward an environment gives (a finite float), or None when it has none or its get_reward() fails."""
    # A guarded environment (grpo_recipes.agents) keeps get_reward off its class, so that TRL adds no reward
    # of its own; it answers through _get_reward.
    getter = getattr(environment, "_get_reward", None) or getattr(environment, "get_reward", None)
    if not callable(getter):
        return None
    try:
        return _clean(getter())
    except Exception:  # noqa: BLE001 - an environment's failure scores the completion as unscorable
        return None


@register("environment_reward")
class EnvironmentReward(Reward):
    """The environment's ``get_reward()`` for each completion (None where there is no environment)."""

    is_accuracy = True

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        environments = kwargs.get("environments") or [None] * len(completions)
        if len(environments) != len(completions):
            raise ValueError(
                f"environment_reward: {len(environments)} environments for {len(completions)} completions"
            )
        return [environment_outcome(environment) for environment in environments]
