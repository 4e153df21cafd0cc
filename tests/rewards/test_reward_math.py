"""math_accuracy: equivalence semantics, answer formats, gold forms, logging, and parsing the gold once."""

from __future__ import annotations

import pytest

from rewards import get_reward
from rewards.math_rewards import VERDICTS, fast_verdict, prepare_answer, prepare_gold
from rewards.worker_pool import POOL


@pytest.fixture(scope="module")
def math_accuracy():
    reward = get_reward("math_accuracy", timeout_seconds=5)
    reward.warmup()
    return reward


def score(reward, answer: str, gold: str) -> float | None:
    return reward([f"Some reasoning.\nThe answer is $\\boxed{{{answer}}}$."], solution=[gold])[0]


# Equivalent spellings decided in-process, without sympy: equal canonical forms, or plain numbers.
FAST_EQUAL = [
    (r"\frac{1}{3}", r"\frac13"),
    (r"\frac{1}{3}", r"\dfrac{1}{3}"),
    (r"\frac{1}{2}", "0.5"),
    (r"\frac{1}{2}", ".5"),
    ("1000", "1,000"),
    ("14", "14.0"),
    ("-3", r"\frac{-3}{1}"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})"),
    (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty, 2)\cup(3, \infty)"),
    (r"\$18.90", "18.90"),
    ("x = 5", "5"),
    ("5", "k=5"),
    (r"6 - 5i", "6-5i"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt3}{2}"),
    (r"\begin{pmatrix} 1/5 \\ -18/5 \end{pmatrix}", r"\begin{pmatrix}1/5\\-18/5\end{pmatrix}"),
]
# Different answers decided in-process: plain numbers that differ exactly, or by more than 10^-6.
FAST_DIFFERENT = [
    (r"\frac{1}{3}", r"\frac{2}{3}"),
    (r"\frac{1}{3}", "0.33"),
    ("12", "13"),
    ("1000", "100"),
    ("1,000", "1,001"),
    ("x = 5", "6"),
]
# Equivalent, but only math-verify can tell (or the fast path is not sure).
SYMPY_EQUAL = [
    ("x^2+2x+1", "(x+1)^2"),
    (r"10\%", "0.1"),
    (r"\{1,2\}", "2, 1"),
    (r"\text{(C)}", "c"),
    (r"\frac{639}{40}", r"15\frac{39}{40}"),  # a mixed number
    (r"\sin(\pi/6)", r"\frac{1}{2}"),
    (r"11,\! 111,\! 111,\! 100", "11111111100"),
    (r"30^\circ", "30"),
    (r"\text{(C)}", "C"),
    (r"\text{Evelyn}", "Evelyn"),
    (r"5.4 \text{ cents}", "5.4"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
    (r"2\sqrt{5}", r"\sqrt{20}"),
    (r"x \in [-2,7]", "[-2, 7]"),
    (r"\frac{1}{3}", "0.333333"),  # math-verify rounds a decimal to 6 places
    ("0.125", "0,125"),  # a decimal comma, to math-verify
    ("2.5", "2.5kg"),
]
# Different answers, and the false positives an earlier fast path let through.
DIFFERENT = [
    (r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt{2}}{2}"),
    (r"(3, \frac{\pi}{2})", r"\frac{\pi}{2}"),
    ("2k+2", "2k"),
    (r"\text{Evelyn}", r"\text{Navin}"),
    (r"\text{(C)}", "3"),
    ("6-5i", "6+5i"),
    ("(0,9)", "[0,9]"),
    ("x^2+2x+1", "(x-1)^2"),
    ("5", ""),  # an empty box
    (r"6 \text{ and } 8", "68"),  # text between two numbers
    ("6, 8", "68"),
    ("32, 349", "32349"),  # a comma and a space: a pair, not thousands
    ("32349", "32, 349"),
    ("1000", "1 000"),  # 1*000 to math-verify
    ("4.5", "4 . 5"),
    ("58,500", "x = 58,500"),
    ("3", "3."),
    ("x = 2", "y = 2"),
]


@pytest.mark.parametrize(("gold", "answer"), FAST_DIFFERENT)
def test_different_numbers_are_decided_without_sympy(math_accuracy, gold, answer):
    requests = POOL.counters["requests"]
    assert score(math_accuracy, answer, gold) == 0.0
    assert fast_verdict(prepare_answer(gold), prepare_answer(answer)) is False
    assert POOL.counters["requests"] == requests


@pytest.mark.parametrize(("gold", "answer"), FAST_EQUAL)
def test_equivalent_answers_are_decided_without_sympy(math_accuracy, gold, answer):
    score(math_accuracy, gold, gold)  # a gold that is not a plain number is checked once: does it parse?
    requests = POOL.counters["requests"]
    assert score(math_accuracy, answer, gold) == 1.0
    assert fast_verdict(prepare_answer(gold), prepare_answer(answer)) is True
    assert POOL.counters["requests"] == requests


@pytest.mark.parametrize(("gold", "answer"), SYMPY_EQUAL)
def test_equivalent_answers_that_need_sympy(math_accuracy, gold, answer):
    assert fast_verdict(prepare_answer(gold), prepare_answer(answer)) is None
    assert score(math_accuracy, answer, gold) == 1.0


@pytest.mark.parametrize(("gold", "answer"), DIFFERENT)
def test_different_answers_score_zero(math_accuracy, gold, answer):
    assert score(math_accuracy, answer, gold) == 0.0


def test_final_answer_rules(math_accuracy):
    gold = [r"The area is $\boxed{12}$."] * 7
    completions = [
        r"\boxed{12}",
        r"first \boxed{12}, checking: \boxed{12.0}",  # the same answer twice
        r"\boxed{12} or maybe \boxed{13}",  # hedging with two different answers
        r"\boxed{\boxed{12}}",
        "The answer is 12.",  # no box: math_accuracy needs \boxed{}
        r"\boxed{}",
        r"\boxed{1} \boxed{2} \boxed{3} \boxed{4} \boxed{12}",
    ]
    assert math_accuracy(completions, solution=gold) == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_answer_tag_format():
    reward = get_reward("math_accuracy", answer_format="answer_tag")
    completions = [
        "<think>6 * 2</think><answer>12</answer>",
        "<think>...</think><answer>so \\boxed{12}</answer>",
        "\\boxed{12}",  # no <answer> block
        "<answer>12</answer><answer>13</answer>",
    ]
    assert reward(completions, solution=["12"] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_gold_forms_and_unscorable_golds(math_accuracy):
    completions = [r"\boxed{4}"] * 6
    golds = ["4", r"... so $\boxed{4}$.", "2 + 2 = 4\n#### 4", "", r"\boxed{}", None]
    assert math_accuracy(completions, solution=golds) == [1.0, 1.0, 1.0, None, None, None]


def test_a_gold_math_verify_cannot_parse_scores_none_not_zero(math_accuracy):
    """An unscorable row must not train toward "everything is wrong": no verdict, even for the gold itself."""
    logged = {}
    completions = [r"\boxed{\text{}}", r"\boxed{4}", "no box"]
    scores = math_accuracy(
        completions,
        solution=[r"\text{}"] * 3,
        log_extra=lambda column, values: logged.update({column: values}),
    )
    assert scores == [None, None, None]
    assert logged["math_accuracy/gold"] == [r"[unparseable gold] \text{}"] * 3


def test_conversational_completions_and_log_extra(math_accuracy):
    logged = {}
    completions = [
        [{"role": "assistant", "content": r"\boxed{\frac{1}{2}}"}],
        [{"role": "assistant", "content": "hi"}],
    ]
    scores = math_accuracy(completions, solution=["0.5", "0.5"], log_extra=lambda c, v: logged.update({c: v}))
    assert scores == [1.0, 0.0]
    assert logged == {
        "math_accuracy/gold": ["0.5", "0.5"],
        "math_accuracy/answer": [r"\frac{1}{2}", "[no answer]"],
    }


def test_gold_is_parsed_once_per_group(math_accuracy):
    """G completions share their prompt's gold: prepared once here, parsed once by sympy in the worker."""
    prepare_gold.cache_clear()
    VERDICTS.clear()
    gold = r"The answer is $\boxed{w^2 + 2w + 1}$."  # unique to this test, so no worker cache hit
    answers = [r"(w+1)^2", r"(1+w)^2", r"(w+1)(w+1)", r"w^2+2w+1", r"(w-1)^2", r"(w+1)^2", r"w(w+2)+1", "w"]
    before = POOL.worker_stats()[0]["gold_parses"]
    scores = math_accuracy([f"\\boxed{{{a}}}" for a in answers], solution=[gold] * len(answers))
    assert scores == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert prepare_gold.cache_info().misses == 1
    assert POOL.worker_stats()[0]["gold_parses"] == before + 1


def test_sympy_verdicts_are_cached_across_calls(math_accuracy):
    completions, solution = [r"\boxed{(v+1)^2}"], ["v^2+2v+1"]
    assert math_accuracy(completions, solution=solution) == [1.0]
    requests = POOL.counters["requests"]
    assert math_accuracy(completions, solution=solution) == [1.0]
    assert POOL.counters["requests"] == requests


def test_duplicate_answers_in_a_batch_are_verified_once(math_accuracy):
    VERDICTS.clear()
    requests = POOL.counters["requests"]
    assert math_accuracy([r"\boxed{(u+1)^2}"] * 8, solution=["u^2+2u+1"] * 8) == [1.0] * 8
    assert POOL.counters["requests"] == requests + 2  # does the gold parse; then the answer


def test_overlong_answers_score_zero_without_sympy(math_accuracy):
    requests = POOL.counters["requests"]
    assert math_accuracy(["\\boxed{" + "x+" * 5000 + "1}"], solution=["1"]) == [0.0]
    assert POOL.counters["requests"] == requests
