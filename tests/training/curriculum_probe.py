"""Run by tests/training/test_curriculum.py (alone, or under `accelerate launch` for 2 processes): `train` on a
recipe with a curriculum, every reward computation of training recorded.

python tests/training/curriculum_probe.py RECIPE.yaml [key.path=value ...]

Each process writes <output_dir>/rank<r>.json: one record per reward computation (one per generation round):
the step, the levels its rows were drawn at (`curriculum_level`), its questions, and the controller's level
once it has judged them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> None:
    from accelerate import PartialState

    from grpo_recipes.cli import leave_process_group
    from grpo_recipes.recipe import load_recipe
    from grpo_recipes.training.train import train
    from grpo_recipes.training.trainer import RecipeGRPOTrainer

    recipe = load_recipe(sys.argv[1], sys.argv[2:])
    records = []
    calculate = RecipeGRPOTrainer._calculate_rewards

    def recorded(self, inputs, *args):
        rewards = calculate(self, inputs, *args)
        if self.model.training:
            records.append(
                {
                    "step": self.state.global_step + 1,
                    "levels": sorted({row["curriculum_level"] for row in inputs}),
                    "questions": [row["question"] for row in inputs],
                    "level_after": self.curriculum.controller.level,
                }
            )
        return rewards

    RecipeGRPOTrainer._calculate_rewards = recorded
    train(recipe)
    out = Path(recipe.trainer["output_dir"])
    (out / f"rank{PartialState().process_index}.json").write_text(json.dumps(records))
    leave_process_group()  # as the CLI does: a gloo group left to teardown can abort a finished process


if __name__ == "__main__":
    main()
