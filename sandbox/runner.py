"""Start sandboxed processes, feed them, read them within caps, and kill everything they started.

:class:`Sandbox` runs one program per call (:meth:`Sandbox.run_python`, :meth:`Sandbox.run_command`) and
many in parallel (:meth:`Sandbox.map`, ``num_workers`` threads, each driving its own processes). Each run:

* gets its configuration and its stdin as sealed memfds (no pipe to keep fed, nothing on disk);
* starts ``python -I -S -B -c LOADER`` (the boot script, compiled once and passed as a memfd) in a new session (its own process group) with a scrubbed
  environment; the boot script enters the namespaces and sets the limits (see :mod:`sandbox._boot`);
* has stdout and stderr read as they come, each up to ``Limits.max_output_bytes``: one byte more and the
  run is killed (``limits_hit`` gets ``"output"``), so nothing is buffered without bound;
* ends when it is done or its wall time is up: with namespaces, a ``SIGTERM`` to its outer process, which
  kills the namespace's init (the kernel then kills every process left in the namespace, daemons that
  left the group included), reaps it and dies; then a ``SIGKILL`` to its process group, before the boot
  process is reaped (so the group's id cannot have been reused). Every process the harness started is
  reaped: none is left as a zombie of a trainer that is pid 1 or a subreaper.

:func:`isolation` says which isolation is in force (checked once per interpreter by running a probe in
the sandbox) and logs it in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import logging
import marshal
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from sandbox import cgroups

logger = logging.getLogger(__name__)

#: What runs inside the sandbox: the boot script, and what it loads for ``serve``/``tests``.
INSIDE = {name: Path(__file__).with_name(f"{name}.py") for name in ("_boot", "wire", "_calls")}
#: ``python -c`` code that loads them (compiled once per harness, marshalled, from a sealed memfd whose
#: number is its first argument): no repository path on any command line or in any traceback of a run.
LOADER = (
    "import marshal,os,sys;c=marshal.loads(os.pread(int(sys.argv[1]),1<<26,0));os.close(int(sys.argv[1]));"
    "exec(c['_boot'],{'__name__':'__main__','CODE':c})"
)
#: Marks a run's processes on the command line (the tests look for leftovers by it).
COMMAND_MARK = LOADER.split("(", 1)[0]
#: Exit code of the boot script when the sandbox could not be set up (see ``RunResult.setup_error``).
SETUP_FAILED = 125
#: The unprivileged uid and gid programs run as when the harness is root ("nobody" on most systems).
NOBODY = 65534
#: After a program exits, how long its pipes may stay open (descendants holding them) before they are cut.
DRAIN_SECONDS = 0.2
#: How long a run asked to stop (SIGTERM to its outer process, which kills and reaps the namespace's init)
#: has before its whole process group is killed.
STOP_GRACE_SECONDS = 2.0
#: Environment every program gets (nothing of the caller's: no tokens, no proxies, no paths).
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

#: Directories of the program's view that are the sandbox's own (``read_only_paths`` cannot show the host's).
OWN_PATHS = ("/tmp", "/dev", "/proc", "/run")

IsolationMode = Literal["namespaces", "none"]
T = TypeVar("T")
R = TypeVar("R")


class SandboxUnavailableError(RuntimeError):
    """No sandboxed program can run here (the interpreter cannot start under the sandbox's uid...)."""


@dataclass(frozen=True)
class Limits:
    """What one run may use. Memory, processes, open files and file size apply to each process."""

    timeout_seconds: float = 10.0
    """Wall time of the whole run, start-up included; then everything is killed."""
    cpu_seconds: float | None = None
    """CPU time of each process (SIGXCPU, then SIGKILL a second later); None: ``timeout_seconds``."""
    memory_mb: int = 1024
    """Address space of each process (RLIMIT_AS): a bigger allocation fails with MemoryError."""
    max_processes: int = 64
    """Processes and threads of the program's uid (RLIMIT_NPROC; counted per user namespace)."""
    max_open_files: int = 256
    max_file_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE)."""
    tmp_mb: int = 64
    """Size of its ``/tmp`` (its working directory) and ``/dev/shm``, with namespaces."""
    max_output_bytes: int = 1 << 20
    """Cap on stdout and on stderr, each; one byte more and the run is killed."""

    def __post_init__(self) -> None:
        if not (self.timeout_seconds > 0 and math.isfinite(self.timeout_seconds)):
            raise ValueError(f"timeout_seconds must be a positive number, got {self.timeout_seconds!r}")
        if self.cpu_seconds is not None and not self.cpu_seconds > 0:
            raise ValueError(f"cpu_seconds must be positive, got {self.cpu_seconds!r}")
        for name in (
            "memory_mb",
            "max_processes",
            "max_open_files",
            "max_file_mb",
            "tmp_mb",
            "max_output_bytes",
        ):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.max_open_files < 16:
            raise ValueError(
                f"max_open_files must be at least 16 (the interpreter needs some), got {self.max_open_files}"
            )

    def for_boot(self) -> dict[str, int]:
        cpu = self.cpu_seconds if self.cpu_seconds is not None else self.timeout_seconds
        return {
            "cpu_seconds": max(1, math.ceil(cpu)),
            "memory_bytes": self.memory_mb << 20,
            "processes": self.max_processes,
            "open_files": self.max_open_files,
            "file_bytes": self.max_file_mb << 20,
            "tmp_bytes": self.tmp_mb << 20,
        }

    @property
    def group_memory_bytes(self) -> int:
        """With a control group: the whole run's memory, its /tmp and /dev/shm (tmpfs pages) included."""
        return (self.memory_mb + 2 * self.tmp_mb) << 20


@dataclass(frozen=True)
class RunResult:
    """How one run ended. ``limits_hit`` names each limit that stopped it: ``wall``, ``cpu`` and ``output``
    are known for certain; ``memory``, ``file_size`` and ``processes`` are read from the error Python
    printed last (MemoryError, "File too large", a failed fork)."""

    stdout: str
    stderr: str
    exit_code: int | None
    """The program's exit status; None when a signal killed it (see ``signal``) or it never started."""
    signal: int | None
    timed_out: bool
    limits_hit: tuple[str, ...]
    duration_seconds: float
    cpu_seconds: float
    isolation: str
    setup_error: str = ""
    """Why the sandbox itself could not start this run ("" when it did)."""

    @property
    def ok(self) -> bool:
        """Exited with status 0 within every limit."""
        return self.exit_code == 0 and not self.limits_hit and not self.setup_error


@dataclass(frozen=True)
class Isolation:
    """Which isolation is in force, for :func:`isolation`."""

    mode: IsolationMode
    description: str
    reason: str = ""
    """Why namespaces are not in force ("" when they are)."""
    seccomp: bool = False
    """Whether runs get the system call filter (see :mod:`sandbox._boot`)."""
    cgroup: int | None = None
    """The cgroup version each run gets a control group of (see :mod:`sandbox.cgroups`); None: none."""


# --- isolation check --------------------------------------------------------------------------------------

_isolation_cache: dict[tuple[str, int], Isolation] = {}
_isolation_lock = threading.Lock()


def isolation(python: str | None = None) -> Isolation:
    """The isolation programs get from this interpreter (``python``: another interpreter), checked once.

    Runs a probe in the sandbox and keeps namespaces only when the probe sees what they promise (only a
    loopback interface, its own pid namespace, a read-only root and a writable ``/tmp``). Logs one line.
    Raises :class:`SandboxUnavailableError` when not even the fallback can run a program.
    """
    python = python or sys.executable
    key = (python, os.geteuid())
    with _isolation_lock:
        if key not in _isolation_cache:
            found = _detect(python)
            log = logger.info if found.mode == "namespaces" else logger.warning
            log("sandbox isolation: %s%s", found.description, f" ({found.reason})" if found.reason else "")
            _isolation_cache[key] = found
        return _isolation_cache[key]


def _user() -> int | None:
    return NOBODY if os.geteuid() == 0 else None


def _detect(python: str) -> Isolation:
    probe = Sandbox(Limits(timeout_seconds=20), isolation="namespaces", python=python, _checked=True)
    result = probe._run("probe", files={}, stdin=b"", argv=[])
    seen = _parse_probe(result)
    user = _user()
    expected_uid = user if user is not None else 0
    if seen is not None and (
        seen.get("interfaces") == ["lo"]
        and seen.get("processes", 99) <= 3
        and seen.get("root_writable") is False
        and seen.get("tmp_writable") is True
        and seen.get("uid") == expected_uid
    ):
        kinds = "pid, mount, network, IPC, UTS" if user is not None else "user, pid, mount, network, IPC, UTS"
        who = f"uid {user}" if user is not None else "your uid without capabilities"
        seccomp, filtering = _seccomp_seen(seen)
        version, grouping = _cgroup_found()
        return Isolation(
            "namespaces",
            f"namespaces ({kinds}): read-only filesystem, private /tmp, no network, rlimits, {grouping}, "
            f"{filtering}; programs run as {who}",
            seccomp=seccomp,
            cgroup=version,
        )
    reason = result.setup_error or (f"probe saw {seen}" if seen else _tail(result.stderr) or "probe failed")
    fallback = Sandbox(Limits(timeout_seconds=20), isolation="none", python=python, _checked=True)
    result = fallback._run("probe", files={}, stdin=b"", argv=[])
    if _parse_probe(result) is None:
        raise SandboxUnavailableError(
            f"the sandbox cannot run programs with {python}: without namespaces ({reason}), and without "
            f"them: {result.setup_error or _tail(result.stderr) or 'probe failed'}"
            + (
                f" (as root, programs run as uid {user}: it must be able to read the interpreter)"
                if user
                else ""
            )
        )
    who = f"as uid {user}" if user is not None else "as your own uid (they can read and write what you can)"
    seccomp, filtering = _seccomp_seen(_parse_probe(result) or {})
    version, grouping = _cgroup_found()
    return Isolation(
        "none",
        f"none: namespaces unavailable, programs run {who} with rlimits, {grouping}, {filtering}, a scrubbed "
        "environment and a process-group kill only; network and filesystem are not isolated (use a container "
        "or VM)",
        reason=reason,
        seccomp=seccomp,
        cgroup=version,
    )


def _cgroup_found() -> tuple[int | None, str]:
    """The cgroup version runs get a group of, and the words for the log line."""
    found, why = cgroups.find()
    if found is None:
        return None, f"no control group per run ({why}): memory and processes limited per process only"
    return found.version, f"a control group per run (cgroup v{found.version}: memory and processes in all)"


def _seccomp_seen(seen: dict) -> tuple[bool, str]:
    """Whether the probe ran under the system call filter (it says so, and the filter refused its
    AF_VSOCK socket), and the words for the log line."""
    missing = seen.get("seccomp", "the probe did not say")
    if missing == "" and seen.get("vsock") == "EPERM":
        return True, "seccomp filter"
    return False, f"no seccomp filter ({missing or 'it did not refuse AF_VSOCK'})"


def _parse_probe(result: RunResult) -> dict | None:
    if result.exit_code != 0:
        return None
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return seen if isinstance(seen, dict) else None


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# --- the sandbox ---------------------------------------------------------------------------------------


class Sandbox:
    """Runs programs under ``limits``, ``num_workers`` at a time with :meth:`map`.

    ``isolation``: ``"auto"`` (namespaces when the probe shows they work, else the fallback, see
    :func:`isolation`, but only where programs then run as another uid than the harness's: as root, uid
    65534; otherwise :class:`SandboxUnavailableError`), ``"namespaces"`` (raise if they do not work) or
    ``"none"`` (rlimits, process group, scrubbed environment and, as root, the drop to uid 65534 only). ``python``: the interpreter programs run
    under (this one by default). ``user``: the uid to drop to when the harness is root (default 65534;
    None keeps root, which only a benchmark should do). ``read_only_paths``: host files or directories
    to show programs, read-only, besides the system directories and the interpreter's standard library
    (with namespaces programs see nothing else: no installed package, no repository; pass a virtual
    environment's ``site-packages`` for numpy).

    >>> result = Sandbox(Limits(timeout_seconds=10)).run_python("print(input()[::-1])", stdin="olleh")
    >>> result.stdout, result.exit_code, result.timed_out, result.limits_hit
    ('hello\\n', 0, False, ())
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        isolation: Literal["auto", "namespaces", "none"] = "auto",
        num_workers: int = 1,
        python: str | None = None,
        user: int | None = NOBODY,
        read_only_paths: Sequence[str] = (),
        _checked: bool = False,
    ) -> None:
        if isolation not in ("auto", "namespaces", "none"):
            raise ValueError(f"isolation must be 'auto', 'namespaces' or 'none', got {isolation!r}")
        if not (isinstance(num_workers, int) and num_workers >= 1):
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
        self.limits = limits or Limits()
        self.requested = isolation
        self.num_workers = num_workers
        self.python = python or sys.executable
        # The real file: a virtual environment's path (often inside a repository) is no run's business.
        self._interpreter = os.path.realpath(self.python)
        self.user = user if os.geteuid() == 0 else None
        self.read_only_paths = [os.path.abspath(os.fspath(path)) for path in read_only_paths]
        for path in self.read_only_paths:
            if path == "/" or any(path == own or path.startswith(own + "/") for own in OWN_PATHS):
                raise ValueError(
                    f"read_only_paths: {path} cannot be shown (the sandbox's own: {', '.join(OWN_PATHS)})"
                )
        # The probes of isolation() are built _checked: they run as asked without checking first.
        self._mode: IsolationMode | None = None
        #: True where the isolation check saw the filter work: a run that cannot install it then fails.
        self._seccomp: bool | None = None
        #: Where each run gets its control group (None: per-process rlimits only); see sandbox.cgroups.
        self._cgroups: cgroups.Cgroups | None = None
        if isolation == "none" or _checked:
            self._mode = "none" if isolation == "none" else "namespaces"
        if isolation == "none" and not _checked:
            self._cgroups = cgroups.find()[0]

    @property
    def isolation(self) -> IsolationMode:
        """The isolation this sandbox's runs get (checks it on first use)."""
        if self._mode is None:
            found = isolation(self.python)
            if self.requested == "namespaces" and found.mode != "namespaces":
                raise SandboxUnavailableError(
                    f"namespaces were asked for but do not work here: {found.reason}"
                )
            if found.mode != "namespaces" and self.user is None:
                who = "as root" if os.geteuid() == 0 else "as your own uid"
                raise SandboxUnavailableError(
                    f"namespaces do not work here ({found.reason}), and without them programs would run {who}: "
                    "they could read your files and, through /proc, your processes' environment (tokens). "
                    "Pass isolation='none' to run them so anyway, or run as root (programs then run as uid "
                    f"{NOBODY}) or where user namespaces are allowed"
                )
            self._mode = found.mode
            self._seccomp = found.seccomp
            self._cgroups = cgroups.find()[0]
        return self._mode

    def run_python(
        self,
        source: str,
        stdin: str | bytes = "",
        *,
        argv: Sequence[str] = (),
        files: dict[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> RunResult:
        """Run ``source`` as a Python script (``__main__``, file ``main.py`` in its working directory) with
        ``stdin``; ``argv`` follows ``main.py`` in ``sys.argv``; ``files`` (name: text) are written beside it.
        ``timeout_seconds``: this run's wall time (and CPU time) when shorter than the limits' (the rest of a
        budget shared by several runs)."""
        files = {**(files or {}), "main.py": source}
        limits = self.limits
        if timeout_seconds is not None and timeout_seconds < limits.timeout_seconds:
            cpu = min(timeout_seconds, limits.cpu_seconds or timeout_seconds)
            limits = dataclasses.replace(limits, timeout_seconds=timeout_seconds, cpu_seconds=cpu)
        return self._run("script", files=files, stdin=_bytes(stdin), argv=["main.py", *argv], limits=limits)

    def run_command(
        self, argv: Sequence[str], stdin: str | bytes = "", *, files: dict[str, str] | None = None
    ) -> RunResult:
        """Run any command (``argv[0]`` looked up in the sandbox's PATH) under the same isolation."""
        if not argv:
            raise ValueError("argv must name a command")
        return self._run("exec", files=dict(files or {}), stdin=_bytes(stdin), argv=list(argv))

    def map(self, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[function(item) for item in items]``, ``num_workers`` at a time (threads: each run is a process)."""
        items = list(items)
        if self.num_workers == 1 or len(items) <= 1:
            return [function(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.num_workers, len(items))) as pool:
            return list(pool.map(function, items))

    # --- internals shared with sandbox.judge -----------------------------------------------------------

    def _run(
        self, mode: str, *, files: dict[str, str], stdin: bytes, argv: list[str], limits: Limits | None = None
    ) -> RunResult:
        limits = limits or self.limits
        started = time.monotonic()
        with _Workdir(self) as workdir:
            process = self._spawn(mode, workdir, files=files, stdin=stdin, argv=argv, limits=limits)
            _drive([process], started + limits.timeout_seconds)
            return process.result(limits, self.isolation, time.monotonic() - started)

    def _spawn(
        self,
        mode: str,
        workdir: str,
        *,
        files: dict[str, str],
        stdin: bytes,
        argv: list[str],
        pass_fds: Sequence[int] = (),
        extra: dict[str, Any] | None = None,
        limits: Limits | None = None,
    ) -> _Process:
        limits = limits or self.limits
        namespaces = self.isolation == "namespaces"
        status_r, status_w = os.pipe()
        config = {
            "mode": mode,
            "namespaces": namespaces,
            "user": self.user,
            "limits": limits.for_boot(),
            "files": files,
            "argv": argv,
            "workdir": "/tmp" if namespaces else workdir,
            "read_only_paths": self.read_only_paths,
            "status_fd": status_w,
            "seccomp": self._seccomp,
            **(extra or {}),
        }
        code_fd = _memfd(_inside_code())
        group = gate_r = gate_w = None
        if self._cgroups is not None:
            # The harness moves the boot process into the run's group while its interpreter starts (the
            # first move into a group can wait a kernel grace period, ~15 ms); it waits at the gate.
            group = self._cgroups.create(limits.group_memory_bytes, limits.max_processes)
            gate_r, gate_w = os.pipe()
            config["cgroup_gate_fd"] = gate_r
            pass_fds = (*pass_fds, gate_r)
        config_fd = _memfd(json.dumps(config).encode())
        stdin_fd = _memfd(stdin)
        env = {**BASE_ENV, "HOME": config["workdir"], "TMPDIR": config["workdir"]}
        try:
            popen = subprocess.Popen(
                # -S: no site (a virtual environment's .pth files cost more than the rest of the start);
                # the program gets site's builtins (exit, help...) inside, where no package is in view.
                [self._interpreter, "-I", "-S", "-B", "-c", LOADER, str(code_fd), str(config_fd)],
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(code_fd, config_fd, status_w, *pass_fds),
                env=env,
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            if group is not None:
                group.remove()
                os.close(gate_w)
            raise
        finally:
            for fd in (code_fd, config_fd, stdin_fd, status_w, gate_r):
                if fd is not None:
                    os.close(fd)
        if group is not None:
            try:
                group.add(popen.pid)
                os.write(gate_w, b"1")
            except OSError as error:  # the boot process reads end of file at the gate and fails its setup
                logger.warning("sandbox: a run could not join its control group: %s", error)
            finally:
                os.close(gate_w)
        return _Process(popen, status_r, limits.max_output_bytes, namespaces, group)


@functools.cache
def _inside_code() -> bytes:
    """The code that runs inside the sandbox, compiled under names that are no host path."""
    code = {name: compile(path.read_text(), f"<sandbox {name}>", "exec") for name, path in INSIDE.items()}
    return marshal.dumps(code)


def _bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else bytes(data)


def _memfd(data: bytes) -> int:
    """A sealed, read-only-content in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create("sandbox", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    seals = sum(
        getattr(fcntl, name, 0) for name in ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")
    )
    if hasattr(fcntl, "F_ADD_SEALS"):
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


class _Workdir:
    """Without namespaces: a fresh private directory on the host (the program's uid owns it), removed after.
    With namespaces the program's directory is a tmpfs inside the sandbox and this makes nothing."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.path = ""

    def __enter__(self) -> str:
        if self.sandbox.isolation == "none":
            self.path = tempfile.mkdtemp(prefix="sandbox-")
            if self.sandbox.user is not None:
                os.chown(self.path, self.sandbox.user, self.sandbox.user)
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.path:
            _remove_tree(self.path)


def _remove_tree(path: str) -> None:
    def make_writable(function: Callable, name: str, _exc: object) -> None:
        try:
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
            function(name)
        except OSError:
            pass

    shutil.rmtree(path, onerror=make_writable)


# --- driving processes --------------------------------------------------------------------------------


@dataclass
class _Stream:
    fd: int
    data: bytearray = field(default_factory=bytearray)
    open: bool = True


class _Process:
    """One started boot process: its pipes, its exit, and the stop of everything it started.

    The boot process (the leader of its own process group) is reaped only in :meth:`finish`, after the kill
    of its group: its pid, and so the group's id, cannot be reused before that kill."""

    def __init__(
        self,
        popen: subprocess.Popen,
        status_fd: int,
        cap: int,
        namespaces: bool,
        group: cgroups.RunGroup | None = None,
    ) -> None:
        self.popen = popen
        self.group = group
        self.out_of_memory = False
        self.pid = popen.pid
        self.cap = cap
        self.namespaces = namespaces
        self.stdout = _Stream(popen.stdout.fileno())
        self.stderr = _Stream(popen.stderr.fileno())
        self.status = _Stream(status_fd)
        self.wait_status: int | None = None
        self.cpu_seconds = 0.0
        self.exited_at: float | None = None
        self.killed = False
        self.output_limit = False
        self.timed_out = False
        try:
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def streams(self) -> list[_Stream]:
        return [self.stdout, self.stderr, self.status]

    def read(self, stream: _Stream) -> None:
        try:
            chunk = os.read(stream.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            stream.open = False
            return
        stream.data += chunk
        if stream is not self.status and len(stream.data) > self.cap:
            del stream.data[self.cap :]
            self.output_limit = True
            self.stop()
        elif stream is self.status and len(stream.data) > 65536:
            stream.open = False

    def poll_exit(self) -> bool:
        """Whether the boot process has exited (without reaping it)."""
        if self.exited_at is None:
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = True
            if info is None:
                return False
            self.exited_at = time.monotonic()
        return True

    def done(self, now: float) -> bool:
        """Exited and its pipes closed (or left open by descendants for longer than DRAIN_SECONDS)."""
        if not self.poll_exit():
            return False
        if not (self.stdout.open or self.stderr.open or self.status.open):
            return True
        return now - (self.exited_at or now) > DRAIN_SECONDS

    def stop(self) -> None:
        """End the run: with namespaces, SIGTERM to the outer process (it kills the namespace's init, reaps
        it and dies: the kernel ends the rest); without, SIGKILL to the process group."""
        if self.killed or self.poll_exit():
            return
        self.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.namespaces:
                os.kill(self.pid, signal.SIGTERM)
            else:
                os.killpg(self.pid, signal.SIGKILL)

    def finish(self) -> None:
        """Stop the run, wait for the boot process (STOP_GRACE_SECONDS at most), kill what is left of its
        group while its pid is still held, then reap it and close the pipes."""
        self.stop()
        grace = time.monotonic() + STOP_GRACE_SECONDS
        while not self.poll_exit() and time.monotonic() < grace:
            if self.pidfd is not None:
                select.select([self.pidfd], [], [], max(0.0, grace - time.monotonic()))
            else:
                time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        try:
            _, status, usage = os.wait4(self.pid, 0)
            self.wait_status = status
            self.cpu_seconds = usage.ru_utime + usage.ru_stime
            self.popen.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            self.wait_status = 0
            self.popen.returncode = -9
        for fd in (self.pidfd,):
            if fd is not None:
                os.close(fd)
        self.pidfd = None
        for pipe in (self.popen.stdout, self.popen.stderr):
            pipe.close()
        os.close(self.status.fd)
        if self.group is not None:  # (everything of the run is dead by now, unless it left its group)
            self.out_of_memory = self.group.out_of_memory()
            self.group.remove()

    def status_messages(self) -> list[dict]:
        messages = []
        for line in bytes(self.status.data).splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                messages.append(message)
        return messages

    def result(self, limits: Limits, isolation: str, duration: float) -> RunResult:
        status = self.wait_status or 0
        setup_error = next((str(m["setup_error"]) for m in self.status_messages() if "setup_error" in m), "")
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        stderr = bytes(self.stderr.data).decode("utf-8", errors="replace")
        if setup_error and exit_code == SETUP_FAILED:
            exit_code = None
        hit = []
        if self.timed_out:
            hit.append("wall")
        cpu_limit = limits.for_boot()["cpu_seconds"]
        if number == signal.SIGXCPU or (
            number == signal.SIGKILL and not self.killed and self.cpu_seconds >= cpu_limit - 0.05
        ):
            hit.append("cpu")
        if self.output_limit:
            hit.append("output")
        if self.out_of_memory:
            hit.append("memory")
        last = stderr[-2000:]
        for name, marks in (
            ("memory", ("MemoryError",)),
            ("file_size", ("File too large", "[Errno 27]")),
            ("processes", ("[Errno 11] Resource temporarily unavailable",)),
        ):
            if any(mark in last for mark in marks) and exit_code != 0 and name not in hit:
                hit.append(name)
        return RunResult(
            stdout=bytes(self.stdout.data).decode("utf-8", errors="replace"),
            stderr=stderr,
            exit_code=exit_code,
            signal=number,
            timed_out=self.timed_out,
            limits_hit=tuple(hit),
            duration_seconds=duration,
            cpu_seconds=self.cpu_seconds,
            isolation=isolation,
            setup_error=setup_error,
        )


@dataclass
class Watch:
    """An extra pipe to read while processes run: ``on_data(bytes)`` per chunk, ``on_close()`` at EOF."""

    fd: int
    on_data: Callable[[bytes], None]
    open: bool = True


def _drive(
    processes: list[_Process],
    deadline: float,
    watches: Sequence[Watch] = (),
    stop: Callable[[], bool] | None = None,
) -> None:
    """Read every process's pipes until all are done, ``stop()`` says so, or the deadline passes; then kill
    each process group and reap. Never returns later than the deadline plus the reaping."""
    poller = select.poll()
    handlers: dict[int, Callable[[], None]] = {}

    def register(fd: int, handler: Callable[[], None]) -> None:
        poller.register(fd, select.POLLIN)
        handlers[fd] = handler

    for process in processes:
        for stream in process.streams():
            register(stream.fd, lambda p=process, s=stream: p.read(s))
        if process.pidfd is not None:
            register(process.pidfd, lambda p=process: p.poll_exit())
    for watch in watches:

        def read_watch(w: Watch = watch) -> None:
            chunk = os.read(w.fd, 65536)
            if chunk:
                w.on_data(chunk)
            else:
                w.open = False

        register(watch.fd, read_watch)
    try:
        while True:
            now = time.monotonic()
            if all(process.done(now) for process in processes) or (stop is not None and stop()):
                break
            if now >= deadline:
                for process in processes:
                    if not process.poll_exit():
                        process.timed_out = True
                break
            exited = any(p.exited_at is not None for p in processes)
            slack = DRAIN_SECONDS if exited else 0.05 if any(p.pidfd is None for p in processes) else 1.0
            for fd, _ in poller.poll(max(1, int(min(deadline - now, slack) * 1000) + 1)):
                handlers[fd]()
                closed = [p for p in processes for s in p.streams() if s.fd == fd and not s.open]
                closed += [w for w in watches if w.fd == fd and not w.open]
                if closed or any(p.pidfd == fd and p.exited_at is not None for p in processes):
                    poller.unregister(fd)
    finally:
        for process in processes:  # all asked first, so that their ends overlap
            process.stop()
        for process in processes:
            process.finish()


def result_dict(result: RunResult) -> dict[str, Any]:
    """A result as plain data (for JSON logs and tools)."""
    return asdict(result)
