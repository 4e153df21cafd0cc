"""Adversarial completions: every reward returns a score (never raises) within its time bound."""

from __future__ import annotations

import contextlib
import math
import random
import time

import pytest

from rewards import available_rewards, get_reward

TIMEOUT = 1.0
PARAMS = {
    "soft_overlong": {"max_completion_length": 100, "cache_length": 20},
    "cosine_length": {"max_length": 100, "accuracy_params": {"timeout_seconds": TIMEOUT}},
    "math_accuracy": {"timeout_seconds": TIMEOUT},
}


# reasoning_gym's `metadata` (tagged JSON) names a task whose scorer then reads the answer.
class FinishedGame:
    """A rollout's environment, as TRL passes it (`environments`): environment_reward asks it for the outcome."""

    def get_reward(self) -> float:
        return 1.0


COLUMNS = {
    "environments": FinishedGame(),
    "solution": r"\frac{1}{2}",
    "numbers": [1, 2, 3],
    "target": 6,
    "metadata": '{"source_dataset": "basic_arithmetic"}',
    "tests": "assert True",
    "test_cases": [{"input": "", "output": ""}],
}

NASTY_TEXTS = [
    "",
    " \n\t ",
    "x" * 1_000_000,
    "\\boxed{" * 100_000,
    "}" * 100_000 + "\\boxed{1}",
    "\\boxed{" * 300 + "1" + "}" * 300,  # deeply nested boxes
    "\\boxed{\\boxed{}}",
    "\\boxed{{{{{{",
    r"\boxed{9^{9^{9^{9}}}}",
    r"\boxed{(10^{10})!}",
    r"\boxed{100000000000!}",
    "\\boxed{" + "\\frac{1}{" * 60 + "2" + "}" * 60 + "}",  # deeply nested fractions
    "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "\\boxed{" + "1" * 5000 + "}",
    "\\boxed{" + "\\sqrt{" * 500 + "2" + "}" * 500 + "}",
    "<answer>" * 100_000,
    "<think>" * 50_000 + "</think>" * 50_000,
    "<answer>" + "(" * 10_000 + "</answer>",
    "<answer>" + "9" * 10_000 + "</answer>",
    "<answer>" + "1/" * 2000 + "0</answer>",
    "####" * 100_000,
    "the answer is " * 50_000,
    "1," * 300_000,
    "\\" * 100_000,
    "$" * 100_000,
    bytes(range(256)).decode("latin-1") * 100,
    b"\xff\xfe\x00garbage\x80".decode("utf-8", errors="replace"),
    "\x00" * 1000 + "\\boxed{1}",
    "\ud800\udfff lone surrogates \\boxed{\ud800}",
    "١٢٣ ٤ \\boxed{٣}",  # Arabic-Indic digits
    "🤖" * 10_000,
    "\\boxed{\\text{" + "a" * 3000 + "}}",
    "\\boxed{\\begin{pmatrix}" + "1&" * 1000 + "1\\end{pmatrix}}",
    "\\boxed{x^{y^{z^{w^{v}}}}}",
    "\\boxed{\\int_0^\\infty e^{-x^2} dx}",
    "\\boxed{\\sum_{n=1}^{\\infty} \\frac{1}{n^2}}",
]
# Completions in every shape TRL or a caller might hand over, including broken ones.
NASTY_COMPLETIONS = [
    *NASTY_TEXTS,
    None,
    [],
    [{}],
    [{"role": "assistant", "content": None}],
    [{"role": "assistant", "content": [{"type": "text", "text": "\\boxed{1}"}, {"type": "image"}]}],
    {"content": "\\boxed{1}"},
    b"\\boxed{1}",
    12345,
]


def build(name: str):
    return get_reward(name, **PARAMS.get(name, {}))


@pytest.mark.parametrize("name", available_rewards())
def test_nasty_completions_get_scores_not_exceptions(name):
    reward = build(name)
    reward.warmup()
    count = len(NASTY_COMPLETIONS)
    began = time.monotonic()
    scores = reward(
        completions=NASTY_COMPLETIONS,
        prompts=NASTY_COMPLETIONS,
        completion_ids=[[1, 2, 3]] * count,
        **{key: [value] * count for key, value in COLUMNS.items()},
    )
    took = time.monotonic() - began
    assert len(scores) == count
    assert all(isinstance(s, float) and math.isfinite(s) for s in scores), scores
    assert took < 30 + 12 * (TIMEOUT + 1.5), took  # a handful of sympy timeouts, each bounded


def test_nasty_golds_and_columns_do_not_raise():
    count = 6
    golds = [
        "",
        "\\boxed{",
        "\\boxed{9^{9^{9^{9}}}}",
        "x" * 100_000,
        "#### " + "9" * 5000,
        "\\boxed{\\boxed{}}",
    ]
    completions = [r"\boxed{1}"] * count
    for name in ("math_accuracy", "gsm8k_accuracy", "numeric_accuracy"):
        scores = build(name)(completions, solution=golds)
        assert len(scores) == count and all(s is None or s in (0.0, 1.0) for s in scores)
    countdown = build("countdown")
    weird = [None, "abc", [1, "x"], [10**100], 5, [[1]]]
    scores = countdown(["<answer>1+2</answer>"] * count, numbers=weird, target=[3, None, "x", 3, 3, 3])
    assert scores == [0.0, 0.0, 0.0, 0.1, 0.0, 0.0]  # only [10**100] is a valid (if unreachable) column


ALPHABET = [
    "\\boxed{",
    "\\fbox{",
    "{",
    "}",
    "\\{",
    "\\}",
    "\\frac",
    "\\dfrac",
    "\\sqrt",
    "\\left(",
    "\\right)",
    "^",
    "_",
    "\\text{",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "####",
    "The answer is ",
    "Answer:",
    "$",
    "\\$",
    "%",
    "\\%",
    ",",
    ".",
    "-",
    "+",
    "*",
    "/",
    "=",
    "(",
    ")",
    "[",
    "]",
    "\n",
    " ",
    "\\\\",
    "&",
    "x",
    "e",
    "i",
    "\\pi",
    "\\infty",
    "\\circ",
    "0",
    "1",
    "7",
    "42",
    "1,000",
    "3.14",
    "−",
    "×",
    "÷",
    "é",
    "\x00",
    "\\",
]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))


def test_seeded_fuzz_all_rewards():
    """A small, deterministic fuzz loop (no hypothesis dependency): random LaTeX-ish soup."""
    rng = random.Random(1234)
    texts = [random_text(rng) for _ in range(1000)]
    golds = [random_text(rng) if rng.random() < 0.5 else str(rng.randint(-5, 50)) for _ in texts]
    ranges = {
        "repetition_penalty": (-1.0, 0.0),
        "soft_overlong": (-1.0, 0.0),
        "cosine_length": (-1.0, 1.0),
    }
    for name in available_rewards():
        reward = build(name)
        sample = texts if name not in ("math_accuracy", "cosine_length") else texts[:300]
        count = len(sample)
        began = time.monotonic()
        scores = reward(
            sample,
            prompts=golds[:count],
            solution=golds[:count],
            numbers=[[1, 2, 3]] * count,
            target=[6] * count,
            metadata=['{"source_dataset": "basic_arithmetic"}'] * count,
            tests=["assert True"] * count,
            test_cases=[[{"input": "", "output": ""}]] * count,
        )
        low, high = ranges.get(name, (0.0, 1.0))
        assert all(s is None or (isinstance(s, float) and low <= s <= high) for s in scores), (name, scores)
        assert time.monotonic() - began < 60, name


def test_seeded_fuzz_of_the_parsing_helpers():
    """The pure-Python parsers on thousands of random strings: only their documented outcomes."""
    from rewards import canonical_answer, extract_answer, normalize_number
    from rewards.countdown import EquationError, parse_equation
    from rewards.math_rewards import fast_verdict, prepare_answer

    rng = random.Random(99)
    previous = prepare_answer("1")
    for _ in range(3000):
        text = random_text(rng)
        for style in ("auto", "boxed", "answer_tag", "gsm8k", "answer_is", "last_number"):
            answer = extract_answer(text, style)
            assert answer is None or isinstance(answer, str)
        assert normalize_number(text) is None or isinstance(normalize_number(text), str)
        assert isinstance(canonical_answer(text), str)
        prepared = prepare_answer(text)
        assert fast_verdict(prepared, previous) in (True, False, None)
        assert fast_verdict(prepared, prepared) in (True, None)  # never "different from itself"
        previous = prepared
        with contextlib.suppress(EquationError):
            parse_equation(text)


@pytest.mark.parametrize("name", available_rewards())
def test_an_empty_batch_scores_nothing(name):
    columns = {key: [] for key in COLUMNS}
    assert build(name)([], prompts=[], completion_ids=[], **columns) == []
