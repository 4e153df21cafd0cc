"""Write a run folder's report again from its files: report.md, report.png and reward_curve.png.

python scripts/report.py outputs/default
python scripts/report.py --curves curves.png --target 0.8 --label distillation --label GRPO outputs/distill-cpu outputs/code-cpu

With `--curves`, the held-out accuracy of several runs against their minutes of training goes into one
picture (runs trained with `evaluation.every_steps` have points between their two ends), and a table gives
each run's final accuracy and the minutes it took to reach `--target`.
"""

import argparse
import sys
from pathlib import Path

from grpo_recipes.cli import EXIT_BAD_INPUT, number_in


def curves(run_dirs: list[str], picture: str, target: float | None, labels: list[str] | None = None) -> int:
    from grpo_recipes.evaluation.report import (
        RunFolderError,
        minutes_to_reach,
        plot_held_out_curves,
        read_run,
    )

    labels = labels or [Path(run_dir).name for run_dir in run_dirs]
    if len(labels) != len(run_dirs):
        print(f"error: --label names {len(labels)} runs, {len(run_dirs)} were given", file=sys.stderr)
        return EXIT_BAD_INPUT
    found = {}
    for run_dir, label in zip(run_dirs, labels, strict=True):
        try:
            summary = read_run(run_dir).summary or {}
        except RunFolderError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if not summary.get("held_out_curve"):
            print(
                f"error: {run_dir}: no held_out_curve in summary.json (a finished run with held-out evaluation)",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        found[label] = summary["held_out_curve"]
    plot_held_out_curves(found, picture, target=target)
    reach = f"minutes to reach {100 * target:.1f} %" if target is not None else None
    print(f"| run | points | final accuracy | minutes of training |{f' {reach} |' if reach else ''}")
    print(f"| --- | --- | --- | --- |{' --- |' if reach else ''}")
    for name, curve in found.items():
        end = curve[-1]
        row = f"| {name} | {len(curve)} | {100 * end['accuracy']:.1f} % | {end['minutes']:.1f} |"
        if reach:
            minutes = minutes_to_reach(curve, target)
            row += f" {'not reached' if minutes is None else f'{minutes:.1f}'} |"
        print(row)
    print(f"wrote {picture}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument(
        "run_dirs", metavar="RUN_DIR", nargs="+", help="a training run's output folder, e.g. outputs/default"
    )
    parser.add_argument("--curves", metavar="PNG", help="draw the runs' held-out curves into this picture")
    parser.add_argument(
        "--target", type=number_in(0, 1), help="with --curves: the accuracy (0-1) whose minutes to report"
    )
    parser.add_argument(
        "--label", action="append", help="with --curves: a run's name in the picture (once a run, in order)"
    )
    args = parser.parse_args(argv)
    if args.curves:
        return curves(args.run_dirs, args.curves, args.target, args.label)
    if args.target is not None or args.label:
        parser.error("--target and --label go with --curves")
    from grpo_recipes.evaluation.report import RunFolderError, write_report

    for run_dir in args.run_dirs:
        try:
            written = write_report(run_dir)
        except RunFolderError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"wrote {', '.join(str(path) for path in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
