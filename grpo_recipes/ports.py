"""Free TCP ports on the loopback interface, for the processes this package starts (a vLLM engine's own
process group, a vLLM server, a distributed launch).

Example:
    >>> 1024 <= free_port() <= 65535
    True
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listened on a moment ago (the OS picks it; another process could
    still take it before the caller binds, which is why callers bind soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
