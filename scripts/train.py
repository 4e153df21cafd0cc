"""Train a model with GRPO from a recipe.

accelerate launch scripts/train.py --config recipes/gsm8k.yaml [key.path=value ...]
python scripts/train.py --config default --check      # validate only: no model loads
"""

import sys

from grpo_recipes.cli import recipe_parser, run_with_recipe


def main(argv: list[str] | None = None) -> int:
    parser = recipe_parser(__doc__.strip().splitlines()[0])
    parser.add_argument("--check", action="store_true", help="validate the recipe and its dataset, then stop")
    parser.add_argument("--no-resume", action="store_true", help="ignore checkpoints in the output directory")
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="MINUTES",
        help="stop training after this many minutes (then save, evaluate)",
    )
    args = parser.parse_args(argv)

    def body(recipe):
        from grpo_recipes.training import train

        if args.check:
            train.check(recipe)
        else:
            train.train(recipe, resume=not args.no_resume, time_limit_minutes=args.time_limit)

    return run_with_recipe(args, body)


if __name__ == "__main__":
    sys.exit(main())
