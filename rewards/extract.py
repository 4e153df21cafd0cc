r"""Finding the final answer in a completion.

Rewards and evaluation code share these functions so that a number scored in training is read the
same way at evaluation time. Each *style* is one place a final answer can be written:

=============== ============================================== ==========================
style           what it reads                                  example
=============== ============================================== ==========================
``boxed``       contents of ``\boxed{...}`` / ``\fbox{...}``   ``so \boxed{\frac{1}{2}}``
``answer_tag``  contents of ``<answer>...</answer>``           ``<answer>42</answer>``
``gsm8k``       the rest of the line after ``####``            ``#### 1,234``
``answer_is``   after "the (final) answer is" / "Answer:"      ``The answer is 18.``
``last_number`` the last number in the text                    ``... = 14``
=============== ============================================== ==========================

:data:`PREFERENCE_ORDER` lists them from most to least explicit; ``style="auto"`` uses the first
style present in the text. Within a style, *every* occurrence is returned by :func:`find_answers`
(a reward can then refuse completions that hedge with two different answers);
:func:`extract_answer` returns the last one, the final answer.

All scanning is linear in the text length (1 MB of adversarial text is fine): braces are matched
in one pass and tags are found with ``str.find``, never with backtracking regexes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Styles from most to least explicit: the order ``style="auto"`` tries them in.
PREFERENCE_ORDER: tuple[str, ...] = ("boxed", "answer_tag", "gsm8k", "answer_is", "last_number")
ANSWER_STYLES = frozenset(PREFERENCE_ORDER)

_BOXED_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_GSM8K_LINE = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS = re.compile(
    r"(?:\banswer\s+is\b|\banswer\s*[:=])[ \t]*:?[ \t]*([^\n]{0,200})",
    re.IGNORECASE,
)
# End of a sentence: a period (not a decimal point) or other punctuation.
_SENTENCE_END = re.compile(r"\.(?!\d)|[;!?](?=\s|$)|\s+(?:because|since|so|which)\b", re.IGNORECASE)
# A number in running text: thousands by comma, (thin) space or LaTeX (1\,000, 1,\!000), decimals (also
# ".4"), a fraction a/b. A unit may follow it glued ("2.5kg"); a digit may not, nor a dot or comma
# glued to a digit ("12,34" may be 12.34 or a list: no number is read from it).
_LAST_NUMBER = re.compile(
    r"(?<![\w.,!])(?<!\\,)(?P<sign>[-−–]?)(?:\\?\$|[€£¥₹])?(?=\.?\d)"
    r"(?P<number>(?:\d{1,3}(?:(?:,\\!|,|\\,|[ \u00a0\u2009\u202f])\d{3})+(?![\d,])|\d+)?"
    r"(?:\.\d+)?(?:\s*/\s*\d+)?)(?![\d.,]\d|\d|\\[,!])"
)
_SEPARATORS = re.compile(r"\\!|\\,|[ \u00a0\u2009\u202f]")


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of every ``{`` to the index of its ``}``, in one pass (escaped ``\\{`` skipped)."""
    matches: dict[int, int] = {}
    stack: list[int] = []
    for match in re.finditer(r"[{}]", text):
        index = match.start()
        backslashes = 0
        while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
            backslashes += 1
        if backslashes % 2:  # \{ and \} are literal braces in LaTeX
            continue
        if text[index] == "{":
            stack.append(index)
        elif stack:
            matches[stack.pop()] = index
    return matches


def find_boxed(text: str) -> list[str]:
    r"""Contents of every outermost ``\boxed{...}`` (or ``\fbox{...}``, ``\boxed 5``), in order.

    A box nested in another (``\boxed{\boxed{5}}``) is part of the outer one's content; an unclosed
    ``\boxed{`` is ignored.

    >>> find_boxed(r"first \boxed{1}, then \boxed{\frac{1}{2}} and \boxed 3.")
    ['1', '\\frac{1}{2}', '3']
    >>> find_boxed(r"\boxed{\boxed{5}} \boxed{unclosed")
    ['\\boxed{5}']
    """
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    braces = _matching_braces(text)
    found: list[str] = []
    position = 0
    for command in _BOXED_COMMAND.finditer(text):
        if command.start() < position:  # inside a box already taken
            continue
        start = command.end()
        while start < len(text) and text[start] in " \t":
            start += 1
        if start < len(text) and text[start] == "{":
            end = braces.get(start)
            if end is None:
                continue
            found.append(text[start + 1 : end])
            position = end + 1
        elif start > command.end():  # "\boxed 5": the box holds one token
            token = re.match(r"[^\s$]+", text[start : start + 200])
            if token:
                found.append(token.group(0).rstrip(".,"))
                position = start + token.end()
    return found


def find_answer_tags(text: str, tag: str = "answer") -> list[str]:
    """Contents of every ``<answer>...</answer>`` block, in order (an unclosed one is ignored).

    >>> find_answer_tags("<think>hmm</think><answer> 42 </answer>")
    [' 42 ']
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    found: list[str] = []
    position = 0
    while True:
        start = text.find(opening, position)
        if start < 0:
            return found
        end = text.find(closing, start + len(opening))
        if end < 0:
            return found
        found.append(text[start + len(opening) : end])
        position = end + len(closing)


def find_gsm8k_answers(text: str) -> list[str]:
    """What follows each ``####`` marker, to the end of its line (GSM8K's answer format).

    >>> find_gsm8k_answers("She makes 9 * 2 = $18.\\n#### 18")
    ['18']
    """
    if "####" not in text:
        return []
    return [m.group(1).strip() for m in _GSM8K_LINE.finditer(text) if m.group(1).strip()]


def find_answer_is(text: str) -> list[str]:
    """The phrase after each "the answer is" / "final answer:" / "Answer:", up to the end of its sentence.

    >>> find_answer_is("So the final answer is $18.50. Done.")
    ['$18.50']
    >>> find_answer_is("Answer: 14")
    ['14']
    """
    found: list[str] = []
    position = 0
    while (match := _ANSWER_IS.search(text, position)) is not None:
        phrase = match.group(1)
        end = _SENTENCE_END.search(phrase)
        if end:
            phrase = phrase[: end.start()]
        # Resume right after this sentence: the next "answer is" may be on the same line.
        position = max(match.start(1) + len(phrase), match.end(0) - len(match.group(1)) + 1)
        phrase = phrase.strip().strip("*").strip()
        if phrase:
            found.append(phrase)
    return found


def find_last_number(text: str) -> list[str]:
    """The last number written in ``text`` (as a one-element list), or ``[]``.

    >>> find_last_number("2 + 2 * 6 = 14."), find_last_number("It weighs 2.5kg."), find_last_number("is .4")
    (['14'], ['2.5'], ['.4'])
    >>> find_last_number("1,000.99m² in all"), find_last_number("costs 1 000 euros"), find_last_number("32, 349")
    (['1,000.99'], ['1000'], ['349'])
    >>> find_last_number("a loss of -$5"), find_last_number("it is −3")
    (['-5'], ['-3'])
    """
    matches = list(_LAST_NUMBER.finditer(text))
    if not matches:
        return []
    sign, number = matches[-1].group("sign", "number")
    return [("-" if sign else "") + _SEPARATORS.sub("", number)]


_FINDERS = {
    "boxed": find_boxed,
    "answer_tag": find_answer_tags,
    "gsm8k": find_gsm8k_answers,
    "answer_is": find_answer_is,
    "last_number": find_last_number,
}


def _styles(style: str | Sequence[str]) -> tuple[str, ...]:
    if style == "auto":
        return PREFERENCE_ORDER
    styles = (style,) if isinstance(style, str) else tuple(style)
    unknown = [s for s in styles if s not in ANSWER_STYLES]
    if unknown:
        raise ValueError(f"unknown answer style(s) {unknown}; choose from {list(PREFERENCE_ORDER)} or 'auto'")
    return styles


def find_answers(text: str, style: str | Sequence[str] = "auto") -> tuple[str | None, list[str]]:
    """All answers written in the first of ``style`` (a style, a sequence of styles, or "auto") present.

    Returns ``(style_found, answers)``, or ``(None, [])`` when no style matches.

    >>> find_answers(r"#### 5, or rather \\boxed{6}")
    ('boxed', ['6'])
    >>> find_answers("The answer is 5. No wait, the answer is 6.", ["boxed", "answer_is"])
    ('answer_is', ['5', '6'])
    """
    if not isinstance(text, str):
        return None, []
    for name in _styles(style):
        answers = _FINDERS[name](text)
        if answers:
            return name, answers
    return None, []


def extract_answer(text: str, style: str | Sequence[str] = "auto") -> str | None:
    r"""The final answer of ``text``: the last answer of the first style present (see :func:`find_answers`).

    >>> extract_answer(r"We get \boxed{3} and finally \boxed{\frac{1}{2}}.")
    '\\frac{1}{2}'
    >>> extract_answer("The answer is 1,234 dollars.", "answer_is")
    '1,234 dollars'
    >>> extract_answer("no answer here", "boxed") is None
    True
    """
    _, answers = find_answers(text, style)
    return answers[-1].strip() if answers else None
