r"""Format rewards for the ``<think>...</think><answer>...</answer>`` layout (R1-Zero / TinyZero style).

* ``think_format``: 1.0 for ``<think>reasoning</think>`` followed by ``<answer>answer</answer>``.
* ``answer_format``: 1.0 for exactly one non-empty ``<answer>...</answer>`` block.
* ``tag_count``: 0.25 for each of the four tags that occurs exactly once (a soft, dense signal).

Two classic silent bugs are avoided here. Regexes use ``re.DOTALL``: reasoning spans many lines, and
without it ``.`` stops at the first newline so the reward is always 0. And chat templates of reasoning
models often *open* ``<think>`` in the prompt (the generation prompt ends with ``<think>\n``), so the
completion begins mid-thought: when the prompt ends with ``<think>`` (or ``think_prefilled=True``),
the completion is scored as if ``<think>`` preceded it.

Every tag must occur exactly once: a completion that repeats ``<answer>`` to hedge gets no format credit.
"""

from __future__ import annotations

import re

from rewards.base import Reward, Sample
from rewards.registry import register

TAGS = ("<think>", "</think>", "<answer>", "</answer>")

# Tags are counted beforehand (exactly once each), so these DOTALL patterns cannot backtrack badly.
_THINK_THEN_ANSWER_STRICT = re.compile(
    r"\s*<think>.*?</think>\s*<answer>(?P<answer>.*?)</answer>\s*", re.DOTALL
)
_THINK_THEN_ANSWER = re.compile(r"\s*<think>.*?</think>.*?<answer>(?P<answer>.*?)</answer>.*", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(?P<answer>.*?)</answer>", re.DOTALL)
_PREFILLED = re.compile(r"<think>\s*$")


def with_prefill(sample: Sample, think_prefilled: bool) -> str:
    """The completion as the model "wrote" it: with ``<think>`` prepended if the prompt opened it."""
    if think_prefilled or _PREFILLED.search(sample.prompt[-200:]):
        return "<think>" + sample.text
    return sample.text


def _each_once(text: str, tags: tuple[str, ...] = TAGS) -> bool:
    return all(text.count(tag) == 1 for tag in tags)


@register("think_format")
class ThinkFormat(Reward):
    r"""1.0 if the completion is ``<think>...</think>`` then ``<answer>...</answer>``, else 0.0.

    Params:
        strict: nothing but whitespace may appear outside the tags (before ``<think>``, between
            ``</think>`` and ``<answer>``, after ``</answer>``). When False, text may appear between the
            blocks and after the answer, but the completion must still start with ``<think>``.
        think_prefilled: the chat template already opened ``<think>`` in the prompt (detected
            automatically when the prompt text ends with ``<think>``).

    Each tag must occur exactly once and the answer must not be empty.

    >>> reward = ThinkFormat(strict=True)
    >>> reward(["<think>\nstep 1\nstep 2\n</think>\n<answer>4</answer>", "<think>a</think> so <answer>4</answer>"])
    [1.0, 0.0]
    >>> reward(["step 1\n</think><answer>4</answer>"], prompts=["<|im_start|>assistant\n<think>\n"])
    [1.0]
    """

    def __init__(self, *, strict: bool = False, think_prefilled: bool = False) -> None:
        self.strict = strict
        self.think_prefilled = think_prefilled

    def score(self, sample: Sample) -> float:
        text = with_prefill(sample, self.think_prefilled)
        if not _each_once(text):
            return 0.0
        pattern = _THINK_THEN_ANSWER_STRICT if self.strict else _THINK_THEN_ANSWER
        match = pattern.fullmatch(text)
        return 1.0 if match and match.group("answer").strip() else 0.0


@register("answer_format")
class AnswerFormat(Reward):
    r"""1.0 if the completion has exactly one non-empty ``<answer>...</answer>`` block, else 0.0.

    Params:
        strict: the block must also end the completion (only whitespace after ``</answer>``).

    >>> AnswerFormat()(["<answer>\n42\n</answer>", "<answer>1</answer><answer>2</answer>", "<answer> </answer>"])
    [1.0, 0.0, 0.0]
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict

    def score(self, sample: Sample) -> float:
        text = sample.text
        if not _each_once(text, ("<answer>", "</answer>")):
            return 0.0
        match = _ANSWER_BLOCK.search(text)
        if match is None or not match.group("answer").strip():
            return 0.0
        if self.strict and text[match.end() :].strip():
            return 0.0
        return 1.0


@register("tag_count")
class TagCount(Reward):
    r"""0.25 for each of ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` that occurs exactly once.

    Params:
        think_prefilled: the chat template already opened ``<think>`` in the prompt (detected
            automatically when the prompt text ends with ``<think>``).

    >>> TagCount()(["<think>x</think><answer>1</answer>", "<think>x</think>", "<answer>1</answer><answer>2</answer>"])
    [1.0, 0.5, 0.0]
    """

    def __init__(self, *, think_prefilled: bool = False) -> None:
        self.think_prefilled = think_prefilled

    def score(self, sample: Sample) -> float:
        text = with_prefill(sample, self.think_prefilled)
        return 0.25 * sum(text.count(tag) == 1 for tag in TAGS)
