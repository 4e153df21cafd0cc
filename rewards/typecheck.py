"""Check plain data (a recipe read from YAML, keyword arguments) against type annotations.

One validator for every place a recipe value lands: the recipe's sections (dataclasses), reward parameters
(a reward's ``__init__`` signature), generator parameters (a function signature) and the fields of TRL's
GRPOConfig. A bad value raises :class:`FieldError`, which names the key path and says what is allowed and
what was given, so a caller only puts the file name in front to get a one-line error.

Conventions, the same everywhere:

* an integer is a fine float, and so is a numeric string such as ``1e-6`` (YAML 1.1 reads an exponent
  without a dot as a string); either is converted to a float;
* ``true`` and ``false`` are not integers;
* NaN and infinity are not numbers (``.nan``, ``.inf``, ``"inf"``): no setting here is meant to be either;
* an annotation this module does not know (a callable, a protocol, a string naming an unimportable class)
  accepts anything: the check is there to catch mistakes early, never to reject what the consumer takes.

Standard library only: the torch-free ``rewards`` package uses it, and so does ``grpo_recipes``.
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
import enum
import inspect
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

_NAMES: dict[Any, tuple[str, str]] = {  # annotation: (singular, plural), in the words of a YAML user
    type(None): ("null", "nulls"),
    bool: ("true or false", "booleans"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
    Any: ("anything", "anything"),
}


class FieldError(ValueError):
    """A value not allowed at ``key``, a path such as ``trainer.num_generations`` or ``rewards[0].weight``.

    ``wrong_type``: the value is not of the annotation's kind at all (rather than wrong inside, or out of
    range); a union then reports its own expectation instead of this member's.
    """

    def __init__(self, key: str, problem: str, wrong_type: bool = False) -> None:
        self.key, self.problem, self.wrong_type = key, problem, wrong_type
        super().__init__(f"{key}: {problem}" if key else problem)


def check_value(value: Any, annotation: Any, key: str = "") -> Any:
    """``value`` checked against ``annotation``, converted where the conventions say (see the module).

    A dataclass annotation builds the dataclass from a mapping; list and mapping items are checked one by
    one, their keys joined to ``key``. Raises :class:`FieldError`.

    >>> check_value("1e-6", float, "trainer.learning_rate")
    1e-06
    >>> check_value(["x"], list[float] | None, "trainer.reward_weights")
    Traceback (most recent call last):
    rewards.typecheck.FieldError: trainer.reward_weights[0]: expected a number, got 'x'.
    """
    tp = _resolve(annotation)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    container = origin or tp
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, tp, key)
    if origin is Literal:
        if any(value == arg and type(value) is type(arg) for arg in args):
            return value
        allowed = [str(arg) for arg in args]
        raise FieldError(
            key,
            f"got {value!r}; allowed: {', '.join(allowed)}.{suggest(str(value), allowed)}",
            wrong_type=type(value) not in {type(arg) for arg in args},
        )
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        number = _number(value)
        if number is None:
            raise _mismatch(value, tp, key)
        return number
    elif dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return value if isinstance(value, tp) else _build(tp, value, key)
    elif _is(tp, enum.Enum):
        # A member, or a member's value as written in YAML (kept as written: the consumer converts it).
        ok = isinstance(value, tp) or value in [member.value for member in tp]
    elif _is(container, Mapping):
        if not isinstance(value, Mapping):
            raise _mismatch(value, tp, key)
        key_tp, item_tp = args or (Any, Any)
        return {
            check_value(k, key_tp, join_key(key, k)): check_value(v, item_tp, join_key(key, k))
            for k, v in value.items()
        }
    elif _is(container, Sequence) and not _is(container, (str, bytes)):
        if not isinstance(value, list | tuple):
            raise _mismatch(value, tp, key)
        if container is tuple and args and args[-1] is not Ellipsis:  # tuple[X, Y]: one annotation per item
            if len(value) != len(args):
                raise _mismatch(value, tp, key)
        else:
            args = (args[0] if args else Any,) * len(value)
        # A list even for tuple annotations: the result stays plain YAML data (safe_dump writes no tuple).
        return [check_value(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True))]
    elif isinstance(tp, type) and origin is None:
        ok = isinstance(value, tp)
    else:
        return value  # an annotation we do not know: accept rather than reject what the consumer may take
    if not ok:
        raise _mismatch(value, tp, key)
    return value


def check_mapping(
    data: Any,
    fields: Mapping[str, Any],
    key: str = "",
    required: Collection[str] = (),
    list_allowed: bool = True,
) -> dict[str, Any]:
    """``data`` checked as keyword arguments: each name must be one of ``fields`` (name: annotation), each
    name in ``required`` must be given, and each value is checked with :func:`check_value`.

    ``list_allowed=False`` leaves the allowed names out of an unknown-key error (for long lists, where
    the "Did you mean" suggestion says enough).

    >>> check_mapping({"max_opps": 3}, {"min_ops": int, "max_ops": int}, "params")
    Traceback (most recent call last):
    rewards.typecheck.FieldError: params: unknown key 'max_opps'. Allowed: min_ops, max_ops. Did you mean 'max_ops'?
    """
    if not isinstance(data, Mapping):
        raise _mismatch(data, dict, key)
    checked = {}
    for name, value in data.items():
        if name not in fields:
            listing = f" Allowed: {', '.join(fields)}." if list_allowed else ""
            raise FieldError(key, f"unknown key '{name}'.{listing}{suggest(str(name), list(fields))}")
        checked[name] = check_value(value, fields[name], join_key(key, name))
    for name in required:
        if name not in checked:
            raise FieldError(join_key(key, name), f"missing required key ({describe(fields[name])}).")
    return checked


def dataclass_fields(cls: type) -> tuple[dict[str, Any], list[str]]:
    """A dataclass's keys for :func:`check_mapping`: ``{init field: annotation}`` and the required names."""
    hints = _type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    return {f.name: hints.get(f.name, f.type) for f in fields}, required


def parameters(func: Callable[..., Any], skip: Collection[str] = ("self",)) -> dict[str, inspect.Parameter]:
    """``func``'s parameters by name, with string annotations resolved and missing ones as ``Any``."""
    hints = _type_hints(func)
    return {
        name: param.replace(
            annotation=hints.get(name, Any if param.annotation is param.empty else param.annotation)
        )
        for name, param in inspect.signature(func).parameters.items()
        if name not in skip
    }


def describe(annotation: Any, plural: bool = False) -> str:
    """What ``annotation`` allows, in words.

    >>> describe(int | None), describe(list[float]), describe(dict[str, int] | str)
    ('an integer or null', 'a list of numbers', 'a mapping or a string')
    """
    tp = _resolve(annotation)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    container = origin or tp
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arg, plural) for arg in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    if tp in _NAMES:
        return _NAMES[tp][plural]
    if dataclasses.is_dataclass(tp) or _is(container, Mapping):
        return "mappings" if plural else "a mapping"
    if _is(container, Sequence) and not _is(container, (str, bytes)):
        items = f" of {describe(args[0], plural=True)}" if args else ""
        return ("lists" if plural else "a list") + items
    name = getattr(tp, "__name__", str(tp))
    return f"{name}s" if plural else f"a {name}"


def suggest(name: str, allowed: Collection[str]) -> str:
    """`` Did you mean 'x'?`` for the closest of ``allowed``, or ``""``.

    A difference of case alone counts as closest (difflib sees nothing in common between ``Q`` and ``q``).

    >>> suggest("lerning_rate", ["learning_rate", "seed"])
    " Did you mean 'learning_rate'?"
    >>> suggest("Q", ["q", "ans"]), suggest("Learning_Rat", ["learning_rate"])
    (" Did you mean 'q'?", " Did you mean 'learning_rate'?")
    """
    by_folded = {str(option).casefold(): str(option) for option in allowed}
    folded = name.casefold()
    if folded in by_folded and by_folded[folded] != name:
        return f" Did you mean '{by_folded[folded]}'?"
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    if not close:
        close = [by_folded[c] for c in difflib.get_close_matches(folded, list(by_folded), n=1, cutoff=0.6)]
    return f" Did you mean '{close[0]}'?" if close else ""


def join_key(key: str, name: Any) -> str:
    """``key.name``; either may be empty (the top level, or the mapping itself)."""
    return ".".join(part for part in (key, str(name)) if part)


def _check_union(value: Any, tp: Any, key: str) -> Any:
    errors = []
    for arg in typing.get_args(tp):
        try:
            return check_value(value, arg, key)
        except FieldError as err:
            errors.append(err)
    # When one member alone takes this kind of value (a section's mapping, a list), its own error says
    # what is wrong inside: `model.lora: unknown key 'rank'`, `trainer.reward_weights[1]: ...`.
    inner = [err for err in errors if not (err.wrong_type and err.key == key)]
    if len(inner) == 1:
        raise inner[0]
    raise _mismatch(value, tp, key)


def _mismatch(value: Any, tp: Any, key: str) -> FieldError:
    return FieldError(key, f"expected {describe(tp)}, got {value!r}.", wrong_type=True)


def _number(value: Any) -> float | None:
    """``value`` as a finite float (an int, a float or a numeric string), or None (NaN and infinity too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _build(cls: type, data: Any, key: str) -> Any:
    """Dataclass ``cls`` from a mapping: unknown keys, missing required keys and bad values are errors."""
    fields, required = dataclass_fields(cls)
    kwargs = check_mapping(data, fields, key, required)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:  # the dataclass's own checks (__post_init__)
        raise FieldError(key, str(err)) from None


def _resolve(annotation: Any) -> Any:
    """The annotation as an object: ``None`` is NoneType; a string (an annotation left unevaluated) is
    evaluated with the builtin and ``typing`` names, and is ``Any`` when it names anything else."""
    if annotation is None:
        return type(None)
    if isinstance(annotation, typing.ForwardRef):
        annotation = annotation.__forward_arg__
    if isinstance(annotation, str):
        try:  # annotation text from source code, never data: what typing.get_type_hints evaluates too
            return eval(annotation, {**vars(typing), **vars(builtins)})
        except Exception:
            return Any
    return annotation


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # a name imported only for type checkers: fall back to the raw annotations
        return {}


def _is(tp: Any, base: type | tuple[type, ...]) -> bool:
    return isinstance(tp, type) and issubclass(tp, base)
