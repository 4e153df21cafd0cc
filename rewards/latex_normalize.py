r"""Pure-Python normalisation of LaTeX answers: only rewrites that never change what an answer means.

A reward model sees the same answer written many ways: ``\dfrac{1}{2}``, ``\frac12``, ``\left( 3,
\frac{\pi}{2} \right)``, ``30^\circ``, ``$7$``. Two functions:

* :func:`repair_latex` fixes only shorthand that math-verify's parser misreads (``\frac43``,
  ``\frac 59``, ``\sqrt2``, ``\dfrac``). Its output is what the sympy worker parses.
* :func:`canonical_answer` also drops what never carries meaning -- math delimiters, ``\boxed{}``
  wrappers, ``\left``/``\right``, spacing commands, dollar signs -- to give a
  canonical string: two answers with equal canonical strings are equivalent to math-verify too,
  which decides the common "same answer, other spacing" case in microseconds.

What is deliberately *kept*, because removing it could make two different answers look alike:
whitespace next to a letter, digit, comma or dot (``6 8`` is not ``68``, ``1 000`` is not 1000,
``32, 349`` is a pair where ``32,349`` is a number, ``4 . 5`` is not 4.5), ``\!`` (``10,\!080``
is a number), degree signs (``58,500^\circ`` is not ``58,500``), percent signs (``10\%`` is also
0.1 to math-verify), ``\text{}`` blocks (units or words), and trailing punctuation. Each of these
was found to change math-verify's reading (tests/rewards/test_reward_agreement.py).

Everything here is a fixed sequence of linear regex substitutions over a length-capped string.
"""

from __future__ import annotations

import re

#: Longest answer (in characters) these functions normalise; longer input is returned stripped only.
MAX_ANSWER_CHARS = 2000

# Shorthand repairs, applied first (order matters: \dfrac -> \frac before the \frac rules).
_REPAIRS = [
    (re.compile(r"\\[dt]frac(?![a-zA-Z])"), r"\\frac"),
    (re.compile(r"\\[dt]binom(?![a-zA-Z])"), r"\\binom"),
    # \frac43 -> \frac{4}{3}; \frac 59 -> \frac{5}{9}
    (re.compile(r"\\frac\s*(\w)\s*(\w)"), r"\\frac{\1}{\2}"),
    # \frac{9}7 / \frac9{19} -> braces on the bare side
    (re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\w)"), r"\\frac\1{\2}"),
    (re.compile(r"\\frac\s*(\w)\s*(\{)"), r"\\frac{\1}\2"),
    # \sqrt2 -> \sqrt{2}; \sqrt x -> \sqrt{x}
    (re.compile(r"\\sqrt\s*(\w)"), r"\\sqrt{\1}"),
]

_WRAPPERS = re.compile(r"^\\(?:boxed|fbox)\s*\{(.*)\}$", re.DOTALL)
_MATH_DELIMITERS = re.compile(r"^(?:\$\$?|\\\(|\\\[)(.*?)(?:\$\$?|\\\)|\\\])$", re.DOTALL)

_CANONICAL_RULES = [
    (re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|middle)(?![a-zA-Z])"), ""),
    # Spacing commands become plain spaces; a matrix row break (two backslashes) must survive, and
    # "\!" stays: math-verify reads "10,\!080" as a number and "10, 080" as a pair.
    (re.compile(r"(\\\\)|\\(?:displaystyle|textstyle|quad|qquad)(?![a-zA-Z])|\\[,;: ]|~"), r"\1 "),
    (re.compile(r"\\\$|\$"), ""),  # dollars
    (re.compile(r"(?<!\\)%"), r"\\%"),  # one spelling of percent
    (re.compile(r"\\le(?![a-zA-Z])"), r"\\leq"),
    (re.compile(r"\\ge(?![a-zA-Z])"), r"\\geq"),
    (re.compile(r"\\ne(?![a-zA-Z])"), r"\\neq"),
    (re.compile(r"([\^_])\{(\w)\}"), r"\1\2"),  # x^{2} -> x^2
    # Whitespace: one space between two letters, digits, commas, dots or "\!" ("6 8", "32, 349",
    # "4 . 5", "10, \!080" all differ from their spaceless forms to math-verify); none elsewhere.
    (re.compile(r"\s+"), " "),
    (re.compile(r"(?<![\w.,!]) | (?![\w.,\\])|(?<!,) (?=\\)"), ""),
    # TeX ends a command name at the space after it: "\cup (" is "\cup(" (but "\pi r" is not "\pir").
    (re.compile(r"(\\[a-zA-Z]+) (?![a-zA-Z])"), r"\1"),
    (re.compile(r"^ | $"), ""),
]


def repair_latex(answer: str) -> str:
    r"""Fix LaTeX shorthand that parsers misread, keeping everything else as written.

    >>> repair_latex(r"\dfrac43 + \sqrt2")
    '\\frac{4}{3} + \\sqrt{2}'
    >>> repair_latex(r"\frac{270}7\text{ degrees}")
    '\\frac{270}{7}\\text{ degrees}'
    """
    answer = answer.strip()
    if len(answer) > MAX_ANSWER_CHARS:
        return answer
    for pattern, replacement in _REPAIRS:
        answer = pattern.sub(replacement, answer)
    return answer


def _balanced(text: str) -> bool:
    """Whether the braces in ``text`` balance (so ``\\boxed{1} + \\boxed{2}`` is not one wrapper)."""
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _unwrap(answer: str) -> str:
    """Remove math delimiters and \\boxed wrappers around the whole answer (nested ones too)."""
    for _ in range(10):  # bounded: each round removes one layer
        before = answer
        answer = answer.strip()
        match = _MATH_DELIMITERS.match(answer) or _WRAPPERS.match(answer)
        if match and _balanced(match.group(1)):
            answer = match.group(1)
        if answer == before:
            break
    return answer.strip()


def canonical_answer(answer: str) -> str:
    r"""A canonical string for ``answer``: equal canonical strings mean equivalent answers.

    >>> canonical_answer(r"\left( 3, \dfrac{\pi}{2} \right)")
    '(3, \\frac{\\pi}{2})'
    >>> canonical_answer(r"$\$30$"), canonical_answer(r"\boxed{\boxed{7}}"), canonical_answer("x = 5")
    ('30', '7', 'x=5')
    >>> canonical_answer("6 8"), canonical_answer("32, 349"), canonical_answer("1\\,000")
    ('6 8', '32, 349', '1 000')
    """
    answer = _unwrap(repair_latex(answer))
    if len(answer) > MAX_ANSWER_CHARS:
        return answer
    for pattern, replacement in _CANONICAL_RULES:
        answer = pattern.sub(replacement, answer)
    return answer
