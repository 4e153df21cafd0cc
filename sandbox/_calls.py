"""Inside the sandbox: the program server and the test runner of :mod:`sandbox.judge`.

Loaded by path by the boot script (standard library and ``wire`` only), in two separate sandboxed
processes:

* :func:`serve` (the program's process) runs the setup code and then the program in a module named
  ``solution``, sends a manifest of its top-level names, then answers requests: call a function, get an
  attribute, iterate. Results go back as plain data (:mod:`wire`); anything else stays here and goes back
  as a reference. Everything this process sends is untrusted: the program may have replaced any of this.
* :func:`run_tests` (the tests' process, where the program never ran) binds each name of the manifest:
  plain values to their decoded copy, and every other name, whatever the program says it is (its own
  function, a function or class it imported, a module under another name), to a stub that calls the
  program's process and gets back plain data. Nothing the manifest names ever runs here: a callable's
  ``__module__`` and ``__qualname__`` are the program's to set, so they choose nothing (``from math import
  gcd`` still works: the stub calls ``gcd`` in the program's process). The one exception is a name that is
  an importable top-level module's (``math``): it stands for that module and nothing else, imported here
  under that same name as if the test had imported it, and only when the program imported that very
  module under it. It then runs the setup code (so the tests' helpers are the trusted ones), then each
  test in a fresh copy of that namespace, compiled with assertions on. It reports each test's outcome on
  its own pipe to the harness, as it happens.

Names the manifest may not bind in the tests: dunder names, names that are not identifiers, every
builtin's name (a program's ``len`` or ``AssertionError`` never replaces the tests' own), and, to anything
but that very module, the name of an importable top-level module (a program's ``class math`` never
stands for ``math`` in a test that uses ``math.isclose`` without importing it).
"""

from __future__ import annotations

import builtins
import ctypes
import importlib
import importlib.util
import json
import os
import sys
import traceback
import types

try:
    import _sandbox_wire as wire  # as the boot script loads it
except ImportError:  # imported from the package (documentation, doctest collection)
    from sandbox import wire

MAX_NAMES = 1000
MAX_ERROR_CHARS = 300
BUILTIN_NAMES = frozenset(dir(builtins))
PR_SET_DUMPABLE = 4


class _Channel:
    """Messages (one JSON line each) over a pair of pipe file descriptors."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.buffer = b""

    def send(self, message: dict) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def receive(self) -> dict | None:
        """The next message, or None at end of file. Raises wire.WireError for a malformed one."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > wire.MAX_MESSAGE_BYTES:
                raise wire.WireError("message too long")
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message = wire.parse(line)
        if type(message) is not dict:
            raise wire.WireError("a message must be an object")
        return message


def _error_text(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(error), error)).strip()[-MAX_ERROR_CHARS:]


# --- the program's process ----------------------------------------------------------------------------


def serve(config: dict) -> None:
    fds = config["fds"]
    channel = _Channel(fds["requests"], fds["replies"])
    objects: dict[int, object] = {}

    def reference(value: object) -> int:
        objects[id(value)] = value
        return id(value)

    def resolve(number: int) -> object:
        if number not in objects:
            raise wire.WireError(f"no object {number}")
        return objects[number]

    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    try:
        exec(compile(config.get("setup", ""), "<setup>", "exec"), module.__dict__)
        path = os.path.join(config["workdir"], "main.py")
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            exec(compile(file.read(), path, "exec"), module.__dict__)
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: the program did not load
        channel.send({"load_error": _error_text(error)})
        return
    manifest = {}
    for name, value in list(module.__dict__.items())[: MAX_NAMES * 4]:
        if name.startswith("__") or len(manifest) >= MAX_NAMES:
            continue
        if isinstance(value, types.ModuleType):
            if isinstance(getattr(value, "__name__", None), str):
                manifest[name] = {"kind": "module", "module": value.__name__}
            continue
        if callable(value):
            manifest[name] = {"kind": "callable"}
            continue
        try:
            manifest[name] = {"kind": "value", "value": wire.encode(value)}
        except (wire.WireError, RecursionError, TypeError, ValueError):
            manifest[name] = {"kind": "object"}
    channel.send({"manifest": manifest})
    while True:
        try:
            request = channel.receive()
        except wire.WireError:
            return
        if request is None:
            return
        channel.send(_answer(request, module, resolve, reference))


def _answer(request: dict, module: types.ModuleType, resolve, reference) -> dict:
    number = request.get("id")
    try:
        target = request.get("target", {})
        subject = resolve(target["ref"]) if "ref" in target else getattr(module, str(target.get("name")))
        op = request.get("op")
        if op == "call":
            args = wire.decode(request.get("args", []), resolve)
            kwargs = wire.decode(request.get("kwargs", {"d": []}), resolve)
            value = subject(*args, **kwargs)
        elif op == "getattr":
            value = getattr(subject, str(request.get("attr")))
        elif op == "iter":
            value = iter(subject)
        elif op == "next":
            try:
                value = next(subject)
            except StopIteration:
                return {"id": number, "stop": True}
        else:
            raise ValueError(f"unknown op {op!r}")
        return {"id": number, "value": wire.encode(value, reference)}
    except BaseException as error:
        return {
            "id": number,
            "error": {"type": type(error).__name__, "message": str(error)[:MAX_ERROR_CHARS]},
        }


# --- the tests' process ---------------------------------------------------------------------------------


class RemoteError(Exception):
    """The program raised an exception that is not one of Python's own (or sent something unreadable)."""


class _Connection:
    def __init__(self, channel: _Channel) -> None:
        self.channel = channel
        self.next_id = 0

    def request(self, op: str, target: dict, **fields: object) -> object:
        self.next_id += 1
        message = {"id": self.next_id, "op": op, "target": target}
        for key, value in fields.items():
            message[key] = wire.encode(value, self._reference)
        try:
            self.channel.send(message)
            reply = self.channel.receive()
        except OSError as error:
            raise RemoteError(f"the program's process is gone ({error})") from None
        if reply is None:
            raise RemoteError("the program's process is gone")
        if reply.get("id") != self.next_id:
            raise RemoteError("the program's process answered out of turn")
        if "error" in reply:
            raise _exception(reply["error"])
        if reply.get("stop") is True and op == "next":
            raise StopIteration
        return wire.decode(reply.get("value"), self._resolve)

    def _reference(self, value: object) -> int:
        if isinstance(value, Remote) and value._connection is self and "ref" in value._target:
            return value._target["ref"]
        raise wire.WireError(f"cannot pass a {type(value).__name__} to the program")

    def _resolve(self, number: int) -> Remote:
        return Remote(self, {"ref": number}, "object")


def _exception(error: object) -> Exception:
    """One of Python's own exception classes by name (never a BaseException that is not an Exception)."""
    if not isinstance(error, dict):
        return RemoteError("unreadable error")
    name, message = str(error.get("type", "")), str(error.get("message", ""))[:MAX_ERROR_CHARS]
    kind = getattr(builtins, name, None) if name in BUILTIN_NAMES else None
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not StopIteration:
        try:
            return kind(message)
        except Exception:
            pass
    return RemoteError(f"{name}: {message}")


class Remote:
    """A name or object of the program: calling it, reading an attribute or iterating asks its process.

    Comparison and hashing are by identity, and it has no truth value: whatever the program's object does
    with ``__eq__`` or ``__bool__`` never reaches the tests.
    """

    __slots__ = ("_connection", "_target", "_label")

    def __init__(self, connection: _Connection, target: dict, label: str) -> None:
        self._connection, self._target, self._label = connection, target, label

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._connection.request("call", self._target, args=list(args), kwargs=dict(kwargs))

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._connection.request("getattr", self._target, attr=name)

    def __iter__(self):
        iterator = self._connection.request("iter", self._target)
        if not isinstance(iterator, Remote):
            raise RemoteError("not an iterator")
        while True:
            try:
                yield self._connection.request("next", iterator._target)
            except StopIteration:
                return

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of the program's {self._label} is not defined here")

    def __repr__(self) -> str:
        return f"<program's {self._label}>"


def run_tests(config: dict) -> None:
    _set_undumpable()
    fds = config["fds"]
    results = fds["results"]

    def emit(message: dict) -> None:
        os.write(results, (json.dumps(message) + "\n").encode())

    emit({"ready": True})
    connection = _Connection(_Channel(fds["replies"], fds["requests"]))
    tests = config["tests"]
    try:
        first = connection.channel.receive()
    except (wire.WireError, OSError) as error:
        first = {"load_error": f"unreadable manifest: {error}"}
    if first is None or "manifest" not in first or type(first["manifest"]) is not dict:
        reason = first.get("load_error") if isinstance(first, dict) else None
        emit({"load_error": str(reason or "the program's process ended before it loaded")[:MAX_ERROR_CHARS]})
        return
    emit({"loaded": True})
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    for name, info in list(first["manifest"].items())[:MAX_NAMES]:
        if not _bindable(name) or type(info) is not dict:
            continue
        kind = info.get("kind")
        if _is_module_name(name):  # that module, as the test's own import would give it, or nothing
            if kind == "module" and info.get("module") == name:
                real = _import(name)
                if real is not None:
                    namespace[name] = real
            continue
        if kind == "value":
            try:
                namespace[name] = wire.decode(info.get("value"))
            except wire.WireError:
                continue
        else:  # the program's function, class, module or object, wherever it says it comes from
            namespace[name] = Remote(connection, {"name": name}, f"{name!r}")
    try:
        exec(compile(config.get("setup", ""), "<setup>", "exec", optimize=0), namespace)
    except BaseException as error:
        emit({"setup_error": _error_text(error)})
        return
    for index, test in enumerate(tests):
        scope = dict(namespace)
        try:
            exec(compile(test, f"<test {index}>", "exec", optimize=0), scope)
        except BaseException as error:
            emit({"test": index, "passed": False, "error": _error_text(error)})
        else:
            emit({"test": index, "passed": True})
    emit({"done": True})


def _bindable(name: object) -> bool:
    return (
        isinstance(name, str)
        and name.isidentifier()
        and not name.startswith("__")
        and name not in BUILTIN_NAMES
    )


def _import(name: str) -> types.ModuleType | None:
    """The top-level module ``name`` imported here (only what this process can import: the standard
    library and what the sandbox shows), or None."""
    if not name.isidentifier() or name.startswith("_sandbox"):
        return None
    try:
        return importlib.import_module(name)
    except BaseException:
        return None


def _is_module_name(name: str) -> bool:
    """A top-level module of that name could be imported (here or by a test)."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return True


def _set_undumpable() -> None:
    """No process of the same uid may ptrace this one or open its /proc files (fds, memory)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
