"""Run summaries: the reward curve as a PNG and the before/after accuracy table."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def reward_series(log_history: list[dict[str, Any]], key: str = "reward") -> tuple[list[int], list[float]]:
    """(steps, values) of one logged metric, from `trainer.state.log_history`."""
    points = [(entry["step"], entry[key]) for entry in log_history if key in entry and "step" in entry]
    return [p[0] for p in points], [float(p[1]) for p in points]


def plot_reward_curve(log_history: list[dict[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """Mean reward per logged step (and the fraction of zero-variance groups), saved as a PNG."""
    steps, values = reward_series(log_history)
    if not steps:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, values, marker=".", label="mean reward")
    if len(values) >= 5:
        window = max(3, len(values) // 10)
        smooth = [
            sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))
        ]
        ax.plot(steps, smooth, label=f"mean reward ({window}-step moving average)")
    zsteps, zvalues = reward_series(log_history, "zero_variance_groups")
    if zsteps:
        ax.plot(zsteps, zvalues, linestyle=":", label="zero-variance groups (fraction)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title or "GRPO training reward")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def format_accuracy(result: dict[str, Any] | None) -> str:
    """`41.0 % [34.4, 47.9] (82/200)`: accuracy, its 95 % interval and the counts behind it."""
    if result is None:
        return "-"
    r = result
    return f"{100 * r['accuracy']:.1f} % [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}] ({r['correct']}/{r['total']})"


def before_after_table(
    before: dict[str, Any] | None, after: dict[str, Any] | None, comparison: dict[str, Any] | None = None
) -> str:
    """Held-out greedy accuracy before and after training, with 95 % Wilson intervals.

    `comparison` (`train._paired_before_after`): the change's paired 95 % interval and the problems each
    model alone solves.
    """
    lines = [
        "held-out greedy accuracy (95 % interval)",
        f"  before: {format_accuracy(before)}",
        f"  after:  {format_accuracy(after)}",
    ]
    if before and after:
        change = f"  change: {100 * (after['accuracy'] - before['accuracy']):+.1f} points"
        if comparison:
            change += (
                f" [{100 * comparison['low']:+.1f}, {100 * comparison['high']:+.1f}] (paired 95 % interval); "
                f"solved only after: {comparison['solved_by_model_only']}, "
                f"only before: {comparison['solved_by_base_only']}"
            )
        lines.append(change)
    return "\n".join(lines)


def sampling_summary(log_history: list[dict[str, Any]]) -> dict[str, Any]:
    """How many steps learned nothing, and (with dynamic sampling) how many groups were generated and kept.

    >>> sampling_summary([{"step": 1, "grad_norm": 0.0}, {"step": 2, "grad_norm": 0.5, "groups_generated": 6,
    ...                   "groups_kept": 2, "extra_rounds": 2}])
    {'steps': 2, 'zero_gradient_steps': 1, 'groups_generated': 6, 'groups_kept': 2, 'extra_rounds': 2}
    """
    steps = [entry for entry in log_history if "grad_norm" in entry]
    summary: dict[str, Any] = {
        "steps": len(steps),
        "zero_gradient_steps": sum(float(entry["grad_norm"]) == 0.0 for entry in steps),
    }
    for key in ("groups_generated", "groups_kept", "extra_rounds"):
        if any(key in entry for entry in steps):
            summary[key] = round(sum(float(entry.get(key, 0)) for entry in steps))
    return summary
