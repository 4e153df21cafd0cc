"""A control group per run (sandbox/cgroups.py): memory and processes counted for the whole run, what is
left killed at its end, and the group removed. Runs where the harness can make groups (as root, with cgroup
v2 controllers delegated or cgroup v1's memory and pids hierarchies writable, as on this machine)."""

from __future__ import annotations

import os

import pytest
from sandbox_fixtures import *  # noqa: F403  (the shared fixtures)

import sandbox
from sandbox import Limits, Sandbox, cgroups

FOUND, WHY = cgroups.find()
pytestmark = pytest.mark.skipif(FOUND is None, reason=f"no control group per run here: {WHY}")


def run_groups() -> set[str]:
    """The runs' groups alive now, in every folder runs' groups are made in."""
    return {
        name
        for parent in {FOUND.memory_parent, FOUND.pids_parent}
        for name in os.listdir(parent)
        if name.startswith("run-")
    }


def test_isolation_says_a_group_per_run_is_in_force():
    found = sandbox.isolation()
    assert found.cgroup == FOUND.version
    assert f"a control group per run (cgroup v{FOUND.version}" in found.description


def test_a_run_is_in_its_own_group_limited_and_removed_after():
    before = run_groups()
    box = Sandbox(Limits(timeout_seconds=10, memory_mb=256, tmp_mb=16, max_processes=20))
    result = box.run_python("print(open('/proc/self/cgroup').read())")
    assert result.ok
    own = [line.split(":", 2)[2] for line in result.stdout.splitlines() if line.strip()]
    assert any(path.rsplit("/", 1)[-1].startswith("run-") for path in own), result.stdout
    assert run_groups() == before  # removed once the run ended


def test_memory_is_counted_for_all_the_run_processes_together():
    """Five children of 150 MB each stay under the address space limit of each (256 MB) but not under
    the run's memory (256 + 2 x 16 MB): the kernel ends some; an honest 100 MB program is untouched."""
    box = Sandbox(Limits(timeout_seconds=20, memory_mb=256, tmp_mb=16))
    program = """
import os, time
children = []
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        block = bytearray(150 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1)
        os._exit(0)
    children.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children])
"""
    result = box.run_python(program)
    codes = eval(result.stdout)  # noqa: S307  (the test's own output: a list of ints)
    assert -9 in codes and "memory" in result.limits_hit, (result.stdout, result.stderr[-500:])
    honest = box.run_python(
        "block = bytearray(100 << 20)\nfor i in range(0, len(block), 4096):\n    block[i] = 1"
    )
    assert honest.ok and honest.limits_hit == ()


def test_processes_are_counted_per_run_not_per_uid():
    """As root every run's programs share uid 65534: a run that holds its 30 processes no longer makes
    another's forks fail (RLIMIT_NPROC counted them together); each run is bounded by its own pids.max."""
    box = Sandbox(Limits(timeout_seconds=20, max_processes=30), num_workers=2)
    hog = """
import os, time
held = 0
try:
    for _ in range(100):
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        held += 1
except OSError:
    pass
print(held)
"""
    forker = (
        "import os, time\ntime.sleep(1)\nfor _ in range(10):\n    pid = os.fork()\n    if pid == 0:\n"
        "        os._exit(0)\n    os.waitpid(pid, 0)\nprint('forked 10')"
    )
    hogged, other = box.map(box.run_python, [hog, forker])
    assert int(hogged.stdout) < 30  # its own group's bound
    assert other.ok and other.stdout == "forked 10\n", other.stderr[-500:]


def test_what_escaped_the_process_group_is_killed_without_namespaces(unprivileged_python):
    """The fallback (no namespaces) has no init to take a daemon down with it: the group does."""
    box = Sandbox(Limits(timeout_seconds=10), isolation="none", python=unprivileged_python)
    daemon = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "    os._exit(0)\nprint('started')"
    )
    assert box.run_python(daemon).stdout == "started\n"
    # the autouse fixture then finds no process of uid 65534 left
