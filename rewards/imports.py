"""A user's own code named by import path, ``package.module:name``: found next to the recipe first, then in
the working directory, then among the installed packages; one line saying where it looked when it is not.

Shared by the reward registry (a user's reward function or class) and the tools (a user's tool or
environment), so both resolve a path the same way::

    >>> obj, origin = import_object("rewards.numeric_rewards:NumericAccuracy")
    >>> obj.__name__, origin.endswith("rewards/numeric_rewards.py")
    ('NumericAccuracy', True)
    >>> try:
    ...     import_object("no_such_module_here:f", search=["/nowhere"])
    ... except ImportPathError as error:
    ...     print(str(error).startswith("cannot import no_such_module_here (looked in /nowhere, the working directory"))
    True
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: ``package.module:attribute`` (one module or a dotted one, then one attribute).
IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


class ImportPathError(ValueError):
    """An import path that does not resolve; the message says where it looked and what went wrong."""


def is_import_path(name: object) -> bool:
    """Whether ``name`` has the form ``package.module:attribute``.

    >>> is_import_path("my_rewards:date_match"), is_import_path("numeric_accuracy")
    (True, False)
    """
    return isinstance(name, str) and bool(IMPORT_PATH.match(name))


def import_object(path: str, search: Sequence[str | Path] = ()) -> tuple[Any, str]:
    """The object at ``path`` and the file it came from (``"?"`` when unknown).

    The module is looked for as a file (``a/b.py`` or ``a/b/__init__.py`` for ``a.b``) in each folder of
    ``search`` (the recipe's folder), then in the working directory; where one holds it, that folder is put
    first on ``sys.path`` for the import (so a module of the same name elsewhere does not win), and stays on
    it, last, so the module's own imports of its neighbours work later too. Elsewhere the module is
    imported as usual (installed packages). Raises :class:`ImportPathError`.
    """
    if not is_import_path(path):
        raise ImportPathError(f"'{path}' is neither a known name nor an import path 'package.module:name'.")
    module_name, attribute = path.split(":")
    places = list(dict.fromkeys(os.path.abspath(place) for place in [*search, os.getcwd()]))
    home = next((place for place in places if _holds(place, module_name)), None)
    where = f"looked in {', '.join(places[:-1] + ['the working directory ' + places[-1]])}, and installed packages"
    if home is not None:
        sys.path.insert(0, home)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise ImportPathError(
                f"cannot import {module_name} ({where}): no module named {error.name}"
            ) from None
        raise ImportPathError(
            f"importing {module_name} failed: {type(error).__name__}: {_line(error)}"
        ) from None
    except Exception as error:  # noqa: BLE001 - any failure is the user's module's; say which and why
        raise ImportPathError(
            f"importing {module_name} failed: {type(error).__name__}: {_line(error)}"
        ) from None
    finally:
        if home is not None:
            sys.path.remove(home)
            if home not in sys.path:
                sys.path.append(home)
    if not hasattr(module, attribute):
        raise ImportPathError(f"module {module_name} ({_file(module)}) has no attribute '{attribute}'.")
    return getattr(module, attribute), _file(module)


def _holds(place: str, module_name: str) -> bool:
    relative = Path(place, *module_name.split("."))
    return relative.with_suffix(".py").is_file() or (relative / "__init__.py").is_file()


def _file(module: Any) -> str:
    try:
        return inspect.getsourcefile(module) or getattr(module, "__file__", None) or "?"
    except TypeError:
        return "?"


def _line(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
