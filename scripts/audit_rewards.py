"""Audit a recipe's rewards on its data: gold solutions must get full marks, wrong answers nothing.

    python scripts/audit_rewards.py --config default        # the recipe's own data (file or generator)
    python scripts/audit_rewards.py --config gsm8k --data ../shared/data/gsm8k/test.jsonl
    make audit RECIPE=math DATA=../shared/data/math500/test.jsonl

Exit status: 0 when both thresholds are met, 1 when one is not, 2 for a bad recipe or data file.
"""

import sys

from grpo_recipes.cli import EXIT_BAD_INPUT, integer_at_least, number_in, recipe_parser, run_with_recipe

EXIT_BELOW_THRESHOLD = 1


def main(argv: list[str] | None = None) -> int:
    parser = recipe_parser(__doc__.strip().splitlines()[0])
    parser.add_argument(
        "--data",
        help="the rows to audit: a .jsonl, .json, .parquet or .csv file (default: the recipe's own data, "
        "dataset.path and dataset.eval_path, or its generator's rows)",
    )
    parser.add_argument(
        "--limit", type=integer_at_least(1), help="audit only the first N rows (of each data source)"
    )
    parser.add_argument(
        "--min-ideal",
        type=number_in(0),
        default=0.99,
        help="least fraction of ideal completions with full marks",
    )
    parser.add_argument(
        "--min-corrupted",
        type=number_in(0),
        default=0.99,
        help="least fraction of corrupted completions scoring 0",
    )
    parser.add_argument(
        "--show", type=integer_at_least(0), default=5, help="failing rows to list (default 5)"
    )
    args = parser.parse_args(argv)
    status = 0

    def body(recipe):
        nonlocal status
        from grpo_recipes.evaluation.audit import (
            AuditInputError,
            audit,
            check_auditable,
            format_report,
            load_rows,
            recipe_data,
        )

        try:
            check_auditable(recipe)
            if args.data:
                sources = [(args.data, load_rows(args.data, args.limit))]
            else:
                sources = recipe_data(recipe, args.limit)
                print(
                    f"no --data (make audit DATA=...): auditing the recipe's own data, {len(sources)} source(s)"
                )
        except AuditInputError as err:
            print(f"error: {err}", file=sys.stderr)
            status = EXIT_BAD_INPUT
            return

        def progress(done: int, total: int, seconds: float) -> None:
            print(f"audit: {done}/{total} rows, {seconds:.1f} s", file=sys.stderr, flush=True)

        for what, rows in sources:
            report = audit(recipe, rows, progress=progress, progress_every=max(100, len(rows) // 10))
            print(format_report(report, what, max_failures=args.show))
            failed = report.failed_thresholds(args.min_ideal, args.min_corrupted)
            for line in failed:
                print(f"FAILED: {line}")
            status = EXIT_BELOW_THRESHOLD if failed else status

    return run_with_recipe(args, body) or status


if __name__ == "__main__":
    sys.exit(main())
