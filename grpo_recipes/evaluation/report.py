"""Run reports: the training curves as PNGs, `report.md`, and the before/after accuracy table.

A report reads only the files a run folder holds (`log_history.json`, `summary.json`, `run_info.json`,
`resolved_recipe.yaml`, `eval_before.json`, `eval_after.json`), so it can be written for any run folder, again
and again: `write_report(run_dir)` (training calls it; so do `scripts/report.py RUN_DIR` and `make report`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPORT_PNG = "report.png"
REPORT_MD = "report.md"
REWARD_CURVE_PNG = "reward_curve.png"
HELD_OUT_CURVE_PNG = "held_out_curve.png"
BEFORE_SAMPLES, AFTER_SAMPLES = "eval_before_samples.jsonl", "eval_after_samples.jsonl"
#: The guarded tools' counts training logs for each step (`training.trainer`), with their names in report.md.
TOOL_COUNTS = (
    ("tools/failures", "failed calls"),
    ("tools/timeouts", "timed-out calls"),
    ("tools/truncated", "results cut at max_result_chars"),
)
RUN_FILES = (
    "log_history.json",
    "summary.json",
    "run_info.json",
    "resolved_recipe.yaml",
    "eval_base.json",
    "eval_before.json",
    "eval_after.json",
    "eval_teacher.json",
)

# The report page: panels in a grid of this many columns, each panel this many inches; pixels = inches x DPI.
PANEL_COLUMNS = 3
PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 5.0, 3.6
DPI = 100


class RunFolderError(Exception):
    """A run folder that cannot be reported on: missing, empty, or holding a file that cannot be read."""


def reward_series(log_history: list[dict[str, Any]], key: str = "reward") -> tuple[list[int], list[float]]:
    """(steps, values) of one logged metric, from `trainer.state.log_history`; non-finite values are left out.

    >>> reward_series([{"step": 1, "reward": 0.5}, {"step": 2, "reward": float("nan")}, {"step": 3}])
    ([1], [0.5])
    """
    points = [
        (int(entry["step"]), float(entry[key]))
        for entry in log_history
        if "step" in entry and isinstance(entry.get(key), (int, float)) and math.isfinite(entry[key])
    ]
    return [p[0] for p in points], [p[1] for p in points]


def smoothing_window(points: int) -> int:
    """Steps in the moving average of a curve of `points` points: a tenth of them, at least 3; 1 (none) below 5.

    >>> smoothing_window(4), smoothing_window(5), smoothing_window(70), smoothing_window(1000)
    (1, 3, 7, 100)
    """
    return 1 if points < 5 else max(3, points // 10)


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing moving average: point i is the mean of values i-window+1..i (fewer at the start).

    >>> moving_average([0.0, 1.0, 2.0, 3.0, 4.0], 3)
    [0.0, 0.5, 1.0, 2.0, 3.0]
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    averaged, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        averaged.append(total / min(i + 1, window))
    return averaged


@dataclass(frozen=True)
class Panel:
    """One plot of the report page: its title, its y-axis label, and the (log key, legend label) it draws."""

    title: str
    ylabel: str
    series: tuple[tuple[str, str], ...]
    smooth: bool = True
    """False for a schedule (the learning rate): it is not noisy, and a trailing average would only lag it."""


def _logged(log_history: list[dict[str, Any]]) -> set[str]:
    """Keys that have at least one finite value at a step."""
    return {
        key
        for entry in log_history
        if "step" in entry
        for key, value in entry.items()
        if isinstance(value, (int, float)) and math.isfinite(value)
    }


def select_panels(log_history: list[dict[str, Any]]) -> list[Panel]:
    """The panels of the report page whose metrics the run logged, in reading order; the others are left out.

    >>> history = [{"step": 1, "reward": 0.5, "rewards/numeric_accuracy/mean": 0.5, "learning_rate": 1e-5}]
    >>> [panel.title for panel in select_panels(history)]
    ['total reward', 'reward components', 'learning rate']
    """
    keys = _logged(log_history)
    components = sorted(k for k in keys if k.startswith("rewards/") and k.endswith("/mean"))
    clip = sorted(k for k in keys if k.startswith("clip_ratio/") and k.endswith("_mean"))
    candidates = [
        # A distillation run's loss: trained on, where its logged rewards are only measured.
        Panel("per-token divergence to the teacher", "loss", (("divergence", "divergence"),)),
        Panel("total reward", "mean reward (weighted sum)", (("reward", "reward"),)),
        Panel(
            "reward components",
            "mean reward (unweighted)",
            tuple((k, k.removeprefix("rewards/").removesuffix("/mean")) for k in components),
        ),
        Panel(
            "reward spread",
            "std / fraction of groups",
            (
                ("reward_std", "reward std"),
                ("zero_variance_groups", "zero-variance groups (trained)"),
                ("zero_variance_groups_generated", "zero-variance groups (generated)"),
            ),
        ),
        Panel("completion length", "tokens", (("completions/mean_length", "mean length"),)),
        Panel(
            "completions cut at max_completion_length",
            "fraction",
            (("completions/clipped_ratio", "clipped ratio"),),
        ),
        Panel("tool calls", "calls per completion", (("tools/call_frequency", "calls per completion"),)),
        Panel(
            "tool failures",
            "calls per generation batch",
            (
                ("tools/failures", "failed"),
                ("tools/timeouts", "timed out"),
                ("tools/truncated", "result cut"),
            ),
        ),
        Panel("KL to the reference model", "KL", (("kl", "kl"),)),
        Panel("entropy", "nats per token", (("entropy", "entropy"),)),
        Panel(
            "clipped probability ratios",
            "fraction of tokens",
            tuple((k, k.removeprefix("clip_ratio/")) for k in clip) + (("cispo_clip_ratio", "cispo"),),
        ),
        Panel("gradient norm", "grad norm", (("grad_norm", "grad norm"),)),
        Panel("learning rate", "learning rate", (("learning_rate", "learning rate"),), smooth=False),
        Panel(
            "dynamic sampling",
            "groups per step",
            (("groups_generated", "generated"), ("groups_kept", "kept"), ("extra_rounds", "extra rounds")),
        ),
        Panel(
            "time per step",
            "seconds",
            (("step_time", "step time"), ("time/generation_seconds", "generating (sync, tools included)")),
        ),
    ]
    panels = []
    for panel in candidates:
        series = tuple(s for s in panel.series if s[0] in keys)
        if series:
            panels.append(Panel(panel.title, panel.ylabel, series, panel.smooth))
    return panels


def report_figure_pixels(panels: int) -> tuple[int, int]:
    """(width, height) in pixels of a report page of `panels` panels.

    >>> report_figure_pixels(12), report_figure_pixels(4)
    ((1500, 1440), (1500, 720))
    """
    rows = max(1, math.ceil(panels / PANEL_COLUMNS))
    return round(PANEL_COLUMNS * PANEL_WIDTH_IN * DPI), round(rows * PANEL_HEIGHT_IN * DPI)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    return plt


def plot_report(log_history: list[dict[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """The report page: one panel per logged metric group against step, each with its moving average.

    Thin lines are the logged values, thick ones their trailing moving average (the window is in each
    title; the learning rate, a schedule, is drawn as is). Legends sit below their panel, so they never
    cover a curve. Returns None when nothing was logged.
    """
    panels = select_panels(log_history)
    if not panels:
        return None
    plt = _pyplot()
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator

    width, height = report_figure_pixels(len(panels))
    rows = math.ceil(len(panels) / PANEL_COLUMNS)
    fig, axes = plt.subplots(
        rows, PANEL_COLUMNS, figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained", squeeze=False
    )
    for ax, panel in zip(axes.flat, panels, strict=False):
        windows = []
        for index, (key, label) in enumerate(panel.series):
            steps, values = reward_series(log_history, key)
            color = f"C{index}"
            window = smoothing_window(len(values)) if panel.smooth else 1
            if window > 1:
                ax.plot(steps, values, color=color, linewidth=0.8, alpha=0.35)
                ax.plot(steps, moving_average(values, window), color=color, linewidth=2, label=label)
                windows.append(window)
            else:
                ax.plot(steps, values, color=color, marker="." if len(values) < 50 else None, label=label)
        smoothing = f" ({max(windows)}-step moving average)" if windows else ""
        ax.set_title(panel.title + smoothing, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        # Tick labels in full: an offset text ("1e-5+1.08e1") would sit on the panel's title.
        if panel.smooth:
            ax.ticklabel_format(axis="y", useOffset=False)
        else:  # the learning rate: small values, from 0 so that a constant one gets distinct tick labels
            ax.yaxis.set_major_formatter(FormatStrFormatter("%.1e"))
            top = max(max(reward_series(log_history, key)[1]) for key, _ in panel.series)
            ax.set_ylim(0, 1.1 * top if top > 0 else 1.0)
        if len(panel.series) > 1:
            ax.legend(
                loc="upper center",
                bbox_to_anchor=(0.5, -0.22),
                ncol=min(3, len(panel.series)),
                fontsize=8,
                frameon=False,
            )
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title or "GRPO training")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return Path(path)


def minutes_to_reach(curve: list[dict[str, Any]], accuracy: float) -> float | None:
    """The minutes of training at the first held-out point at or above `accuracy`; None if none reaches it.

    >>> minutes_to_reach([{"minutes": 0.0, "accuracy": 0.4}, {"minutes": 2.5, "accuracy": 0.8}], 0.75)
    2.5
    """
    return next((p["minutes"] for p in curve if p["accuracy"] >= accuracy - 1e-9), None)


def plot_held_out_curves(
    curves: dict[str, list[dict[str, Any]]], path: str | Path, title: str = "", target: float | None = None
) -> Path | None:
    """Held-out accuracy against minutes of training, one line a run (`curves`: its name to its
    summary.json `held_out_curve`), with a dashed line at `target` when given. None when no curve has a
    point at all."""
    drawn = {name: curve for name, curve in curves.items() if curve}
    if not drawn:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(
        figsize=(PANEL_WIDTH_IN * 1.4, PANEL_HEIGHT_IN * 1.3), dpi=DPI, layout="constrained"
    )
    for index, (name, curve) in enumerate(drawn.items()):
        ax.plot(
            [p["minutes"] for p in curve],
            [100 * p["accuracy"] for p in curve],
            marker="o",
            color=f"C{index}",
            label=name,
        )
    if target is not None:
        ax.axhline(100 * target, color="grey", linestyle="--", linewidth=1, label=f"{100 * target:.1f} %")
    ax.set_xlabel("minutes of training (evaluations not counted)")
    ax.set_ylabel("held-out accuracy, greedy (%)")
    ax.set_title(title or "held-out accuracy during training", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return Path(path)


def _evaluated_during_training(run: RunFolder) -> list[dict[str, Any]]:
    """The run's held-out curve when it has points between its two ends (`evaluation.every_steps`), else []:
    before and after alone are in the held-out table already."""
    curve = (run.summary or {}).get("held_out_curve") or []
    return curve if len(curve) > 2 else []


def _curve_lines(run: RunFolder) -> list[str]:
    """report.md's table of held-out accuracy during training (`evaluation.every_steps`), when it has one."""
    curve = _evaluated_during_training(run)
    if not curve:
        return []
    rows = [
        [str(p["step"]), f"{p['minutes']:.1f}", f"{100 * p['accuracy']:.1f} % ({p['correct']}/{p['total']})"]
        for p in curve
    ]
    return [
        "## Held-out accuracy against minutes of training",
        "",
        "Greedy, on the same held-out problems at each point; the minutes count training only.",
        "",
        *markdown_table(["step", "minutes", "accuracy"], rows),
        "",
    ]


def plot_reward_curve(log_history: list[dict[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """Mean reward per logged step (and the fraction of zero-variance groups), saved as a PNG."""
    steps, values = reward_series(log_history)
    if not steps:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, values, marker=".", label="mean reward")
    window = smoothing_window(len(values))
    if window > 1:
        ax.plot(steps, moving_average(values, window), label=f"mean reward ({window}-step moving average)")
    zsteps, zvalues = reward_series(log_history, "zero_variance_groups")
    if zsteps:
        ax.plot(zsteps, zvalues, linestyle=":", label="zero-variance groups (fraction)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title or "GRPO training reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, fontsize=8, frameon=False)
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


def format_change(difference: float, low: float, high: float) -> str:
    """A paired change in points with its 95 % interval, from fractions: the one spelling of a change.

    >>> format_change(0.24, 0.174, 0.306)
    '+24.0 points [+17.4, +30.6]'
    """
    return f"{100 * difference:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]"


def describe_paired_change(
    before: float,
    after: float,
    comparison: dict[str, Any] | None,
    after_name: str,
    before_name: str = "before",
) -> str:
    """The before/after change, with its paired interval and who alone solves what when `comparison`
    (`metrics.compare`'s figures for the greedy verdicts) is given.

    >>> describe_paired_change(0.47, 0.71, {"low": 0.174, "high": 0.306, "solved_by_model_only": 52,
    ...                        "solved_by_base_only": 4}, "after training")
    '+24.0 points [+17.4, +30.6] (paired 95 % interval); solved only after training: 52, only before: 4'
    >>> describe_paired_change(0.47, 0.71, None, "after")
    '+24.0 points'
    """
    if not comparison:
        return f"{100 * (after - before):+.1f} points"
    return (
        f"{format_change(after - before, comparison['low'], comparison['high'])} (paired 95 % interval); "
        f"solved only {after_name}: {comparison['solved_by_model_only']}, "
        f"only {before_name}: {comparison['solved_by_base_only']}"
    )


#: The held-out evaluations of a run, in order: (file stem and summary key, name with a warm-up, without).
STAGES = (
    ("base", "base model", None),
    ("before", "after the warm-up", "base model"),
    ("after", "after GRPO", "after GRPO"),
)
#: The paired changes between them: (summary key, what changed, the evaluation it starts from, it ends at).
CHANGES = (
    ("warmup_comparison", "warm-up", "base", "before"),
    ("comparison", "GRPO", "before", "after"),
    ("overall_comparison", "in all", "base", "after"),
    ("teacher_comparison", "student against the teacher", "teacher", "after"),
)


def method_name(summary: dict[str, Any]) -> str:
    """What trained the model after the warm-up: "GRPO", or "distillation" for a run with a teacher."""
    return "distillation" if summary.get("trainer") == "distillation" else "GRPO"


def stage_rows(summary: dict[str, Any]) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(key, name, result) of each held-out evaluation a run makes: the base model, the model after the warm-up
    (in a run with one) and after GRPO. A run without a warm-up starts GRPO from the base model itself.

    >>> result = {"accuracy": 0.5, "ci_low": 0.4, "ci_high": 0.6, "correct": 50, "total": 100}
    >>> [name for _, name, _ in stage_rows({"base": None, "before": result, "after": result})]
    ['base model', 'after GRPO']
    >>> [name for _, name, _ in stage_rows({"base": result, "before": result, "after": None})]
    ['base model', 'after the warm-up', 'after GRPO']
    """
    warmed_up = summary.get("base") is not None
    rows = []
    for key, with_warmup, without in STAGES:
        name = with_warmup if warmed_up else without
        if name is not None:
            rows.append((key, name.replace("GRPO", method_name(summary)), summary.get(key)))
    if summary.get("teacher") is not None:
        rows.append(("teacher", "teacher", summary["teacher"]))
    return rows


def change_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(what changed, the paired change) between consecutive evaluations, and over the run with a warm-up.

    >>> def r(correct): return {"accuracy": correct / 100, "correct": correct, "total": 100}
    >>> paired = {"low": 0.05, "high": 0.15, "solved_by_model_only": 12, "solved_by_base_only": 2}
    >>> change_rows({"base": None, "before": r(40), "after": r(50), "comparison": paired})
    [('GRPO', '+10.0 points [+5.0, +15.0] (paired 95 % interval); solved only after: 12, only before: 2')]
    """
    rows = []
    for key, name, first, then in CHANGES:
        start, end = summary.get(first), summary.get(then)
        if start is not None and end is not None:
            names = (
                ("by the student", "by the teacher") if key == "teacher_comparison" else ("after", "before")
            )
            change = describe_paired_change(start["accuracy"], end["accuracy"], summary.get(key), *names)
            rows.append((name.replace("GRPO", method_name(summary)), change))
    return rows


def zero_gradient_line(sampling: dict[str, Any]) -> str:
    """How many GRPO steps had no gradient at all (every group's rewards equal), and dynamic sampling's counts.

    >>> zero_gradient_line({"steps": 60, "zero_gradient_steps": 9})
    'GRPO steps with zero gradient: 9 of 60 (15 %)'
    """
    steps, zero = sampling["steps"], sampling["zero_gradient_steps"]
    line = f"GRPO steps with zero gradient: {zero} of {steps} ({100 * zero / max(1, steps):.0f} %)"
    if "groups_generated" in sampling:
        line += (
            f"; dynamic sampling kept {sampling['groups_kept']} of {sampling['groups_generated']} groups "
            f"generated ({sampling['extra_rounds']} extra rounds)"
        )
    return line


def stages_table(summary: dict[str, Any]) -> str:
    """The end of a run: held-out accuracy at each stage, each stage's paired change, zero-gradient steps.

    >>> def r(correct): return {"accuracy": correct / 200, "ci_low": 0, "ci_high": 1, "correct": correct, "total": 200}
    >>> print(stages_table({"base": r(94), "before": r(117), "after": r(170), "sampling": {"steps": 60,
    ...     "zero_gradient_steps": 6}}))
    held-out greedy accuracy on 200 problems (95 % interval)
      base model:         47.0 % [0.0, 100.0] (94/200)
      after the warm-up:  58.5 % [0.0, 100.0] (117/200)
      after GRPO:         85.0 % [0.0, 100.0] (170/200)
    changes on the same problems
      warm-up: +11.5 points
      GRPO:    +26.5 points
      in all:  +38.0 points
    GRPO steps with zero gradient: 6 of 60 (10 %)
    """
    stages = stage_rows(summary)
    total = next((result["total"] for _, _, result in stages if result), None)
    lines = [f"held-out greedy accuracy on {total} problems (95 % interval)"] if total else []
    if total:
        width = max(len(name) for _, name, _ in stages) + 2
        lines += [f"  {name + ':':<{width}} {format_accuracy(result)}" for _, name, result in stages]
        changes = change_rows(summary)
        if changes:
            lines.append("changes on the same problems")
            width = max(len(name) for name, _ in changes) + 2
            lines += [f"  {name + ':':<{width}}{change}" for name, change in changes]
    if summary.get("teacher_gain_recovered") is not None:
        lines.append(
            f"share of the teacher's gain recovered: {100 * summary['teacher_gain_recovered']:.0f} %"
        )
    if summary.get("sampling") and method_name(summary) == "GRPO":  # every distilled token has a gradient
        lines.append(zero_gradient_line(summary["sampling"]))
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


def format_duration(seconds: float) -> str:
    """A duration as people read it.

    >>> format_duration(42.4), format_duration(677), format_duration(3 * 3600 + 125)
    ('42 s', '11 min 17 s', '3 h 02 min')
    """
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def first_and_last(values: list[float], fraction: float = 0.1) -> tuple[float, float, int]:
    """Mean of the first and of the last `fraction` of the values, and how many values each mean covers.

    >>> first_and_last([0.0] * 5 + [1.0] * 15)
    (0.0, 1.0, 2)
    """
    if not values:
        raise ValueError("no values")
    count = max(1, math.ceil(len(values) * fraction))
    return sum(values[:count]) / count, sum(values[-count:]) / count, count


# --- reading a run folder ------------------------------------------------------------------------------------


@dataclass
class RunFolder:
    """What a run folder holds, as read from its files (None where a file is absent)."""

    path: Path
    log_history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    run_info: dict[str, Any] | None = None
    recipe: dict[str, Any] | None = None
    recipe_header: dict[str, str] = field(default_factory=dict)
    base: dict[str, Any] | None = None
    """The base model's evaluation in a run with a warm-up (eval_base.json); `before` is then the warmed-up model's."""
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    teacher: dict[str, Any] | None = None
    """A distillation run's teacher on the same problems (eval_teacher.json)."""
    before_samples: list[dict[str, Any]] | None = None
    after_samples: list[dict[str, Any]] | None = None
    """The before/after evaluations' samples (eval_before_samples.jsonl, eval_after_samples.jsonl)."""

    @property
    def last_step(self) -> int | None:
        steps = [int(entry["step"]) for entry in self.log_history if "step" in entry]
        return max(steps) if steps else None


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunFolderError(f"{path}: not valid JSON ({err})") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]] | None:
    if not path.is_file():
        return None
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunFolderError(f"{path}: not valid JSON lines ({err})") from None


def read_run(run_dir: str | Path) -> RunFolder:
    """Read the files of a run folder; a missing folder, or one holding none of the run files, is an error."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunFolderError(
            f"{path}: no such run folder (a training run's trainer.output_dir, e.g. outputs/default)"
        )
    if not any((path / name).is_file() for name in RUN_FILES):
        raise RunFolderError(f"{path}: holds none of the files a run writes ({', '.join(RUN_FILES)})")
    run = RunFolder(path)
    history = _read_json(path / "log_history.json")
    if history is not None and not (isinstance(history, list) and all(isinstance(e, dict) for e in history)):
        raise RunFolderError(f"{path / 'log_history.json'}: expected a list of logged steps")
    run.log_history = history or []
    run.summary = _read_json(path / "summary.json")
    if run.summary is not None and run.log_history and run.summary.get("global_step") != run.last_step:
        run.summary = None  # from an earlier run in the same folder (this one was resumed, then stopped)
    run.run_info = _read_json(path / "run_info.json")
    run.before = _read_json(path / "eval_before.json")
    after_file = path / "eval_after.json"
    run.after = _read_json(after_file)
    history_file = path / "log_history.json"
    if (
        run.after is not None
        and run.summary is None
        and history_file.is_file()
        and after_file.stat().st_mtime < history_file.stat().st_mtime
    ):
        run.after = None  # an earlier run's: this one has not evaluated its trained model (yet)
    run.base = _read_json(path / "eval_base.json")
    run.teacher = _read_json(path / "eval_teacher.json")
    if run.summary is not None:  # a finished run says which evaluations it made (none with evaluation off)
        run.base = run.base if run.summary.get("base") is not None else None
        run.teacher = run.teacher if run.summary.get("teacher") is not None else None
        run.before = run.before if run.summary.get("before") is not None else None
        run.after = run.after if run.summary.get("after") is not None else None
    # The samples of an evaluation shown (an earlier run's are left out with its result).
    if run.before is not None:
        run.before_samples = _read_jsonl(path / BEFORE_SAMPLES)
    if run.after is not None:
        run.after_samples = _read_jsonl(path / AFTER_SAMPLES)
    recipe_file = path / "resolved_recipe.yaml"
    if recipe_file.is_file():
        text = recipe_file.read_text()
        try:
            run.recipe = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise RunFolderError(f"{recipe_file}: not valid YAML ({str(err).splitlines()[0]})") from None
        for line in text.splitlines():  # "# trl: 1.16.0" lines, above the recipe itself
            if not line.startswith("#"):
                break
            key, sep, value = line[1:].strip().partition(": ")
            if sep:
                run.recipe_header[key] = value
    return run


# --- report.md -----------------------------------------------------------------------------------------------


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table.

    >>> markdown_table(["metric", "value"], [["pass@1", "50.0 %"]])
    ['| metric | value |', '| --- | --- |', '| pass@1 | 50.0 % |']
    """
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _number(value: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{value:{sign}.3g}" if abs(value) < 1e-2 and value != 0 else f"{value:{sign}.3f}"


def _recipe_lines(run: RunFolder) -> list[str]:
    source = (run.run_info or {}).get("recipe") or run.recipe_header.get("Resolved from")
    lines = []
    if source:
        lines.append(f"- recipe: `{source}`")
    if (run.path / "resolved_recipe.yaml").is_file():
        lines.append(
            "- resolved recipe (after overrides, a valid recipe itself): [resolved_recipe.yaml](resolved_recipe.yaml)"
        )
    recipe = run.recipe if isinstance(run.recipe, dict) else {}
    model = (recipe.get("model") or {}).get("name_or_path")
    if model:
        lora = (recipe.get("model") or {}).get("lora")
        lines.append(f"- model: `{model}`" + (f" with a LoRA adapter (r={lora.get('r')})" if lora else ""))
    dataset = recipe.get("dataset") or {}
    data = dataset.get("path") or (dataset.get("generator") or {}).get("name")
    if data:
        lines.append(f"- dataset: `{data}`" + (" (generated)" if not dataset.get("path") else ""))
    rewards = recipe.get("rewards") or []
    if rewards:
        lines.append(
            "- rewards: " + ", ".join(f"`{r.get('name')}` (weight {r.get('weight', 1.0):g})" for r in rewards)
        )
    trainer = recipe.get("trainer") or {}
    settings = [
        f"{key}={trainer[key]}"
        for key in (
            "learning_rate",
            "num_generations",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "max_completion_length",
            "beta",
            "max_steps",
        )
        if trainer.get(key) is not None
    ]
    if settings:
        lines.append(f"- trainer: {', '.join(settings)}")
    return lines


def _run_lines(run: RunFolder) -> list[str]:
    info, summary = run.run_info or {}, run.summary
    lines = []
    if info.get("command"):
        lines.append(f"- command: `{' '.join(str(part) for part in info['command'])}`")
    if info.get("started"):
        lines.append(f"- started: {info['started']}")
    where = [
        f"{info['world_size']} process(es)" if info.get("world_size") else "",
        f"device {info['device']}" if info.get("device") else "",
        f"{info['distributed_type']}" if info.get("distributed_type") not in (None, "NO") else "",
        f"ZeRO-{info['zero_stage']}" if info.get("zero_stage") is not None else "",
        f"generation: {info['generation']}" if info.get("generation") else "",
    ]
    if any(where):
        lines.append(f"- ran on: {', '.join(w for w in where if w)}")
    if info.get("resumed_from"):
        lines.append(f"- resumed from: `{info['resumed_from']}`")
    max_steps = (
        ((run.recipe or {}).get("trainer") or {}).get("max_steps") if isinstance(run.recipe, dict) else None
    )
    steps = summary["global_step"] if summary else run.last_step
    if steps is not None:
        of = f" of max_steps={max_steps}" if isinstance(max_steps, int) and max_steps > 0 else ""
        finished = (
            "" if summary else " (no summary.json for these steps: the run stopped early or is still going)"
        )
        lines.append(f"- steps: {steps}{of}{finished}")
    runtime = next((e["train_runtime"] for e in reversed(run.log_history) if "train_runtime" in e), None)
    if summary and summary.get("train_seconds") is not None:
        seconds = float(summary["train_seconds"])
        per_step = f", {seconds / summary['global_step']:.1f} s a step" if summary.get("global_step") else ""
        lines.append(f"- wall time of training: {format_duration(seconds)}{per_step}")
    elif runtime is not None:
        lines.append(f"- wall time of training: {format_duration(float(runtime))}")
    else:
        _, step_times = reward_series(run.log_history, "step_time")
        if step_times:
            lines.append(
                f"- time in the {len(step_times)} logged steps: {format_duration(sum(step_times))} "
                "(the sum of `step_time`; the trainer had not written its total)"
            )
    if (
        run.path / "runs"
    ).is_dir():  # where transformers' TensorBoard callback writes (report_to: tensorboard)
        lines.append("- TensorBoard logs: [runs/](runs/) (`tensorboard --logdir " + f"{run.path}/runs`)")
    sampling = (summary or {}).get("sampling")
    if sampling:
        lines.append(f"- steps with zero gradient: {sampling['zero_gradient_steps']} of {sampling['steps']}")
        if "groups_generated" in sampling:
            lines.append(
                f"- dynamic sampling: kept {sampling['groups_kept']} of {sampling['groups_generated']} groups "
                f"generated, {sampling['extra_rounds']} extra rounds"
            )
    return lines


def _first_last_rows(run: RunFolder) -> tuple[list[list[str]], int, int]:
    keys = ["reward"]
    keys += sorted(k for k in _logged(run.log_history) if k.startswith("rewards/") and k.endswith("/mean"))
    keys += ["zero_variance_groups", "completions/mean_length", "completions/clipped_ratio"]
    keys += ["tools/call_frequency", "kl", "entropy"]
    rows, covered, logged = [], 0, 0
    for key in keys:
        _, values = reward_series(run.log_history, key)
        if values:
            first, last, covered = first_and_last(values)
            logged = max(logged, len(values))
            rows.append([f"`{key}`", _number(first), _number(last), _number(last - first, signed=True)])
    return rows, covered, logged


def _versions(run: RunFolder) -> dict[str, str]:
    versions = (run.run_info or {}).get("versions") or {
        k: v for k, v in run.recipe_header.items() if k != "Resolved from"
    }
    return {k: v for k, v in versions.items() if v != "not installed"}


def _evaluation_tool_use(
    result: dict[str, Any] | None, samples: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """An evaluation's tool figures (`metrics.tool_use`): from its samples, else from its saved metrics."""
    from .metrics import tool_use

    if samples is not None:
        return tool_use(samples)
    metrics = (result or {}).get("metrics") or {}
    return metrics if "tool_calls" in metrics else {}


def _tool_lines(run: RunFolder) -> list[str]:
    """The "Tool use" section: the tools' logged figures during training, and the before/after tool-call rate;
    nothing for a run without tools."""
    lines = []
    logged = _logged(run.log_history)
    rows = []
    for key, name in (("tools/call_frequency", "tool calls per completion"), *TOOL_COUNTS):
        if key in logged:
            _, values = reward_series(run.log_history, key)
            rows.append(
                [
                    f"{name} (`{key}`)",
                    _number(sum(values) / len(values)),
                    _number(max(values)),
                    f"{sum(value > 0 for value in values)} of {len(values)}",
                ]
            )
    if rows:
        lines += [
            "Logged at each step (`log_history.json`): tool calls per completion (TRL's), and the guarded tools' "
            "failures, timeouts and cut results (per generation batch, summed over processes).",
            "",
        ]
        lines += markdown_table(["metric", "mean", "most", "steps above 0"], rows) + [""]

    figures = {
        when: _evaluation_tool_use(result, samples)
        for when, result, samples in (
            ("before", run.before, run.before_samples),
            ("after", run.after, run.after_samples),
        )
    }
    if any(figures.values()):
        source = " and ".join(
            name
            for name, samples in ((BEFORE_SAMPLES, run.before_samples), (AFTER_SAMPLES, run.after_samples))
            if samples is not None
        )
        lines += [
            "Held-out rollouts (greedy)" + (f", from {source}" if source else "") + ":",
            "",
        ]
        table = []
        for when, tools in figures.items():
            if not tools:
                table.append([when, "-", "-", "-"])
                continue
            calls, failures = tools["tool_calls"], tools["tool_failures"]
            table.append(
                [
                    when,
                    f"{100 * tools['tool_call_rate']:.1f} %",
                    f"{tools['mean_tool_calls']:.2f}",
                    f"{failures} of {calls}" + (f" ({100 * failures / calls:.1f} %)" if calls else ""),
                ]
            )
        lines += markdown_table(["", "tool-call rate", "tool calls per completion", "failed calls"], table)
        if figures["before"] and figures["after"]:
            lines += ["", f"Change in the tool-call rate: {_tool_rate_change(run, figures)}."]
        lines.append("")
    return ["## Tool use", "", *lines] if lines else []


def _tool_rate_change(run: RunFolder, figures: dict[str, dict[str, Any]]) -> str:
    """The before/after change of the tool-call rate, paired over the problems when both samples files exist."""
    from .metrics import compare

    before, after = figures["before"]["tool_call_rate"], figures["after"]["tool_call_rate"]
    if run.before_samples is not None and run.after_samples is not None:
        try:
            rows = compare(run.before_samples, run.after_samples, votes=False)["metrics"]
        except (KeyError, ValueError):  # not the same problems
            rows = []
        row = next((r for r in rows if r["metric"] == "tool-call rate"), None)
        if row is not None:
            return f"{format_change(row['difference'], row['low'], row['high'])} (paired 95 % interval)"
    return f"{100 * (after - before):+.1f} points"


def run_method(run: RunFolder) -> str:
    """What trained the run's model ("GRPO" or "distillation"), from its resolved recipe."""
    return method_name({"trainer": "distillation" if (run.recipe or {}).get("teacher") else "grpo"})


def render_report_md(run: RunFolder, pictures: list[str]) -> str:
    """The text of report.md; it links only files that exist in the run folder (`pictures` among them)."""
    lines = [f"# Run report: {run.path.name}", ""]
    lines += ["## Recipe", "", *(_recipe_lines(run) or ["- no resolved_recipe.yaml or run_info.json"]), ""]
    lines += ["## Run", "", *(_run_lines(run) or ["- no steps logged"]), ""]

    rows, covered, logged = _first_last_rows(run)
    if rows:
        lines += ["## Training metrics, first vs last steps", ""]
        lines += [
            f"Means over the first and the last {covered} of the {logged} logged steps (a tenth, at least one).",
            "",
        ]
        lines += markdown_table(["metric", f"first {covered}", f"last {covered}", "change"], rows) + [""]

    if run.base or run.before or run.after:
        lines += ["## Held-out accuracy (greedy, 95 % Wilson interval)", ""]
        stages = {"base": run.base, "before": run.before, "after": run.after, "teacher": run.teacher}
        stages["trainer"] = "distillation" if run_method(run) == "distillation" else "grpo"
        table = [
            [name, format_accuracy(result), f"[eval_{key}.json](eval_{key}.json)"]
            if result
            else [name, "not evaluated", "-"]
            for key, name, result in stage_rows(stages)
        ]
        lines += markdown_table(["", "accuracy", "details"], table)
        comparisons = {key: (run.summary or {}).get(key) for key, *_ in CHANGES}  # paired: the same problems
        changes = change_rows(stages | comparisons)
        if changes:
            lines += [
                "",
                *markdown_table(["paired change", "on the same problems"], [list(c) for c in changes]),
            ]
        lines.append("")

    lines += _curve_lines(run)
    lines += _tool_lines(run)

    if pictures:
        lines += ["## Curves", ""]
        for name in pictures:
            lines += [f"![{name}]({name})", ""]
            if name == REPORT_PNG:
                lines += [
                    "Thin lines: the values logged at each step; thick lines: their moving average. Panels "
                    "whose metric was not logged are left out."
                    + (
                        " Every logged value is in [log_history.json](log_history.json)."
                        if (run.path / "log_history.json").is_file()
                        else ""
                    ),
                    "",
                ]

    versions = _versions(run)
    if versions:
        lines += ["## Versions", ""]
        lines += markdown_table(
            ["package", "version"], [[name, version] for name, version in versions.items()]
        )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _plotting_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_report(run_dir: str | Path) -> list[Path]:
    """Write report.png, reward_curve.png and report.md into a run folder, from its files; returns the paths.

    Raises RunFolderError for a missing or empty folder, or a run file that cannot be read.
    """
    run = read_run(run_dir)
    written = []
    plots = [
        (REPORT_PNG, plot_report, f"{run.path.name}: {run_method(run)} training"),
        (REWARD_CURVE_PNG, plot_reward_curve, f"{run.path.name}: reward"),
    ]
    if not _plotting_available():
        plots = []  # a machine without matplotlib (the GPU check's wheels leave it out) still gets report.md
    for name, plot, title in plots:
        path = plot(run.log_history, run.path / name, title=title)
        if path is not None:
            written.append(path)
    curve = _evaluated_during_training(run)
    if plots and curve:
        written.append(plot_held_out_curves({run.path.name: curve}, run.path / HELD_OUT_CURVE_PNG))
    markdown = run.path / REPORT_MD
    markdown.write_text(render_report_md(run, [p.name for p in written]))
    return [*written, markdown]
