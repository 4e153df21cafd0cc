"""The system call filter (``sandbox._boot``'s seccomp program): what it refuses inside a run and that the
refusal is the filter's, not the kernel's own permission checks; what it lets through; that honest programs
still work under it; that a program cannot undo it; and the BPF program itself, decoded and simulated for
every architecture it has a table for.

Each program below batches many checks in one sandboxed run and prints them as JSON. A call's result is
written as an errno: 0 when the call succeeded, a positive errno when it failed, -N when the process making
it died of signal N.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sandbox_fixtures import *  # noqa: F403  (the shared fixtures)

import sandbox
from sandbox import Limits, Sandbox
from sandbox._boot import (
    BPF_JEQ,
    BPF_JGE,
    BPF_JSET,
    BPF_LD_W_ABS,
    BPF_RET,
    CLONE_NAMESPACE_FLAGS,
    DATA_ARCH,
    DATA_ARG0,
    DATA_NR,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SYSCALLS,
    X32_SYSCALL_BIT,
    seccomp_program,
)
from sandbox.runner import NOBODY

EPERM, EINVAL, ENOSYS = errno.EPERM, errno.EINVAL, errno.ENOSYS
MACHINE = os.uname().machine
TABLE = SYSCALLS.get(MACHINE)
ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)  # 1, 2, 10
#: Every family number a kernel could know (AF_MAX is 46 in Linux 6.x) and then some, plus numbers whose
#: low 32 bits (what the filter and the kernel's int look at) are not an allowed family.
FAMILIES = [*range(64), 1000, 0x10001, 0xFFFFFFFF]
#: SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_PACKET, and a type no kernel has
#: (the kernel answers EINVAL for it before it looks at the family: only the filter answers EPERM).
SOCKET_TYPES = (1, 2, 3, 4, 5, 10, 99)
SOCK_PACKET = 10
AF_NETLINK, AF_VSOCK = 16, 40
CLONE_FLAGS = {
    "NEWNS": 0x00020000,
    "NEWCGROUP": 0x02000000,
    "NEWUTS": 0x04000000,
    "NEWIPC": 0x08000000,
    "NEWUSER": 0x10000000,
    "NEWPID": 0x20000000,
    "NEWNET": 0x40000000,
}
#: The calls of the probe whose arguments make the kernel itself answer something else than EPERM for an
#: unprivileged process with no filter (a success, EBADF, EINVAL, EFAULT, ENOENT, ENOSYS...), on any
#: kernel, whatever its sysctls: EPERM for these inside a run can only be the filter's.
KERNEL_SAYS_OTHERWISE = (
    "unshare(0)",
    "setns",
    "mount",
    "umount2",
    "chroot",
    "keyctl",
    "add_key",
    "request_key",
    "process_vm_readv",
    "process_vm_writev",
    "name_to_handle_at",
    "open_tree",
    "fsconfig",
    "mount_setattr",
    "quotactl",
    "io_uring_enter",
    "io_uring_register",
    "clone3",
)


def box(**limits) -> Sandbox:
    return Sandbox(Limits(**{"timeout_seconds": 20, **limits}))


def run_json(source: str, **limits) -> dict:
    result = box(**limits).run_python(source)
    assert result.ok, (result.exit_code, result.limits_hit, result.setup_error, result.stderr[-3000:])
    return json.loads(result.stdout)


# --- what the filter refuses -------------------------------------------------------------------------------

#: Tries every socket family and type, socketpair, and each refused call (every call in a forked child, so
#: that what one does, were it allowed, cannot change the next: a ptrace(TRACEME), an unshare...).
PROBE = r'''
import ctypes
import json
import os
import signal
import struct

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def sc(nr, *args):
    """The raw system call: -errno when it fails, else what it returned."""
    wrapped = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(nr), *wrapped)
    return -ctypes.get_errno() if result == -1 else result


def isolated(call):
    """call() in a forked child: its errno, 0 when it succeeded, -N when the child died of signal N."""
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            result = call()
            code = -result if result < 0 else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def sockets():
    found = {}
    for family in FAMILIES:
        for kind in SOCKET_TYPES:
            fd = sc(TABLE["socket"], family, kind, 0)
            if fd >= 0:
                os.close(fd)
            found[f"{family}/{kind}"] = -fd if fd < 0 else 0
    return found


def socketpairs():
    found = {}
    for family, kind in ((1, 1), (1, 2), (1, 5), (2, 1), (10, 1), (16, 3), (17, 3), (40, 1), (99, 1)):
        pair = (ctypes.c_int * 2)()
        result = sc(TABLE["socketpair"], family, kind, 0, pair)
        if result == 0:
            os.close(pair[0])
            os.close(pair[1])
        found[f"{family}/{kind}"] = -result if result < 0 else 0
    return found


def python_sockets():
    """The same through Python's socket module: an OSError's errno."""
    import socket

    found = {}
    for name, family, kind in (("AF_VSOCK", 40, 1), ("AF_NETLINK", 16, 3), ("AF_PACKET", 17, 3)):
        try:
            socket.socket(family, kind).close()
            found[name] = 0
        except OSError as error:
            found[name] = error.errno
    return found


def clone_with(flags):
    def call():
        pid = sc(TABLE["clone"], flags | signal.SIGCHLD, 0, 0, 0, 0)
        if pid == 0:  # (only were the call allowed) the clone's child leaves at once
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        return pid

    return call


def int80_getpid():
    """getpid through the i386 ABI (int 0x80) from this 64-bit process."""
    import mmap

    code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax, 20 (i386 getpid); int 0x80; ret
    memory = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    memory.write(code)
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(memory)))()


def own_memory(name):
    """process_vm_readv/writev between two buffers of this very process (no privilege needed)."""
    source, target = ctypes.create_string_buffer(b"x" * 8), ctypes.create_string_buffer(8)
    local = struct.pack("QQ", ctypes.addressof(target), 8)
    remote = struct.pack("QQ", ctypes.addressof(source), 8)
    return lambda: sc(TABLE["denied"][name], os.getpid(), local, 1, remote, 1, 0)


AT_FDCWD, NOWHERE = -100, b"/nonexistent-seccomp-test"
D = TABLE["denied"]
CALLS = {
    "unshare(CLONE_NEWUSER)": lambda: sc(D["unshare"], 0x10000000),
    "unshare(0)": lambda: sc(D["unshare"], 0),
    "setns": lambda: sc(D["setns"], -1, 0),
    "mount": lambda: sc(D["mount"], b"none", NOWHERE, b"tmpfs", 0, None),
    "umount2": lambda: sc(D["umount2"], b"/", 0x100),  # an unknown flag
    "pivot_root": lambda: sc(D["pivot_root"], NOWHERE, NOWHERE),
    "chroot": lambda: sc(D["chroot"], NOWHERE),
    "keyctl": lambda: sc(D["keyctl"], 9999, 0, 0, 0, 0),
    "add_key": lambda: sc(D["add_key"], None, None, None, 0, 0),
    "request_key": lambda: sc(D["request_key"], None, None, None, 0),
    "ptrace(PTRACE_TRACEME)": lambda: sc(D["ptrace"], 0, 0, 0, 0),
    "process_vm_readv": own_memory("process_vm_readv"),
    "process_vm_writev": own_memory("process_vm_writev"),
    "bpf": lambda: sc(D["bpf"], 9999, None, 0),
    "perf_event_open": lambda: sc(D["perf_event_open"], None, 0, -1, -1, 0),
    "userfaultfd": lambda: sc(D["userfaultfd"], 1),  # UFFD_USER_MODE_ONLY: allowed to anyone
    "io_uring_setup": lambda: sc(D["io_uring_setup"], 1, ctypes.create_string_buffer(120)),
    "io_uring_enter": lambda: sc(D["io_uring_enter"], -1, 0, 0, 0, None, 0),
    "io_uring_register": lambda: sc(D["io_uring_register"], -1, 0, None, 0),
    "kexec_load": lambda: sc(D["kexec_load"], 0, 0, None, 0),
    "kexec_file_load": lambda: sc(D["kexec_file_load"], -1, -1, 0, None, 0),
    "init_module": lambda: sc(D["init_module"], None, 0, b""),
    "finit_module": lambda: sc(D["finit_module"], -1, b"", 0),
    "delete_module": lambda: sc(D["delete_module"], b"nonexistent_seccomp_test", 0),
    "open_by_handle_at": lambda: sc(D["open_by_handle_at"], AT_FDCWD, ctypes.create_string_buffer(136), 0),
    "name_to_handle_at": lambda: sc(
        D["name_to_handle_at"], AT_FDCWD, b"/", ctypes.create_string_buffer(b"\x80", 136),
        ctypes.create_string_buffer(8), 0),
    "open_tree": lambda: sc(D["open_tree"], AT_FDCWD, b"/", 0x80000),  # no OPEN_TREE_CLONE: an O_PATH fd
    "move_mount": lambda: sc(D["move_mount"], -1, b"", -1, b"", 0),
    "fsopen": lambda: sc(D["fsopen"], b"tmpfs", 0),
    "fsconfig": lambda: sc(D["fsconfig"], -1, 0, None, None, 0),
    "fsmount": lambda: sc(D["fsmount"], -1, 0, 0),
    "fspick": lambda: sc(D["fspick"], AT_FDCWD, b"/", 0),
    "mount_setattr": lambda: sc(D["mount_setattr"], AT_FDCWD, b"/", 0, None, 0),
    "swapon": lambda: sc(D["swapon"], NOWHERE, 0),
    "swapoff": lambda: sc(D["swapoff"], NOWHERE),
    "reboot": lambda: sc(D["reboot"], 0, 0, 0, None),  # wrong magic numbers: EINVAL even for root
    "syslog": lambda: sc(D["syslog"], 10, None, 0),  # SYSLOG_ACTION_SIZE_BUFFER
    "acct": lambda: sc(D["acct"], NOWHERE),
    "quotactl": lambda: sc(D["quotactl"], (0x800001 << 8) | 99, None, 0, None),  # Q_SYNC, quota type 99
    "clone3": lambda: sc(TABLE["clone3"], None, 0),  # (a size of 0: EINVAL without the filter)
}
for flag_name, flag in CLONE_FLAGS.items():  # (with CLONE_NEWUSER an unprivileged process may use each)
    CALLS[f"clone(CLONE_NEWUSER|CLONE_{flag_name})"] = clone_with(0x10000000 | flag)
if TABLE["arch"] == 0xC000003E:  # x86-64: the x32 and the i386 ABIs
    CALLS["x32 getpid"] = lambda: sc(0x40000000 | 39)
    CALLS["i386 getpid (int 0x80)"] = int80_getpid

print(json.dumps({"sockets": sockets(), "socketpairs": socketpairs(), "python": python_sockets(),
                  "calls": {name: isolated(call) for name, call in CALLS.items()}}))
'''


def probe_source() -> str:
    return (
        f"TABLE = {TABLE!r}\nFAMILIES = {FAMILIES!r}\nSOCKET_TYPES = {SOCKET_TYPES!r}\nCLONE_FLAGS = "
        f"{CLONE_FLAGS!r}\n{PROBE}"
    )


def host_runs_int80() -> bool:
    """Whether this kernel runs i386 system calls from a 64-bit process (IA32 emulation)."""
    code = PROBE[PROBE.index("def int80_getpid") : PROBE.index("def own_memory")]
    run = subprocess.run([sys.executable, "-c", f"import ctypes\n{code}\nint80_getpid()"], timeout=30)
    return run.returncode == 0


def status_field(name: str) -> str:
    """A field of this (the test) process's /proc/self/status."""
    lines = Path("/proc/self/status").read_text().splitlines()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(name + ":")), "")


@pytest.fixture(scope="module")
def probed() -> dict:
    """The probe's answers inside a run."""
    if TABLE is None:
        pytest.skip(f"no system call table for {MACHINE}")
    return run_json(probe_source())


@pytest.fixture(scope="module")
def unfiltered(unprivileged_python) -> dict:
    """The same probe on this machine without the filter, as the uid runs have (65534 as root, else this
    user): what the kernel itself answers that uid."""
    if TABLE is None:
        pytest.skip(f"no system call table for {MACHINE}")
    if status_field("Seccomp") != "0":
        pytest.skip("the tests themselves run under a seccomp filter: no unfiltered answer to compare with")
    as_nobody = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    run = subprocess.run(
        [unprivileged_python, "-I", "-c", probe_source()],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        **as_nobody,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_only_unix_and_ip_sockets_can_be_opened(probed):
    sockets = probed["sockets"]
    assert len(sockets) == len(FAMILIES) * len(SOCKET_TYPES)
    # Every other family, of every type (the type the kernel would refuse first included): the filter's EPERM.
    refused = {key: found for key, found in sockets.items() if int(key.split("/")[0]) not in ALLOWED_FAMILIES}
    assert {key: found for key, found in refused.items() if found != EPERM} == {}
    assert sockets[f"{AF_VSOCK}/1"] == sockets[f"{AF_NETLINK}/3"] == EPERM
    for family in ALLOWED_FAMILIES:
        assert sockets[f"{family}/1"] == 0 and sockets[f"{family}/2"] == 0, family  # stream and datagram open
        assert sockets[f"{family}/99"] == EINVAL, family  # the kernel's answer: the filter let it through
    assert sockets["1/5"] == 0  # AF_UNIX SOCK_SEQPACKET
    # The only EPERM among the allowed families is the kernel's own: (AF_INET, SOCK_PACKET) is the obsolete
    # alias of an AF_PACKET socket, which needs CAP_NET_RAW (see the comparison without the filter below).
    kernel_eperm = [key for key, found in sockets.items() if key not in refused and found == EPERM]
    assert kernel_eperm == [f"{socket.AF_INET}/{SOCK_PACKET}"]
    # Through Python's socket module: PermissionError, errno EPERM.
    assert probed["python"] == {"AF_VSOCK": EPERM, "AF_NETLINK": EPERM, "AF_PACKET": EPERM}


def test_socketpair_is_filtered_by_family_too(probed):
    pairs = probed["socketpairs"]
    assert pairs["1/1"] == pairs["1/2"] == pairs["1/5"] == 0  # AF_UNIX: stream, datagram, seqpacket
    # AF_INET/AF_INET6 pass the filter; the kernel has no pairs of them.
    assert pairs["2/1"] == pairs["10/1"] == errno.EOPNOTSUPP
    assert pairs["16/3"] == pairs["17/3"] == pairs["40/1"] == pairs["99/1"] == EPERM


def test_the_refused_calls_fail_with_eperm_and_clone3_with_enosys(probed):
    calls = probed["calls"]
    expected = {name: EPERM for name in calls}
    expected["clone3"] = ENOSYS
    if calls.get("i386 getpid (int 0x80)") == -signal.SIGSEGV and not host_runs_int80():
        expected["i386 getpid (int 0x80)"] = -signal.SIGSEGV  # no IA32 emulation: no filter to reach
    assert calls == expected
    names = {name.split("(")[0] for name in calls}
    assert set(TABLE["denied"]) | {"clone", "clone3"} <= names  # every call the table denies was tried
    assert len([name for name in calls if name.startswith("clone(")]) == len(CLONE_FLAGS)
    assert ("x32 getpid" in calls) == ("i386 getpid (int 0x80)" in calls) == (MACHINE == "x86_64")


def test_without_the_filter_the_kernel_answers_otherwise(probed, unfiltered):
    """The same probe, same uid, outside the sandbox and its filter: the allowed families get the very same
    answers (the filter is transparent for them), and the refusals above are the filter's."""
    inside, outside = probed["sockets"], unfiltered["sockets"]
    allowed = [key for key in inside if int(key.split("/")[0]) in ALLOWED_FAMILIES]
    assert {key: inside[key] for key in allowed} == {key: outside[key] for key in allowed}
    assert outside[f"{AF_NETLINK}/3"] == 0  # (a netlink socket any process may open)
    inside, outside = probed["socketpairs"], unfiltered["socketpairs"]
    allowed = [key for key in inside if int(key.split("/")[0]) in ALLOWED_FAMILIES]
    assert {key: inside[key] for key in allowed} == {key: outside[key] for key in allowed}
    calls = unfiltered["calls"]
    assert {name: calls[name] for name in KERNEL_SAYS_OTHERWISE if calls[name] == EPERM} == {}
    assert calls["clone3"] != ENOSYS
    if MACHINE == "x86_64":
        assert calls["x32 getpid"] != EPERM


def test_the_filter_is_inherited_and_cannot_be_undone():
    """A child and a grandchild get it; prctl cannot remove it or no_new_privs; a filter of the program's
    own, permissive or handing calls to a supervisor (SECCOMP_RET_USER_NOTIF), does not lift a refusal."""
    if TABLE is None:
        pytest.skip(f"no system call table for {MACHINE}")
    seccomp_nr = {"x86_64": 317, "aarch64": 277, "arm64": 277}[MACHINE]
    source = f"UNSHARE, SECCOMP = {TABLE['denied']['unshare']}, {seccomp_nr}\n" + textwrap.dedent(r'''
        import contextlib
        import ctypes
        import io
        import json
        import signal
        import struct
        import subprocess
        import sys

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
        CHECKS = """
        import ctypes, json, socket
        libc = ctypes.CDLL(None, use_errno=True)
        found = {"unshare": libc.unshare(0x10000000) and ctypes.get_errno()}
        try:
            socket.socket(40, socket.SOCK_STREAM).close()
            found["vsock"] = 0
        except OSError as error:
            found["vsock"] = error.errno
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        found["Seccomp"] = status["Seccomp"].strip()
        found["Seccomp_filters"] = int(status["Seccomp_filters"])
        print(json.dumps(found))
        """


        def checks():
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(CHECKS, {})
            return json.loads(out.getvalue())


        def child(*argv):
            run = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
            return json.loads(run.stdout) if run.returncode == 0 else run.stderr


        def prctl(option, *args):
            result = libc.prctl(option, *(list(args) + [0] * (4 - len(args))))
            return -ctypes.get_errno() if result == -1 else result


        def fprog(*instructions):
            """A struct sock_fprog for these (code, jt, jf, k) instructions."""
            code = b"".join(struct.pack("HBBI", *instruction) for instruction in instructions)
            program = ctypes.create_string_buffer(code, len(code))
            KEEP.append(program)
            return ctypes.create_string_buffer(struct.pack("HL", len(instructions), ctypes.addressof(program)))


        def seccomp(flags, prog):
            """The seccomp(2) call, SECCOMP_SET_MODE_FILTER: what it returned, or -errno."""
            result = libc.syscall(ctypes.c_long(SECCOMP), ctypes.c_long(1), ctypes.c_long(flags), prog)
            return -ctypes.get_errno() if result == -1 else result


        KEEP = []
        found = {"program": checks(), "child": child("-c", CHECKS)}
        found["grandchild"] = child(
            "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1]])", CHECKS)
        found["PR_GET_SECCOMP"] = prctl(21)
        found["PR_SET_SECCOMP, SECCOMP_MODE_DISABLED"] = prctl(22, 0)
        found["PR_SET_NO_NEW_PRIVS, 0"] = prctl(38, 0)
        found["PR_GET_NO_NEW_PRIVS"] = prctl(39)
        allow_all = fprog((0x06, 0, 0, 0x7FFF0000))  # RET SECCOMP_RET_ALLOW
        found["own filter by prctl"] = prctl(22, 2, ctypes.addressof(allow_all))
        found["own filter by seccomp()"] = seccomp(0, allow_all)
        notify = fprog(  # unshare: SECCOMP_RET_USER_NOTIF, to the listener (a supervisor could allow it)
            (0x20, 0, 0, 0), (0x15, 0, 1, UNSHARE), (0x06, 0, 0, 0x7FC00000), (0x06, 0, 0, 0x7FFF0000))
        listener = seccomp(8, notify)  # SECCOMP_FILTER_FLAG_NEW_LISTENER: a file descriptor
        found["notify filter"] = "listener" if listener >= 0 else listener
        signal.alarm(5)  # (were the supervisor asked, unshare would wait for it)
        found["program after"] = checks()
        signal.alarm(0)
        found["child after"] = child("-c", CHECKS)
        print(json.dumps(found))
    ''')
    found = run_json(source)
    refused = {"unshare": EPERM, "vsock": EPERM, "Seccomp": "2", "Seccomp_filters": 1}
    assert found["program"] == found["child"] == found["grandchild"] == refused
    assert found["PR_GET_SECCOMP"] == 2  # SECCOMP_MODE_FILTER
    assert found["PR_SET_SECCOMP, SECCOMP_MODE_DISABLED"] == -EINVAL
    assert found["PR_SET_NO_NEW_PRIVS, 0"] == -EINVAL and found["PR_GET_NO_NEW_PRIVS"] == 1
    # It may add filters of its own...
    assert found["own filter by prctl"] == 0 and found["own filter by seccomp()"] == 0
    assert found["notify filter"] == "listener"
    # ...but the most restrictive answer wins: still EPERM at once, for it and for what it starts.
    assert found["program after"] == found["child after"] == {**refused, "Seccomp_filters": 4}


# --- what it lets through ---------------------------------------------------------------------------------


def host_has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


HONEST = r"""
import asyncio
import concurrent.futures
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading


def status(path="/proc/self/status"):
    fields = dict(line.split(":", 1) for line in open(path).read().splitlines())
    return {key: fields[key].strip() for key in ("Seccomp", "Seccomp_filters", "NoNewPrivs")}


def echo(family, host):
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.bind((host, 0))
        server.listen(1)

        def serve():
            connection, _ = server.accept()
            with connection:
                connection.sendall(connection.recv(100).upper())

        helper = threading.Thread(target=serve)
        helper.start()
        with socket.create_connection(server.getsockname()[:2], timeout=5) as client:
            client.sendall(b"ping")
            answer = client.recv(100).decode()
        helper.join()
        return answer


async def echo_async():
    async def handle(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
    writer.write(b"async\n")
    answer = await reader.readline()
    writer.close()
    server.close()
    await server.wait_closed()
    return answer.decode()


def attempt(call):
    try:
        return call()
    except Exception as error:
        return f"{type(error).__name__}: {error}"


if __name__ == "__main__":  # (the forkserver and spawn pools' children import this file)
    found = {"status": status()}
    seen = []
    thread = threading.Thread(target=lambda: seen.append(status("/proc/thread-self/status")))
    thread.start()
    thread.join()
    found["thread status"] = seen[0]
    with concurrent.futures.ThreadPoolExecutor(4) as threads:
        found["thread pool"] = list(threads.map(lambda n: n * n, range(8)))
    run = subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True)
    found["subprocess"] = [run.returncode, run.stdout, run.stderr]
    run = subprocess.run(["sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True)
    found["shell"] = [run.returncode, run.stdout]
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    found["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    for method in ("fork", "forkserver", "spawn"):

        def pool_map(method=method):
            with multiprocessing.get_context(method).Pool(2) as pool:
                return pool.map(abs, range(-3, 3))

        found[f"pool ({method})"] = attempt(pool_map)
    found["tcp 127.0.0.1"] = attempt(lambda: echo(socket.AF_INET, "127.0.0.1"))
    found["tcp ::1"] = attempt(lambda: echo(socket.AF_INET6, "::1"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        a.bind(("127.0.0.1", 0))
        b.sendto(b"datagram", a.getsockname())
        found["udp 127.0.0.1"] = a.recv(100).decode()
    found["asyncio"] = attempt(lambda: asyncio.run(echo_async()))
    found["getaddrinfo"] = attempt(lambda: sorted({i[4][0] for i in socket.getaddrinfo("localhost", 80)}))
    found["getaddrinfo AI_ADDRCONFIG"] = attempt(  # (glibc asks netlink, refused, and copes)
        lambda: sorted({i[4][0] for i in socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG)}))
    big = bytearray(300 * 2**20)
    big[-1] = 1
    found["allocation"] = len(big)
    print(json.dumps(found))
"""


def test_honest_programs_work_under_the_filter():
    found = run_json(HONEST, memory_mb=1024)
    filtered = {"Seccomp": "2", "Seccomp_filters": "1", "NoNewPrivs": "1"}
    assert found["status"] == found["thread status"] == filtered
    assert found["thread pool"] == [n * n for n in range(8)]
    assert found["subprocess"] == [0, "1\n", ""] and found["shell"] == [0, "42\n"]
    assert found["fork"] == 7
    for method in ("fork", "forkserver", "spawn"):
        assert found[f"pool ({method})"] == [3, 2, 1, 0, 1, 2], method
    assert found["tcp 127.0.0.1"] == "PING" and found["udp 127.0.0.1"] == "datagram"
    if host_has_ipv6_loopback():
        assert found["tcp ::1"] == "PING"
    assert found["asyncio"] == "ASYNC\n"
    assert "127.0.0.1" in found["getaddrinfo"] and "127.0.0.1" in found["getaddrinfo AI_ADDRCONFIG"]
    assert found["allocation"] == 300 * 2**20


# --- the isolation check and the program itself ------------------------------------------------------------


def test_the_isolation_check_says_the_filter_is_in_force_here():
    found = sandbox.isolation()
    assert found.seccomp is True, found.description
    assert "seccomp filter" in found.description and "no seccomp filter" not in found.description


def run_bpf(program: list[tuple[int, int, int, int]], nr: int, arch: int, arg0: int = 0) -> int:
    """What the classic-BPF ``program`` returns for a call (little endian struct seccomp_data)."""
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, arg0 & 0xFFFFFFFFFFFFFFFF, 0, 0, 0, 0, 0)
    accumulator, pc = 0, 0
    while True:
        assert 0 <= pc < len(program), f"ran off the program at {pc}"
        code, jt, jf, k = program[pc]
        if code == BPF_LD_W_ABS:
            (accumulator,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == BPF_RET:
            return k
        else:
            taken = {BPF_JEQ: accumulator == k, BPF_JGE: accumulator >= k, BPF_JSET: bool(accumulator & k)}
            pc += 1 + (jt if taken[code] else jf)


def loads_before(program: list[tuple[int, int, int, int]]) -> list[set]:
    """For each instruction, which seccomp_data offsets the accumulator may hold there (over every path)."""
    held: list[set] = [set() for _ in program]
    held[0] = {None}
    for pc, (code, jt, jf, k) in enumerate(program):
        after = {k} if code == BPF_LD_W_ABS else held[pc]
        if code in (BPF_JEQ, BPF_JGE, BPF_JSET):
            held[pc + 1 + jt] |= after
            held[pc + 1 + jf] |= after
        elif code != BPF_RET:
            held[pc + 1] |= after
    return held


@pytest.mark.parametrize("machine", sorted(SYSCALLS))
def test_the_program_for_each_architecture(machine):
    table, program = SYSCALLS[machine], seccomp_program(machine)
    deny, enosys = SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ERRNO | ENOSYS
    # Well formed: known opcodes, loads of aligned fields of seccomp_data, forward jumps that land inside,
    # every instruction but a return followed by another: every path ends on a return.
    assert 0 < len(program) <= 4096 and program[-1][0] == BPF_RET
    for pc, (code, jt, jf, k) in enumerate(program):
        assert 0 <= k < 2**32 and 0 <= jt < 256 and 0 <= jf < 256, pc
        if code == BPF_LD_W_ABS:
            assert k in (DATA_NR, DATA_ARCH, DATA_ARG0) and jt == jf == 0, pc
        elif code == BPF_RET:
            assert k in (SECCOMP_RET_ALLOW, deny, enosys) and jt == jf == 0, pc
        else:
            assert code in (BPF_JEQ, BPF_JGE, BPF_JSET), pc
            assert pc + 1 + max(jt, jf) < len(program), pc
    assert program[0] == (BPF_LD_W_ABS, 0, 0, DATA_ARCH)  # the architecture first
    assert program[1][0] == BPF_JEQ and program[1][3] == table["arch"] and program[1][1] == 0
    assert program[2 + program[1][2]] == (BPF_RET, 0, 0, deny)  # another ABI: EPERM

    # Decoded: the numbers compared against the system call number, and where each comparison leads.
    held = loads_before(program)

    def target(pc: int) -> tuple:  # where a jump goes when its comparison holds
        return program[pc + 1 + program[pc][1]]

    on_number = [
        (pc, k) for pc, (code, _, _, k) in enumerate(program) if code == BPF_JEQ and held[pc] == {DATA_NR}
    ]
    denied = {k for pc, k in on_number if target(pc) == (BPF_RET, 0, 0, deny)}
    assert denied == set(table["denied"].values())
    assert {k for pc, k in on_number if target(pc) == (BPF_RET, 0, 0, enosys)} == {table["clone3"]}
    x32_checks = [
        pc for pc, (code, _, _, k) in enumerate(program) if code == BPF_JGE and k == X32_SYSCALL_BIT
    ]
    if machine == "x86_64":
        assert x32_checks == [3] and held[3] == {DATA_NR} and target(3) == (BPF_RET, 0, 0, deny)
    else:
        assert x32_checks == []
    flags = [(pc, k) for pc, (code, _, _, k) in enumerate(program) if code == BPF_JSET]
    assert [k for _, k in flags] == [CLONE_NAMESPACE_FLAGS] and held[flags[0][0]] == {DATA_ARG0}
    families = {
        k for pc, (code, _, _, k) in enumerate(program) if code == BPF_JEQ and held[pc] == {DATA_ARG0}
    }
    assert families == set(ALLOWED_FAMILIES)

    # Simulated, call by call.
    arch = table["arch"]
    special = {table["socket"], table["socketpair"], table["clone"], table["clone3"], *denied}
    for nr in range(1000):
        if nr not in special:
            assert run_bpf(program, nr, arch) == SECCOMP_RET_ALLOW, nr
    for name, nr in table["denied"].items():
        assert run_bpf(program, nr, arch) == deny, name
        assert run_bpf(program, nr, arch, arg0=2**64 - 1) == deny, name
    assert run_bpf(program, table["clone3"], arch) == enosys
    for nr in (table["socket"], table["socketpair"]):
        for family in range(256):
            expected = SECCOMP_RET_ALLOW if family in ALLOWED_FAMILIES else deny
            assert run_bpf(program, nr, arch, arg0=family) == expected, family
        # Decided on the low 32 bits, as the kernel's int family is.
        assert run_bpf(program, nr, arch, arg0=(1 << 32) | socket.AF_NETLINK) == deny
        assert (
            run_bpf(program, nr, arch, arg0=(socket.AF_NETLINK << 32) | socket.AF_INET) == SECCOMP_RET_ALLOW
        )
        assert run_bpf(program, nr, arch, arg0=0x10000 | socket.AF_UNIX) == deny
    clone = table["clone"]
    thread_flags = 0x003D0F00  # what pthread_create passes to clone
    for flags_ in (17, thread_flags, 0x01200011):  # SIGCHLD (fork), a thread, glibc's fork
        assert run_bpf(program, clone, arch, arg0=flags_) == SECCOMP_RET_ALLOW, hex(flags_)
    for name, flag in CLONE_FLAGS.items():
        assert run_bpf(program, clone, arch, arg0=flag | 17) == deny, name
        assert run_bpf(program, clone, arch, arg0=flag | thread_flags) == deny, name
    other_arches = {0xC000003E, 0xC00000B7, 0x40000003, 0x40000028} - {arch}  # x86-64, aarch64, i386, arm
    for other in other_arches:
        for nr in (0, 1, 39, 60, 63, 172, 231, table["socket"]):
            assert run_bpf(program, nr, other, arg0=socket.AF_UNIX) == deny, (hex(other), nr)
    for nr in (X32_SYSCALL_BIT, X32_SYSCALL_BIT | 39, X32_SYSCALL_BIT | table["socket"], 0xFFFFFFFF):
        expected = deny if machine == "x86_64" else SECCOMP_RET_ALLOW
        assert run_bpf(program, nr, arch) == expected, hex(nr)
