"""Inside the sandbox: enter namespaces, build the filesystem view, set limits, drop privileges, run.

The harness (:mod:`sandbox.runner`) starts ``python -I -S -B -c LOADER CODE_FD CONFIG_FD``: CODE_FD is a
memfd holding this script, ``wire`` and ``_calls`` compiled and marshalled (so no host path shows on a
command line, in ``/proc/1/cmdline`` or in a traceback), CONFIG_FD one holding the run's configuration as
JSON. This file is standard library only, nothing imported from the package, so it starts fast and
works wherever the interpreter can read it.

With namespaces (``config["namespaces"]``) the process tree is::

    outer   (the harness's child, in the host's pid namespace: waits, then exits as the program did)
      init  (pid 1 of a new pid namespace: builds the mounts, then waits for the program; when it
             exits, the kernel kills everything left in the namespace)
        program (limits set, privileges dropped, then the program runs in this same interpreter)

Without namespaces the program runs in the outer process itself, after the limits and the drop.

Privileges, two cases:

* started as root: new mount, pid, network, IPC and UTS namespaces (no user namespace); the program then
  drops to ``config["user"]`` (uid and gid, no supplementary groups), a real unprivileged uid outside
  too, so RLIMIT_NPROC counts and root-owned files stay out of reach.
* started as another user: a user namespace as well, mapping namespace root to that user; after the
  mounts the program drops every capability (bounding set too, securebits locked, no_new_privs).

Mounts (propagation private): a new root, a small tmpfs, holding only the system directories
(``SYSTEM_PATHS``), part of ``/etc`` (``ETC_NAMES``), the interpreter's prefix and directory, and the
caller's ``read_only_paths``, each bound at its own path (symlinks on the way recreated, directories
above it empty, so a Python under ``/root`` is reachable and nothing else of ``/root`` is); installed
packages (``site-packages``, ``dist-packages``) inside them covered by an empty directory; a ``/dev`` of
null, zero, full, random and urandom, an empty ``/run``, and ``/proc`` of the new pid namespace. Then
``pivot_root`` into it and the host's root detached, everything made read-only, and a size-limited tmpfs
on ``/tmp`` (the program's working directory) and ``/dev/shm``. The network namespace has only a
loopback interface.

Last, after the drop and with no_new_privs set, a seccomp filter (:func:`seccomp_program`) refuses the
system calls the program has no use for (socket families beyond Unix and IP, new namespaces, the
keyring, ptrace, bpf, io_uring, mounting...) with EPERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
# SECBIT_NOROOT, _NO_SETUID_FIXUP, _KEEP_CAPS, _NO_CAP_AMBIENT_RAISE and their _LOCKED bits.
SECUREBITS_LOCKED_DOWN = 0xFF
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (Linux 5.12+)
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP = 0x1

#: Exit code of a setup failure (the reason goes to the status pipe).
SETUP_FAILED = 125
DEVICES = ("null", "zero", "full", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)  # the interpreter's own symbols, libc's among them
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_libc.syscall.restype = ctypes.c_long


class SetupError(Exception):
    """A step of the sandbox's setup failed; the message names the step."""


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _check(
        _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}"
    )


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def _status(config: dict, message: dict) -> None:
    """One JSON line to the harness's status pipe (setup errors, "started")."""
    fd = config.get("status_fd")
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, (json.dumps(message) + "\n").encode())


def _close_all_but(keep: int) -> None:
    """Close every descriptor but ``keep``, without reading /proc: outer shares init's mount namespace,
    and once init has mounted its own /proc there, /proc/self is no longer outer's."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(0, keep)
    os.closerange(keep + 1, soft if 0 < soft < 1 << 30 else 1 << 20)  # close_range(2) where the kernel has it


# --- namespaces and the process tree ---------------------------------------------------------------


def enter_namespaces(config: dict) -> None:
    """Unshare, fork init and the program; returns only in the program process."""
    as_root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    if not as_root:
        flags |= CLONE_NEWUSER
    _check(_libc.unshare(flags), "unshare")
    if not as_root:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    status_r, status_w = os.pipe()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # until outer can stop init on it
    init = os.fork()
    if init:
        _outer(init, status_r, status_w)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.close(status_r)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    build_mounts(config)
    program = os.fork()
    if program == 0:
        os.close(status_w)
        return
    _init(program, status_w)


def _outer(init: int, status_r: int, status_w: int) -> None:
    """Wait for init; exit as the program did (same code, or killed by the same signal). On SIGTERM (the
    harness stopping the run), kill init, reap it, and die of SIGKILL: no process of the run is left for
    another to reap (init killed with outer would be orphaned, a zombie of pid 1 or of a subreaper)."""
    _close_all_but(status_r)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    stopped = []

    def stop(_number: int, _frame: object) -> None:
        stopped.append(True)
        with contextlib.suppress(OSError):
            os.kill(init, signal.SIGKILL)  # (init is not reaped before this process reaps it)

    signal.signal(signal.SIGTERM, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.waitpid(init, 0)  # (retried after the handler runs)
    if stopped:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGKILL)
    words = os.read(status_r, 64).decode(errors="replace").split()
    if len(words) != 2 or not words[1].isdigit():  # init died before the program ended (setup failed)
        os._exit(SETUP_FAILED)
    kind, number = words[0], int(words[1])
    if kind == "signal":
        with contextlib.suppress(OSError, ValueError):  # (SIGKILL and SIGSTOP cannot be set, nor need it)
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(number)


def _init(program: int, status_w: int) -> None:
    """pid 1: reap children until the program ends, tell outer how it ended, exit (killing the rest)."""
    _close_all_but(status_w)
    try:
        _prctl(PR_SET_DUMPABLE, 0)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == program:
                break
    except BaseException:
        status = 1 << 8
    if os.WIFSIGNALED(status):
        word = f"signal {os.WTERMSIG(status)}"
    else:
        word = f"exit {os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1}"
    os.write(status_w, word.encode())
    os._exit(0)


# --- the filesystem view --------------------------------------------------------------------------

#: Host directories every run sees, read-only (with the interpreter's own prefix and what ``read_only_paths``
#: adds). Nothing else of the host is there: no repository, home, data set, cache, /var, /opt or /srv.
SYSTEM_PATHS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
#: Of ``/etc``, only these (the dynamic loader's cache, time zone, users and groups, certificates...).
ETC_NAMES = (
    "alternatives", "ca-certificates", "ca-certificates.conf", "debian_version", "gai.conf", "group",
    "host.conf", "hosts", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias",
    "localtime", "mime.types", "nsswitch.conf", "os-release", "passwd", "protocols", "python3",
    f"python3.{sys.version_info[1]}", "services", "shells", "ssl", "timezone",
)  # fmt: skip
#: Where the new root may be assembled: the first host directory of these that holds nothing to show
#: (it is covered in this mount namespace only).
NEW_ROOTS = ("/tmp", "/mnt", "/media", "/srv", "/opt", "/run", "/boot", "/home", "/var/tmp", "/var")
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "i686": 217, "i386": 217,
                  "armv7l": 218, "ppc64le": 203, "ppc64": 203, "s390x": 217}  # fmt: skip
MNT_DETACH = 0x2


def build_mounts(config: dict) -> None:
    """A new root holding only what programs need, read-only, then pivot into it (the host's root is
    detached from this mount namespace: no path leads back to it)."""
    import socket

    os.umask(0o022)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    visible = visible_paths(config)
    root = next((place for place in NEW_ROOTS if os.path.isdir(place) and not _related(place, visible)), None)
    if root is None:
        raise SetupError("no directory to build the new root on")
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    view = _View(root)
    for path in visible:
        view.add(path)
    for path in hidden_paths(config, view):
        _mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,nr_inodes=4,mode=755")
    for name in ("dev", "dev/shm", "proc", "run", "tmp"):
        os.makedirs(f"{root}/{name}", mode=0o755, exist_ok=True)
    os.chmod(f"{root}/tmp", 0o1777)
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{root}/dev/{name}", "w").close()
            _mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{root}/dev/{name}")
    try:  # (before the pivot: a user namespace may mount a proc only while a full one is in view)
        _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except SetupError:  # e.g. a container's masked /proc: hide the host's instead of showing it
        _mount("tmpfs", f"{root}/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
    _pivot(root)
    make_readonly("/")
    tmp_options = f"size={int(config['limits']['tmp_bytes'])},mode=1777"
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_options)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp_options)
    _loopback_up()
    with contextlib.suppress(OSError):
        socket.sethostname("sandbox")


def visible_paths(config: dict) -> list[str]:
    """What of the host the view shows: the system directories, the allowed part of /etc, the
    interpreter's prefix (its standard library and extension modules) and its directory (not a virtual
    environment's: the program's ``sys.executable`` is the real file), and ``read_only_paths``."""
    paths = [*SYSTEM_PATHS, *(f"/etc/{name}" for name in ETC_NAMES), sys.base_prefix, sys.base_exec_prefix]
    paths.append(os.path.dirname(os.path.realpath(sys.executable)))
    paths += [os.path.abspath(path) for path in config.get("read_only_paths", [])]
    return [path for path in dict.fromkeys(paths) if path]


def hidden_paths(config: dict, view: _View) -> list[str]:
    """Installed packages inside what the view shows (``site-packages``, ``dist-packages``): covered by an
    empty directory, unless ``read_only_paths`` names them, something in them, or something above them."""
    import glob
    import site

    found = [
        path for path in sys.path if os.path.basename(path.rstrip("/")) in ("site-packages", "dist-packages")
    ]
    with contextlib.suppress(Exception):
        found += site.getsitepackages([sys.base_prefix, sys.prefix])
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix, "/usr", "/usr/local")):
        for pattern in ("lib*/python3*/*-packages", "local/lib*/python3*/*-packages"):
            found += glob.glob(os.path.join(prefix, pattern))
    asked = [os.path.realpath(path) for path in config.get("read_only_paths", [])]
    hidden = []
    for path in dict.fromkeys(os.path.realpath(path) for path in found):
        if os.path.isdir(path) and view.shows(path) and not _related(path, asked):
            hidden.append(path)
    return hidden


def _related(path: str, others: list[str]) -> bool:
    """``path`` is one of ``others``, inside one, or holds one."""
    return any(path == o or path.startswith(o.rstrip("/") + "/") or o.startswith(path + "/") for o in others)


class _View:
    """The new root under construction: host paths bound into it at the same paths, read-only later."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.bound: list[str] = []

    def shows(self, path: str) -> bool:
        return any(path == b or path.startswith(b.rstrip("/") + "/") for b in self.bound)

    def add(self, path: str, hops: int = 0) -> None:
        """Make ``path`` appear as on the host: symlinks on the way recreated, the path itself bound (a
        directory with everything under it, or a file). A path that does not exist is left out."""
        parts = [part for part in os.path.normpath(path).split("/") if part]
        current = ""
        for index, part in enumerate(parts):
            current += "/" + part
            if self.shows(current):
                return  # already in view, and the rest resolves inside it
            inside = self.root + current
            if os.path.islink(current):
                if hops < 40:
                    target = os.readlink(current)
                    if not os.path.lexists(inside):
                        os.symlink(target, inside)
                    rest = "/".join(parts[index + 1 :])
                    self.add(os.path.join(os.path.dirname(current), target, rest), hops + 1)
                return
            if not os.path.exists(current):
                return
            if index < len(parts) - 1:
                if not os.path.isdir(inside):
                    os.mkdir(inside, 0o755)
                continue
            if os.path.isdir(current):
                os.makedirs(inside, mode=0o755, exist_ok=True)
            elif not os.path.exists(inside):
                open(inside, "w").close()
            _mount(current, inside, None, MS_BIND | MS_REC)
            self.bound.append(current)


def _pivot(root: str) -> None:
    """Make ``root`` the root of this mount namespace and detach the old one."""
    import platform

    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(root)
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")


def make_readonly(root: str) -> None:
    """``root`` and every mount under it read-only: one mount_setattr, or a remount of each (Linux < 5.12)."""
    import struct

    attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR), AT_FDCWD, root.encode(), AT_RECURSIVE, attr, len(attr)
    )
    if result == 0:
        return
    for target in _mount_points(root):
        try:
            flags = _flags_of(target)
        except OSError:
            continue  # a mount the program cannot reach either
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)


def _mount_points(root: str) -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as lines:
        for line in lines:
            point = line.split()[4]
            point = bytes(point, "utf-8").decode("unicode_escape")  # \040 for a space, and so on
            if point == root or point.startswith(root.rstrip("/") + "/"):
                points.append(point)
    return points


def _flags_of(path: str) -> int:
    """The per-mount flags to keep on a remount (a user namespace may not clear them)."""
    found = os.statvfs(path).f_flag
    pairs = (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (getattr(os, "ST_RELATIME", 4096), MS_RELATIME),
    )
    return sum(ms for st, ms in pairs if found & st)


def _loopback_up() -> None:
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request + b"\0" * 22)[:18])[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP) + b"\0" * 22)


# --- the system call filter -----------------------------------------------------------------------
#
# A classic-BPF seccomp program, installed last (after the mounts, the limits and the drop, with
# no_new_privs set), so the program and everything it starts run under it and cannot remove it. It
# allows every system call but these, which fail with EPERM (none kills the process):
#   * sockets of any family but AF_UNIX, AF_INET and AF_INET6 (the network namespace has only a loopback
#     interface): no AF_VSOCK (the virtual machine's host), AF_NETLINK, AF_PACKET, AF_ALG, Bluetooth...;
#   * clone with a namespace flag, unshare and setns: no nested user (or other) namespace;
#   * the kernel keyring, ptrace and reading or writing another process's memory, bpf, perf events,
#     userfaultfd, io_uring, mounting (old and new API), pivot_root, chroot, file handles, kexec, kernel
#     modules, swap, reboot, syslog, process accounting, quotas;
#   * system calls of another ABI than the interpreter's (32-bit and x32 calls on x86-64).
# clone3 fails with ENOSYS instead: its flags sit in memory that a filter cannot read, and the C library
# then falls back to clone, whose flags it can.

SECCOMP_MODE_FILTER = 2
PR_SET_SECCOMP = 22
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
BPF_LD_W_ABS, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
#: Offsets in struct seccomp_data: the call's number, its architecture, its first argument (low half).
DATA_NR, DATA_ARCH, DATA_ARG0 = 0, 4, 16
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
#: CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET.
CLONE_NAMESPACE_FLAGS = 0x7E020000
X32_SYSCALL_BIT = 0x40000000
#: Per architecture: its AUDIT_ARCH value, and the numbers of the calls the filter looks at.
SYSCALLS = {
    "x86_64": {
        "arch": 0xC000003E, "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435,
        "denied": {"unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
                   "chroot": 161, "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
                   "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
                   "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
                   "io_uring_register": 427, "kexec_load": 246, "kexec_file_load": 320,
                   "init_module": 175, "finit_module": 313, "delete_module": 176,
                   "open_by_handle_at": 304, "name_to_handle_at": 303, "open_tree": 428,
                   "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
                   "mount_setattr": 442, "swapon": 167, "swapoff": 168, "reboot": 169, "syslog": 103,
                   "acct": 163, "quotactl": 179},
    },
    "aarch64": {
        "arch": 0xC00000B7, "socket": 198, "socketpair": 199, "clone": 220, "clone3": 435,
        "denied": {"unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
                   "chroot": 51, "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117,
                   "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241,
                   "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
                   "io_uring_register": 427, "kexec_load": 104, "kexec_file_load": 294,
                   "init_module": 105, "finit_module": 273, "delete_module": 106,
                   "open_by_handle_at": 265, "name_to_handle_at": 264, "open_tree": 428,
                   "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
                   "mount_setattr": 442, "swapon": 224, "swapoff": 225, "reboot": 142, "syslog": 116,
                   "acct": 89, "quotactl": 60},
    },
}  # fmt: skip
SYSCALLS["arm64"] = SYSCALLS["aarch64"]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` (``os.uname().machine``) as (code, jt, jf, k) instructions.
    Raises KeyError for an architecture without a table."""
    table = SYSCALLS[machine]
    code: list[tuple] = []  # jumps name their targets; resolved to offsets at the end

    def jump(op: int, k: int, true: str | None, false: str | None = None) -> None:
        code.append((op, true, false, k))

    code.append((BPF_LD_W_ABS, 0, 0, DATA_ARCH))
    jump(BPF_JEQ, table["arch"], None, "deny")
    code.append((BPF_LD_W_ABS, 0, 0, DATA_NR))
    if machine == "x86_64":
        jump(BPF_JGE, X32_SYSCALL_BIT, "deny")
    jump(BPF_JEQ, table["socket"], "socket")
    jump(BPF_JEQ, table["socketpair"], "socket")
    jump(BPF_JEQ, table["clone"], "clone")
    jump(BPF_JEQ, table["clone3"], "enosys")
    for number in sorted(set(table["denied"].values())):
        jump(BPF_JEQ, number, "deny")
    jump(BPF_JEQ, 0, "allow", "allow")  # (always: every jump goes forward)
    labels = {"socket": len(code)}
    code.append((BPF_LD_W_ABS, 0, 0, DATA_ARG0))
    for family in SOCKET_FAMILIES:
        jump(BPF_JEQ, family, "allow")
    code.append((BPF_RET, 0, 0, SECCOMP_RET_ERRNO | EPERM))
    labels["clone"] = len(code)
    code.append((BPF_LD_W_ABS, 0, 0, DATA_ARG0))
    jump(BPF_JSET, CLONE_NAMESPACE_FLAGS, "deny", "allow")
    labels["enosys"] = len(code)
    code.append((BPF_RET, 0, 0, SECCOMP_RET_ERRNO | ENOSYS))
    labels["deny"] = len(code)
    code.append((BPF_RET, 0, 0, SECCOMP_RET_ERRNO | EPERM))
    labels["allow"] = len(code)
    code.append((BPF_RET, 0, 0, SECCOMP_RET_ALLOW))

    def offset(here: int, label: str | int | None) -> int:
        if not isinstance(label, str):
            return label or 0
        distance = labels[label] - here - 1
        if not 0 <= distance < 256:
            raise ValueError(f"seccomp: jump to {label} out of range")
        return distance

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)]


#: Why the filter is not in force in this run ("" when it is); the probe reports it.
SECCOMP_MISSING = "not installed"


def install_seccomp() -> str:
    """Install the filter on this process (no_new_privs must be set); "" when it is in force, else why not."""
    import struct

    machine = os.uname().machine
    if machine not in SYSCALLS:
        return f"no system call table for {machine}"
    program = b"".join(struct.pack("HBBI", *instruction) for instruction in seccomp_program(machine))
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_buffer, 0, 0) != 0:
        return f"prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}"
    return ""


# --- the program process ----------------------------------------------------------------------------


def set_limits(limits: dict, grouped: bool = False) -> None:
    """The rlimits. In a control group (``grouped``) its pids.max counts this run's processes alone, so
    RLIMIT_NPROC, which counts every process of the uid (every run's, as root), is left at its maximum."""
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for name, key in (
        ("RLIMIT_AS", "memory_bytes"),
        ("RLIMIT_NPROC", "processes"),
        ("RLIMIT_NOFILE", "open_files"),
        ("RLIMIT_FSIZE", "file_bytes"),
    ):
        value = int(limits[key])
        if name == "RLIMIT_NPROC" and grouped:
            value = resource.getrlimit(resource.RLIMIT_NPROC)[1]  # (as high as it may be set here)
        resource.setrlimit(getattr(resource, name), (value, value))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def drop_privileges(config: dict) -> None:
    """Root drops to ``config["user"]`` (or, without one, keeps uid 0 with no capabilities); namespace root
    in a user namespace drops every capability. Then no_new_privs."""
    if os.geteuid() == 0:
        user = config.get("user")
        if user is not None:
            os.setgroups([])
            os.setresgid(user, user, user)
            os.setresuid(user, user, user)
        else:
            _drop_capabilities()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _drop_capabilities() -> None:
    import struct

    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # two empty {effective, permitted, inheritable} sets
    _check(_libc.capset(header, data), "capset")


def write_files(config: dict) -> None:
    workdir = config["workdir"]
    for name, content in config.get("files", {}).items():
        path = os.path.join(workdir, name)
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as file:
            file.write(content)
        if os.geteuid() == 0 and config.get("user") is not None:
            os.chown(path, config["user"], config["user"])


def main() -> None:
    config_fd = int(sys.argv[-1])
    with os.fdopen(config_fd, "rb") as file:
        config = json.loads(file.read())
    namespaces = bool(config["namespaces"])
    # The host's OOM killer picks a run before the trainer.
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as file:
        file.write("1000")
    try:
        # First: wait until the harness has moved this process into the run's control group (when it
        # made one), so that everything the run starts is in it.
        gate = config.get("cgroup_gate_fd")
        if gate is not None:
            opened = os.read(gate, 1)
            os.close(gate)
            if opened != b"1":
                raise SetupError("the harness could not move the run into its control group")
        # Before the mounts and the new root: this package may live anywhere, under /tmp too.
        preloaded = _preload(config)
        if namespaces:
            executable = os.path.realpath(sys.executable)
            enter_namespaces(config)
            sys.executable = sys._base_executable = executable  # (a virtual environment's is not in view)
        write_files(config)
        set_limits(config["limits"], grouped=gate is not None)
        drop_privileges(config)
        os.chdir(config["workdir"])
        global SECCOMP_MISSING
        SECCOMP_MISSING = install_seccomp()
        if SECCOMP_MISSING and config.get("seccomp") is True:  # the isolation check found it working
            raise SetupError(f"seccomp filter: {SECCOMP_MISSING}")
    except (SetupError, OSError) as error:
        _status(config, {"setup_error": str(error)})
        os._exit(SETUP_FAILED)
    _status(config, {"started": True})
    if config.get("status_fd") is not None:
        os.close(config["status_fd"])
    run(config, preloaded)


def _preload(config: dict):
    """The in-sandbox harness of ``serve``/``tests`` (the harness passed its code with this script's),
    loaded before the namespaces and the privilege drop."""
    if config["mode"] not in ("serve", "tests"):
        return None
    import types

    for name in ("wire", "_calls"):
        module = types.ModuleType(f"_sandbox_{name}")
        sys.modules[module.__name__] = module
        exec(CODE[name], module.__dict__)  # noqa: F821  (CODE: given by the harness's loader)
    return sys.modules["_sandbox__calls"]


def run(config: dict, calls) -> None:
    mode = config["mode"]
    if mode in ("script", "serve", "tests"):  # the interpreter started without site (-S): its builtins
        import site

        site.main()
    if mode == "probe":
        _probe()
    elif mode == "exec":
        for number in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(number, signal.SIG_DFL)
        argv = config["argv"]
        os.execvpe(argv[0], argv, dict(os.environ))
    elif mode == "script":
        _run_script(config)
    elif mode == "serve":
        calls.serve(config)
    elif mode == "tests":
        calls.run_tests(config)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def _run_script(config: dict) -> None:
    import types

    argv = config["argv"]
    path = os.path.join(config["workdir"], argv[0])
    with open(path, encoding="utf-8", errors="surrogateescape") as file:
        source = file.read()
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = list(argv)
    sys.path.insert(0, config["workdir"])
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except Exception as error:  # as Python reports it, without this script's frames (SystemExit passes)
        import traceback

        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename.startswith("<sandbox"):
            trace = trace.tb_next
        traceback.print_exception(type(error), error, trace)
        sys.exit(1)


def _probe() -> None:
    """What the program would see: printed as JSON for the harness's isolation check."""
    import errno
    import math  # noqa: F401  (the stdlib's extension modules are readable)
    import socket

    with open("/proc/net/dev") as lines:  # (if_nameindex asks netlink, which the filter refuses)
        interfaces = sorted(line.split(":")[0].strip() for line in lines if ":" in line)
    found = {
        "uid": os.getuid(),
        "pid": os.getpid(),
        "interfaces": interfaces,
        "processes": len([name for name in os.listdir("/proc") if name.isdigit()]),
        "seccomp": SECCOMP_MISSING,
    }
    try:  # refused by the filter: EPERM, whatever the kernel has
        socket.socket(getattr(socket, "AF_VSOCK", 40), socket.SOCK_STREAM).close()
        found["vsock"] = "opened"
    except OSError as error:
        found["vsock"] = errno.errorcode.get(error.errno, str(error.errno))
    for name, path in (("root_writable", "/probe-write"), ("tmp_writable", "/tmp/probe-write")):
        try:
            with open(path, "w") as file:
                file.write("x")
            os.unlink(path)
            found[name] = True
        except OSError:
            found[name] = False
    print(json.dumps(found))


if __name__ == "__main__":
    main()
