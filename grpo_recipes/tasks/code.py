"""The code generator: one-line Python functions over lists, numbers and strings, each with its tests.

A problem asks for a named function (``Write a Python function `count_above(xs)` that returns how many
numbers in the list `xs` are greater than 4.``); its row holds the tests as a list of assertions (column
``tests``, what the ``code_tests`` reward runs) and a reference solution (column ``solution``, what the
reward audit submits as the ideal completion). Each task family is a one-line body with a constant or two
drawn from a range, so problems differ in their constants and the held-out split shares no question with
training. Expected values come from running the reference body here, on our own inputs: this module runs
no model output.

Small enough for a 135M-parameter model: every body is one ``return`` line over a list or string.

Example:
    >>> row = code_functions(1, seed=0)[0]
    >>> sorted(row)
    ['entry_point', 'question', 'solution', 'tests']
    >>> row["tests"][0].startswith(f"assert {row['entry_point']}(")
    True
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewards.typecheck import FieldError

Inputs = Callable[[random.Random], tuple]


def _ints(rng: random.Random) -> tuple:
    return ([rng.randint(-5, 12) for _ in range(rng.randint(0, 10))],)


def _words(rng: random.Random) -> tuple:
    words = [
        "".join(rng.choice("abcdeilmnorst") for _ in range(rng.randint(1, 6)))
        for _ in range(rng.randint(0, 5))
    ]
    return (" ".join(words),)


def _text(rng: random.Random) -> tuple:
    return ("".join(rng.choice("aabcdeiouxyz ") for _ in range(rng.randint(0, 12))),)


def _number(rng: random.Random) -> tuple:
    return (rng.randint(-20, 50),)


@dataclass(frozen=True)
class Family:
    """One kind of problem: a function name and arguments, what it must do, and a reference body; `{k}` and
    `{c}` in the text and body are the problem's constants."""

    name: str
    args: str
    text: str
    body: str
    inputs: Inputs
    constants: dict[str, tuple[Any, ...]]


FAMILIES: tuple[Family, ...] = (
    Family(
        "count_above",
        "xs",
        "returns how many numbers in the list `xs` are greater than {k}",
        "return sum(1 for x in xs if x > {k})",
        _ints,
        {"k": tuple(range(0, 12))},
    ),
    Family(
        "sum_multiples",
        "xs",
        "returns the sum of the numbers in the list `xs` that are multiples of {k}",
        "return sum(x for x in xs if x % {k} == 0)",
        _ints,
        {"k": tuple(range(2, 10))},
    ),
    Family(
        "scale",
        "xs",
        "returns a new list with every number in the list `xs` multiplied by {k}",
        "return [x * {k} for x in xs]",
        _ints,
        {"k": tuple(range(2, 13))},
    ),
    Family(
        "add_to_all",
        "xs",
        "returns a new list with {k} added to every number in the list `xs`",
        "return [x + {k} for x in xs]",
        _ints,
        {"k": tuple(range(1, 16))},
    ),
    Family(
        "keep_below",
        "xs",
        "returns the numbers in the list `xs` that are less than {k}, in order",
        "return [x for x in xs if x < {k}]",
        _ints,
        {"k": tuple(range(0, 12))},
    ),
    Family(
        "first_n",
        "xs",
        "returns the first {k} elements of the list `xs` (all of them if it is shorter)",
        "return xs[:{k}]",
        _ints,
        {"k": tuple(range(1, 9))},
    ),
    Family(
        "count_value",
        "xs",
        "returns how many times the number {k} appears in the list `xs`",
        "return xs.count({k})",
        _ints,
        {"k": tuple(range(-3, 10))},
    ),
    Family(
        "power",
        "n",
        "returns the number `n` raised to the power {k}",
        "return n ** {k}",
        _number,
        {"k": tuple(range(2, 6))},
    ),
    Family(
        "clamp_max",
        "n",
        "returns the number `n`, or {k} if `n` is greater than {k}",
        "return min(n, {k})",
        _number,
        {"k": tuple(range(0, 31, 2))},
    ),
    Family(
        "count_char",
        "s",
        "returns how many times the character '{c}' appears in the string `s`",
        "return s.count({c!r})",
        _text,
        {"c": tuple("abcdeiouxyz")},
    ),
    Family(
        "replace_char",
        "s",
        "returns the string `s` with every '{c}' replaced by '{d}'",
        "return s.replace({c!r}, {d!r})",
        _text,
        {"c": tuple("aeiou"), "d": tuple("xyzqw")},
    ),
    Family(
        "repeat",
        "s",
        "returns the string `s` repeated {k} times",
        "return s * {k}",
        _text,
        {"k": tuple(range(2, 6))},
    ),
    Family(
        "long_words",
        "s",
        "returns the words of the string `s` (split on spaces) that have more than {k} letters, in order",
        "return [w for w in s.split() if len(w) > {k}]",
        _words,
        {"k": tuple(range(1, 6))},
    ),
    Family(
        "join_words",
        "s",
        "returns the words of the string `s` (split on spaces) joined by '{c}'",
        "return {c!r}.join(s.split())",
        _words,
        {"c": tuple("-_,+/.;:|")},
    ),
    Family(
        "ends_with",
        "s",
        "returns True if the string `s` ends with '{c}', else False",
        "return s.endswith({c!r})",
        _text,
        {"c": tuple("abcdeiouxyz")},
    ),
)
FAMILY_NAMES = tuple(f.name for f in FAMILIES)


def _problems(families: tuple[Family, ...]) -> list[tuple[Family, dict[str, Any]]]:
    """Every (family, constants) pair: one distinct problem each."""
    problems = []
    for family in families:
        combos: list[dict[str, Any]] = [{}]
        for key, values in family.constants.items():
            combos = [{**combo, key: value} for combo in combos for value in values]
        problems += [(family, combo) for combo in combos]
    return problems


def _chosen_families(families: str) -> tuple[Family, ...]:
    """The families named by the `families` param: ``all``, or comma-separated names."""
    return FAMILIES if families == "all" else tuple(f for f in FAMILIES if f.name in families.split(","))


def _question(family: Family, constants: dict[str, Any]) -> str:
    return f"Write a Python function `{family.name}({family.args})` that {family.text.format(**constants)}."


def _reference(family: Family, constants: dict[str, Any]) -> tuple[str, Callable[..., Any]]:
    """The reference solution's source and the function it defines (our own code, run here)."""
    solution = f"def {family.name}({family.args}):\n    {family.body.format(**constants)}\n"
    namespace: dict[str, Any] = {}
    exec(compile(solution, f"<reference {family.name}>", "exec"), namespace)
    return solution, namespace[family.name]


def _row(
    family: Family, constants: dict[str, Any], rng: random.Random, tests_per_problem: int
) -> dict[str, Any]:
    """A problem's row. Its tests tell it apart from every other problem of its family: for each other
    constant, some test's expected value differs from what that problem's solution returns (where random
    inputs can show it), so a solution to a neighbouring problem never passes them all."""
    solution, function = _reference(family, constants)
    siblings = [_reference(family, other)[1] for _, other in _problems((family,)) if other != constants]
    candidates, seen = [], set()
    for _ in range(100 * tests_per_problem):
        args = family.inputs(rng)
        call = f"{family.name}({', '.join(repr(a) for a in args)})"
        if call not in seen:
            seen.add(call)
            expected = function(*args)
            candidates.append(
                (call, expected, {i for i, other in enumerate(siblings) if other(*args) != expected})
            )
    # Greedy cover: each test the one that tells the most remaining siblings apart (ties: drawn order).
    chosen, left = [], set(range(len(siblings)))
    while len(chosen) < tests_per_problem and candidates:
        best = max(candidates, key=lambda c: len(c[2] & left))
        if not best[2] & left:
            break
        chosen.append(best)
        candidates.remove(best)
        left -= best[2]
    chosen += candidates[: tests_per_problem - len(chosen)]
    return {
        "question": _question(family, constants),
        "entry_point": family.name,
        "tests": [f"assert {call} == {expected!r}" for call, expected, _ in chosen],
        "solution": solution,
    }


def code_functions(
    n: int,
    seed: int,
    families: str = "all",
    tests_per_problem: int = 4,
    exclude: set[str] | None = None,
) -> list[dict[str, Any]]:
    """``n`` distinct function-writing problems, each with `tests_per_problem` assertions.

    `families`: ``all`` or comma-separated names of `FAMILY_NAMES`; `exclude` removes given questions
    (a held-out split).

    >>> row = code_functions(1, seed=3, families="scale")[0]
    >>> row["question"]
    'Write a Python function `scale(xs)` that returns a new list with every number in the list `xs` multiplied by 5.'
    >>> row["solution"]
    'def scale(xs):\\n    return [x * 5 for x in xs]\\n'
    """
    chosen = _chosen_families(families)
    rng = random.Random(seed)
    problems = [
        (family, constants)
        for family, constants in _problems(chosen)
        if _question(family, constants) not in (exclude or set())
    ]
    if n > len(problems):
        raise ValueError(
            f"code_functions: asked for {n} distinct problems, but these families allow only {len(problems)} "
            f"(after {len(exclude or ())} held out)."
        )
    return [_row(family, constants, rng, tests_per_problem) for family, constants in rng.sample(problems, n)]


def code_functions_capacity(families: str, **_: Any) -> int:
    """How many distinct problems these families allow (every parameter of `code_functions` is passed in).

    >>> code_functions_capacity(families="scale,repeat")  # 11 factors, 4 repeat counts
    15
    """
    chosen = _chosen_families(families)
    return len(_problems(chosen))


def check_code_functions(params: dict[str, Any]) -> None:
    """What the annotations of `code_functions` cannot say; `params` has every parameter, type-checked.

    >>> check_code_functions({"families": "scale,sort", "tests_per_problem": 4})
    Traceback (most recent call last):
    rewards.typecheck.FieldError: families: unknown family 'sort'; allowed: all, or a comma-separated list of count_above, sum_multiples, scale, add_to_all, keep_below, first_n, count_value, power, clamp_max, count_char, replace_char, repeat, long_words, join_words, ends_with.
    """
    if params["families"] != "all":
        for name in params["families"].split(","):
            if name not in FAMILY_NAMES:
                raise FieldError(
                    "families",
                    f"unknown family {name!r}; allowed: all, or a comma-separated list of {', '.join(FAMILY_NAMES)}.",
                )
    if not 1 <= params["tests_per_problem"] <= 20:
        raise FieldError("tests_per_problem", f"must be between 1 and 20, got {params['tests_per_problem']}.")
