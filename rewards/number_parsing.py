"""Reading a number out of a short answer string, exactly and without sympy.

Two readers, for two situations:

* :func:`parse_number` is *lenient*: it accepts the decorations people and small models put around a
  number (``$1,234.50``, ``50%``, ``18 dollars``, ``x = 5``, ``\\frac{3}{4}``, ``**18**``) as long as the
  string holds exactly one number and no arithmetic around it. GSM8K-style and arithmetic rewards use it.
* :func:`plain_number` accepts only a string that *is* a number, spelt without ambiguity (``-3``,
  ``1,000``, ``0.5``, ``3/4``, ``\\frac{3}{4}``). The math reward's fast path uses it: there ``5x``,
  ``2^{10}`` or ``32, 349`` must never be read as a number.

Both read values as :class:`fractions.Fraction`, so ``14.0 == 14`` and ``0.5 == 1/2`` compare exactly.
:func:`normalize_number` turns the lenient reading into one canonical string.

Model output is untrusted: inputs are length-capped and no number may have more than
:data:`MAX_DIGITS` digits, so nothing here can be made slow or memory-hungry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

#: Longest string either reader looks at; longer strings are not "a short answer".
MAX_CHARS = 1000
#: Most digits a single number may have (Python refuses int() of >4300 digits anyway).
MAX_DIGITS = 100

# One number token: optional sign, digits with optional thousands separators, optional decimals,
# optional "/denominator". A sign only counts when it is not a binary minus ("5-3" reads 5 and 3), and
# a number glued to a letter or another digit ("5x", "x2") is not a number token.
_NUMBER_TOKEN = re.compile(
    r"""
    (?<![\w.])                                  # not glued to a word or a decimal point on the left
    (?P<sign>[-+]?)
    (?P<int>\d{1,3}(?:,\d{3})+(?![\d,])          # 1,234
      |\d{1,3}(?:[ \u00a0\u2009\u202f]\d{3})+(?!\d)  # 1 234 (space or thin space)
      |\d+)?                                   # 1234 (may be absent: ".5")
    (?P<frac>\.\d+)?                            # .5
    (?:\s*/\s*(?P<den>\d+))?                    # /4 (a plain fraction 3/4)
    (?![\w]|\.\d)                               # not glued to a word on the right
    """,
    re.VERBOSE,
)

# LaTeX and typographic decorations that never change a number's value.
_DECORATIONS = [
    (re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|textnormal)\s*\{([^{}]*)\}"), r" \1 "),
    (re.compile(r"\\[dt]?frac\s*\{\s*([-+]?[\d.,]+)\s*\}\s*\{\s*([\d.,]+)\s*\}"), r" \1/\2 "),
    (re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)"), r" \1/\2 "),  # \frac34 shorthand
    (re.compile(r"\{,\}"), ","),  # 1{,}000
    (re.compile(r"(?<=\d),\\!\s*(?=\d{3})"), ","),  # 1,\!000 (MATH style)
    (re.compile(r"(?<=\d)\\[,;:! ]\s*(?=\d{3})"), ""),  # 1\,000 thin-space thousands
    (re.compile(r"\\(?:left|right|[,;:!]|quad|qquad|displaystyle)|\\ |~"), " "),
    (re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree"), " "),  # degrees
    (re.compile(r"\\?%|\\\$|\$|[€£¥₹]|\\euro|\\pounds"), " "),  # percent and currency
    (re.compile(r"\*\*|__"), " "),  # markdown bold
    (re.compile(r"[−–—]"), "-"),  # unicode minus and dashes
    (re.compile(r"\\(?:boxed|fbox)\s*\{([^{}]*)\}"), r" \1 "),
]

# Characters that mean "this is an expression, not a single number" when left over.
_OPERATORS = re.compile(r"[-+*/^_=<>×÷\\{}|]")
# A leading "x =", "n:" or "answer =" (the value is what follows).
_ASSIGNMENT = re.compile(r"^.*=\s*")

# What plain_number accepts: a whole string that is one number in a spelling math-verify reads the
# same way (checked by tests/rewards/test_reward_agreement.py). No whitespace inside: "32, 349" is a
# pair and "1 000" is 1*000 to math-verify, so neither is a plain number.
_PLAIN = re.compile(
    r"""
    (?P<sign>[-+]?)
    (?:
        \\frac\{(?P<fsign>-?)(?P<fnum>\d+)\}\{(?P<fden>\d+)\}   # \frac{3}{4}, \frac{-3}{4}
      | (?P<num>\d+)/(?P<den>\d+)                              # 3/4
      | (?P<int>[1-9]\d{0,2}(?:,\d{3})+|\d+)?(?P<dec>\.\d+)?    # 1,234  1234  0.5  .5  1,234.5
    )
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class PlainNumber:
    """A number read from a string that is nothing but that number."""

    value: Fraction
    decimal: bool
    """Written with a decimal point (math-verify then compares rounded to 6 places, not exactly)."""
    digits: int
    """How many digits were written (math-verify reads decimals as 15-digit floats)."""


def _to_fraction(sign: str, integer: str | None, decimals: str | None, den: str | None) -> Fraction | None:
    """Build a Fraction from regex groups, refusing absurdly long digit strings."""
    integer = re.sub(r"[,\s]", "", integer or "")
    decimals = decimals or ""
    if not integer and not decimals:
        return None
    if len(integer) + len(decimals) > MAX_DIGITS or len(den or "") > MAX_DIGITS:
        return None
    value = Fraction(f"{integer or '0'}{decimals}")
    if den is not None:
        if int(den) == 0:
            return None
        value /= int(den)
    return -value if sign == "-" else value


def parse_number(text: str) -> Fraction | None:
    """Read the single number in a short answer, ignoring units, currency and LaTeX decoration.

    Returns ``None`` when there is no number, more than one, or arithmetic around it (``2^{10}``,
    ``3 + 4``). An equation is read from its right-hand side (``2 + 12 = 14`` reads 14), as graders do.

    >>> parse_number("$1,234.50")
    Fraction(2469, 2)
    >>> parse_number("The answer is 18 dollars.")
    Fraction(18, 1)
    >>> parse_number(r"\\frac{3}{4}"), parse_number("-3"), parse_number("50%")
    (Fraction(3, 4), Fraction(-3, 1), Fraction(50, 1))
    >>> parse_number("x^2") is None, parse_number("18 or 20") is None, parse_number("5x") is None
    (True, True, True)
    >>> parse_number("1 000 000"), parse_number("32, 349") is None, parse_number("2.5kg") is None
    (Fraction(1000000, 1), True, True)
    """
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    for pattern, replacement in _DECORATIONS:
        text = pattern.sub(replacement, text)
    text = _ASSIGNMENT.sub("", text)  # keep what follows the last "="
    tokens = [m for m in _NUMBER_TOKEN.finditer(text) if m.group("int") or m.group("frac")]
    if len(tokens) != 1:
        return None
    token = tokens[0]
    rest = text[: token.start()] + " " + text[token.end() :]
    if _OPERATORS.search(rest):
        return None
    return _to_fraction(token.group("sign"), token.group("int"), token.group("frac"), token.group("den"))


def plain_number(text: str) -> PlainNumber | None:
    """Read ``text`` as a number only if the whole string is one, spelt without ambiguity.

    Accepted: a sign, digits with optional comma thousands separators (``1,234``: groups of exactly
    three, no space, not after a leading 0: math-verify reads ``0,125`` as 0.125), decimals (``0.5``, ``.5``), ``a/b`` and ``\\frac{a}{b}`` of integers.

    >>> plain_number("1,000").value, plain_number(r"\\frac{1}{2}").value, plain_number("-.25").value
    (Fraction(1000, 1), Fraction(1, 2), Fraction(-1, 4))
    >>> [plain_number(text) for text in ("5x", "2^{10}", "32, 349", "12,34", "1 000", "3.")]
    [None, None, None, None, None, None]
    >>> plain_number("0,125") is None
    True
    """
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    match = _PLAIN.fullmatch(text)
    if match is None:
        return None
    sign = match.group("sign")
    if match.group("fnum") is not None:
        sign = "-" if (sign == "-") != (match.group("fsign") == "-") else ""
        value = _to_fraction(sign, match.group("fnum"), None, match.group("fden"))
    elif match.group("num") is not None:
        value = _to_fraction(sign, match.group("num"), None, match.group("den"))
    else:
        value = _to_fraction(sign, match.group("int"), match.group("dec"), None)
    if value is None:
        return None
    return PlainNumber(value, decimal=match.group("dec") is not None, digits=sum(c.isdigit() for c in text))


def format_number(value: Fraction) -> str:
    """Canonical text of a number: ``14``, ``-0.5``, ``1234.5``, or ``1/3`` when no finite decimal exists.

    >>> format_number(Fraction(29, 2)), format_number(Fraction(1, 3)), format_number(Fraction(-14))
    ('14.5', '1/3', '-14')
    """
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den != 1:  # 1/3 has no finite decimal expansion
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = abs(value.numerator) * 10**places // value.denominator
    sign = "-" if value < 0 else ""
    digits = str(scaled).rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def normalize_number(text: str) -> str | None:
    """Canonical string of the number in ``text`` (see :func:`parse_number`), or ``None``.

    Two answers denote the same number exactly when their normalised strings are equal.

    >>> normalize_number("$1,000.00"), normalize_number("14.0"), normalize_number(r"\\frac{1}{2}")
    ('1000', '14', '0.5')
    >>> normalize_number("no number here") is None
    True
    """
    value = parse_number(text)
    return None if value is None else format_number(value)
