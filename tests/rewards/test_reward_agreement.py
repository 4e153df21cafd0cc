r"""math_accuracy's fast path against math-verify, on every real gold and many perturbed answers.

The fast path (``rewards.math_rewards.fast_verdict``) may only decide where it gives math-verify's
verdict. For every MATH-500 and GSM8K test gold, answers are generated the way models and other
people write them -- reformatted right answers, off-by-one, swapped order, units, lists, text between
numbers, decimal commas, space or comma-space thousands, another problem's answer -- and wherever the
reward decides without sympy, its verdict must equal the slow path's (math-verify in the worker),
asked the same question.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from rewards.math_rewards import MathAccuracy, prepare_answer, prepare_gold
from rewards.number_parsing import format_number, plain_number
from rewards.worker_pool import POOL, Job

pytestmark = pytest.mark.slow

_INTEGER = re.compile(r"(?<![\d.])\d+(?![\d.])")


def _shift_first_integer(text: str, by: int) -> str | None:
    match = _INTEGER.search(text)
    if match is None:
        return None
    return text[: match.start()] + str(max(0, int(match.group()) + by)) + text[match.end() :]


def perturbations(gold: str, other: str) -> set[str]:
    r"""Answers to compare with ``gold``: right ones written differently, and wrong ones that look close.

    >>> sorted({"1 000", "1, 000", "1,000", "1001", "999"} - perturbations("1000", "7"))
    []
    """
    out = {
        gold,  # as written
        f"${gold}$",
        f"\\boxed{{{gold}}}",
        f"x = {gold}",
        f"y={gold}",
        f" {gold} ",
        f"{gold}.",
        f"{gold} \\text{{ cm}}",
        f"{gold}cm",
        f"{gold}^\\circ",
        f"\\${gold}",
        f"{gold}\\%",
        f"{gold}, {gold}",
        f"\\{{{gold}\\}}",
        f"({gold})",
        other,  # another problem's answer
        f"{gold} \\text{{ and }} {other}",
        gold.replace("\\frac", "\\dfrac"),
        gold.replace(" ", ""),
        gold.replace(",", ", "),
        gold.replace(", ", ","),
        gold.replace("\\!", ""),
        gold.replace(",\\!", ""),
        gold.replace("\\left", "").replace("\\right", ""),
        " ".join(gold),  # spaces everywhere: "1 0 0 0" must not become 1000
    }
    for by in (1, -1, 10):
        shifted = _shift_first_integer(gold, by)
        if shifted is not None:
            out.add(shifted)
    items = [item.strip() for item in gold.strip("()[]").split(",")]
    if len(items) > 1:  # swapped order, and a missing item
        bracket = (gold[0], gold[-1]) if gold[:1] in "([" and gold[-1:] in ")]" else ("", "")
        out.add(bracket[0] + ", ".join(reversed(items)) + bracket[1])
        out.add(bracket[0] + ", ".join(items[:-1]) + bracket[1])
    number = plain_number(prepare_answer(gold).canonical)
    if number is not None:
        value = number.value
        digits = str(abs(value.numerator)) if value.denominator == 1 else None
        out |= {
            format_number(value),
            format_number(value) + ".0",
            format_number(value + 1),
            format_number(value / 10),
            format_number(value * 100) + "\\%",
            f"{float(value):.6f}",
            f"{float(value):.2f}",
            f"{float(value + Fraction(1, 10**7)):.7f}",
            f"\\frac{{{value.numerator}}}{{{value.denominator}}}",
            f"{value.numerator}/{value.denominator}",
            f"0, {format_number(value)}",
        }
        if digits is not None and len(digits) > 3:  # thousands: comma, comma-space, space, decimal comma
            head, tail = digits[:-3], digits[-3:]
            sign = "-" if value < 0 else ""
            out |= {
                f"{sign}{head},{tail}",
                f"{sign}{head}, {tail}",
                f"{sign}{head} {tail}",
                f"{sign}{head}\\,{tail}",
            }
        if digits is not None and len(digits) >= 2:  # "6 8" and "6, 8" for 68; "3,5" for 3.5
            out |= {f"{digits[0]} {digits[1:]}", f"{digits[0]}, {digits[1:]}", f"{digits[:-1]},{digits[-1]}"}
        if value.denominator != 1:
            out.add(format_number(value).replace(".", ","))
    return {answer for answer in out if answer.strip()}


def _golds(math500_rows: list[dict], gsm8k_test_rows: list[dict]) -> list[str]:
    golds = [row["answer"] for row in math500_rows]
    golds += [row["answer"].split("####")[-1].strip() for row in gsm8k_test_rows]
    return golds


def test_fast_path_agrees_with_math_verify(math500_rows, gsm8k_test_rows):
    golds = _golds(math500_rows, gsm8k_test_rows)
    reward = MathAccuracy()
    pairs: dict[Job, float] = {}  # the slow path's question -> the fast path's answer
    unparsed_golds = set()
    total = decided_total = 0
    gold_jobs = [Job(prepare_gold(gold).latex, ()) for gold in golds]
    for gold_text, outcome in zip(golds, POOL.run(gold_jobs, timeout=30, workers=2), strict=True):
        if outcome != "equal":
            unparsed_golds.add(gold_text)
            # Plain-number golds are never sent to this check, so math-verify must parse every one.
            assert prepare_gold(gold_text).number is None, (
                f"math-verify cannot parse the plain number {gold_text!r}"
            )
    for index, gold_text in enumerate(golds):
        if gold_text in unparsed_golds:
            continue  # the reward scores None for every answer: nothing for the fast path to decide
        gold = prepare_gold(gold_text)
        for answer in perturbations(gold_text, golds[(index + 1) % len(golds)]):
            total += 1
            decided = reward._decide(gold, [answer])
            if not isinstance(decided, Job):
                decided_total += 1
                pairs[Job(gold.latex, (prepare_answer(answer).latex,))] = decided
    jobs = list(pairs)
    try:
        outcomes = POOL.run(jobs, timeout=30, workers=2)
    finally:
        POOL.shutdown()  # later tests expect one worker
    disagreements = [
        (job.gold, job.answers[0], pairs[job], outcome)
        for job, outcome in zip(jobs, outcomes, strict=True)
        if outcome in ("equal", "different") and pairs[job] != (1.0 if outcome == "equal" else 0.0)
    ]
    undecided_by_math_verify = sum(outcome not in ("equal", "different") for outcome in outcomes)
    summary = (
        f"{len(golds)} golds ({len(unparsed_golds)} math-verify cannot parse), {total} pairs, "
        f"{decided_total} decided by the fast path ({len(pairs)} distinct questions, "
        f"{sum(v == 1.0 for v in pairs.values())} equal), {len(disagreements)} disagreements, "
        f"{undecided_by_math_verify} timeouts/errors in math-verify"
    )
    print(summary)
    assert not disagreements, summary + "\n" + "\n".join(map(repr, disagreements[:40]))
    assert decided_total > 0.25 * total  # the fast path still decides a good share of even these pairs
    assert undecided_by_math_verify < 0.01 * len(pairs)
