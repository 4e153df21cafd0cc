"""Write a run folder's report again from its files: report.md, report.png and reward_curve.png.

python scripts/report.py outputs/default
"""

import argparse
import sys

from grpo_recipes.cli import EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="a training run's output folder, e.g. outputs/default"
    )
    args = parser.parse_args(argv)
    from grpo_recipes.evaluation.report import RunFolderError, write_report

    try:
        written = write_report(args.run_dir)
    except RunFolderError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {', '.join(str(path) for path in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
