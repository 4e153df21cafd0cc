"""JSON that gives back the Python values it was given: tuples, sets and non-string keys included.

reasoning-gym's scorers compare an answer with values in an entry's metadata (an ARC grid is a tuple of
tuples, and ``parsed == metadata["output"]`` is false against lists). A dataset column holds one string
per row, so the metadata is stored as this JSON: a tuple is written ``{"__tuple__": [...]}``, a set
``{"__set__": [...]}``, a mapping whose keys are not all strings ``{"__items__": [[key, value], ...]}``
and a mapping that itself has one of these keys ``{"__dict__": {...}}``; everything else is plain JSON.
A value JSON cannot hold (an object) is written as its ``repr`` string.

Standard library only, and no package-relative imports: the reasoning-gym worker process imports it by
file path.

>>> value = {"grid": ((1, 2), (3, 4)), 7: {"a", "b"}, "plain": [1.5, None, "x"]}
>>> decode(encode(value)) == value
True
>>> encode({"pair": (1, 2)})
'{"pair": {"__tuple__": [1, 2]}}'
"""

from __future__ import annotations

import json
import math
from typing import Any

_TAGS = ("__tuple__", "__set__", "__items__", "__dict__")


def _tag(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list):
        return [_tag(item) for item in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_tag(item) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted((_tag(item) for item in value), key=json.dumps)}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            plain = {key: _tag(item) for key, item in value.items()}
            return {"__dict__": plain} if len(plain) == 1 and next(iter(plain)) in _TAGS else plain
        return {"__items__": [[_tag(key), _tag(item)] for key, item in value.items()]}
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return _tag(value.item())
    if hasattr(value, "tolist") and callable(value.tolist):  # a numpy array
        return _tag(value.tolist())
    return repr(value)


def _untag(value: Any) -> Any:
    if isinstance(value, list):
        return [_untag(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, inner),) = value.items()
        if key == "__tuple__":
            return tuple(_untag(item) for item in inner)
        if key == "__set__":
            return {_untag(item) for item in inner}
        if key == "__items__":
            return {_untag(k): _untag(v) for k, v in inner}
        if key == "__dict__":
            return {k: _untag(v) for k, v in inner.items()}
    return {key: _untag(item) for key, item in value.items()}


def encode(value: Any) -> str:
    """``value`` as a JSON string that :func:`decode` turns back into an equal value."""
    return json.dumps(_tag(value), ensure_ascii=False)


def decode(text: str) -> Any:
    """The value :func:`encode` wrote (plain JSON reads as itself)."""
    return _untag(json.loads(text))
