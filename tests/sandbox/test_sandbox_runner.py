"""The sandbox's runs: input and output, each limit, the isolation check, parallel runs, both uids."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sandbox_fixtures import *  # noqa: F403  (the shared fixtures)

import sandbox
from sandbox import Limits, Sandbox
from sandbox.runner import NOBODY, _isolation_cache

REPO = Path(__file__).resolve().parents[2]


def box(**limits) -> Sandbox:
    return Sandbox(Limits(**{"timeout_seconds": 5, **limits}))


def test_a_script_gets_stdin_argv_and_files_and_its_output_comes_back():
    result = box().run_python(
        "import sys; print(sys.stdin.read().upper(), sys.argv[1:], open('data.txt').read())\n"
        "print('to stderr', file=sys.stderr); sys.exit(3)",
        stdin="hi",
        argv=["-x", "1"],
        files={"data.txt": "D"},
    )
    assert result.stdout == "HI ['-x', '1'] D\n" and result.stderr == "to stderr\n"
    assert result.exit_code == 3 and result.signal is None and not result.ok
    assert not result.timed_out and result.limits_hit == () and result.setup_error == ""


def test_an_uncaught_exception_is_a_traceback_and_status_1():
    result = box().run_python("def f():\n    raise ValueError('no')\nf()\n")
    assert result.exit_code == 1 and "ValueError: no" in result.stderr and 'main.py", line 3' in result.stderr


def test_run_command_and_the_scrubbed_environment(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    result = box().run_command(["sh", "-c", "env; echo done"])
    assert result.exit_code == 0 and "done" in result.stdout
    assert "hunter2" not in result.stdout and "SECRET_TOKEN" not in result.stdout
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert {"PATH", "HOME", "LANG"} <= names and len(names) < 15


def test_the_isolation_in_force_is_checked_once_and_logged_in_one_line(caplog):
    _isolation_cache.clear()
    with caplog.at_level(logging.INFO, logger="sandbox.runner"):
        first = sandbox.isolation()
        again = sandbox.isolation()
    lines = [r.getMessage() for r in caplog.records if r.name == "sandbox.runner"]
    assert first is again and len(lines) == 1 and lines[0].startswith("sandbox isolation: ")
    assert first.mode in ("namespaces", "none") and first.mode in lines[0]
    assert box().isolation == first.mode


def test_namespaces_are_in_force_on_this_machine():
    """unshare works here (and in CI, which runs on the same kind of machine)."""
    found = sandbox.isolation()
    assert found.mode == "namespaces", found.reason
    probe = box().run_python(
        "import os, socket, json\n"
        "interfaces = sorted(line.split(':')[0].strip() for line in open('/proc/net/dev') if ':' in line)\n"
        "print(json.dumps([os.getuid(), os.getpid(), interfaces,"
        " sorted(p for p in os.listdir('/proc') if p.isdigit()), os.getcwd(), socket.gethostname()]))"
    )
    uid, pid, interfaces, pids, cwd, hostname = json.loads(probe.stdout)
    assert uid == (NOBODY if os.geteuid() == 0 else 0) and pid == 2 and interfaces == ["lo"]
    assert pids == ["1", "2"] and cwd == "/tmp" and hostname == "sandbox"


def test_wall_time():
    began = time.monotonic()
    result = box(timeout_seconds=1).run_python("import time\ntime.sleep(60)")
    assert result.timed_out and result.limits_hit == ("wall",) and result.exit_code is None
    assert time.monotonic() - began < 15  # killed at its limit, not after the program's 60 s


def test_cpu_time():
    result = box(timeout_seconds=10, cpu_seconds=1).run_python("while True:\n    pass")
    assert "cpu" in result.limits_hit and not result.timed_out and result.signal is not None
    assert 0.9 < result.cpu_seconds < 3 and result.duration_seconds < 5


def test_memory():
    result = box(memory_mb=200).run_python("x = bytearray(500 * 2**20)")
    assert result.exit_code == 1 and "MemoryError" in result.stderr and result.limits_hit == ("memory",)
    assert box(memory_mb=200).run_python("x = bytearray(50 * 2**20); print(len(x))").ok


def test_output_is_capped_while_read_and_the_run_killed():
    result = box(max_output_bytes=1000).run_python("while True:\n    print('y' * 100)")
    assert "output" in result.limits_hit and len(result.stdout) == 1000 and result.stdout.startswith("y")
    assert not result.timed_out  # stopped by the cap, before its time limit


def test_file_size_and_open_files():
    result = box(max_file_mb=1).run_python("open('big', 'wb').write(b'x' * (2 * 2**20))")
    assert "file_size" in result.limits_hit
    result = box(max_open_files=32).run_python("fs = [open('/dev/null') for _ in range(100)]")
    assert result.exit_code == 1 and "Too many open files" in result.stderr


def test_processes():
    result = box(max_processes=8).run_python(
        "import os, time\nkids = []\nfor _ in range(50):\n    pid = os.fork()\n    if pid == 0:\n"
        "        time.sleep(30)\n    kids.append(pid)\nprint(len(kids))"
    )
    assert "processes" in result.limits_hit and "Resource temporarily unavailable" in result.stderr
    assert result.duration_seconds < 3


def test_map_runs_in_parallel_and_keeps_the_order():
    sandbox_ = Sandbox(Limits(timeout_seconds=5), num_workers=3)
    program = "import time; began = time.time(); time.sleep(0.5); print({n}, began, time.time())"
    results = sandbox_.map(lambda n: sandbox_.run_python(program.format(n=n)), range(6))
    spans = [r.stdout.split() for r in results]
    assert [int(n) for n, _, _ in spans] == list(range(6))
    # Runs overlapped in time (each program's own clock, no speed threshold): some started before another ended.
    intervals = sorted((float(start), float(end)) for _, start, end in spans)
    assert any(later[0] < earlier[1] for earlier, later in zip(intervals, intervals[1:], strict=False))


def test_limits_are_validated():
    with pytest.raises(ValueError, match="timeout_seconds"):
        Limits(timeout_seconds=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=0)
    with pytest.raises(ValueError, match="num_workers"):
        Sandbox(num_workers=0)


def test_the_fallback_without_namespaces(unprivileged_python):
    fallback = Sandbox(Limits(timeout_seconds=2, memory_mb=300), isolation="none", python=unprivileged_python)
    result = fallback.run_python("import os; print(os.getuid(), os.getcwd().startswith('/tmp/sandbox-'))")
    assert (
        result.stdout == f"{NOBODY if os.geteuid() == 0 else os.getuid()} True\n"
        and result.isolation == "none"
    )
    # A busy loop meets its CPU-time limit and the wall clock in the same instant: either may be first.
    busy = fallback.run_python("while True: pass")
    assert set(busy.limits_hit) & {"wall", "cpu"} and busy.exit_code is None
    assert "memory" in fallback.run_python("x = bytearray(10**9)").limits_hit


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_as_an_ordinary_user_a_user_namespace_drops_every_capability(unprivileged_python, tmp_path):
    """What a user without root gets: run the harness itself as uid 65534."""
    code = (
        "import json, sandbox\n"
        "result = sandbox.Sandbox(sandbox.Limits(timeout_seconds=5)).run_python("
        '\'import os; s = open("/proc/self/status").read()\\n'
        'print(os.getuid(), [l.split()[1] for l in s.splitlines() if l.startswith("CapEff")][0])\')\n'
        "print(json.dumps([sandbox.isolation().mode, result.stdout]))\n"
    )
    run = subprocess.run(
        [unprivileged_python, "-c", code],
        cwd=REPO,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
    )
    mode, stdout = json.loads(run.stdout.splitlines()[-1])
    assert mode == "namespaces", run.stderr
    assert stdout == "0 0000000000000000\n"  # namespace root, no capability at all


def test_a_setup_failure_is_reported_not_hidden(tmp_path):
    missing = Sandbox(Limits(timeout_seconds=5), isolation="none", python=sys.executable, user=None)
    result = missing.run_command(["/nonexistent/program"])
    assert result.exit_code != 0 and "nonexistent" in result.stderr


def test_the_package_works_from_a_folder_inside_the_sandbox_s_own_tmp(tmp_path):
    """The sandbox replaces /tmp; the package's own files may live there (a clone under /tmp)."""
    import shutil

    shutil.copytree(Path(__file__).resolve().parents[2] / "sandbox", tmp_path / "sandbox")
    script = (
        "from sandbox import Limits, Sandbox\n"
        "from sandbox.judge import run_tests\n"
        "result = run_tests(Sandbox(Limits(timeout_seconds=10)), 'def add(a, b):\\n    return a + b\\n',"
        " ['assert add(1, 2) == 3'])\n"
        "import sandbox; print(sandbox.__file__, result.passed, result.load_error)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(tmp_path / "sandbox" / "__init__.py"), "(True,)"]


def test_every_process_a_run_started_is_reaped():
    """With the trainer as pid 1 or a child subreaper, a process of a run orphaned at its end would become
    the trainer's zombie: runs that end, time out, hit the output cap, and judgements stopped once their
    tests are done leave none."""
    code = textwrap.dedent(
        """
        import ctypes, json, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        from sandbox import Limits, Sandbox
        from sandbox.judge import run_tests
        box = Sandbox(Limits(timeout_seconds=1, max_output_bytes=1000))
        for _ in range(2):
            run_tests(box, "def add(a, b):\\n    return a + b\\n", ["assert add(1, 2) == 3"])
            run_tests(box, "import time\\ntime.sleep(60)\\n", ["assert add(1, 2) == 3"])
            box.run_python("import time\\ntime.sleep(60)")
            box.run_python("while True:\\n    print('x' * 100)")
            box.run_python("print(1)")
        time.sleep(0.5)  # (for the kernel to finish the killed processes)
        zombies = []
        for entry in os.listdir("/proc"):
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                zombies.append(entry)
        print(json.dumps(zombies))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == []


def test_a_run_is_reaped_only_after_its_group_is_killed():
    """Until the harness has killed the run's process group, the boot process (the group's leader) stays
    unreaped, so its pid, the group's id, cannot be another process's by the time of the kill."""
    sandbox_ = box()
    process = sandbox_._spawn("script", "", files={"main.py": "print(1)"}, stdin=b"", argv=["main.py"])
    began = time.monotonic()
    while not process.poll_exit():
        assert time.monotonic() - began < 10, "the run did not end"
        time.sleep(0.01)
    state = (Path("/proc") / str(process.pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state == "Z"  # exited, its pid still held
    process.finish()  # (reaps it: its status is the run's)
    assert os.WIFEXITED(process.wait_status) and os.WEXITSTATUS(process.wait_status) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_without_namespaces_an_ordinary_user_must_ask_for_the_fallback(unprivileged_python):
    """Without namespaces a program of a harness that is not root would run as the harness's uid, able to
    read its files and its processes' environment: "auto" refuses, only isolation="none" runs it."""
    code = textwrap.dedent(
        """
        import json, os, sys
        import sandbox
        from sandbox import runner
        runner._isolation_cache[(sys.executable, os.geteuid())] = runner.Isolation(
            "none", "none: as on a machine without user namespaces", reason="unshare: Operation not permitted"
        )
        try:
            sandbox.Sandbox().run_python("print(open(f'/proc/{os.getppid()}/environ').read())")
            refused = ""
        except sandbox.SandboxUnavailableError as error:
            refused = str(error)
        result = sandbox.Sandbox(isolation="none").run_python("import os; print(os.getuid())")
        print(json.dumps([refused, result.stdout, result.isolation]))
        """
    )
    run = subprocess.run(
        [unprivileged_python, "-c", code],
        cwd=REPO,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        env={"PATH": os.environ["PATH"], "HF_TOKEN": "hf_secret"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    refused, stdout, mode = json.loads(run.stdout.splitlines()[-1])
    assert "isolation='none'" in refused and "hf_secret" not in run.stdout
    assert stdout == f"{NOBODY}\n" and mode == "none"


def test_a_program_killed_by_a_signal_is_reported_so():
    """SIGKILL too (it cannot be given a handler, which the boot script's report once tripped on)."""
    for number in (9, 15, 11):
        result = box().run_python(f"import os\nprint('before', flush=True)\nos.kill(os.getpid(), {number})")
        assert (result.signal, result.exit_code, result.setup_error) == (number, None, ""), result.stderr
        assert result.stdout == "before\n"


def test_a_traceback_shows_the_program_frames_only():
    result = box().run_python("def f():\n    return 1 / 0\n\nf()\n")
    assert result.exit_code == 1 and "<sandbox" not in result.stderr
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert (
        result.stderr.rstrip().endswith("ZeroDivisionError: division by zero") and "line 4" in result.stderr
    )
    assert box().run_python("import sys\nsys.exit(3)").exit_code == 3
    assert box().run_python("exit(4)").exit_code == 4  # site's builtins are there


def test_no_host_path_of_the_repository_is_in_view():
    """/proc/1/cmdline (the run's init), the program's own command line and a traceback show no repository
    or virtual environment path: the boot script comes as marshalled code, under the interpreter's real file."""
    repo = str(Path(__file__).resolve().parents[2])
    result = box().run_python(
        "import sys\n"
        "for path in ('/proc/1/cmdline', '/proc/self/cmdline', '/proc/self/mountinfo'):\n"
        "    print(open(path, 'rb').read().replace(b'\\0', b' ').decode())\n"
        "print(sys.executable, sys.argv)\n"
        "raise ValueError('the end')\n"
    )
    assert "ValueError: the end" in result.stderr and "-I -S -B -c" in result.stdout
    assert repo not in result.stdout + result.stderr, result.stdout
