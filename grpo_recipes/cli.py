"""Shared command-line plumbing for the scripts: recipe arguments, overrides and the exit status of errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .recipe import Recipe, RecipeError, load_recipe, resolve_recipe_path

EXIT_BAD_INPUT = 2

OVERRIDES_HELP = (
    "recipe overrides as key.path=value (the value is read as YAML), e.g. trainer.learning_rate=1e-6 "
    "model.lora.r=8 rewards.0.weight=0.5"
)


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse `type` for integers >= `minimum`: `--limit 0` is a usage error, not an empty run.

    >>> integer_at_least(1)("8")
    8
    """

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text}")
        return value

    return parse


def number_in(low: float, high: float = float("inf"), *, above_low: bool = False) -> Callable[[str], float]:
    """An argparse `type` for numbers in [low, high], or (low, high] with `above_low` (NaN refused).

    >>> number_in(0, 1)("0.99")
    0.99
    """

    def parse(text: str) -> float:
        value = float(text)
        if not (low < value if above_low else low <= value) or not value <= high:
            opening = "(" if above_low else "["
            bounds = (
                f"{'>' if above_low else '>='} {low:g}"
                if high == float("inf")
                else f"in {opening}{low:g}, {high:g}]"
            )
            raise argparse.ArgumentTypeError(f"expected a number {bounds}, got {text}")
        return value

    return parse


def recipe_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True, help="a recipe file, or a name from recipes/ (e.g. gsm8k)")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help=OVERRIDES_HELP)
    return parser


def run_with_recipe(args: argparse.Namespace, body: Callable[[Recipe], object]) -> int:
    """Load the recipe and run `body`; a recipe error is one line on stderr and exit status 2."""
    try:
        recipe = load_recipe(resolve_recipe_path(args.config), args.overrides)
        body(recipe)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    leave_process_group()
    return 0


def leave_process_group() -> None:
    """After a finished run, every process leaves the distributed process group together.

    A gloo group left to the interpreter's teardown can abort a process that has finished its work
    ("terminate called without an active exception", SIGABRT), which fails the whole launch. Only called
    on success: after an error the other processes may never reach the barrier. Torch is not imported here
    if the run did not import it.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
