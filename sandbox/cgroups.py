"""One control group per run, where the machine lets the harness make them: the run's memory and processes
counted together, whatever they are (a memfd, ``/dev/shm`` and ``/tmp`` pages included), and every process
of the run found and killed at its end, even one that left its process group without namespaces.

The harness makes the run's group (:meth:`Cgroups.create`), starts the boot script, moves it into the
group (:meth:`RunGroup.add`) while its interpreter starts, and then opens a gate the boot script waits at
before it does anything else, so everything the run starts is counted. After the run
:meth:`RunGroup.remove` kills whatever is left in it and removes it.

Two layouts, checked once per interpreter by :func:`find` (making and removing a test group):

* **cgroup v2**, a writable unified hierarchy whose group for this process has the ``memory`` and
  ``pids`` controllers in its ``cgroup.subtree_control`` (a delegated group, or the root of a container's
  cgroup namespace): ``memory.max``, ``memory.swap.max`` 0, ``pids.max``, ``cgroup.kill``;
* **cgroup v1**, writable ``memory`` and ``pids`` hierarchies (older machines, and hybrid ones whose
  unified hierarchy has no controller): ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``
  where swap is accounted), ``pids.max``.

Elsewhere (not root, a read-only ``/sys/fs/cgroup``, controllers not delegated) runs keep per-process
rlimits only, and :func:`sandbox.isolation` says so with the reason.

Standard library only, torch-free, like the rest of :mod:`sandbox`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class Cgroups:
    """Where runs' groups are made: ``version`` 1 or 2, and the folder in each hierarchy that holds them
    (this process's own group: each run's group is a child of it, removed when the run ends)."""

    version: int
    memory_parent: str
    pids_parent: str

    def create(self, memory_bytes: int, processes: int) -> RunGroup:
        """A new group for one run, limited to ``memory_bytes`` of memory and ``processes`` processes."""
        name = f"run-{uuid.uuid4().hex[:16]}"
        folders = list(
            dict.fromkeys((os.path.join(self.memory_parent, name), os.path.join(self.pids_parent, name)))
        )
        group = RunGroup(self.version, folders)
        try:
            for folder in folders:
                os.mkdir(folder, 0o700)
            memory = folders[0]
            if self.version == 2:
                _write(memory, "memory.max", memory_bytes)
                with contextlib.suppress(OSError):  # no swap configured: nothing to limit
                    _write(memory, "memory.swap.max", 0)
                _write(folders[-1], "pids.max", processes)
            else:
                _write(memory, "memory.limit_in_bytes", memory_bytes)
                with contextlib.suppress(OSError):  # swap accounting off: the limit above covers RAM
                    _write(memory, "memory.memsw.limit_in_bytes", memory_bytes)
                _write(folders[-1], "pids.max", processes)
        except OSError:
            group.remove()
            raise
        return group


@dataclass
class RunGroup:
    """One run's group: its folders (one in v2, the memory and the pids one in v1)."""

    version: int
    folders: list[str]

    def add(self, pid: int) -> None:
        """Move process ``pid`` (not yet started anything) into the group."""
        for folder in self.folders:
            _write(folder, "cgroup.procs", pid)

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the run for the group's memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.folders[0], name)) as file:
                fields = dict(line.split() for line in file if len(line.split()) == 2)
        except OSError:
            return False
        return int(fields.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        """Kill every process left in the group, then remove its folders (a second at most)."""
        for folder in self.folders:
            if not os.path.isdir(folder):
                continue
            deadline = time.monotonic() + 1.0
            while True:
                left = _members(folder)
                if not left or time.monotonic() > deadline:
                    break
                if self.version == 2 and os.path.exists(os.path.join(folder, "cgroup.kill")):
                    with contextlib.suppress(OSError):
                        _write(folder, "cgroup.kill", 1)
                else:
                    for pid in left:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                time.sleep(0.005)
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def _members(folder: str) -> list[int]:
    try:
        with open(os.path.join(folder, "cgroup.procs")) as file:
            return [int(line) for line in file if line.strip()]
    except OSError:
        return []


def _write(folder: str, name: str, value: object) -> None:
    with open(os.path.join(folder, name), "w") as file:
        file.write(str(value))


_found: dict[str, tuple[Cgroups | None, str]] = {}
_lock = threading.Lock()


def find() -> tuple[Cgroups | None, str]:
    """The hierarchy runs' groups are made in here, or None and why not (checked once, by making one)."""
    with _lock:
        if "found" not in _found:
            _found["found"] = _find()
        return _found["found"]


def _find() -> tuple[Cgroups | None, str]:
    if os.geteuid() != 0:
        return None, "not root"
    try:
        memberships = _memberships()
        mounts = _mounts()
    except OSError as error:
        return None, f"cannot read this process's cgroups: {error}"
    reasons = []
    v2 = memberships.get("") and mounts.get("cgroup2")
    if v2:
        place = _folder(mounts["cgroup2"], memberships[""])
        try:
            with open(os.path.join(place, "cgroup.subtree_control")) as file:
                enabled = file.read().split()
        except OSError as error:
            enabled, reasons = [], [f"cgroup v2: {error}"]
        if {"memory", "pids"} <= set(enabled):
            found = _usable(Cgroups(2, place, place))
            if isinstance(found, Cgroups):
                return found, ""
            reasons.append(f"cgroup v2: {found}")
        elif not reasons:
            reasons.append(
                f"cgroup v2: memory and pids not delegated to {place} (it has {enabled or 'none'})"
            )
    if "memory" in memberships and "pids" in memberships and "memory" in mounts and "pids" in mounts:
        found = _usable(
            Cgroups(1, *(_folder(mounts[kind], memberships[kind]) for kind in ("memory", "pids")))
        )
        if isinstance(found, Cgroups):
            return found, ""
        reasons.append(f"cgroup v1: {found}")
    elif not v2:
        reasons.append("no cgroup hierarchy with the memory and pids controllers is mounted")
    return None, "; ".join(reasons)


def _usable(cgroups: Cgroups) -> Cgroups | str:
    """``cgroups`` if a run's group can be made in it, else why not."""
    try:
        cgroups.create(64 << 20, 8).remove()
    except OSError as error:
        return f"{error.strerror or error} ({error.filename or ''})"
    return cgroups


def _memberships(text: str | None = None) -> dict[str, str]:
    r"""This process's group in each hierarchy: controller (or "" for v2's unified one) -> path.

    >>> _memberships("4:memory:/jobs/7\n8:pids:/\n0::/user.slice\n")
    {'memory': '/jobs/7', 'pids': '/', '': '/user.slice'}
    """
    if text is None:
        with open("/proc/self/cgroup") as file:
            text = file.read()
    found = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _mounts(text: str | None = None) -> dict[str, tuple[str, str]]:
    r"""Mounted hierarchies: "cgroup2" or a v1 controller -> (mount point, root of the mount).

    >>> _mounts("35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    ...         "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    {'memory': ('/sys/fs/cgroup/memory', '/'), 'cgroup2': ('/sys/fs/cgroup/unified', '/')}
    """
    if text is None:
        with open("/proc/self/mountinfo") as file:
            text = file.read()
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype, options = fields[separator + 1], fields[separator + 3].split(",")
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            found.setdefault("cgroup2", (point, root))
        elif fstype == "cgroup":
            for option in options:
                if option in ("memory", "pids"):
                    found.setdefault(option, (point, root))
    return found


def _folder(mount: tuple[str, str], path: str) -> str:
    """The folder of group ``path`` under a hierarchy mounted at ``point`` from ``root``.

    >>> _folder(("/sys/fs/cgroup", "/"), "/user.slice/job"), _folder(("/sys/fs/cgroup", "/kubepods/pod1"), "/kubepods/pod1")
    ('/sys/fs/cgroup/user.slice/job', '/sys/fs/cgroup')
    """
    point, root = mount
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")) :]
    return point.rstrip("/") + "/" + path.strip("/") if path.strip("/") else point


def _unescape(text: str) -> str:
    return text.encode().decode("unicode_escape")
