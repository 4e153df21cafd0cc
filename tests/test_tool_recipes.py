"""The shipped tool recipes, offline: gsm8k-python (a Python interpreter in the sandbox) and guess-number (a
stateful environment). They load, dry-run, and their tools and environment work as training will call them."""

from __future__ import annotations

import pytest
from support import REPO

from grpo_recipes.agents.templates import tool_templates
from grpo_recipes.data import load_splits
from grpo_recipes.launch.smoke import offline_data
from grpo_recipes.recipe import load_recipe
from grpo_recipes.toolset import Toolset
from grpo_recipes.training.train import check
from rewards.environment import EnvironmentReward

GSM8K_PYTHON = REPO / "recipes" / "gsm8k-python.yaml"
GUESS_NUMBER = REPO / "recipes" / "guess-number.yaml"


@pytest.fixture
def offline(monkeypatch):
    """No Hub: loading a Hub model's tokenizer fails at once instead of retrying the network."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def local(path):
    """The recipe as its checks run here: a Hub dataset replaced by its smoke sample (same columns)."""
    recipe = load_recipe(path)
    return load_recipe(path, offline_data(recipe)[0])


@pytest.mark.parametrize(
    "path, tools_line",
    [
        (GSM8K_PYTHON, "tools: python; at most 3 rounds of calls"),
        (GUESS_NUMBER, "tools: environment guess_number; at most 7 rounds of calls"),
    ],
    ids=["gsm8k-python", "guess-number"],
)
def test_the_tool_recipes_load_and_dry_run_offline(path, tools_line, offline):
    recipe = local(path)
    assert recipe.uses_tools and recipe.model.chat_template in tool_templates()
    lines: list[str] = []
    check(recipe, load_data=True, log=lines.append)
    assert tools_line in lines and lines[-1].endswith(": OK"), lines
    # GPU recipes: 8 processes of vLLM colocate, rounds of calls bounded.
    assert recipe.trainer["use_vllm"] and recipe.trainer["vllm_mode"] == "colocate"
    assert recipe.trainer["max_tool_calling_iterations"] >= 1


def test_gsm8k_python_names_the_hub_data_and_reads_answers_like_gsm8k():
    recipe = load_recipe(GSM8K_PYTHON)
    assert (recipe.dataset.path, recipe.dataset.config) == ("openai/gsm8k", "main")
    assert recipe.model.name_or_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert recipe.evaluation_reward.name == "gsm8k_accuracy" and "<answer>" in recipe.prompt.system
    (tool,) = recipe.tools
    assert tool.name == "python" and tool.timeout_seconds > tool.params["timeout_seconds"]


def test_gsm8k_python_tool_runs_a_program_in_the_sandbox():
    toolset = Toolset.for_recipe(local(GSM8K_PYTHON))
    python = toolset.by_name()["python"]
    assert python(code="print(2+3)") == "5\n"
    assert toolset.stats.as_dict() == {"calls": 1, "failures": 0, "timeouts": 0, "truncated": 0}


def test_guess_number_environment_plays_a_generated_game_to_reward_one():
    recipe = load_recipe(GUESS_NUMBER)
    assert recipe.dataset.generator.params == recipe.environment.params  # the games are the environment's
    assert recipe.evaluation_reward.name == "environment_reward"
    assert recipe.trainer["max_tool_calling_iterations"] >= recipe.environment.params["max_guesses"]
    toolset = Toolset.for_recipe(recipe)
    assert toolset.tools == [] and toolset.environment_factory is not None
    splits = load_splits(recipe)
    row = splits.train[0]
    assert row["solution"] == row["secret"]

    game = toolset.environment_factory()
    game.reset(**row)
    secret = row["secret"]
    wrong = secret + 1 if secret < recipe.environment.params["high"] else secret - 1
    assert game.guess(number=wrong) == ("lower" if wrong > secret else "higher")
    assert EnvironmentReward()([""], environments=[game]) == [0.0]  # not found yet
    assert game.guess(number=secret) == f"correct: the number is {secret}"
    assert EnvironmentReward()([""], environments=[game]) == [1.0]
    assert not hasattr(game, "get_reward")  # TRL adds no reward of its own: the recipe's rewards decide

    fresh = toolset.environment_factory()  # a new game for every rollout
    fresh.reset(**splits.eval[0])
    assert EnvironmentReward()([""], environments=[fresh]) == [0.0]
    assert toolset.stats.as_dict()["calls"] == 2
