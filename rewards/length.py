r"""Length shaping: ``soft_overlong`` (DAPO) and ``cosine_length`` ("Demystifying Long CoT").

Both measure a completion in tokens: ``len(completion_ids)`` when the trainer passes token ids (TRL
always does), otherwise an estimate of ``ceil(len(text) / chars_per_token)`` -- about 4 characters
per token for English text with common BPE tokenizers, which is close enough for evaluation-time use
and makes no tokenizer necessary.
"""

from __future__ import annotations

import math
from typing import Any

from rewards.base import LogExtra, Reward, Sample
from rewards.registry import (
    REQUIRED,
    InvalidRewardParamsError,
    UnknownRewardError,
    get_reward,
    invalid,
    register,
    reward_class,
)


def completion_length(sample: Sample, chars_per_token: float = 4.0) -> int:
    """Tokens in the completion: ``len(completion_ids)`` if known, else the character-based estimate.

    >>> completion_length(Sample(text="x" * 10)), completion_length(Sample(text="", completion_ids=[1, 2, 3]))
    (3, 3)
    """
    if sample.completion_ids is not None:
        return len(sample.completion_ids)
    return math.ceil(len(sample.text) / chars_per_token)


@register("soft_overlong")
class SoftOverlong(Reward):
    r"""DAPO's soft overlong punishment: 0 up to ``max_completion_length - cache_length`` tokens,
    then falling linearly to -1 at ``max_completion_length``, and -1 beyond.

    Params:
        max_completion_length: the trainer's ``max_completion_length`` (required).
        cache_length: width of the linear ramp (DAPO's L_cache), ``0 < cache_length <= max_completion_length``;
            default: a fifth of ``max_completion_length`` (DAPO's 4096 of 20480).
        chars_per_token: characters per token for the estimate used when token ids are not given.

    >>> reward = SoftOverlong(max_completion_length=100, cache_length=20)
    >>> reward(["a", "b", "c"], completion_ids=[[0] * 80, [0] * 90, [0] * 120])
    [0.0, -0.5, -1.0]
    """

    max_score = 0.0

    def __init__(
        self,
        *,
        max_completion_length: int = REQUIRED,
        cache_length: int | None = None,
        chars_per_token: float = 4.0,
    ) -> None:
        if max_completion_length <= 0:
            raise invalid("soft_overlong", f"max_completion_length must be > 0, got {max_completion_length}")
        if cache_length is None:  # DAPO's proportion: a 4096-token ramp for 20480 tokens
            cache_length = max(1, max_completion_length // 5)
        if not 0 < cache_length <= max_completion_length:
            raise invalid(
                "soft_overlong",
                f"cache_length must be in (0, max_completion_length={max_completion_length}], got {cache_length}",
            )
        if chars_per_token <= 0:
            raise invalid("soft_overlong", f"chars_per_token must be > 0, got {chars_per_token}")
        self.max_completion_length = max_completion_length
        self.cache_length = cache_length
        self.chars_per_token = float(chars_per_token)

    def score(self, sample: Sample) -> float:
        length = completion_length(sample, self.chars_per_token)
        start = self.max_completion_length - self.cache_length
        if length <= start:
            return 0.0
        if length <= self.max_completion_length:
            return (start - length) / self.cache_length
        return -1.0


@register("cosine_length")
class CosineLength(Reward):
    r"""Correctness-aware length scaling (Yeo et al., 2025, "Demystifying Long Chain-of-Thought Reasoning").

    A cosine schedule over ``length / max_length`` (clamped to 1): correct completions score from
    ``max_value_correct`` (short) down to ``min_value_correct`` (at ``max_length``), so among correct
    answers shorter is better; wrong ones from ``min_value_wrong`` (short) up to ``max_value_wrong``,
    so a wrong answer is penalised less when the model thought longer. Correctness is a named accuracy
    reward (score 1.0 = correct), built with ``accuracy_params``; when it returns ``None`` (no gold)
    so does this reward.

    Params:
        max_length: length (tokens) where the schedule reaches its end point (required).
        accuracy: name of the accuracy reward (``math_accuracy``, ``gsm8k_accuracy``, ...).
        accuracy_params: params for that reward, e.g. ``{"answer_format": "answer_tag"}``.
        min_value_wrong, max_value_wrong, min_value_correct, max_value_correct: the schedule's end points.
        chars_per_token: characters per token for the estimate used when token ids are not given.

    >>> reward = CosineLength(max_length=100, accuracy="numeric_accuracy")
    >>> reward(["14", "15"], solution=["14", "14"], completion_ids=[[0] * 50, [0] * 50])
    [0.75, -0.75]
    """

    def __init__(
        self,
        *,
        max_length: int = REQUIRED,
        accuracy: str = "math_accuracy",
        accuracy_params: dict[str, Any] | None = None,
        min_value_wrong: float = -1.0,
        max_value_wrong: float = -0.5,
        min_value_correct: float = 0.5,
        max_value_correct: float = 1.0,
        chars_per_token: float = 4.0,
    ) -> None:
        if max_length <= 0:
            raise invalid("cosine_length", f"max_length must be > 0, got {max_length}")
        try:
            is_accuracy = reward_class(accuracy).is_accuracy
        except UnknownRewardError as error:
            raise invalid("cosine_length", f"accuracy: {error}") from None
        if not is_accuracy:
            raise invalid("cosine_length", f"accuracy={accuracy!r} is not an accuracy reward")
        if chars_per_token <= 0:
            raise invalid("cosine_length", f"chars_per_token must be > 0, got {chars_per_token}")
        self.max_length = max_length
        self.accuracy = accuracy
        self.accuracy_params = dict(accuracy_params or {})
        self.min_value_wrong = float(min_value_wrong)
        self.max_value_wrong = float(max_value_wrong)
        self.min_value_correct = float(min_value_correct)
        self.max_value_correct = float(max_value_correct)
        self.chars_per_token = float(chars_per_token)
        self.max_score = float(max(min_value_wrong, max_value_wrong, min_value_correct, max_value_correct))
        try:
            self._accuracy = get_reward(accuracy, **self.accuracy_params)
        except InvalidRewardParamsError as error:
            raise invalid("cosine_length", f"accuracy_params: {error}") from None
        self.required_columns = self._accuracy.required_columns

    def warmup(self) -> None:
        self._accuracy.warmup()

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        # The accuracy reward's own log columns are not repeated here (they would clash in the table).
        correctness = self._accuracy.score_batch(samples, None)
        scores: list[float | None] = []
        for sample, correct in zip(samples, correctness, strict=True):
            if correct is None:
                scores.append(None)
                continue
            progress = min(completion_length(sample, self.chars_per_token) / self.max_length, 1.0)
            if correct >= 1.0:
                start, end = self.max_value_correct, self.min_value_correct
            else:
                start, end = self.min_value_wrong, self.max_value_wrong
            # cos goes 1 -> -1 as progress goes 0 -> 1: the score goes from `start` to `end`.
            scores.append(end + 0.5 * (start - end) * (1.0 + math.cos(progress * math.pi)))
        return scores
