"""Evaluation metrics as pure functions: pass@k, maj@k, intervals, and the paired comparison of two models.

Every function here reads plain per-sample or per-problem values (the rows of `samples.jsonl`), so every
figure in `metrics.json` can be recomputed from the samples alone.

Example:
    >>> pass_at_k(n=4, c=1, k=2)  # 1 - C(3, 2) / C(4, 2)
    0.5
    >>> majority_correct(["7", "7", "8", None], [True, True, False, False])
    1.0
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any


def wilson_interval(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval for a proportion; sound at 0 % and 100 % where the normal one is not.

    >>> [round(x, 3) for x in wilson_interval(29, 100)]
    [0.21, 0.385]
    """
    if total == 0:
        return (0.0, 1.0)
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from `n` samples of which `c` are correct (Chen et al., 2021).

    The probability that at least one of `k` samples drawn without replacement from the `n` is correct:
    1 - C(n - c, k) / C(n, k).

    >>> pass_at_k(8, 0, 4), pass_at_k(8, 8, 1), pass_at_k(8, 2, 8)
    (0.0, 1.0, 1.0)
    >>> round(pass_at_k(8, 2, 2), 4)  # 1 - C(6, 2) / C(8, 2) = 1 - 15 / 28
    0.4643
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(votes: Sequence[Any], correct: Sequence[bool]) -> float:
    """Whether the majority answer among samples is correct: 1.0, 0.0, or the share of correct answers in a tie.

    `votes[i]` is sample i's answer (answers that are the same answer share one vote value; None: no answer,
    which does not vote) and `correct[i]` its verdict. Samples with the same vote have the same verdict, as
    they give the same answer. A tie between the most frequent answers counts as a fair random pick among
    them, so the result is their share of correct ones (0.5 for a right and a wrong answer tied). No answer
    at all: 0.0.

    >>> majority_correct(["a", "b", "b"], [True, False, False])
    0.0
    >>> majority_correct(["a", "b", None, None], [True, False, False, False])  # a tie; None does not vote
    0.5
    >>> majority_correct([None, None], [False, False])
    0.0
    """
    if len(votes) != len(correct):
        raise ValueError(f"{len(votes)} votes but {len(correct)} verdicts")
    counts = Counter(vote for vote in votes if vote is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    leaders = [vote for vote, count in counts.items() if count == top]
    verdict = {vote: bool(ok) for vote, ok in zip(votes, correct, strict=True) if vote is not None}
    return sum(verdict[vote] for vote in leaders) / len(leaders)


def maj_at_k(votes: Sequence[Any], correct: Sequence[bool], k: int) -> float:
    """maj@k of one problem: the majority vote of k samples, averaged over the n // k disjoint blocks of k.

    With n samples in order, block j is samples j*k .. j*k + k - 1 (the samples are independent draws, so
    each block is a fair draw of k; averaging the blocks lowers the variance). maj@n is the vote of all.

    >>> maj_at_k(["1", "2", "1", "1"], [True, False, True, True], 2)  # blocks: a tie (0.5), then "1" (1.0)
    0.75
    >>> maj_at_k(["1", "2", "1", "1"], [True, False, True, True], 4)
    1.0
    """
    n = len(votes)
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= k <= n, got k={k}, n={n}")
    blocks = [range(start, start + k) for start in range(0, n - k + 1, k)]
    return sum(majority_correct([votes[i] for i in b], [correct[i] for i in b]) for b in blocks) / len(blocks)


def k_values(n: int) -> list[int]:
    """The k reported for n samples per problem: the powers of two below n, and n itself.

    >>> k_values(1), k_values(8), k_values(6)
    ([1], [1, 2, 4, 8], [1, 2, 4, 6])
    """
    return sorted({2**i for i in range(n.bit_length()) if 2**i < n} | {n})


def paired_difference(new: Sequence[float], old: Sequence[float], z: float = 1.96) -> dict[str, float]:
    """Mean per-problem difference `new - old` with its 95 % paired interval (normal, on the differences).

    Both lists hold one value per problem, the same problems in the same order (a 0/1 verdict, a pass@k,
    a maj@k). Pairing removes the spread of problem difficulty that two independent intervals would count
    twice: the interval is mean(d) +/- z * sd(d) / sqrt(n), with d the per-problem differences.

    >>> paired_difference([1, 1, 0, 1], [1, 0, 0, 0])  # d = 0, 1, 0, 1: mean 0.5, sd 0.577, half 0.566
    {'difference': 0.5, 'low': -0.0658, 'high': 1.0658}
    """
    if len(new) != len(old) or not new:
        raise ValueError(
            f"a paired comparison needs the same problems on both sides, got {len(new)} and {len(old)}"
        )
    differences = [float(a) - float(b) for a, b in zip(new, old, strict=True)]
    n = len(differences)
    mean = sum(differences) / n
    variance = sum((d - mean) ** 2 for d in differences) / max(1, n - 1)
    half = z * math.sqrt(variance / n)
    return {"difference": round(mean, 4), "low": round(mean - half, 4), "high": round(mean + half, 4)}


def solved_alone(new: Sequence[bool], old: Sequence[bool]) -> tuple[int, int]:
    """(problems only `new` solves, problems only `old` solves): the discordant pairs behind a paired test.

    >>> solved_alone([True, True, False], [False, True, True])
    (1, 1)
    """
    return (
        sum(bool(a) and not b for a, b in zip(new, old, strict=True)),
        sum(bool(b) and not a for a, b in zip(new, old, strict=True)),
    )


# Per-problem values and summaries of samples (the rows of samples.jsonl).


def group_by_problem(samples: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The samples of each problem, problems in index order, samples in sample order."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for record in samples:
        groups.setdefault(record["problem"], []).append(record)
    return [sorted(groups[p], key=lambda r: r["sample"]) for p in sorted(groups)]


def per_problem(samples: Sequence[dict[str, Any]], votes: bool = True) -> dict[str, list[float]]:
    """Each metric's value on each problem (index order): what `summarize` averages and comparisons pair.

    >>> rows = [{"problem": 0, "sample": s, "correct": c, "vote": v} for s, (c, v) in enumerate([(1, "4"), (0, "5")])]
    >>> per_problem(rows)
    {'pass@1': [0.5], 'pass@2': [1.0], 'maj@1': [0.5], 'maj@2': [0.5]}
    """
    groups = group_by_problem(samples)
    n = len(groups[0]) if groups else 0
    if any(len(group) != n for group in groups):
        raise ValueError("every problem needs the same number of samples")
    values: dict[str, list[float]] = {}
    for k in k_values(n) if n else []:
        values[f"pass@{k}"] = [pass_at_k(n, sum(r["correct"] for r in g), k) for g in groups]
    if votes:
        for k in k_values(n) if n else []:
            values[f"maj@{k}"] = [
                maj_at_k([r["vote"] for r in g], [r["correct"] for r in g], k) for g in groups
            ]
    return values


def summarize(samples: Sequence[dict[str, Any]], votes: bool = True) -> dict[str, Any]:
    """metrics.json: problem counts, pass@k and maj@k (fractions in [0, 1]), lengths and answer shapes, and
    for tool rollouts (samples with `tool_calls`) the tool figures of `tool_use`.

    `votes`: whether the evaluation reward reads answers (else maj@k is left out). `pass@1_interval` is
    the 95 % Wilson interval with one sample per problem, else a normal interval over problems.
    """
    groups = group_by_problem(samples)
    values = per_problem(samples, votes)
    problems, n = len(groups), (len(groups[0]) if groups else 0)
    metrics: dict[str, Any] = {"problems": problems, "samples_per_problem": n}
    metrics.update({name: mean(v) for name, v in values.items()})
    if n == 1:
        metrics["pass@1_interval"] = list(wilson_interval(sum(r["correct"] for r in samples), problems))
    elif problems:
        metrics["pass@1_interval"] = list(normal_interval(values["pass@1"]))
    metrics["correct_samples"] = sum(r["correct"] for r in samples)
    metrics["mean_completion_tokens"] = mean([r["tokens"] for r in samples])
    metrics["truncated"] = mean([float(r["truncated"]) for r in samples])
    metrics["well_formed"] = mean([float(r["answer"] is not None) for r in samples])
    metrics.update(tool_use(samples))
    return metrics


def uses_tools(samples: Sequence[dict[str, Any]]) -> bool:
    """Whether the samples are tool rollouts (their records carry `tool_calls`)."""
    return any("tool_calls" in record for record in samples)


def tool_use_per_problem(samples: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Tool use on each problem (index order): the mean calls of its samples and the share of its samples that
    made at least one call. Empty for samples without tool calls (not a tool recipe).

    >>> rows = [{"problem": p, "sample": 0, "tool_calls": c} for p, c in enumerate([2, 0, 1])]
    >>> tool_use_per_problem(rows)
    {'mean_tool_calls': [2.0, 0.0, 1.0], 'tool_call_rate': [1.0, 0.0, 1.0]}
    """
    if not uses_tools(samples):
        return {}
    groups = group_by_problem(samples)
    return {
        "mean_tool_calls": [mean([float(r.get("tool_calls", 0)) for r in g]) for g in groups],
        "tool_call_rate": [mean([float(r.get("tool_calls", 0) > 0) for r in g]) for g in groups],
    }


def tool_use(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json's tool figures; empty for samples without tool calls (not a tool recipe).

    `mean_tool_calls`: calls per sample (per problem in a greedy evaluation, the one tool recipes run);
    `tool_call_rate`: the share of samples with at least one call; `tool_failure_rate`: the share of calls
    whose result was an error (None without calls); `tool_calls` and `tool_failures`: the counts.

    >>> tool_use([{"problem": p, "sample": 0, "tool_calls": c, "tool_failures": f}
    ...           for p, (c, f) in enumerate([(2, 1), (0, 0), (1, 0), (1, 0)])])
    {'tool_calls': 4, 'tool_failures': 1, 'mean_tool_calls': 1.0, 'tool_call_rate': 0.75, 'tool_failure_rate': 0.25}
    >>> tool_use([{"problem": 0, "sample": 0, "tool_calls": 0, "tool_failures": 0}])["tool_failure_rate"] is None
    True
    >>> tool_use([{"problem": 0, "sample": 0}])
    {}
    """
    values = tool_use_per_problem(samples)
    if not values:
        return {}
    calls = sum(int(r.get("tool_calls", 0)) for r in samples)
    failures = sum(int(r.get("tool_failures", 0)) for r in samples)
    return {
        "tool_calls": calls,
        "tool_failures": failures,
        "mean_tool_calls": mean(values["mean_tool_calls"]),
        "tool_call_rate": mean(values["tool_call_rate"]),
        "tool_failure_rate": failures / calls if calls else None,
    }


def mean(values: Sequence[float]) -> float:
    """The mean, 0.0 for no values."""
    return sum(values) / len(values) if values else 0.0


def normal_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """95 % normal interval of the mean of values in [0, 1], clipped to [0, 1]."""
    centre = mean(values)
    spread = math.sqrt(sum((v - centre) ** 2 for v in values) / max(1, len(values) - 1) / max(1, len(values)))
    return max(0.0, centre - z * spread), min(1.0, centre + z * spread)


def compare(base: list[dict[str, Any]], model: list[dict[str, Any]], votes: bool = True) -> dict[str, Any]:
    """Each metric for both, the paired difference (model - base) with its 95 % interval, and who solves what.

    A problem counts as solved when at least one of its samples is correct (with greedy decoding: when
    the answer is correct). When both sides are tool rollouts, a `tool-call rate` row follows the accuracies.
    """
    key = [(r["problem"], str(r["gold"])) for r in base if r["sample"] == 0]
    if sorted(key) != sorted((r["problem"], str(r["gold"])) for r in model if r["sample"] == 0):
        raise ValueError("the two evaluations are not on the same problems (indices and golds differ)")
    base_values, model_values = per_problem(base, votes), per_problem(model, votes)
    rows = []
    for name in base_values:
        if name in model_values:
            rows.append(
                {
                    "metric": name,
                    "base": mean(base_values[name]),
                    "model": mean(model_values[name]),
                    **paired_difference(model_values[name], base_values[name]),
                }
            )
    # Tool recipes: the tool-call rate of both sides, paired as the accuracies are.
    base_tools, model_tools = tool_use_per_problem(base), tool_use_per_problem(model)
    if base_tools and model_tools:
        rows.append(
            {
                "metric": "tool-call rate",
                "base": mean(base_tools["tool_call_rate"]),
                "model": mean(model_tools["tool_call_rate"]),
                **paired_difference(model_tools["tool_call_rate"], base_tools["tool_call_rate"]),
            }
        )
    solved = [[any(r["correct"] for r in g) for g in group_by_problem(s)] for s in (model, base)]
    only_model, only_base = solved_alone(solved[0], solved[1])
    return {
        "problems": len(solved[0]),
        "metrics": rows,
        "solved_by_model_only": only_model,
        "solved_by_base_only": only_base,
        "solved_by_both": sum(a and b for a, b in zip(*solved, strict=True)),
    }
