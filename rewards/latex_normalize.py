"""Pure-Python normalisation of LaTeX answers, so that most comparisons never need sympy.

A reward model sees the same answer written many ways: ``\\dfrac{1}{2}``, ``\\frac12``, ``\\left( 3,
\\frac{\\pi}{2} \\right)``, ``30^\\circ``, ``\\text{(C)}``, ``x = 5``. Two functions:

* :func:`repair_latex` fixes only shorthand that math-verify's parser misreads (``\\frac43``,
  ``\\frac 59``, ``\\sqrt2``, ``\\dfrac``). Its output is what is sent to the sympy worker, which does
  its own, more thorough normalisation (units, ``\\text``, ...).
* :func:`canonical_answer` goes further (drops spacing, ``\\left``/``\\right``, degrees, percent signs,
  ``\\text{}`` wrappers, an ``x =`` prefix) to give a canonical string: two answers with equal
  canonical strings are equivalent, which decides the common case in microseconds.
  :func:`strip_text_blocks` removes ``\\text{...}`` blocks altogether, to read ``5.4 \\text{ cents}``
  as the number 5.4.

Everything here is a fixed sequence of linear regex substitutions over a length-capped string.
"""

from __future__ import annotations

import re

#: Longest answer (in characters) these functions normalise; longer input is returned stripped only.
MAX_ANSWER_CHARS = 2000

_TEXT_COMMANDS = (
    r"text|textbf|textit|textrm|textsf|texttt|textnormal|mathrm|mathbf|mathit|mbox|hbox|operatorname"
)

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
_TEXT_BLOCK = re.compile(rf"\\(?:{_TEXT_COMMANDS})\s*\{{([^{{}}]*)\}}")

_CANONICAL_RULES = [
    (re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|middle)(?![a-zA-Z])"), ""),
    # Spacing commands go; a matrix row break (two backslashes, often then a space) must survive.
    (re.compile(r"(\\\\)|\\(?:displaystyle|textstyle|quad|qquad)(?![a-zA-Z])|\\[,;:! ]|~"), r"\1"),
    (re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree"), ""),  # degrees
    (re.compile(r"\\%|%|\\\$|\$"), ""),  # percent, dollars
    (re.compile(r"\\le(?![a-zA-Z])"), r"\\leq"),
    (re.compile(r"\\ge(?![a-zA-Z])"), r"\\geq"),
    (re.compile(r"\\ne(?![a-zA-Z])"), r"\\neq"),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\s+"), ""),
    (re.compile(r"([\^_])\{(\w)\}"), r"\1\2"),  # x^{2} -> x^2
    (re.compile(r"[.,;]+$"), ""),  # trailing sentence punctuation
]
# "x = 5", "k=-3", "\theta = 30": a single variable on the left of the only "=".
_ASSIGNMENT = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\w|_\{\w+\})?=(?P<value>[^=]+)$")
# "x \in [-2, 7]": the set is the answer.
_MEMBERSHIP = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)\\in(?=[(\[]|\\\{)")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)$|^([A-E])$")


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
    '(3,\\frac{\\pi}{2})'
    >>> canonical_answer(r"$x = 30^\circ$."), canonical_answer(r"\text{(C)}"), canonical_answer(r"\boxed{\boxed{7}}")
    ('30', 'C', '7')
    """
    answer = _unwrap(repair_latex(answer))
    if len(answer) > MAX_ANSWER_CHARS:
        return answer
    for _ in range(5):  # \text{} may nest (\text{\textbf{A}}); a few rounds suffice
        unwrapped = _TEXT_BLOCK.sub(r"\1", answer)
        if unwrapped == answer:
            break
        answer = unwrapped
    for pattern, replacement in _CANONICAL_RULES:
        answer = pattern.sub(replacement, answer)
    answer = _MEMBERSHIP.sub("", answer)
    assignment = _ASSIGNMENT.match(answer)
    if assignment:
        answer = assignment.group("value")
    choice = _CHOICE.match(answer)
    if choice:
        answer = (choice.group(1) or choice.group(2)).upper()
    return answer


def strip_text_blocks(answer: str) -> str:
    r"""``answer`` without its ``\text{...}`` blocks (units, words), then canonicalised.

    >>> strip_text_blocks(r"5.4 \text{ cents}"), strip_text_blocks(r"\$18.90")
    ('5.4', '18.90')
    """
    answer = _unwrap(repair_latex(answer))
    if len(answer) > MAX_ANSWER_CHARS:
        return answer
    return canonical_answer(_TEXT_BLOCK.sub(" ", answer))
