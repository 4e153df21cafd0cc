"""The Python tool: the model's code runs in the code tasks' sandbox, and the model reads what it printed.

Each call is a fresh sandboxed process (``sandbox.Sandbox``: its own namespaces, a new root with only the
standard library, no network, CPU, memory and output limits), so one call cannot see another's state or
anything of the trainer. What comes back is stdout, then the last lines of stderr when the program
failed, then how it ended when a limit stopped it.

Example:
    >>> python = python_tool(timeout_seconds=10)
    >>> python(code="print(sum(range(101)))")
    '5050\\n'
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from sandbox import Limits, Sandbox

from .tools import register_tool


def describe_run(result, stderr_lines: int = 8) -> str:
    """What the model reads about one run: its output, its error's last lines, and how it ended when not of
    itself (the limit that stopped it, or the signal that killed it), each on a line of its own."""
    if result.setup_error:
        return f"Error: the sandbox could not run the code: {result.setup_error}"
    parts = [result.stdout]
    if result.exit_code not in (0, None) or result.signal is not None:
        tail = "\n".join(result.stderr.strip().splitlines()[-stderr_lines:])
        if tail:
            parts.append(tail + "\n")
    if result.limits_hit:
        parts.append(f"[stopped: {', '.join(result.limits_hit)} limit]\n")
    elif result.signal is not None:
        parts.append(f"[killed by signal {result.signal} ({_signal_name(result.signal)})]\n")
    text = parts[0]
    for part in parts[1:]:
        text += ("" if not text or text.endswith("\n") else "\n") + part
    return text if text.strip() else "(no output: print the values you want to see)\n"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


@register_tool("python")
def python_tool(
    timeout_seconds: float = 10.0,
    memory_mb: int = 512,
    isolation: str = "auto",
) -> Callable[[str], str]:
    """A Python interpreter in the sandbox; one process per call, limited as the params say.

    `isolation`: the sandbox's (``auto``: namespaces where the kernel allows them, see ``sandbox.isolation``).
    """
    box = Sandbox(
        Limits(timeout_seconds=timeout_seconds, memory_mb=memory_mb, max_output_bytes=1 << 16),
        isolation=isolation,  # type: ignore[arg-type]
    )

    def python(code: str) -> str:
        """Run a Python program and return what it printed. Each call starts afresh: define everything it uses.

        Args:
            code: The complete program; use print() to show results, e.g. "print(12 * 37 + 5)".
        """
        return describe_run(box.run_python(code))

    return python
