r"""Plain data across a process boundary: an encoder, and a strict, bounded decoder (no pickle).

Only these cross: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``tuple``,
``dict``, ``set``, ``frozenset``, nested at most :data:`MAX_DEPTH` deep and :data:`MAX_ITEMS` values in
all, and references to objects that stay on the other side (``{"r": id}``, resolved by the caller). The
form is JSON, with one-key objects tagging what JSON lacks::

    (1, 2)        -> {"t": [1, 2]}          {1, 2}      -> {"s": [1, 2]}
    b"ab"         -> {"b": "YWI="}          {"k": 1}    -> {"d": [["k", 1]]}
    frozenset()   -> {"f": []}              reference   -> {"r": 3}

The decoder builds only exact built-in types, so whatever the sender is, the receiver gets values whose
``__eq__``, ``__hash__`` and ``__bool__`` are Python's own. This file is standard library only: the
sandbox's boot script loads it by path.

>>> dumps({"a": (1, 2.5, None), "b": [b"x", {3}]})
b'{"d":[["a",{"t":[1,2.5,null]}],["b",[{"b":"eA=="},{"s":[3]}]]]}\n'
>>> loads(_)
{'a': (1, 2.5, None), 'b': [b'x', {3}]}
>>> try:
...     loads(b'{"t": [1, {"bad": 2}]}')
... except WireError as error:
...     print(error)
unknown tag 'bad'
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from typing import Any

#: Deepest nesting of containers.
MAX_DEPTH = 100
#: Most values (containers and scalars together) in one message.
MAX_ITEMS = 2_000_000
#: Longest message, in bytes.
MAX_MESSAGE_BYTES = 64 << 20
#: Longest integer, in decimal digits (Python's own str/int limit is 4300).
MAX_INT_DIGITS = 4000

_TAGS = frozenset("tsfbdr")


class WireError(ValueError):
    """Data that is not plain data, or a message over the bounds."""


def encode(value: Any, reference: Callable[[Any], int] | None = None) -> Any:
    """``value`` as JSON-ready data. Subclasses of the plain types are converted to the base type (a numpy
    scalar to its Python number); anything else becomes ``{"r": reference(value)}`` when ``reference`` is
    given, else raises :class:`WireError`."""
    count = [0]

    def walk(item: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise WireError("value too large or too deeply nested")
        kind = type(item)
        if item is None or kind is bool or kind is str:
            return item
        if kind is int:
            if abs(item) >= 10**MAX_INT_DIGITS:
                raise WireError(f"integer over {MAX_INT_DIGITS} digits")
            return item
        if kind is float:
            return item
        if kind is list:
            return [walk(x, depth + 1) for x in item]
        if kind is tuple:
            return {"t": [walk(x, depth + 1) for x in item]}
        if kind is dict:
            return {"d": [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in item.items()]}
        if kind is set or kind is frozenset:
            return {"s" if kind is set else "f": [walk(x, depth + 1) for x in item]}
        if kind is bytes or kind is bytearray:
            return {"b": base64.b64encode(item).decode("ascii")}
        plain = _as_plain(item)
        if plain is not _NOT_PLAIN:
            return walk(plain, depth)
        if reference is None:
            raise WireError(f"{kind.__name__} is not plain data")
        return {"r": reference(item)}

    return walk(value, 0)


_NOT_PLAIN = object()


def _as_plain(item: Any) -> Any:
    """A subclass of a plain type as that type, a numpy scalar or array as Python data; else _NOT_PLAIN."""
    for base in (bool, int, float, str, bytes, list, tuple, dict, frozenset, set):
        if isinstance(item, base):
            return base(item)
    if type(item).__module__ == "numpy" and hasattr(item, "tolist"):
        return item.tolist()
    return _NOT_PLAIN


def decode(data: Any, resolve: Callable[[int], Any] | None = None) -> Any:
    """Plain data from what :func:`encode` made (after ``json.loads``); ``resolve(id)`` turns a reference
    into the receiver's object (without it, a reference is an error). Raises :class:`WireError`."""
    count = [0]

    def walk(item: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise WireError("value too large or too deeply nested")
        kind = type(item)
        if item is None or kind is bool or kind is str or kind is int:
            return item
        if kind is float:
            return item
        if kind is list:
            return [walk(x, depth + 1) for x in item]
        if kind is not dict or len(item) != 1:
            raise WireError(f"not a value: {kind.__name__}")
        ((tag, inner),) = item.items()
        if tag not in _TAGS:
            raise WireError(f"unknown tag {tag!r}")
        if tag == "b":
            if type(inner) is not str:
                raise WireError("bytes must be base64 text")
            try:
                return base64.b64decode(inner.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError) as error:
                raise WireError(f"bad base64: {error}") from None
        if tag == "r":
            if type(inner) is not int or resolve is None:
                raise WireError("unexpected reference")
            return resolve(inner)
        if type(inner) is not list:
            raise WireError(f"tag {tag!r} needs a list")
        if tag == "d":
            result = {}
            for pair in inner:
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("a dict item must be a [key, value] pair")
                key = walk(pair[0], depth + 1)
                try:
                    result[key] = walk(pair[1], depth + 1)
                except TypeError:
                    raise WireError("unhashable dict key") from None
            return result
        items = [walk(x, depth + 1) for x in inner]
        if tag == "t":
            return tuple(items)
        try:
            return set(items) if tag == "s" else frozenset(items)
        except TypeError:
            raise WireError("unhashable set item") from None

    return walk(data, 0)


def dumps(value: Any, reference: Callable[[Any], int] | None = None) -> bytes:
    """One message: ``value`` encoded, as a JSON line."""
    return json.dumps(encode(value, reference), separators=(",", ":")).encode() + b"\n"


def loads(line: bytes, resolve: Callable[[int], Any] | None = None) -> Any:
    """The value of one message from :func:`dumps`. Raises :class:`WireError` for anything else."""
    return decode(parse(line), resolve)


def parse(line: bytes) -> Any:
    """A message's JSON, bounded: raises :class:`WireError` instead of ValueError or RecursionError."""
    if len(line) > MAX_MESSAGE_BYTES:
        raise WireError("message too long")
    try:
        return json.loads(line, parse_constant=_constant)
    except (ValueError, RecursionError) as error:
        raise WireError(f"not JSON: {str(error)[:200]}") from None


def _constant(name: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]
