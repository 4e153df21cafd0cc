"""Benchmark our accuracy rewards against TRL's ``accuracy_reward`` on realistic GRPO batches.

Builds two batches from real data (``--data-dir``, default ``<repo>/../shared/data``):

* **GSM8K** (test split): for each question, G completions in several styles -- worked solution with
  ``\\boxed{N}``, "The answer is N.", the original ``#### N``, ``$N$``, a verbose one, and wrong ones
  (N+1, no answer) -- with the gold number repeated per group, as TRL repeats dataset columns.
* **MATH-500**: ``\\boxed{answer}``, the worked solution itself, "The final answer is $answer$.", the
  answer in another spelling (``\\dfrac``/``\\left`` dropped), a verbose one, and wrong ones (another
  problem's answer, no answer), with the ``solution`` column as gold.

Each reward scores the batches one group at a time (fresh caches and workers, warmed up first) and
the script prints throughput, p50/p99 latency per group, the ratio to TRL, and how many of the 500
``\\boxed{<answer>}`` MATH-500 completions each reward gives full marks.

Usage: ``python scripts/bench_rewards.py [--data-dir DIR] [--limit N] [--group-size G]``
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import rewards
from rewards.math_rewards import VERDICTS, fast_verdict, prepare_answer, prepare_gold
from rewards.number_parsing import format_number, parse_number
from rewards.numeric_rewards import parse_gold_number

REPO_ROOT = Path(__file__).resolve().parents[1]

RewardFn = Callable[..., list]


def load_jsonl(path: Path, limit: int | None) -> list[dict]:
    with path.open() as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return rows[:limit] if limit else rows


def gsm8k_groups(rows: list[dict], group_size: int) -> list[tuple[list[str], list[str]]]:
    """(completions, solutions) per question."""
    groups = []
    for row in rows:
        work, number = row["answer"].split("####")
        number = number.strip()
        wrong = format_number(parse_number(number) + 1)
        styles = [
            f"{work}The answer is $\\boxed{{{number}}}$.",
            f"{work}The answer is {number}.",
            row["answer"],
            f"{work}So the answer is ${number}$.",
            f"Let me think step by step.\n{work * 3}\nTherefore the final answer is \\boxed{{{number}}}.",
            f"{work}The answer is $\\boxed{{{wrong}}}$.",
            f"{work}#### {wrong}",
            f"{work}I am not sure.",
        ]
        completions = [styles[i % len(styles)] for i in range(group_size)]
        groups.append((completions, [number] * group_size))
    return groups


def respell(answer: str) -> str:
    """The same answer written differently (what a model might output)."""
    answer = answer.replace("\\dfrac", "\\frac").replace("\\left", "").replace("\\right", "")
    return re.sub(r"\s+", " ", answer)


def math_groups(rows: list[dict], group_size: int) -> list[tuple[list[str], list[str]]]:
    groups = []
    for index, row in enumerate(rows):
        answer = row["answer"]
        other = next(
            rows[(index + k) % len(rows)]["answer"]
            for k in range(1, len(rows))
            if fast_verdict(prepare_answer(rows[(index + k) % len(rows)]["answer"]), prepare_answer(answer))
            is not True
        )
        styles = [
            f"The answer is $\\boxed{{{answer}}}$.",
            row["solution"],
            f"Final Answer: The final answer is ${answer}$. I hope it is correct.",
            f"Simplifying, we get $\\boxed{{{respell(answer)}}}$.",
            f"Let us think.\n{row['solution'][:-1] * 2}\nThus the answer is $\\boxed{{{answer}}}$.",
            f"The answer is $\\boxed{{{other}}}$.",
            f"We compute carefully and find $x = {other}$, so \\boxed{{{other}}}.",
            "I could not solve this problem.",
        ]
        completions = [styles[i % len(styles)] for i in range(group_size)]
        groups.append((completions, [row["solution"]] * group_size))
    return groups


def reset_our_caches() -> None:
    """Fresh state, so cross-run caching does not flatter our numbers."""
    prepare_gold.cache_clear()
    prepare_answer.cache_clear()
    parse_gold_number.cache_clear()
    VERDICTS.clear()
    rewards.shutdown_workers()


def timed(reward: RewardFn, groups: list[tuple[list[str], list[str]]]) -> tuple[list, list[float]]:
    """Score group by group; (all scores, seconds per group)."""
    scores: list = []
    latencies: list[float] = []
    for completions, solutions in groups:
        conversations = [[{"role": "assistant", "content": text}] for text in completions]
        start = time.perf_counter()
        scores.extend(reward(completions=conversations, solution=solutions))
        latencies.append(time.perf_counter() - start)
    return scores, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT.parent / "shared" / "data")
    parser.add_argument(
        "--limit", type=int, default=None, help="questions per dataset (default: 300 GSM8K, 500 MATH)"
    )
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt (GRPO's G)")
    parser.add_argument("--no-trl", action="store_true", help="skip TRL's accuracy_reward")
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO_ROOT / "outputs" / "bench_rewards.json",
        help="the table as JSON (default: outputs/bench_rewards.json)",
    )
    args = parser.parse_args()

    gsm8k_path = args.data_dir / "gsm8k" / "test.jsonl"
    math_path = args.data_dir / "math500" / "test.jsonl"
    for path in (gsm8k_path, math_path):
        if not path.is_file():
            print(
                f"error: {path} not found; pass --data-dir pointing at the shared data folder",
                file=sys.stderr,
            )
            return 2

    trl_reward: RewardFn | None = None
    if not args.no_trl:
        try:
            from trl.rewards import accuracy_reward as trl_reward
        except ImportError as error:
            print(f"(TRL not available, its rows are skipped: {error})")
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # TRL's timeouts log warnings

    math_rows = load_jsonl(math_path, args.limit or 500)
    batches = {
        "gsm8k": gsm8k_groups(load_jsonl(gsm8k_path, args.limit or 300), args.group_size),
        "math500": math_groups(math_rows, args.group_size),
    }
    contenders: dict[str, list[tuple[str, RewardFn]]] = {
        "gsm8k": [
            ("math_accuracy", rewards.get_reward("math_accuracy")),
            ("gsm8k_accuracy", rewards.get_reward("gsm8k_accuracy")),
        ],
        "math500": [("math_accuracy", rewards.get_reward("math_accuracy"))],
    }
    if trl_reward is not None:
        for entries in contenders.values():
            entries.insert(0, ("trl.accuracy_reward", trl_reward))

    header = (
        f"{'batch':8} {'reward':20} {'compl.':>7} {'time s':>7} {'compl/s':>9} {'p50 ms/grp':>10} "
        f"{'p99 ms/grp':>10} {'x TRL':>6} {'mean':>5} {'=TRL':>6}"
    )
    print(f"group size G={args.group_size}; one call per group; caches cleared and workers warmed first")
    print(header)
    print("-" * len(header))
    table: list[dict[str, object]] = []
    for batch, groups in batches.items():
        baseline_rate = None
        baseline_scores = None
        for label, reward in contenders[batch]:
            if label != "trl.accuracy_reward":
                reset_our_caches()
                reward.warmup()
            warm = [[{"role": "assistant", "content": "\\boxed{1}"}]]
            reward(completions=warm, solution=["1"])  # lazy imports happen outside the timing
            scores, latencies = timed(reward, groups)
            total = sum(latencies)
            rate = len(scores) / total
            if label == "trl.accuracy_reward":
                baseline_rate, baseline_scores = rate, scores
            ratio = f"{rate / baseline_rate:6.1f}" if baseline_rate else f"{'-':>6}"
            agree = (
                f"{sum(a == b for a, b in zip(scores, baseline_scores, strict=True)) / len(scores):6.1%}"
                if baseline_scores is not None
                else f"{'-':>6}"
            )
            mean = statistics.fmean(s or 0.0 for s in scores)
            table.append(
                {
                    "batch": batch,
                    "reward": label,
                    "completions": len(scores),
                    "seconds": round(total, 4),
                    "completions_per_second": round(rate, 1),
                    "p50_ms_per_group": round(1000 * percentile(latencies, 0.5), 3),
                    "p99_ms_per_group": round(1000 * percentile(latencies, 0.99), 3),
                    "x_trl": round(rate / baseline_rate, 2) if baseline_rate else None,
                    "mean_score": round(mean, 4),
                }
            )
            print(
                f"{batch:8} {label:20} {len(scores):7d} {total:7.2f} {rate:9.0f} "
                f"{1000 * percentile(latencies, 0.5):10.2f} {1000 * percentile(latencies, 0.99):10.2f} "
                f"{ratio} {mean:5.2f} {agree}"
            )

    boxed = [f"The answer is $\\boxed{{{row['answer']}}}$." for row in math_rows]
    solutions = [row["solution"] for row in math_rows]
    reset_our_caches()
    ours = rewards.get_reward("math_accuracy")(completions=boxed, solution=solutions)
    line = f"MATH-500 \\boxed{{answer}} vs solution, full marks: math_accuracy {sum(s == 1.0 for s in ours)}/{len(boxed)}"
    if trl_reward is not None:
        theirs = trl_reward(
            completions=[[{"role": "assistant", "content": c}] for c in boxed], solution=solutions
        )
        line += f", trl.accuracy_reward {sum(s == 1.0 for s in theirs)}/{len(boxed)}"
    print(line)
    rewards.shutdown_workers()
    boxed_full_marks = {"math_accuracy": sum(s == 1.0 for s in ours), "problems": len(boxed)}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {"group_size": args.group_size, "rows": table, "math500_boxed": boxed_full_marks}, indent=2
        )
        + "\n"
    )
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
