r"""``gsm8k_accuracy`` and ``numeric_accuracy``: exact numeric answers, in pure Python (no sympy).

Both read the gold as a number (``"14"``, ``"1,234"``, or GSM8K's ``"... #### 1,234"``), find the
completion's answer(s) in the first style present (see :mod:`rewards.extract`) and compare them
exactly as :class:`fractions.Fraction` after :func:`rewards.parse_number` (so ``14.0 == 14``,
``1,000 == 1000``, ``$18`` and ``18 dollars`` read 18). As in ``math_accuracy``, every answer of that
style must agree: ``\boxed{5} ... \boxed{6}`` scores 0.

They differ in where they look:

* ``gsm8k_accuracy``: ``\boxed{}``, ``<answer>``, ``#### N``, "the answer is N", in that order
  (``last_number_fallback`` adds the last number of the text as a last resort; off by default).
* ``numeric_accuracy``: the same, then the last number of the text (on by default), which is where a
  small model that has not learnt a format puts its answer ("2 + 2 × 6 = 14").
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from rewards.base import LogExtra, Reward, Sample
from rewards.extract import find_answers, find_gsm8k_answers
from rewards.number_parsing import format_number, parse_number
from rewards.registry import register

_EXPLICIT_STYLES = ("boxed", "answer_tag", "gsm8k", "answer_is")


@lru_cache(maxsize=4096)
def parse_gold_number(solution: str) -> Fraction | None:
    """The gold number: after the last ``####`` when present, else the whole string.

    >>> parse_gold_number("Janet sells 9 eggs.\\n#### 1,234"), parse_gold_number(" 14 ")
    (Fraction(1234, 1), Fraction(14, 1))
    """
    hashes = find_gsm8k_answers(solution)
    return parse_number(hashes[-1] if hashes else solution)


class _NumericAccuracy(Reward):
    """Shared logic; the registered subclasses differ only in the default of ``last_number_fallback``."""

    required_columns = ("solution",)
    is_accuracy = True
    last_number_fallback: bool

    def styles(self) -> tuple[str, ...]:
        return _EXPLICIT_STYLES + (("last_number",) if self.last_number_fallback else ())

    reads_answers = True

    def final_answer(self, text: str) -> str | None:
        r"""The number read as the answer, written canonically (equal numbers, equal strings); else None.

        >>> NumericAccuracy().final_answer("so 3 + 4 = 7.0"), NumericAccuracy().final_answer(r"\boxed{1} \boxed{2}")
        ('7', None)
        """
        _, found = find_answers(text, self.styles())
        values = {parse_number(answer) for answer in found}
        if len(values) != 1 or None in values:
            return None
        return format_number(values.pop())

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        scores: list[float | None] = []
        golds: list[str] = []
        answers: list[str] = []
        for sample in samples:
            solution = sample.columns.get("solution")
            gold = parse_gold_number(str(solution)) if solution is not None else None
            _, found = find_answers(sample.text, self.styles())
            values = {parse_number(answer) for answer in found}
            if gold is None:
                scores.append(None)
            else:
                scores.append(1.0 if values == {gold} else 0.0)
            golds.append("[unparseable]" if gold is None else format_number(gold))
            answers.append(
                " | ".join("[not a number]" if v is None else format_number(v) for v in values)
                or "[no answer]"
            )
        if log_extra is not None:
            log_extra(f"{self.name}/gold", golds)
            log_extra(f"{self.name}/answer", answers)
        return scores


@register("gsm8k_accuracy")
class GSM8KAccuracy(_NumericAccuracy):
    r"""1.0 if the answer equals the GSM8K gold number (``... #### 1,234`` or a bare number).

    Params:
        last_number_fallback: when no explicit answer (box, tag, ``####``, "the answer is") is
            present, use the last number of the text.

    >>> reward = GSM8KAccuracy()
    >>> reward(["... so she makes $18.\nThe answer is $18.", r"\boxed{18.00}", "#### 17", "18"],
    ...        solution=["Janet sells 9 eggs.\n#### 18"] * 4)
    [1.0, 1.0, 0.0, 0.0]
    """

    def __init__(self, *, last_number_fallback: bool = False) -> None:
        self.last_number_fallback = last_number_fallback


@register("numeric_accuracy")
class NumericAccuracy(_NumericAccuracy):
    r"""1.0 if the answer equals the gold number exactly (arithmetic and other generated tasks).

    The answer is read from ``\boxed{}``, else ``<answer>``, ``#### N``, an "Answer:" line or "the
    answer is N", else (``last_number_fallback``, on by default) the last number of the text.

    >>> reward = NumericAccuracy()
    >>> reward(["2 + 2 × 6 = 2 + 12 = 14", r"\boxed{14.0}", "Answer: -3", "The answer is 1,000."],
    ...        solution=["14", "14", "-3", "1000"])
    [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, *, last_number_fallback: bool = True) -> None:
        self.last_number_fallback = last_number_fallback
