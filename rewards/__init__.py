"""Reward functions for GRPO training, evaluation and audits, with TRL's calling convention.

Build a reward by name with recipe params; the result is what ``GRPOTrainer(reward_funcs=[...])``
takes::

    >>> import rewards
    >>> accuracy = rewards.get_reward("math_accuracy", timeout_seconds=5)
    >>> accuracy([r"... so the answer is $\\boxed{\\frac{1}{2}}$."], solution=[r"\\frac12"])
    [1.0]

* :func:`get_reward`, :func:`available_rewards`, :func:`reward_params`: build and list rewards.
  An unknown name raises :class:`UnknownRewardError` (a ``KeyError`` and a ``ValueError``); bad params
  raise :class:`InvalidRewardParamsError` (a ``TypeError`` and a ``ValueError``).
* :func:`register` and :class:`Reward`: add a reward (see :mod:`rewards.registry`).
* :func:`extract_answer`, :func:`find_answers`, :func:`normalize_number`, :func:`parse_number`,
  :func:`canonical_answer`: the answer parsing the rewards use, for evaluation code to share.
* :func:`shutdown_workers`: stop the sympy worker processes ``math_accuracy`` starts on first use
  (also done at interpreter exit).

Modules, one concept each: ``base`` (the Reward class and calling convention), ``registry``
(names and parameter checks, with ``typecheck``), ``extract`` (finding answers), ``number_parsing`` and
``latex_normalize`` (normalisation), ``sandbox`` and ``_sympy_worker``
(bounded-time sympy in worker processes), and the rewards: ``math_rewards``, ``numeric_rewards``,
``format_rewards``, ``countdown``, ``environment`` (a multi-turn rollout's environment outcome), ``length``, ``repetition``, ``reasoning_gym`` (reasoning-gym's
scorers, in a worker process of their own; ``tagged_json`` stores their metadata). ``rewards/README.md`` lists every
reward with its parameters.

Importing this package is fast and imports neither sympy nor torch, transformers or trl.
"""

from rewards import (  # noqa: F401
    code,
    countdown,
    environment,
    format_rewards,
    length,
    math_rewards,
    numeric_rewards,
    reasoning_gym,
    repetition,
)
from rewards.base import Reward, RewardSetupError, Sample, completion_text
from rewards.extract import ANSWER_STYLES, PREFERENCE_ORDER, extract_answer, find_answers, find_boxed
from rewards.latex_normalize import canonical_answer
from rewards.number_parsing import normalize_number, parse_number
from rewards.registry import (
    REQUIRED,
    InvalidRewardParamsError,
    UnknownRewardError,
    available_rewards,
    build_reward,
    get_reward,
    register,
    reward_params,
)
from rewards.worker_pool import shutdown_workers

__all__ = [
    "ANSWER_STYLES",
    "PREFERENCE_ORDER",
    "REQUIRED",
    "InvalidRewardParamsError",
    "Reward",
    "RewardSetupError",
    "Sample",
    "UnknownRewardError",
    "available_rewards",
    "build_reward",
    "canonical_answer",
    "completion_text",
    "extract_answer",
    "find_answers",
    "find_boxed",
    "get_reward",
    "normalize_number",
    "parse_number",
    "register",
    "reward_params",
    "shutdown_workers",
]
