"""Prove a recipe runs distributed: 2 steps on this CPU, 2 processes, a tiny model of the recipe's architecture.

python scripts/smoke.py --config gsm8k --dist zero3 --gen vllm-colocate [key.path=value ...]
"""

import sys
from pathlib import Path

from grpo_recipes.cli import recipe_parser
from grpo_recipes.launch.smoke import DISTRIBUTIONS, GENERATIONS, LORA_CHOICES, run_smoke
from grpo_recipes.recipe import RecipeError


def main(argv: list[str] | None = None) -> int:
    parser = recipe_parser(__doc__.strip().splitlines()[0])
    parser.add_argument(
        "--dist", choices=sorted(DISTRIBUTIONS), default="ddp", help="accelerate config to launch"
    )
    parser.add_argument("--gen", choices=list(GENERATIONS), default="hf", help="generation back-end")
    parser.add_argument(
        "--lora", choices=LORA_CHOICES, default="recipe", help="train an adapter, or all weights"
    )
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--server-start",
        choices=("first", "together"),
        default="first",
        help="vllm-server: start training once the server answers, or at once (the trainers wait for it)",
    )
    parser.add_argument(
        "--outputs", type=Path, default=Path("outputs"), help="where smoke-<recipe>/ is written"
    )
    args = parser.parse_args(argv)
    try:
        run_smoke(
            args.config,
            args.dist,
            args.gen,
            args.overrides,
            lora=args.lora,
            processes=args.processes,
            outputs=args.outputs.resolve(),
            server_start=args.server_start,
        )
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        print(f"smoke FAILED: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
