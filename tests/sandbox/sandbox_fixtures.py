"""Shared by the sandbox tests (imported by each): no process of a run is left behind; interpreters to run."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from sandbox import Limits, Sandbox
from sandbox.runner import COMMAND_MARK, NOBODY

__all__ = ["leftovers", "no_process_left_behind", "unprivileged_python"]


def leftovers() -> list[str]:
    """Processes a sandbox run may have left: the boot script's (and its forks'), and, as root, any of uid
    65534's (what the programs run as)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), "")
        state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "")
        if state == "Z":
            continue
        if COMMAND_MARK in cmdline or (os.geteuid() == 0 and uid == str(NOBODY)):
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Every sandbox test ends with no sandbox process alive (given a moment for the kernel to reap)."""
    yield
    for _ in range(50):
        left = leftovers()
        if not left:
            return
        time.sleep(0.02)
    pytest.fail(f"processes left behind: {left}")


@pytest.fixture(scope="session")
def unprivileged_python() -> str:
    """An interpreter the fallback (no namespaces) can run programs with: as root it must be readable by
    uid 65534, which a Python installed under /root is not."""
    candidates = [os.path.realpath(os.sys.executable), shutil.which("python3") or "", "/usr/bin/python3"]
    for python in dict.fromkeys(c for c in candidates if c):
        box = Sandbox(Limits(timeout_seconds=10), isolation="none", python=python)
        check = (
            "import os, sys, decimal, sqlite3; print(os.access(os.path.realpath(sys.executable), os.X_OK))"
        )
        if box.run_python(check).stdout == "True\n":
            return python
    pytest.skip("no interpreter here that uid 65534 can run (needed for the fallback's tests)")
