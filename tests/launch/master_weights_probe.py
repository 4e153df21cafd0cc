"""Run by tests/launch/test_master_weights.py in a process of its own: `train` as scripts/train.py runs it, with the
pre-flight checks skipped, so that a recipe they refuse (all weights in bfloat16, no float32 copy) trains anyway
and shows what the refusal spares a user.

python tests/launch/master_weights_probe.py RECIPE.yaml [key.path=value ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> None:
    from grpo_recipes.cli import leave_process_group
    from grpo_recipes.recipe import load_recipe
    from grpo_recipes.training import train as training

    recipe = load_recipe(sys.argv[1], sys.argv[2:])
    training.preflight = lambda recipe, config, **kw: None  # `train` calls it by this module-level name
    training.train(recipe, resume=False)
    leave_process_group()  # as the CLI does: a gloo group left to teardown can abort a finished process


if __name__ == "__main__":
    main()
