"""Greedy held-out accuracy of a model (by default the recipe's, or a trained one with --model).

python scripts/evaluate.py --config default --model outputs/default
"""

import json
import sys

from grpo_recipes.cli import recipe_parser, run_with_recipe


def main(argv: list[str] | None = None) -> int:
    parser = recipe_parser(__doc__.strip().splitlines()[0])
    parser.add_argument("--model", help="a model folder or Hub id to evaluate instead of the recipe's model")
    parser.add_argument("--output", help="write the result as JSON to this file")
    args = parser.parse_args(argv)
    if args.model:
        args.overrides.append(f"model.name_or_path={args.model}")

    def body(recipe):
        from grpo_recipes.data import load_splits
        from grpo_recipes.evaluate import greedy_accuracy
        from grpo_recipes.models import load_model, load_tokenizer
        from grpo_recipes.report import format_accuracy

        splits = load_splits(recipe)
        if splits.eval is None:
            print("error: the recipe has no held-out split (evaluation.enabled is false)", file=sys.stderr)
            raise SystemExit(2)
        tokenizer, model = load_tokenizer(recipe.model), load_model(recipe.model)
        result = greedy_accuracy(model, tokenizer, splits.eval, recipe).to_dict()
        print(f"{recipe.model.name_or_path}: held-out greedy accuracy {format_accuracy(result)}")
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(result, handle, indent=2)

    return run_with_recipe(args, body)


if __name__ == "__main__":
    sys.exit(main())
