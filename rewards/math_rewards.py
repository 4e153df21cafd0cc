r"""``math_accuracy``: is the completion's final answer equivalent to the gold (MATH-style LaTeX)?

Pipeline, cheapest first:

1. **Gold** (``solution`` column): a bare answer (``\frac{1}{3}``), a full solution (its last
   ``\boxed{}``) or GSM8K form (after ``####``). Prepared once per distinct gold string
   (:func:`prepare_gold` is an LRU cache), so a group of G completions sharing a prompt parses it once.
2. **Answer**: every ``\boxed{}`` of the completion (or every ``<answer>`` block with
   ``answer_format="answer_tag"``; a box inside the block is taken). Several answers that are not
   all equivalent to the gold score 0 -- hedging with two different answers is not rewarded.
3. **Fast path**, in-process, pure Python (:func:`fast_verdict`), deciding only when certain:

   * equal canonical strings (:func:`rewards.latex_normalize.canonical_answer`) are equal;
   * plain numbers compare exactly as fractions (``1,000`` = ``1000``, ``\frac{1}{2}`` = ``0.5``);
   * constants and expressions are evaluated numerically (:mod:`rewards.latex_eval`): values that
     differ prove the answers differ; equal values prove equality only for constants;
   * one value is never equal to a tuple, interval, set or matrix; a word only to the same word.

4. **Slow path**: math-verify in a worker subprocess (:mod:`rewards.sandbox`), with a hard
   ``timeout_seconds`` per completion; verdicts are cached per (gold, answers).

On MATH-500 the fast path decides every ``\boxed{<answer>}`` completion and about 93% of wrong
ones (another problem's answer); checked against math-verify on ~5,000 decided pairs it agrees on
all but one deliberate difference: ``x = 2`` and ``y = 2`` are both read as the value 2 here.

``None`` is returned only when the gold has no answer at all (empty, or ``\boxed{}``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from rewards.base import LogExtra, Reward, Sample
from rewards.extract import find_answer_tags, find_boxed, find_gsm8k_answers
from rewards.latex_eval import evaluate, is_collection
from rewards.latex_normalize import MAX_ANSWER_CHARS, canonical_answer, repair_latex, strip_text_blocks
from rewards.number_parsing import strict_number
from rewards.registry import invalid, register
from rewards.sandbox import POOL, Job

#: A completion with more distinct final answers than this scores 0 without further checks.
MAX_DISTINCT_ANSWERS = 4
#: Float comparisons of constants: equal within EQUAL_TOLERANCE, different beyond DIFFERENT_TOLERANCE
#: (relative to max(1, |values|)); in between, sympy decides (math-verify rounds to 6 decimals).
EQUAL_TOLERANCE = 1e-12
DIFFERENT_TOLERANCE = 1e-6
_NOT_PLAIN = ("%", "circ", "°", "\\text", "\\mbox", "\\operatorname")
_TRAILING_LETTERS = re.compile(r"[A-Za-z][\s.]*$")
_WORD = re.compile(r"[A-Za-z]{3,}")
_NOT_WORDS = frozenset({"inf", "infty", "infinity", "undefined", "none"})


@dataclass(frozen=True)
class MathAnswer:
    """An answer (or gold) string, prepared once for every comparison it takes part in."""

    text: str
    """As written (stripped), for logs."""
    latex: str
    """Shorthand-repaired LaTeX, what the sympy worker parses."""
    canonical: str
    """Canonical form: equal canonical forms are equivalent answers."""
    number: Fraction | None
    """The exact value when the answer is a plain number (units in ``\\text{}`` ignored)."""
    exact: bool
    """Whether ``number`` is an integer or fraction as written (no decimals, percent or units), so
    that two unequal exact numbers are certainly different answers."""
    percent: bool
    """Whether the answer is written as a percentage (``10\\%`` may mean 10 or 0.1 to graders)."""
    value: complex | None
    """The value at a fixed generic point (:func:`rewards.latex_eval.evaluate`), when computable."""
    has_variables: bool
    """Whether ``value`` depends on variables (then equal values prove nothing)."""
    collection: bool
    """Whether the answer holds several values (tuple, interval, set, matrix): never equal to one value."""
    word: bool
    """Whether the answer is a word (``\\text{Evelyn}``, ``east``): equal only to the same word."""


@lru_cache(maxsize=8192)
def prepare_answer(text: str) -> MathAnswer:
    r"""Prepare an answer string for comparison (cached: answers repeat within a group).

    >>> prepare_answer(r"\dfrac{1}{2}").number, prepare_answer(r"5.4 \text{ cents}").number
    (Fraction(1, 2), Fraction(27, 5))
    """
    text = text.strip()
    canonical = canonical_answer(text)
    number = strict_number(canonical)
    exact = number is not None and not any(mark in text for mark in (".", "%", "\\text", "\\mbox"))
    if number is None:
        number = strict_number(strip_text_blocks(text))
    # Percent signs, degrees and \text{} were dropped from the canonical form, and math-verify gives
    # them meanings (10% is also 0.1), so such answers are not evaluated here.
    evaluation = None if any(mark in text for mark in _NOT_PLAIN) else evaluate(canonical)
    if evaluation is not None and evaluation.has_variables and _TRAILING_LETTERS.search(text):
        evaluation = None  # graders drop a trailing unit ("3c", "5 m"): is it a variable or a unit?
    return MathAnswer(
        text=text,
        latex=repair_latex(text),
        canonical=canonical,
        number=number,
        exact=exact,
        percent="%" in text or "percent" in text,
        value=evaluation.value if evaluation else None,
        has_variables=evaluation.has_variables if evaluation else False,
        collection=number is None and is_collection(canonical),
        # A word, or a letter given as text (a multiple-choice \text{(C)}), names no number.
        word=(bool(_WORD.fullmatch(canonical)) and canonical.lower() not in _NOT_WORDS)
        or ("\\text" in text and canonical.isalpha()),
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
    r"""Decide equivalence without sympy when that is certain; ``None`` means "ask sympy".

    >>> g = prepare_answer(r"\frac{1}{2}")
    >>> fast_verdict(g, prepare_answer("0.5")), fast_verdict(g, prepare_answer(r"\frac{2}{3}"))
    (True, False)
    >>> fast_verdict(g, prepare_answer(r"\frac{\sqrt{2}}{2}")), fast_verdict(g, prepare_answer("(1, 2)"))
    (False, False)
    >>> fast_verdict(g, prepare_answer(r"\sin(\pi/6)")) is None
    True
    """
    if gold.canonical and gold.canonical == answer.canonical:
        return True
    if gold.number is not None and answer.number is not None:
        if gold.number == answer.number:
            return True
        if gold.exact and answer.exact:
            return False
        # Decimals: math-verify rounds to 6 places, and reads 10% as 10 or 0.1; beyond that, different.
        scale = max(1, abs(gold.number), abs(answer.number))
        if (
            not (gold.percent or answer.percent)
            and abs(gold.number - answer.number) > DIFFERENT_TOLERANCE * scale
        ):
            return False
    if gold.value is not None and answer.value is not None:
        scale = max(1.0, abs(gold.value), abs(answer.value))
        difference = abs(gold.value - answer.value)
        if difference > DIFFERENT_TOLERANCE * scale:
            return False  # differ at one point, so differ as expressions
        if difference <= EQUAL_TOLERANCE * scale and not (gold.has_variables or answer.has_variables):
            return True
        return None
    gold_single = gold.value is not None or gold.number is not None
    answer_single = answer.value is not None or answer.number is not None
    if (gold_single and answer.collection) or (answer_single and gold.collection):
        return False  # one value against several
    if gold.word and answer.word:
        return gold.canonical.lower() == answer.canonical.lower()
    if (gold.word and answer_single and not answer.has_variables) or (
        answer.word and gold_single and not gold.has_variables
    ):
        return False  # a word is not a number
    return None


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

    def score_batch(self, samples: list[Sample], log_extra: LogExtra | None = None) -> list[float | None]:
        scores: list[float | None] = [0.0] * len(samples)
        gold_texts: list[str] = []
        answer_texts: list[str] = []
        pending: dict[Job, list[int]] = {}  # sympy questions, each asked once per batch
        for index, sample in enumerate(samples):
            solution = sample.columns.get("solution")
            gold = prepare_gold(str(solution)) if solution is not None else None
            answers = self.answers(sample.text)
            gold_texts.append(gold.text if gold else "[no gold answer]")
            answer_texts.append(" | ".join(answers)[:500] if answers else "[no answer]")
            if gold is None:
                scores[index] = None
                continue
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
                    scores[index] = 1.0 if outcome == "equal" else 0.0
        if log_extra is not None:
            log_extra(f"{self.name}/gold", gold_texts)
            log_extra(f"{self.name}/answer", answer_texts)
        return scores

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
