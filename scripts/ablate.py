"""Sweep one setting of a recipe at an equal wall-clock budget: one run per value and seed, the same held-out
problems, a table of accuracy and paired differences against the first value (`grpo_recipes.evaluation.ablation`).

python scripts/ablate.py --config default --key trainer.loss_type --values dapo,grpo,dr_grpo [--seeds 2]
    [--budget 4] [key.path=value ...]
python scripts/ablate.py --sweep sweeps/loss-type.yaml [--seeds 2] [--budget 4] [--report-only]
    [--launch "accelerate launch --config_file configs/ddp.yaml --num_processes 2"]

--budget lifts trainer.max_steps (the budget, not the recipe's steps, then ends every run; an override of
max_steps still wins); without it the sweep file's settings, or the recipe's, decide.

Finished runs are kept under <root>/runs/ and never redone: rerun the same command to resume a sweep.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo_recipes.evaluation.ablation import DEFAULT_ROOT, Sweep, SweepError, run_sweep
from grpo_recipes.recipe import RecipeError, resolve_recipe_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", help="a sweep file (sweeps/*.yaml)")
    parser.add_argument("--config", help="the recipe (default: the sweep file's, else recipes/default.yaml)")
    parser.add_argument("--key", help="the recipe key to sweep, e.g. trainer.loss_type")
    parser.add_argument("--values", help="comma-separated values; the first is the reference")
    parser.add_argument("--seeds", type=int, help="runs per value, trainer.seed 0..n-1 (default 1)")
    parser.add_argument(
        "--budget",
        type=float,
        help="minutes of training per run (default 4); given, it lifts trainer.max_steps so that it ends every run",
    )
    parser.add_argument(
        "--launch",
        default="",
        help="how each run starts, e.g. 'accelerate launch --config_file configs/ddp.yaml --num_processes 2' "
        "(default: the sweep file's launch, else one process)",
    )
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help=f"where runs and tables go ({DEFAULT_ROOT})"
    )
    parser.add_argument("--report-only", action="store_true", help="tables from finished runs; train nothing")
    parser.add_argument("overrides", nargs="*", help="recipe overrides for every run, key.path=value")
    args = parser.parse_args(argv)
    try:
        if args.sweep:
            sweep = Sweep.from_file(
                args.sweep,
                recipe=resolve_recipe_path(args.config) if args.config else None,
                seeds=args.seeds,
                budget_minutes=args.budget,
                overrides=args.overrides,
                launch=args.launch,
            )
        else:
            sweep = Sweep.from_values(
                resolve_recipe_path(args.config or "default"),
                args.key or "",
                args.values or "",
                seeds=args.seeds or 1,
                budget_minutes=args.budget or 4.0,
                overrides=args.overrides,
                launch=args.launch,
            )
        if args.budget is not None:
            sweep.lift_max_steps()
            print(f"--budget {args.budget:g}: trainer.max_steps lifted, so that the budget ends every run")
        run_sweep(sweep, args.root, report_only=args.report_only)
    except (SweepError, RecipeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
