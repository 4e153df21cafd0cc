r"""``math_accuracy``: is the completion's final answer equivalent to the gold (MATH-style LaTeX)?

The verdict is math-verify's. A pure-Python fast path answers first, but only where it is certain to
give math-verify's verdict; everything else goes to math-verify in a worker process.

1. **Gold** (``solution`` column): a bare answer (``\frac{1}{3}``), a full solution (its last
   ``\boxed{}``) or GSM8K form (after ``####``). Prepared once per distinct gold string
   (:func:`prepare_gold` is an LRU cache), so a group of G completions sharing a prompt parses it once.
   A gold that math-verify cannot parse scores ``None`` (no verdict) for every completion, never 0:
   an unscorable row must not train toward "everything is wrong".
2. **Answer**: every ``\boxed{}`` of the completion (or every ``<answer>`` block with
   ``answer_format="answer_tag"``; a box inside the block is taken). Several answers that are not
   all equivalent to the gold score 0 -- hedging with two different answers is not rewarded.
3. **Fast path** (:func:`fast_verdict`), in-process, two rules only:

   * equal canonical strings (:func:`rewards.latex_normalize.canonical_answer`, which only drops
     what never carries meaning) are equal;
   * two *plain numbers* (:func:`rewards.number_parsing.plain_number`: ``-3``, ``1,000``, ``0.5``,
     ``3/4``, ``\frac{3}{4}``, optionally after ``x =``) compare as math-verify compares them:
     exactly when both are integers or fractions; rounded to 6 decimal places when one is a decimal,
     which the fast path settles only when the values are equal or more than 10^-6 apart.

4. **Slow path**: math-verify in a worker process (:mod:`rewards.worker_pool`), with a hard
   ``timeout_seconds`` per completion; verdicts are cached per (gold, answers).

``tests/rewards/test_reward_agreement.py`` checks the fast path against math-verify on every MATH-500
and GSM8K gold with a set of perturbed answers each.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from rewards.base import LogExtra, Reward, Sample
from rewards.extract import find_answer_tags, find_boxed, find_gsm8k_answers
from rewards.latex_normalize import MAX_ANSWER_CHARS, canonical_answer, repair_latex
from rewards.number_parsing import PlainNumber, plain_number
from rewards.registry import invalid, register
from rewards.worker_pool import POOL, Job

#: A completion with more distinct final answers than this scores 0 without further checks.
MAX_DISTINCT_ANSWERS = 4
#: math-verify compares a decimal with another number rounded to 6 places: values further apart than
#: this always differ, closer ones may be "equal" (1/3 and 0.333333).
DECIMAL_RESOLUTION = Fraction(1, 10**6)
#: math-verify reads decimals as floats of 15 significant digits; longer ones are left to it.
MAX_DECIMAL_DIGITS = 15
# "x = 5", "k=-3", "y_1 = 2": a variable on the left of the only "=". Not e or i, which math-verify
# reads as constants.
# The value may not hold a comma: math-verify reads "x = 58,500" as something else than 58500.
_ASSIGNMENT = re.compile(r"^(?P<variable>[a-df-hj-zA-DF-HJ-Z](?:_\w|_\{\w+\})?) ?= ?(?P<value>[^=,]+)$")


@dataclass(frozen=True)
class MathAnswer:
    """An answer (or gold) string, prepared once for every comparison it takes part in."""

    text: str
    """As written (stripped), for logs."""
    latex: str
    """Shorthand-repaired LaTeX, what the sympy worker parses."""
    canonical: str
    """Canonical form: equal canonical forms are equivalent answers."""
    variable: str | None
    """The variable of an assignment (``x`` in ``x = 5``), else None."""
    number: PlainNumber | None
    """The value when the answer (after any assignment) is a plain number."""


@lru_cache(maxsize=8192)
def prepare_answer(text: str) -> MathAnswer:
    r"""Prepare an answer string for comparison (cached: answers repeat within a group).

    >>> prepare_answer(r"\dfrac{1}{2}").number.value, prepare_answer("x = 1000").number.value
    (Fraction(1, 2), Fraction(1000, 1))
    >>> prepare_answer(r"5.4 \text{ cents}").number, prepare_answer("x = 1,000").number  # math-verify decides
    (None, None)
    """
    text = text.strip()
    canonical = canonical_answer(text)
    assignment = _ASSIGNMENT.match(canonical)
    value = assignment.group("value") if assignment else canonical
    return MathAnswer(
        text=text,
        latex=repair_latex(text),
        canonical=canonical,
        variable=assignment.group("variable") if assignment else None,
        number=plain_number(value),
    )


def gold_answer_text(solution: str) -> str | None:
    r"""The answer inside a gold ``solution``: its last ``\boxed{}``, else what follows ``####``, else all of it.

    >>> gold_answer_text(r"... so the area is $\boxed{12}$."), gold_answer_text("It is 4.\n#### 4")
    ('12', '4')
    >>> gold_answer_text(r"\frac{1}{3}")
    '\\frac{1}{3}'
    """
    boxed = find_boxed(solution)
    if boxed:
        answer = boxed[-1]
    else:
        hashes = find_gsm8k_answers(solution)
        answer = hashes[-1] if hashes else solution
    answer = answer.strip()
    return answer or None


@lru_cache(maxsize=4096)
def prepare_gold(solution: str) -> MathAnswer | None:
    """Extract and prepare the gold answer of ``solution``; ``None`` if it has none.

    Cached: ``prepare_gold.cache_info().misses`` counts how many golds were actually parsed.
    """
    answer = gold_answer_text(solution)
    return None if answer is None or len(answer) > MAX_ANSWER_CHARS else prepare_answer(answer)


def fast_verdict(gold: MathAnswer, answer: MathAnswer) -> bool | None:
    r"""math-verify's verdict where it is certain without sympy; ``None`` means "ask math-verify".

    >>> g = prepare_answer(r"\frac{1}{2}")
    >>> fast_verdict(g, prepare_answer("0.5")), fast_verdict(g, prepare_answer(r"\frac{2}{3}"))
    (True, False)
    >>> fast_verdict(g, prepare_answer("0.5000001")), fast_verdict(g, prepare_answer(r"\sin(\pi/6)"))
    (None, None)
    >>> fast_verdict(prepare_answer(r"6 \text{ and } 8"), prepare_answer("68")) is None
    True
    """
    if gold.canonical == answer.canonical:
        return True
    if gold.number is None or answer.number is None:
        return None
    if gold.variable and answer.variable and gold.variable != answer.variable:
        return None  # x = 2 against y = 2: math-verify compares the relations
    difference = abs(gold.number.value - answer.number.value)
    if not (gold.number.decimal or answer.number.decimal):
        return difference == 0  # integers and fractions: exact
    if max(gold.number.digits, answer.number.digits) > MAX_DECIMAL_DIGITS:
        return None
    if difference == 0:
        return True
    return False if difference > DECIMAL_RESOLUTION else None


class _VerdictCache:
    """A small thread-safe LRU of sympy verdicts, keyed by job (gold and answers)."""

    def __init__(self, size: int = 16384) -> None:
        self._items: OrderedDict[Job, bool] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, job: Job) -> bool | None:
        with self._lock:
            if job in self._items:
                self._items.move_to_end(job)
                return self._items[job]
            return None

    def put(self, job: Job, verdict: bool) -> None:
        with self._lock:
            self._items[job] = verdict
            if len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


VERDICTS = _VerdictCache()


@register("math_accuracy")
class MathAccuracy(Reward):
    r"""1.0 if the final answer is mathematically equivalent to the gold, else 0.0 (math-verify semantics).

    Params:
        answer_format: ``"boxed"`` (every ``\boxed{}`` of the completion) or ``"answer_tag"`` (every
            ``<answer>...</answer>`` block, using the box inside a block when it has one).
        timeout_seconds: hard limit per completion on symbolic checking; a completion that overruns
            scores 0.0 (its worker process is killed and replaced).
        num_workers: how many sympy worker processes may run this reward's checks in parallel.

    Column: ``solution`` (a bare answer, a full solution with ``\boxed{}``, or ``... #### N``).

    >>> reward = MathAccuracy()
    >>> reward([r"So $x = \boxed{\dfrac{1}{3}}$.", r"\boxed{0.5}", "no box", r"\boxed{2} or \boxed{3}"],
    ...        solution=[r"\frac13", r"The answer is $\boxed{\frac{1}{2}}$.", "1", "2"])
    [1.0, 1.0, 0.0, 0.0]
    """

    required_columns = ("solution",)
    is_accuracy = True

    def __init__(
        self,
        *,
        answer_format: Literal["boxed", "answer_tag"] = "boxed",
        timeout_seconds: float = 5.0,
        num_workers: int = 1,
    ) -> None:
        if not timeout_seconds > 0:
            raise invalid("math_accuracy", f"timeout_seconds must be > 0, got {timeout_seconds!r}")
        if not 1 <= num_workers <= 64:
            raise invalid("math_accuracy", f"num_workers must be between 1 and 64, got {num_workers!r}")
        self.answer_format = answer_format
        self.timeout_seconds = float(timeout_seconds)
        self.num_workers = num_workers

    def warmup(self) -> None:
        POOL.warmup(self.num_workers)

    def answers(self, text: str) -> list[str]:
        """The final answer(s) written in ``text``, per ``answer_format``."""
        if self.answer_format == "boxed":
            found = find_boxed(text)
        else:
            found = [(find_boxed(block) or [block])[-1] for block in find_answer_tags(text)]
        return [answer.strip() for answer in found if answer.strip()]

    reads_answers = True

    def final_answer(self, text: str) -> str | None:
        r"""The final answer when every answer written in ``text`` has the same canonical form; else None.

        >>> MathAccuracy().final_answer(r"\boxed{\frac12} so \boxed{\dfrac{1}{2}}"), MathAccuracy().final_answer("none")
        ('\\frac12', None)
        """
        answers = self.answers(text)
        if not answers or len({prepare_answer(answer).canonical for answer in answers}) != 1:
            return None
        return answers[0]

    def same_answers(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        r"""Whether each pair is one answer, decided as scoring decides it (fast path, then math-verify).

        >>> MathAccuracy().same_answers([(r"\frac{1}{2}", "0.5"), ("2", "3")])
        [True, False]
        """
        wrap = "\\boxed{{{}}}" if self.answer_format == "boxed" else "<answer>{}</answer>"
        samples = [Sample(text=wrap.format(a), columns={"solution": b}) for a, b in pairs]
        return [score == 1.0 for score in self.score_batch(samples)] if samples else []

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        scores: list[float | None] = [0.0] * len(samples)
        gold_texts: list[str] = []
        answer_texts: list[str] = []
        pending: dict[Job, list[int]] = {}  # sympy questions, each asked once per batch
        golds = [
            prepare_gold(str(sample.columns["solution"]))
            if sample.columns.get("solution") is not None
            else None
            for sample in samples
        ]
        parses = self._golds_parse({gold for gold in golds if gold is not None})
        for index, (sample, gold) in enumerate(zip(samples, golds, strict=True)):
            answers = self.answers(sample.text)
            answer_texts.append(" | ".join(answers)[:500] if answers else "[no answer]")
            if gold is None or not parses[gold]:
                gold_texts.append("[no gold answer]" if gold is None else f"[unparseable gold] {gold.text}")
                scores[index] = None
                continue
            gold_texts.append(gold.text)
            verdict = self._decide(gold, answers)
            if isinstance(verdict, Job):
                pending.setdefault(verdict, []).append(index)
            else:
                scores[index] = verdict
        if pending:
            jobs = list(pending)
            outcomes = POOL.run(jobs, timeout=self.timeout_seconds, workers=self.num_workers)
            for job, outcome in zip(jobs, outcomes, strict=True):
                if outcome in ("equal", "different"):
                    VERDICTS.put(job, outcome == "equal")
                elif outcome == "timeout":
                    for index in pending[job]:
                        answer_texts[index] = "[timeout] " + answer_texts[index]
                for index in pending[job]:
                    scores[index] = None if outcome == "no_gold" else 1.0 if outcome == "equal" else 0.0
        if log_extra is not None:
            log_extra(f"{self.name}/gold", gold_texts)
            log_extra(f"{self.name}/answer", answer_texts)
        return scores

    def _golds_parse(self, golds: set[MathAnswer]) -> dict[MathAnswer, bool]:
        """Whether math-verify parses each gold: asked once per gold that is not a plain number (cached)."""
        status = {
            gold: True if gold.number is not None else VERDICTS.get(Job(gold.latex, ())) for gold in golds
        }
        unknown = [gold for gold, parses in status.items() if parses is None]
        if unknown:
            jobs = [Job(gold.latex, ()) for gold in unknown]
            outcomes = POOL.run(jobs, timeout=self.timeout_seconds, workers=self.num_workers)
            for gold, job, outcome in zip(unknown, jobs, outcomes, strict=True):
                if outcome in ("equal", "no_gold"):
                    VERDICTS.put(job, outcome == "equal")
                status[gold] = outcome != "no_gold"  # a timeout here is retried with the answers
        return status

    def _decide(self, gold: MathAnswer, answers: list[str]) -> float | Job:
        """A score when the fast path (or the verdict cache) decides; otherwise the sympy job to run."""
        if not answers or any(len(answer) > MAX_ANSWER_CHARS for answer in answers):
            return 0.0
        distinct = list({prepared.canonical: prepared for prepared in map(prepare_answer, answers)}.values())
        if len(distinct) > MAX_DISTINCT_ANSWERS:
            return 0.0
        undecided = []
        for answer in distinct:
            verdict = fast_verdict(gold, answer)
            if verdict is False:
                return 0.0
            if verdict is None:
                undecided.append(answer.latex)
        if not undecided:
            return 1.0
        job = Job(gold=gold.latex, answers=tuple(undecided))
        cached = VERDICTS.get(job)
        if cached is not None:
            return 1.0 if cached else 0.0
        return job
