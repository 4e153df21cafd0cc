"""Answer extraction and normalisation: the helpers evaluation code shares with the rewards."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from rewards import (
    PREFERENCE_ORDER,
    canonical_answer,
    extract_answer,
    find_answers,
    normalize_number,
    parse_number,
)
from rewards.extract import find_answer_is, find_answer_tags, find_boxed, find_gsm8k_answers, find_last_number
from rewards.number_parsing import format_number, plain_number


def test_preference_order_is_documented_and_used():
    assert PREFERENCE_ORDER == ("boxed", "answer_tag", "gsm8k", "answer_is", "last_number")
    text = "The answer is 3.\n#### 4\n<answer>5</answer> so \\boxed{6}, finally 7"
    assert extract_answer(text) == "6"
    assert extract_answer(text, "answer_tag") == "5"
    assert extract_answer(text, "gsm8k") == "4"
    assert extract_answer(text, "answer_is") == "3"
    assert extract_answer(text, "last_number") == "7"
    assert extract_answer(text, ["answer_is", "boxed"]) == "3"
    assert find_answers("nothing", "auto") == (None, [])
    with pytest.raises(ValueError, match="unknown answer style"):
        extract_answer(text, "latex")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{5}", ["5"]),
        (r"\boxed{\frac{1}{2}} and \boxed{3}", [r"\frac{1}{2}", "3"]),
        (r"\boxed{\boxed{5}}", [r"\boxed{5}"]),
        (r"\boxed{\{1, 2\}}", [r"\{1, 2\}"]),  # escaped braces are literal
        (r"\fbox{7}", ["7"]),
        (r"\boxed 42.", ["42"]),
        (r"\boxed{unclosed", []),
        (r"\boxed{ok} \boxed{unclosed", ["ok"]),
        (r"}}} \boxed{1}", ["1"]),
        (r"\boxedx{1}", []),
        ("no box", []),
    ],
)
def test_find_boxed(text, expected):
    assert find_boxed(text) == expected


def test_other_finders():
    assert find_answer_tags("<answer>1</answer> <answer>\n2\n</answer> <answer>3") == ["1", "\n2\n"]
    assert find_gsm8k_answers("work\n#### 1,234\nmore\n####   \n") == ["1,234"]
    assert find_answer_is("The final answer is $18.50. The Answer: 7 because 3+4") == ["$18.50", "7"]
    assert find_answer_is("answer is\n5") == []  # the answer must be on the same line
    assert find_last_number("x = 5-3, y = -2.5 and 1,000 apples") == ["1,000"]
    assert find_last_number("from -4") == ["-4"]
    assert find_last_number("abc") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("14", "14"),
        ("14.0", "14"),
        ("14.50", "14.5"),
        ("-3", "-3"),
        ("−3", "-3"),  # unicode minus
        ("1,000", "1000"),
        ("1,234,567.5", "1234567.5"),
        ("$1,000", "1000"),
        (r"\$18.90", "18.9"),
        ("50%", "50"),
        (r"50\%", "50"),
        ("18 dollars", "18"),
        ("The answer is 18.", "18"),
        ("**18**", "18"),
        ("x = 5", "5"),
        ("2 + 12 = 14", "14"),
        (r"\frac{3}{4}", "0.75"),
        (r"\dfrac{1}{3}", "1/3"),
        (r"\frac34", "0.75"),
        ("3/4", "0.75"),
        (".5", "0.5"),
        (r"1{,}000", "1000"),
        (r"1,\!000", "1000"),
        (r"\text{18 apples}", "18"),
        (r"\boxed{18}", "18"),
        ("30^\\circ", "30"),
        ("(-3)", "-3"),
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "x^2",
        "2^{10}",
        "18 or 20",
        "5x",
        "3 + 4",
        "1/0",
        "1" * 200,
        "1e5",
        "twenty-one 21",
        "x" * 2000,
    ],
)
def test_parse_number_refuses_non_numbers(text):
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("text", "value", "decimal"),
    [
        ("1,000", 1000, False),
        ("-1,234,567", -1234567, False),
        (r"\frac{2}{4}", Fraction(1, 2), False),
        (r"-\frac{3}{4}", Fraction(-3, 4), False),
        (r"\frac{-3}{4}", Fraction(-3, 4), False),
        ("3/4", Fraction(3, 4), False),
        ("0.5", Fraction(1, 2), True),
        (".4", Fraction(2, 5), True),
        ("-.25", Fraction(-1, 4), True),
        ("1,000.5", Fraction(2001, 2), True),
        ("+7", 7, False),
        ("007", 7, False),
    ],
)
def test_plain_number_reads(text, value, decimal):
    number = plain_number(text)
    assert number is not None and number.value == value and number.decimal is decimal


@pytest.mark.parametrize(
    "text",
    [
        "5 apples",
        "2^{10}",
        "32, 349",  # a pair to math-verify
        "12,34",  # not thousands groups
        "0,125",  # a decimal comma to math-verify
        "1 000",  # 1*000 to math-verify
        "6 8",
        "3.",  # math-verify cannot parse it
        "- 3",
        "5x",
        r"10\%",
        r"\frac{1.5}{2}",
        "1,0000",
        "",
        "1" * 200,
    ],
)
def test_plain_number_declines(text):
    assert plain_number(text) is None


def test_format_number():
    assert [format_number(Fraction(n, d)) for n, d in [(1, 8), (-1, 20), (7, 3), (10, 1)]] == [
        "0.125",
        "-0.05",
        "7/3",
        "10",
    ]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\frac12", r"\frac{1}{2}"),
        (r"\frac 59", r"\frac{5}{9}"),
        (r"\frac9{19}", r"\frac{9}{19}"),
        (r"11\sqrt2", r"11\sqrt{2}"),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})"),
        (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty, 2)\cup(3, \infty)"),
        (r"\begin{pmatrix} 1/5 \\ -18/5 \end{pmatrix}", r"\begin{pmatrix}1/5\\-18/5\end{pmatrix}"),
        ("x = 5", "x=5"),
        ("5x - 7y + 11z + 4 = 0", "5x-7y+11z+4=0"),
        (r"2 \pi", r"2\pi"),
        (r"\$18.90", "18.90"),
        (r"\boxed{\boxed{7}}", "7"),
        ("$\\frac{1}{2}$", r"\frac{1}{2}"),
        (r"x^{2}", "x^2"),
        (r"a \le b", r"a\leq b"),
        ("10%", r"10\%"),
        ("1 +  2", "1+2"),
        (r"\displaystyle \frac{1}{2}", r"\frac{1}{2}"),
    ],
)
def test_canonical_answer(left, right):
    assert canonical_answer(left) == canonical_answer(right) == right


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("6 8", "68"),  # text between numbers never runs the digits together
        (r"6 \text{ and } 8", "68"),
        ("32, 349", "32,349"),  # a pair is not a number with a thousands separator
        ("1 000", "1000"),
        (r"1\,000", "1000"),
        ("4 . 5", "4.5"),
        (r"10,\!080", "10, 080"),
        (r"11,\! 111", r"11, \! 111"),
        (r"30^\circ", "30"),  # degrees: math-verify reads "58,500^\circ" differently from "58,500"
        (r"10\%", "10"),  # 10% is also 0.1 to math-verify
        (r"\text{Evelyn}", "Evelyn"),
        (r"\text{(C)}", "C"),
        ("3.", "3"),
        (r"\boxed{1} + \boxed{2}", "1} + \\boxed{2"),
    ],
)
def test_canonical_answer_keeps_what_can_matter(left, right):
    assert canonical_answer(left) != canonical_answer(right)


@pytest.mark.parametrize(
    ("text", "last"),
    [
        ("2 + 2 * 6 = 14.", "14"),
        ("It weighs 2.5kg.", "2.5"),  # a unit glued to a decimal does not cut it
        ("the area is 1,000.99m² in all", "1,000.99"),
        ("so it is .4", ".4"),
        ("costs 1 000 euros", "1000"),  # space-separated thousands
        ("costs 1\u202f000\u202f000 euros", "1000000"),
        ("pairs 32, 349", "349"),  # a comma and a space separate two numbers
        ("items 12,34", None),  # 12.34 or a list: declined
        ("x = -3/4", "-3/4"),
        ("version 1.2.3", None),
        ("no digits", None),
    ],
)
def test_last_number_fallback(text, last):
    assert find_last_number(text) == ([] if last is None else [last])


def test_extraction_is_linear_on_adversarial_megabytes():
    nasty = [
        "\\boxed{" * 200_000,
        "{" * 1_000_000,
        "<answer>" * 120_000,
        "####" * 250_000,
        "the answer is " * 70_000,
        "1," * 500_000,
        "\\" * 1_000_000,
        ("(" * 50 + "\\frac{" * 50) * 5000,
    ]
    for text in nasty:
        began = time.perf_counter()
        for style in PREFERENCE_ORDER:
            extract_answer(text, style)
        normalize_number(text)
        canonical_answer(text)
        assert time.perf_counter() - began < 3.0, text[:30]
