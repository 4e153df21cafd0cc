"""TRL's GRPOTrainer itself, given a recipe's guarded tools and environment: it finds the tools and adds no reward
of its own (the recipe's environment_reward decides). Builds a trainer on the tiny model."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_grpo_trainer_takes_the_guarded_tools_and_environment(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import rewards
    from grpo_recipes.agents import ToolStats, get_tool
    from grpo_recipes.agents.environments import GuessNumber, guarded_factory
    from grpo_recipes.agents.templates import apply_chat_template_choice

    tokenizer = apply_chat_template_choice(AutoTokenizer.from_pretrained(tiny_model), "qwen2_5")
    stats = ToolStats()
    prompt = [{"role": "system", "content": "Guess."}, {"role": "user", "content": "Guess my number."}]
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model),
        reward_funcs=[rewards.get_reward("environment_reward")],
        args=GRPOConfig(
            output_dir=str(tmp_path / "out"),
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=8,
            max_steps=1,
            max_tool_calling_iterations=1,
            report_to=[],
            use_cpu=True,
        ),
        train_dataset=datasets.Dataset.from_list([{"prompt": prompt, "secret": 5}] * 4),
        processing_class=tokenizer,
        tools=[get_tool("calculator", stats=stats)],
        environment_factory=guarded_factory(GuessNumber, {}, stats=stats),
    )
    assert trainer.reward_func_names == ["environment_reward"]  # no GuessNumber column of TRL's own
    assert sorted(tool.__name__ for tool in trainer.tools) == ["calculator", "guess"]
    # The tool TRL calls is the guarded method: it answers with error text instead of raising, and is counted.
    (guess,) = [tool for tool in trainer.tools if tool.__name__ == "guess"]
    assert guess(number=5) == "Error: there is no game: the environment was not reset"
    assert stats.as_dict()["failures"] == 1
