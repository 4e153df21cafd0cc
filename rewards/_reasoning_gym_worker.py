"""The worker process that runs reasoning-gym's own scorers (``score_answer``) on extracted answers.

Run as ``python _reasoning_gym_worker.py`` by :mod:`rewards.reasoning_gym`, through the same pipe
protocol as the sympy worker (:mod:`rewards.worker_pool`): one JSON object per line on stdin, one JSON
reply per line on stdout. It imports nothing from the ``rewards`` package except ``tagged_json``, by
file path.

* startup: replies ``{"ready": true}`` once reasoning-gym is imported (or ``{"error": "..."}``).
* ``{"op": "prepare", "task": "leg_counting", "config": {...}}``: builds the task's dataset object (its
  scorer) with that config, once; replies ``{"ok": true}`` or ``{"error": "..."}``. Building may load
  word lists, so it is a separate request with its own, longer deadline.
* ``{"op": "score", "task": ..., "config": {...}, "entry": {"question", "answer", "metadata"},
  "answer": "...", "soft_timeout": 4.5}``, where ``entry.metadata`` is the ``tagged_json`` string of the
  dataset row: replies ``{"score": 0.75}``, ``{"timeout": true}`` past ``soft_timeout`` seconds, or
  ``{"error": "..."}`` when the scorer raised.

Why a process of its own: some scorers parse the answer with sympy (``9**9**9**9`` never ends) and four
call Python's ``eval`` on it when it is not an exact match (string_insertion, spiral_matrix,
binary_matrix, n_queens: "maybe it is a Python list"). Model output is never executed here:

* ``eval`` and ``exec`` inside reasoning-gym's modules are replaced by :func:`literal_only` (Python
  literals, and the entry's own strings, as bitwise_arithmetic evaluates its problem) and a refusal;
* sympy's ``parse_expr`` (which ``eval``s the Python it builds, with the builtins in its namespace) only
  reads text whose names are short (``x``, ``C``, ``re``) or mathematical functions (:data:`MATH_NAMES`),
  and runs without builtins; an answer containing ``__`` (the way out of a namespace, through dunder
  attributes) scores 0 unread;
* the address space is capped, and the parent kills the process when a reply is late.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Address-space cap, so a pathological answer fails with MemoryError instead of swapping the host.
MEMORY_LIMIT_BYTES = 4 * 1024**3
HERE = Path(__file__).resolve().parent
#: Scorers kept built at once, by (task, config).
MAX_SCORERS = 256


#: Names longer than two characters that sympy's parse_expr may read: functions and constants of maths.
MATH_NAMES = frozenset(
    [
        "sin",
        "cos",
        "tan",
        "cot",
        "sec",
        "csc",
        "asin",
        "acos",
        "atan",
        "acot",
        "asec",
        "acsc",
        "sinh",
        "cosh",
        "tanh",
        "coth",
        "asinh",
        "acosh",
        "atanh",
        "exp",
        "log",
        "ln",
        "sqrt",
        "cbrt",
        "root",
        "pi",
        "oo",
        "zoo",
        "nan",
        "Abs",
        "abs",
        "sign",
        "floor",
        "ceiling",
        "factorial",
        "binomial",
        "gamma",
        "erf",
        "Rational",
        "Integer",
        "Float",
        "Symbol",
        "Eq",
        "Ne",
        "Lt",
        "Le",
        "Gt",
        "Ge",
        "And",
        "Or",
        "Not",
        "Xor",
        "Implies",
        "Equivalent",
        "true",
        "false",
        "True",
        "False",
        "None",
    ]
)
_NAME = re.compile(r"(?<![0-9.])[A-Za-z_][A-Za-z0-9_]*")


class _SoftTimeout(BaseException):
    """Raised by SIGALRM; a BaseException, so a scorer's ``except Exception`` cannot swallow it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _SoftTimeout


#: The strings of the entry being scored: the generator wrote them, so a scorer may evaluate them (bitwise
#: arithmetic evaluates its own problem, ``0x3a + 0x1f``, to check an answer).
_TRUSTED: set[str] = set()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item)


def literal_only(source: Any, *args: Any, **kwargs: Any) -> Any:
    """What reasoning-gym's ``eval`` gets instead: Python literals only, nothing executed; the entry's own
    strings (never the answer) are also evaluated, without builtins.

    >>> literal_only("[[1, 2], [3, 4]]")
    [[1, 2], [3, 4]]
    >>> literal_only("__import__('os').getcwd()")
    Traceback (most recent call last):
    ValueError: malformed node or string on line 1: <ast.Call object at ...>
    >>> _TRUSTED.add("(0x3a + 0x1f) << 1"); literal_only("(0x3a + 0x1f) << 1")
    178
    """
    if not isinstance(source, str) or len(source) > 100_000:
        raise ValueError("only a literal string is evaluated here")
    try:
        return ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if source in _TRUSTED:
            return builtins.eval(source, {"__builtins__": {}}, {})
        raise


def _refuse_exec(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("exec is disabled while scoring")


def _without_builtins(original: Any) -> Any:
    """sympy's ``eval_expr(code, local_dict, global_dict)``, run with no builtins in its namespace (parse_expr
    copies builtin functions such as ``open`` into it)."""
    python = vars(builtins)

    def eval_expr(code: str, local_dict: dict, global_dict: dict) -> Any:
        namespace = {name: value for name, value in global_dict.items() if python.get(name) is not value}
        return original(code, local_dict, {**namespace, "__builtins__": {}})

    eval_expr.disarmed = True  # type: ignore[attr-defined]
    return eval_expr


def _math_only(original: Any) -> Any:
    """sympy's ``parse_expr``, refusing text with a name that is neither short nor in :data:`MATH_NAMES`.

    >>> parse = _math_only(lambda text, *args, **kwargs: text)
    >>> parse("-exp(x)*sin(x) + 2*X**3/3 + C + 1e10")
    '-exp(x)*sin(x) + 2*X**3/3 + C + 1e10'
    >>> parse("lambdify([], 'open(1)')")
    Traceback (most recent call last):
    ValueError: 'lambdify' is not read here
    """

    def parse_expr(text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, str):
            for name in _NAME.findall(text):
                if len(name) > 2 and name not in MATH_NAMES:
                    raise ValueError(f"{name!r} is not read here")
        return original(text, *args, **kwargs)

    parse_expr.disarmed = True  # type: ignore[attr-defined]
    return parse_expr


def disarm_eval() -> None:
    """Point ``eval`` and ``exec`` of every imported reasoning-gym module at the safe stand-ins, and take
    the builtins away from sympy's expression parser.

    A module-level name shadows the builtin for that module's functions; generation code, which does
    evaluate its own expressions, never runs in this process.
    """
    parser = sys.modules.get("sympy.parsing.sympy_parser")
    original_parse = None
    if parser is not None and not getattr(parser.eval_expr, "disarmed", False):
        parser.eval_expr = _without_builtins(parser.eval_expr)
        original_parse, checked_parse = parser.parse_expr, _math_only(parser.parse_expr)
        parser.parse_expr = checked_parse  # what sympify calls
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        namespace = vars(module)
        if original_parse is not None and namespace.get("parse_expr") is original_parse:
            namespace["parse_expr"] = checked_parse  # sympy.parse_expr, and `from ... import parse_expr`
        if (name == "reasoning_gym" or name.startswith("reasoning_gym.")) and namespace.get(
            "eval"
        ) is not literal_only:
            namespace["eval"] = literal_only
            namespace["exec"] = _refuse_exec


def _load_tagged_json() -> Any:
    """``rewards/tagged_json.py``, loaded by file path (this script's folder is not on ``sys.path``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tagged_json", HERE / "tagged_json.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent; we exit when stdin closes
    # The protocol gets its own copy of stdout; whatever a library prints goes to stderr instead.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    try:
        tagged_json = _load_tagged_json()
        from reasoning_gym.factory import DATASETS
    except Exception as error:  # reported to the parent, which raises a clear error
        reply({"error": f"cannot import reasoning_gym in {sys.executable}: {error!r}"})
        return
    disarm_eval()
    signal.signal(signal.SIGALRM, _on_alarm)
    scorers: dict[str, Any] = {}

    def scorer(task: str, config: dict) -> Any:
        key = json.dumps([task, config], sort_keys=True)
        if key not in scorers:
            if task not in DATASETS:
                raise KeyError(f"unknown reasoning-gym task {task!r}")
            dataset_cls, config_cls = DATASETS[task]
            settings = config_cls(**config)
            if hasattr(settings, "validate"):
                settings.validate()
            if len(scorers) >= MAX_SCORERS:
                scorers.clear()
            scorers[key] = dataset_cls(config=settings).score_answer
            disarm_eval()  # the task's modules may have been imported just now
        return scorers[key]

    reply({"ready": True})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            task, config = request["task"], request.get("config") or {}
            if request.get("op") == "prepare":
                scorer(task, config)
                reply({"ok": True})
                continue
            score_answer = scorer(task, config)
            if "__" in request["answer"]:
                reply({"score": 0.0})
                continue
            raw = request["entry"]
            entry = {**raw, "metadata": tagged_json.decode(raw["metadata"])}
            _TRUSTED.clear()
            _TRUSTED.update(_strings(entry["metadata"]))
            signal.setitimer(signal.ITIMER_REAL, max(float(request.get("soft_timeout", 5.0)), 0.01))
            try:
                score = float(score_answer(request["answer"], entry))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            message: dict = {"score": score}
        except _SoftTimeout:
            message = {"timeout": True}
        except BaseException as error:  # a scorer raises anything (MemoryError, RecursionError, ...)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            message = {"error": f"{type(error).__name__}: {error}"[:300]}
        reply(message)


if __name__ == "__main__":
    # Python puts this script's folder first on sys.path, where rewards/reasoning_gym.py would shadow the
    # reasoning_gym package.
    sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]
    main()
