"""Fuzz: random numbers written in many notations are read back as the same value, or not at all.

Never a third outcome: ``2.5kg`` must not read 2, ``32, 349`` must not read 32349, ``3,5`` must not
read 35. Each reader is tried where the rewards use it: :func:`rewards.parse_number` on a whole
answer, the last-number fallback inside a sentence, and the math fast path's :func:`plain_number`.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from rewards import get_reward, parse_number
from rewards.extract import find_last_number
from rewards.latex_normalize import canonical_answer
from rewards.number_parsing import plain_number


def _digits(value: Fraction, places: int) -> tuple[str, str, str]:
    """Sign, integer digits and decimal digits of ``value`` (exactly ``places`` decimals)."""
    scaled = abs(value) * 10**places
    assert scaled.denominator == 1
    text = str(scaled.numerator).rjust(places + 1, "0")
    integer, decimals = (text[:-places], text[-places:]) if places else (text, "")
    return ("-" if value < 0 else ""), integer, decimals


def _grouped(integer: str, separator: str) -> str:
    groups = []
    while len(integer) > 3:
        integer, tail = integer[:-3], integer[-3:]
        groups.insert(0, tail)
    return separator.join([integer, *groups])


NOTATIONS = {
    "plain": lambda s, i, d: f"{s}{i}{'.' + d if d else ''}",
    "comma thousands": lambda s, i, d: f"{s}{_grouped(i, ',')}{'.' + d if d else ''}",
    "space thousands": lambda s, i, d: f"{s}{_grouped(i, ' ')}{'.' + d if d else ''}",
    "thin space thousands": lambda s, i, d: f"{s}{_grouped(i, chr(0x202F))}{'.' + d if d else ''}",
    "latex thin space": lambda s, i, d: f"{s}{_grouped(i, chr(92) + ',')}{'.' + d if d else ''}",
    "latex comma": lambda s, i, d: f"{s}{_grouped(i, ',' + chr(92) + '!')}{'.' + d if d else ''}",
    "leading dot": lambda s, i, d: f"{s}{'' if i == '0' else i}{'.' + d if d else ''}",
    "trailing zeros": lambda s, i, d: f"{s}{i}.{d}00",
    # "4,617" is thousands to every reader (and to math-verify), so decimal commas get 1, 2 or 4 places.
    "decimal comma": lambda s, i, d: f"{s}{i}{',' + d if d else ''}{'0' if len(d) == 3 else ''}",
    "unit glued": lambda s, i, d: f"{s}{i}{'.' + d if d else ''}kg",
    "unit spaced": lambda s, i, d: f"{s}{i}{'.' + d if d else ''} kg",
    "latex unit": lambda s, i, d: f"{s}{i}{'.' + d if d else ''}" + r"\text{ kg}",
    "percent": lambda s, i, d: f"{s}{i}{'.' + d if d else ''}%",
    "latex percent": lambda s, i, d: f"{s}{i}{'.' + d if d else ''}" + r"\%",
    "dollars": lambda s, i, d: f"{s}${i}{'.' + d if d else ''}",
    "latex dollars": lambda s, i, d: f"{s}" + r"\$" + f"{i}{'.' + d if d else ''}",
    "math mode": lambda s, i, d: f"${s}{i}{'.' + d if d else ''}$",
    "bold": lambda s, i, d: f"**{s}{i}{'.' + d if d else ''}**",
    "unicode minus": lambda s, i, d: f"{'−' if s else ''}{i}{'.' + d if d else ''}",
    "plus sign": lambda s, i, d: f"{s or '+'}{i}{'.' + d if d else ''}",
}


def _cases(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        places = rng.choice([0, 0, 1, 2, 3])
        magnitude = rng.choice([1, 10, 1000, 10**6, 10**9])
        value = Fraction(rng.randint(0, magnitude * 10**places), 10**places) * rng.choice([1, 1, -1])
        sign, integer, decimals = _digits(value, places)
        for name, write in NOTATIONS.items():
            yield name, value, write(sign, integer, decimals)


def _fraction_value(text: str) -> Fraction:
    return Fraction(text.replace(",", "").replace(" ", "")) if "/" not in text else Fraction(text)


@pytest.mark.parametrize("seed", range(3))
def test_readers_give_the_value_written_or_decline(seed):
    wrong = []
    read = {"parse_number": 0, "last_number": 0, "plain_number": 0}
    for notation, value, written in _cases(seed, 300):
        whole = parse_number(written)
        if whole is not None:
            read["parse_number"] += 1
            if whole != value:
                wrong.append(("parse_number", notation, written, whole))
        found = find_last_number(f"So the total is {written}. Done")
        if found:
            number = parse_number(found[0])
            read["last_number"] += number is not None
            # The fallback may read only the last number of a list, but never a different number.
            if number is not None and number != value and found[0] not in written.split(" ")[-1:]:
                wrong.append(("last_number", notation, written, found[0]))
        plain = plain_number(canonical_answer(written))
        if plain is not None:
            read["plain_number"] += 1
            if plain.value != value:
                wrong.append(("plain_number", notation, written, plain.value))
    assert not wrong, wrong[:20]
    assert min(read.values()) > 1000, read  # most notations are read, not declined


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("It weighs 2.5kg.", "2.5", 1.0),
        ("It weighs 2.5kg.", "2", 0.0),
        ("The area is 1,000.99m².", "1000.99", 1.0),
        ("The area is 1,000.99m².", "1000", 0.0),
        ("so it is .4", "0.4", 1.0),
        ("It costs 1 000 euros.", "1000", 1.0),
        ("The pair is 32, 349", "32349", 0.0),
        ("It is 3,5 litres", "35", 0.0),
        ("It is 3,5 litres", "5", 0.0),
    ],
)
def test_numeric_accuracy_last_number_fallback(completion, gold, expected):
    assert get_reward("numeric_accuracy")([completion], solution=[gold]) == [expected]
