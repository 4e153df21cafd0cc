r"""``repetition_penalty``: penalise completions that repeat themselves (degenerate loops).

The penalty is the fraction of repeated n-grams times ``max_penalty``::

    penalty = (1 - unique_ngrams / total_ngrams) * max_penalty

so text without a repeated n-gram scores 0.0 and a long loop approaches ``max_penalty``. N-grams are
taken over lower-cased words of the text (``unit="words"``, tokenizer-independent) or over the token
ids the trainer passes (``unit="tokens"``; falls back to words when ids are absent).
"""

from __future__ import annotations

from typing import Literal

from rewards.base import Reward, Sample
from rewards.registry import invalid, register


@register("repetition_penalty")
class RepetitionPenalty(Reward):
    r"""Negative reward proportional to the share of repeated n-grams.

    Params:
        ngram_size: n-gram length (>= 1).
        max_penalty: the score of a fully repetitive completion (<= 0).
        unit: ``"words"`` or ``"tokens"`` (uses ``completion_ids``).

    >>> reward = RepetitionPenalty(ngram_size=2)
    >>> reward(["the cat sat on the mat", "go go go go go"])
    [0.0, -0.75]
    """

    max_score = 0.0

    def __init__(
        self, *, ngram_size: int = 3, max_penalty: float = -1.0, unit: Literal["words", "tokens"] = "words"
    ) -> None:
        if ngram_size < 1:
            raise invalid("repetition_penalty", f"ngram_size must be >= 1, got {ngram_size}")
        if max_penalty > 0:
            raise invalid(
                "repetition_penalty", f"max_penalty must be <= 0 (it is a penalty), got {max_penalty}"
            )
        self.ngram_size = ngram_size
        self.max_penalty = float(max_penalty)
        self.unit = unit

    def score(self, sample: Sample) -> float:
        if self.unit == "tokens" and sample.completion_ids is not None:
            items = list(sample.completion_ids)
        else:
            items = sample.text.lower().split()
        total = len(items) - self.ngram_size + 1
        if total <= 0:
            return 0.0
        unique = len({tuple(items[i : i + self.ngram_size]) for i in range(total)})
        return 0.0 if unique == total else (1.0 - unique / total) * self.max_penalty
