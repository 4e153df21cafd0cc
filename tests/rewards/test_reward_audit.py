"""Audit against real gold: ideal completions score 1.0, corrupted ones 0.0, on all of GSM8K test and MATH-500.

MATH-500 goal: all 500 ``\\boxed{<answer column>}`` completions get full marks against the ``solution``
column (TRL's accuracy_reward gives 492: it misparses ``\\frac43``-style shorthand in completions).
"""

from __future__ import annotations

from rewards import get_reward, parse_number
from rewards.math_rewards import fast_verdict, prepare_answer
from rewards.number_parsing import format_number


def gsm8k_parts(row: dict) -> tuple[str, str]:
    work, number = row["answer"].split("####")
    return work, number.strip()


def test_gsm8k_ideal_and_corrupted_completions(gsm8k_test_rows):
    golds = [row["answer"] for row in gsm8k_test_rows]
    ideal, announced, corrupted = [], [], []
    for row in gsm8k_test_rows:
        work, number = gsm8k_parts(row)
        ideal.append(f"{work}The answer is $\\boxed{{{number}}}$.")
        announced.append(f"{work}The answer is {number}.")
        corrupted.append(f"{work}The answer is $\\boxed{{{format_number(parse_number(number) + 1)}}}$.")
    count = len(golds)
    assert count == 1319
    for name in ("gsm8k_accuracy", "numeric_accuracy", "math_accuracy"):
        reward = get_reward(name)
        assert reward(ideal, solution=golds) == [1.0] * count, name
        assert reward(corrupted, solution=golds) == [0.0] * count, name
    for name in ("gsm8k_accuracy", "numeric_accuracy"):
        reward = get_reward(name)
        assert reward(announced, solution=golds) == [1.0] * count, name
        assert reward(golds, solution=golds) == [1.0] * count, name  # the worked solution itself ("#### N")


def test_math500_boxed_answers_get_full_marks(math500_rows):
    completions = [f"Reasoning.\nThe answer is $\\boxed{{{row['answer']}}}$." for row in math500_rows]
    scores = get_reward("math_accuracy")(completions, solution=[row["solution"] for row in math500_rows])
    failures = [row["answer"] for row, score in zip(math500_rows, scores, strict=True) if score != 1.0]
    assert len(scores) == 500 and failures == []


def test_math500_solutions_and_respelled_answers_get_full_marks(math500_rows):
    reward = get_reward("math_accuracy")
    # The worked solution as the completion, the bare answer as the gold (the reverse direction).
    scores = reward(
        [row["solution"] for row in math500_rows], solution=[row["answer"] for row in math500_rows]
    )
    assert [row["answer"] for row, s in zip(math500_rows, scores, strict=True) if s != 1.0] == []

    def respell(answer: str) -> str:  # what a model might write instead
        answer = answer.replace("\\dfrac", "\\frac").replace("\\left", "").replace("\\right", "")
        return answer.replace("\\!", "").replace(" ", "").replace("\\text{", "\\mbox{")

    completions = [f"\\boxed{{{respell(row['answer'])}}}" for row in math500_rows]
    scores = reward(completions, solution=[row["solution"] for row in math500_rows])
    assert [row["answer"] for row, s in zip(math500_rows, scores, strict=True) if s != 1.0] == []


def test_math500_another_problems_answer_scores_zero(math500_rows):
    count = len(math500_rows)
    others = []
    for index, row in enumerate(math500_rows):
        offset = 1  # the next row whose answer is not the same one written differently ("x=5" is 5)
        while fast_verdict(
            prepare_answer(math500_rows[(index + offset) % count]["answer"]), prepare_answer(row["answer"])
        ):
            offset += 1
        others.append(math500_rows[(index + offset) % count]["answer"])
    completions = [f"The answer is $\\boxed{{{other}}}$." for other in others]
    scores = get_reward("math_accuracy")(completions, solution=[row["solution"] for row in math500_rows])
    false_positives = [
        (row["answer"], other) for row, other, s in zip(math500_rows, others, scores, strict=True) if s != 0.0
    ]
    assert false_positives == []
